/**
 * The float64 forward pass of llama-reference.ts with int8 dynamic
 * quantization of activations, as onnxruntime's DynamicQuantizeLinear →
 * MatMulInteger graphs compute it: every projection's input tensor (all
 * positions of the sequence at once) quantized to uint8 with one scale and
 * zero point, multiplied by the int8 weight codes, and scaled back. Written
 * from the operator definitions, not from the graph.
 */
import type { LlamaConfig, LlamaWeights } from "../../src/models/llama.js";
import { quantizeQ8 } from "../../src/models/quantize.js";
import { rmsNorm, rope } from "./llama-reference.js";

const roundEven = (x: number) => {
  const r = Math.round(x);
  return Math.abs(x - Math.trunc(x)) === 0.5 && r % 2 !== 0 ? r - 1 : r;
};

/** y_t = W x_t for every position t, with x quantized per tensor (DynamicQuantizeLinear) and W int8 per tensor. */
function quantizedLinear(w: Float32Array, xs: Float64Array[], out: number): Float64Array[] {
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
}

/** Per block, the residual stream at the last position (the last block after the final norm), for an int8 dynamic-quantized graph. */
export function referenceHiddenInt8(c: LlamaConfig, w: LlamaWeights, ids: number[]): Float64Array[] {
  const d = c.hidden_size;
  const H = c.num_attention_heads;
  const KV = c.num_key_value_heads;
  const hd = c.head_dim;
  const T = ids.length;
  let xs: Float64Array[] = ids.map((id) => Float64Array.from(w.embed.subarray(id * d, (id + 1) * d)));
  const result: Float64Array[] = [];
  for (const lw of w.layers) {
    const hs = xs.map((x) => rmsNorm(x, lw.inputNorm, c.rms_norm_eps));
    const split = (all: Float64Array[], n: number, rotate: boolean) =>
      all.map((a, t) => Array.from({ length: n }, (_, k) => (rotate ? rope(a.subarray(k * hd, (k + 1) * hd), t, hd, c.rope_theta) : a.subarray(k * hd, (k + 1) * hd))));
    const q = split(quantizedLinear(lw.q, hs, H * hd), H, true);
    const k = split(quantizedLinear(lw.k, hs, KV * hd), KV, true);
    const v = split(quantizedLinear(lw.v, hs, KV * hd), KV, false);
    const ctxs = Array.from({ length: T }, (_, t) => {
      const ctx = new Float64Array(H * hd);
      for (let head = 0; head < H; head++) {
        const kvh = Math.floor(head / (H / KV));
        const scores = Array.from({ length: t + 1 }, (_, s) => {
          let dot = 0;
          for (let i = 0; i < hd; i++) dot += q[t]![head]![i]! * k[s]![kvh]![i]!;
          return dot / Math.sqrt(hd);
        });
        const m = Math.max(...scores);
        const e = scores.map((s) => Math.exp(s - m));
        const z = e.reduce((a, b) => a + b, 0);
        for (let s = 0; s <= t; s++) for (let i = 0; i < hd; i++) ctx[head * hd + i]! += (e[s]! / z) * v[s]![kvh]![i]!;
      }
      return ctx;
    });
    const o = quantizedLinear(lw.o, ctxs, d);
    const x1 = xs.map((x, t) => x.map((xi, i) => xi + o[t]![i]!));
    const h2 = x1.map((x) => rmsNorm(x, lw.postNorm, c.rms_norm_eps));
    const gate = quantizedLinear(lw.gate, h2, c.intermediate_size);
    const up = quantizedLinear(lw.up, h2, c.intermediate_size);
    const act = gate.map((g, t) => g.map((gi, i) => (gi / (1 + Math.exp(-gi))) * up[t]![i]!));
    const down = quantizedLinear(lw.down, act, d);
    xs = x1.map((x, t) => x.map((xi, i) => xi + down[t]![i]!));
    result.push(xs[T - 1]!);
  }
  result[result.length - 1] = rmsNorm(result[result.length - 1]!, w.norm, c.rms_norm_eps);
  return result;
}
