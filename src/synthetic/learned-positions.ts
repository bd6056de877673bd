/**
 * Tiny decoders of the two families with learned absolute position
 * embeddings, GPT-2 and OPT, with seeded random weights, written as
 * torch.onnx/optimum export them from transformers 4.44: a `Reshape` of
 * `input_ids` to [-1, T] before the embedding `Gather`, a second `Gather` on
 * the position table whose sum with the token embeddings enters the first
 * block, LayerNorm with bias (the opset-17 `LayerNormalization` op), linear
 * layers with biases (`MatMul` then `Add`) and an LM head tied to the token
 * embedding. They differ where it matters to a reader of the graph:
 *
 * - GPT-2 (`/transformer/h.N/...`): Conv1D weights stored [in, out], q, k and v
 *   from one `c_attn` split three ways, scores divided by √head_dim, the causal
 *   mask applied by a `Where` and the padding mask added after it, gelu_new
 *   (tanh approximation) written out op by op; without a `position_ids` input
 *   the positions count from the cache length, so left padding shifts them.
 * - OPT (`/model/decoder/layers.N/...`): q scaled by head_dim^-½ after its
 *   projection, one causal-and-padding bias clamped by a `Max` after it is
 *   added, ReLU, the MLP half of each block run on a [B·T, d] view, and
 *   positions offset by 2 in a table of max_position_embeddings + 2 rows;
 *   without a `position_ids` input they come from the cumulative sum of
 *   `attention_mask`, so left padding does not shift them.
 */
import { DataType } from "../onnx/graph.js";
import { pastInputName } from "../onnx/kv-cache.js";
import {
  FLOAT32_LOWEST,
  TOKENIZERS,
  writeKvCache,
  transpose,
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
  splitHeads,
  startGraph,
  type TorchGraph,
} from "./torch-graph.js";

/** The fields of GPT-2's `config.json` this writer fills. */
export interface Gpt2Config {
  n_embd: number;
  n_layer: number;
  n_head: number;
  n_positions: number;
  n_ctx: number;
  /** The MLP's width; null means 4 × n_embd. */
  n_inner: number | null;
  activation_function: "gelu_new";
  layer_norm_epsilon: number;
  vocab_size: number;
  bos_token_id: number | null;
  eos_token_id: number | number[] | null;
}

/** GPT-2's weights as its state dict holds them: Conv1D weights are [in, out]. */
export interface Gpt2Weights {
  wte: Float32Array; // [V, d]
  wpe: Float32Array; // [n_positions, d]
  layers: {
    ln1Weight: Float32Array; // [d]
    ln1Bias: Float32Array; // [d]
    cAttnWeight: Float32Array; // [d, 3d]
    cAttnBias: Float32Array; // [3d]
    attnProjWeight: Float32Array; // [d, d]
    attnProjBias: Float32Array; // [d]
    ln2Weight: Float32Array; // [d]
    ln2Bias: Float32Array; // [d]
    fcWeight: Float32Array; // [d, I]
    fcBias: Float32Array; // [I]
    mlpProjWeight: Float32Array; // [I, d]
    mlpProjBias: Float32Array; // [d]
  }[];
  lnfWeight: Float32Array; // [d]
  lnfBias: Float32Array; // [d]
}

/** The fields of OPT's `config.json` this writer fills (the pre-norm OPTs: 125m, 1.3b and up). */
export interface OptConfig {
  hidden_size: number;
  num_hidden_layers: number;
  num_attention_heads: number;
  ffn_dim: number;
  max_position_embeddings: number;
  word_embed_proj_dim: number;
  do_layer_norm_before: true;
  activation_function: "relu";
  enable_bias: true;
  layer_norm_elementwise_affine: true;
  vocab_size: number;
  bos_token_id: number | null;
  eos_token_id: number | number[] | null;
  pad_token_id: number;
}

/** OPT's weights in HuggingFace orientation: Linear weights are [out, in]. */
export interface OptWeights {
  embedTokens: Float32Array; // [V, d]
  /** The learned positions, offset by 2: [max_position_embeddings + 2, d]. */
  embedPositions: Float32Array;
  layers: {
    attnNormWeight: Float32Array; // [d]
    attnNormBias: Float32Array; // [d]
    q: Float32Array; // [d, d]
    qBias: Float32Array; // [d]
    k: Float32Array; // [d, d]
    kBias: Float32Array; // [d]
    v: Float32Array; // [d, d]
    vBias: Float32Array; // [d]
    out: Float32Array; // [d, d]
    outBias: Float32Array; // [d]
    finalNormWeight: Float32Array; // [d]
    finalNormBias: Float32Array; // [d]
    fc1: Float32Array; // [F, d]
    fc1Bias: Float32Array; // [F]
    fc2: Float32Array; // [d, F]
    fc2Bias: Float32Array; // [d]
  }[];
  finalNormWeight: Float32Array; // [d]
  finalNormBias: Float32Array; // [d]
}

/** OPT's position ids index its table 2 rows on (a fairseq habit kept by transformers). */
export const OPT_POSITION_OFFSET = 2;
/** nn.LayerNorm's default epsilon, which OPT uses (its config has no field for it). */
const OPT_LAYER_NORM_EPS = 1e-5;

/** GPT-2's config for the tiny-model options (1,024 positions unless `maxPositions` says otherwise). */
export function gpt2Config(o: TinyModelOptions = {}): Gpt2Config {
  const tok = TOKENIZERS[o.tokenizer ?? "llama3.1-1k"];
  const positions = o.maxPositions ?? 1024;
  return {
    n_embd: o.hidden ?? 64,
    n_layer: o.layers ?? 4,
    n_head: o.heads ?? 4,
    n_positions: positions,
    n_ctx: positions,
    n_inner: o.intermediate ?? null,
    activation_function: "gelu_new",
    layer_norm_epsilon: 1e-5,
    vocab_size: tok.vocab,
    bos_token_id: tok.bos,
    eos_token_id: o.eosTokenId ?? tok.eos,
  };
}

/** OPT's config for the tiny-model options (2,048 positions unless `maxPositions` says otherwise). */
export function optConfig(o: TinyModelOptions = {}): OptConfig {
  const tok = TOKENIZERS[o.tokenizer ?? "llama3.1-1k"];
  const hidden = o.hidden ?? 64;
  return {
    hidden_size: hidden,
    num_hidden_layers: o.layers ?? 4,
    num_attention_heads: o.heads ?? 4,
    ffn_dim: o.intermediate ?? 4 * hidden,
    max_position_embeddings: o.maxPositions ?? 2048,
    word_embed_proj_dim: hidden,
    do_layer_norm_before: true,
    activation_function: "relu",
    enable_bias: true,
    layer_norm_elementwise_affine: true,
    vocab_size: tok.vocab,
    bos_token_id: tok.bos,
    eos_token_id: o.eosTokenId ?? tok.eos,
    // The borrowed tokenizers have no padding token of OPT's; padding only needs an id that is masked.
    pad_token_id: tok.eos,
  };
}

/** GPT-2's MLP width. */
function gpt2Inner(c: Gpt2Config): number {
  return c.n_inner ?? 4 * c.n_embd;
}

/** Seeded GPT-2 weights; `embedScale` is the standard deviation of both embedding tables. */
export function gpt2Weights(c: Gpt2Config, seed: number, embedScale = 1): Gpt2Weights {
  const d = c.n_embd;
  const I = gpt2Inner(c);
  const r = seededDraws(seed);
  // A Conv1D weight [in, out] holds the same numbers as a Linear's [out, in] transposed: draw by fan-in.
  const conv1d = (stream: number, inp: number, out: number) => transpose(r.matrix(stream, out, inp), out, inp);
  return {
    wte: r.normal(1, c.vocab_size * d, embedScale),
    wpe: r.normal(4, c.n_positions * d, embedScale),
    layers: Array.from({ length: c.n_layer }, (_, i) => {
      const s = 100 + 20 * i;
      return {
        ln1Weight: r.normWeight(s, d),
        ln1Bias: r.normBias(s + 1, d),
        cAttnWeight: conv1d(s + 2, d, 3 * d),
        cAttnBias: r.bias(s + 3, 3 * d),
        attnProjWeight: conv1d(s + 4, d, d),
        attnProjBias: r.bias(s + 5, d),
        ln2Weight: r.normWeight(s + 6, d),
        ln2Bias: r.normBias(s + 7, d),
        fcWeight: conv1d(s + 8, d, I),
        fcBias: r.bias(s + 9, I),
        mlpProjWeight: conv1d(s + 10, I, d),
        mlpProjBias: r.bias(s + 11, d),
      };
    }),
    lnfWeight: r.normWeight(2, d),
    lnfBias: r.normBias(3, d),
  };
}

/** Seeded OPT weights; `embedScale` is the standard deviation of both embedding tables. */
export function optWeights(c: OptConfig, seed: number, embedScale = 1): OptWeights {
  const d = c.hidden_size;
  const F = c.ffn_dim;
  const r = seededDraws(seed);
  return {
    embedTokens: r.normal(1, c.vocab_size * d, embedScale),
    embedPositions: r.normal(4, (c.max_position_embeddings + OPT_POSITION_OFFSET) * d, embedScale),
    layers: Array.from({ length: c.num_hidden_layers }, (_, i) => {
      const s = 100 + 20 * i;
      return {
        attnNormWeight: r.normWeight(s, d),
        attnNormBias: r.normBias(s + 1, d),
        q: r.matrix(s + 2, d, d),
        qBias: r.bias(s + 3, d),
        k: r.matrix(s + 4, d, d),
        kBias: r.bias(s + 5, d),
        v: r.matrix(s + 6, d, d),
        vBias: r.bias(s + 7, d),
        out: r.matrix(s + 8, d, d),
        outBias: r.bias(s + 9, d),
        finalNormWeight: r.normWeight(s + 10, d),
        finalNormBias: r.normBias(s + 11, d),
        fc1: r.matrix(s + 12, F, d),
        fc1Bias: r.bias(s + 13, F),
        fc2: r.matrix(s + 14, d, F),
        fc2Bias: r.bias(s + 15, d),
      };
    }),
    finalNormWeight: r.normWeight(2, d),
    finalNormBias: r.normBias(3, d),
  };
}

/**
 * `input_ids.view(-1, input_shape[-1])` as torch exports it; returns the ids, the sequence length T
 * (a scalar) and the [-1, T] shape, which GPT-2 also views `position_ids` by.
 */
export function viewInputIds(w: TorchGraph, scope: string): { ids: string; seqLen: string; view: string } {
  const { g, i64 } = w;
  const shape = g.op1(scope, "Shape", ["input_ids"]);
  const seqLen = g.op1(scope, "Gather", [shape, i64("minus_one", [-1], [])], { axis: 0 });
  const seqLen1 = g.op1(scope, "Unsqueeze", [seqLen, i64("axes_0", [0])]);
  const view = g.op1(scope, "Concat", [i64("minus_one_1d", [-1]), seqLen1], { axis: 0 });
  return { ids: g.op1(scope, "Reshape", ["input_ids", view]), seqLen, view };
}

/** The causal mask [T, S] (true where key position ≤ query position), the query positions counted from the cache. */
export function causalMask(w: TorchGraph, scope: string, seqLen: string): string {
  const { g, i64 } = w;
  const total = g.op1(scope, "Gather", [g.op1(scope, "Shape", ["attention_mask"]), i64("one_i", [1], [])], {
    axis: 0,
  });
  const past = g.op1(scope, "Sub", [total, seqLen]);
  const one = i64("one_i", [1], []);
  const kpos = g.op1(scope, "Range", [i64("zero_i", [0], []), total, one]);
  const qpos = g.op1(scope, "Range", [past, total, one]);
  const kRow = g.op1(scope, "Unsqueeze", [kpos, i64("axes_0", [0])]);
  const qCol = g.op1(scope, "Unsqueeze", [qpos, i64("axes_1", [1])]);
  return g.op1(scope, "LessOrEqual", [kRow, qCol]);
}

/** The length of the cache entering the graph (`past_key_values[0][0].size(-2)`), or 0 without past inputs. */
export function pastLength(w: TorchGraph, scope: string): string {
  const { g, i64 } = w;
  if (!w.withPast) return i64("zero_i", [0], []);
  const shape = g.op1(scope, "Shape", [pastInputName(0, "key")]);
  return g.op1(scope, "Gather", [shape, i64("two_i", [2], [])], { axis: 0 });
}

/** gelu_new, 0.5·x·(1 + tanh(√(2/π)·(x + 0.044715·x³))), op by op as torch exports NewGELUActivation. */
export function geluNew(w: TorchGraph, scope: string, x: string): string {
  const { g, scalar } = w;
  const half = g.op1(scope, "Mul", [scalar("half", 0.5), x]);
  const cube = g.op1(scope, "Pow", [x, scalar("three", 3)]);
  const inner = g.op1(scope, "Add", [x, g.op1(scope, "Mul", [scalar("gelu_coeff", 0.044715), cube])]);
  const tanh = g.op1(scope, "Tanh", [g.op1(scope, "Mul", [scalar("sqrt_2_over_pi", Math.sqrt(2 / Math.PI)), inner])]);
  return g.op1(scope, "Mul", [half, g.op1(scope, "Add", [scalar("one", 1), tanh])]);
}

/** GPT-2's ONNX graph (GPT2LMHeadModel, eager attention), torch-export style. */
export function buildGpt2Onnx(
  c: Gpt2Config,
  wt: Gpt2Weights,
  withPast: boolean,
  variant: GraphVariant = {},
): Uint8Array {
  const w = startGraph("/transformer/constants", c.vocab_size, withPast, variant, variant.positionIds ?? true);
  const { g, scalar, i64 } = w;
  const d = c.n_embd;
  const H = c.n_head;
  const hd = d / H;
  const I = gpt2Inner(c);
  const { ids, seqLen, view } = viewInputIds(w, "/transformer");
  const embeds = g.op1(
    "/transformer/wte",
    "Gather",
    [g.floats("transformer.wte.weight", wt.wte, [c.vocab_size, d]), ids],
    { axis: 0 },
  );
  // With no position_ids: arange(past_length, past_length + T).unsqueeze(0), whatever the attention mask says.
  let positions: string;
  if (w.hasPositions) positions = g.op1("/transformer", "Reshape", ["position_ids", view]);
  else {
    const past = pastLength(w, "/transformer");
    const end = g.op1("/transformer", "Add", [past, seqLen]);
    const range = g.op1("/transformer", "Range", [past, end, i64("one_i", [1], [])]);
    positions = g.op1("/transformer", "Unsqueeze", [range, i64("axes_0", [0])]);
  }
  const posEmbeds = g.op1(
    "/transformer/wpe",
    "Gather",
    [g.floats("transformer.wpe.weight", wt.wpe, [c.n_positions, d]), positions],
    { axis: 0 },
  );
  let x = g.op1("/transformer", "Add", [embeds, posEmbeds]);
  // (1 − mask) · finfo.min, [B, 1, 1, S], added after the causal Where.
  const mask4 = g.op1("/transformer", "Unsqueeze", ["attention_mask", i64("axes_12", [1, 2])]);
  const maskF = g.op1("/transformer", "Cast", [mask4], { to: DataType.FLOAT });
  const min = scalar("min", FLOAT32_LOWEST);
  const maskBias = g.op1("/transformer", "Mul", [g.op1("/transformer", "Sub", [scalar("one", 1), maskF]), min]);
  const causal = causalMask(w, "/transformer", seqLen);
  const scale = scalar("attn_scale", Math.sqrt(hd));
  const qkvSplit = i64("qkv_split", [d, d, d]);

  wt.layers.forEach((lw, i) => {
    const L = `/transformer/h.${i}`;
    const pre = `transformer.h.${i}`;
    const A = `${L}/attn`;
    const h = layerNorm(w, `${L}/ln_1`, x, `${pre}.ln_1`, c.layer_norm_epsilon, lw.ln1Weight, lw.ln1Bias);
    // Conv1D holds [in, out]; the writers take [out, in] and store its transpose, the state dict's own.
    const conv1d = (
      scope: string,
      y: string,
      name: string,
      weight: Float32Array,
      bias: Float32Array,
      inp: number,
      out: number,
    ) => linearLayer(w, scope, y, `${pre}.${name}`, transpose(weight, inp, out), out, inp, bias);
    const qkv = conv1d(`${A}/c_attn`, h, "attn.c_attn", lw.cAttnWeight, lw.cAttnBias, d, 3 * d);
    const [qy, ky, vy] = g.op(A, "Split", [qkv, qkvSplit], { axis: 2 }, 3) as [string, string, string];
    const q = splitHeads(w, A, qy, H, hd);
    const [k, v] = writeKvCache(w.g, w, A, i, splitHeads(w, A, ky, H, hd), splitHeads(w, A, vy, H, hd), H, hd);
    const scores = g.op1(A, "Div", [
      g.op1(A, "MatMul", [q, g.op1(A, "Transpose", [k], { perm: [0, 1, 3, 2] })]),
      scale,
    ]);
    const masked = g.op1(A, "Add", [g.op1(A, "Where", [causal, scores, min]), maskBias]);
    const probs = g.op1(A, "Softmax", [masked], { axis: -1 });
    const merged = mergeHeads(w, A, g.op1(A, "MatMul", [probs, v]), d);
    const attnOut = conv1d(`${A}/c_proj`, merged, "attn.c_proj", lw.attnProjWeight, lw.attnProjBias, d, d);
    const x1 = g.op1(L, "Add", [attnOut, x]);
    const h2 = layerNorm(w, `${L}/ln_2`, x1, `${pre}.ln_2`, c.layer_norm_epsilon, lw.ln2Weight, lw.ln2Bias);
    const fc = conv1d(`${L}/mlp/c_fc`, h2, "mlp.c_fc", lw.fcWeight, lw.fcBias, d, I);
    const ff = conv1d(
      `${L}/mlp/c_proj`,
      geluNew(w, `${L}/mlp/act`, fc),
      "mlp.c_proj",
      lw.mlpProjWeight,
      lw.mlpProjBias,
      I,
      d,
    );
    x = g.op1(L, "Add", [x1, ff]);
  });

  const normed = layerNorm(
    w,
    "/transformer/ln_f",
    x,
    "transformer.ln_f",
    c.layer_norm_epsilon,
    wt.lnfWeight,
    wt.lnfBias,
  );
  // hidden_states.view(output_shape): [-1, T, d].
  const outShape = g.op1("/transformer", "Concat", [view, i64("hidden_1d", [d])], { axis: 0 });
  lmHead(w, g.op1("/transformer", "Reshape", [normed, outShape]), wt.wte, c.vocab_size, d);
  return finishGraph(w, "hsm tiny-gpt2");
}

/** OPT's ONNX graph (OPTForCausalLM, pre-norm, eager attention), torch-export style. */
export function buildOptOnnx(c: OptConfig, wt: OptWeights, withPast: boolean, variant: GraphVariant = {}): Uint8Array {
  const w = startGraph("/model/decoder/constants", c.vocab_size, withPast, variant, variant.positionIds ?? true);
  const { g, scalar, i64 } = w;
  const d = c.hidden_size;
  const H = c.num_attention_heads;
  const hd = d / H;
  const F = c.ffn_dim;
  const D = "/model/decoder";
  const { ids, seqLen } = viewInputIds(w, D);
  const embeds = g.op1(
    `${D}/embed_tokens`,
    "Gather",
    [g.floats("model.decoder.embed_tokens.weight", wt.embedTokens, [c.vocab_size, d]), ids],
    { axis: 0 },
  );
  // With no position_ids: (cumsum(mask) · mask − 1)[:, past:], so a left-padded row still starts at 0.
  const P = `${D}/embed_positions`;
  let positions = "position_ids";
  if (!w.hasPositions) {
    const cum = g.op1(P, "CumSum", ["attention_mask", i64("one_i", [1], [])]);
    const counted = g.op1(P, "Sub", [g.op1(P, "Mul", [cum, "attention_mask"]), i64("one_i", [1], [])]);
    const past1 = g.op1(P, "Unsqueeze", [pastLength(w, P), i64("axes_0", [0])]);
    const ends = i64("int64_max", [Number.MAX_SAFE_INTEGER]);
    positions = g.op1(P, "Slice", [counted, past1, ends, i64("axes_1", [1])]);
  }
  const offset = g.op1(P, "Add", [positions, i64("position_offset", [OPT_POSITION_OFFSET], [])]);
  const posRows = c.max_position_embeddings + OPT_POSITION_OFFSET;
  const posEmbeds = g.op1(
    P,
    "Gather",
    [g.floats("model.decoder.embed_positions.weight", wt.embedPositions, [posRows, d]), offset],
    { axis: 0 },
  );
  let x = g.op1(D, "Add", [embeds, posEmbeds]);
  // _prepare_4d_causal_attention_mask: finfo.min where the causal or the padding mask forbids, 0 elsewhere.
  const causal = causalMask(w, D, seqLen);
  const padOk = g.op1(D, "Unsqueeze", [
    g.op1(D, "Cast", ["attention_mask"], { to: DataType.BOOL }),
    i64("axes_12", [1, 2]),
  ]);
  const min = scalar("min", FLOAT32_LOWEST);
  const bias = g.op1(D, "Where", [g.op1(D, "And", [causal, padOk]), scalar("zero", 0), min]);
  const scaling = scalar("attn_scaling", 1 / Math.sqrt(hd));
  const flat = i64("shape_flat", [-1, d]);

  wt.layers.forEach((lw, i) => {
    const L = `${D}/layers.${i}`;
    const pre = `model.decoder.layers.${i}`;
    const A = `${L}/self_attn`;
    const h = layerNorm(
      w,
      `${L}/self_attn_layer_norm`,
      x,
      `${pre}.self_attn_layer_norm`,
      OPT_LAYER_NORM_EPS,
      lw.attnNormWeight,
      lw.attnNormBias,
    );
    const proj = (name: string, y: string, weight: Float32Array, b: Float32Array, out: number, inp: number) =>
      linearLayer(w, `${A}/${name}`, y, `${pre}.self_attn.${name}`, weight, out, inp, b);
    const qy = g.op1(A, "Mul", [proj("q_proj", h, lw.q, lw.qBias, d, d), scaling]);
    const q = splitHeads(w, A, qy, H, hd);
    const k0 = splitHeads(w, A, proj("k_proj", h, lw.k, lw.kBias, d, d), H, hd);
    const v0 = splitHeads(w, A, proj("v_proj", h, lw.v, lw.vBias, d, d), H, hd);
    const [k, v] = writeKvCache(w.g, w, A, i, k0, v0, H, hd);
    const scores = g.op1(A, "MatMul", [q, g.op1(A, "Transpose", [k], { perm: [0, 1, 3, 2] })]);
    const clamped = g.op1(A, "Max", [g.op1(A, "Add", [scores, bias]), min]);
    const probs = g.op1(A, "Softmax", [clamped], { axis: -1 });
    const attnOut = proj("out_proj", mergeHeads(w, A, g.op1(A, "MatMul", [probs, v]), d), lw.out, lw.outBias, d, d);
    const x1 = g.op1(L, "Add", [x, attnOut]);
    // The MLP half runs on hidden_states.reshape(-1, d) and is viewed back to [B, T, d] after its residual Add.
    const x1Flat = g.op1(L, "Reshape", [x1, flat]);
    const h2 = layerNorm(
      w,
      `${L}/final_layer_norm`,
      x1Flat,
      `${pre}.final_layer_norm`,
      OPT_LAYER_NORM_EPS,
      lw.finalNormWeight,
      lw.finalNormBias,
    );
    const fc1 = linearLayer(w, `${L}/fc1`, h2, `${pre}.fc1`, lw.fc1, F, d, lw.fc1Bias);
    const fc2 = linearLayer(
      w,
      `${L}/fc2`,
      g.op1(`${L}/activation_fn`, "Relu", [fc1]),
      `${pre}.fc2`,
      lw.fc2,
      d,
      F,
      lw.fc2Bias,
    );
    x = g.op1(L, "Reshape", [g.op1(L, "Add", [x1Flat, fc2]), g.op1(L, "Shape", [x1])]);
  });

  const normed = layerNorm(
    w,
    `${D}/final_layer_norm`,
    x,
    "model.decoder.final_layer_norm",
    OPT_LAYER_NORM_EPS,
    wt.finalNormWeight,
    wt.finalNormBias,
  );
  lmHead(w, normed, wt.embedTokens, c.vocab_size, d);
  return finishGraph(w, "hsm tiny-opt");
}

function configJson(family: Record<string, unknown>, config: object, withPast: boolean): string {
  const json = { ...family, ...config, tie_word_embeddings: true, torch_dtype: "float32", use_cache: withPast };
  return JSON.stringify(json, null, 2) + "\n";
}

/** The `config.json` transformers writes for this GPT-2. */
export function gpt2ConfigJson(c: Gpt2Config, withPast: boolean): string {
  const family = {
    architectures: ["GPT2LMHeadModel"],
    model_type: "gpt2",
    scale_attn_weights: true,
    scale_attn_by_inverse_layer_idx: false,
    reorder_and_upcast_attn: false,
  };
  return configJson(family, c, withPast);
}

/** The `config.json` transformers writes for this OPT. */
export function optConfigJson(c: OptConfig, withPast: boolean): string {
  return configJson(
    { architectures: ["OPTForCausalLM"], model_type: "opt", _remove_final_layer_norm: false },
    c,
    withPast,
  );
}
