/**
 * The Llama relatives' writers (Mistral, Mixtral, OLMo, StarCoder2):
 * onnxruntime running their graphs computes the float64 reference's logits,
 * with and without the KV cache and the position_ids input; the sliding window
 * and clip_qkv act; Mixtral routes each token to its top experts; a
 * left-padded row keeps its logits; config.json carries each family's names.
 */
import * as ort from "onnxruntime-node";
import { describe, expect, it } from "vitest";

import { DataType, decodeModel, encodeModel, num } from "../../src/onnx/graph.js";
import {
  buildMistralOnnx,
  buildMixtralOnnx,
  buildOlmoOnnx,
  buildStarcoder2Onnx,
  mistralConfig,
  mistralConfigJson,
  mistralWeights,
  mixtralConfig,
  mixtralConfigJson,
  mixtralWeights,
  olmoConfig,
  olmoConfigJson,
  olmoWeights,
  starcoder2Config,
  starcoder2ConfigJson,
  starcoder2Weights,
  type LlamaRelativeOptions,
} from "../../src/synthetic/llama-relatives.js";
import { float32Linear, type GraphVariant, type LinearWriter } from "../../src/synthetic/llama.js";
import {
  referenceMistral,
  referenceMixtral,
  referenceOlmo,
  referenceStarcoder2,
} from "../helpers/llama-relatives-reference.js";
import { LOGITS_F32 } from "../tolerances.js";

/** One family with one set of options, as the tests see it. */
interface Case {
  name: string;
  kvHeads: number;
  headDim: number;
  layers: number;
  /** Projections plus the LM head: how many times the LinearWriter must be called. */
  linears: number;
  build: (withPast: boolean, variant?: GraphVariant) => Uint8Array;
  reference: (ids: number[]) => Float64Array;
  configJson: (withPast: boolean) => string;
  /** Fields config.json must hold. */
  expected: Record<string, unknown>;
  /** Node and initializer names a torch export of the family has. */
  names: string[];
  /** The same weights with the family's option (sliding window, clip_qkv) off, where the case sets one. */
  optionOff?: { what: string; build: () => Uint8Array };
}

const GEOMETRY = { layers: 2, hidden: 64, heads: 4, kvHeads: 2 } as const;

/** The fields all four write from {@link GEOMETRY} and the 1k-rank tokenizer. */
const SHARED = {
  hidden_size: 64,
  intermediate_size: 128,
  num_hidden_layers: 2,
  num_attention_heads: 4,
  num_key_value_heads: 2,
  max_position_embeddings: 2048,
  vocab_size: 1280,
  bos_token_id: 1024,
  eos_token_id: 1025,
  torch_dtype: "float32",
};

function mistralCase(o: LlamaRelativeOptions): Case {
  const c = mistralConfig(o);
  const w = mistralWeights(c, o.seed ?? 1);
  return {
    name: `mistral, sliding_window ${c.sliding_window}`,
    kvHeads: c.num_key_value_heads,
    headDim: c.head_dim,
    layers: c.num_hidden_layers,
    linears: 7 * c.num_hidden_layers + 1,
    build: (withPast, variant) => buildMistralOnnx(c, w, withPast, variant),
    reference: (ids) => referenceMistral(c, w, ids).logits,
    configJson: (withPast) => mistralConfigJson(c, withPast),
    expected: {
      ...SHARED,
      architectures: ["MistralForCausalLM"],
      model_type: "mistral",
      head_dim: 16,
      hidden_act: "silu",
      rms_norm_eps: 1e-5,
      rope_theta: 10000,
      sliding_window: c.sliding_window,
      tie_word_embeddings: false,
    },
    names: [
      "/model/embed_tokens/Gather",
      "/model/layers.0/input_layernorm/ReduceMean",
      "/model/layers.0/self_attn/q_proj/MatMul",
      "/model/layers.1/mlp/down_proj/MatMul",
      "/model/norm/Mul_1",
      "/lm_head/MatMul",
      "model.layers.1.post_attention_layernorm.weight",
      "model.layers.0.mlp.gate_proj.weight",
      "model.rotary_emb.cos_cached",
      "model.norm.weight",
      "lm_head.weight",
    ],
    optionOff: {
      what: "sliding window",
      build: () => buildMistralOnnx({ ...c, sliding_window: null }, w, false),
    },
  };
}

function mixtralCase(o: LlamaRelativeOptions): Case {
  const c = mixtralConfig(o);
  const w = mixtralWeights(c, o.seed ?? 1);
  const E = c.num_local_experts;
  return {
    name: `mixtral, ${E} experts, top ${c.num_experts_per_tok}`,
    kvHeads: c.num_key_value_heads,
    headDim: c.hidden_size / c.num_attention_heads,
    layers: c.num_hidden_layers,
    linears: (4 + 1 + 3 * E) * c.num_hidden_layers + 1,
    build: (withPast, variant) => buildMixtralOnnx(c, w, withPast, variant),
    reference: (ids) => referenceMixtral(c, w, ids).logits,
    configJson: (withPast) => mixtralConfigJson(c, withPast),
    expected: {
      ...SHARED,
      architectures: ["MixtralForCausalLM"],
      model_type: "mixtral",
      hidden_act: "silu",
      rms_norm_eps: 1e-5,
      rope_theta: 1e6,
      sliding_window: null,
      num_local_experts: 4,
      num_experts_per_tok: 2,
      output_router_logits: false,
      tie_word_embeddings: false,
    },
    names: [
      "/model/layers.0/block_sparse_moe/gate/MatMul",
      "/model/layers.0/block_sparse_moe/TopK",
      "/model/layers.0/block_sparse_moe/ScatterElements",
      "/model/layers.1/block_sparse_moe/experts.3/w2/MatMul",
      "model.layers.0.block_sparse_moe.gate.weight",
      "model.layers.1.block_sparse_moe.experts.2.w1.weight",
      "model.layers.1.block_sparse_moe.experts.2.w3.weight",
      "model.norm.weight",
    ],
  };
}

function olmoCase(o: LlamaRelativeOptions): Case {
  const c = olmoConfig(o);
  const w = olmoWeights(c, o.seed ?? 1);
  return {
    name: `olmo, clip_qkv ${c.clip_qkv}`,
    kvHeads: c.num_key_value_heads,
    headDim: c.hidden_size / c.num_attention_heads,
    layers: c.num_hidden_layers,
    linears: 7 * c.num_hidden_layers + 1,
    build: (withPast, variant) => buildOlmoOnnx(c, w, withPast, variant),
    reference: (ids) => referenceOlmo(c, w, ids).logits,
    configJson: (withPast) => olmoConfigJson(c, withPast),
    expected: {
      ...SHARED,
      architectures: ["OlmoForCausalLM"],
      model_type: "olmo",
      hidden_act: "silu",
      rope_theta: 10000,
      attention_bias: false,
      clip_qkv: c.clip_qkv,
      tie_word_embeddings: false,
    },
    names: [
      "/model/layers.0/input_layernorm/Constant",
      "/model/layers.0/input_layernorm/Constant_1",
      "/model/layers.0/input_layernorm/LayerNormalization",
      "/model/layers.0/self_attn/Clip",
      "/model/norm/LayerNormalization",
      "model.layers.1.self_attn.v_proj.weight",
      "model.layers.1.mlp.up_proj.weight",
      "lm_head.weight",
    ],
    optionOff: { what: "clip_qkv", build: () => buildOlmoOnnx({ ...c, clip_qkv: null }, w, false) },
  };
}

function starcoder2Case(o: LlamaRelativeOptions): Case {
  const c = starcoder2Config(o);
  const w = starcoder2Weights(c, o.seed ?? 1);
  return {
    name: `starcoder2, sliding_window ${c.sliding_window}`,
    kvHeads: c.num_key_value_heads,
    headDim: c.hidden_size / c.num_attention_heads,
    layers: c.num_hidden_layers,
    linears: 6 * c.num_hidden_layers + 1,
    build: (withPast, variant) => buildStarcoder2Onnx(c, w, withPast, variant),
    reference: (ids) => referenceStarcoder2(c, w, ids).logits,
    configJson: (withPast) => starcoder2ConfigJson(c, withPast),
    expected: {
      ...SHARED,
      architectures: ["Starcoder2ForCausalLM"],
      model_type: "starcoder2",
      hidden_act: "gelu_pytorch_tanh",
      norm_epsilon: 1e-5,
      rope_theta: 10000,
      use_bias: true,
      sliding_window: c.sliding_window,
      tie_word_embeddings: true,
    },
    names: [
      "/model/layers.0/input_layernorm/LayerNormalization",
      "/model/layers.0/self_attn/k_proj/Add",
      "/model/layers.0/self_attn/o_proj/Add",
      "/model/layers.1/mlp/act/Tanh",
      "/model/layers.1/mlp/c_proj/Add",
      "/model/norm/LayerNormalization",
      "model.layers.0.self_attn.q_proj.bias",
      "model.layers.1.mlp.c_fc.bias",
      "model.layers.1.post_attention_layernorm.bias",
      "model.norm.bias",
    ],
    optionOff: {
      what: "sliding window",
      build: () => buildStarcoder2Onnx({ ...c, sliding_window: null }, w, false),
    },
  };
}

const CASES: Case[] = [
  mistralCase({ ...GEOMETRY, seed: 7, slidingWindow: 4 }),
  mixtralCase({ ...GEOMETRY, seed: 8 }),
  olmoCase({ ...GEOMETRY, seed: 9, clipQkv: 0.5 }),
  starcoder2Case({ ...GEOMETRY, seed: 10, slidingWindow: 4 }),
];

const SEQUENCES = [[1024, 791, 68, 315, 982], [1024], [1024, 12, 300, 77, 5, 901, 44, 1000, 3, 250]];
const PAD = 0;

const int64 = (rows: number[][]) =>
  new ort.Tensor("int64", BigInt64Array.from(rows.flat(), BigInt), [rows.length, rows[0]!.length]);

/** The rows left-padded to one length, with their attention mask. */
function leftPadded(rows: number[][]): { ids: number[][]; mask: number[][] } {
  const T = Math.max(...rows.map((r) => r.length));
  return {
    ids: rows.map((r) => [...Array<number>(T - r.length).fill(PAD), ...r]),
    mask: rows.map((r) => [...Array<number>(T - r.length).fill(0), ...Array<number>(r.length).fill(1)]),
  };
}

/** Empty past inputs for every layer of `k` at batch `B`. */
function emptyPast(k: Case, B: number): Record<string, ort.Tensor> {
  const feeds: Record<string, ort.Tensor> = {};
  for (let i = 0; i < k.layers; i++)
    for (const kind of ["key", "value"])
      feeds[`past_key_values.${i}.${kind}`] = new ort.Tensor("float32", new Float32Array(0), [
        B,
        k.kvHeads,
        0,
        k.headDim,
      ]);
  return feeds;
}

/** The present outputs fed back as the next step's past inputs. */
function pastFrom(outputs: ort.InferenceSession.OnnxValueMapType): Record<string, ort.Tensor> {
  const feeds: Record<string, ort.Tensor> = {};
  for (const [name, t] of Object.entries(outputs))
    if (name.startsWith("present.")) feeds[name.replace("present.", "past_key_values.")] = t as ort.Tensor;
  return feeds;
}

/** Each row's logits at the last position. */
function lastRows(logits: ort.Tensor): Float32Array[] {
  const [B, T, V] = logits.dims as [number, number, number];
  const data = logits.data as Float32Array;
  return Array.from({ length: B }, (_, b) => data.slice((b * T + T - 1) * V, (b * T + T) * V));
}

function worstDifference(a: ArrayLike<number>, b: ArrayLike<number>): number {
  let worst = 0;
  for (let i = 0; i < a.length; i++) worst = Math.max(worst, Math.abs(a[i]! - b[i]!));
  return worst;
}

async function run(
  bytes: Uint8Array,
  ids: number[][],
  mask: number[][],
  extra: Record<string, ort.Tensor> = {},
): Promise<ort.InferenceSession.OnnxValueMapType> {
  const session = await ort.InferenceSession.create(Buffer.from(bytes));
  try {
    return await session.run({ input_ids: int64(ids), attention_mask: int64(mask), ...extra });
  } finally {
    await session.release();
  }
}

const ones = (n: number) => Array<number>(n).fill(1);
const range = (from: number, to: number) => Array.from({ length: to - from }, (_, i) => from + i);

/** The last logits of the full forward of `ids` at batch 1, through the graph with position_ids. */
async function lastLogits(bytes: Uint8Array, ids: number[]): Promise<Float32Array> {
  const out = await run(bytes, [ids], [ones(ids.length)], { position_ids: int64([range(0, ids.length)]) });
  return lastRows(out.logits as ort.Tensor)[0]!;
}

describe.each(CASES)("$name", (k) => {
  it("computes the float64 reference's last logits at batch 1", async () => {
    const plain = k.build(false);
    for (const ids of SEQUENCES)
      expect(worstDifference(await lastLogits(plain, ids), k.reference(ids))).toBeLessThanOrEqual(LOGITS_F32);
  });

  it("counts positions from the cache without a position_ids input, as position_ids 0 … n − 1 do", async () => {
    const withIds = decodeModel(k.build(false)).graph!;
    const without = k.build(false, { positionIds: false });
    expect(withIds.input!.map((v) => v.name)).toEqual(["input_ids", "attention_mask", "position_ids"]);
    expect(decodeModel(without).graph!.input!.map((v) => v.name)).toEqual(["input_ids", "attention_mask"]);
    const ids = SEQUENCES[2]!;
    const a = (await run(without, [ids], [ones(ids.length)])).logits as ort.Tensor;
    const b = await lastLogits(k.build(false), ids);
    expect(lastRows(a)[0]).toEqual(b);
  });

  it("writes torch's node and initializer names", () => {
    const graph = decodeModel(k.build(false)).graph!;
    expect(graph.output!.map((v) => v.name)).toEqual(["logits"]);
    const names = new Set([...graph.node!.map((n) => n.name), ...graph.initializer!.map((t) => t.name)]);
    for (const name of k.names) expect(names).toContain(name);
    for (const n of graph.node!.filter((n) => n.opType === "LayerNormalization"))
      expect(num(n.attribute!.find((a) => a.name === "axis")!.i)).toBe(-1);
  });

  it("writes every projection and the LM head with the LinearWriter given", () => {
    let calls = 0;
    const counting: LinearWriter = (...args) => {
      calls++;
      return float32Linear(...args);
    };
    k.build(true, { linear: counting });
    expect(calls).toBe(k.linears);
  });

  it("decodes with the cache to the logits of the full forward", async () => {
    const prompt = SEQUENCES[2]!.slice(0, 7);
    const next = 4321 % 1280;
    const full = [...prompt, next];
    const wantFull = await lastLogits(k.build(false), full);
    const positions = { position_ids: int64([range(0, prompt.length)]) };
    // The prompt through the no-past graph with present outputs, and through the with-past graph from an empty cache.
    const presentOnly = await run(k.build(false, { present: true }), [prompt], [ones(prompt.length)], positions);
    const withPast = k.build(true);
    const fromEmpty = await run(withPast, [prompt], [ones(prompt.length)], { ...positions, ...emptyPast(k, 1) });
    for (const [name, t] of Object.entries(presentOnly)) expect((fromEmpty[name] as ort.Tensor).data).toEqual(t.data);
    expect(Object.keys(presentOnly).filter((n) => n.startsWith("present.")).length).toBe(2 * k.layers);
    const step = await run(withPast, [[next]], [ones(full.length)], {
      position_ids: int64([[prompt.length]]),
      ...pastFrom(presentOnly),
    });
    const got = lastRows(step.logits as ort.Tensor)[0]!;
    expect(worstDifference(got, wantFull)).toBeLessThanOrEqual(LOGITS_F32);
    expect(worstDifference(got, k.reference(full))).toBeLessThanOrEqual(LOGITS_F32);
  });

  it("gives a left-padded row its unpadded logits without position_ids, before and after a cached step", async () => {
    // The padded row's positions start at its padding count; rotary attention sees only their differences.
    const long = SEQUENCES[2]!;
    const short = SEQUENCES[0]!;
    const { ids, mask } = leftPadded([long, short]);
    const withPast = k.build(true, { positionIds: false });
    const prompt = await run(withPast, ids, mask, emptyPast(k, 2));
    const [, padded] = lastRows(prompt.logits as ort.Tensor);
    expect(worstDifference(padded!, k.reference(short))).toBeLessThanOrEqual(LOGITS_F32);
    const step = await run(withPast, [[17], [29]], [...mask.map((m) => [...m, 1])], pastFrom(prompt));
    const [, paddedStep] = lastRows(step.logits as ort.Tensor);
    expect(worstDifference(paddedStep!, k.reference([...short, 29]))).toBeLessThanOrEqual(LOGITS_F32);
  });

  it.runIf(k.optionOff)("changes the logits through its option", async () => {
    const ids = SEQUENCES[2]!;
    const on = await lastLogits(k.build(false), ids);
    const off = await lastLogits(k.optionOff!.build(), ids);
    const scale = Math.max(...on.map(Math.abs));
    expect(worstDifference(on, off), k.optionOff!.what).toBeGreaterThan(0.01 * scale);
  });

  it("writes config.json with the family's own field names", () => {
    const json = JSON.parse(k.configJson(true)) as Record<string, unknown>;
    expect(json).toMatchObject({ ...k.expected, use_cache: true });
    expect(JSON.parse(k.configJson(false))).toMatchObject({ use_cache: false });
  });
});

describe("mixtral's router", () => {
  it("gives each token its top-2 experts, weights summing to one, the others zero", async () => {
    const k = CASES[1]!;
    const model = decodeModel(k.build(false));
    const graph = model.graph!;
    const scatter = graph.node!.find((n) => n.name === "/model/layers.0/block_sparse_moe/ScatterElements")!;
    const name = scatter.output![0]!;
    graph.output!.push({ name, type: { tensorType: { elemType: DataType.FLOAT } } });
    const ids = SEQUENCES[2]!;
    const out = await run(encodeModel(model), [ids], [ones(ids.length)], {
      position_ids: int64([range(0, ids.length)]),
    });
    const dense = (out[name] as ort.Tensor).data as Float32Array;
    expect(dense.length).toBe(ids.length * 4);
    const chosen = new Set<number>();
    for (let t = 0; t < ids.length; t++) {
      const row = Array.from(dense.subarray(4 * t, 4 * t + 4));
      expect(row.filter((v) => v > 0).length).toBe(2);
      expect(row.reduce((a, v) => a + v, 0)).toBeCloseTo(1, 6);
      row.forEach((v, e) => v > 0 && chosen.add(e));
    }
    // A router that always picked the same pair would not test the weighting.
    expect(chosen.size).toBeGreaterThan(2);
  });
});
