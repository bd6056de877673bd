/**
 * Tiny decoders of three families with rotary positions (rotate_half, not
 * interleaved) and LayerNorm with bias, written as torch.onnx/optimum export
 * transformers 4.44's code:
 *
 * - Falcon, 7B style (`/transformer/h.N/...`): multi-query attention from one
 *   bias-free `query_key_value` (the heads' q, then one k and one v head),
 *   rotary over the whole head, one `input_layernorm` feeding attention and an
 *   erf-GELU MLP in parallel, `ln_f`, an LM head tied to the embedding; its
 *   cache holds the one key/value head, [batch, 1, seq, head_dim].
 * - Phi (Phi-1/1.5/2, `/model/layers.N/...`): biased q/k/v and `dense`,
 *   rotary on the first head_dim × partial_rotary_factor features of each
 *   head only, one `input_layernorm` feeding attention and a gelu_new MLP in
 *   parallel, `final_layernorm`, an untied LM head with a bias.
 * - StableLM (stablelm-2 style, `/model/layers.N/...`): sequential blocks,
 *   q/k/v with biases (use_qkv_bias) and a bias-free `o_proj`, rotary on a
 *   quarter of each head, a SwiGLU MLP, `norm`, an untied bias-free LM head.
 *
 * Without a `position_ids` input all three count positions as 4.44 does when
 * none is given: arange(past_length, past_length + T), the cache's length
 * onwards, whatever the attention mask says, so left padding moves a row's
 * positions (rotary attention sees only their differences).
 */
import { DataType } from "../onnx/graph.js";
import { pastInputName } from "../onnx/kv-cache.js";
import { FLOAT32_LOWEST, TOKENIZERS, writeKvCache, type GraphVariant, type TinyModelOptions } from "./llama.js";
import {
  finishGraph,
  layerNorm,
  linearLayer,
  lmHead,
  mergeHeads,
  seededDraws,
  splitHeads,
  startGraph,
  type TorchGraph,
} from "./torch-graph.js";

/** The fields of Falcon's `config.json` this writer fills (transformers' FalconConfig names). */
export interface FalconConfig {
  hidden_size: number;
  num_hidden_layers: number;
  num_attention_heads: number;
  /** Read only by the new decoder architecture; multi-query Falcon has one key/value head whatever this says. */
  num_kv_heads: number;
  /** The MLP's width (4 × hidden_size). */
  ffn_hidden_size: number;
  activation: "gelu";
  layer_norm_epsilon: number;
  max_position_embeddings: number;
  rope_theta: number;
  multi_query: true;
  parallel_attn: true;
  new_decoder_architecture: false;
  bias: false;
  alibi: false;
  vocab_size: number;
  bos_token_id: number | null;
  eos_token_id: number | number[] | null;
  tie_word_embeddings: true;
}

/** The fields of Phi's `config.json` this writer fills (transformers' PhiConfig names). */
export interface PhiConfig {
  hidden_size: number;
  intermediate_size: number;
  num_hidden_layers: number;
  num_attention_heads: number;
  /** Written equal to num_attention_heads (Phi-1/1.5/2 have no grouped-query attention). */
  num_key_value_heads: number;
  hidden_act: "gelu_new";
  max_position_embeddings: number;
  layer_norm_eps: number;
  rope_theta: number;
  /** The share of each head the rotary embedding turns (its first int(head_dim × this) features). */
  partial_rotary_factor: number;
  qk_layernorm: false;
  vocab_size: number;
  bos_token_id: number | null;
  eos_token_id: number | number[] | null;
  tie_word_embeddings: false;
}

/** The fields of StableLM's `config.json` this writer fills (transformers' StableLmConfig names). */
export interface StablelmConfig {
  hidden_size: number;
  intermediate_size: number;
  num_hidden_layers: number;
  num_attention_heads: number;
  /** Written equal to num_attention_heads. */
  num_key_value_heads: number;
  hidden_act: "silu";
  max_position_embeddings: number;
  layer_norm_eps: number;
  rope_theta: number;
  partial_rotary_factor: number;
  /** Biases on q_proj, k_proj and v_proj (stablelm-2-1.6b has them). */
  use_qkv_bias: boolean;
  qk_layernorm: false;
  use_parallel_residual: false;
  vocab_size: number;
  bos_token_id: number | null;
  eos_token_id: number | number[] | null;
  tie_word_embeddings: false;
}

/** A LayerNorm's scale and shift. */
export interface LayerNormWeights {
  weight: Float32Array; // [d]
  bias: Float32Array; // [d]
}

/** Falcon's weights in HuggingFace orientation ([out, in]); no linear biases (bias: false). */
export interface FalconWeights {
  /** [V, d]; also the LM head (tied). */
  embed: Float32Array;
  layers: {
    inputNorm: LayerNormWeights;
    /** [(H + 2)·hd, d]: the H query heads' rows, then the key head's, then the value head's. */
    qkv: Float32Array;
    dense: Float32Array; // [d, d]
    up: Float32Array; // [F, d]
    down: Float32Array; // [d, F]
  }[];
  norm: LayerNormWeights;
}

/** Phi's weights in HuggingFace orientation ([out, in]). */
export interface PhiWeights {
  embed: Float32Array; // [V, d]
  layers: {
    inputNorm: LayerNormWeights;
    q: Float32Array; // [d, d]
    qBias: Float32Array; // [d]
    k: Float32Array; // [d, d]
    kBias: Float32Array; // [d]
    v: Float32Array; // [d, d]
    vBias: Float32Array; // [d]
    dense: Float32Array; // [d, d]
    denseBias: Float32Array; // [d]
    fc1: Float32Array; // [I, d]
    fc1Bias: Float32Array; // [I]
    fc2: Float32Array; // [d, I]
    fc2Bias: Float32Array; // [d]
  }[];
  finalNorm: LayerNormWeights;
  lmHead: Float32Array; // [V, d]
  lmHeadBias: Float32Array; // [V]
}

/** StableLM's weights in HuggingFace orientation ([out, in]). */
export interface StablelmWeights {
  embed: Float32Array; // [V, d]
  layers: {
    inputNorm: LayerNormWeights;
    q: Float32Array; // [d, d]
    k: Float32Array; // [d, d]
    v: Float32Array; // [d, d]
    /** Present when use_qkv_bias. */
    qkvBias?: { q: Float32Array; k: Float32Array; v: Float32Array };
    o: Float32Array; // [d, d]
    postNorm: LayerNormWeights;
    gate: Float32Array; // [I, d]
    up: Float32Array; // [I, d]
    down: Float32Array; // [d, I]
  }[];
  norm: LayerNormWeights;
  lmHead: Float32Array; // [V, d]
}

/** The tokenizer's vocabulary and special ids (the 1k-rank Llama 3.1 cut unless asked otherwise). */
function tokenIds(o: TinyModelOptions): Pick<PhiConfig, "vocab_size" | "bos_token_id" | "eos_token_id"> {
  const tok = TOKENIZERS[o.tokenizer ?? "llama3.1-1k"];
  return { vocab_size: tok.vocab, bos_token_id: tok.bos, eos_token_id: o.eosTokenId ?? tok.eos };
}

/** Falcon-7B-style config for these options; `intermediate` is ignored (the MLP is 4 × hidden wide). */
export function falconConfig(o: TinyModelOptions = {}): FalconConfig {
  const hidden = o.hidden ?? 64;
  const heads = o.heads ?? 4;
  return {
    hidden_size: hidden,
    num_hidden_layers: o.layers ?? 4,
    num_attention_heads: heads,
    num_kv_heads: heads,
    ffn_hidden_size: 4 * hidden,
    activation: "gelu",
    layer_norm_epsilon: 1e-5,
    max_position_embeddings: o.maxPositions ?? 2048,
    rope_theta: 10000,
    multi_query: true,
    parallel_attn: true,
    new_decoder_architecture: false,
    bias: false,
    alibi: false,
    ...tokenIds(o),
    tie_word_embeddings: true,
  };
}

/** Phi-2-style config for these options; `overrides` sets the rotary share (0.5 by default). */
export function phiConfig(
  o: TinyModelOptions = {},
  overrides: Partial<Pick<PhiConfig, "partial_rotary_factor">> = {},
): PhiConfig {
  const hidden = o.hidden ?? 64;
  const heads = o.heads ?? 4;
  return {
    hidden_size: hidden,
    intermediate_size: o.intermediate ?? 4 * hidden,
    num_hidden_layers: o.layers ?? 4,
    num_attention_heads: heads,
    num_key_value_heads: heads,
    hidden_act: "gelu_new",
    max_position_embeddings: o.maxPositions ?? 2048,
    layer_norm_eps: 1e-5,
    rope_theta: 10000,
    partial_rotary_factor: 0.5,
    qk_layernorm: false,
    ...tokenIds(o),
    tie_word_embeddings: false,
    ...overrides,
  };
}

/** stablelm-2-style config; `overrides` sets use_qkv_bias (true by default) and the rotary share (0.25). */
export function stablelmConfig(
  o: TinyModelOptions = {},
  overrides: Partial<Pick<StablelmConfig, "use_qkv_bias" | "partial_rotary_factor">> = {},
): StablelmConfig {
  const hidden = o.hidden ?? 64;
  const heads = o.heads ?? 4;
  return {
    hidden_size: hidden,
    intermediate_size: o.intermediate ?? Math.round(2.75 * hidden),
    num_hidden_layers: o.layers ?? 4,
    num_attention_heads: heads,
    num_key_value_heads: heads,
    hidden_act: "silu",
    max_position_embeddings: o.maxPositions ?? 4096,
    layer_norm_eps: 1e-5,
    rope_theta: 10000,
    partial_rotary_factor: 0.25,
    use_qkv_bias: true,
    qk_layernorm: false,
    use_parallel_residual: false,
    ...tokenIds(o),
    tie_word_embeddings: false,
    ...overrides,
  };
}

/** Draws a LayerNorm's weight (1 + N(0, 0.1)) and bias (N(0, 0.1)) from streams `s` and `s + 1`. */
function drawNorm(r: ReturnType<typeof seededDraws>, s: number, d: number): LayerNormWeights {
  return { weight: r.normWeight(s, d), bias: r.normBias(s + 1, d) };
}

/** Seeded Falcon weights of a useful scale: activations of order one. */
export function falconWeights(c: FalconConfig, seed: number, embedScale = 1): FalconWeights {
  const d = c.hidden_size;
  const hd = d / c.num_attention_heads;
  const F = c.ffn_hidden_size;
  const r = seededDraws(seed);
  return {
    embed: r.normal(1, c.vocab_size * d, embedScale),
    layers: Array.from({ length: c.num_hidden_layers }, (_, i) => {
      const s = 100 + 20 * i;
      return {
        inputNorm: drawNorm(r, s, d),
        qkv: r.matrix(s + 2, d + 2 * hd, d),
        dense: r.matrix(s + 3, d, d),
        up: r.matrix(s + 4, F, d),
        down: r.matrix(s + 5, d, F),
      };
    }),
    norm: drawNorm(r, 2, d),
  };
}

/** Seeded Phi weights of a useful scale: activations of order one. */
export function phiWeights(c: PhiConfig, seed: number, embedScale = 1): PhiWeights {
  const d = c.hidden_size;
  const I = c.intermediate_size;
  const r = seededDraws(seed);
  return {
    embed: r.normal(1, c.vocab_size * d, embedScale),
    layers: Array.from({ length: c.num_hidden_layers }, (_, i) => {
      const s = 100 + 20 * i;
      return {
        inputNorm: drawNorm(r, s, d),
        q: r.matrix(s + 2, d, d),
        qBias: r.bias(s + 3, d),
        k: r.matrix(s + 4, d, d),
        kBias: r.bias(s + 5, d),
        v: r.matrix(s + 6, d, d),
        vBias: r.bias(s + 7, d),
        dense: r.matrix(s + 8, d, d),
        denseBias: r.bias(s + 9, d),
        fc1: r.matrix(s + 10, I, d),
        fc1Bias: r.bias(s + 11, I),
        fc2: r.matrix(s + 12, d, I),
        fc2Bias: r.bias(s + 13, d),
      };
    }),
    finalNorm: drawNorm(r, 2, d),
    lmHead: r.matrix(4, c.vocab_size, d),
    lmHeadBias: r.bias(5, c.vocab_size),
  };
}

/** Seeded StableLM weights of a useful scale: activations of order one. */
export function stablelmWeights(c: StablelmConfig, seed: number, embedScale = 1): StablelmWeights {
  const d = c.hidden_size;
  const I = c.intermediate_size;
  const r = seededDraws(seed);
  return {
    embed: r.normal(1, c.vocab_size * d, embedScale),
    layers: Array.from({ length: c.num_hidden_layers }, (_, i) => {
      const s = 100 + 20 * i;
      return {
        inputNorm: drawNorm(r, s, d),
        q: r.matrix(s + 2, d, d),
        k: r.matrix(s + 3, d, d),
        v: r.matrix(s + 4, d, d),
        ...(c.use_qkv_bias ? { qkvBias: { q: r.bias(s + 5, d), k: r.bias(s + 6, d), v: r.bias(s + 7, d) } } : {}),
        o: r.matrix(s + 8, d, d),
        postNorm: drawNorm(r, s + 9, d),
        gate: r.matrix(s + 11, I, d),
        up: r.matrix(s + 12, I, d),
        down: r.matrix(s + 13, d, I),
      };
    }),
    norm: drawNorm(r, 2, d),
    lmHead: r.matrix(4, c.vocab_size, d),
  };
}

/** What every layer of these graphs reads: the additive attention mask and the rotary cos and sin. */
interface Shared {
  /** [B, 1, T, S]: 0 where a key is allowed (causal, not padding), the float32 minimum elsewhere. */
  bias: string;
  /** [B or 1, 1, T, rotary dims], broadcast over the heads. */
  cos: string;
  sin: string;
}

/** The cos and sin tables [positions, r]: angle p · θ^(−2i/r), the r/2 frequencies twice over (rotate_half's layout). */
function rotaryTables(positions: number, r: number, theta: number): { cosT: Float32Array; sinT: Float32Array } {
  const half = r / 2;
  const cosT = new Float32Array(positions * r);
  const sinT = new Float32Array(positions * r);
  for (let p = 0; p < positions; p++) {
    for (let i = 0; i < half; i++) {
      const invFreq = Math.fround(1 / Math.pow(theta, (2 * i) / r));
      const angle = Math.fround(p * invFreq);
      cosT[p * r + i] = cosT[p * r + i + half] = Math.cos(angle);
      sinT[p * r + i] = sinT[p * r + i + half] = Math.sin(angle);
    }
  }
  return { cosT, sinT };
}

/**
 * The mask bias and the rotary cos/sin every layer shares, under `root` (`/transformer`, `/model`).
 * cache_position = arange(past, past + T), past the cache's length (0 without past inputs): the causal
 * mask's query positions and, without a `position_ids` input, the rotary positions of every row.
 */
function shared(p: TorchGraph, root: string, prefix: string, maxPositions: number, r: number, theta: number): Shared {
  const { g, i64 } = p;
  const one = i64("one_i", [1], []);
  const seqLen = g.op1(root, "Gather", [g.op1(root, "Shape", ["input_ids"]), one], { axis: 0 });
  const past = p.withPast
    ? g.op1(root, "Gather", [g.op1(root, "Shape", [pastInputName(0, "key")]), i64("two_i", [2], [])], { axis: 0 })
    : i64("zero_i", [0], []);
  const cachePosition = g.op1(root, "Range", [past, g.op1(root, "Add", [past, seqLen]), one]);
  const total = g.op1(root, "Gather", [g.op1(root, "Shape", ["attention_mask"]), one], { axis: 0 });
  const kpos = g.op1(root, "Range", [i64("zero_i", [0], []), total, one]);
  const kRow = g.op1(root, "Unsqueeze", [kpos, i64("axes_0", [0])]);
  const qCol = g.op1(root, "Unsqueeze", [cachePosition, i64("axes_1", [1])]);
  const causal = g.op1(root, "LessOrEqual", [kRow, qCol]); // [T, S]
  const notPad = g.op1(root, "Cast", ["attention_mask"], { to: DataType.BOOL });
  const allowed = g.op1(root, "And", [causal, g.op1(root, "Unsqueeze", [notPad, i64("axes_12", [1, 2])])]);
  const bias = g.op1(root, "Where", [allowed, p.scalar("zero", 0), p.scalar("lowest", FLOAT32_LOWEST)]);

  const R = `${root}/rotary_emb`;
  const { cosT, sinT } = rotaryTables(maxPositions, r, theta);
  const positions = p.hasPositions ? "position_ids" : g.op1(R, "Unsqueeze", [cachePosition, i64("axes_0", [0])]);
  const at = (table: string) =>
    g.op1(R, "Unsqueeze", [g.op1(R, "Gather", [table, positions], { axis: 0 }), i64("axes_1", [1])]);
  const cos = at(g.floats(`${prefix}.rotary_emb.cos_cached`, cosT, [maxPositions, r]));
  const sin = at(g.floats(`${prefix}.rotary_emb.sin_cached`, sinT, [maxPositions, r]));
  return { bias, cos, sin };
}

/**
 * apply_rotary_pos_emb on the first `r` of the `hd` features of x [B, heads, T, hd]:
 * x·cos + rotate_half(x)·sin there, the rest passed through (Phi's and StableLM's q_rot / q_pass).
 */
function rotate(p: TorchGraph, scope: string, x: string, s: Shared, r: number, hd: number): string {
  const { g, i64 } = p;
  const axis = i64("axis_last", [-1]);
  const slice = (t: string, from: number, to: number) =>
    g.op1(scope, "Slice", [t, i64(`at_${from}`, [from]), i64(`at_${to}`, [to]), axis]);
  const rot = r === hd ? x : slice(x, 0, r);
  const turned = g.op1(scope, "Concat", [g.op1(scope, "Neg", [slice(rot, r / 2, r)]), slice(rot, 0, r / 2)], {
    axis: -1,
  });
  const embedded = g.op1(scope, "Add", [g.op1(scope, "Mul", [rot, s.cos]), g.op1(scope, "Mul", [turned, s.sin])]);
  return r === hd ? embedded : g.op1(scope, "Concat", [embedded, slice(x, r, hd)], { axis: -1 });
}

/** softmax(q·kᵀ / √hd + mask)·v, [B, H, T, hd]; k and v may have one head (multi-query), broadcast by MatMul. */
function attend(p: TorchGraph, scope: string, q: string, k: string, v: string, s: Shared, hd: number): string {
  const { g } = p;
  const kt = g.op1(scope, "Transpose", [k], { perm: [0, 1, 3, 2] });
  const scores = g.op1(scope, "Div", [g.op1(scope, "MatMul", [q, kt]), p.scalar("sqrt_head_dim", Math.sqrt(hd))]);
  const probs = g.op1(scope, "Softmax", [g.op1(scope, "Add", [scores, s.bias])], { axis: -1 });
  return g.op1(scope, "MatMul", [probs, v]);
}

/** GELU with erf as torch exports nn.functional.gelu: x · (1 + erf(x / √2)) · 0.5. */
function erfGelu(p: TorchGraph, scope: string, x: string): string {
  const { g, scalar } = p;
  const erf = g.op1(scope, "Erf", [g.op1(scope, "Div", [x, scalar("sqrt_2", Math.SQRT2)])]);
  const plusOne = g.op1(scope, "Add", [erf, scalar("one", 1)]);
  return g.op1(scope, "Mul", [g.op1(scope, "Mul", [x, plusOne]), scalar("half", 0.5)]);
}

/** gelu_new, 0.5·x·(1 + tanh(√(2/π)·(x + 0.044715·x³))), op by op as torch exports NewGELUActivation. */
function geluNew(p: TorchGraph, scope: string, x: string): string {
  const { g, scalar } = p;
  const half = g.op1(scope, "Mul", [scalar("half", 0.5), x]);
  const cube = g.op1(scope, "Pow", [x, scalar("three", 3)]);
  const inner = g.op1(scope, "Add", [x, g.op1(scope, "Mul", [scalar("gelu_coeff", 0.044715), cube])]);
  const tanh = g.op1(scope, "Tanh", [g.op1(scope, "Mul", [scalar("sqrt_2_over_pi", Math.sqrt(2 / Math.PI)), inner])]);
  return g.op1(scope, "Mul", [half, g.op1(scope, "Add", [scalar("one", 1), tanh])]);
}

/** The token embedding `Gather` of `${prefix}.weight` under `scope`. */
function embed(p: TorchGraph, scope: string, prefix: string, weight: Float32Array, V: number, d: number): string {
  return p.g.op1(scope, "Gather", [p.g.floats(`${prefix}.weight`, weight, [V, d]), "input_ids"], { axis: 0 });
}

/** The ONNX graph of a multi-query Falcon (FalconForCausalLM, rotary, parallel attention), torch-export style. */
export function buildFalconOnnx(
  c: FalconConfig,
  w: FalconWeights,
  withPast: boolean,
  variant: GraphVariant = {},
): Uint8Array {
  const p = startGraph("/transformer/constants", c.vocab_size, withPast, variant, variant.positionIds ?? true);
  const { g, i64 } = p;
  const { hidden_size: d, num_attention_heads: H, layer_norm_epsilon: eps, vocab_size: V } = c;
  const hd = d / H;
  const F = c.ffn_hidden_size;
  let x = embed(p, "/transformer/word_embeddings", "transformer.word_embeddings", w.embed, V, d);
  const s = shared(p, "/transformer", "transformer", c.max_position_embeddings, hd, c.rope_theta);
  w.layers.forEach((lw, i) => {
    const L = `/transformer/h.${i}`;
    const pre = `transformer.h.${i}`;
    const A = `${L}/self_attention`;
    const M = `${L}/mlp`;
    const h = layerNorm(
      p,
      `${L}/input_layernorm`,
      x,
      `${pre}.input_layernorm`,
      eps,
      lw.inputNorm.weight,
      lw.inputNorm.bias,
    );
    const fused = linearLayer(
      p,
      `${A}/query_key_value`,
      h,
      `${pre}.self_attention.query_key_value`,
      lw.qkv,
      d + 2 * hd,
      d,
    );
    // fused_qkv.view(B, T, H + 2, hd): heads 0 … H − 1 are the queries, H the key, H + 1 the value.
    const perHead = g.op1(A, "Reshape", [fused, i64("shape_fused_qkv", [0, 0, H + 2, hd])]);
    const axis2 = i64("axis_2", [2]);
    const pick = (from: number, to: number) =>
      g.op1(A, "Transpose", [g.op1(A, "Slice", [perHead, i64(`at_${from}`, [from]), i64(`at_${to}`, [to]), axis2])], {
        perm: [0, 2, 1, 3],
      });
    const q = rotate(p, A, pick(0, H), s, hd, hd);
    const [k, v] = writeKvCache(p.g, p, A, i, rotate(p, A, pick(H, H + 1), s, hd, hd), pick(H + 1, H + 2), 1, hd);
    const ctx = mergeHeads(p, A, attend(p, A, q, k, v, s, hd), d);
    const attn = linearLayer(p, `${A}/dense`, ctx, `${pre}.self_attention.dense`, lw.dense, d, d);
    // The MLP reads the same normed stream (parallel_attn); mlp_output += attention_output; residual + that.
    const up = linearLayer(p, `${M}/dense_h_to_4h`, h, `${pre}.mlp.dense_h_to_4h`, lw.up, F, d);
    const down = linearLayer(
      p,
      `${M}/dense_4h_to_h`,
      erfGelu(p, `${M}/act`, up),
      `${pre}.mlp.dense_4h_to_h`,
      lw.down,
      d,
      F,
    );
    x = g.op1(L, "Add", [x, g.op1(L, "Add", [down, attn])]);
  });
  x = layerNorm(p, "/transformer/ln_f", x, "transformer.ln_f", eps, w.norm.weight, w.norm.bias);
  lmHead(p, x, w.embed, V, d);
  return finishGraph(p, "hsm tiny-falcon");
}

/** The untied LM head with a bias: the writer's product, then an `Add` whose output is `logits`. */
function biasedLmHead(p: TorchGraph, x: string, weight: Float32Array, bias: Float32Array, V: number, d: number): void {
  const y = p.linear(p.g, "/lm_head", x, "lm_head.weight", weight, V, d);
  const sum = p.g.op1("/lm_head", "Add", [y, p.g.floats("lm_head.bias", bias, [V])]);
  const node = p.g.nodes.at(-1)!;
  node.output = node.output!.map((o) => (o === sum ? "logits" : o));
}

/** q, k and v of a [B, T, d] stream split into heads, q and k rotated on their first `r` features. */
function rotaryHeads(
  p: TorchGraph,
  A: string,
  s: Shared,
  H: number,
  hd: number,
  r: number,
  [qy, ky, vy]: [string, string, string],
): [q: string, k: string, v: string] {
  return [
    rotate(p, A, splitHeads(p, A, qy, H, hd), s, r, hd),
    rotate(p, A, splitHeads(p, A, ky, H, hd), s, r, hd),
    splitHeads(p, A, vy, H, hd),
  ];
}

/** int(head_dim × partial_rotary_factor), the rotary share of each head. */
function rotaryDims(hd: number, factor: number): number {
  return Math.floor(hd * factor);
}

/** The ONNX graph of a Phi model (PhiForCausalLM, Phi-1/1.5/2), torch-export style. */
export function buildPhiOnnx(c: PhiConfig, w: PhiWeights, withPast: boolean, variant: GraphVariant = {}): Uint8Array {
  const p = startGraph("/model/constants", c.vocab_size, withPast, variant, variant.positionIds ?? true);
  const { g } = p;
  const { hidden_size: d, num_attention_heads: H, layer_norm_eps: eps, vocab_size: V } = c;
  const hd = d / H;
  const I = c.intermediate_size;
  const r = rotaryDims(hd, c.partial_rotary_factor);
  let x = embed(p, "/model/embed_tokens", "model.embed_tokens", w.embed, V, d);
  const s = shared(p, "/model", "model", c.max_position_embeddings, r, c.rope_theta);
  w.layers.forEach((lw, i) => {
    const L = `/model/layers.${i}`;
    const pre = `model.layers.${i}`;
    const A = `${L}/self_attn`;
    const M = `${L}/mlp`;
    const h = layerNorm(
      p,
      `${L}/input_layernorm`,
      x,
      `${pre}.input_layernorm`,
      eps,
      lw.inputNorm.weight,
      lw.inputNorm.bias,
    );
    const proj = (name: string, wt: Float32Array, b: Float32Array) =>
      linearLayer(p, `${A}/${name}`, h, `${pre}.self_attn.${name}`, wt, d, d, b);
    const [q, k0, v0] = rotaryHeads(p, A, s, H, hd, r, [
      proj("q_proj", lw.q, lw.qBias),
      proj("k_proj", lw.k, lw.kBias),
      proj("v_proj", lw.v, lw.vBias),
    ]);
    const [k, v] = writeKvCache(p.g, p, A, i, k0, v0, H, hd);
    const ctx = mergeHeads(p, A, attend(p, A, q, k, v, s, hd), d);
    const attn = linearLayer(p, `${A}/dense`, ctx, `${pre}.self_attn.dense`, lw.dense, d, d, lw.denseBias);
    const up = linearLayer(p, `${M}/fc1`, h, `${pre}.mlp.fc1`, lw.fc1, I, d, lw.fc1Bias);
    const ff = linearLayer(
      p,
      `${M}/fc2`,
      geluNew(p, `${M}/activation_fn`, up),
      `${pre}.mlp.fc2`,
      lw.fc2,
      d,
      I,
      lw.fc2Bias,
    );
    // attn_outputs + feed_forward_hidden_states + residual.
    x = g.op1(L, "Add", [g.op1(L, "Add", [attn, ff]), x]);
  });
  x = layerNorm(p, "/model/final_layernorm", x, "model.final_layernorm", eps, w.finalNorm.weight, w.finalNorm.bias);
  biasedLmHead(p, x, w.lmHead, w.lmHeadBias, V, d);
  return finishGraph(p, "hsm tiny-phi");
}

/** The ONNX graph of a StableLM model (StableLmForCausalLM, sequential blocks), torch-export style. */
export function buildStablelmOnnx(
  c: StablelmConfig,
  w: StablelmWeights,
  withPast: boolean,
  variant: GraphVariant = {},
): Uint8Array {
  const p = startGraph("/model/constants", c.vocab_size, withPast, variant, variant.positionIds ?? true);
  const { g } = p;
  const { hidden_size: d, num_attention_heads: H, layer_norm_eps: eps, vocab_size: V } = c;
  const hd = d / H;
  const I = c.intermediate_size;
  const r = rotaryDims(hd, c.partial_rotary_factor);
  let x = embed(p, "/model/embed_tokens", "model.embed_tokens", w.embed, V, d);
  const s = shared(p, "/model", "model", c.max_position_embeddings, r, c.rope_theta);
  w.layers.forEach((lw, i) => {
    const L = `/model/layers.${i}`;
    const pre = `model.layers.${i}`;
    const A = `${L}/self_attn`;
    const M = `${L}/mlp`;
    const norm = (name: string, n: LayerNormWeights, t: string) =>
      layerNorm(p, `${L}/${name}`, t, `${pre}.${name}`, eps, n.weight, n.bias);
    const h = norm("input_layernorm", lw.inputNorm, x);
    const proj = (name: string, wt: Float32Array, b?: Float32Array) =>
      linearLayer(p, `${A}/${name}`, h, `${pre}.self_attn.${name}`, wt, d, d, b);
    const [q, k0, v0] = rotaryHeads(p, A, s, H, hd, r, [
      proj("q_proj", lw.q, lw.qkvBias?.q),
      proj("k_proj", lw.k, lw.qkvBias?.k),
      proj("v_proj", lw.v, lw.qkvBias?.v),
    ]);
    const [k, v] = writeKvCache(p.g, p, A, i, k0, v0, H, hd);
    const ctx = mergeHeads(p, A, attend(p, A, q, k, v, s, hd), d);
    const x1 = g.op1(L, "Add", [x, linearLayer(p, `${A}/o_proj`, ctx, `${pre}.self_attn.o_proj`, lw.o, d, d)]);
    const h2 = norm("post_attention_layernorm", lw.postNorm, x1);
    const gate = linearLayer(p, `${M}/gate_proj`, h2, `${pre}.mlp.gate_proj`, lw.gate, I, d);
    const up = linearLayer(p, `${M}/up_proj`, h2, `${pre}.mlp.up_proj`, lw.up, I, d);
    const act = g.op1(`${M}/act_fn`, "Mul", [gate, g.op1(`${M}/act_fn`, "Sigmoid", [gate])]);
    const down = linearLayer(p, `${M}/down_proj`, g.op1(M, "Mul", [act, up]), `${pre}.mlp.down_proj`, lw.down, d, I);
    x = g.op1(L, "Add", [x1, down]);
  });
  x = layerNorm(p, "/model/norm", x, "model.norm", eps, w.norm.weight, w.norm.bias);
  lmHead(p, x, w.lmHead, V, d);
  return finishGraph(p, "hsm tiny-stablelm");
}

/** The `config.json` transformers writes for this Falcon model. */
export function falconConfigJson(c: FalconConfig, withPast: boolean): string {
  const json = {
    architectures: ["FalconForCausalLM"],
    model_type: "falcon",
    ...c,
    num_ln_in_parallel_attn: null,
    rope_scaling: null,
    hidden_dropout: 0,
    attention_dropout: 0,
    initializer_range: 0.02,
    torch_dtype: "float32",
    use_cache: withPast,
  };
  return JSON.stringify(json, null, 2) + "\n";
}

/** The `config.json` transformers writes for this Phi model. */
export function phiConfigJson(c: PhiConfig, withPast: boolean): string {
  const json = {
    architectures: ["PhiForCausalLM"],
    model_type: "phi",
    ...c,
    rope_scaling: null,
    resid_pdrop: 0,
    embd_pdrop: 0,
    attention_dropout: 0,
    initializer_range: 0.02,
    torch_dtype: "float32",
    use_cache: withPast,
  };
  return JSON.stringify(json, null, 2) + "\n";
}

/** The `config.json` transformers writes for this StableLM model. */
export function stablelmConfigJson(c: StablelmConfig, withPast: boolean): string {
  const json = {
    architectures: ["StableLmForCausalLM"],
    model_type: "stablelm",
    ...c,
    rope_scaling: null,
    hidden_dropout: 0,
    attention_dropout: 0,
    initializer_range: 0.02,
    torch_dtype: "float32",
    use_cache: withPast,
  };
  return JSON.stringify(json, null, 2) + "\n";
}
