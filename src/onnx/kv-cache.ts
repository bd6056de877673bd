/**
 * The KV-cache tensors of exported decoders, named once: inputs
 * `past_key_values.N.key` / `.value` (older exports: `past.N.key`), outputs
 * `present.N.key` / `.value`. GPT-BigCode fuses each layer's pair into one
 * tensor, `past_key_values.N.key_value` / `present.N.key_value` (the key's
 * channels, then the value's, on the last axis). A step's `present.*` output
 * feeds the next step's matching past input.
 */

const PAST = /^(?:past_key_values|past)\.(\d+)\.(key|value|key_value)$/;
const PRESENT = /^present\.(\d+)\.(key|value|key_value)$/;

/** The past input of block `layer` in optimum's naming. */
export function pastInputName(layer: number, kind: "key" | "value"): string {
  return `past_key_values.${layer}.${kind}`;
}

/** The present output of block `layer`. */
export function presentOutputName(layer: number, kind: "key" | "value"): string {
  return `present.${layer}.${kind}`;
}

/** True for a KV-cache input (`past_key_values.N.key`, `past.N.value`, `past_key_values.N.key_value`, …). */
export function isPastInput(name: string): boolean {
  return PAST.test(name);
}

/** True for a KV-cache output (`present.N.key`, …). */
export function isPresentOutput(name: string): boolean {
  return PRESENT.test(name);
}

/**
 * The past input a present output feeds on the next step, among `pastNames`
 * (the graph's past inputs); undefined when the graph has none for it.
 */
export function pastFor(present: string, pastNames: ReadonlySet<string>): string | undefined {
  const m = PRESENT.exec(present);
  if (!m) return undefined;
  for (const prefix of ["past_key_values", "past"]) {
    const name = `${prefix}.${m[1]}.${m[2]}`;
    if (pastNames.has(name)) return name;
  }
  return undefined;
}
