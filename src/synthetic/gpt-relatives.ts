/**
 * Tiny decoders of two GPT-2 relatives with learned absolute positions,
 * GPT-Neo and GPT-BigCode (StarCoder 1, SantaCoder), with seeded random
 * weights, written as torch.onnx/optimum export transformers 4.44's code:
 * `input_ids` viewed [-1, T] before the `wte` Gather, a `wpe` Gather added to
 * it, LayerNorm with bias, nn.Linear layers (`MatMul` then `Add` where they
 * have a bias) and an LM head tied to `wte`. Where they differ:
 *
 * - GPT-Neo (`/transformer/h.N/attn/attention/...`): q, k and v from three
 *   bias-free projections, scores NOT divided by √head_dim, layers alternating
 *   global and local attention as `attention_layers` says, a local layer also
 *   masking keys `window_size` or more cache slots back, gelu_new; without a
 *   `position_ids` input the positions are arange(past, past + T), so left
 *   padding shifts them.
 * - GPT-BigCode (`/transformer/h.N/attn/...`): one `c_attn` with bias giving q
 *   and, with multi_query, ONE key and value shared by every head; scores
 *   scaled by 1/√head_dim; gelu_pytorch_tanh. Its cache is fused: one tensor
 *   per layer, `past_key_values.N.key_value` in and `present.N.key_value` out,
 *   [batch, seq, 2·head_dim] with the key in the first head_dim channels and
 *   the value in the rest (multi_query: false, [batch, heads, seq, 2·head_dim]).
 *   Without a `position_ids` input the positions are cumsum(mask) − 1 (1 on
 *   padding), so left padding does not shift them.
 */
import { DataType, valueInfo } from "../onnx/graph.js";
import { causalMask, geluNew, pastLength, viewInputIds } from "./learned-positions.js";
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

export type GptNeoAttentionType = "global" | "local";

/** The fields of GPT-Neo's `config.json` this writer fills (transformers' GPTNeoConfig names). */
export interface GptNeoConfig {
  hidden_size: number;
  num_layers: number;
  num_heads: number;
  /** The MLP's width; null means 4 × hidden_size. */
  intermediate_size: number | null;
  max_position_embeddings: number;
  /** How many cache slots a local layer's query sees, itself included. */
  window_size: number;
  /** [[kinds, repeats], ...], expanded into attention_layers. */
  attention_types: [GptNeoAttentionType[], number][];
  attention_layers: GptNeoAttentionType[];
  activation_function: "gelu_new";
  layer_norm_epsilon: number;
  vocab_size: number;
  bos_token_id: number | null;
  eos_token_id: number | number[] | null;
}

/** GPT-Neo's weights in HuggingFace orientation: Linear weights are [out, in]. */
export interface GptNeoWeights {
  wte: Float32Array; // [V, d]
  wpe: Float32Array; // [max_position_embeddings, d]
  layers: {
    ln1Weight: Float32Array; // [d]
    ln1Bias: Float32Array; // [d]
    q: Float32Array; // [d, d]
    k: Float32Array; // [d, d]
    v: Float32Array; // [d, d]
    out: Float32Array; // [d, d]
    outBias: Float32Array; // [d]
    ln2Weight: Float32Array; // [d]
    ln2Bias: Float32Array; // [d]
    fc: Float32Array; // [I, d]
    fcBias: Float32Array; // [I]
    proj: Float32Array; // [d, I]
    projBias: Float32Array; // [d]
  }[];
  lnfWeight: Float32Array; // [d]
  lnfBias: Float32Array; // [d]
}

/** The fields of GPT-BigCode's `config.json` this writer fills (transformers' GPTBigCodeConfig names). */
export interface GptBigcodeConfig {
  n_embd: number;
  n_layer: number;
  n_head: number;
  /** The MLP's width; null means 4 × n_embd. */
  n_inner: number | null;
  n_positions: number;
  activation_function: "gelu_pytorch_tanh";
  layer_norm_epsilon: number;
  scale_attn_weights: true;
  /** One key and value head shared by all query heads (StarCoder 1, SantaCoder). */
  multi_query: boolean;
  attention_softmax_in_fp32: true;
  scale_attention_softmax_in_fp32: true;
  vocab_size: number;
  bos_token_id: number | null;
  eos_token_id: number | number[] | null;
}

/** GPT-BigCode's weights in HuggingFace orientation: Linear weights are [out, in]. */
export interface GptBigcodeWeights {
  wte: Float32Array; // [V, d]
  wpe: Float32Array; // [n_positions, d]
  layers: {
    ln1Weight: Float32Array; // [d]
    ln1Bias: Float32Array; // [d]
    /** multi_query: rows q (d), k (hd), v (hd); else per head h rows q, k, v (hd each) at h·3hd. */
    cAttn: Float32Array; // [d + 2·kvDim, d]
    cAttnBias: Float32Array; // [d + 2·kvDim]
    attnProj: Float32Array; // [d, d]
    attnProjBias: Float32Array; // [d]
    ln2Weight: Float32Array; // [d]
    ln2Bias: Float32Array; // [d]
    fc: Float32Array; // [I, d]
    fcBias: Float32Array; // [I]
    mlpProj: Float32Array; // [d, I]
    mlpProjBias: Float32Array; // [d]
  }[];
  lnfWeight: Float32Array; // [d]
  lnfBias: Float32Array; // [d]
}

/** GPTNeoConfig.expand_attention_types_params: each [kinds, n] repeats its kinds n times. */
function expandAttentionTypes(types: [GptNeoAttentionType[], number][]): GptNeoAttentionType[] {
  return types.flatMap(([kinds, n]) => Array.from({ length: n }, () => kinds).flat());
}

/**
 * GPT-Neo's config for the tiny-model options: layers alternate global, local (an odd last layer is global),
 * 2,048 positions unless `maxPositions` says otherwise, local layers seeing `windowSize` slots (HF's 256).
 */
export function gptNeoConfig(o: TinyModelOptions = {}, windowSize = 256): GptNeoConfig {
  const tok = TOKENIZERS[o.tokenizer ?? "llama3.1-1k"];
  const layers = o.layers ?? 4;
  const types: [GptNeoAttentionType[], number][] = [[["global", "local"], Math.floor(layers / 2)]];
  if (layers % 2) types.push([["global"], 1]);
  return {
    hidden_size: o.hidden ?? 64,
    num_layers: layers,
    num_heads: o.heads ?? 4,
    intermediate_size: o.intermediate ?? null,
    max_position_embeddings: o.maxPositions ?? 2048,
    window_size: windowSize,
    attention_types: types,
    attention_layers: expandAttentionTypes(types),
    activation_function: "gelu_new",
    layer_norm_epsilon: 1e-5,
    vocab_size: tok.vocab,
    bos_token_id: tok.bos,
    eos_token_id: o.eosTokenId ?? tok.eos,
  };
}

/** GPT-BigCode's config for the tiny-model options (1,024 positions unless `maxPositions` says otherwise). */
export function gptBigcodeConfig(o: TinyModelOptions = {}, multiQuery = true): GptBigcodeConfig {
  const tok = TOKENIZERS[o.tokenizer ?? "llama3.1-1k"];
  return {
    n_embd: o.hidden ?? 64,
    n_layer: o.layers ?? 4,
    n_head: o.heads ?? 4,
    n_inner: o.intermediate ?? null,
    n_positions: o.maxPositions ?? 1024,
    activation_function: "gelu_pytorch_tanh",
    layer_norm_epsilon: 1e-5,
    scale_attn_weights: true,
    multi_query: multiQuery,
    attention_softmax_in_fp32: true,
    scale_attention_softmax_in_fp32: true,
    vocab_size: tok.vocab,
    bos_token_id: tok.bos,
    eos_token_id: o.eosTokenId ?? tok.eos,
  };
}

/** Seeded GPT-Neo weights; `embedScale` is the standard deviation of both embedding tables. */
export function gptNeoWeights(c: GptNeoConfig, seed: number, embedScale = 1): GptNeoWeights {
  const d = c.hidden_size;
  const I = c.intermediate_size ?? 4 * d;
  const r = seededDraws(seed);
  return {
    wte: r.normal(1, c.vocab_size * d, embedScale),
    wpe: r.normal(4, c.max_position_embeddings * d, embedScale),
    layers: Array.from({ length: c.num_layers }, (_, i) => {
      const s = 100 + 20 * i;
      return {
        ln1Weight: r.normWeight(s, d),
        ln1Bias: r.normBias(s + 1, d),
        q: r.matrix(s + 2, d, d),
        k: r.matrix(s + 3, d, d),
        v: r.matrix(s + 4, d, d),
        out: r.matrix(s + 5, d, d),
        outBias: r.bias(s + 6, d),
        ln2Weight: r.normWeight(s + 7, d),
        ln2Bias: r.normBias(s + 8, d),
        fc: r.matrix(s + 9, I, d),
        fcBias: r.bias(s + 10, I),
        proj: r.matrix(s + 11, d, I),
        projBias: r.bias(s + 12, d),
      };
    }),
    lnfWeight: r.normWeight(2, d),
    lnfBias: r.normBias(3, d),
  };
}

/** The width of GPT-BigCode's key (and of its value): one head with multi_query, all of them otherwise. */
function bigcodeKvDim(c: GptBigcodeConfig): number {
  return c.multi_query ? c.n_embd / c.n_head : c.n_embd;
}

/** Seeded GPT-BigCode weights; `embedScale` is the standard deviation of both embedding tables. */
export function gptBigcodeWeights(c: GptBigcodeConfig, seed: number, embedScale = 1): GptBigcodeWeights {
  const d = c.n_embd;
  const I = c.n_inner ?? 4 * d;
  const qkv = d + 2 * bigcodeKvDim(c);
  const r = seededDraws(seed);
  return {
    wte: r.normal(1, c.vocab_size * d, embedScale),
    wpe: r.normal(4, c.n_positions * d, embedScale),
    layers: Array.from({ length: c.n_layer }, (_, i) => {
      const s = 100 + 20 * i;
      return {
        ln1Weight: r.normWeight(s, d),
        ln1Bias: r.normBias(s + 1, d),
        cAttn: r.matrix(s + 2, qkv, d),
        cAttnBias: r.bias(s + 3, qkv),
        attnProj: r.matrix(s + 4, d, d),
        attnProjBias: r.bias(s + 5, d),
        ln2Weight: r.normWeight(s + 6, d),
        ln2Bias: r.normBias(s + 7, d),
        fc: r.matrix(s + 8, I, d),
        fcBias: r.bias(s + 9, I),
        mlpProj: r.matrix(s + 10, d, I),
        mlpProjBias: r.bias(s + 11, d),
      };
    }),
    lnfWeight: r.normWeight(2, d),
    lnfBias: r.normBias(3, d),
  };
}

/** The two embedding tables and their shapes: [vocab, d] and [rows, d]. */
interface Embeddings {
  wte: Float32Array;
  wpe: Float32Array;
  vocab: number;
  rows: number;
  d: number;
}

/** Positions without a `position_ids` input as GPT-2 and GPT-Neo count them: arange(past, past + T), unsqueezed. */
function arangePositions(w: TorchGraph, seqLen: string): string {
  const { g, i64 } = w;
  const past = pastLength(w, "/transformer");
  const end = g.op1("/transformer", "Add", [past, seqLen]);
  const range = g.op1("/transformer", "Range", [past, end, i64("one_i", [1], [])]);
  return g.op1("/transformer", "Unsqueeze", [range, i64("axes_0", [0])]);
}

/** wte(ids) + wpe(pos), the stream entering the first block. */
function embed(w: TorchGraph, e: Embeddings, ids: string, pos: string): string {
  const { g } = w;
  const wte = g.floats("transformer.wte.weight", e.wte, [e.vocab, e.d]);
  const wpe = g.floats("transformer.wpe.weight", e.wpe, [e.rows, e.d]);
  const tokens = g.op1("/transformer/wte", "Gather", [wte, ids], { axis: 0 });
  const places = g.op1("/transformer/wpe", "Gather", [wpe, pos], { axis: 0 });
  return g.op1("/transformer", "Add", [tokens, places]);
}

/** ln_f, the view back to [-1, T, d], and the tied LM head. */
function finalNormAndHead(
  w: TorchGraph,
  x: string,
  view: string,
  eps: number,
  lnf: [Float32Array, Float32Array],
  wte: Float32Array,
  vocab: number,
  d: number,
): void {
  const { g, i64 } = w;
  const normed = layerNorm(w, "/transformer/ln_f", x, "transformer.ln_f", eps, lnf[0], lnf[1]);
  const outShape = g.op1("/transformer", "Concat", [view, i64("hidden_1d", [d])], { axis: 0 });
  lmHead(w, g.op1("/transformer", "Reshape", [normed, outShape]), wte, vocab, d);
}

/**
 * GPT-Neo's `bias` buffers sliced to [past : total, :total]: the global one (key slot ≤ query slot) and the local
 * one, which also drops keys `window` or more slots before the query (tril(bias) ^ tril(bias, −window)).
 */
function neoCausalMasks(w: TorchGraph, scope: string, seqLen: string, window: number): [string, string] {
  const { g, i64 } = w;
  const total = g.op1(scope, "Gather", [g.op1(scope, "Shape", ["attention_mask"]), i64("one_i", [1], [])], {
    axis: 0,
  });
  const one = i64("one_i", [1], []);
  const kRow = g.op1(scope, "Unsqueeze", [
    g.op1(scope, "Range", [i64("zero_i", [0], []), total, one]),
    i64("axes_0", [0]),
  ]);
  const qpos = g.op1(scope, "Range", [g.op1(scope, "Sub", [total, seqLen]), total, one]);
  const qCol = g.op1(scope, "Unsqueeze", [qpos, i64("axes_1", [1])]);
  const global = g.op1(scope, "LessOrEqual", [kRow, qCol]);
  const distance = g.op1(scope, "Sub", [qCol, kRow]);
  const near = g.op1(scope, "Less", [distance, i64("window_size", [window], [])]);
  return [global, g.op1(scope, "And", [global, near])];
}

/** GPT-Neo's ONNX graph (GPTNeoForCausalLM, eager attention), torch-export style. */
export function buildGptNeoOnnx(
  c: GptNeoConfig,
  wt: GptNeoWeights,
  withPast: boolean,
  variant: GraphVariant = {},
): Uint8Array {
  const w = startGraph("/transformer/constants", c.vocab_size, withPast, variant, variant.positionIds ?? true);
  const { g, scalar, i64 } = w;
  const d = c.hidden_size;
  const H = c.num_heads;
  const hd = d / H;
  const I = c.intermediate_size ?? 4 * d;
  const eps = c.layer_norm_epsilon;
  const { ids, seqLen, view } = viewInputIds(w, "/transformer");
  const pos = w.hasPositions ? g.op1("/transformer", "Reshape", ["position_ids", view]) : arangePositions(w, seqLen);
  let x = embed(w, { wte: wt.wte, wpe: wt.wpe, vocab: c.vocab_size, rows: c.max_position_embeddings, d }, ids, pos);
  // (1 − mask) · finfo.min, [B, 1, 1, S], added after the causal Where.
  const mask4 = g.op1("/transformer", "Unsqueeze", ["attention_mask", i64("axes_12", [1, 2])]);
  const maskF = g.op1("/transformer", "Cast", [mask4], { to: DataType.FLOAT });
  const min = scalar("min", FLOAT32_LOWEST);
  const maskBias = g.op1("/transformer", "Mul", [g.op1("/transformer", "Sub", [scalar("one", 1), maskF]), min]);
  const [global, local] = neoCausalMasks(w, "/transformer", seqLen, c.window_size);

  wt.layers.forEach((lw, i) => {
    const L = `/transformer/h.${i}`;
    const pre = `transformer.h.${i}`;
    const A = `${L}/attn/attention`;
    const h = layerNorm(w, `${L}/ln_1`, x, `${pre}.ln_1`, eps, lw.ln1Weight, lw.ln1Bias);
    const proj = (name: string, y: string, weight: Float32Array, bias?: Float32Array) =>
      linearLayer(w, `${A}/${name}`, y, `${pre}.attn.attention.${name}`, weight, d, d, bias);
    const q = splitHeads(w, A, proj("q_proj", h, lw.q), H, hd);
    const k0 = splitHeads(w, A, proj("k_proj", h, lw.k), H, hd);
    const v0 = splitHeads(w, A, proj("v_proj", h, lw.v), H, hd);
    const [k, v] = writeKvCache(w.g, w, A, i, k0, v0, H, hd);
    // No division by √head_dim: GPT-Neo's scores are the raw products.
    const scores = g.op1(A, "MatMul", [q, g.op1(A, "Transpose", [k], { perm: [0, 1, 3, 2] })]);
    const causal = c.attention_layers[i] === "local" ? local : global;
    const masked = g.op1(A, "Add", [g.op1(A, "Where", [causal, scores, min]), maskBias]);
    const probs = g.op1(A, "Softmax", [masked], { axis: -1 });
    const attnOut = proj("out_proj", mergeHeads(w, A, g.op1(A, "MatMul", [probs, v]), d), lw.out, lw.outBias);
    const x1 = g.op1(L, "Add", [attnOut, x]);
    const h2 = layerNorm(w, `${L}/ln_2`, x1, `${pre}.ln_2`, eps, lw.ln2Weight, lw.ln2Bias);
    const fc = linearLayer(w, `${L}/mlp/c_fc`, h2, `${pre}.mlp.c_fc`, lw.fc, I, d, lw.fcBias);
    const act = geluNew(w, `${L}/mlp/act`, fc);
    x = g.op1(L, "Add", [x1, linearLayer(w, `${L}/mlp/c_proj`, act, `${pre}.mlp.c_proj`, lw.proj, d, I, lw.projBias)]);
  });

  finalNormAndHead(w, x, view, eps, [wt.lnfWeight, wt.lnfBias], wt.wte, c.vocab_size, d);
  return finishGraph(w, "hsm tiny-gpt-neo");
}

/** gelu(x, approximate="tanh") as torch's opset-9 symbolic writes it: ½·x·(1 + tanh(√(2/π)·(x + 0.044715·x³))). */
function geluTanh(w: TorchGraph, scope: string, x: string): string {
  const { g, scalar } = w;
  const cube = g.op1(scope, "Mul", [x, g.op1(scope, "Mul", [x, x])]);
  const inner = g.op1(scope, "Mul", [
    scalar("gelu_beta", Math.sqrt(2 / Math.PI)),
    g.op1(scope, "Add", [x, g.op1(scope, "Mul", [scalar("gelu_kappa", 0.044715), cube])]),
  ]);
  const tanh = g.op1(scope, "Add", [scalar("one", 1), g.op1(scope, "Tanh", [inner])]);
  return g.op1(scope, "Mul", [scalar("half", 0.5), g.op1(scope, "Mul", [x, tanh])]);
}

/** Layer `i`'s fused cache: the past `key_value` input concatenated before `kv` on `axis`, and its present output. */
function fusedKvCache(w: TorchGraph, scope: string, i: number, kv: string, dims: (string | number)[], axis: number) {
  const { g } = w;
  if (w.withPast) {
    const past = `past_key_values.${i}.key_value`;
    w.inputs.push(
      valueInfo(
        past,
        DataType.FLOAT,
        dims.map((x) => (x === "seq" ? "past_sequence_length" : x)),
      ),
    );
    kv = g.op1(scope, "Concat", [past, kv], { axis });
  }
  if (w.withPast || w.present) {
    const present = `present.${i}.key_value`;
    g.nodes.push({ name: `${scope}/present_key_value`, opType: "Identity", input: [kv], output: [present] });
    w.outputs.push(
      valueInfo(
        present,
        DataType.FLOAT,
        dims.map((x) => (x === "seq" ? "total_sequence_length" : x)),
      ),
    );
  }
  return kv;
}

/**
 * GPT-BigCode's positions without a `position_ids` input: cumsum(mask) − 1, 1 where the mask is 0, the new
 * tokens' columns [past : past + T] (the Slice only where the graph has a cache, as tracing records it).
 */
function bigcodePositions(w: TorchGraph, seqLen: string, kvSeqAxis: number): string {
  const { g, i64 } = w;
  const S = "/transformer";
  const counted = g.op1(S, "Sub", [
    g.op1(S, "CumSum", ["attention_mask", i64("one_i", [1], [])]),
    i64("one_i", [1], []),
  ]);
  const padded = g.op1(S, "Equal", ["attention_mask", i64("zero_i", [0], [])]);
  const pos = g.op1(S, "Where", [padded, i64("one_i", [1], []), counted]);
  if (!w.withPast) return pos;
  const shape = g.op1(S, "Shape", ["past_key_values.0.key_value"]);
  const past = g.op1(S, "Gather", [shape, i64(`axis_${kvSeqAxis}`, [kvSeqAxis], [])], { axis: 0 });
  const start = g.op1(S, "Unsqueeze", [past, i64("axes_0", [0])]);
  const end = g.op1(S, "Unsqueeze", [g.op1(S, "Add", [past, seqLen]), i64("axes_0", [0])]);
  return g.op1(S, "Slice", [pos, start, end, i64("axes_1", [1])]);
}

/** GPT-BigCode's ONNX graph (GPTBigCodeForCausalLM, eager attention), torch-export style. */
export function buildGptBigcodeOnnx(
  c: GptBigcodeConfig,
  wt: GptBigcodeWeights,
  withPast: boolean,
  variant: GraphVariant = {},
): Uint8Array {
  const w = startGraph("/transformer/constants", c.vocab_size, withPast, variant, variant.positionIds ?? true);
  const { g, scalar, i64 } = w;
  const d = c.n_embd;
  const H = c.n_head;
  const hd = d / H;
  const I = c.n_inner ?? 4 * d;
  const eps = c.layer_norm_epsilon;
  const mq = c.multi_query;
  const qkvWidth = d + 2 * bigcodeKvDim(c);
  const kvSeqAxis = mq ? 1 : 2;
  const { ids, seqLen, view } = viewInputIds(w, "/transformer");
  const pos = w.hasPositions
    ? g.op1("/transformer", "Reshape", ["position_ids", view])
    : bigcodePositions(w, seqLen, kvSeqAxis);
  let x = embed(w, { wte: wt.wte, wpe: wt.wpe, vocab: c.vocab_size, rows: c.n_positions, d }, ids, pos);
  // bias[past : total, :total] · attention_mask.view(B, 1, S), then a heads axis: [B, T, 1, S] (MQA) or [B, 1, T, S].
  const padOk = g.op1("/transformer", "Unsqueeze", [
    g.op1("/transformer", "Cast", ["attention_mask"], { to: DataType.BOOL }),
    i64("axes_1", [1], [1]),
  ]);
  const allowed = g.op1("/transformer", "And", [causalMask(w, "/transformer", seqLen), padOk]);
  const mask = g.op1("/transformer", "Unsqueeze", [allowed, i64(mq ? "axes_2" : "axes_1", [mq ? 2 : 1], [1])]);
  const min = scalar("min", FLOAT32_LOWEST);
  const scale = scalar("attn_scale", 1 / Math.sqrt(hd));

  wt.layers.forEach((lw, i) => {
    const L = `/transformer/h.${i}`;
    const pre = `transformer.h.${i}`;
    const A = `${L}/attn`;
    const h = layerNorm(w, `${L}/ln_1`, x, `${pre}.ln_1`, eps, lw.ln1Weight, lw.ln1Bias);
    const qkv = linearLayer(w, `${A}/c_attn`, h, `${pre}.attn.c_attn`, lw.cAttn, qkvWidth, d, lw.cAttnBias);
    let merged: string;
    if (mq) {
      // query [B, T, d]; key_value [B, T, 2hd], the one key then the one value.
      const [query, kv0] = g.op(A, "Split", [qkv, i64("split_q_kv", [d, 2 * hd])], { axis: 2 }, 2) as [string, string];
      const kv = fusedKvCache(w, A, i, kv0, ["batch_size", "seq", 2 * hd], 1);
      const [key, value] = g.op(A, "Split", [kv, i64("split_k_v", [hd, hd])], { axis: -1 }, 2) as [string, string];
      const S = g.op1(A, "Unsqueeze", [
        g.op1(A, "Gather", [g.op1(A, "Shape", [kv]), i64("one_i", [1], [])], { axis: 0 }),
        i64("axes_0", [0]),
      ]);
      // query.reshape(B, T·H, hd) @ keyᵀ [B, hd, S] · scale, viewed [B, T, H, S].
      const q = g.op1(A, "Reshape", [query, i64("shape_mq_query", [0, -1, hd])]);
      const scores = g.op1(A, "Mul", [
        g.op1(A, "MatMul", [q, g.op1(A, "Transpose", [key], { perm: [0, 2, 1] })]),
        scale,
      ]);
      const attnShape = g.op1(A, "Concat", [i64("shape_mq_scores", [0, -1, H]), S], { axis: 0 });
      const masked = g.op1(A, "Where", [mask, g.op1(A, "Reshape", [scores, attnShape]), min]);
      const probs = g.op1(A, "Softmax", [masked], { axis: -1 });
      const attnView = g.op1(A, "Concat", [i64("shape_mq_view", [0, -1]), S], { axis: 0 });
      const ctx = g.op1(A, "MatMul", [g.op1(A, "Reshape", [probs, attnView]), value]);
      merged = g.op1(A, "Reshape", [ctx, i64("shape_merge_heads", [0, -1, d])]);
    } else {
      // Viewed [B, T, H, 3hd] and transposed: per head q, then k and v together as that head's key_value.
      const perHead = g.op1(A, "Transpose", [g.op1(A, "Reshape", [qkv, i64("shape_qkv_heads", [0, 0, H, 3 * hd])])], {
        perm: [0, 2, 1, 3],
      });
      const [q, kv0] = g.op(A, "Split", [perHead, i64("split_q_kv", [hd, 2 * hd])], { axis: 3 }, 2) as [string, string];
      const kv = fusedKvCache(w, A, i, kv0, ["batch_size", H, "seq", 2 * hd], 2);
      const [key, value] = g.op(A, "Split", [kv, i64("split_k_v", [hd, hd])], { axis: -1 }, 2) as [string, string];
      const scores = g.op1(A, "Mul", [
        g.op1(A, "MatMul", [q, g.op1(A, "Transpose", [key], { perm: [0, 1, 3, 2] })]),
        scale,
      ]);
      const probs = g.op1(A, "Softmax", [g.op1(A, "Where", [mask, scores, min])], { axis: -1 });
      merged = mergeHeads(w, A, g.op1(A, "MatMul", [probs, value]), d);
    }
    const attnOut = linearLayer(w, `${A}/c_proj`, merged, `${pre}.attn.c_proj`, lw.attnProj, d, d, lw.attnProjBias);
    const x1 = g.op1(L, "Add", [attnOut, x]);
    const h2 = layerNorm(w, `${L}/ln_2`, x1, `${pre}.ln_2`, eps, lw.ln2Weight, lw.ln2Bias);
    const fc = linearLayer(w, `${L}/mlp/c_fc`, h2, `${pre}.mlp.c_fc`, lw.fc, I, d, lw.fcBias);
    const act = geluTanh(w, `${L}/mlp/act`, fc);
    const ff = linearLayer(w, `${L}/mlp/c_proj`, act, `${pre}.mlp.c_proj`, lw.mlpProj, d, I, lw.mlpProjBias);
    x = g.op1(L, "Add", [x1, ff]);
  });

  finalNormAndHead(w, x, view, eps, [wt.lnfWeight, wt.lnfBias], wt.wte, c.vocab_size, d);
  return finishGraph(w, "hsm tiny-gpt-bigcode");
}

function configJson(family: Record<string, unknown>, config: object, withPast: boolean): string {
  const json = { ...family, ...config, tie_word_embeddings: true, torch_dtype: "float32", use_cache: withPast };
  return JSON.stringify(json, null, 2) + "\n";
}

/** The `config.json` transformers writes for this GPT-Neo. */
export function gptNeoConfigJson(c: GptNeoConfig, withPast: boolean): string {
  const family = {
    architectures: ["GPTNeoForCausalLM"],
    model_type: "gpt_neo",
    embed_dropout: 0,
    attention_dropout: 0,
    resid_dropout: 0,
  };
  return configJson(family, c, withPast);
}

/** The `config.json` transformers writes for this GPT-BigCode. */
export function gptBigcodeConfigJson(c: GptBigcodeConfig, withPast: boolean): string {
  const family = {
    architectures: ["GPTBigCodeForCausalLM"],
    model_type: "gpt_bigcode",
    embd_pdrop: 0,
    attn_pdrop: 0,
    resid_pdrop: 0,
  };
  return configJson(family, c, withPast);
}
