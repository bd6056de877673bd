/**
 * Float64 forward passes of the rotary families of src/synthetic/partial-rotary.ts,
 * written from transformers' definitions, not from the ONNX graphs: Falcon
 * (multi-query, rotary over the whole head, attention and an erf-GELU MLP in
 * parallel on one LayerNorm, tied head), Phi (rotary on the first
 * head_dim × partial_rotary_factor features, attention and a gelu_new MLP in
 * parallel, LM head with a bias) and StableLM (sequential blocks, partial
 * rotary, SwiGLU). One unpadded sequence at positions 0 … n − 1; returns per
 * block the residual stream at the last position (the last block's after the
 * final norm) and the last position's logits.
 */
import type {
  FalconConfig,
  FalconWeights,
  PhiConfig,
  PhiWeights,
  StablelmConfig,
  StablelmWeights,
} from "../../src/synthetic/partial-rotary.js";
import { erf } from "./alibi-reference.js";

export interface PartialRotaryReference {
  hidden: Float64Array[];
  logits: Float64Array;
}

function layerNorm(x: Float64Array, n: { weight: Float32Array; bias: Float32Array }, eps: number): Float64Array {
  const mean = x.reduce((a, v) => a + v, 0) / x.length;
  const variance = x.reduce((a, v) => a + (v - mean) ** 2, 0) / x.length;
  const r = 1 / Math.sqrt(variance + eps);
  return x.map((v, i) => (v - mean) * r * n.weight[i]! + n.bias[i]!);
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

const add = (...xs: Float64Array[]) => xs[0]!.map((_, i) => xs.reduce((a, x) => a + x[i]!, 0));

/**
 * The rotary embedding of one head's vector at position `pos`, on its first `r` features:
 * pairs (i, i + r/2) turned by the angle pos · θ^(−2i/r) (rotate_half's pairing); the rest unchanged.
 */
export function rotaryReference(x: Float64Array, pos: number, r: number, theta: number): Float64Array {
  const out = Float64Array.from(x);
  const half = r / 2;
  for (let i = 0; i < half; i++) {
    const angle = pos * Math.pow(theta, (-2 * i) / r);
    const [c, s] = [Math.cos(angle), Math.sin(angle)];
    out[i] = x[i]! * c - x[i + half]! * s;
    out[i + half] = x[i + half]! * c + x[i]! * s;
  }
  return out;
}

/** Causal softmax attention of one head at query t: Σ_{s ≤ t} softmax_s(q·k_s / √hd) v_s. */
function attend(q: Float64Array, keys: Float64Array[], values: Float64Array[], t: number): Float64Array {
  const scale = 1 / Math.sqrt(q.length);
  const scores = Array.from({ length: t + 1 }, (_, s) => q.reduce((a, qi, i) => a + qi * keys[s]![i]!, 0) * scale);
  const m = Math.max(...scores);
  const e = scores.map((sc) => Math.exp(sc - m));
  const z = e.reduce((a, b) => a + b, 0);
  const out = new Float64Array(q.length);
  for (let s = 0; s <= t; s++) for (let i = 0; i < q.length; i++) out[i]! += (e[s]! / z) * values[s]![i]!;
  return out;
}

/**
 * Multi-head causal attention over a sequence: `qkv(t)` gives position t's projected q, k, v (q of H heads,
 * k and v of KV heads, query head h reading key head h·KV/H); q and k rotated on their first `r` features at
 * position t. Returns each position's [H·hd] context.
 */
function selfAttention(
  n: number,
  qkv: (t: number) => { q: Float64Array; k: Float64Array; v: Float64Array },
  H: number,
  KV: number,
  hd: number,
  r: number,
  theta: number,
): Float64Array[] {
  const rows = Array.from({ length: n }, (_, t) => qkv(t));
  const head = (x: Float64Array, h: number) => x.subarray(h * hd, (h + 1) * hd);
  return rows.map((row, t) => {
    const ctx = new Float64Array(H * hd);
    for (let h = 0; h < H; h++) {
      const kh = Math.floor((h * KV) / H);
      const q = rotaryReference(head(row.q, h), t, r, theta);
      const keys = rows.map((o, s) => rotaryReference(head(o.k, kh), s, r, theta));
      const values = rows.map((o) => head(o.v, kh));
      ctx.set(attend(q, keys, values, t), h * hd);
    }
    return ctx;
  });
}

/** Falcon-7B style (FalconForCausalLM: multi_query, parallel_attn, no biases, rotary, exact GELU). */
export function referenceFalcon(c: FalconConfig, w: FalconWeights, ids: number[]): PartialRotaryReference {
  const d = c.hidden_size;
  const H = c.num_attention_heads;
  const hd = d / H;
  const eps = c.layer_norm_epsilon;
  const gelu = (x: number) => 0.5 * x * (1 + erf(x / Math.SQRT2));
  let xs = ids.map((id) => Float64Array.from(w.embed.subarray(id * d, (id + 1) * d)));
  const hidden: Float64Array[] = [];
  for (const lw of w.layers) {
    const hs = xs.map((x) => layerNorm(x, lw.inputNorm, eps));
    // The fused rows: H query heads, then the one key head, then the one value head.
    const fused = hs.map((h) => linear(lw.qkv, h, d + 2 * hd));
    const ctx = selfAttention(
      xs.length,
      (t) => ({
        q: fused[t]!.subarray(0, d),
        k: fused[t]!.subarray(d, d + hd),
        v: fused[t]!.subarray(d + hd, d + 2 * hd),
      }),
      H,
      1,
      hd,
      hd,
      c.rope_theta,
    );
    xs = xs.map((x, t) => {
      const attn = linear(lw.dense, ctx[t]!, d);
      const mlp = linear(lw.down, linear(lw.up, hs[t]!, c.ffn_hidden_size).map(gelu), d);
      return add(x, attn, mlp);
    });
    hidden.push(xs.at(-1)!);
  }
  hidden[hidden.length - 1] = layerNorm(hidden.at(-1)!, w.norm, eps);
  return { hidden, logits: linear(w.embed, hidden.at(-1)!, c.vocab_size) };
}

/** Phi-1/1.5/2 (PhiForCausalLM: partial rotary, parallel attention and gelu_new MLP, biased LM head). */
export function referencePhi(c: PhiConfig, w: PhiWeights, ids: number[]): PartialRotaryReference {
  const d = c.hidden_size;
  const H = c.num_attention_heads;
  const hd = d / H;
  const r = Math.floor(hd * c.partial_rotary_factor);
  const eps = c.layer_norm_eps;
  const gelu = (x: number) => 0.5 * x * (1 + Math.tanh(Math.sqrt(2 / Math.PI) * (x + 0.044715 * x ** 3)));
  let xs = ids.map((id) => Float64Array.from(w.embed.subarray(id * d, (id + 1) * d)));
  const hidden: Float64Array[] = [];
  for (const lw of w.layers) {
    const hs = xs.map((x) => layerNorm(x, lw.inputNorm, eps));
    const ctx = selfAttention(
      xs.length,
      (t) => ({
        q: linear(lw.q, hs[t]!, d, lw.qBias),
        k: linear(lw.k, hs[t]!, d, lw.kBias),
        v: linear(lw.v, hs[t]!, d, lw.vBias),
      }),
      H,
      H,
      hd,
      r,
      c.rope_theta,
    );
    xs = xs.map((x, t) => {
      const attn = linear(lw.dense, ctx[t]!, d, lw.denseBias);
      const up = linear(lw.fc1, hs[t]!, c.intermediate_size, lw.fc1Bias).map(gelu);
      return add(attn, linear(lw.fc2, up, d, lw.fc2Bias), x);
    });
    hidden.push(xs.at(-1)!);
  }
  hidden[hidden.length - 1] = layerNorm(hidden.at(-1)!, w.finalNorm, eps);
  return { hidden, logits: linear(w.lmHead, hidden.at(-1)!, c.vocab_size, w.lmHeadBias) };
}

/** StableLM 2 (StableLmForCausalLM: sequential blocks, partial rotary, SwiGLU, untied bias-free LM head). */
export function referenceStablelm(c: StablelmConfig, w: StablelmWeights, ids: number[]): PartialRotaryReference {
  const d = c.hidden_size;
  const H = c.num_attention_heads;
  const hd = d / H;
  const I = c.intermediate_size;
  const r = Math.floor(hd * c.partial_rotary_factor);
  const eps = c.layer_norm_eps;
  const silu = (x: number) => x / (1 + Math.exp(-x));
  let xs = ids.map((id) => Float64Array.from(w.embed.subarray(id * d, (id + 1) * d)));
  const hidden: Float64Array[] = [];
  for (const lw of w.layers) {
    const hs = xs.map((x) => layerNorm(x, lw.inputNorm, eps));
    const ctx = selfAttention(
      xs.length,
      (t) => ({
        q: linear(lw.q, hs[t]!, d, lw.qkvBias?.q),
        k: linear(lw.k, hs[t]!, d, lw.qkvBias?.k),
        v: linear(lw.v, hs[t]!, d, lw.qkvBias?.v),
      }),
      H,
      H,
      hd,
      r,
      c.rope_theta,
    );
    xs = xs.map((x, t) => {
      const x1 = add(x, linear(lw.o, ctx[t]!, d));
      const h2 = layerNorm(x1, lw.postNorm, eps);
      const up = linear(lw.up, h2, I);
      const gated = linear(lw.gate, h2, I).map((g, i) => silu(g) * up[i]!);
      return add(x1, linear(lw.down, gated, d));
    });
    hidden.push(xs.at(-1)!);
  }
  hidden[hidden.length - 1] = layerNorm(hidden.at(-1)!, w.norm, eps);
  return { hidden, logits: linear(w.lmHead, hidden.at(-1)!, c.vocab_size) };
}
