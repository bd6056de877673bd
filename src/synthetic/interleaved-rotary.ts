/**
 * Tiny decoders of the two families whose rotary embedding turns interleaved
 * pairs (x0, x1), (x2, x3)… of the first `rotary_dim` dims of each head and
 * lets the rest pass, GPT-J and CodeGen, with seeded random weights, written
 * as torch.onnx/optimum export them from transformers 4.44. Both have a
 * `Reshape` of `input_ids` to [-1, T] before the embedding `Gather`, parallel
 * blocks (x + attn(ln_1(x)) + mlp(ln_1(x)), one LayerNorm feeding both),
 * bias-free attention projections, a gelu_new MLP with biases, scores in
 * float32 divided by √head_dim, the padding mask added as (1 − mask)·finfo.min,
 * and an untied LM head with a bias. Without a `position_ids` input both count
 * positions from the cache length (arange(past, past + T)), whatever the
 * attention mask says, so left padding moves the real tokens' positions (it
 * changes only the cached keys: rotary scores depend on differences).
 * They differ where it matters to a reader of the graph:
 *
 * - GPT-J: q_proj, k_proj and v_proj; the sin/cos table repeated over the
 *   batch and read by `GatherElements` (torch.gather); the causal `Where`
 *   before the division by √head_dim.
 * - CodeGen: one `qkv_proj` whose output is viewed as mp_num = 4 chunks, each
 *   holding its heads' q, then v, then k; the table read by a `Gather`
 *   (embed_positions[position_ids]); the division before the causal `Where`.
 */
import { DataType } from "../onnx/graph.js";
import { pastInputName } from "../onnx/kv-cache.js";
import { FLOAT32_LOWEST, TOKENIZERS, writeKvCache, type GraphVariant, type TinyModelOptions } from "./llama.js";
import {
  finishGraph,
  layerNorm,
  linearLayer,
  mergeHeads,
  seededDraws,
  startGraph,
  type TorchGraph,
} from "./torch-graph.js";

/** The fields of GPT-J's `config.json` this writer fills (transformers' GPTJConfig names). */
export interface GptjConfig {
  n_embd: number;
  n_layer: number;
  n_head: number;
  n_positions: number;
  /** The rotated dims of each head, from its start; the rest pass through. */
  rotary_dim: number;
  /** The MLP's width; null means 4 × n_embd. */
  n_inner: number | null;
  activation_function: "gelu_new";
  layer_norm_epsilon: number;
  vocab_size: number;
  bos_token_id: number | null;
  eos_token_id: number | number[] | null;
  tie_word_embeddings: false;
}

/** The fields of CodeGen's `config.json` this writer fills (transformers' CodeGenConfig names). */
export interface CodegenConfig extends Omit<GptjConfig, "tie_word_embeddings"> {
  n_ctx: number;
  tie_word_embeddings: false;
}

/** A block's weights both families share, in HuggingFace orientation (Linear weights [out, in]). */
interface RotaryBlockWeights {
  ln1Weight: Float32Array; // [d]
  ln1Bias: Float32Array; // [d]
  out: Float32Array; // [d, d]
  fcIn: Float32Array; // [I, d]
  fcInBias: Float32Array; // [I]
  fcOut: Float32Array; // [d, I]
  fcOutBias: Float32Array; // [d]
}

/** What both families' weights hold besides their attention projections. */
interface RotaryWeights {
  wte: Float32Array; // [V, d]
  lnfWeight: Float32Array; // [d]
  lnfBias: Float32Array; // [d]
  lmHead: Float32Array; // [V, d]
  lmHeadBias: Float32Array; // [V]
}

/** GPT-J's weights as its state dict holds them. */
export interface GptjWeights extends RotaryWeights {
  layers: (RotaryBlockWeights & {
    q: Float32Array; // [d, d]
    k: Float32Array; // [d, d]
    v: Float32Array; // [d, d]
  })[];
}

/** CodeGen's weights as its state dict holds them. */
export interface CodegenWeights extends RotaryWeights {
  layers: (RotaryBlockWeights & {
    /**
     * [3d, d]: mp_num = 4 chunks of 3d/4 rows, each the q rows, then the v rows, then the k rows
     * (d/4 each) of heads n_head/4 · m … n_head/4 · (m + 1) − 1 for chunk m.
     */
    qkv: Float32Array;
  })[];
}

/** CodeGen's fused projection is laid out for this many model-parallel shards (hard-coded in transformers). */
const CODEGEN_MP_NUM = 4;

/** Half of each head rotated (an even count), as CodeGen-350M does; GPT-J-6B rotates a quarter. */
function defaultRotaryDim(headDim: number): number {
  return Math.max(2, 2 * Math.floor(headDim / 4));
}

function commonConfig(o: TinyModelOptions): Omit<GptjConfig, "tie_word_embeddings"> {
  const tok = TOKENIZERS[o.tokenizer ?? "llama3.1-1k"];
  const hidden = o.hidden ?? 64;
  const heads = o.heads ?? 4;
  if (hidden % heads !== 0) throw new Error(`hidden ${hidden} is not a multiple of heads ${heads}`);
  return {
    n_embd: hidden,
    n_layer: o.layers ?? 4,
    n_head: heads,
    n_positions: o.maxPositions ?? 2048,
    rotary_dim: defaultRotaryDim(hidden / heads),
    n_inner: o.intermediate ?? null,
    activation_function: "gelu_new",
    layer_norm_epsilon: 1e-5,
    vocab_size: tok.vocab,
    bos_token_id: tok.bos,
    eos_token_id: o.eosTokenId ?? tok.eos,
  };
}

/** GPT-J's config for the tiny-model options (2,048 positions unless `maxPositions` says otherwise). */
export function gptjConfig(o: TinyModelOptions = {}): GptjConfig {
  return { ...commonConfig(o), tie_word_embeddings: false };
}

/** CodeGen's config for the tiny-model options; its heads must split into mp_num = 4 shards. */
export function codegenConfig(o: TinyModelOptions = {}): CodegenConfig {
  const c = commonConfig(o);
  if (c.n_head % CODEGEN_MP_NUM !== 0) throw new Error(`CodeGen needs heads divisible by 4, got ${c.n_head}`);
  return { ...c, n_ctx: c.n_positions, tie_word_embeddings: false };
}

function inner(c: GptjConfig | CodegenConfig): number {
  return c.n_inner ?? 4 * c.n_embd;
}

/** Draws the weights both families share; `attention(s)` draws a block's projections from streams s + 2 …. */
function drawWeights<A>(
  c: GptjConfig | CodegenConfig,
  seed: number,
  embedScale: number,
  attention: (r: ReturnType<typeof seededDraws>, s: number) => A,
): RotaryWeights & { layers: (RotaryBlockWeights & A)[] } {
  const d = c.n_embd;
  const I = inner(c);
  const r = seededDraws(seed);
  return {
    wte: r.normal(1, c.vocab_size * d, embedScale),
    layers: Array.from({ length: c.n_layer }, (_, i) => {
      const s = 100 + 20 * i;
      return {
        ln1Weight: r.normWeight(s, d),
        ln1Bias: r.normBias(s + 1, d),
        ...attention(r, s),
        out: r.matrix(s + 6, d, d),
        fcIn: r.matrix(s + 8, I, d),
        fcInBias: r.bias(s + 9, I),
        fcOut: r.matrix(s + 10, d, I),
        fcOutBias: r.bias(s + 11, d),
      };
    }),
    lnfWeight: r.normWeight(2, d),
    lnfBias: r.normBias(3, d),
    lmHead: r.matrix(4, c.vocab_size, d),
    lmHeadBias: r.bias(5, c.vocab_size),
  };
}

/** Seeded GPT-J weights; `embedScale` is the standard deviation of the token embedding. */
export function gptjWeights(c: GptjConfig, seed: number, embedScale = 1): GptjWeights {
  const d = c.n_embd;
  return drawWeights(c, seed, embedScale, (r, s) => ({
    q: r.matrix(s + 2, d, d),
    k: r.matrix(s + 3, d, d),
    v: r.matrix(s + 4, d, d),
  }));
}

/** Seeded CodeGen weights; `embedScale` is the standard deviation of the token embedding. */
export function codegenWeights(c: CodegenConfig, seed: number, embedScale = 1): CodegenWeights {
  const d = c.n_embd;
  return drawWeights(c, seed, embedScale, (r, s) => ({ qkv: r.matrix(s + 2, 3 * d, d) }));
}

/**
 * create_sinusoidal_positions in float32: [n_positions, rotary_dim], row p holding sin(p·f_i) for
 * i < rotary_dim/2, then cos(p·f_i), with f_i = 1 / 10000^(2i / rotary_dim).
 */
function sinusoidalPositions(positions: number, rd: number): Float32Array {
  const half = rd / 2;
  const table = new Float32Array(positions * rd);
  for (let i = 0; i < half; i++) {
    const invFreq = Math.fround(1 / Math.fround(10000 ** Math.fround((2 * i) / rd)));
    for (let p = 0; p < positions; p++) {
      const angle = Math.fround(p * invFreq);
      table[p * rd + i] = Math.sin(angle);
      table[p * rd + half + i] = Math.cos(angle);
    }
  }
  return table;
}

/** gelu_new, 0.5·x·(1 + tanh(√(2/π)·(x + 0.044715·x³))), op by op as torch exports NewGELUActivation. */
function geluNew(w: TorchGraph, scope: string, x: string): string {
  const { g, scalar } = w;
  const half = g.op1(scope, "Mul", [scalar("half", 0.5), x]);
  const cube = g.op1(scope, "Pow", [x, scalar("three", 3)]);
  const inner = g.op1(scope, "Add", [x, g.op1(scope, "Mul", [scalar("gelu_coeff", 0.044715), cube])]);
  const tanh = g.op1(scope, "Tanh", [g.op1(scope, "Mul", [scalar("sqrt_2_over_pi", Math.sqrt(2 / Math.PI)), inner])]);
  return g.op1(scope, "Mul", [half, g.op1(scope, "Add", [scalar("one", 1), tanh])]);
}

/** The length of the cache entering the graph (`past_key_values[0][0].size(-2)`), or 0 without past inputs. */
function pastLength(w: TorchGraph): string {
  const { g, i64 } = w;
  if (!w.withPast) return i64("zero_i", [0], []);
  const shape = g.op1("/transformer", "Shape", [pastInputName(0, "key")]);
  return g.op1("/transformer", "Gather", [shape, i64("two_i", [2], [])], { axis: 0 });
}

/** The causal mask [T, S] (true where key position ≤ query position), the query positions counted from the cache. */
function causalMask(w: TorchGraph, seqLen: string): string {
  const { g, i64 } = w;
  const S = "/transformer";
  const one = i64("one_i", [1], []);
  const total = g.op1(S, "Gather", [g.op1(S, "Shape", ["attention_mask"]), one], { axis: 0 });
  const past = g.op1(S, "Sub", [total, seqLen]);
  const kpos = g.op1(S, "Range", [i64("zero_i", [0], []), total, one]);
  const qpos = g.op1(S, "Range", [past, total, one]);
  const kRow = g.op1(S, "Unsqueeze", [kpos, i64("axes_0", [0])]);
  const qCol = g.op1(S, "Unsqueeze", [qpos, i64("axes_1", [1])]);
  return g.op1(S, "LessOrEqual", [kRow, qCol]);
}

/** How a family reads its sin/cos rows and projects q, k and v; the rest of the graph is shared. */
interface RotaryFamily {
  name: "gptj" | "codegen";
  /** [B, T, rotary_dim] rows of the table at `positions` [B', T], under `scope`. */
  sincos: (w: TorchGraph, scope: string, positions: string) => string;
  /** q, k, v as [B, T, H, hd] (not yet transposed) from the normed stream of layer `i`. */
  qkv: (w: TorchGraph, i: number, h: string) => [q: string, k: string, v: string];
  /** CodeGen divides the scores by √hd before the causal Where, GPT-J after. */
  scaleFirst: boolean;
}

/** torch.repeat_interleave(t[:, :, None, :], 2, 3): [B, T, n] → [B, T, 1, 2n], each entry twice in a row. */
function repeatInterleave(w: TorchGraph, scope: string, t: string, n: number): string {
  const { g, i64 } = w;
  const u = g.op1(scope, "Unsqueeze", [t, i64("axes_2_4", [2, 4])]);
  const pairs = g.op1(scope, "Concat", [u, u], { axis: -1 });
  return g.op1(scope, "Reshape", [pairs, i64(`shape_interleave`, [0, 0, 1, 2 * n])]);
}

/**
 * apply_rotary_pos_emb on the first rotary_dim dims of x [B, T, H, hd], the rest concatenated back:
 * x·cos + rotate_every_two(x)·sin, rotate_every_two turning (x0, x1) into (−x1, x0) for each pair.
 */
function rotate(w: TorchGraph, scope: string, x: string, sin: string, cos: string, rd: number, hd: number): string {
  const { g, i64 } = w;
  const last = i64("axes_last", [-1]);
  const end = i64("int64_max", [Number.MAX_SAFE_INTEGER]);
  const zero = i64("start_0", [0]);
  const xr = rd === hd ? x : g.op1(scope, "Slice", [x, zero, i64("rotary_dim", [rd]), last]);
  const step2 = i64("step_2", [2]);
  const evens = g.op1(scope, "Slice", [xr, zero, end, last, step2]);
  const odds = g.op1(scope, "Slice", [xr, i64("start_1", [1]), end, last, step2]);
  const pairs = g.op1(
    scope,
    "Concat",
    [g.op1(scope, "Unsqueeze", [g.op1(scope, "Neg", [odds]), last]), g.op1(scope, "Unsqueeze", [evens, last])],
    { axis: -1 },
  );
  const rot = g.op1(scope, "Reshape", [pairs, i64("shape_flatten_pairs", [0, 0, 0, rd])]);
  const turned = g.op1(scope, "Add", [g.op1(scope, "Mul", [xr, cos]), g.op1(scope, "Mul", [rot, sin])]);
  if (rd === hd) return turned;
  const pass = g.op1(scope, "Slice", [x, i64("rotary_dim", [rd]), end, last]);
  return g.op1(scope, "Concat", [turned, pass], { axis: -1 });
}

/** The graph both families share, torch-export style; `f` supplies what differs. */
function buildRotaryOnnx(
  f: RotaryFamily,
  c: GptjConfig | CodegenConfig,
  wt: GptjWeights | CodegenWeights,
  withPast: boolean,
  variant: GraphVariant,
): Uint8Array {
  const w = startGraph("/transformer/constants", c.vocab_size, withPast, variant, variant.positionIds ?? true);
  const { g, scalar, i64 } = w;
  const d = c.n_embd;
  const H = c.n_head;
  const hd = d / H;
  const rd = c.rotary_dim;
  const I = inner(c);
  const eps = c.layer_norm_epsilon;
  const S = "/transformer";
  if (rd % 2 !== 0 || rd > hd) throw new Error(`rotary_dim ${rd} must be even and at most head_dim ${hd}`);

  // input_ids.view(-1, input_shape[-1]); position_ids are viewed the same way.
  const idsShape = g.op1(S, "Shape", ["input_ids"]);
  const seqLen = g.op1(S, "Gather", [idsShape, i64("minus_one", [-1], [])], { axis: 0 });
  const view = g.op1(S, "Concat", [i64("minus_one_1d", [-1]), g.op1(S, "Unsqueeze", [seqLen, i64("axes_0", [0])])], {
    axis: 0,
  });
  const ids = g.op1(S, "Reshape", ["input_ids", view]);
  let x = g.op1(`${S}/wte`, "Gather", [g.floats("transformer.wte.weight", wt.wte, [c.vocab_size, d]), ids], {
    axis: 0,
  });
  // With no position_ids: arange(past_length, past_length + T).unsqueeze(0), whatever the attention mask says.
  let positions: string;
  if (w.hasPositions) positions = g.op1(S, "Reshape", ["position_ids", view]);
  else {
    const past = pastLength(w);
    const range = g.op1(S, "Range", [past, g.op1(S, "Add", [past, seqLen]), i64("one_i", [1], [])]);
    positions = g.op1(S, "Reshape", [g.op1(S, "Unsqueeze", [range, i64("axes_0", [0])]), view]);
  }
  // (1 − mask) · finfo.min, [B, 1, 1, S], added to the scores after the causal Where.
  const mask4 = g.op1(S, "Unsqueeze", ["attention_mask", i64("axes_12", [1, 2])]);
  const maskF = g.op1(S, "Cast", [mask4], { to: DataType.FLOAT });
  const min = scalar("min", FLOAT32_LOWEST);
  const maskBias = g.op1(S, "Mul", [g.op1(S, "Sub", [scalar("one", 1), maskF]), min]);
  const causal = causalMask(w, seqLen);
  const scaleAttn = scalar("scale_attn", Math.sqrt(hd));
  const halves = i64("sincos_split", [rd / 2, rd / 2]);

  wt.layers.forEach((lw, i) => {
    const L = `${S}/h.${i}`;
    const pre = `transformer.h.${i}`;
    const A = `${L}/attn`;
    const h = layerNorm(w, `${L}/ln_1`, x, `${pre}.ln_1`, eps, lw.ln1Weight, lw.ln1Bias);
    const [qy, ky, vy] = f.qkv(w, i, h);
    const [sinRows, cosRows] = g.op(A, "Split", [f.sincos(w, A, positions), halves], { axis: -1 }, 2);
    const sin = repeatInterleave(w, A, sinRows!, rd / 2);
    const cos = repeatInterleave(w, A, cosRows!, rd / 2);
    const heads = (t: string) => g.op1(A, "Transpose", [t], { perm: [0, 2, 1, 3] });
    const q = heads(rotate(w, A, qy, sin, cos, rd, hd));
    const [k, v] = writeKvCache(w.g, w, A, i, heads(rotate(w, A, ky, sin, cos, rd, hd)), heads(vy), H, hd);
    let scores = g.op1(A, "MatMul", [q, g.op1(A, "Transpose", [k], { perm: [0, 1, 3, 2] })]);
    if (f.scaleFirst) scores = g.op1(A, "Div", [scores, scaleAttn]);
    scores = g.op1(A, "Where", [causal, scores, min]);
    if (!f.scaleFirst) scores = g.op1(A, "Div", [scores, scaleAttn]);
    const probs = g.op1(A, "Softmax", [g.op1(A, "Add", [scores, maskBias])], { axis: -1 });
    const merged = mergeHeads(w, A, g.op1(A, "MatMul", [probs, v]), d);
    const attnOut = linearLayer(w, `${A}/out_proj`, merged, `${pre}.attn.out_proj`, lw.out, d, d);
    const fc = linearLayer(w, `${L}/mlp/fc_in`, h, `${pre}.mlp.fc_in`, lw.fcIn, I, d, lw.fcInBias);
    const act = geluNew(w, `${L}/mlp/act`, fc);
    const ff = linearLayer(w, `${L}/mlp/fc_out`, act, `${pre}.mlp.fc_out`, lw.fcOut, d, I, lw.fcOutBias);
    // attn_output + feed_forward_hidden_states + residual
    x = g.op1(L, "Add", [g.op1(L, "Add", [attnOut, ff]), x]);
  });

  const normed = layerNorm(w, `${S}/ln_f`, x, "transformer.ln_f", eps, wt.lnfWeight, wt.lnfBias);
  // hidden_states.view(input_shape + (d,))
  const outShape = g.op1(S, "Concat", [idsShape, i64("hidden_1d", [d])], { axis: 0 });
  const y = w.linear(
    g,
    "/lm_head",
    g.op1(S, "Reshape", [normed, outShape]),
    "lm_head.weight",
    wt.lmHead,
    c.vocab_size,
    d,
  );
  const bias = g.floats("lm_head.bias", wt.lmHeadBias, [c.vocab_size]);
  g.nodes.push({ name: "/lm_head/Add", opType: "Add", input: [y, bias], output: ["logits"] });
  return finishGraph(w, `hsm tiny-${f.name}`);
}

/** GPT-J's three projections, and its table repeated over the batch and read by torch.gather. */
function gptjFamily(c: GptjConfig, wt: GptjWeights): RotaryFamily {
  const d = c.n_embd;
  const rd = c.rotary_dim;
  const positionTable = sinusoidalPositions(c.n_positions, rd);
  return {
    name: "gptj",
    sincos: (w, scope, positions) => {
      const { g, i64 } = w;
      const table = g.floats("/transformer/constants/embed_positions", positionTable, [1, c.n_positions, rd]);
      const shape = g.op1(scope, "Shape", [positions]);
      const batch = g.op1(scope, "Gather", [shape, i64("zero_i_1d", [0])], { axis: 0 });
      const reps = g.op1(scope, "Concat", [batch, i64("ones_2", [1, 1])], { axis: 0 });
      const tiled = g.op1(scope, "Tile", [table, reps]); // [B, P, rd]
      const index = g.op1(scope, "Tile", [
        g.op1(scope, "Unsqueeze", [positions, i64("axes_last", [-1])]),
        i64("repeat_rotary", [1, 1, rd]),
      ]);
      return g.op1(scope, "GatherElements", [tiled, index], { axis: 1 });
    },
    qkv: (w, i, h) => {
      const A = `/transformer/h.${i}/attn`;
      const lw = wt.layers[i]!;
      const shape = w.i64("shape_heads", [0, 0, c.n_head, d / c.n_head]);
      const proj = (name: string, weight: Float32Array) =>
        w.g.op1(A, "Reshape", [
          linearLayer(w, `${A}/${name}`, h, `transformer.h.${i}.attn.${name}`, weight, d, d),
          shape,
        ]);
      return [proj("q_proj", lw.q), proj("k_proj", lw.k), proj("v_proj", lw.v)];
    },
    scaleFirst: false,
  };
}

/** CodeGen's fused projection split the mp_num way, and its table read by indexing. */
function codegenFamily(c: CodegenConfig, wt: CodegenWeights): RotaryFamily {
  const d = c.n_embd;
  const H = c.n_head;
  const hd = d / H;
  const local = d / CODEGEN_MP_NUM;
  const positionTable = sinusoidalPositions(c.n_positions, c.rotary_dim);
  return {
    name: "codegen",
    sincos: (w, scope, positions) => {
      const table = w.g.floats("/transformer/constants/embed_positions", positionTable, [c.n_positions, c.rotary_dim]);
      return w.g.op1(scope, "Gather", [table, positions], { axis: 0 });
    },
    qkv: (w, i, h) => {
      const { g, i64 } = w;
      const A = `/transformer/h.${i}/attn`;
      const pre = `transformer.h.${i}.attn`;
      const qkv = linearLayer(w, `${A}/qkv_proj`, h, `${pre}.qkv_proj`, wt.layers[i]!.qkv, 3 * d, d);
      // qkv.reshape(..., mp_num, -1), split into query, value, key (that order) in every chunk.
      const chunks = g.op1(A, "Reshape", [qkv, i64("shape_mp", [0, 0, CODEGEN_MP_NUM, -1])]);
      const [qs, vs, ks] = g.op(A, "Split", [chunks, i64("mp_split", [local, local, local])], { axis: -1 }, 3);
      // _split_heads: (..., mp_num, H / mp_num, hd), then (..., H, hd).
      const heads = (t: string) => {
        const perShard = g.op1(A, "Reshape", [t, i64("shape_mp_heads", [0, 0, 0, H / CODEGEN_MP_NUM, hd])]);
        return g.op1(A, "Reshape", [perShard, i64("shape_heads", [0, 0, -1, hd])]);
      };
      return [heads(qs!), heads(ks!), heads(vs!)];
    },
    scaleFirst: true,
  };
}

/** GPT-J's ONNX graph (GPTJForCausalLM, eager attention), torch-export style. */
export function buildGptjOnnx(
  c: GptjConfig,
  w: GptjWeights,
  withPast: boolean,
  variant: GraphVariant = {},
): Uint8Array {
  return buildRotaryOnnx(gptjFamily(c, w), c, w, withPast, variant);
}

/** CodeGen's ONNX graph (CodeGenForCausalLM, eager attention), torch-export style. */
export function buildCodegenOnnx(
  c: CodegenConfig,
  w: CodegenWeights,
  withPast: boolean,
  variant: GraphVariant = {},
): Uint8Array {
  if (c.n_head % CODEGEN_MP_NUM !== 0) throw new Error(`CodeGen needs heads divisible by 4, got ${c.n_head}`);
  return buildRotaryOnnx(codegenFamily(c, w), c, w, withPast, variant);
}

function configJson(family: Record<string, unknown>, config: object, withPast: boolean): string {
  const json = { ...family, ...config, torch_dtype: "float32", use_cache: withPast };
  return JSON.stringify(json, null, 2) + "\n";
}

/** The `config.json` transformers writes for this GPT-J. */
export function gptjConfigJson(c: GptjConfig, withPast: boolean): string {
  return configJson({ architectures: ["GPTJForCausalLM"], model_type: "gptj" }, c, withPast);
}

/** The `config.json` transformers writes for this CodeGen. */
export function codegenConfigJson(c: CodegenConfig, withPast: boolean): string {
  return configJson({ architectures: ["CodeGenForCausalLM"], model_type: "codegen" }, c, withPast);
}
