/**
 * The TypeScript twin of the native LM head (native/head.cc): the same
 * prepared arrays bit for bit, and the argmax of every float64 logit (no
 * screen). Slow; the fallback where the native core is missing.
 */
import type { PreparedHead } from "../types.js";

const f32Bits = new Float32Array(1);
const u32Bits = new Uint32Array(f32Bits.buffer);

/** float32 → bfloat16 bits, to nearest with ties to even; a NaN stays a quiet NaN. */
function bf16Bits(x: number): number {
  f32Bits[0] = x;
  const u = u32Bits[0]!;
  if ((u & 0x7fffffff) > 0x7f800000) return (u >>> 16) | 0x40;
  return ((u + 0x7fff + ((u >>> 16) & 1)) >>> 16) & 0xffff;
}

export function prepareHeadTs(w: Float32Array, d: number, vocab: number, head: PreparedHead): void {
  const { f32, bf16, norms } = head;
  for (let v = 0; v < vocab; v++) {
    let ss = 0;
    for (let i = 0; i < d; i++) {
      const x = w[i * vocab + v]!;
      f32[v * d + i] = x;
      bf16[v * d + i] = bf16Bits(x);
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
  const f32 = head.f32;
  for (let b = 0; b < batch; b++) {
    let best = 0;
    let at = -1;
    for (let v = 0; v < vocab; v++) {
      let s = 0;
      for (let i = 0; i < d; i++) s += h[b * d + i]! * f32[v * d + i]!;
      // Strictly greater: a tie keeps the lower v; a NaN never compares greater.
      if (!Number.isNaN(s) && (at < 0 || s > best)) {
        best = s;
        at = v;
      }
    }
    out[b] = at < 0 ? 0 : at;
  }
  return batch * vocab;
}
