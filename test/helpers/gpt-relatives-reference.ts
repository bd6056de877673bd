/**
 * Float64 forward passes of GPT-Neo and GPT-BigCode over one unpadded
 * sequence, written from the families' definitions in transformers 4.44, not
 * from the ONNX graphs of src/synthetic/gpt-relatives.ts:
 *
 * - GPT-Neo: h = wte[id] + wpe[pos]; per block h += out_proj(attn(ln_1(h)))
 *   then h += c_proj(gelu_new(c_fc(ln_2(h)))), all nn.Linear (x·Wᵀ + b); the
 *   attention is softmax(q·kᵀ) with NO 1/√hd, over the keys at or before the
 *   query and, in a layer `attention_layers` calls local, fewer than
 *   window_size slots before it; ln_f, then logits = ln_f(h)·wteᵀ.
 * - GPT-BigCode: the same residual layout with c_attn → (q, key_value),
 *   softmax(q·kᵀ/√hd) causal, c_proj, and an MLP c_proj(gelu_tanh(c_fc(x))).
 *   With multi_query every head reads the one key and value (c_attn rows
 *   d … d + hd − 1 and d + hd … d + 2hd − 1); without it, head h's q, k and v
 *   are c_attn rows h·3hd + [0, hd), [hd, 2hd), [2hd, 3hd).
 *
 * Both return, per block, the residual stream at the last position (the last
 * block's after ln_f), and the last position's logits. `positions` replaces
 * the positions the model would count (0 … n − 1 for an unpadded sequence).
 */
import type {
  GptBigcodeConfig,
  GptBigcodeWeights,
  GptNeoConfig,
  GptNeoWeights,
} from "../../src/synthetic/gpt-relatives.js";

export interface ReferenceForward {
  /** Per block, the residual stream at the last position; the last block's entry after the final norm. */
  hidden: Float64Array[];
  /** The last position's logits. */
  logits: Float64Array;
}

function layerNorm(x: Float64Array, w: Float32Array, b: Float32Array, eps: number): Float64Array {
  const mean = x.reduce((a, v) => a + v, 0) / x.length;
  const variance = x.reduce((a, v) => a + (v - mean) ** 2, 0) / x.length;
  const r = 1 / Math.sqrt(variance + eps);
  return x.map((v, i) => (v - mean) * r * w[i]! + b[i]!);
}

/** y = W x (+ b) for W in [out, in] (nn.Linear). */
function linear(w: Float32Array, out: number, x: Float64Array, b?: Float32Array): Float64Array {
  const y = new Float64Array(out);
  for (let o = 0; o < out; o++) {
    let s = b ? b[o]! : 0;
    for (let i = 0; i < x.length; i++) s += w[o * x.length + i]! * x[i]!;
    y[o] = s;
  }
  return y;
}

/** The tanh approximation of GELU, which gelu_new and gelu_pytorch_tanh both compute. */
function geluTanh(x: number): number {
  return 0.5 * x * (1 + Math.tanh(Math.sqrt(2 / Math.PI) * (x + 0.044715 * x ** 3)));
}

function row(table: Float32Array, r: number, d: number): Float64Array {
  if (r < 0 || (r + 1) * d > table.length) throw new RangeError(`row ${r} outside the table`);
  return Float64Array.from(table.subarray(r * d, (r + 1) * d));
}

/**
 * Causal attention of every position t over the positions s with t − window < s ≤ t:
 * `query(t, h)`, `key(s, h)`, `value(s, h)` give head h's vectors; returns the merged heads per position.
 */
function attention(
  n: number,
  H: number,
  hd: number,
  query: (t: number, h: number) => Float64Array,
  key: (s: number, h: number) => Float64Array,
  value: (s: number, h: number) => Float64Array,
  scale: number,
  window = Infinity,
): Float64Array[] {
  return Array.from({ length: n }, (_, t) => {
    const ctx = new Float64Array(H * hd);
    const first = Math.max(0, t - window + 1);
    for (let h = 0; h < H; h++) {
      const q = query(t, h);
      const scores: number[] = [];
      for (let s = first; s <= t; s++) {
        const k = key(s, h);
        let dot = 0;
        for (let i = 0; i < hd; i++) dot += q[i]! * k[i]!;
        scores.push(dot * scale);
      }
      const m = Math.max(...scores);
      const e = scores.map((sc) => Math.exp(sc - m));
      const z = e.reduce((a, b) => a + b, 0);
      for (let s = first; s <= t; s++) {
        const v = value(s, h);
        for (let i = 0; i < hd; i++) ctx[h * hd + i]! += (e[s - first]! / z) * v[i]!;
      }
    }
    return ctx;
  });
}

/** Logits of the last normed state against a tied embedding [V, d]. */
function tiedLogits(embed: Float32Array, x: Float64Array, vocab: number): Float64Array {
  const d = x.length;
  const out = new Float64Array(vocab);
  for (let t = 0; t < vocab; t++) {
    let s = 0;
    for (let i = 0; i < d; i++) s += embed[t * d + i]! * x[i]!;
    out[t] = s;
  }
  return out;
}

function embed(wte: Float32Array, wpe: Float32Array, ids: number[], positions: number[], d: number): Float64Array[] {
  return ids.map((id, t) => {
    const p = row(wpe, positions[t]!, d);
    return row(wte, id, d).map((e, i) => e + p[i]!);
  });
}

/** GPT-Neo's forward pass; positions 0 … n − 1 unless given. */
export function referenceGptNeo(
  c: GptNeoConfig,
  w: GptNeoWeights,
  ids: number[],
  positions: number[] = ids.map((_, t) => t),
): ReferenceForward {
  const d = c.hidden_size;
  const H = c.num_heads;
  const hd = d / H;
  const I = c.intermediate_size ?? 4 * d;
  const eps = c.layer_norm_epsilon;
  let xs = embed(w.wte, w.wpe, ids, positions, d);
  const hidden: Float64Array[] = [];
  w.layers.forEach((lw, li) => {
    const hs = xs.map((x) => layerNorm(x, lw.ln1Weight, lw.ln1Bias, eps));
    const q = hs.map((h) => linear(lw.q, d, h));
    const k = hs.map((h) => linear(lw.k, d, h));
    const v = hs.map((h) => linear(lw.v, d, h));
    const head = (a: Float64Array[]) => (t: number, h: number) => a[t]!.subarray(h * hd, (h + 1) * hd);
    const window = c.attention_layers[li] === "local" ? c.window_size : Infinity;
    const ctx = attention(xs.length, H, hd, head(q), head(k), head(v), 1, window);
    xs = xs.map((x, t) => {
      const attn = linear(lw.out, d, ctx[t]!, lw.outBias);
      const x1 = x.map((val, i) => val + attn[i]!);
      const fc = linear(lw.fc, I, layerNorm(x1, lw.ln2Weight, lw.ln2Bias, eps), lw.fcBias).map(geluTanh);
      const mlp = linear(lw.proj, d, fc, lw.projBias);
      return x1.map((val, i) => val + mlp[i]!);
    });
    hidden.push(xs.at(-1)!);
  });
  const normed = layerNorm(hidden.at(-1)!, w.lnfWeight, w.lnfBias, eps);
  hidden[hidden.length - 1] = normed;
  return { hidden, logits: tiedLogits(w.wte, normed, c.vocab_size) };
}

/** GPT-BigCode's forward pass; positions 0 … n − 1 unless given. */
export function referenceGptBigcode(
  c: GptBigcodeConfig,
  w: GptBigcodeWeights,
  ids: number[],
  positions: number[] = ids.map((_, t) => t),
): ReferenceForward {
  const d = c.n_embd;
  const H = c.n_head;
  const hd = d / H;
  const I = c.n_inner ?? 4 * d;
  const eps = c.layer_norm_epsilon;
  const width = c.multi_query ? d + 2 * hd : 3 * d;
  let xs = embed(w.wte, w.wpe, ids, positions, d);
  const hidden: Float64Array[] = [];
  for (const lw of w.layers) {
    const qkv = xs.map((x) => linear(lw.cAttn, width, layerNorm(x, lw.ln1Weight, lw.ln1Bias, eps), lw.cAttnBias));
    // Where head h's q, k and v start in a row of c_attn's output.
    const at = c.multi_query
      ? { q: (h: number) => h * hd, k: () => d, v: () => d + hd }
      : { q: (h: number) => 3 * hd * h, k: (h: number) => 3 * hd * h + hd, v: (h: number) => 3 * hd * h + 2 * hd };
    const part = (start: (h: number) => number) => (t: number, h: number) => qkv[t]!.subarray(start(h), start(h) + hd);
    const ctx = attention(xs.length, H, hd, part(at.q), part(at.k), part(at.v), 1 / Math.sqrt(hd));
    xs = xs.map((x, t) => {
      const attn = linear(lw.attnProj, d, ctx[t]!, lw.attnProjBias);
      const x1 = x.map((val, i) => val + attn[i]!);
      const fc = linear(lw.fc, I, layerNorm(x1, lw.ln2Weight, lw.ln2Bias, eps), lw.fcBias).map(geluTanh);
      const mlp = linear(lw.mlpProj, d, fc, lw.mlpProjBias);
      return x1.map((val, i) => val + mlp[i]!);
    });
    hidden.push(xs.at(-1)!);
  }
  const normed = layerNorm(hidden.at(-1)!, w.lnfWeight, w.lnfBias, eps);
  hidden[hidden.length - 1] = normed;
  return { hidden, logits: tiedLogits(w.wte, normed, c.vocab_size) };
}

/**
 * Block 0's key_value as GPT-BigCode caches it, from c_attn(ln_1(wte[id] + wpe[t])): per position t and key head
 * (one with multi_query), the key's hd channels followed by the value's.
 */
export function bigcodeFirstKeyValue(c: GptBigcodeConfig, w: GptBigcodeWeights, ids: number[]): Float64Array[][] {
  const d = c.n_embd;
  const hd = d / c.n_head;
  const lw = w.layers[0]!;
  const width = c.multi_query ? d + 2 * hd : 3 * d;
  const xs = embed(
    w.wte,
    w.wpe,
    ids,
    ids.map((_, t) => t),
    d,
  );
  return xs.map((x) => {
    const qkv = linear(lw.cAttn, width, layerNorm(x, lw.ln1Weight, lw.ln1Bias, c.layer_norm_epsilon), lw.cAttnBias);
    if (c.multi_query) return [qkv.slice(d, d + 2 * hd)];
    return Array.from({ length: c.n_head }, (_, h) => qkv.slice(3 * hd * h + hd, 3 * hd * (h + 1)));
  });
}
