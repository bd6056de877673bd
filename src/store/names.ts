/** Store file names: `L018.npy` for layer 18, and nothing else. */

/** `L018.npy` for layer 18. */
export function layerFileName(layer: number): string {
  return `L${String(layer).padStart(3, "0")}.npy`;
}

/** The layer a plain store file name denotes, or undefined for any other name. */
export function layerOfFileName(name: string): number | undefined {
  const m = /^L(\d{3})\.npy$/.exec(name);
  return m ? Number(m[1]) : undefined;
}
