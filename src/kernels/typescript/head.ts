/**
 * The TypeScript twin of the native LM head (native/head.cc): the same
 * prepared arrays bit for bit, and the argmax of every float64 logit (no
 * screen). Slow; the fallback where the native core is missing.
 */
import type { PreparedHead } from "../types.js";

export function prepareHeadTs(w: Float32Array, d: number, vocab: number, head: PreparedHead): void {
  const { hi, lo, norms } = head;
  const bits = new Uint32Array(w.buffer, w.byteOffset, w.length);
  for (let v = 0; v < vocab; v++) {
    let ss = 0;
    for (let i = 0; i < d; i++) {
      const u = bits[i * vocab + v]!;
      hi[v * d + i] = u >>> 16;
      lo[v * d + i] = u & 0xffff;
      const x = w[i * vocab + v]!;
      ss += x * x;
    }
    norms[v] = Math.sqrt(ss);
  }
}

export function headArgmaxTs(
  h: Float32Array,
  batch: number,
  d: number,
  head: PreparedHead,
  vocab: number,
  out: Int32Array,
): number {
  const { hi, lo } = head;
  // One vocabulary row at a time as float32, from its two halves.
  const row = new Float32Array(d);
  const rowBits = new Uint32Array(row.buffer);
  const best = new Float64Array(batch);
  const at = new Int32Array(batch).fill(-1);
  for (let v = 0; v < vocab; v++) {
    for (let i = 0; i < d; i++) rowBits[i] = ((hi[v * d + i]! << 16) | lo[v * d + i]!) >>> 0;
    for (let b = 0; b < batch; b++) {
      let s = 0;
      for (let i = 0; i < d; i++) s += h[b * d + i]! * row[i]!;
      // Strictly greater: a tie keeps the lower v; a NaN never compares greater.
      if (!Number.isNaN(s) && (at[b]! < 0 || s > best[b]!)) {
        best[b] = s;
        at[b] = v;
      }
    }
  }
  for (let b = 0; b < batch; b++) out[b] = at[b]! < 0 ? 0 : at[b]!;
  return batch * vocab;
}
