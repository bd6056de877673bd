/**
 * The ALiBi writers (BLOOM, MPT): onnxruntime running their graphs computes
 * the float64 reference's logits, with and without the KV cache; neither graph
 * has a position_ids input; left padding leaves a row's logits as they were
 * unpadded; config.json carries each family's own field names.
 */
import * as ort from "onnxruntime-node";
import { describe, expect, it } from "vitest";

import { DataType, decodeModel, encodeModel, num } from "../../src/onnx/graph.js";
import {
  bloomConfig,
  bloomConfigJson,
  bloomWeights,
  buildBloomOnnx,
  buildMptOnnx,
  mptConfig,
  mptConfigJson,
  mptWeights,
} from "../../src/synthetic/alibi.js";
import {
  float32Linear,
  type GraphVariant,
  type LinearWriter,
  type TinyModelOptions,
} from "../../src/synthetic/llama.js";
import { bloomSlopesReference, mptSlopesReference, referenceBloom, referenceMpt } from "../helpers/alibi-reference.js";
import { FLOAT32_ROUNDING, LOGITS_F32 } from "../tolerances.js";

/** One family at one size, as the tests see it. */
interface Case {
  name: string;
  heads: number;
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
  /** The ALiBi bias tensor: the initializer its producer reads, and its values, by definition, for a mask. */
  bias: { reads: string; want: (mask: number[][]) => number[] };
}

function bloomCase(o: TinyModelOptions): Case {
  const c = bloomConfig(o);
  const w = bloomWeights(c, o.seed ?? 1);
  return {
    name: `bloom, ${c.n_head} heads`,
    heads: c.n_head,
    headDim: c.hidden_size / c.n_head,
    layers: c.n_layer,
    linears: 4 * c.n_layer + 1,
    build: (withPast, variant) => buildBloomOnnx(c, w, withPast, variant),
    reference: (ids) => referenceBloom(c, w, ids).logits,
    configJson: (withPast) => bloomConfigJson(c, withPast),
    expected: {
      architectures: ["BloomForCausalLM"],
      model_type: "bloom",
      hidden_size: o.hidden,
      n_layer: o.layers,
      n_head: o.heads,
      layer_norm_epsilon: 1e-5,
      vocab_size: 1280,
      bos_token_id: 1024,
      eos_token_id: 1025,
      apply_residual_connection_post_layernorm: false,
      tie_word_embeddings: true,
      torch_dtype: "float32",
    },
    names: [
      "/transformer/word_embeddings/Gather",
      "/transformer/word_embeddings_layernorm/LayerNormalization",
      "/transformer/h.0/self_attention/query_key_value/MatMul",
      "/transformer/h.0/mlp/gelu_impl/Tanh",
      "/transformer/ln_f/LayerNormalization",
      "/lm_head/MatMul",
      "transformer.word_embeddings_layernorm.bias",
      "transformer.h.1.self_attention.query_key_value.bias",
      "transformer.h.1.mlp.dense_4h_to_h.weight",
      "transformer.ln_f.weight",
    ],
    // [B, H, S]: slope × the key's index among its row's tokens, 0 at padding.
    bias: {
      reads: "/transformer/constants/alibi_slopes",
      want: (mask) => {
        const slopes = bloomSlopesReference(c.n_head);
        return mask.flatMap((row) => {
          let count = 0;
          const index = row.map((m) => (m ? count++ : 0));
          return slopes.flatMap((slope) => index.map((i) => slope * i));
        });
      },
    },
  };
}

function mptCase(o: TinyModelOptions): Case {
  const c = mptConfig(o);
  const w = mptWeights(c, o.seed ?? 1);
  return {
    name: `mpt, ${c.n_heads} heads, max_seq_len ${c.max_seq_len}`,
    heads: c.n_heads,
    headDim: c.d_model / c.n_heads,
    layers: c.n_layers,
    linears: 4 * c.n_layers + 1,
    build: (withPast, variant) => buildMptOnnx(c, w, withPast, variant),
    reference: (ids) => referenceMpt(c, w, ids).logits,
    configJson: (withPast) => mptConfigJson(c, withPast),
    expected: {
      architectures: ["MptForCausalLM"],
      model_type: "mpt",
      d_model: o.hidden,
      n_heads: o.heads,
      n_layers: o.layers,
      expansion_ratio: 4,
      max_seq_len: o.maxPositions ?? 2048,
      vocab_size: 1280,
      no_bias: true,
      layer_norm_epsilon: 1e-5,
      attn_config: { alibi: true, alibi_bias_max: 8, softmax_scale: null, clip_qkv: null },
      bos_token_id: 1024,
      eos_token_id: 1025,
      tie_word_embeddings: true,
      torch_dtype: "float32",
    },
    names: [
      "/transformer/wte/Gather",
      "/transformer/blocks.0/norm_1/Constant",
      "/transformer/blocks.0/norm_1/LayerNormalization",
      "/transformer/blocks.0/attn/Wqkv/MatMul",
      "/transformer/blocks.0/ffn/act/Erf",
      "/transformer/norm_f/LayerNormalization",
      "/lm_head/MatMul",
      "transformer.blocks.1.norm_2.weight",
      "transformer.blocks.1.attn.out_proj.weight",
      "transformer.norm_f.weight",
    ],
    // Layer 0's [H, 1, S]: slope × (key index − last key index), whatever the mask.
    bias: {
      reads: "/transformer/constants/alibi",
      want: (mask) => {
        const S = mask[0]!.length;
        const slopes = mptSlopesReference(c.n_heads, c.attn_config.alibi_bias_max);
        return slopes.flatMap((slope) => Array.from({ length: S }, (_, s) => slope * (s - (S - 1))));
      },
    },
  };
}

const CASES: Case[] = [
  bloomCase({ layers: 2, hidden: 32, heads: 4, seed: 7 }),
  bloomCase({ layers: 2, hidden: 48, heads: 6, seed: 8 }),
  mptCase({ layers: 2, hidden: 32, heads: 4, seed: 9 }),
  mptCase({ layers: 2, hidden: 48, heads: 6, seed: 10, maxPositions: 64 }),
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
        k.heads,
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

describe("the reference's ALiBi slopes", () => {
  it("are BLOOM's and MPT's hand-computed values, powers of two and not", () => {
    const pow2 = (exponents: number[]) => exponents.map((e) => 2 ** e);
    expect(bloomSlopesReference(4)).toEqual(pow2([-2, -4, -6, -8]));
    expect(mptSlopesReference(4, 8)).toEqual(pow2([-2, -4, -6, -8]));
    expect(bloomSlopesReference(8)).toEqual(pow2([-1, -2, -3, -4, -5, -6, -7, -8]));
    expect(mptSlopesReference(8, 8)).toEqual(pow2([-1, -2, -3, -4, -5, -6, -7, -8]));
    // 6 heads: the 4-head sequence, then BLOOM's odd powers of 2^-1 / MPT's odd-numbered of the 8-head sequence.
    expect(bloomSlopesReference(6)).toEqual(pow2([-2, -4, -6, -8, -1, -3]));
    expect(mptSlopesReference(6, 8)).toEqual(pow2([-2, -4, -6, -8, -1, -3]));
    expect(bloomSlopesReference(12)).toEqual(pow2([-1, -2, -3, -4, -5, -6, -7, -8, -0.5, -1.5, -2.5, -3.5]));
    expect(mptSlopesReference(12, 8)).toEqual(pow2([-1, -2, -3, -4, -5, -6, -7, -8, -0.5, -1.5, -2.5, -3.5]));
    expect(mptSlopesReference(4, 16)).toEqual(pow2([-4, -8, -12, -16]));
  });
});

describe.each(CASES)("$name", (k) => {
  it("computes the float64 reference's last logits at batch 1", async () => {
    const plain = k.build(false);
    for (const ids of SEQUENCES) {
      const [got] = lastRows((await run(plain, [ids], [ones(ids.length)])).logits as ort.Tensor);
      expect(worstDifference(got!, k.reference(ids))).toBeLessThanOrEqual(LOGITS_F32);
    }
  });

  it("writes torch's node and initializer names and no position_ids input in either variant", async () => {
    const without = k.build(false, { positionIds: false });
    const withIds = k.build(false, { positionIds: true });
    expect(Buffer.from(withIds).equals(Buffer.from(without))).toBe(true);
    const graph = decodeModel(withIds).graph!;
    expect(graph.input!.map((v) => v.name)).toEqual(["input_ids", "attention_mask"]);
    expect(graph.output!.map((v) => v.name)).toEqual(["logits"]);
    const names = new Set([...graph.node!.map((n) => n.name), ...graph.initializer!.map((t) => t.name)]);
    for (const name of k.names) expect(names).toContain(name);
    const norms = graph.node!.filter((n) => n.opType === "LayerNormalization");
    for (const n of norms) expect(num(n.attribute!.find((a) => a.name === "axis")!.i)).toBe(-1);
    const ids = SEQUENCES[0]!;
    const a = (await run(without, [ids], [ones(ids.length)])).logits as ort.Tensor;
    const b = (await run(withIds, [ids], [ones(ids.length)])).logits as ort.Tensor;
    expect(a.data).toEqual(b.data);
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
    const wantFull = lastRows((await run(k.build(false), [full], [ones(full.length)])).logits as ort.Tensor)[0]!;
    // The prompt through the no-past graph with present outputs, and through the with-past graph from an empty cache.
    const presentOnly = await run(k.build(false, { present: true }), [prompt], [ones(prompt.length)]);
    const withPast = k.build(true);
    const fromEmpty = await run(withPast, [prompt], [ones(prompt.length)], emptyPast(k, 1));
    for (const [name, t] of Object.entries(presentOnly)) expect((fromEmpty[name] as ort.Tensor).data).toEqual(t.data);
    expect(Object.keys(presentOnly).filter((n) => n.startsWith("present.")).length).toBe(2 * k.layers);
    const step = await run(withPast, [[next]], [ones(full.length)], pastFrom(presentOnly));
    const got = lastRows(step.logits as ort.Tensor)[0]!;
    expect(worstDifference(got, wantFull)).toBeLessThanOrEqual(LOGITS_F32);
    expect(worstDifference(got, k.reference(full))).toBeLessThanOrEqual(LOGITS_F32);
  });

  it("gives a left-padded row at batch 2 its unpadded logits, before and after a cached step", async () => {
    const long = SEQUENCES[2]!;
    const short = SEQUENCES[0]!;
    const { ids, mask } = leftPadded([long, short]);
    const withPast = k.build(true);
    const prompt = await run(withPast, ids, mask, emptyPast(k, 2));
    const [, padded] = lastRows(prompt.logits as ort.Tensor);
    const [alone] = lastRows((await run(k.build(false), [short], [ones(short.length)])).logits as ort.Tensor);
    const paddingEffect = worstDifference(padded!, alone!);
    expect(paddingEffect).toBeLessThanOrEqual(LOGITS_F32);
    // One more token per row, the mask grown by a column of ones.
    const next = [17, 29];
    const step = await run(
      withPast,
      next.map((t) => [t]),
      mask.map((m) => [...m, 1]),
      pastFrom(prompt),
    );
    const [, paddedStep] = lastRows(step.logits as ort.Tensor);
    const [aloneStep] = lastRows(
      (await run(k.build(false), [[...short, 29]], [ones(short.length + 1)])).logits as ort.Tensor,
    );
    expect(worstDifference(paddedStep!, aloneStep!)).toBeLessThanOrEqual(LOGITS_F32);
  });

  it("adds the ALiBi biases of the family's definition for a left-padded batch", async () => {
    const model = decodeModel(k.build(false));
    const graph = model.graph!;
    const producer = graph.node!.find((n) => n.input!.includes(k.bias.reads))!;
    const name = producer.output![0]!;
    graph.output!.push({ name, type: { tensorType: { elemType: DataType.FLOAT } } });
    const { ids, mask } = leftPadded([SEQUENCES[2]!, SEQUENCES[0]!]);
    const got = (await run(encodeModel(model), ids, mask))[name] as ort.Tensor;
    const want = k.bias.want(mask);
    expect(got.data.length).toBe(want.length);
    expect(worstDifference(got.data as Float32Array, want)).toBeLessThanOrEqual(
      FLOAT32_ROUNDING * Math.max(...want.map(Math.abs)),
    );
  });

  it("writes config.json with the family's own field names", () => {
    const json = JSON.parse(k.configJson(true)) as Record<string, unknown>;
    expect(json).toMatchObject({ ...k.expected, use_cache: true });
    expect(JSON.parse(k.configJson(false))).toMatchObject({ use_cache: false });
    for (const llamaName of ["num_hidden_layers", "num_attention_heads", "max_position_embeddings"])
      expect(json).not.toHaveProperty(llamaName);
  });
});
