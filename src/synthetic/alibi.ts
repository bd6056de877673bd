/**
 * Tiny decoders whose attention carries ALiBi biases and which have no
 * position embeddings at all, written as torch.onnx/optimum export
 * transformers 4.44's code: BLOOM (a LayerNorm after the embedding, one
 * biased q/k/v projection whose output is laid out per head, slopes by the
 * closest power of two, biases from the attention mask's running count,
 * tanh GELU) and MPT (bias-free LayerNorms and projections, erf GELU, a
 * static bias table over key indices counted back from the last key).
 * Neither graph has a `position_ids` input, whatever the variant asks.
 */
import { DataType } from "../onnx/graph.js";
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

/** The fields of BLOOM's `config.json` this writer reads (transformers' BloomConfig names). */
export interface BloomConfig {
  hidden_size: number;
  n_layer: number;
  n_head: number;
  layer_norm_epsilon: number;
  vocab_size: number;
  bos_token_id: number | null;
  eos_token_id: number | number[] | null;
  /** Only false is written: each residual Add takes the block's stream before its norm. */
  apply_residual_connection_post_layernorm: false;
  tie_word_embeddings: true;
}

/** The fields of MPT's `config.json` this writer reads (transformers' MptConfig names). */
export interface MptConfig {
  d_model: number;
  n_heads: number;
  n_layers: number;
  /** transformers' MptMLP is 4 × d_model wide whatever this says; written as 4. */
  expansion_ratio: 4;
  max_seq_len: number;
  vocab_size: number;
  no_bias: true;
  layer_norm_epsilon: number;
  attn_config: {
    attn_type: "multihead_attention";
    attn_pdrop: number;
    attn_impl: "torch";
    alibi: true;
    alibi_bias_max: number;
    /** null: 1 / √head_dim. */
    softmax_scale: number | null;
    clip_qkv: null;
    prefix_lm: false;
    qk_ln: false;
    attn_uses_sequence_id: false;
  };
  bos_token_id: number | null;
  eos_token_id: number | number[] | null;
  tie_word_embeddings: true;
}

/** A LayerNorm's scale and shift. */
export interface LayerNormWeights {
  weight: Float32Array; // [d]
  bias: Float32Array; // [d]
}

/** BLOOM's weights in HuggingFace orientation: linear layers are [out, in]. */
export interface BloomWeights {
  /** [V, d]; also the LM head (tied). */
  embed: Float32Array;
  embedNorm: LayerNormWeights;
  layers: {
    inputNorm: LayerNormWeights;
    /** [3d, d]: the rows of head h are q, k, v of that head (hd rows each), heads one after another. */
    qkv: Float32Array;
    qkvBias: Float32Array; // [3d]
    dense: Float32Array; // [d, d]
    denseBias: Float32Array; // [d]
    postNorm: LayerNormWeights;
    up: Float32Array; // [4d, d]
    upBias: Float32Array; // [4d]
    down: Float32Array; // [d, 4d]
    downBias: Float32Array; // [d]
  }[];
  norm: LayerNormWeights;
}

/** MPT's weights in HuggingFace orientation; no biases anywhere. */
export interface MptWeights {
  /** [V, d]; also the LM head (tied). */
  embed: Float32Array;
  layers: {
    norm1: Float32Array; // [d]
    /** [3d, d]: all of q's rows, then k's, then v's. */
    wqkv: Float32Array;
    outProj: Float32Array; // [d, d]
    norm2: Float32Array; // [d]
    up: Float32Array; // [4d, d]
    down: Float32Array; // [d, 4d]
  }[];
  norm: Float32Array; // [d]
}

/** The tokenizer's vocabulary and special ids (the 1k-rank Llama 3.1 cut unless asked otherwise). */
function tokenIds(o: TinyModelOptions): Pick<BloomConfig, "vocab_size" | "bos_token_id" | "eos_token_id"> {
  const tok = TOKENIZERS[o.tokenizer ?? "llama3.1-1k"];
  return { vocab_size: tok.vocab, bos_token_id: tok.bos, eos_token_id: o.eosTokenId ?? tok.eos };
}

/** BLOOM's config for these options; `intermediate` is ignored (BLOOM's MLP is 4 × hidden wide). */
export function bloomConfig(o: TinyModelOptions = {}): BloomConfig {
  return {
    hidden_size: o.hidden ?? 64,
    n_layer: o.layers ?? 4,
    n_head: o.heads ?? 4,
    layer_norm_epsilon: 1e-5,
    ...tokenIds(o),
    apply_residual_connection_post_layernorm: false,
    tie_word_embeddings: true,
  };
}

/** MPT's config for these options; `maxPositions` is `max_seq_len`, `intermediate` is ignored (4 × d_model). */
export function mptConfig(o: TinyModelOptions = {}): MptConfig {
  return {
    d_model: o.hidden ?? 64,
    n_heads: o.heads ?? 4,
    n_layers: o.layers ?? 4,
    expansion_ratio: 4,
    max_seq_len: o.maxPositions ?? 2048,
    ...tokenIds(o),
    no_bias: true,
    layer_norm_epsilon: 1e-5,
    attn_config: {
      attn_type: "multihead_attention",
      attn_pdrop: 0,
      attn_impl: "torch",
      alibi: true,
      alibi_bias_max: 8,
      softmax_scale: null,
      clip_qkv: null,
      prefix_lm: false,
      qk_ln: false,
      attn_uses_sequence_id: false,
    },
    tie_word_embeddings: true,
  };
}

/** Seeded BLOOM weights of a useful scale: activations of order one. */
export function bloomWeights(c: BloomConfig, seed: number, embedScale = 1): BloomWeights {
  const d = c.hidden_size;
  const { normal, matrix: linear, normWeight: scale } = seededDraws(seed);
  const norm = (stream: number): LayerNormWeights => ({ weight: scale(stream, d), bias: normal(stream + 1, d, 0.1) });
  return {
    embed: normal(1, c.vocab_size * d, embedScale),
    embedNorm: norm(4),
    layers: Array.from({ length: c.n_layer }, (_, i) => {
      const s = 100 + 20 * i;
      return {
        inputNorm: norm(s),
        qkv: linear(s + 2, 3 * d, d),
        qkvBias: normal(s + 3, 3 * d, 0.5),
        dense: linear(s + 4, d, d),
        denseBias: normal(s + 5, d, 0.1),
        postNorm: norm(s + 6),
        up: linear(s + 8, 4 * d, d),
        upBias: normal(s + 9, 4 * d, 0.1),
        down: linear(s + 10, d, 4 * d),
        downBias: normal(s + 11, d, 0.1),
      };
    }),
    norm: norm(2),
  };
}

/** Seeded MPT weights of a useful scale: activations of order one. */
export function mptWeights(c: MptConfig, seed: number, embedScale = 1): MptWeights {
  const d = c.d_model;
  const { normal, matrix: linear, normWeight: scale } = seededDraws(seed);
  return {
    embed: normal(1, c.vocab_size * d, embedScale),
    layers: Array.from({ length: c.n_layers }, (_, i) => {
      const s = 100 + 20 * i;
      return {
        norm1: scale(s, d),
        wqkv: linear(s + 1, 3 * d, d),
        outProj: linear(s + 2, d, d),
        norm2: scale(s + 3, d),
        up: linear(s + 4, 4 * d, d),
        down: linear(s + 5, d, 4 * d),
      };
    }),
    norm: scale(2, d),
  };
}

/**
 * Where attention is allowed, [batch, 1, query, key] booleans: keys at or
 * before the query's position (past + its index) and not padding.
 */
function allowedKeys(p: TorchGraph): string {
  const { g, i64 } = p;
  const S = "/transformer";
  const one = i64(`one_i`, [1], []);
  const seqLen = g.op1(S, "Gather", [g.op1(S, "Shape", ["input_ids"]), one], { axis: 0 });
  const total = g.op1(S, "Gather", [g.op1(S, "Shape", ["attention_mask"]), one], { axis: 0 });
  const past = g.op1(S, "Sub", [total, seqLen]);
  const kpos = g.op1(S, "Range", [i64(`zero_i`, [0], []), total, one]);
  const qpos = g.op1(S, "Range", [past, total, one]);
  const kRow = g.op1(S, "Unsqueeze", [kpos, i64(`axes_0`, [0])]);
  const qCol = g.op1(S, "Unsqueeze", [qpos, i64(`axes_1`, [1])]);
  const causal = g.op1(S, "LessOrEqual", [kRow, qCol]); // [T, S]
  const notPad = g.op1(S, "Cast", ["attention_mask"], { to: DataType.BOOL });
  const notPad4 = g.op1(S, "Unsqueeze", [notPad, i64(`axes_12`, [1, 2])]); // [B, 1, 1, S]
  return g.op1(S, "And", [causal, notPad4]);
}

/**
 * BLOOM's slopes as build_alibi_tensor computes them in float32: for the
 * closest power of two n ≤ H, base^1 … base^n with base = 2^(−8/n); the
 * remaining heads take the odd powers of 2^(−4/n).
 */
function bloomSlopes(H: number): Float32Array {
  const n = 2 ** Math.floor(Math.log2(H));
  const base = Math.fround(2 ** -(2 ** -(Math.log2(n) - 3)));
  const extra = Math.fround(2 ** -(2 ** -(Math.log2(2 * n) - 3)));
  const slopes = Array.from({ length: n }, (_, k) => base ** (k + 1));
  for (let k = 0; k < Math.min(n, H - n); k++) slopes.push(extra ** (2 * k + 1));
  return Float32Array.from(slopes);
}

/**
 * BLOOM's ALiBi biases [B, H, 1, S]: slope × (cumsum(mask) − 1) × mask, the
 * index of each key among the row's unpadded tokens (0 at padding).
 */
function bloomAlibi(p: TorchGraph, H: number): string {
  const { g, i64 } = p;
  const S = "/transformer";
  const count = g.op1(S, "CumSum", ["attention_mask", i64(`axis_last_i`, [-1], [])]);
  const index = g.op1(S, "Mul", [g.op1(S, "Sub", [count, i64(`one_i`, [1], [])]), "attention_mask"]);
  const rows = g.op1(S, "Unsqueeze", [index, i64(`axes_1`, [1])]); // [B, 1, S]
  const slopes = g.floats(`${S}/constants/alibi_slopes`, bloomSlopes(H), [H, 1]);
  const alibi = g.op1(S, "Mul", [slopes, g.op1(S, "Cast", [rows], { to: DataType.FLOAT })]); // [B, H, S]
  return g.op1(S, "Unsqueeze", [alibi, i64(`axes_2`, [2])]);
}

/** bloom_gelu_forward: x · 0.5 · (1 + tanh(0.79788456 · x · (1 + 0.044715 · x · x))), op by op as torch exports it. */
function bloomGelu(p: TorchGraph, scope: string, x: string): string {
  const { g, scalar } = p;
  const c = (name: string, v: number) => scalar(`gelu_${name}`, v);
  const half = g.op1(scope, "Mul", [x, c("half", 0.5)]);
  const outer = g.op1(scope, "Mul", [x, c("sqrt_2_over_pi", 0.79788456)]);
  const cube = g.op1(scope, "Mul", [g.op1(scope, "Mul", [x, c("cubic", 0.044715)]), x]);
  const inner = g.op1(scope, "Mul", [outer, g.op1(scope, "Add", [cube, c("one", 1)])]);
  return g.op1(scope, "Mul", [half, g.op1(scope, "Add", [g.op1(scope, "Tanh", [inner]), c("one", 1)])]);
}

/** The ONNX graph of a BLOOM model, torch-export style (no `position_ids` input in any variant). */
export function buildBloomOnnx(
  c: BloomConfig,
  w: BloomWeights,
  withPast: boolean,
  variant: GraphVariant = {},
): Uint8Array {
  const p = startGraph("/transformer/constants", c.vocab_size, withPast, variant, false);
  const { g } = p;
  const { hidden_size: d, n_head: H, layer_norm_epsilon: eps, vocab_size: V } = c;
  const hd = d / H;
  const embedded = g.op1(
    "/transformer/word_embeddings",
    "Gather",
    [g.floats("transformer.word_embeddings.weight", w.embed, [V, d]), "input_ids"],
    { axis: 0 },
  );
  const embedNorm = "transformer.word_embeddings_layernorm";
  let x = layerNorm(
    p,
    "/transformer/word_embeddings_layernorm",
    embedded,
    embedNorm,
    eps,
    w.embedNorm.weight,
    w.embedNorm.bias,
  );
  const alibi = bloomAlibi(p, H);
  const maskBias = g.op1("/transformer", "Where", [
    allowedKeys(p),
    p.scalar("zero", 0),
    p.scalar("lowest", FLOAT32_LOWEST),
  ]);
  const invNorm = p.scalar("inv_norm_factor", 1 / Math.sqrt(hd));
  w.layers.forEach((lw, i) => {
    const L = `/transformer/h.${i}`;
    const pre = `transformer.h.${i}`;
    const A = `${L}/self_attention`;
    const norm = (name: string, n: LayerNormWeights, t: string) =>
      layerNorm(p, `${L}/${name}`, t, `${pre}.${name}`, eps, n.weight, n.bias);
    const h = norm("input_layernorm", lw.inputNorm, x);
    const fused = linearLayer(
      p,
      `${A}/query_key_value`,
      h,
      `${pre}.self_attention.query_key_value`,
      lw.qkv,
      3 * d,
      d,
      lw.qkvBias,
    );
    // fused_qkv.view(B, T, H, 3, hd): q, k and v interleaved per head; [..., j, :] picks one.
    const perHead = g.op1(A, "Reshape", [fused, p.i64("shape_fused_qkv", [0, 0, H, 3, hd])]);
    const pick = (j: number) => {
      const part = g.op1(A, "Gather", [perHead, p.i64(`qkv_${j}`, [j], [])], { axis: 3 });
      return g.op1(A, "Transpose", [part], { perm: [0, 2, 1, 3] });
    };
    const [k, v] = writeKvCache(p.g, p, A, i, pick(1), pick(2), H, hd);
    // alibi.baddbmm(q, kᵀ, beta=1, alpha=1/√hd), then the additive causal and padding mask.
    const qk = g.op1(A, "Mul", [
      g.op1(A, "MatMul", [pick(0), g.op1(A, "Transpose", [k], { perm: [0, 1, 3, 2] })]),
      invNorm,
    ]);
    const scores = g.op1(A, "Add", [g.op1(A, "Add", [alibi, qk]), maskBias]);
    const probs = g.op1(A, "Softmax", [scores], { axis: -1 });
    const ctx = mergeHeads(p, A, g.op1(A, "MatMul", [probs, v]), d);
    const attn = linearLayer(p, `${A}/dense`, ctx, `${pre}.self_attention.dense`, lw.dense, d, d, lw.denseBias);
    const x1 = g.op1(A, "Add", [x, attn]);
    const h2 = norm("post_attention_layernorm", lw.postNorm, x1);
    const M = `${L}/mlp`;
    const up = linearLayer(p, `${M}/dense_h_to_4h`, h2, `${pre}.mlp.dense_h_to_4h`, lw.up, 4 * d, d, lw.upBias);
    const act = bloomGelu(p, `${M}/gelu_impl`, up);
    const down = linearLayer(p, `${M}/dense_4h_to_h`, act, `${pre}.mlp.dense_4h_to_h`, lw.down, d, 4 * d, lw.downBias);
    x = g.op1(M, "Add", [x1, down]);
  });
  x = layerNorm(p, "/transformer/ln_f", x, "transformer.ln_f", eps, w.norm.weight, w.norm.bias);
  lmHead(p, x, w.embed, V, d);
  return finishGraph(p, "hsm tiny-bloom");
}

/**
 * MPT's slopes (build_mpt_alibi_tensor): for n the power of two ≥ H,
 * 2^(−k · alibi_bias_max / n) for k = 1 … n; when n ≠ H, the odd-numbered
 * ones first, then the even-numbered, the first H of those.
 */
function mptSlopes(H: number, biasMax: number): number[] {
  const n = 2 ** Math.ceil(Math.log2(H));
  const all = Array.from({ length: n }, (_, k) =>
    Math.fround(1 / Math.fround(2 ** Math.fround((k + 1) * (biasMax / n)))),
  );
  if (n === H) return all;
  return [...all.filter((_, k) => k % 2 === 1), ...all.filter((_, k) => k % 2 === 0)].slice(0, H);
}

/** MPT's static bias table [H, 1, max_seq_len]: slope × (j − (max_seq_len − 1)) for key index j. */
function mptAlibiTable(c: MptConfig): Float32Array {
  const max = c.max_seq_len;
  const slopes = mptSlopes(c.n_heads, c.attn_config.alibi_bias_max);
  const table = new Float32Array(c.n_heads * max);
  slopes.forEach((s, h) => {
    for (let j = 0; j < max; j++) table[h * max + j] = s * (j + 1 - max);
  });
  return table;
}

/** GELU with erf as torch exports nn.GELU(): x · (1 + erf(x / √2)) · 0.5. */
function erfGelu(p: TorchGraph, scope: string, x: string): string {
  const { g, scalar } = p;
  const erf = g.op1(scope, "Erf", [g.op1(scope, "Div", [x, scalar("sqrt_2", Math.SQRT2)])]);
  const plusOne = g.op1(scope, "Add", [erf, scalar("one", 1)]);
  return g.op1(scope, "Mul", [g.op1(scope, "Mul", [x, plusOne]), scalar("half", 0.5)]);
}

/** The ONNX graph of an MPT model, torch-export style (no `position_ids` input in any variant). */
export function buildMptOnnx(c: MptConfig, w: MptWeights, withPast: boolean, variant: GraphVariant = {}): Uint8Array {
  const p = startGraph("/transformer/constants", c.vocab_size, withPast, variant, false);
  const { g, i64 } = p;
  const { d_model: d, n_heads: H, layer_norm_epsilon: eps, vocab_size: V, max_seq_len: max } = c;
  const hd = d / H;
  let x = g.op1("/transformer/wte", "Gather", [g.floats("transformer.wte.weight", w.embed, [V, d]), "input_ids"], {
    axis: 0,
  });
  const allowed = allowedKeys(p);
  const table = g.floats("/transformer/constants/alibi", mptAlibiTable(c), [H, 1, max]);
  const scale = p.scalar("softmax_scale", c.attn_config.softmax_scale ?? 1 / Math.sqrt(hd));
  const lowest = p.scalar("lowest", FLOAT32_LOWEST);
  w.layers.forEach((lw, i) => {
    const L = `/transformer/blocks.${i}`;
    const pre = `transformer.blocks.${i}`;
    const A = `${L}/attn`;
    const h = layerNorm(p, `${L}/norm_1`, x, `${pre}.norm_1`, eps, lw.norm1);
    const qkv = linearLayer(p, `${A}/Wqkv`, h, `${pre}.attn.Wqkv`, lw.wqkv, 3 * d, d);
    const [qy, ky, vy] = g.op(A, "Split", [qkv, i64("qkv_split", [d, d, d])], { axis: 2 }, 3);
    const q = splitHeads(p, A, qy!, H, hd);
    const [k, v] = writeKvCache(p.g, p, A, i, splitHeads(p, A, ky!, H, hd), splitHeads(p, A, vy!, H, hd), H, hd);
    const qk = g.op1(A, "Mul", [g.op1(A, "MatMul", [q, g.op1(A, "Transpose", [k], { perm: [0, 1, 3, 2] })]), scale]);
    // position_bias[:, :, max_seq_len − key_length:], the last key_length columns of the table.
    const keyLength = g.op1(A, "Gather", [g.op1(A, "Shape", [k]), i64("axis_2", [2])], {
      axis: 0,
    });
    const start = g.op1(A, "Sub", [i64("max_seq_len", [max]), keyLength]);
    const bias = g.op1(A, "Slice", [table, start, i64("int64_max", [Number.MAX_SAFE_INTEGER]), i64("axis_2", [2])]);
    // masked_fill(mask, finfo.min): masked scores are replaced, not shifted.
    const scores = g.op1(A, "Where", [allowed, g.op1(A, "Add", [qk, bias]), lowest]);
    const probs = g.op1(A, "Softmax", [scores], { axis: -1 });
    const attn = linearLayer(
      p,
      `${A}/out_proj`,
      mergeHeads(p, A, g.op1(A, "MatMul", [probs, v]), d),
      `${pre}.attn.out_proj`,
      lw.outProj,
      d,
      d,
    );
    const x1 = g.op1(L, "Add", [attn, x]);
    const h2 = layerNorm(p, `${L}/norm_2`, x1, `${pre}.norm_2`, eps, lw.norm2);
    const F = `${L}/ffn`;
    const up = linearLayer(p, `${F}/up_proj`, h2, `${pre}.ffn.up_proj`, lw.up, 4 * d, d);
    const down = linearLayer(
      p,
      `${F}/down_proj`,
      erfGelu(p, `${F}/act`, up),
      `${pre}.ffn.down_proj`,
      lw.down,
      d,
      4 * d,
    );
    x = g.op1(F, "Add", [down, x1]);
  });
  x = layerNorm(p, "/transformer/norm_f", x, "transformer.norm_f", eps, w.norm);
  lmHead(p, x, w.embed, V, d);
  return finishGraph(p, "hsm tiny-mpt");
}

/** The `config.json` transformers writes for this BLOOM model. */
export function bloomConfigJson(c: BloomConfig, withPast: boolean): string {
  const json = {
    architectures: ["BloomForCausalLM"],
    model_type: "bloom",
    ...c,
    pretraining_tp: 1,
    slow_but_exact: false,
    hidden_dropout: 0,
    attention_dropout: 0,
    torch_dtype: "float32",
    use_cache: withPast,
  };
  return JSON.stringify(json, null, 2) + "\n";
}

/** The `config.json` transformers writes for this MPT model. */
export function mptConfigJson(c: MptConfig, withPast: boolean): string {
  const json = {
    architectures: ["MptForCausalLM"],
    model_type: "mpt",
    ...c,
    logit_scale: null,
    torch_dtype: "float32",
    use_cache: withPast,
  };
  return JSON.stringify(json, null, 2) + "\n";
}
