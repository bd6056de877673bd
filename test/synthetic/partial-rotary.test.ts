/**
 * The rotary writers with LayerNorm biases (Falcon, Phi, StableLM):
 * onnxruntime running their graphs computes the float64 reference's logits,
 * with and without the KV cache (Falcon's of one head); the graph without a
 * position_ids input matches the one fed 0 … n − 1; a left-padded row keeps
 * its unpadded logits (rotary attention sees only position differences);
 * config.json carries each family's own field names.
 */
import * as ort from "onnxruntime-node";
import { describe, expect, it } from "vitest";

import { decodeModel, num } from "../../src/onnx/graph.js";
import {
  float32Linear,
  type GraphVariant,
  type LinearWriter,
  type TinyModelOptions,
} from "../../src/synthetic/llama.js";
import {
  buildFalconOnnx,
  buildPhiOnnx,
  buildStablelmOnnx,
  falconConfig,
  falconConfigJson,
  falconWeights,
  phiConfig,
  phiConfigJson,
  phiWeights,
  stablelmConfig,
  stablelmConfigJson,
  stablelmWeights,
} from "../../src/synthetic/partial-rotary.js";
import {
  referenceFalcon,
  referencePhi,
  referenceStablelm,
  rotaryReference,
} from "../helpers/partial-rotary-reference.js";
import { FLOAT64_REORDER, LOGITS_F32 } from "../tolerances.js";

/** One family at one size, as the tests see it. */
interface Case {
  name: string;
  /** Key/value heads of the cache. */
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
}

const SIZE: TinyModelOptions = { layers: 2, hidden: 64, heads: 4, maxPositions: 64 };

/** Builds each variant once (a LinearWriter given, every time). */
function memo(build: (withPast: boolean, variant?: GraphVariant) => Uint8Array): Case["build"] {
  const built = new Map<string, Uint8Array>();
  return (withPast, variant = {}) => {
    if (variant.linear) return build(withPast, variant);
    const key = JSON.stringify([withPast, variant.present ?? false, variant.positionIds ?? true]);
    if (!built.has(key)) built.set(key, build(withPast, variant));
    return built.get(key)!;
  };
}

function falconCase(seed: number): Case {
  const c = falconConfig({ ...SIZE, seed });
  const w = falconWeights(c, seed);
  return {
    name: "falcon (multi-query, parallel attention)",
    kvHeads: 1,
    headDim: 16,
    layers: 2,
    linears: 4 * 2 + 1,
    build: memo((withPast, variant) => buildFalconOnnx(c, w, withPast, variant)),
    reference: (ids) => referenceFalcon(c, w, ids).logits,
    configJson: (withPast) => falconConfigJson(c, withPast),
    expected: {
      architectures: ["FalconForCausalLM"],
      model_type: "falcon",
      hidden_size: 64,
      num_hidden_layers: 2,
      num_attention_heads: 4,
      multi_query: true,
      parallel_attn: true,
      new_decoder_architecture: false,
      bias: false,
      alibi: false,
      ffn_hidden_size: 256,
      activation: "gelu",
      layer_norm_epsilon: 1e-5,
      rope_theta: 10000,
      vocab_size: 1280,
      bos_token_id: 1024,
      eos_token_id: 1025,
      tie_word_embeddings: true,
      torch_dtype: "float32",
    },
    names: [
      "/transformer/word_embeddings/Gather",
      "/transformer/h.0/input_layernorm/LayerNormalization",
      "/transformer/h.0/self_attention/query_key_value/MatMul",
      "/transformer/h.0/self_attention/dense/MatMul",
      "/transformer/h.0/mlp/dense_h_to_4h/MatMul",
      "/transformer/h.0/mlp/act/Erf",
      "/transformer/h.1/mlp/dense_4h_to_h/MatMul",
      "/transformer/ln_f/LayerNormalization",
      "/lm_head/MatMul",
      "transformer.word_embeddings.weight",
      "transformer.h.1.input_layernorm.bias",
      "transformer.h.1.self_attention.query_key_value.weight",
      "transformer.h.0.mlp.dense_4h_to_h.weight",
      "transformer.ln_f.bias",
      "lm_head.weight",
    ],
  };
}

function phiCase(seed: number): Case {
  const c = phiConfig({ ...SIZE, seed });
  const w = phiWeights(c, seed);
  return {
    name: "phi (rotary on half of each head)",
    kvHeads: 4,
    headDim: 16,
    layers: 2,
    linears: 6 * 2 + 1,
    build: memo((withPast, variant) => buildPhiOnnx(c, w, withPast, variant)),
    reference: (ids) => referencePhi(c, w, ids).logits,
    configJson: (withPast) => phiConfigJson(c, withPast),
    expected: {
      architectures: ["PhiForCausalLM"],
      model_type: "phi",
      hidden_size: 64,
      intermediate_size: 256,
      num_hidden_layers: 2,
      num_attention_heads: 4,
      num_key_value_heads: 4,
      hidden_act: "gelu_new",
      layer_norm_eps: 1e-5,
      partial_rotary_factor: 0.5,
      qk_layernorm: false,
      rope_theta: 10000,
      vocab_size: 1280,
      bos_token_id: 1024,
      eos_token_id: 1025,
      tie_word_embeddings: false,
      torch_dtype: "float32",
    },
    names: [
      "/model/embed_tokens/Gather",
      "/model/layers.0/input_layernorm/LayerNormalization",
      "/model/layers.0/self_attn/q_proj/MatMul",
      "/model/layers.0/self_attn/k_proj/Add",
      "/model/layers.0/self_attn/dense/MatMul",
      "/model/layers.0/mlp/fc1/MatMul",
      "/model/layers.0/mlp/activation_fn/Tanh",
      "/model/final_layernorm/LayerNormalization",
      "/lm_head/MatMul",
      "/lm_head/Add",
      "model.layers.1.self_attn.v_proj.bias",
      "model.layers.1.self_attn.dense.bias",
      "model.layers.1.mlp.fc2.weight",
      "model.final_layernorm.weight",
      "lm_head.bias",
    ],
  };
}

function stablelmCase(seed: number, bias: boolean): Case {
  const c = stablelmConfig({ ...SIZE, seed }, { use_qkv_bias: bias });
  const w = stablelmWeights(c, seed);
  return {
    name: `stablelm (rotary on a quarter of each head, use_qkv_bias ${bias})`,
    kvHeads: 4,
    headDim: 16,
    layers: 2,
    linears: 7 * 2 + 1,
    build: memo((withPast, variant) => buildStablelmOnnx(c, w, withPast, variant)),
    reference: (ids) => referenceStablelm(c, w, ids).logits,
    configJson: (withPast) => stablelmConfigJson(c, withPast),
    expected: {
      architectures: ["StableLmForCausalLM"],
      model_type: "stablelm",
      hidden_size: 64,
      intermediate_size: 176,
      num_hidden_layers: 2,
      num_attention_heads: 4,
      num_key_value_heads: 4,
      hidden_act: "silu",
      layer_norm_eps: 1e-5,
      partial_rotary_factor: 0.25,
      use_qkv_bias: bias,
      qk_layernorm: false,
      use_parallel_residual: false,
      vocab_size: 1280,
      tie_word_embeddings: false,
      torch_dtype: "float32",
    },
    names: [
      "/model/embed_tokens/Gather",
      "/model/layers.0/input_layernorm/LayerNormalization",
      "/model/layers.0/self_attn/q_proj/MatMul",
      "/model/layers.0/self_attn/o_proj/MatMul",
      "/model/layers.0/post_attention_layernorm/LayerNormalization",
      "/model/layers.0/mlp/gate_proj/MatMul",
      "/model/layers.0/mlp/act_fn/Sigmoid",
      "/model/layers.1/mlp/down_proj/MatMul",
      "/model/norm/LayerNormalization",
      "/lm_head/MatMul",
      "model.layers.1.post_attention_layernorm.bias",
      "model.layers.1.self_attn.o_proj.weight",
      "model.norm.bias",
      ...(bias ? ["model.layers.0.self_attn.q_proj.bias"] : []),
    ],
  };
}

const CASES: Case[] = [falconCase(7), phiCase(8), stablelmCase(9, true), stablelmCase(10, false)];

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

describe("the reference's rotary embedding", () => {
  it("turns the pairs (i, i + r/2) of the first r features and passes the rest", () => {
    const x = Float64Array.from([1, 2, 3, 4, 5, 6]);
    // r = 4, θ = 100: frequencies 1 and 1/10; position 2 turns by 2 and 0.2 radians.
    const got = rotaryReference(x, 2, 4, 100);
    const turn = (a: number, b: number, angle: number) => [
      a * Math.cos(angle) - b * Math.sin(angle),
      b * Math.cos(angle) + a * Math.sin(angle),
    ];
    const [x0, x2] = turn(1, 3, 2);
    const [x1, x3] = turn(2, 4, 0.2);
    const want = [x0!, x1!, x2!, x3!, 5, 6];
    expect(worstDifference(got, want)).toBeLessThanOrEqual(FLOAT64_REORDER);
    expect(Array.from(rotaryReference(x, 0, 4, 100))).toEqual(Array.from(x));
  });
});

describe.each(CASES)("$name", (k) => {
  it("computes the float64 reference's last logits at batch 1", async () => {
    const plain = k.build(false);
    for (const ids of SEQUENCES) {
      const [got] = lastRows(
        (await run(plain, [ids], [ones(ids.length)], { position_ids: int64([range(0, ids.length)]) }))
          .logits as ort.Tensor,
      );
      expect(worstDifference(got!, k.reference(ids))).toBeLessThanOrEqual(LOGITS_F32);
    }
  });

  it("writes torch's names; without position_ids it computes the logits of positions 0 … n − 1", async () => {
    const without = decodeModel(k.build(false, { positionIds: false })).graph!;
    const withIds = decodeModel(k.build(false)).graph!;
    expect(without.input!.map((v) => v.name)).toEqual(["input_ids", "attention_mask"]);
    expect(withIds.input!.map((v) => v.name)).toEqual(["input_ids", "attention_mask", "position_ids"]);
    expect(withIds.output!.map((v) => v.name)).toEqual(["logits"]);
    const names = new Set([...withIds.node!.map((n) => n.name), ...withIds.initializer!.map((t) => t.name)]);
    for (const name of k.names) expect(names).toContain(name);
    const norms = withIds.node!.filter((n) => n.opType === "LayerNormalization");
    expect(norms.length).toBeGreaterThan(0);
    for (const n of norms) expect(num(n.attribute!.find((a) => a.name === "axis")!.i)).toBe(-1);
    for (const ids of SEQUENCES) {
      const a = (await run(k.build(false, { positionIds: false }), [ids], [ones(ids.length)])).logits as ort.Tensor;
      const b = (await run(k.build(false), [ids], [ones(ids.length)], { position_ids: int64([range(0, ids.length)]) }))
        .logits as ort.Tensor;
      expect(a.data).toEqual(b.data);
    }
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

  it.each([true, false])("decodes with the cache to the logits of the full forward (position_ids %s)", async (ids) => {
    const prompt = SEQUENCES[2]!.slice(0, 7);
    const next = 4321 % 1280;
    const full = [...prompt, next];
    const positions = (from: number, to: number): Record<string, ort.Tensor> =>
      ids ? { position_ids: int64([range(from, to)]) } : {};
    const variant = { positionIds: ids };
    const wantFull = lastRows(
      (await run(k.build(false, variant), [full], [ones(full.length)], positions(0, full.length))).logits as ort.Tensor,
    )[0]!;
    // The prompt through the no-past graph with present outputs, and through the with-past graph from an empty cache.
    const presentOnly = await run(
      k.build(false, { ...variant, present: true }),
      [prompt],
      [ones(prompt.length)],
      positions(0, prompt.length),
    );
    const withPast = k.build(true, variant);
    const fromEmpty = await run(withPast, [prompt], [ones(prompt.length)], {
      ...emptyPast(k, 1),
      ...positions(0, prompt.length),
    });
    for (const [name, t] of Object.entries(presentOnly)) expect((fromEmpty[name] as ort.Tensor).data).toEqual(t.data);
    const presents = Object.keys(presentOnly).filter((n) => n.startsWith("present."));
    expect(presents.length).toBe(2 * k.layers);
    for (const name of presents)
      expect((presentOnly[name] as ort.Tensor).dims).toEqual([1, k.kvHeads, prompt.length, k.headDim]);
    const step = await run(withPast, [[next]], [ones(full.length)], {
      ...pastFrom(presentOnly),
      ...positions(prompt.length, full.length),
    });
    const got = lastRows(step.logits as ort.Tensor)[0]!;
    expect(worstDifference(got, wantFull)).toBeLessThanOrEqual(LOGITS_F32);
    expect(worstDifference(got, k.reference(full))).toBeLessThanOrEqual(LOGITS_F32);
  });

  it("gives a left-padded row without position_ids its unpadded logits, before and after a cached step", async () => {
    const long = SEQUENCES[2]!;
    const short = SEQUENCES[0]!;
    const { ids, mask } = leftPadded([long, short]);
    // The padded row's positions start at its padding, not at its first token: only their differences matter.
    const withPast = k.build(true, { positionIds: false });
    const plain = k.build(false, { positionIds: false });
    const prompt = await run(withPast, ids, mask, emptyPast(k, 2));
    const [, padded] = lastRows(prompt.logits as ort.Tensor);
    const [alone] = lastRows((await run(plain, [short], [ones(short.length)])).logits as ort.Tensor);
    expect(worstDifference(padded!, alone!)).toBeLessThanOrEqual(LOGITS_F32);
    const next = [17, 29];
    const step = await run(
      withPast,
      next.map((t) => [t]),
      mask.map((m) => [...m, 1]),
      pastFrom(prompt),
    );
    const [, paddedStep] = lastRows(step.logits as ort.Tensor);
    const [aloneStep] = lastRows((await run(plain, [[...short, 29]], [ones(short.length + 1)])).logits as ort.Tensor);
    expect(worstDifference(paddedStep!, aloneStep!)).toBeLessThanOrEqual(LOGITS_F32);
  });

  it("writes config.json with the family's own field names", () => {
    const json = JSON.parse(k.configJson(true)) as Record<string, unknown>;
    expect(json).toMatchObject({ ...k.expected, use_cache: true });
    expect(JSON.parse(k.configJson(false))).toMatchObject({ use_cache: false });
  });
});
