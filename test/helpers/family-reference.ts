/**
 * The float64 reference forward pass of test/helpers/llama-reference.ts,
 * generalized to the other graph shapes of the tiny model (src/synthetic/llama.ts
 * `Family`): gemma (Gemma2: embedding × √d, norms applied as 1 + w, the attention and
 * MLP outputs normed before their residual adds, a tanh-GELU gated MLP, scores scaled by query_pre_attn_scalar^-0.5 then soft-capped
 * as tanh(s / cap) · cap, the layers of even index attending only to the last sliding_window positions, the
 * logits soft-capped likewise), qwen2 (q, k and v biases),
 * phi3 (LongRoPE: each rotary frequency divided by the short factor, or the
 * long one when the sequence is longer than original_max_position_embeddings,
 * cos and sin scaled by √(1 + ln(max / original) / ln(original)); its packed
 * projections compute the same as separate ones) and neox (parallel blocks:
 * x + attn(ln1(x)) + mlp(ln2(x))). Written from the families' definitions,
 * not from the ONNX graph. Returns, per block, the residual stream at the last
 * position, the last block's after the final norm; and greedy decoding over it.
 */
import { FORCED_LOGIT, type LlamaConfig, type LlamaWeights } from "../../src/synthetic/llama.js";

function rmsNorm(x: Float64Array, w: Float32Array, eps: number, plusOne: boolean): Float64Array {
  let s = 0;
  for (const v of x) s += v * v;
  const r = 1 / Math.sqrt(s / x.length + eps);
  return x.map((v, i) => (plusOne ? 1 + w[i]! : w[i]!) * v * r);
}

/** gelu(x, approximate="tanh"), Gemma2's gelu_pytorch_tanh. */
function geluTanh(x: number): number {
  return 0.5 * x * (1 + Math.tanh(Math.sqrt(2 / Math.PI) * (x + 0.044715 * x * x * x)));
}

function linear(w: Float32Array, x: Float64Array, out: number): Float64Array {
  const y = new Float64Array(out);
  for (let o = 0; o < out; o++) {
    let s = 0;
    for (let i = 0; i < x.length; i++) s += w[o * x.length + i]! * x[i]!;
    y[o] = s;
  }
  return y;
}

/** Rotates by position `pos`; frequency i is divided by `factors[i]` and cos, sin scaled by `scale` (LongRoPE). */
function rope(v: Float64Array, pos: number, theta: number, factors?: number[], scale = 1): Float64Array {
  const hd = v.length;
  const half = hd / 2;
  const out = new Float64Array(hd);
  for (let i = 0; i < half; i++) {
    const a = pos / ((factors?.[i] ?? 1) * Math.pow(theta, (2 * i) / hd));
    const cos = Math.cos(a) * scale;
    const sin = Math.sin(a) * scale;
    out[i] = v[i]! * cos - v[i + half]! * sin;
    out[i + half] = v[i + half]! * cos + v[i]! * sin;
  }
  return out;
}

/** LongRoPE's factors and scale for a sequence of `length` tokens (none for other families). */
function longRope(c: LlamaConfig, length: number): { factors?: number[]; scale: number } {
  const s = c.rope_scaling;
  if (s?.type !== "longrope") return { scale: 1 };
  const original = c.original_max_position_embeddings!;
  const ratio = c.max_position_embeddings / original;
  return {
    factors: length > original ? s.long_factor : s.short_factor,
    scale: ratio > 1 ? Math.sqrt(1 + Math.log(ratio) / Math.log(original)) : 1,
  };
}

export function referenceHiddenFamily(c: LlamaConfig, w: LlamaWeights, ids: number[]): Float64Array[] {
  const family = w.family ?? "llama";
  const gemma = family === "gemma";
  const d = c.hidden_size;
  const H = c.num_attention_heads;
  const KV = c.num_key_value_heads;
  const hd = c.head_dim;
  const norm = (x: Float64Array, wt: Float32Array) => rmsNorm(x, wt, c.rms_norm_eps, gemma);
  const rotary = longRope(c, ids.length);
  let xs = ids.map((id) =>
    Float64Array.from(w.embed.subarray(id * d, (id + 1) * d)).map((v) => (gemma ? v * Math.sqrt(d) : v)),
  );
  const result: Float64Array[] = [];
  const cap = (x: number, at: number | null | undefined) => (at ? Math.tanh(x / at) * at : x);
  const scaling = 1 / Math.sqrt(c.query_pre_attn_scalar ?? hd);
  for (const [layer, lw] of w.layers.entries()) {
    // transformers' Gemma2: `not bool(layer_idx % 2)` slides; it masks keys j ≤ t − sliding_window.
    const window = layer % 2 === 0 ? (c.sliding_window ?? Infinity) : Infinity;
    const hs = xs.map((x) => norm(x, lw.inputNorm));
    const heads = (
      m: Float32Array,
      bias: Float32Array | undefined,
      n: number,
      h: Float64Array,
      t: number,
      rotate: boolean,
    ) => {
      const all = linear(m, h, n * hd);
      if (bias) all.forEach((y, i) => (all[i] = y + bias[i]!));
      return Array.from({ length: n }, (_, k) =>
        rotate
          ? rope(all.subarray(k * hd, (k + 1) * hd), t, c.rope_theta, rotary.factors, rotary.scale)
          : all.subarray(k * hd, (k + 1) * hd),
      );
    };
    const q = hs.map((h, t) => heads(lw.q, lw.qBias, H, h, t, true));
    const k = hs.map((h, t) => heads(lw.k, lw.kBias, KV, h, t, true));
    const v = hs.map((h, t) => heads(lw.v, lw.vBias, KV, h, t, false));
    xs = xs.map((x, t) => {
      const ctx = new Float64Array(H * hd);
      for (let head = 0; head < H; head++) {
        const kvh = Math.floor(head / (H / KV));
        const scores = Array.from({ length: t + 1 }, (_, s) =>
          s <= t - window
            ? -Infinity
            : cap(q[t]![head]!.reduce((a, qi, i) => a + qi * k[s]![kvh]![i]!, 0) * scaling, c.attn_logit_softcapping),
        );
        const m = Math.max(...scores);
        const e = scores.map((sc) => (sc === -Infinity ? 0 : Math.exp(sc - m)));
        const z = e.reduce((a, b) => a + b, 0);
        for (let s = 0; s <= t; s++) for (let i = 0; i < hd; i++) ctx[head * hd + i]! += (e[s]! / z) * v[s]![kvh]![i]!;
      }
      let attn = linear(lw.o, ctx, d);
      if (lw.postAttnNorm) attn = norm(attn, lw.postAttnNorm);
      const x1 = family === "neox" ? x : x.map((xi, i) => xi + attn[i]!);
      const h2 = norm(x1, lw.postNorm);
      const gate = linear(lw.gate, h2, c.intermediate_size);
      const up = linear(lw.up, h2, c.intermediate_size);
      let mlp = linear(
        lw.down,
        gate.map((g, i) => (gemma ? geluTanh(g) : g / (1 + Math.exp(-g))) * up[i]!),
        d,
      );
      if (lw.postFfNorm) mlp = norm(mlp, lw.postFfNorm);
      return family === "neox" ? x.map((xi, i) => mlp[i]! + attn[i]! + xi) : x1.map((xi, i) => xi + mlp[i]!);
    });
    result.push(xs.at(-1)!);
  }
  result[result.length - 1] = norm(result.at(-1)!, w.norm);
  return result;
}

/** The logits at the last position of `ids`: the LM head, any forced transition, then gemma's final soft-cap. */
export function referenceLogitsFamily(c: LlamaConfig, w: LlamaWeights, ids: number[]): Float64Array {
  const logits = linear(w.lmHead, referenceHiddenFamily(c, w, ids).at(-1)!, c.vocab_size);
  for (const [from, to] of w.forcedNext ?? []) if (ids.at(-1) === from) logits[to]! += FORCED_LOGIT;
  const softcap = c.final_logit_softcapping;
  if (softcap) logits.forEach((l, v) => (logits[v] = Math.tanh(l / softcap) * softcap));
  return logits;
}

/**
 * Greedy decoding over {@link referenceLogitsFamily} by whole-sequence recomputation: its argmax, until an EOS or `maxNew` tokens; the ids
 * generated, the EOS that stopped it included.
 */
export function referenceGreedyFamily(
  c: LlamaConfig,
  w: LlamaWeights,
  prompt: number[],
  eos: ReadonlySet<number>,
  maxNew: number,
): number[] {
  const out: number[] = [];
  while (out.length < maxNew) {
    const ids = [...prompt, ...out];
    const logits = referenceLogitsFamily(c, w, ids);
    let best = 0;
    for (let v = 1; v < logits.length; v++) if (logits[v]! > logits[best]!) best = v;
    out.push(best);
    if (eos.has(best)) break;
  }
  return out;
}
