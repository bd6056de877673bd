/**
 * The projection of llama-reference.ts's float64 forward pass with int8 dynamic
 * quantization of activations, as onnxruntime's DynamicQuantizeLinear →
 * MatMulInteger graphs compute it: every projection's input tensor (all
 * positions of the sequence at once) quantized to uint8 with one scale and
 * zero point, multiplied by the int8 weight codes, and scaled back. Written
 * from the operator definitions, not from the graph.
 */
import { quantizeQ8 } from "../../src/synthetic/quantize.js";
import type { Projection } from "./llama-reference.js";

const roundEven = (x: number) => {
  const r = Math.round(x);
  return Math.abs(x - Math.trunc(x)) === 0.5 && r % 2 !== 0 ? r - 1 : r;
};

/** y_t = W x_t for every position t, with x quantized per tensor (DynamicQuantizeLinear) and W int8 per tensor. */
export const int8Projection: Projection = (w, xs, out) => {
  const inp = xs[0]!.length;
  const q = quantizeQ8(w, out, inp);
  let lo = 0;
  let hi = 0;
  for (const x of xs) for (const v of x) (lo = Math.min(lo, v)), (hi = Math.max(hi, v));
  const scale = Math.fround((Math.fround(hi) - Math.fround(lo)) / 255);
  const zero = Math.min(255, Math.max(0, roundEven(-Math.fround(lo) / scale)));
  const factor = Math.fround(scale * q.scale);
  return xs.map((x) => {
    const xq = Array.from(x, (v) => Math.min(255, Math.max(0, roundEven(Math.fround(v) / scale) + zero)) - zero);
    const y = new Float64Array(out);
    for (let o = 0; o < out; o++) {
      let acc = 0;
      for (let i = 0; i < inp; i++) acc += xq[i]! * q.q[i * out + o]!;
      y[o] = acc * factor;
    }
    return y;
  });
};
