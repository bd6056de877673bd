/**
 * Float64 forward passes of the Llama relatives of src/synthetic/llama-relatives.ts,
 * written from transformers' definitions, not from the ONNX graphs: pre-norm
 * blocks with rotary attention (rotate_half, θ = rope_theta) and grouped-query
 * heads (query head h reads key/value head ⌊h / (H / KV)⌋), where a query at
 * position t sees keys s with t − window < s ≤ t. Mistral (RMSNorm, SwiGLU),
 * Mixtral (the MLP a softmax router's top-k experts, weights renormalized to
 * sum 1), OLMo (LayerNorm without weight or bias, q/k/v clamped to ±clip_qkv)
 * and StarCoder2 (LayerNorm with bias, biased projections, tanh-GELU MLP,
 * tied LM head). One unpadded sequence; returns per block the residual stream
 * at the last position (the last block's after the final norm) and the last
 * position's logits.
 */
import type {
  MistralConfig,
  MistralWeights,
  MixtralConfig,
  MixtralWeights,
  OlmoConfig,
  OlmoWeights,
  Starcoder2Config,
  Starcoder2Weights,
} from "../../src/synthetic/llama-relatives.js";

export interface RelativeReference {
  hidden: Float64Array[];
  logits: Float64Array;
}

function rmsNorm(x: Float64Array, w: Float32Array, eps: number): Float64Array {
  const ms = x.reduce((a, v) => a + v * v, 0) / x.length;
  return x.map((v, i) => (w[i]! * v) / Math.sqrt(ms + eps));
}

function layerNorm(x: Float64Array, eps: number, w?: Float32Array, b?: Float32Array): Float64Array {
  const n = x.length;
  const mean = x.reduce((a, v) => a + v, 0) / n;
  const variance = x.reduce((a, v) => a + (v - mean) ** 2, 0) / n;
  return x.map((v, i) => ((v - mean) / Math.sqrt(variance + eps)) * (w?.[i] ?? 1) + (b?.[i] ?? 0));
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

/** Rotary embedding at position `pos`: pairs (i, i + hd/2) rotated by pos · θ^(−2i/hd). */
function rope(v: Float64Array, pos: number, theta: number): Float64Array {
  const hd = v.length;
  const half = hd / 2;
  const out = new Float64Array(hd);
  for (let i = 0; i < half; i++) {
    const a = pos / Math.pow(theta, (2 * i) / hd);
    out[i] = v[i]! * Math.cos(a) - v[i + half]! * Math.sin(a);
    out[i + half] = v[i + half]! * Math.cos(a) + v[i]! * Math.sin(a);
  }
  return out;
}

const silu = (x: number) => x / (1 + Math.exp(-x));

/** down(silu(gate x) · up x). */
function swiglu(gate: Float32Array, up: Float32Array, down: Float32Array, x: Float64Array, I: number): Float64Array {
  const g = linear(gate, x, I);
  const u = linear(up, x, I);
  return linear(
    down,
    g.map((v, i) => silu(v) * u[i]!),
    x.length,
  );
}

/** One block as the decoder loop sees it. */
interface Block {
  norm1: (x: Float64Array) => Float64Array;
  q: Float32Array;
  k: Float32Array;
  v: Float32Array;
  o: Float32Array;
  biases?: { q: Float32Array; k: Float32Array; v: Float32Array; o: Float32Array };
  clip?: number | null;
  norm2: (x: Float64Array) => Float64Array;
  mlp: (h: Float64Array) => Float64Array;
}

interface Geometry {
  d: number;
  H: number;
  KV: number;
  theta: number;
  /** Keys more than window − 1 positions back are not attended; null: no limit. */
  window: number | null;
}

/** The pre-norm decoder over `ids` (positions 0 … n − 1): per block the last position's stream. */
function decoder(ids: number[], embed: Float32Array, geo: Geometry, blocks: Block[]): Float64Array[] {
  const { d, H, KV, theta, window } = geo;
  const hd = d / H;
  const group = H / KV;
  let xs = ids.map((id) => Float64Array.from(embed.subarray(id * d, (id + 1) * d)));
  const hidden: Float64Array[] = [];
  for (const b of blocks) {
    const clamp = (y: Float64Array) => (b.clip == null ? y : y.map((v) => Math.min(b.clip!, Math.max(-b.clip!, v))));
    const hs = xs.map(b.norm1);
    const qs = hs.map((h) => clamp(linear(b.q, h, H * hd, b.biases?.q)));
    const ks = hs.map((h) => clamp(linear(b.k, h, KV * hd, b.biases?.k)));
    const vs = hs.map((h) => clamp(linear(b.v, h, KV * hd, b.biases?.v)));
    const head = (y: Float64Array, j: number) => y.subarray(j * hd, (j + 1) * hd);
    xs = xs.map((x, t) => {
      const ctx = new Float64Array(H * hd);
      for (let h = 0; h < H; h++) {
        const kv = Math.floor(h / group);
        const q = rope(head(qs[t]!, h), t, theta);
        const first = window === null ? 0 : Math.max(0, t - window + 1);
        const scores: number[] = [];
        for (let s = first; s <= t; s++) {
          const k = rope(head(ks[s]!, kv), s, theta);
          scores.push(q.reduce((a, qi, i) => a + qi * k[i]!, 0) / Math.sqrt(hd));
        }
        const m = Math.max(...scores);
        const e = scores.map((sc) => Math.exp(sc - m));
        const z = e.reduce((a, v) => a + v, 0);
        for (let s = first; s <= t; s++) {
          const v = head(vs[s]!, kv);
          for (let i = 0; i < hd; i++) ctx[h * hd + i]! += (e[s - first]! / z) * v[i]!;
        }
      }
      const attn = linear(b.o, ctx, d, b.biases?.o);
      const x1 = x.map((v, i) => v + attn[i]!);
      const mlp = b.mlp(b.norm2(x1));
      return x1.map((v, i) => v + mlp[i]!);
    });
    hidden.push(xs.at(-1)!);
  }
  return hidden;
}

/** The final norm on the last block's entry, and the LM head's logits from it. */
function finish(
  hidden: Float64Array[],
  norm: (x: Float64Array) => Float64Array,
  head: Float32Array,
  V: number,
): RelativeReference {
  hidden[hidden.length - 1] = norm(hidden.at(-1)!);
  return { hidden, logits: linear(head, hidden.at(-1)!, V) };
}

/** Mistral (transformers' MistralForCausalLM). */
export function referenceMistral(c: MistralConfig, w: MistralWeights, ids: number[]): RelativeReference {
  const eps = c.rms_norm_eps;
  const I = c.intermediate_size;
  const blocks = w.layers.map((lw): Block => ({
    ...lw,
    norm1: (x) => rmsNorm(x, lw.inputNorm, eps),
    norm2: (x) => rmsNorm(x, lw.postNorm, eps),
    mlp: (h) => swiglu(lw.gate, lw.up, lw.down, h, I),
  }));
  const hidden = decoder(ids, w.embed, geometry(c, c.sliding_window), blocks);
  return finish(hidden, (x) => rmsNorm(x, w.norm, eps), w.lmHead, c.vocab_size);
}

/**
 * MixtralSparseMoeBlock: p = softmax(router x); the top num_experts_per_tok
 * experts by p, their p divided by the sum of those chosen; Σ p_e · expert_e(x).
 */
function mixtralMoe(c: MixtralConfig, lw: MixtralWeights["layers"][number], x: Float64Array): Float64Array {
  const logits = linear(lw.router, x, c.num_local_experts);
  const m = Math.max(...logits);
  const e = logits.map((l) => Math.exp(l - m));
  const z = e.reduce((a, v) => a + v, 0);
  const p = Array.from(e, (v, i) => ({ i, p: v / z }));
  const top = p.sort((a, b) => b.p - a.p).slice(0, c.num_experts_per_tok);
  const total = top.reduce((a, t) => a + t.p, 0);
  const out = new Float64Array(x.length);
  for (const { i, p: pi } of top) {
    const ex = lw.experts[i]!;
    const y = swiglu(ex.w1, ex.w3, ex.w2, x, c.intermediate_size);
    for (let j = 0; j < out.length; j++) out[j]! += (pi / total) * y[j]!;
  }
  return out;
}

/** Mixtral (transformers' MixtralForCausalLM). */
export function referenceMixtral(c: MixtralConfig, w: MixtralWeights, ids: number[]): RelativeReference {
  const eps = c.rms_norm_eps;
  const blocks = w.layers.map((lw): Block => ({
    ...lw,
    norm1: (x) => rmsNorm(x, lw.inputNorm, eps),
    norm2: (x) => rmsNorm(x, lw.postNorm, eps),
    mlp: (h) => mixtralMoe(c, lw, h),
  }));
  const hidden = decoder(ids, w.embed, geometry(c, c.sliding_window), blocks);
  return finish(hidden, (x) => rmsNorm(x, w.norm, eps), w.lmHead, c.vocab_size);
}

/** OLMo (transformers' OlmoForCausalLM): OlmoLayerNorm is layer_norm(x, eps = 1e-5), nothing learned. */
export function referenceOlmo(c: OlmoConfig, w: OlmoWeights, ids: number[]): RelativeReference {
  const norm = (x: Float64Array) => layerNorm(x, 1e-5);
  const I = c.intermediate_size;
  const blocks = w.layers.map((lw): Block => ({
    ...lw,
    clip: c.clip_qkv,
    norm1: norm,
    norm2: norm,
    mlp: (h) => swiglu(lw.gate, lw.up, lw.down, h, I),
  }));
  const hidden = decoder(ids, w.embed, geometry(c, null), blocks);
  return finish(hidden, norm, w.lmHead, c.vocab_size);
}

/** StarCoder2 (transformers' Starcoder2ForCausalLM): gelu_pytorch_tanh between c_fc and c_proj. */
export function referenceStarcoder2(c: Starcoder2Config, w: Starcoder2Weights, ids: number[]): RelativeReference {
  const eps = c.norm_epsilon;
  const I = c.intermediate_size;
  const d = c.hidden_size;
  const gelu = (x: number) => 0.5 * x * (1 + Math.tanh(Math.sqrt(2 / Math.PI) * (x + 0.044715 * x ** 3)));
  const blocks = w.layers.map((lw): Block => ({
    ...lw,
    biases: { q: lw.qBias, k: lw.kBias, v: lw.vBias, o: lw.oBias },
    norm1: (x) => layerNorm(x, eps, lw.inputNorm.weight, lw.inputNorm.bias),
    norm2: (x) => layerNorm(x, eps, lw.postNorm.weight, lw.postNorm.bias),
    mlp: (h) => linear(lw.proj, linear(lw.fc, h, I, lw.fcBias).map(gelu), d, lw.projBias),
  }));
  const hidden = decoder(ids, w.embed, geometry(c, c.sliding_window), blocks);
  return finish(hidden, (x) => layerNorm(x, eps, w.norm.weight, w.norm.bias), w.embed, c.vocab_size);
}

function geometry(
  c: { hidden_size: number; num_attention_heads: number; num_key_value_heads: number; rope_theta: number },
  window: number | null,
): Geometry {
  return {
    d: c.hidden_size,
    H: c.num_attention_heads,
    KV: c.num_key_value_heads,
    theta: c.rope_theta,
    window,
  };
}
