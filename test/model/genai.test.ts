/**
 * onnxruntime-genai builds (GroupQueryAttention, SkipSimplifiedLayerNormalization
 * residuals, genai_config.json, model.onnx.data): detection by structure with
 * genai names agreeing, why they are
 * right-padded, and the stored states against the float64 reference at batch
 * sizes 16 and 1 with padded batches and a prompt past 192 tokens; a build
 * without its LM head (exclude_lm_head) stores the same states; builds with
 * Qwen3's per-head q/k norms and Gemma 3's four-norm blocks store onnxruntime's
 * own block states; a float16 build
 * of head size 8, which onnxruntime's CPU kernel refuses, stops extraction and
 * generation in one line naming the graph, writing nothing; a block count
 * the graph disagrees with is blamed on genai_config.json; generation stops on
 * any id of genai_config.json's `eos_token_id` list, and a bad value there is
 * blamed on genai_config.json.
 */
import { spawn, spawnSync } from "node:child_process";
import { existsSync, readdirSync, readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";

import * as ort from "onnxruntime-node";
import { beforeAll, describe, expect, it } from "vitest";

import { buildPrompt } from "../../src/bank/prompt.js";
import { genaiFiles, type GenaiPrecision } from "../../src/synthetic/genai.js";
import { tinyConfig, tinyWeights, writeTinyModel, type TinyModelOptions } from "../../src/synthetic/llama.js";
import { roundWeightsToFloat16, styleWeights } from "../../src/synthetic/quantize.js";
import { extract, inspectModel } from "../../src/extract/extract.js";
import {
  DataType,
  encodeModel,
  floatTensor,
  int64Tensor,
  loadModel,
  valueInfo,
  type ModelProto,
  type NodeProto,
} from "../../src/onnx/graph.js";
import { genaiStyle } from "../../src/model/styles/genai.js";
import { runError } from "../../src/model/session.js";
import { generate } from "../../src/generate/generate.js";
import { PromptTokenizer } from "../../src/model/tokenizer.js";
import { StoreReader } from "../../src/store/reader.js";
import { Rng } from "../../src/util/random.js";
import { referenceDecoder, referenceGreedy, referenceHidden, referenceLogits } from "../helpers/llama-reference.js";
import { dropLmHead } from "../helpers/base-model.js";
import { tempDir } from "../helpers/tmp.js";
import { FLOAT16_COMPUTE_PER_LAYER, FLOAT16_RELATIVE, LOGITS_F32 } from "../tolerances.js";

const dir = tempDir("hsm-genai-");
const BIN = join(import.meta.dirname, "..", "..", "bin", "hsm.js");
const OPTS: TinyModelOptions = { layers: 3, hidden: 64, heads: 4, kvHeads: 2, seed: 21, tokenizer: "llama3.1-1k" };
const bank = join(dir, "bank.jsonl");

/** The rows of the bank the model tests share. */
const bankRows = () =>
  readFileSync(bank, "utf8")
    .trim()
    .split("\n")
    .map((l) => JSON.parse(l));

/** The first `n` rows of the shared bank, written as a bank of their own, `name`. */
function smallBank(n: number, name: string): { rows: ReturnType<typeof bankRows>; file: string } {
  const rows = bankRows().slice(0, n);
  const file = join(dir, name);
  writeFileSync(file, rows.map((r) => JSON.stringify(r)).join("\n") + "\n");
  return { rows, file };
}
const QUERIES = [
  "What is the capital of France?",
  "Ok?",
  `${"Setting the scene at some length, ".repeat(40)}what is the boiling point of water?`,
  "Which element has the chemical symbol Fe, and is it magnetic at room temperature?",
  "Who wrote Don Quixote?",
];

beforeAll(() => {
  const lines = Array.from({ length: 17 }, (_, i) =>
    JSON.stringify({
      query_id: `q${i}`,
      fact_id: `f${i >> 1}`,
      condition_family: "anchor",
      query: `${QUERIES[i % QUERIES.length]} ${i}`,
      use_for_main_forward: true,
      answers: ["x"],
    }),
  );
  writeFileSync(bank, lines.join("\n") + "\n");
});

const made = new Map<string, Promise<unknown>>();
function model(precision: GenaiPrecision): Promise<string> {
  const d = join(dir, `genai-${precision}`);
  if (!made.has(d)) made.set(d, writeTinyModel(d, OPTS, genaiFiles(precision)));
  return made.get(d)!.then(() => d);
}

describe("an onnxruntime-genai build", () => {
  it("is read by structure through its Skip norms, each block's state output 3 of the next block's SkipLayerNorm, genai names agreeing", async () => {
    const d = await model("fp32");
    const { inspection } = await inspectModel(d);
    expect(inspection.plan.strategy).toBe("structural");
    expect(inspection.plan.crossCheck).toBe("names (genai) agree on all 3 blocks");
    expect(inspection.plan.tensors.map((t) => t.how)).toEqual([
      "structure: residual sum 2 of 6 (output 3, input_skip_bias_sum, of SkipSimplifiedLayerNormalization), the end of block 0 (/model/layers.1/input_layernorm/SkipLayerNorm)",
      "structure: residual sum 4 of 6 (output 3, input_skip_bias_sum, of SkipSimplifiedLayerNormalization), the end of block 1 (/model/layers.2/input_layernorm/SkipLayerNorm)",
      "structure: output 0 of the last residual sum's SkipSimplifiedLayerNormalization, the final norm before the LM head (/model/layers.3/final_norm_layernorm/SkipLayerNorm)",
    ]);
    // The names say the same tensors: output 3 of the next block's input norm, output 0 of the final norm.
    const byNames = genaiStyle.locate((await loadModel(join(d, "model.onnx"))).graph!, 3, { numLayers: 3 }).tensors;
    expect(inspection.plan.tensors.map((t) => t.tensor)).toEqual(byNames.map((t) => t.tensor));
    expect(byNames.map((t) => t.how)).toEqual([
      "output 3 (input_skip_bias_sum) of /model/layers.1/input_layernorm/SkipLayerNorm",
      "output 3 (input_skip_bias_sum) of /model/layers.2/input_layernorm/SkipLayerNorm",
      "output 0 of /model/layers.3/final_norm_layernorm/SkipLayerNorm (after the final norm)",
    ]);
    expect(inspection.plan.inputs.paddingSide).toBe("right");
    expect(inspection.numLayers).toBe(3); // from genai_config.json: the folder has no config.json
    expect(inspection.inputs.map((i) => i.name)).not.toContain("position_ids");
  });

  it("gives every right-padded row the logits of its unpadded run, and left-padded rows wrong ones", async () => {
    const d = await model("fp32");
    const session = await ort.InferenceSession.create(join(d, "model.onnx"));
    const config = tinyConfig(OPTS);
    const weights = tinyWeights(OPTS);
    const seqs = [
      [1024, 791, 686, 315, 982, 374, 123, 13, 578],
      [1024, 791, 686],
      [1024, 55, 66, 77, 88, 99],
    ];
    const B = seqs.length;
    const T = 9;
    const run = async (side: "left" | "right") => {
      const ids = new BigInt64Array(B * T);
      const mask = new BigInt64Array(B * T);
      seqs.forEach((s, b) =>
        s.forEach(
          (t, j) => (
            (ids[b * T + (side === "left" ? T - s.length : 0) + j] = BigInt(t)),
            (mask[b * T + (side === "left" ? T - s.length : 0) + j] = 1n)
          ),
        ),
      );
      const feeds: Record<string, ort.Tensor> = {
        input_ids: new ort.Tensor("int64", ids, [B, T]),
        attention_mask: new ort.Tensor("int64", mask, [B, T]),
      };
      for (const kind of ["key", "value"])
        for (let l = 0; l < 3; l++)
          feeds[`past_key_values.${l}.${kind}`] = new ort.Tensor("float32", new Float32Array(0), [B, 2, 0, 16]);
      const logits = (await session.run(feeds)).logits!.data as Float32Array;
      // Each row's largest deviation from the reference at its last real token, over the first 1000 logits.
      return seqs.map((s, b) => {
        const want = referenceLogits(config, weights, s);
        const at = side === "left" ? T - 1 : s.length - 1;
        let worst = 0;
        for (let v = 0; v < 1000; v++)
          worst = Math.max(worst, Math.abs(logits[(b * T + at) * config.vocab_size + v]! - want[v]!));
        return worst;
      });
    };
    for (const e of await run("right")) expect(e).toBeLessThan(LOGITS_F32);
    const left = await run("left");
    expect(left[0]).toBeLessThan(LOGITS_F32); // the longest row has no padding
    expect(Math.min(left[1]!, left[2]!)).toBeGreaterThan(0.1);
    await session.release();
  });

  it.each(["fp32", "fp16", "fp16-io", "int4"] as const)(
    "%s: stores the reference states at batch sizes 16 and 1, right-padded",
    async (precision) => {
      const d = await model(precision);
      const config = tinyConfig(OPTS);
      const base = tinyWeights(OPTS);
      const float16 = precision.startsWith("fp16");
      const weights = precision === "int4" ? styleWeights("q4", base) : float16 ? roundWeightsToFloat16(base) : base;
      for (const batchSize of [16, 1]) {
        const out = join(dir, `store-${precision}-${batchSize}`);
        const { manifest } = await extract({ modelDir: d, bank, out, batchSize });
        expect(manifest).toMatchObject({
          padding_side: "right",
          dtype: float16 ? "float16" : "float32",
          weights: float16 ? "float16" : precision === "int4" ? "int4" : "float32",
        });
        expect(await worstAgainstReference(d, out, config, weights, float16)).toBeLessThanOrEqual(1);
      }
    },
  );

  it("without its LM head (exclude_lm_head: the final norm's output is the graph's hidden_states): the reference states at batch 16", async () => {
    const d = join(dir, "genai-no-lm-head");
    await writeTinyModel(d, OPTS, genaiFiles("fp32"));
    const model = await loadModel(join(d, "model.onnx"));
    dropLmHead(model.graph!, "/lm_head/MatMul", "hidden_states", OPTS.hidden!);
    writeFileSync(join(d, "model.onnx"), encodeModel(model));
    const out = join(dir, "store-no-lm-head");
    const { manifest } = await extract({ modelDir: d, bank, out, batchSize: 16, layerRule: "l >= 0" });
    expect(manifest).toMatchObject({
      padding_side: "right",
      last_layer_final_norm: true,
      style: { name: "structural", cross_check: "names (genai) agree on all 3 blocks" },
    });
    expect(manifest.style!.layers.at(-1)).toMatchObject({ layer: 2, tensor: "hidden_states" });
    expect(await worstAgainstReference(d, out, tinyConfig(OPTS), tinyWeights(OPTS), false)).toBeLessThanOrEqual(1);
  });
});

/**
 * The largest deviation of a store's rows from the float64 reference run on `weights`, as a fraction of what
 * each value may deviate: float16 rounding, and where the graph computes in float16, its error per layer.
 */
async function worstAgainstReference(
  modelDir: string,
  store: string,
  config: ReturnType<typeof tinyConfig>,
  weights: ReturnType<typeof tinyWeights>,
  float16: boolean,
): Promise<number> {
  const tok = await PromptTokenizer.load(modelDir);
  const rows = bankRows();
  const reader = await StoreReader.open(store);
  let worst = 0;
  for (const [i, row] of rows.entries()) {
    const ref = referenceHidden(config, weights, tok.encode(buildPrompt(row)));
    for (const layer of reader.manifest.layers) {
      const got = await reader.readRowsF32(layer, i, 1);
      const want = ref[layer]!;
      const rms = Math.sqrt(want.reduce((a, v) => a + v * v, 0) / want.length);
      want.forEach((w, j) => {
        const allowed =
          2 * FLOAT16_RELATIVE * (Math.abs(w) + 1e-2 * rms) +
          (float16 ? FLOAT16_COMPUTE_PER_LAYER * (layer + 1) * rms : 0);
        worst = Math.max(worst, Math.abs(got[j]! - w) / allowed);
      });
    }
  }
  await reader.close();
  return worst;
}

describe("generation on an onnxruntime-genai build", () => {
  it.each(["fp32", "fp16", "int4"] as const)(
    "%s: gives the float64 greedy reference's text at batch sizes 8 and 1, right-padded with the KV cache",
    async (precision) => {
      const d = await model(precision);
      const config = tinyConfig(OPTS);
      const base = tinyWeights(OPTS);
      const weights =
        precision === "int4" ? styleWeights("q4", base) : precision === "fp16" ? roundWeightsToFloat16(base) : base;
      const tok = await PromptTokenizer.load(d);
      const decode = referenceDecoder(readFileSync(join(d, "tokenizer.json"), "utf8"));
      const { rows, file: small } = smallBank(10, "gen-bank.jsonl");
      const eos = new Set([config.eos_token_id ?? []].flat());
      const want = rows.map((r) => decode(referenceGreedy(config, weights, tok.encode(buildPrompt(r)), eos, 6)));
      expect(new Set(want).size).toBeGreaterThan(3); // rows answer differently: a row read at another row's position would show
      for (const batchSize of [8, 1]) {
        const out = join(dir, `gen-${precision}-${batchSize}.jsonl`);
        await generate({ modelDir: d, bank: small, out, batchSize, maxNewTokens: 6 });
        const got = new Map(
          readFileSync(out, "utf8")
            .trim()
            .split("\n")
            .map((l) => JSON.parse(l))
            .map((r) => [r.query_id, r.raw_response]),
        );
        expect(rows.map((r) => got.get(r.query_id))).toEqual(want);
      }
    },
  );
});

/**
 * The build edited as the model builder writes Qwen3 and Gemma 3: a per-head RMSNorm on q and on k before
 * GroupQueryAttention (`attn/q_norm/SimplifiedLayerNormalization` on a reshape to heads), and with `gemma`, the
 * embedding scaled by √d and the four-norm block (a plain norm on attention's output and on the MLP's before each
 * residual sum, the sum after attention becoming `pre_feedforward_layernorm/SkipLayerNorm`).
 */
function addBuilderNorms(model: ModelProto, gemma: boolean): void {
  const g = model.graph!;
  const hd = OPTS.hidden! / OPTS.heads!;
  const weight = (name: string, n: number) => {
    g.initializer!.push(
      floatTensor(
        name,
        Float32Array.from({ length: n }, (_, i) => 0.6 + 0.05 * i),
        [n],
      ),
    );
    return name;
  };
  const norm = (name: string, input: string, w: string): NodeProto => ({
    name: `${name}/SimplifiedLayerNormalization`,
    opType: "SimplifiedLayerNormalization",
    input: [input, w],
    output: [`${name}/SimplifiedLayerNormalization/output_0`],
    attribute: [
      { name: "axis", type: 2, i: -1 },
      { name: "epsilon", type: 1, f: 1e-6 },
    ],
  });
  const nodes: NodeProto[] = [];
  for (const n of g.node!) {
    if (n.opType === "GroupQueryAttention") {
      const A = n.name!.replace(/\/GroupQueryAttention$/, "");
      for (const [i, which, heads] of [
        [0, "q", OPTS.heads!],
        [1, "k", OPTS.kvHeads!],
      ] as const) {
        const N = `${A}/${which}_norm`;
        g.initializer!.push(int64Tensor(`${N}/heads`, [0, 0, heads, hd]), int64Tensor(`${N}/flat`, [0, 0, heads * hd]));
        const normed = norm(N, `${N}/Reshape/output_0`, weight(`${N}.weight`, hd));
        nodes.push(
          {
            name: `${N}/Reshape`,
            opType: "Reshape",
            input: [n.input![i]!, `${N}/heads`],
            output: [`${N}/Reshape/output_0`],
          },
          normed,
          {
            name: `${N}/Reshape_1`,
            opType: "Reshape",
            input: [normed.output![0]!, `${N}/flat`],
            output: [`${N}/Reshape_1/output_0`],
          },
        );
        n.input![i] = `${N}/Reshape_1/output_0`;
      }
    } else if (gemma && n.name === "/model/embed_tokens/Gather") {
      const scaled = n.output![0]!;
      n.output![0] = `${scaled}/unscaled`;
      g.initializer!.push(floatTensor("/model/embed_tokens/scale", Float32Array.of(Math.sqrt(OPTS.hidden!)), []));
      nodes.push(n, {
        name: "/model/embed_tokens/Mul",
        opType: "Mul",
        input: [n.output![0], "/model/embed_tokens/scale"],
        output: [scaled],
      });
      continue;
    } else if (gemma && n.opType === "SkipSimplifiedLayerNormalization") {
      const [, layer, where] = /^\/model\/layers\.(\d+)\/(\w+)\//.exec(n.name!)!;
      const afterAttention = where === "post_attention_layernorm";
      if (afterAttention) n.name = n.name!.replace(where, "pre_feedforward_layernorm");
      const N = afterAttention
        ? `/model/layers.${layer}/post_attention_layernorm`
        : `/model/layers.${Number(layer) - 1}/post_feedforward_layernorm`;
      const normed = norm(N, n.input![0]!, weight(`${N}.weight`, OPTS.hidden!));
      nodes.push(normed);
      n.input![0] = normed.output![0]!;
    }
    nodes.push(n);
  }
  g.node = nodes;
}

describe.each([
  ["Qwen3", false],
  ["Gemma 3", true],
])("a genai build with %s's per-head q/k norms", (_family, gemma) => {
  it("stores onnxruntime's own block states, right-padded at batch size 16, no q/k or sublayer norm taken for a block's", async () => {
    const d = join(dir, `genai-qk-norm-${gemma ? "gemma" : "qwen"}`);
    await writeTinyModel(d, OPTS, genaiFiles("fp32"));
    const model = await loadModel(join(d, "model.onnx"));
    addBuilderNorms(model, gemma);
    writeFileSync(join(d, "model.onnx"), encodeModel(model));
    const norms = model.graph!.node!.filter(
      (n) => n.opType === "SimplifiedLayerNormalization" && /(?:[qk]_norm|post_\w+_layernorm)\//.test(n.name!),
    );
    expect(norms).toHaveLength(gemma ? 12 : 6);

    const out = join(dir, `store-qk-norm-${gemma ? "gemma" : "qwen"}`);
    const { manifest } = await extract({ modelDir: d, bank, out, batchSize: 16, layerRule: "l >= 0" });
    expect(manifest).toMatchObject({
      padding_side: "right",
      style: { name: "structural", cross_check: "names (genai) agree on all 3 blocks" },
    });
    const tensors = manifest.style!.layers.map((l) => l.tensor);
    expect(tensors).toEqual([
      "/model/layers.1/input_layernorm/SkipSimplifiedLayerNormalization_output_3",
      "/model/layers.2/input_layernorm/SkipSimplifiedLayerNormalization_output_3",
      "/model/layers.3/final_norm_layernorm/SkipSimplifiedLayerNormalization_output_0",
    ]);

    // onnxruntime's own values of those tensors, each prompt run alone.
    for (const t of tensors)
      model.graph!.output!.push(valueInfo(t, DataType.FLOAT, ["batch_size", "sequence_length", OPTS.hidden!]));
    // Beside model.onnx, whose weights it reads from model.onnx.data.
    writeFileSync(join(d, "probed.onnx"), encodeModel(model));
    const session = await ort.InferenceSession.create(join(d, "probed.onnx"));
    const tok = await PromptTokenizer.load(d);
    const reader = await StoreReader.open(out);
    const rows = bankRows();
    let worst = 0;
    for (const [i, row] of rows.entries()) {
      const ids = tok.encode(buildPrompt(row));
      const T = ids.length;
      const feeds: Record<string, ort.Tensor> = {
        input_ids: new ort.Tensor("int64", BigInt64Array.from(ids, BigInt), [1, T]),
        attention_mask: new ort.Tensor("int64", new BigInt64Array(T).fill(1n), [1, T]),
      };
      for (const name of session.inputNames.filter((n) => n.startsWith("past_key_values")))
        feeds[name] = new ort.Tensor("float32", new Float32Array(0), [1, OPTS.kvHeads!, 0, OPTS.hidden! / OPTS.heads!]);
      const states = await session.run(feeds);
      for (const layer of reader.manifest.layers) {
        const got = await reader.readRowsF32(layer, i, 1);
        const want = (states[tensors[layer]!]!.data as Float32Array).subarray((T - 1) * OPTS.hidden!, T * OPTS.hidden!);
        const rms = Math.sqrt(want.reduce((a, v) => a + v * v, 0) / want.length);
        want.forEach((w, j) => {
          worst = Math.max(worst, Math.abs(got[j]! - w) / (2 * FLOAT16_RELATIVE * (Math.abs(w) + 1e-2 * rms)));
        });
      }
    }
    await reader.close();
    await session.release();
    expect(worst).toBeLessThanOrEqual(1);
  });
});

describe("a genai build whose genai_config.json gives another block count than the graph has", () => {
  it("stops in one line naming genai_config.json's num_hidden_layers, not a config.json the folder lacks", async () => {
    const d = join(dir, "genai-four-layers");
    await writeTinyModel(d, OPTS, genaiFiles("fp32"));
    const genaiPath = join(d, "genai_config.json");
    const genai = JSON.parse(readFileSync(genaiPath, "utf8"));
    genai.model.decoder.num_hidden_layers = 4;
    writeFileSync(genaiPath, JSON.stringify(genai));
    await expect(inspectModel(d)).rejects.toThrow(
      /^structure: the residual stream holds 3 blocks \(6 residual sums, two per pre-norm block\) but genai_config\.json's num_hidden_layers is 4 \(graph style seen: genai\)\. /,
    );
  });
});

describe("a genai build whose genai_config.json lists eos_token_id (and there is no config.json)", () => {
  it("stops on any listed id, as the float64 greedy reference does, and names genai_config.json for a value that is no id", async () => {
    const d = join(dir, "genai-eos-list");
    await writeTinyModel(d, OPTS, genaiFiles("fp32"));
    expect(existsSync(join(d, "config.json"))).toBe(false);
    const config = tinyConfig(OPTS);
    const weights = tinyWeights(OPTS);
    const tok = await PromptTokenizer.load(d);
    const decode = referenceDecoder(readFileSync(join(d, "tokenizer.json"), "utf8"));
    const { rows, file: small } = smallBank(4, "eos-bank.jsonl");
    // The third token row 0 generates with no EOS becomes the list's second id: row 0 stops on it.
    const free = referenceGreedy(config, weights, tok.encode(buildPrompt(rows[0])), new Set(), 6);
    const eos = [config.eos_token_id as number, free[2]!];
    const genaiPath = join(d, "genai_config.json");
    const genai = JSON.parse(readFileSync(genaiPath, "utf8"));
    writeFileSync(genaiPath, JSON.stringify({ ...genai, model: { ...genai.model, eos_token_id: eos } }));
    const out = join(dir, "gen-eos-list.jsonl");
    await generate({ modelDir: d, bank: small, out, batchSize: 4, maxNewTokens: 6 });
    const got = readFileSync(out, "utf8")
      .trim()
      .split("\n")
      .map((l) => JSON.parse(l));
    const want = rows.map((r) => referenceGreedy(config, weights, tok.encode(buildPrompt(r)), new Set(eos), 6));
    expect(want[0]!.length).toBeLessThanOrEqual(3);
    for (const [i, r] of rows.entries()) {
      const ids = want[i]!;
      const stopped = eos.includes(ids.at(-1)!);
      expect(got.find((g) => g.query_id === r.query_id)).toMatchObject({
        raw_response: decode(stopped ? ids.slice(0, -1) : ids),
        generated_tokens: ids.length,
        finish_reason: stopped ? "stop" : "length",
      });
    }

    writeFileSync(genaiPath, JSON.stringify({ ...genai, model: { ...genai.model, eos_token_id: ["</s>"] } }));
    const refused = join(dir, "gen-eos-bad.jsonl");
    await expect(generate({ modelDir: d, bank: small, out: refused, batchSize: 4, maxNewTokens: 6 })).rejects.toThrow(
      `${genaiPath}: "eos_token_id" must be a token id or a list of token ids`,
    );
    expect(existsSync(refused)).toBe(false);
  });
});

describe("a CUDA-style genai build (float16 KV cache and logits)", () => {
  it("generates the same text at batch sizes 8 and 1, feeding float16 past tensors", async () => {
    const d = await model("fp16-io");
    const texts: string[][] = [];
    for (const batchSize of [8, 1]) {
      const out = join(dir, `gen-fp16-io-${batchSize}.jsonl`);
      await generate({ modelDir: d, bank, out, batchSize, maxNewTokens: 6 });
      texts.push(
        readFileSync(out, "utf8")
          .trim()
          .split("\n")
          .map((l) => JSON.parse(l))
          .sort((a, b) => a.query_id.localeCompare(b.query_id))
          .map((r) => r.raw_response),
      );
    }
    expect(texts[0]).toEqual(texts[1]);
    expect(new Set(texts[0]).size).toBeGreaterThan(3);
  });
});

describe("generation on an onnxruntime-genai build, killed and resumed", () => {
  it("resumes after kill -9 at a seeded point into the same file as an uninterrupted run", async () => {
    const d = await model("fp32");
    const big = join(dir, "kill-bank.jsonl");
    const rows = Array.from({ length: 60 }, (_, i) =>
      JSON.stringify({
        query_id: `k${i}`,
        fact_id: `f${i >> 1}`,
        condition_family: "anchor",
        query: `${QUERIES[i % QUERIES.length]} ${i}`,
        use_for_main_forward: true,
        answers: ["x"],
      }),
    );
    writeFileSync(big, rows.join("\n") + "\n");
    const args = (out: string) => [
      BIN,
      "generate",
      "--model-dir",
      d,
      "--bank",
      big,
      "--out",
      out,
      "--batch-size",
      "4",
      "--max-new-tokens",
      "8",
      "--quiet",
    ];
    const whole = join(dir, "kill-whole.jsonl");
    expect(spawnSync(process.execPath, args(whole)).status).toBe(0);
    const out = join(dir, "kill-killed.jsonl");
    const target = 4 + (new Rng(31, 1).u32() % 40); // rows written before the kill, somewhere in 4…43 of 60
    const child = spawn(process.execPath, args(out), { stdio: "ignore" });
    const exit = await new Promise<{ signal: NodeJS.Signals | null }>((resolve) => {
      const poll = setInterval(() => {
        const seen = existsSync(out) ? readFileSync(out, "utf8").split("\n").length - 1 : 0;
        if (seen >= target) child.kill("SIGKILL");
      }, 2);
      child.on("exit", (_code, signal) => {
        clearInterval(poll);
        resolve({ signal });
      });
    });
    expect(exit.signal).toBe("SIGKILL");
    const partial = readFileSync(out, "utf8").split("\n").length - 1;
    expect(partial).toBeGreaterThanOrEqual(target);
    expect(partial).toBeLessThan(60);
    const resumed = spawnSync(process.execPath, args(out), { encoding: "utf8" });
    expect(resumed.status).toBe(0);
    expect(resumed.stdout).toContain(`${60 - partial} generated, ${partial} already there`);
    expect(readFileSync(out).equals(readFileSync(whole))).toBe(true);
  });
});

describe("a float16 genai build whose heads onnxruntime's CPU kernel refuses (head size 8)", () => {
  const SMALL_HEADS: TinyModelOptions = { ...OPTS, hidden: 32 }; // 4 heads of 8
  const d = join(dir, "genai-fp16-head8");
  beforeAll(() => writeTinyModel(d, SMALL_HEADS, genaiFiles("fp16")));

  /** onnxruntime's own first line for the graph as written, run on one prompt with an empty (float32) cache. */
  async function ortMessage(): Promise<string> {
    const session = await ort.InferenceSession.create(join(d, "model.onnx"));
    const feeds: Record<string, ort.Tensor> = {};
    for (const name of session.inputNames) {
      feeds[name] = name.startsWith("past_key_values")
        ? new ort.Tensor("float32", new Float32Array(0), [1, 2, 0, 8])
        : new ort.Tensor("int64", BigInt64Array.of(1n, 2n, 3n), [1, 3]);
    }
    const err = await session.run(feeds).then(
      () => undefined,
      (e: Error) => e,
    );
    await session.release();
    expect(err).toBeInstanceOf(Error);
    return err!.message.split("\n")[0]!;
  }

  it.each([
    ["extract", "store"],
    ["generate", "gens.jsonl"],
  ])("hsm %s stops in one line naming the graph file and onnxruntime's message, writing nothing", async (cmd, out) => {
    const message = await ortMessage();
    expect(message).toMatch(/head_size shall be a multiple of 16/);
    const target = join(dir, `head8-${cmd}`, out);
    for (const workers of ["1", "2"]) {
      const args = ["--model-dir", d, "--bank", bank, "--out", target, "--workers", workers, "--quiet"];
      const r = spawnSync(process.execPath, [BIN, cmd, ...args], { encoding: "utf8" });
      expect(r.stderr).toMatch(/^hsm: [^\n]*\n$/);
      expect(r.stderr.startsWith(`hsm: ${join(d, "model.onnx")}: `)).toBe(true);
      expect(r.stderr).toContain(message);
      expect(r.status).toBe(1);
      // Neither the output, nor a lock, nor an empty file: the output's folder holds nothing.
      expect(existsSync(join(dir, `head8-${cmd}`)) ? readdirSync(join(dir, `head8-${cmd}`)) : []).toEqual([]);
    }
  });

  it("keeps a failure in a node hsm added an error of hsm's own, and one that is not onnxruntime's", () => {
    const at = (node: string) =>
      new Error(`Non-zero status code returned while running MatMul node. Name:'${node}' Status Message: bad`);
    expect(runError("cpu", "m.onnx", at("/model/layers.0/mlp/MatMul"))?.message).toBe(
      `m.onnx: onnxruntime could not run the graph (${at("/model/layers.0/mlp/MatMul").message})`,
    );
    expect(runError("cpu", "m.onnx", at("/hsm/lm_head/MatMul"))).toBeUndefined();
    expect(runError("cpu", "m.onnx", new Error("input 'input_ids' is missing in 'feeds'."))).toBeUndefined();
  });
});

describe("a genai build onnxruntime refuses to load (num_heads a float)", () => {
  const d = join(dir, "genai-float-heads");
  beforeAll(async () => {
    await writeTinyModel(d, OPTS, genaiFiles("fp32"));
    const m = await loadModel(join(d, "model.onnx"));
    const gqa = m.graph!.node!.find((n) => n.opType === "GroupQueryAttention")!;
    const heads = gqa.attribute!.find((a) => a.name === "num_heads")!;
    Object.assign(heads, { type: 1, f: OPTS.heads, i: null }); // AttributeProto.FLOAT
    writeFileSync(join(d, "model.onnx"), encodeModel(m));
  });

  it.each([
    ["extract", "store"],
    ["generate", "gens.jsonl"],
  ])("hsm %s names the graph file and onnxruntime's reason, not the copy it loaded, writing nothing", (cmd, out) => {
    // onnxruntime's own words for the graph as written.
    const said = /Mismatched attribute type in '\/model\/layers\.0\/attn\/GroupQueryAttention : num_heads'/;
    const direct = spawnSync(
      process.execPath,
      [
        "-e",
        `require("onnxruntime-node").InferenceSession.create(${JSON.stringify(join(d, "model.onnx"))})` +
          `.then(() => {}, (e) => process.stdout.write(e.message))`,
      ],
      { encoding: "utf8" },
    );
    expect(direct.stdout).toMatch(said);
    const target = join(dir, `float-heads-${cmd}`, out);
    for (const workers of ["1", "2"]) {
      const args = ["--model-dir", d, "--bank", bank, "--out", target, "--workers", workers, "--quiet"];
      const r = spawnSync(process.execPath, [BIN, cmd, ...args], { encoding: "utf8" });
      expect(r.stderr).toMatch(/^hsm: [^\n]*\n$/);
      expect(r.stderr.startsWith(`hsm: ${join(d, "model.onnx")}: onnxruntime could not load the graph (`)).toBe(true);
      expect(r.stderr).toMatch(said);
      expect(r.stderr).not.toContain("hsm-rewritten");
      expect(r.status).toBe(1);
      expect(existsSync(join(dir, `float-heads-${cmd}`)) ? readdirSync(join(dir, `float-heads-${cmd}`)) : []).toEqual(
        [],
      );
    }
  });
});
