/**
 * Float64 forward passes of the ALiBi families of src/synthetic/alibi.ts,
 * written from transformers' definitions, not from the ONNX graphs: BLOOM
 * (LayerNorm after the embedding; fused q/k/v whose rows are grouped per
 * head; score + slope × key index; tanh GELU) and MPT (bias-free LayerNorms;
 * q, k, v one after another; score + slope × (key index − last key index);
 * erf GELU). One unpadded sequence; returns per block the residual stream at
 * the last position (the last block's after the final norm) and the
 * last position's logits from the tied LM head.
 */
import type { BloomConfig, BloomWeights, MptConfig, MptWeights } from "../../src/synthetic/alibi.js";

export interface AlibiReference {
  hidden: Float64Array[];
  logits: Float64Array;
}

/**
 * BLOOM's per-head slopes (Press et al.'s geometric sequence, extended as
 * BLOOM does): for n the largest power of two ≤ H, (2^(−8/n))^k, k = 1 … n;
 * then the odd powers (2^(−4/n))^1, ^3, … for the H − n heads left.
 */
export function bloomSlopesReference(H: number): number[] {
  const n = 2 ** Math.floor(Math.log2(H));
  const slopes = Array.from({ length: n }, (_, k) => Math.pow(2, (-8 / n) * (k + 1)));
  for (let k = 0; k < H - n; k++) slopes.push(Math.pow(2, (-4 / n) * (2 * k + 1)));
  return slopes;
}

/**
 * MPT's per-head slopes: for n the smallest power of two ≥ H, 2^(−k · max / n),
 * k = 1 … n; for H < n, those with even k first, then odd k, the first H.
 */
export function mptSlopesReference(H: number, biasMax: number): number[] {
  const n = 2 ** Math.ceil(Math.log2(H));
  const slope = (k: number) => Math.pow(2, (-k * biasMax) / n);
  const order = [
    ...Array.from({ length: n / 2 }, (_, j) => 2 * (j + 1)),
    ...Array.from({ length: n / 2 }, (_, j) => 2 * j + 1),
  ];
  return n === H ? Array.from({ length: n }, (_, k) => slope(k + 1)) : order.slice(0, H).map(slope);
}

function layerNorm(x: Float64Array, w: Float32Array, b: Float32Array | undefined, eps: number): Float64Array {
  const n = x.length;
  const mean = x.reduce((a, v) => a + v, 0) / n;
  const variance = x.reduce((a, v) => a + (v - mean) ** 2, 0) / n;
  const r = 1 / Math.sqrt(variance + eps);
  return x.map((v, i) => (v - mean) * r * w[i]! + (b?.[i] ?? 0));
}

/** y = W x (+ b), W [out, in]. */
function linear(w: Float32Array, x: Float64Array, out: number, b?: Float32Array): Float64Array {
  const y = new Float64Array(out);
  for (let o = 0; o < out; o++) {
    let s = b?.[o] ?? 0;
    for (let i = 0; i < x.length; i++) s += w[o * x.length + i]! * x[i]!;
    y[o] = s;
  }
  return y;
}

/** erf by its everywhere-convergent series 2/√π · e^(−x²) · Σ 2ⁿ x^(2n+1) / (1·3·…·(2n+1)); terms all positive. */
export function erf(x: number): number {
  if (Math.abs(x) > 6) return Math.sign(x);
  let term = x;
  let sum = x;
  for (let n = 1; n < 200 && Math.abs(term) > 1e-17 * Math.abs(sum); n++) {
    term *= (2 * x * x) / (2 * n + 1);
    sum += term;
  }
  return (2 / Math.sqrt(Math.PI)) * Math.exp(-x * x) * sum;
}

/** Causal softmax attention of one head at query t: Σ_s softmax_s(q·k_s · scale + bias(s)) v_s. */
function attend(
  q: Float64Array,
  keys: Float64Array[],
  values: Float64Array[],
  t: number,
  scale: number,
  bias: (s: number) => number,
): Float64Array {
  const scores = Array.from(
    { length: t + 1 },
    (_, s) => q.reduce((a, qi, i) => a + qi * keys[s]![i]!, 0) * scale + bias(s),
  );
  const m = Math.max(...scores);
  const e = scores.map((sc) => Math.exp(sc - m));
  const z = e.reduce((a, b) => a + b, 0);
  const out = new Float64Array(q.length);
  for (let s = 0; s <= t; s++) for (let i = 0; i < q.length; i++) out[i]! += (e[s]! / z) * values[s]![i]!;
  return out;
}

/** The last position's logits from the embedding matrix (tied LM head). */
function tiedLogits(embed: Float32Array, x: Float64Array, V: number): Float64Array {
  return linear(embed, x, V);
}

/** BLOOM (transformers' BloomForCausalLM, apply_residual_connection_post_layernorm false). */
export function referenceBloom(c: BloomConfig, w: BloomWeights, ids: number[]): AlibiReference {
  const d = c.hidden_size;
  const H = c.n_head;
  const hd = d / H;
  const eps = c.layer_norm_epsilon;
  const slopes = bloomSlopesReference(H);
  const gelu = (x: number) => x * 0.5 * (1 + Math.tanh(0.79788456 * x * (1 + 0.044715 * x * x)));
  let xs = ids.map((id) =>
    layerNorm(Float64Array.from(w.embed.subarray(id * d, (id + 1) * d)), w.embedNorm.weight, w.embedNorm.bias, eps),
  );
  const hidden: Float64Array[] = [];
  for (const lw of w.layers) {
    const fused = xs.map((x) =>
      linear(lw.qkv, layerNorm(x, lw.inputNorm.weight, lw.inputNorm.bias, eps), 3 * d, lw.qkvBias),
    );
    // Head h's rows: q at 3·h·hd, k at (3h + 1)·hd, v at (3h + 2)·hd.
    const part = (t: number, h: number, j: number) => fused[t]!.subarray((3 * h + j) * hd, (3 * h + j + 1) * hd);
    xs = xs.map((x, t) => {
      const ctx = new Float64Array(d);
      for (let h = 0; h < H; h++) {
        const keys = xs.map((_, s) => part(s, h, 1));
        const values = xs.map((_, s) => part(s, h, 2));
        // Unpadded: a key's index among the row's tokens is its position s.
        ctx.set(
          attend(part(t, h, 0), keys, values, t, 1 / Math.sqrt(hd), (s) => slopes[h]! * s),
          h * hd,
        );
      }
      const attn = linear(lw.dense, ctx, d, lw.denseBias);
      const x1 = x.map((v, i) => v + attn[i]!);
      const up = linear(lw.up, layerNorm(x1, lw.postNorm.weight, lw.postNorm.bias, eps), 4 * d, lw.upBias);
      const down = linear(lw.down, up.map(gelu), d, lw.downBias);
      return x1.map((v, i) => v + down[i]!);
    });
    hidden.push(xs.at(-1)!);
  }
  hidden[hidden.length - 1] = layerNorm(hidden.at(-1)!, w.norm.weight, w.norm.bias, eps);
  return { hidden, logits: tiedLogits(w.embed, hidden.at(-1)!, c.vocab_size) };
}

/** MPT (transformers' MptForCausalLM: no biases, ALiBi over the last keys of a max_seq_len table). */
export function referenceMpt(c: MptConfig, w: MptWeights, ids: number[]): AlibiReference {
  const d = c.d_model;
  const H = c.n_heads;
  const hd = d / H;
  const eps = c.layer_norm_epsilon;
  const n = ids.length;
  const scale = c.attn_config.softmax_scale ?? 1 / Math.sqrt(hd);
  const slopes = mptSlopesReference(H, c.attn_config.alibi_bias_max);
  const gelu = (x: number) => 0.5 * x * (1 + erf(x / Math.SQRT2));
  let xs = ids.map((id) => Float64Array.from(w.embed.subarray(id * d, (id + 1) * d)));
  const hidden: Float64Array[] = [];
  for (const lw of w.layers) {
    const qkv = xs.map((x) => linear(lw.wqkv, layerNorm(x, lw.norm1, undefined, eps), 3 * d));
    // q, k and v are the three thirds; head h is columns h·hd … (h + 1)·hd of each.
    const part = (t: number, h: number, j: number) => qkv[t]!.subarray(j * d + h * hd, j * d + (h + 1) * hd);
    xs = xs.map((x, t) => {
      const ctx = new Float64Array(d);
      for (let h = 0; h < H; h++) {
        const keys = xs.map((_, s) => part(s, h, 1));
        const values = xs.map((_, s) => part(s, h, 2));
        // The bias of key s counts back from the sequence's last key: slope · (s − (n − 1)).
        ctx.set(
          attend(part(t, h, 0), keys, values, t, scale, (s) => slopes[h]! * (s - (n - 1))),
          h * hd,
        );
      }
      const attn = linear(lw.outProj, ctx, d);
      const x1 = x.map((v, i) => v + attn[i]!);
      const up = linear(lw.up, layerNorm(x1, lw.norm2, undefined, eps), 4 * d);
      const down = linear(lw.down, up.map(gelu), d);
      return x1.map((v, i) => v + down[i]!);
    });
    hidden.push(xs.at(-1)!);
  }
  hidden[hidden.length - 1] = layerNorm(hidden.at(-1)!, w.norm, undefined, eps);
  return { hidden, logits: tiedLogits(w.embed, hidden.at(-1)!, c.vocab_size) };
}
