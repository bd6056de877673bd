/**
 * Float64 forward passes of GPT-2 and OPT (pre-norm) over one unpadded
 * sequence, written from the families' definitions in transformers 4.44, not
 * from the ONNX graphs of src/synthetic/learned-positions.ts:
 *
 * - GPT-2: h = wte[id] + wpe[pos]; per block h += c_proj(attn(ln_1(h))) then
 *   h += mlp(ln_2(h)), Conv1D being x·W + b with W stored [in, out], attention
 *   softmax(q·kᵀ / √hd) over the keys at or before the query, the MLP
 *   c_proj(gelu_new(c_fc(x))) with gelu_new(x) = ½x(1 + tanh(√(2/π)(x + 0.044715x³)));
 *   ln_f, then logits = ln_f(h)·wteᵀ.
 * - OPT: h = embed_tokens[id] + embed_positions[pos + 2]; per block
 *   h += out_proj(attn(self_attn_layer_norm(h))) with q = q_proj(x)·hd^-½,
 *   then h += fc2(relu(fc1(final_layer_norm(h)))); the decoder's
 *   final_layer_norm, then logits = final_layer_norm(h)·embed_tokensᵀ. Without
 *   explicit positions, pos = cumsum(mask)·mask − 1 with a mask of ones.
 *
 * Both return, per block, the residual stream at the last position (the last
 * block's after the final norm), and the last position's logits. `positions`
 * replaces the positions the model would count, as a `position_ids` input does.
 */
import {
  OPT_POSITION_OFFSET,
  type Gpt2Config,
  type Gpt2Weights,
  type OptConfig,
  type OptWeights,
} from "../../src/synthetic/learned-positions.js";

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

/** y = W x + b for W in [out, in] (nn.Linear). */
function linear(w: Float32Array, b: Float32Array, x: Float64Array): Float64Array {
  const out = b.length;
  const y = new Float64Array(out);
  for (let o = 0; o < out; o++) {
    let s = b[o]!;
    for (let i = 0; i < x.length; i++) s += w[o * x.length + i]! * x[i]!;
    y[o] = s;
  }
  return y;
}

/** y = x W + b for W in [in, out] (GPT-2's Conv1D). */
function conv1d(w: Float32Array, b: Float32Array, x: Float64Array): Float64Array {
  const out = b.length;
  const y = Float64Array.from(b);
  for (let i = 0; i < x.length; i++) for (let o = 0; o < out; o++) y[o]! += x[i]! * w[i * out + o]!;
  return y;
}

function geluNew(x: number): number {
  return 0.5 * x * (1 + Math.tanh(Math.sqrt(2 / Math.PI) * (x + 0.044715 * x ** 3)));
}

function row(table: Float32Array, r: number, d: number): Float64Array {
  if (r < 0 || (r + 1) * d > table.length) throw new RangeError(`row ${r} outside the table`);
  return Float64Array.from(table.subarray(r * d, (r + 1) * d));
}

/**
 * Causal multi-head attention of every position over itself and the earlier ones:
 * q, k, v per position [H·hd]; returns the merged heads per position, scores scaled by `scale`.
 */
function attention(q: Float64Array[], k: Float64Array[], v: Float64Array[], H: number, scale: number): Float64Array[] {
  const hd = q[0]!.length / H;
  return q.map((qt, t) => {
    const ctx = new Float64Array(H * hd);
    for (let h = 0; h < H; h++) {
      const scores = Array.from({ length: t + 1 }, (_, s) => {
        let dot = 0;
        for (let i = 0; i < hd; i++) dot += qt[h * hd + i]! * k[s]![h * hd + i]!;
        return dot * scale;
      });
      const m = Math.max(...scores);
      const e = scores.map((sc) => Math.exp(sc - m));
      const z = e.reduce((a, b) => a + b, 0);
      for (let s = 0; s <= t; s++) for (let i = 0; i < hd; i++) ctx[h * hd + i]! += (e[s]! / z) * v[s]![h * hd + i]!;
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

/** GPT-2's forward pass; positions 0 … n − 1 unless given. */
export function referenceGpt2(
  c: Gpt2Config,
  w: Gpt2Weights,
  ids: number[],
  positions: number[] = ids.map((_, t) => t),
): ReferenceForward {
  const d = c.n_embd;
  const eps = c.layer_norm_epsilon;
  let xs = ids.map((id, t) => {
    const p = row(w.wpe, positions[t]!, d);
    return row(w.wte, id, d).map((e, i) => e + p[i]!);
  });
  const hidden: Float64Array[] = [];
  for (const lw of w.layers) {
    const qkv = xs.map((x) => conv1d(lw.cAttnWeight, lw.cAttnBias, layerNorm(x, lw.ln1Weight, lw.ln1Bias, eps)));
    const ctx = attention(
      qkv.map((a) => a.subarray(0, d)),
      qkv.map((a) => a.subarray(d, 2 * d)),
      qkv.map((a) => a.subarray(2 * d, 3 * d)),
      c.n_head,
      1 / Math.sqrt(d / c.n_head),
    );
    xs = xs.map((x, t) => {
      const attn = conv1d(lw.attnProjWeight, lw.attnProjBias, ctx[t]!);
      const x1 = x.map((v, i) => v + attn[i]!);
      const fc = conv1d(lw.fcWeight, lw.fcBias, layerNorm(x1, lw.ln2Weight, lw.ln2Bias, eps)).map(geluNew);
      const mlp = conv1d(lw.mlpProjWeight, lw.mlpProjBias, fc);
      return x1.map((v, i) => v + mlp[i]!);
    });
    hidden.push(xs.at(-1)!);
  }
  const normed = layerNorm(hidden.at(-1)!, w.lnfWeight, w.lnfBias, eps);
  hidden[hidden.length - 1] = normed;
  return { hidden, logits: tiedLogits(w.wte, normed, c.vocab_size) };
}

/** OPT's forward pass; `positions` are position ids before OPT's offset of 2, counted from the mask unless given. */
export function referenceOpt(c: OptConfig, w: OptWeights, ids: number[], positions?: number[]): ReferenceForward {
  const d = c.hidden_size;
  const eps = 1e-5;
  const mask = ids.map(() => 1);
  let cum = 0;
  const counted = mask.map((m) => (cum += m) * m - 1);
  const pos = positions ?? counted;
  let xs = ids.map((id, t) => {
    const p = row(w.embedPositions, pos[t]! + OPT_POSITION_OFFSET, d);
    return row(w.embedTokens, id, d).map((e, i) => e + p[i]!);
  });
  const hidden: Float64Array[] = [];
  const scaling = (d / c.num_attention_heads) ** -0.5;
  for (const lw of w.layers) {
    const hs = xs.map((x) => layerNorm(x, lw.attnNormWeight, lw.attnNormBias, eps));
    const ctx = attention(
      hs.map((h) => linear(lw.q, lw.qBias, h).map((v) => v * scaling)),
      hs.map((h) => linear(lw.k, lw.kBias, h)),
      hs.map((h) => linear(lw.v, lw.vBias, h)),
      c.num_attention_heads,
      1,
    );
    xs = xs.map((x, t) => {
      const attn = linear(lw.out, lw.outBias, ctx[t]!);
      const x1 = x.map((v, i) => v + attn[i]!);
      const fc1 = linear(lw.fc1, lw.fc1Bias, layerNorm(x1, lw.finalNormWeight, lw.finalNormBias, eps));
      const mlp = linear(
        lw.fc2,
        lw.fc2Bias,
        fc1.map((v) => Math.max(0, v)),
      );
      return x1.map((v, i) => v + mlp[i]!);
    });
    hidden.push(xs.at(-1)!);
  }
  const normed = layerNorm(hidden.at(-1)!, w.finalNormWeight, w.finalNormBias, eps);
  hidden[hidden.length - 1] = normed;
  return { hidden, logits: tiedLogits(w.embedTokens, normed, c.vocab_size) };
}
