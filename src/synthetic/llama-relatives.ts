/**
 * Tiny decoders of four Llama relatives, with seeded random weights, written
 * as torch.onnx/optimum export transformers 4.44's code: rotary embeddings
 * (rotate_half over the whole head, tables as initializers), grouped-query
 * attention and one causal-and-padding bias per graph, as llama.ts writes
 * them. Where they part from Llama:
 *
 * - Mistral: a sliding window, keys more than `sliding_window − 1` positions
 *   before the query masked (_update_causal_mask's `arange ≤ cache_position −
 *   sliding_window`).
 * - Mixtral: Mistral with a sparse mixture of SwiGLU experts as the MLP. The
 *   router's softmax goes through `TopK`; the chosen probabilities, divided by
 *   their sum, are scattered (`ScatterElements`) into a zero [B, T, experts]
 *   tensor, every expert runs on every token, and its output is weighted by
 *   its column of that tensor (zero where it was not chosen) and summed.
 * - OLMo (1): LayerNorms without weight or bias (two `Constant`s, ones and
 *   zeros, feed `LayerNormalization`), q, k and v optionally clamped
 *   (`Clip`) to ±clip_qkv after their projections.
 * - StarCoder2: LayerNorms and every projection with bias, a c_fc → tanh GELU
 *   → c_proj MLP, Mistral's sliding window, and the LM head tied to the
 *   embedding.
 *
 * Without a `position_ids` input, positions are past … past + T − 1 for every
 * row (cache_position), so left padding moves a row's positions; rotary
 * attention depends only on their differences, which padding does not change.
 */
import { DataType, floatTensor } from "../onnx/graph.js";
import {
  FLOAT32_LOWEST,
  rotaryTables,
  TOKENIZERS,
  writeKvCache,
  type GraphVariant,
  type TinyModelOptions,
} from "./llama.js";
import {
  finishGraph,
  layerNorm,
  linearLayer,
  lmHead,
  mergeHeads,
  seededDraws,
  startGraph,
  type TorchGraph,
} from "./torch-graph.js";

/** {@link TinyModelOptions} and the knobs these families add. */
export interface LlamaRelativeOptions extends TinyModelOptions {
  /** OLMo: `clip_qkv` (null by default: no clamp). */
  clipQkv?: number | null;
  /** Mixtral: `num_local_experts` (4 by default). */
  experts?: number;
  /** Mixtral: `num_experts_per_tok` (2 by default). */
  expertsPerToken?: number;
}

/** The config.json fields Mistral, Mixtral, OLMo and StarCoder2 share (transformers' names). */
interface RelativeConfigBase {
  hidden_size: number;
  intermediate_size: number;
  num_hidden_layers: number;
  num_attention_heads: number;
  num_key_value_heads: number;
  max_position_embeddings: number;
  rope_theta: number;
  vocab_size: number;
  bos_token_id: number | null;
  eos_token_id: number | number[] | null;
  attention_dropout: number;
}

/** The fields of Mistral's `config.json` (transformers' MistralConfig names). */
export interface MistralConfig extends RelativeConfigBase {
  head_dim: number;
  hidden_act: "silu";
  rms_norm_eps: number;
  /** Keys more than sliding_window − 1 positions back are masked; null: none. */
  sliding_window: number | null;
  tie_word_embeddings: false;
}

/** The fields of Mixtral's `config.json` (transformers' MixtralConfig names). */
export interface MixtralConfig extends RelativeConfigBase {
  hidden_act: "silu";
  rms_norm_eps: number;
  sliding_window: number | null;
  num_local_experts: number;
  num_experts_per_tok: number;
  output_router_logits: false;
  router_aux_loss_coef: number;
  tie_word_embeddings: false;
}

/** The fields of OLMo's `config.json` (transformers' OlmoConfig names); its LayerNorms' eps is fixed at 1e-5. */
export interface OlmoConfig extends RelativeConfigBase {
  hidden_act: "silu";
  attention_bias: false;
  /** q, k and v are clamped to [−clip_qkv, clip_qkv]; null: not clamped. */
  clip_qkv: number | null;
  pad_token_id: number | null;
  tie_word_embeddings: false;
}

/** The fields of StarCoder2's `config.json` (transformers' Starcoder2Config names). */
export interface Starcoder2Config extends RelativeConfigBase {
  hidden_act: "gelu_pytorch_tanh";
  norm_epsilon: number;
  use_bias: true;
  sliding_window: number | null;
  residual_dropout: number;
  embedding_dropout: number;
  tie_word_embeddings: true;
}

/** A LayerNorm's scale and shift. */
export interface LayerNormWeights {
  weight: Float32Array; // [d]
  bias: Float32Array; // [d]
}

/** Attention projections in HuggingFace orientation ([out, in]). */
interface AttentionWeights {
  q: Float32Array; // [H*hd, d]
  k: Float32Array; // [KV*hd, d]
  v: Float32Array; // [KV*hd, d]
  o: Float32Array; // [d, H*hd]
}

/** Mistral's weights: Llama's. */
export interface MistralWeights {
  embed: Float32Array; // [V, d]
  layers: (AttentionWeights & {
    inputNorm: Float32Array; // [d]
    postNorm: Float32Array; // [d]
    gate: Float32Array; // [I, d]
    up: Float32Array; // [I, d]
    down: Float32Array; // [d, I]
  })[];
  norm: Float32Array; // [d]
  lmHead: Float32Array; // [V, d]
}

/** One Mixtral expert (MixtralBlockSparseTop2MLP): w2(silu(w1 x) · w3 x). */
export interface MixtralExpert {
  w1: Float32Array; // [I, d]
  w2: Float32Array; // [d, I]
  w3: Float32Array; // [I, d]
}

/** Mixtral's weights: Mistral's with a router and experts in place of the MLP. */
export interface MixtralWeights {
  embed: Float32Array; // [V, d]
  layers: (AttentionWeights & {
    inputNorm: Float32Array; // [d]
    postNorm: Float32Array; // [d]
    router: Float32Array; // [E, d]
    experts: MixtralExpert[];
  })[];
  norm: Float32Array; // [d]
  lmHead: Float32Array; // [V, d]
}

/** OLMo's weights: no norm weights at all. */
export interface OlmoWeights {
  embed: Float32Array; // [V, d]
  layers: (AttentionWeights & {
    gate: Float32Array; // [I, d]
    up: Float32Array; // [I, d]
    down: Float32Array; // [d, I]
  })[];
  lmHead: Float32Array; // [V, d]
}

/** StarCoder2's weights: biases everywhere, the LM head tied to `embed`. */
export interface Starcoder2Weights {
  embed: Float32Array; // [V, d]; also the LM head
  layers: (AttentionWeights & {
    inputNorm: LayerNormWeights;
    qBias: Float32Array; // [H*hd]
    kBias: Float32Array; // [KV*hd]
    vBias: Float32Array; // [KV*hd]
    oBias: Float32Array; // [d]
    postNorm: LayerNormWeights;
    fc: Float32Array; // [I, d]
    fcBias: Float32Array; // [I]
    proj: Float32Array; // [d, I]
    projBias: Float32Array; // [d]
  })[];
  norm: LayerNormWeights;
}

/** The geometry and tokenizer fields every family takes from the options. */
function baseConfig(o: LlamaRelativeOptions, ropeTheta: number): RelativeConfigBase {
  const hidden = o.hidden ?? 64;
  const heads = o.heads ?? 4;
  const tok = TOKENIZERS[o.tokenizer ?? "llama3.1-1k"];
  return {
    hidden_size: hidden,
    intermediate_size: o.intermediate ?? hidden * 2,
    num_hidden_layers: o.layers ?? 2,
    num_attention_heads: heads,
    num_key_value_heads: o.kvHeads ?? Math.max(1, heads / 2),
    max_position_embeddings: o.maxPositions ?? 2048,
    rope_theta: ropeTheta,
    vocab_size: tok.vocab,
    bos_token_id: tok.bos,
    eos_token_id: o.eosTokenId ?? tok.eos,
    attention_dropout: 0,
  };
}

/** Mistral's config for these options; `sliding_window` defaults to transformers' 4096. */
export function mistralConfig(o: LlamaRelativeOptions = {}): MistralConfig {
  const base = baseConfig(o, 10000);
  return {
    ...base,
    head_dim: base.hidden_size / base.num_attention_heads,
    hidden_act: "silu",
    rms_norm_eps: 1e-5,
    sliding_window: o.slidingWindow === undefined ? 4096 : o.slidingWindow,
    tie_word_embeddings: false,
  };
}

/** Mixtral's config for these options: 4 experts, 2 per token, no sliding window unless asked. */
export function mixtralConfig(o: LlamaRelativeOptions = {}): MixtralConfig {
  return {
    ...baseConfig(o, 1e6),
    hidden_act: "silu",
    rms_norm_eps: 1e-5,
    sliding_window: o.slidingWindow ?? null,
    num_local_experts: o.experts ?? 4,
    num_experts_per_tok: o.expertsPerToken ?? 2,
    output_router_logits: false,
    router_aux_loss_coef: 0.001,
    tie_word_embeddings: false,
  };
}

/** OLMo's config for these options; q, k and v are clamped only when `clipQkv` is given. */
export function olmoConfig(o: LlamaRelativeOptions = {}): OlmoConfig {
  return {
    ...baseConfig(o, 10000),
    hidden_act: "silu",
    attention_bias: false,
    clip_qkv: o.clipQkv ?? null,
    pad_token_id: null,
    tie_word_embeddings: false,
  };
}

/** StarCoder2's config for these options; no sliding window unless asked. */
export function starcoder2Config(o: LlamaRelativeOptions = {}): Starcoder2Config {
  return {
    ...baseConfig(o, 10000),
    hidden_act: "gelu_pytorch_tanh",
    norm_epsilon: 1e-5,
    use_bias: true,
    sliding_window: o.slidingWindow ?? null,
    residual_dropout: 0,
    embedding_dropout: 0,
    tie_word_embeddings: true,
  };
}

/** Head dimension of a config (hidden / heads). */
function headDim(c: RelativeConfigBase): number {
  return c.hidden_size / c.num_attention_heads;
}

/** q, k, v and o of one layer, drawn from streams s … s + 3. */
function attentionDraws(c: RelativeConfigBase, seed: number, s: number): AttentionWeights {
  const { matrix } = seededDraws(seed);
  const d = c.hidden_size;
  const hd = headDim(c);
  return {
    q: matrix(s, c.num_attention_heads * hd, d),
    k: matrix(s + 1, c.num_key_value_heads * hd, d),
    v: matrix(s + 2, c.num_key_value_heads * hd, d),
    o: matrix(s + 3, d, c.num_attention_heads * hd),
  };
}

/** Seeded Mistral weights of a useful scale: activations of order one, norms near one. */
export function mistralWeights(c: MistralConfig, seed: number, embedScale = 1): MistralWeights {
  const { normal, matrix, normWeight } = seededDraws(seed);
  const d = c.hidden_size;
  const I = c.intermediate_size;
  return {
    embed: normal(1, c.vocab_size * d, embedScale),
    layers: Array.from({ length: c.num_hidden_layers }, (_, i) => {
      const s = 100 + 20 * i;
      return {
        inputNorm: normWeight(s, d),
        ...attentionDraws(c, seed, s + 1),
        postNorm: normWeight(s + 5, d),
        gate: matrix(s + 6, I, d),
        up: matrix(s + 7, I, d),
        down: matrix(s + 8, d, I),
      };
    }),
    norm: normWeight(2, d),
    lmHead: matrix(3, c.vocab_size, d),
  };
}

/** Seeded Mixtral weights: Mistral's draws for attention and norms, a router and experts per layer. */
export function mixtralWeights(c: MixtralConfig, seed: number, embedScale = 1): MixtralWeights {
  const { normal, matrix, normWeight } = seededDraws(seed);
  const d = c.hidden_size;
  const I = c.intermediate_size;
  return {
    embed: normal(1, c.vocab_size * d, embedScale),
    layers: Array.from({ length: c.num_hidden_layers }, (_, i) => {
      const s = 100 + 20 * i;
      const e0 = 10000 + 100 * i;
      return {
        inputNorm: normWeight(s, d),
        ...attentionDraws(c, seed, s + 1),
        postNorm: normWeight(s + 5, d),
        router: matrix(s + 6, c.num_local_experts, d),
        experts: Array.from({ length: c.num_local_experts }, (_, e) => ({
          w1: matrix(e0 + 3 * e, I, d),
          w2: matrix(e0 + 3 * e + 1, d, I),
          w3: matrix(e0 + 3 * e + 2, I, d),
        })),
      };
    }),
    norm: normWeight(2, d),
    lmHead: matrix(3, c.vocab_size, d),
  };
}

/** Seeded OLMo weights of a useful scale (its norms have no weights to draw). */
export function olmoWeights(c: OlmoConfig, seed: number, embedScale = 1): OlmoWeights {
  const { normal, matrix } = seededDraws(seed);
  const d = c.hidden_size;
  const I = c.intermediate_size;
  return {
    embed: normal(1, c.vocab_size * d, embedScale),
    layers: Array.from({ length: c.num_hidden_layers }, (_, i) => {
      const s = 100 + 20 * i;
      return {
        ...attentionDraws(c, seed, s + 1),
        gate: matrix(s + 6, I, d),
        up: matrix(s + 7, I, d),
        down: matrix(s + 8, d, I),
      };
    }),
    lmHead: matrix(3, c.vocab_size, d),
  };
}

/** Seeded StarCoder2 weights of a useful scale: q/k/v biases N(0, 0.5), the others N(0, 0.1). */
export function starcoder2Weights(c: Starcoder2Config, seed: number, embedScale = 1): Starcoder2Weights {
  const { normal, matrix, normWeight, normBias, bias } = seededDraws(seed);
  const d = c.hidden_size;
  const I = c.intermediate_size;
  const hd = headDim(c);
  const norm = (stream: number): LayerNormWeights => ({ weight: normWeight(stream, d), bias: normBias(stream + 1, d) });
  return {
    embed: normal(1, c.vocab_size * d, embedScale),
    layers: Array.from({ length: c.num_hidden_layers }, (_, i) => {
      const s = 100 + 20 * i;
      return {
        inputNorm: norm(s),
        ...attentionDraws(c, seed, s + 2),
        qBias: bias(s + 6, c.num_attention_heads * hd),
        kBias: bias(s + 7, c.num_key_value_heads * hd),
        vBias: bias(s + 8, c.num_key_value_heads * hd),
        oBias: normal(s + 9, d, 0.1),
        postNorm: norm(s + 10),
        fc: matrix(s + 12, I, d),
        fcBias: normal(s + 13, I, 0.1),
        proj: matrix(s + 14, d, I),
        projBias: normal(s + 15, d, 0.1),
      };
    }),
    norm: norm(2),
  };
}

/** What every layer's attention reads: the mask bias, the rotary writer and the geometry. */
interface AttentionContext {
  /** [B, 1, T, S]: 0 where a key may be attended, the float32 minimum elsewhere. */
  bias: string;
  /** Rotates a [B, heads, T, hd] tensor by the rotary embedding of the query positions. */
  rope: (scope: string, x: string) => string;
  d: number;
  H: number;
  KV: number;
  hd: number;
}

/**
 * The bias _update_causal_mask adds (eager/sdpa, DynamicCache): key j is
 * allowed for the query at position q when j ≤ q, j > q − sliding_window
 * (with one), and j is not padding. Returns it with the query positions
 * past … total − 1.
 */
function maskBias(p: TorchGraph, window: number | null): { bias: string; qpos: string } {
  const { g, i64 } = p;
  const S = "/model";
  const one = i64("one_i", [1], []);
  const seqLen = g.op1(S, "Gather", [g.op1(S, "Shape", ["input_ids"]), one], { axis: 0 });
  const total = g.op1(S, "Gather", [g.op1(S, "Shape", ["attention_mask"]), one], { axis: 0 });
  const past = g.op1(S, "Sub", [total, seqLen]);
  const kpos = g.op1(S, "Range", [i64("zero_i", [0], []), total, one]);
  const qpos = g.op1(S, "Range", [past, total, one]);
  const kRow = g.op1(S, "Unsqueeze", [kpos, i64("axes_0", [0])]);
  const qCol = g.op1(S, "Unsqueeze", [qpos, i64("axes_1", [1])]);
  let allowed = g.op1(S, "LessOrEqual", [kRow, qCol]); // [T, S]
  if (window !== null) {
    const oldest = g.op1(S, "Sub", [qCol, i64("sliding_window", [window], [])]);
    allowed = g.op1(S, "And", [allowed, g.op1(S, "Greater", [kRow, oldest])]);
  }
  const notPad = g.op1(S, "Cast", ["attention_mask"], { to: DataType.BOOL });
  const notPad4 = g.op1(S, "Unsqueeze", [notPad, i64("axes_12", [1, 2])]); // [B, 1, 1, S]
  const both = g.op1(S, "And", [allowed, notPad4]);
  return { bias: g.op1(S, "Where", [both, p.scalar("zero", 0), p.scalar("lowest", FLOAT32_LOWEST)]), qpos };
}

/**
 * cos and sin at the positions (the `position_ids` input, or `qpos` for every
 * row), gathered once from the tables for every layer; returns the writer of
 * q·cos + rotate_half(q)·sin.
 */
function rotary(p: TorchGraph, c: RelativeConfigBase, qpos: string): AttentionContext["rope"] {
  const { g, i64 } = p;
  const hd = headDim(c);
  const R = "/model/rotary_emb";
  const { cosT, sinT } = rotaryTables({
    head_dim: hd,
    rope_theta: c.rope_theta,
    max_position_embeddings: c.max_position_embeddings,
  });
  const dims = [c.max_position_embeddings, hd];
  const positions = p.hasPositions ? "position_ids" : g.op1(R, "Unsqueeze", [qpos, i64("axes_0", [0])]);
  const at = (table: string) =>
    g.op1(R, "Unsqueeze", [g.op1(R, "Gather", [table, positions], { axis: 0 }), i64("axes_1", [1])]);
  const cos = at(g.floats("model.rotary_emb.cos_cached", cosT, dims));
  const sin = at(g.floats("model.rotary_emb.sin_cached", sinT, dims));
  const last = i64("axis_last", [-1]);
  const start = i64("half_start", [0]);
  const mid = i64("half_mid", [hd / 2]);
  const end = i64("half_end", [hd]);
  return (scope, x) => {
    const x1 = g.op1(scope, "Slice", [x, start, mid, last]);
    const x2 = g.op1(scope, "Slice", [x, mid, end, last]);
    const rot = g.op1(scope, "Concat", [g.op1(scope, "Neg", [x2]), x1], { axis: -1 });
    return g.op1(scope, "Add", [g.op1(scope, "Mul", [x, cos]), g.op1(scope, "Mul", [rot, sin])]);
  };
}

/** The graph's start: inputs and outputs, the mask bias and the rotary writer. */
function startRelative(
  c: RelativeConfigBase,
  window: number | null,
  withPast: boolean,
  variant: GraphVariant,
): { p: TorchGraph; ctx: AttentionContext } {
  const p = startGraph("/model/constants", c.vocab_size, withPast, variant, variant.positionIds ?? true);
  const { bias, qpos } = maskBias(p, window);
  const H = c.num_attention_heads;
  const KV = c.num_key_value_heads;
  return { p, ctx: { bias, rope: rotary(p, c, qpos), d: c.hidden_size, H, KV, hd: headDim(c) } };
}

/** The token embedding `model.embed_tokens`: the stream entering the first block. */
function embedTokens(p: TorchGraph, embed: Float32Array, V: number, d: number): string {
  const table = p.g.floats("model.embed_tokens.weight", embed, [V, d]);
  return p.g.op1("/model/embed_tokens", "Gather", [table, "input_ids"], { axis: 0 });
}

/** RMSNorm as torch exports Mistral's: x · 1/√(mean(x²) + eps), times the weight. */
function rmsNorm(p: TorchGraph, scope: string, x: string, prefix: string, eps: number, weight: Float32Array): string {
  const { g, scalar } = p;
  const m = g.op1(scope, "ReduceMean", [g.op1(scope, "Pow", [x, scalar("two", 2)])], { axes: [-1], keepdims: 1 });
  const r = g.op1(scope, "Div", [
    scalar("one", 1),
    g.op1(scope, "Sqrt", [g.op1(scope, "Add", [m, scalar("eps", eps)])]),
  ]);
  const w = g.floats(`${prefix}.weight`, weight, [weight.length]);
  return g.op1(scope, "Mul", [w, g.op1(scope, "Mul", [x, r])]);
}

/** OlmoLayerNorm: F.layer_norm with no weight and no bias, which torch writes as ones and zeros `Constant`s. */
function olmoNorm(p: TorchGraph, scope: string, x: string, d: number): string {
  const { g } = p;
  const ones = g.op1(scope, "Constant", [], { value: floatTensor("", new Float32Array(d).fill(1), [d]) });
  const zeros = g.op1(scope, "Constant", [], { value: floatTensor("", new Float32Array(d), [d]) });
  return g.op1(scope, "LayerNormalization", [x, ones, zeros], { axis: -1, epsilon: { float: 1e-5 } });
}

/** [B, T, n·hd] → [B, n, T, hd], its shape constant named by n: queries and keys have different head counts. */
function splitHeads(p: TorchGraph, scope: string, y: string, n: number, hd: number): string {
  const shape = p.i64(`shape_heads_${n}`, [0, 0, n, hd]);
  return p.g.op1(scope, "Transpose", [p.g.op1(scope, "Reshape", [y, shape])], { perm: [0, 2, 1, 3] });
}

/** Projection biases (StarCoder2) and the clamp of q, k and v (OLMo's clip_qkv). */
interface AttentionExtras {
  biases?: { q: Float32Array; k: Float32Array; v: Float32Array; o: Float32Array };
  clip?: number | null;
}

/** Layer `i`'s self-attention over the normed stream `h` (rotary, grouped-query, masked); returns o_proj's output. */
function selfAttention(
  p: TorchGraph,
  ctx: AttentionContext,
  i: number,
  h: string,
  w: AttentionWeights,
  extras: AttentionExtras = {},
): string {
  const { g, i64 } = p;
  const { d, H, KV, hd } = ctx;
  const A = `/model/layers.${i}/self_attn`;
  const pre = `model.layers.${i}.self_attn`;
  const { biases, clip } = extras;
  const proj = (name: "q" | "k" | "v", out: number) => {
    const y = linearLayer(p, `${A}/${name}_proj`, h, `${pre}.${name}_proj`, w[name], out, d, biases?.[name]);
    if (clip === undefined || clip === null) return y;
    return g.op1(A, "Clip", [y, p.scalar("clip_min", -clip), p.scalar("clip_max", clip)]);
  };
  const q = ctx.rope(A, splitHeads(p, A, proj("q", H * hd), H, hd));
  const k0 = ctx.rope(A, splitHeads(p, A, proj("k", KV * hd), KV, hd));
  const [k, v] = writeKvCache(g, p, A, i, k0, splitHeads(p, A, proj("v", KV * hd), KV, hd), KV, hd);
  // repeat_kv: each key/value head serves H / KV consecutive query heads.
  const expand = (t: string) =>
    g.op1(A, "Reshape", [
      g.op1(A, "Expand", [g.op1(A, "Unsqueeze", [t, i64("axes_2", [2])]), i64("kv_repeat", [1, 1, H / KV, 1, 1])]),
      i64("shape_merge_kv", [0, H, -1, hd]),
    ]);
  const kT = g.op1(A, "Transpose", [expand(k)], { perm: [0, 1, 3, 2] });
  const scores = g.op1(A, "Mul", [g.op1(A, "MatMul", [q, kT]), p.scalar("attn_scale", 1 / Math.sqrt(hd))]);
  const probs = g.op1(A, "Softmax", [g.op1(A, "Add", [scores, ctx.bias])], { axis: -1 });
  const merged = mergeHeads(p, A, g.op1(A, "MatMul", [probs, expand(v)]), H * hd);
  return linearLayer(p, `${A}/o_proj`, merged, `${pre}.o_proj`, w.o, d, H * hd, biases?.o);
}

/** SwiGLU under `scope`: down(silu(gate(x)) · up(x)), its projections named as the family names them. */
function swiglu(
  p: TorchGraph,
  scope: string,
  prefix: string,
  x: string,
  names: [gate: string, up: string, down: string],
  weights: [gate: Float32Array, up: Float32Array, down: Float32Array],
  d: number,
  I: number,
): string {
  const { g, linear } = p;
  const gate = linear(g, `${scope}/${names[0]}`, x, `${prefix}.${names[0]}.weight`, weights[0], I, d);
  const up = linear(g, `${scope}/${names[1]}`, x, `${prefix}.${names[1]}.weight`, weights[1], I, d);
  const act = g.op1(`${scope}/act_fn`, "Mul", [gate, g.op1(`${scope}/act_fn`, "Sigmoid", [gate])]);
  const gated = g.op1(scope, "Mul", [act, up]);
  return linear(g, `${scope}/${names[2]}`, gated, `${prefix}.${names[2]}.weight`, weights[2], d, I);
}

/**
 * MixtralSparseMoeBlock as one dense graph: softmax of the router logits,
 * TopK, the chosen probabilities over their sum scattered into a zero
 * [B, T, E] tensor, then Σ_e column e · expert_e(x) over every expert.
 */
function sparseMoe(
  p: TorchGraph,
  c: MixtralConfig,
  lw: MixtralWeights["layers"][number],
  i: number,
  x: string,
): string {
  const { g, i64 } = p;
  const d = c.hidden_size;
  const I = c.intermediate_size;
  const E = c.num_local_experts;
  const M = `/model/layers.${i}/block_sparse_moe`;
  const pre = `model.layers.${i}.block_sparse_moe`;
  const logits = linearLayer(p, `${M}/gate`, x, `${pre}.gate`, lw.router, E, d);
  const probs = g.op1(M, "Softmax", [logits], { axis: -1 });
  const [top, chosen] = g.op(M, "TopK", [probs, i64("top_k", [c.num_experts_per_tok])], { axis: -1 }, 2);
  const sum = g.op1(M, "ReduceSum", [top!, i64("axes_last", [-1])], { keepdims: 1 });
  const weights = g.op1(M, "Div", [top!, sum]);
  const zeros = g.op1(M, "ConstantOfShape", [g.op1(M, "Shape", [probs])], {
    value: floatTensor("", Float32Array.of(0), [1]),
  });
  const dense = g.op1(M, "ScatterElements", [zeros, chosen!, weights], { axis: -1 }); // [B, T, E]
  let out = "";
  lw.experts.forEach((ex, e) => {
    const X = `${M}/experts.${e}`;
    const y = swiglu(p, X, `${pre}.experts.${e}`, x, ["w1", "w3", "w2"], [ex.w1, ex.w3, ex.w2], d, I);
    const column = g.op1(M, "Slice", [
      dense,
      i64(`expert_${e}`, [e]),
      i64(`expert_${e + 1}`, [e + 1]),
      i64("axes_last", [-1]),
    ]);
    const weighted = g.op1(X, "Mul", [y, column]);
    out = e === 0 ? weighted : g.op1(M, "Add", [out, weighted]);
  });
  return out;
}

/** gelu_pytorch_tanh as torch's opset-9 symbolic writes it: ½ · x · (1 + tanh(√(2/π) · (x + 0.044715 · x³))). */
function geluTanh(p: TorchGraph, scope: string, x: string): string {
  const { g, scalar } = p;
  const cube = g.op1(scope, "Mul", [x, g.op1(scope, "Mul", [x, x])]);
  const inner = g.op1(scope, "Add", [x, g.op1(scope, "Mul", [scalar("gelu_kappa", 0.044715), cube])]);
  const t = g.op1(scope, "Tanh", [g.op1(scope, "Mul", [scalar("gelu_beta", Math.sqrt(2 / Math.PI)), inner])]);
  const onePlus = g.op1(scope, "Add", [scalar("one", 1), t]);
  return g.op1(scope, "Mul", [scalar("half", 0.5), g.op1(scope, "Mul", [x, onePlus])]);
}

/** The ONNX graph of a Mistral model, torch-export style. */
export function buildMistralOnnx(
  c: MistralConfig,
  w: MistralWeights,
  withPast: boolean,
  variant: GraphVariant = {},
): Uint8Array {
  const { p, ctx } = startRelative(c, c.sliding_window, withPast, variant);
  const { g } = p;
  const d = c.hidden_size;
  const eps = c.rms_norm_eps;
  let x = embedTokens(p, w.embed, c.vocab_size, d);
  w.layers.forEach((lw, i) => {
    const L = `/model/layers.${i}`;
    const pre = `model.layers.${i}`;
    const h = rmsNorm(p, `${L}/input_layernorm`, x, `${pre}.input_layernorm`, eps, lw.inputNorm);
    const x1 = g.op1(L, "Add", [x, selfAttention(p, ctx, i, h, lw)]);
    const h2 = rmsNorm(p, `${L}/post_attention_layernorm`, x1, `${pre}.post_attention_layernorm`, eps, lw.postNorm);
    const mlp = swiglu(
      p,
      `${L}/mlp`,
      `${pre}.mlp`,
      h2,
      ["gate_proj", "up_proj", "down_proj"],
      [lw.gate, lw.up, lw.down],
      d,
      c.intermediate_size,
    );
    x = g.op1(L, "Add", [x1, mlp]);
  });
  lmHead(p, rmsNorm(p, "/model/norm", x, "model.norm", eps, w.norm), w.lmHead, c.vocab_size, d);
  return finishGraph(p, "hsm tiny-mistral");
}

/** The ONNX graph of a Mixtral model, torch-export style (the sparse MLP written densely, see {@link sparseMoe}). */
export function buildMixtralOnnx(
  c: MixtralConfig,
  w: MixtralWeights,
  withPast: boolean,
  variant: GraphVariant = {},
): Uint8Array {
  const { p, ctx } = startRelative(c, c.sliding_window, withPast, variant);
  const { g } = p;
  const d = c.hidden_size;
  const eps = c.rms_norm_eps;
  let x = embedTokens(p, w.embed, c.vocab_size, d);
  w.layers.forEach((lw, i) => {
    const L = `/model/layers.${i}`;
    const pre = `model.layers.${i}`;
    const h = rmsNorm(p, `${L}/input_layernorm`, x, `${pre}.input_layernorm`, eps, lw.inputNorm);
    const x1 = g.op1(L, "Add", [x, selfAttention(p, ctx, i, h, lw)]);
    const h2 = rmsNorm(p, `${L}/post_attention_layernorm`, x1, `${pre}.post_attention_layernorm`, eps, lw.postNorm);
    x = g.op1(L, "Add", [x1, sparseMoe(p, c, lw, i, h2)]);
  });
  lmHead(p, rmsNorm(p, "/model/norm", x, "model.norm", eps, w.norm), w.lmHead, c.vocab_size, d);
  return finishGraph(p, "hsm tiny-mixtral");
}

/** The ONNX graph of an OLMo model, torch-export style. */
export function buildOlmoOnnx(
  c: OlmoConfig,
  w: OlmoWeights,
  withPast: boolean,
  variant: GraphVariant = {},
): Uint8Array {
  const { p, ctx } = startRelative(c, null, withPast, variant);
  const { g } = p;
  const d = c.hidden_size;
  let x = embedTokens(p, w.embed, c.vocab_size, d);
  w.layers.forEach((lw, i) => {
    const L = `/model/layers.${i}`;
    const pre = `model.layers.${i}`;
    const h = olmoNorm(p, `${L}/input_layernorm`, x, d);
    const x1 = g.op1(L, "Add", [x, selfAttention(p, ctx, i, h, lw, { clip: c.clip_qkv })]);
    const h2 = olmoNorm(p, `${L}/post_attention_layernorm`, x1, d);
    const mlp = swiglu(
      p,
      `${L}/mlp`,
      `${pre}.mlp`,
      h2,
      ["gate_proj", "up_proj", "down_proj"],
      [lw.gate, lw.up, lw.down],
      d,
      c.intermediate_size,
    );
    x = g.op1(L, "Add", [x1, mlp]);
  });
  lmHead(p, olmoNorm(p, "/model/norm", x, d), w.lmHead, c.vocab_size, d);
  return finishGraph(p, "hsm tiny-olmo");
}

/** The ONNX graph of a StarCoder2 model, torch-export style. */
export function buildStarcoder2Onnx(
  c: Starcoder2Config,
  w: Starcoder2Weights,
  withPast: boolean,
  variant: GraphVariant = {},
): Uint8Array {
  const { p, ctx } = startRelative(c, c.sliding_window, withPast, variant);
  const { g } = p;
  const d = c.hidden_size;
  const I = c.intermediate_size;
  const eps = c.norm_epsilon;
  let x = embedTokens(p, w.embed, c.vocab_size, d);
  w.layers.forEach((lw, i) => {
    const L = `/model/layers.${i}`;
    const pre = `model.layers.${i}`;
    const norm = (name: string, n: LayerNormWeights, t: string) =>
      layerNorm(p, `${L}/${name}`, t, `${pre}.${name}`, eps, n.weight, n.bias);
    const biases = { q: lw.qBias, k: lw.kBias, v: lw.vBias, o: lw.oBias };
    const x1 = g.op1(L, "Add", [x, selfAttention(p, ctx, i, norm("input_layernorm", lw.inputNorm, x), lw, { biases })]);
    const h2 = norm("post_attention_layernorm", lw.postNorm, x1);
    const M = `${L}/mlp`;
    const up = linearLayer(p, `${M}/c_fc`, h2, `${pre}.mlp.c_fc`, lw.fc, I, d, lw.fcBias);
    const down = linearLayer(
      p,
      `${M}/c_proj`,
      geluTanh(p, `${M}/act`, up),
      `${pre}.mlp.c_proj`,
      lw.proj,
      d,
      I,
      lw.projBias,
    );
    x = g.op1(L, "Add", [x1, down]);
  });
  x = layerNorm(p, "/model/norm", x, "model.norm", eps, w.norm.weight, w.norm.bias);
  lmHead(p, x, w.embed, c.vocab_size, d);
  return finishGraph(p, "hsm tiny-starcoder2");
}

/** config.json: architectures and model_type first, then the config, dtype and use_cache. */
function configJson(architecture: string, modelType: string, c: object, withPast: boolean): string {
  const json = {
    architectures: [architecture],
    model_type: modelType,
    ...c,
    torch_dtype: "float32",
    use_cache: withPast,
  };
  return JSON.stringify(json, null, 2) + "\n";
}

/** The `config.json` transformers writes for this Mistral model. */
export function mistralConfigJson(c: MistralConfig, withPast: boolean): string {
  return configJson("MistralForCausalLM", "mistral", c, withPast);
}

/** The `config.json` transformers writes for this Mixtral model. */
export function mixtralConfigJson(c: MixtralConfig, withPast: boolean): string {
  return configJson("MixtralForCausalLM", "mixtral", c, withPast);
}

/** The `config.json` transformers writes for this OLMo model. */
export function olmoConfigJson(c: OlmoConfig, withPast: boolean): string {
  return configJson("OlmoForCausalLM", "olmo", c, withPast);
}

/** The `config.json` transformers writes for this StarCoder2 model. */
export function starcoder2ConfigJson(c: Starcoder2Config, withPast: boolean): string {
  return configJson("Starcoder2ForCausalLM", "starcoder2", c, withPast);
}
