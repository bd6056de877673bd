/**
 * A KV cache added to graphs exported without one: where it joins the graph
 * (before repeated heads and the keys' transpose, shaped as a with-past
 * export's cache), which graphs are left alone, and generation with it — rows
 * equal to the float64 greedy reference over full recomputation. Positions
 * counted from input_ids' length are shifted past the cache; a graph whose
 * positions restart behind the mask runs with the cache without error but
 * gives other tokens: the probe catches that, and generation recomputes
 * instead, still writing the reference's rows.
 */
import { readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";

import * as ort from "onnxruntime-node";
import { beforeAll, describe, expect, it } from "vitest";

import { buildPrompt } from "../../src/bank/prompt.js";
import { MAX_NEW_TOKENS } from "../../src/defaults.js";
import {
  buildLlamaOnnx,
  tinyConfig,
  tinyWeights,
  writeTinyModel,
  type TinyModelOptions,
} from "../../src/synthetic/llama.js";
import { addKvCache, attentionShape } from "../../src/onnx/add-cache.js";
import { falconConfig, falconConfigJson } from "../../src/synthetic/partial-rotary.js";
import { gptBigcodeConfig, gptBigcodeConfigJson } from "../../src/synthetic/gpt-relatives.js";
import { buildMixtralOnnx, mixtralConfig, mixtralWeights } from "../../src/synthetic/llama-relatives.js";
import { generate } from "../../src/generate/generate.js";
import { decodeModel, encodeModel, graphIndex, valueShape, type GraphProto } from "../../src/onnx/graph.js";
import { PromptTokenizer } from "../../src/model/tokenizer.js";
import { referenceDecoder, referenceGreedy } from "../helpers/llama-reference.js";
import { tempDir } from "../helpers/tmp.js";
import { LOGITS_F32 } from "../tolerances.js";

const dir = tempDir("hsm-add-cache-");
const bank = join(dir, "bank.jsonl");
const QUERIES = [
  "What is the capital of France?",
  "Ok?",
  `${"Some context first, ".repeat(12)}who painted the Mona Lisa?`,
  "Name a river.",
  "¿Dónde está Quito?",
];
const BASE: TinyModelOptions = { layers: 2, hidden: 32, heads: 4, kvHeads: 2, seed: 41, tokenizer: "llama3.1-1k" };
const MODELS = {
  plain: BASE,
  /** Positions counted inside the graph from the mask's length. */
  noPositions: { ...BASE, seed: 42, positionIds: false },
  /** As noPositions, then patched so that positions and the causal mask start at 0 whatever the cache holds. */
  blind: { ...BASE, seed: 43, positionIds: false },
  blindBehindMask: { ...BASE, seed: 43, positionIds: false },
} satisfies Record<string, TinyModelOptions>;
type Name = keyof typeof MODELS;
const modelDir = (name: Name) => join(dir, name);
const rows = Array.from({ length: 10 }, (_, i) => ({
  query_id: `q${i}`,
  fact_id: `f${i}`,
  condition_family: "anchor",
  query: `${QUERIES[i % QUERIES.length]}${i >= QUERIES.length ? ` #${i}` : ""}`,
  use_for_main_forward: true,
  answers: ["x"],
}));

/** The query positions `Range(past, total)` become `Range(0, sequence_length)`: right without a cache, wrong with one. */
function ignorePast(graph: GraphProto): void {
  const { producer } = graphIndex(graph);
  const range = (graph.node ?? []).find((n) => n.opType === "Range" && producer.get(n.input![0]!)?.opType === "Sub")!;
  const sub = producer.get(range.input![0]!)!;
  range.input = ["/model/constants/zero_i", sub.input![1]!, range.input![2]!];
}

/**
 * The same restart of the query positions at 0, computed as `total − total` from the attention mask: a graph whose
 * structure does not show that positions restart, so only the probe can tell.
 */
function ignorePastBehindMask(graph: GraphProto): void {
  const { producer } = graphIndex(graph);
  const nodes = graph.node!;
  const range = nodes.find((n) => n.opType === "Range" && producer.get(n.input![0]!)?.opType === "Sub")!;
  const sub = producer.get(range.input![0]!)!;
  const total = sub.input![0]!;
  const zero = { name: "/test/zero", opType: "Sub", input: [total, total], output: ["/test/zero_output_0"] };
  nodes.splice(nodes.indexOf(range), 0, zero);
  range.input = [zero.output[0]!, sub.input![1]!, range.input![2]!];
}

beforeAll(async () => {
  writeFileSync(bank, rows.map((r) => JSON.stringify(r)).join("\n") + "\n");
  for (const [name, o] of Object.entries(MODELS)) await writeTinyModel(modelDir(name as Name), o);
  const blind = decodeModel(readFileSync(join(modelDir("blind"), "model.onnx")));
  ignorePast(blind.graph!);
  writeFileSync(join(modelDir("blind"), "model.onnx"), encodeModel(blind));
  const hidden = decodeModel(readFileSync(join(modelDir("blindBehindMask"), "model.onnx")));
  ignorePastBehindMask(hidden.graph!);
  writeFileSync(join(modelDir("blindBehindMask"), "model.onnx"), encodeModel(hidden));
});

describe("addKvCache", () => {
  it("joins keys and values before their heads are repeated, shaped as a with-past export's cache", () => {
    const c = tinyConfig(BASE);
    const model = decodeModel(buildLlamaOnnx(c, tinyWeights(BASE)));
    const shape = attentionShape(c as unknown as Record<string, unknown>)!;
    expect(shape).toEqual({ heads: 4, kvHeads: 2, headDim: 8 });
    expect(addKvCache(model.graph!, 17, 2, shape)).toBe(true);
    const g = model.graph!;
    const pasts = g.input!.filter((v) => v.name!.startsWith("past_key_values."));
    expect(pasts.map((v) => [v.name, valueShape(v)])).toEqual(
      ["0.key", "0.value", "1.key", "1.value"].map((n) => [
        `past_key_values.${n}`,
        ["batch_size", 2, "past_sequence_length", 8],
      ]),
    );
    expect(g.output!.filter((o) => o.name!.startsWith("present.")).map((o) => o.name)).toEqual([
      "present.0.key",
      "present.0.value",
      "present.1.key",
      "present.1.value",
    ]);
    const { producer, consumers } = graphIndex(g);
    for (const name of ["present.0.key", "present.1.value"]) {
      const concat = producer.get(name)!;
      expect(concat.opType).toBe("Concat");
      expect(concat.input![0]).toBe(name.replace("present", "past_key_values"));
      // The new keys/values before repeat_kv (Unsqueeze → Expand → Reshape), the cache along the sequence axis.
      expect(consumers.get(name)!.map((n) => n.opType)).toEqual(["Unsqueeze"]);
      expect(Number(concat.attribute![0]!.i)).toBe(-2);
    }
    // Every node reads only what earlier nodes, inputs or initializers made.
    const known = new Set([...g.input!.map((v) => v.name!), ...g.initializer!.map((t) => t.name!)]);
    for (const n of g.node!) {
      for (const i of n.input ?? []) if (i) expect(known.has(i), `${n.name} reads ${i}`).toBe(true);
      for (const o of n.output ?? []) known.add(o);
    }
  });

  it("leaves alone graphs that have a cache, lack an attention mask, or whose attentions do not match the blocks", () => {
    const c = tinyConfig(BASE);
    const shape = attentionShape(c as unknown as Record<string, unknown>)!;
    const withPast = decodeModel(buildLlamaOnnx(c, tinyWeights(BASE), true));
    const before = encodeModel(withPast);
    expect(addKvCache(withPast.graph!, 17, 2, shape)).toBe(false);
    expect(Buffer.from(encodeModel(withPast)).equals(Buffer.from(before))).toBe(true);
    const noMask = decodeModel(buildLlamaOnnx(c, tinyWeights(BASE)));
    noMask.graph!.input = noMask.graph!.input!.filter((v) => v.name !== "attention_mask");
    expect(addKvCache(noMask.graph!, 17, 2, shape)).toBe(false);
    expect(addKvCache(decodeModel(buildLlamaOnnx(c, tinyWeights(BASE))).graph!, 17, 3, shape)).toBe(false);
  });

  it("counts one key/value head for multi-query Falcon and GPT-BigCode configs", () => {
    const falcon = JSON.parse(falconConfigJson(falconConfig({ hidden: 32, heads: 4 }), false));
    expect(falcon.num_kv_heads).toBe(4);
    expect(attentionShape(falcon)).toEqual({ heads: 4, kvHeads: 1, headDim: 8 });
    // Falcon's new decoder architecture keeps num_kv_heads whatever multi_query says.
    expect(attentionShape({ ...falcon, new_decoder_architecture: true, num_kv_heads: 2 })).toMatchObject({
      kvHeads: 2,
    });
    const bigcode = JSON.parse(gptBigcodeConfigJson(gptBigcodeConfig({ hidden: 32, heads: 4 }), false));
    expect(attentionShape(bigcode)).toEqual({ heads: 4, kvHeads: 1, headDim: 8 });
    expect(attentionShape({ ...bigcode, multi_query: false })).toMatchObject({ kvHeads: 4 });
  });

  it("reads the sizes under every name the model folder reads them (BLOOM 7B1's n_embed)", () => {
    // bigscience/bloom-7b1's config.json: 4,096 wide in 32 heads of 128, no head_dim.
    const bloom = { model_type: "bloom", n_embed: 4096, n_layer: 30, num_attention_heads: 32 };
    expect(attentionShape(bloom)).toEqual({ heads: 32, kvHeads: 32, headDim: 128 });
    expect(attentionShape({ model_type: "mpt", d_model: 64, n_heads: 8 })).toEqual({
      heads: 8,
      kvHeads: 8,
      headDim: 8,
    });
  });

  it("takes a mixture of experts' router Softmax for no attention (Mixtral)", () => {
    const c = mixtralConfig({ ...BASE, positionIds: false });
    const model = decodeModel(buildMixtralOnnx(c, mixtralWeights(c, 44), false, { positionIds: false }));
    const shape = attentionShape(c as unknown as Record<string, unknown>)!;
    expect(addKvCache(model.graph!, 17, 2, shape)).toBe(true);
    expect(model.graph!.output!.filter((o) => o.name!.startsWith("present.")).map((o) => o.name)).toEqual([
      "present.0.key",
      "present.0.value",
      "present.1.key",
      "present.1.value",
    ]);
  });
});

describe("addKvCache on Gemma2's soft-capped scores", () => {
  it("finds each attention's scores through Div, Tanh and Mul, and its cache gives the full pass's logits", async () => {
    const o: TinyModelOptions = { ...BASE, family: "gemma", seed: 45, slidingWindow: 3 };
    const c = tinyConfig(o);
    const plain = buildLlamaOnnx(c, tinyWeights(o));
    const model = decodeModel(plain);
    // Two soft-capped attentions, two tanh-GELU MLPs, the soft-capped logits.
    expect(model.graph!.node!.filter((n) => n.opType === "Tanh")).toHaveLength(5);
    expect(addKvCache(model.graph!, 17, 2, attentionShape(c as unknown as Record<string, unknown>)!)).toBe(true);
    const ids = [1024, 791, 68, 315, 982, 374, 25];
    const T = ids.length;
    const i64 = (v: number[], dims: number[]) => new ort.Tensor("int64", BigInt64Array.from(v, BigInt), dims);
    const run = async (bytes: Uint8Array, feeds: Record<string, ort.Tensor>) => {
      const session = await ort.InferenceSession.create(bytes);
      const out = await session.run(feeds);
      await session.release();
      return out;
    };
    const feeds = (from: number, to: number) => ({
      input_ids: i64(ids.slice(from, to), [1, to - from]),
      attention_mask: i64(Array(to).fill(1), [1, to]),
      position_ids: i64([...ids.keys()].slice(from, to), [1, to - from]),
    });
    const full = (await run(plain, feeds(0, T))).logits!.data as Float32Array;
    const cached = encodeModel(model);
    const empty = new ort.Tensor("float32", new Float32Array(0), [1, 2, 0, 8]);
    const pasts = (present?: Record<string, ort.Tensor>) =>
      Object.fromEntries(
        ["0.key", "0.value", "1.key", "1.value"].map((n) => [
          `past_key_values.${n}`,
          present?.[`present.${n}`] ?? empty,
        ]),
      );
    const prompt = await run(cached, { ...feeds(0, T - 1), ...pasts() });
    const step = (await run(cached, { ...feeds(T - 1, T), ...pasts(prompt) })).logits!.data as Float32Array;
    const V = c.vocab_size;
    const last = full.slice((T - 1) * V);
    expect(step.reduce((m, v, i) => Math.max(m, Math.abs(v - last[i]!)), 0)).toBeLessThanOrEqual(LOGITS_F32);
  });
});

describe("hsm generate with an added KV cache", () => {
  async function run(name: Name, batchSize: number) {
    const out = join(dir, `${name}-b${batchSize}.jsonl`);
    const messages: string[] = [];
    expect(
      await generate({ modelDir: modelDir(name), bank, out, batchSize, selfCheck: 0, log: (m) => messages.push(m) }),
    ).toMatchObject({ written: rows.length, failed: 0 });
    const got = new Map(
      readFileSync(out, "utf8")
        .trim()
        .split("\n")
        .map((l) => JSON.parse(l))
        .map((r) => [r.query_id as string, r]),
    );
    const o = MODELS[name];
    const tok = await PromptTokenizer.load(modelDir(name));
    const text = referenceDecoder(readFileSync(join(modelDir(name), "tokenizer.json"), "utf8"));
    const eos = new Set([tinyConfig(o).eos_token_id ?? []].flat());
    const weights = tinyWeights(o);
    for (const r of rows) {
      const ids = referenceGreedy(tinyConfig(o), weights, tok.encode(buildPrompt(r)), eos, MAX_NEW_TOKENS);
      const stopped = eos.has(ids.at(-1)!);
      const row = got.get(r.query_id)!;
      expect({
        raw_response: row.raw_response,
        generated_tokens: row.generated_tokens,
        finish_reason: row.finish_reason,
      }).toEqual({
        raw_response: text(stopped ? ids.slice(0, -1) : ids),
        generated_tokens: ids.length,
        finish_reason: stopped ? "stop" : "length",
      });
    }
    return messages;
  }

  for (const name of ["plain", "noPositions"] as const) {
    it(`decodes ${name} with the cache: the reference's rows at batch 1 and 8`, async () => {
      for (const batchSize of [1, 8])
        expect(await run(name, batchSize)).toContain("the model has no KV cache: decoding with one added to the graph");
    });
  }

  it("recomputes, with the reference's rows, when the cache changes the tokens of the probe", async () => {
    const messages = await run("blindBehindMask", 8);
    // One line naming the first difference: the prompt, the new token's index, both tokens, and how far apart
    // their recomputed logits are, beyond the near-tie margin.
    const refused = messages.find((m) => m.includes("changes its tokens"))!;
    const m =
      /^the model has no KV cache, and one added to the graph changes its tokens \(prompt of \d+ tokens \(row [01] of a batch of [12]\), new token [1-4]: (\d+) with the cache, (\d+) recomputing; recomputed logits (\S+) apart, margin (\S+)\): recomputing every step$/.exec(
        refused,
      );
    expect(m, refused).not.toBeNull();
    expect(m![1]).not.toBe(m![2]);
    expect(Number(m![3])).toBeGreaterThan(Number(m![4]));
  });

  it("shifts positions counted from input_ids' length by the past's: the cache is used, the reference's rows", async () => {
    const messages = await run("blind", 8);
    expect(messages).toContain("the model has no KV cache: decoding with one added to the graph");
  });
});
