/**
 * Float64 forward passes of GPT-J and CodeGen over one unpadded sequence,
 * written from the families' definitions in transformers 4.44, not from the
 * ONNX graphs of src/synthetic/interleaved-rotary.ts:
 *
 * - both: h = wte[id]; per block, with a = ln_1(h),
 *   h ← h + out_proj(attn(a)) + fc_out(gelu_new(fc_in(a))); then ln_f and
 *   logits = lm_head·ln_f(h) + lm_head.bias. Attention is causal softmax(q·kᵀ/√hd)
 *   after rotating q and k: for the pair (x_{2i}, x_{2i+1}), i < rotary_dim/2,
 *   at position p and angle θ = p / 10000^(2i/rotary_dim),
 *   (x_{2i}cos θ − x_{2i+1}sin θ, x_{2i+1}cos θ + x_{2i}sin θ); dims from
 *   rotary_dim on are left as they are.
 * - GPT-J: q, k, v from q_proj, k_proj, v_proj, head h taking dims h·hd … (h+1)·hd − 1.
 * - CodeGen: one qkv_proj of 3d rows cut into 4 equal chunks; chunk m holds,
 *   one after another, the q, v and k of heads (H/4)·m … (H/4)·(m+1) − 1.
 *
 * Both return, per block, the residual stream at the last position (the last
 * block's after the final norm), and the last position's logits. `positions`
 * replaces 0 … n − 1, as a `position_ids` input does.
 */
import type { CodegenConfig, CodegenWeights, GptjConfig, GptjWeights } from "../../src/synthetic/interleaved-rotary.js";

export interface RotaryReference {
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
function linear(w: Float32Array, x: Float64Array, out: number, b?: Float32Array): Float64Array {
  const y = new Float64Array(out);
  for (let o = 0; o < out; o++) {
    let s = b ? b[o]! : 0;
    for (let i = 0; i < x.length; i++) s += w[o * x.length + i]! * x[i]!;
    y[o] = s;
  }
  return y;
}

function geluNew(x: number): number {
  return 0.5 * x * (1 + Math.tanh(Math.sqrt(2 / Math.PI) * (x + 0.044715 * x ** 3)));
}

/** Rotates the interleaved pairs of the first `rd` dims of every head of x [H·hd] to position p. */
function rotary(x: Float64Array, p: number, H: number, hd: number, rd: number): Float64Array {
  const y = Float64Array.from(x);
  for (let h = 0; h < H; h++) {
    for (let i = 0; i < rd / 2; i++) {
      const theta = p / Math.pow(10000, (2 * i) / rd);
      const [c, s] = [Math.cos(theta), Math.sin(theta)];
      const a = x[h * hd + 2 * i]!;
      const b = x[h * hd + 2 * i + 1]!;
      y[h * hd + 2 * i] = a * c - b * s;
      y[h * hd + 2 * i + 1] = b * c + a * s;
    }
  }
  return y;
}

/** Causal attention of every position over itself and the earlier ones; q, k, v per position [H·hd]. */
function attention(q: Float64Array[], k: Float64Array[], v: Float64Array[], H: number): Float64Array[] {
  const hd = q[0]!.length / H;
  const scale = 1 / Math.sqrt(hd);
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

type Config = GptjConfig | CodegenConfig;
type Block = GptjWeights["layers"][number] | CodegenWeights["layers"][number];

/** The shared parallel-block forward; `project` gives a block's unrotated q, k, v of one normed position. */
function forward<B extends Block>(
  c: Config,
  w: { wte: Float32Array; layers: B[]; lnfWeight: Float32Array; lnfBias: Float32Array } & {
    lmHead: Float32Array;
    lmHeadBias: Float32Array;
  },
  ids: number[],
  positions: number[],
  project: (lw: B, a: Float64Array) => [q: Float64Array, k: Float64Array, v: Float64Array],
): RotaryReference {
  const d = c.n_embd;
  const H = c.n_head;
  const hd = d / H;
  const I = c.n_inner ?? 4 * d;
  const eps = c.layer_norm_epsilon;
  let xs = ids.map((id) => Float64Array.from(w.wte.subarray(id * d, (id + 1) * d)));
  const hidden: Float64Array[] = [];
  for (const lw of w.layers) {
    const as = xs.map((x) => layerNorm(x, lw.ln1Weight, lw.ln1Bias, eps));
    const qkv = as.map((a) => project(lw, a));
    const ctx = attention(
      qkv.map(([q], t) => rotary(q, positions[t]!, H, hd, c.rotary_dim)),
      qkv.map(([, k], t) => rotary(k, positions[t]!, H, hd, c.rotary_dim)),
      qkv.map(([, , v]) => v),
      H,
    );
    xs = xs.map((x, t) => {
      const attn = linear(lw.out, ctx[t]!, d);
      const mlp = linear(lw.fcOut, linear(lw.fcIn, as[t]!, I, lw.fcInBias).map(geluNew), d, lw.fcOutBias);
      return x.map((v, i) => v + attn[i]! + mlp[i]!);
    });
    hidden.push(xs.at(-1)!);
  }
  const normed = layerNorm(hidden.at(-1)!, w.lnfWeight, w.lnfBias, eps);
  hidden[hidden.length - 1] = normed;
  return { hidden, logits: linear(w.lmHead, normed, c.vocab_size, w.lmHeadBias) };
}

/** GPT-J's forward pass; positions 0 … n − 1 unless given. */
export function referenceGptj(
  c: GptjConfig,
  w: GptjWeights,
  ids: number[],
  positions: number[] = ids.map((_, t) => t),
): RotaryReference {
  const d = c.n_embd;
  return forward(c, w, ids, positions, (lw, a) => [linear(lw.q, a, d), linear(lw.k, a, d), linear(lw.v, a, d)]);
}

/** CodeGen's forward pass; positions 0 … n − 1 unless given. */
export function referenceCodegen(
  c: CodegenConfig,
  w: CodegenWeights,
  ids: number[],
  positions: number[] = ids.map((_, t) => t),
): RotaryReference {
  const d = c.n_embd;
  const chunk = (3 * d) / 4;
  const local = d / 4;
  return forward(c, w, ids, positions, (lw, a) => {
    const all = linear(lw.qkv, a, 3 * d);
    // Concatenating the chunks' pieces in chunk order lays the heads out one after another.
    const part = (j: number) => {
      const out = new Float64Array(d);
      for (let m = 0; m < 4; m++) out.set(all.subarray(m * chunk + j * local, m * chunk + (j + 1) * local), m * local);
      return out;
    };
    return [part(0), part(2), part(1)];
  });
}
