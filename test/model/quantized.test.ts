/**
 * Extraction on quantized and float16 graphs laid out as transformers.js
 * folders (onnx/model_q4.onnx, …): the stored states against the float64
 * reference on the weights the graph really multiplies by (dequantized; for
 * int8, activations quantized per tensor as DynamicQuantizeLinear does), at
 * batch sizes 16 and 1 with padded batches and a prompt past 192 tokens, and
 * the manifest's dtype and weights; the other families' graph shapes as q4
 * and fp16 folders at batch size 16.
 */
import { spawnSync } from "node:child_process";
import { copyFileSync, readdirSync, readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";

import { beforeAll, describe, expect, it } from "vitest";

import { buildPrompt } from "../../src/bank/prompt.js";
import { tinyConfig, tinyWeights, writeTinyModel, type TinyModelOptions } from "../../src/synthetic/llama.js";
import { quantizedFiles, styleWeights, type QuantizedStyle } from "../../src/synthetic/quantize.js";
import { extract, inspectModel } from "../../src/extract/extract.js";
import { generate } from "../../src/generate/generate.js";
import { PromptTokenizer } from "../../src/model/tokenizer.js";
import { StoreReader } from "../../src/store/reader.js";
import { referenceDecoder, referenceGreedy, referenceHidden, referenceLogits } from "../helpers/llama-reference.js";
import { referenceHiddenFamily } from "../helpers/family-reference.js";
import { int8Projection } from "../helpers/quantized-reference.js";
import { tempDir } from "../helpers/tmp.js";
import { FLOAT16_COMPUTE_PER_LAYER, FLOAT16_RELATIVE, INT8_CODE_FLIPS } from "../tolerances.js";

const dir = tempDir("hsm-quantized-");
const OPTS: TinyModelOptions = {
  layers: 3,
  hidden: 64,
  heads: 4,
  kvHeads: 2,
  withPast: true,
  seed: 11,
  tokenizer: "llama3.1-1k",
};
const bank = join(dir, "bank.jsonl");
const QUERIES = [
  "What is the capital of France?",
  "Who wrote Don Quixote?",
  "Ok?",
  `${"Setting the scene at some length, ".repeat(40)}what is the boiling point of water?`,
  "Which element has the chemical symbol Fe, and is it magnetic at room temperature?",
  "Name the largest planet.",
];

beforeAll(() => {
  const lines = Array.from({ length: 18 }, (_, i) =>
    JSON.stringify({
      query_id: `q${i}`,
      fact_id: `f${i >> 1}`,
      condition_family: i % 2 ? "typo" : "anchor",
      query: `${QUERIES[i % QUERIES.length]} ${i}`,
      use_for_main_forward: true,
      answers: ["x"],
    }),
  );
  writeFileSync(bank, lines.join("\n") + "\n");
});

/**
 * The largest error of a store against the reference, in units of the allowed
 * error: float16 storage (2^-11 relative, doubled for the float32 noise
 * beneath it) plus, for float16 graphs, FLOAT16_COMPUTE_PER_LAYER per block
 * passed, and for int8 graphs INT8_CODE_FLIPS, relative to the row's
 * root-mean-square; and the share of values beyond the storage bound alone.
 */
async function worstError(
  store: string,
  modelDir: string,
  style: QuantizedStyle,
  o: TinyModelOptions = OPTS,
): Promise<{ worst: number; beyondStorage: number }> {
  const config = tinyConfig(o);
  // The int8 reference quantizes the float32 weights itself, activations with them.
  const weights = style === "int8" ? tinyWeights(o) : styleWeights(style, tinyWeights(o));
  const tok = await PromptTokenizer.load(modelDir);
  const rows = readFileSync(bank, "utf8")
    .trim()
    .split("\n")
    .map((l) => JSON.parse(l));
  const reader = await StoreReader.open(store);
  const float16 = reader.manifest.dtype === "float16";
  let worst = 0;
  let beyondStorage = 0;
  let total = 0;
  for (const [i, row] of rows.entries()) {
    const ids = tok.encode(buildPrompt(row));
    const ref =
      style === "int8"
        ? referenceHidden(config, weights, ids, int8Projection)
        : weights.family
          ? referenceHiddenFamily(config, weights, ids)
          : referenceHidden(config, weights, ids);
    for (const layer of reader.manifest.layers) {
      const got = await reader.readRowsF32(layer, i, 1);
      const want = ref[layer]!;
      const rms = Math.sqrt(want.reduce((a, v) => a + v * v, 0) / want.length);
      want.forEach((w, j) => {
        const allowed =
          2 * FLOAT16_RELATIVE * (Math.abs(w) + 1e-2 * rms) +
          (float16 ? FLOAT16_COMPUTE_PER_LAYER * (layer + 1) * rms : 0) +
          (style === "int8" ? INT8_CODE_FLIPS * rms : 0);
        const storage = 2 * FLOAT16_RELATIVE * (Math.abs(w) + 1e-2 * rms);
        if (Math.abs(got[j]! - w) > storage) beyondStorage++;
        total++;
        worst = Math.max(worst, Math.abs(got[j]! - w) / allowed);
      });
    }
  }
  await reader.close();
  return { worst, beyondStorage: beyondStorage / total };
}

const EXPECTED = {
  q4: { file: "onnx/model_q4.onnx", dtype: "float32", weights: "int4" },
  int8: { file: "onnx/model_quantized.onnx", dtype: "float32", weights: "int8" },
  nf4: { file: "onnx/model_bnb4.onnx", dtype: "float32", weights: "nf4" },
  fp16: { file: "onnx/model_fp16.onnx", dtype: "float16", weights: "float16" },
  q4f16: { file: "onnx/model_q4f16.onnx", dtype: "float16", weights: "int4" },
} as const;

describe.each(Object.keys(EXPECTED) as QuantizedStyle[])("a transformers.js %s folder", (style) => {
  const modelDir = join(dir, style);
  beforeAll(async () => {
    await writeTinyModel(modelDir, OPTS, quantizedFiles(style, true));
  });

  it("is found under onnx/ with its weight format and compute dtype", async () => {
    const { inspection } = await inspectModel(modelDir);
    expect(inspection.onnxPath).toBe(join(modelDir, EXPECTED[style].file));
    expect(inspection.plan.strategy).toBe("structural");
    expect(inspection.plan.crossCheck).toMatch(/^names \(torch-names\) agree on all \d+ blocks$/);
    expect(inspection.format).toMatchObject({
      dtype: EXPECTED[style].dtype,
      weights: EXPECTED[style].weights,
      batchDependent: style === "int8",
    });
  });

  it("stores the reference states of its own weights at batch sizes 16 and 1", async () => {
    for (const batchSize of [16, 1]) {
      const out = join(dir, `${style}-b${batchSize}`);
      const { manifest } = await extract({ modelDir, bank, out, batchSize });
      expect(manifest).toMatchObject({
        dtype: EXPECTED[style].dtype,
        weights: EXPECTED[style].weights,
        padding_side: "left",
        complete: true,
      });
      const { worst, beyondStorage } = await worstError(out, modelDir, style);
      expect(worst).toBeLessThanOrEqual(1);
      // Graphs computing in float32 on exact weights are as exact as float32 ones: every value within float16 storage.
      if (style !== "int8" && manifest.dtype === "float32") expect(beyondStorage).toBe(0);
    }
  });
});

describe("other families' graph shapes as transformers.js q4 and fp16 folders", () => {
  const cases = (["gemma", "qwen2", "phi3", "neox"] as const).flatMap((family) =>
    (["q4", "fp16"] as const).map((style) => [family, style] as const),
  );
  it.each(cases)(
    "%s, %s: found by structure with names agreeing, the reference states of its own weights at batch size 16",
    async (family, style) => {
      const o: TinyModelOptions = { ...OPTS, family, seed: 12 };
      const modelDir = join(dir, `${family}-${style}`);
      await writeTinyModel(modelDir, o, quantizedFiles(style, true));
      const out = join(dir, `${family}-${style}-b16`);
      const { manifest } = await extract({ modelDir, bank, out, batchSize: 16 });
      expect(manifest).toMatchObject({
        dtype: EXPECTED[style].dtype,
        weights: EXPECTED[style].weights,
        style: { name: "structural", cross_check: "names (torch-names) agree on all 3 blocks" },
      });
      expect((await worstError(out, modelDir, style, o)).worst).toBeLessThanOrEqual(1);
    },
  );
});

describe("a folder with several graphs under onnx/", () => {
  const BIN = join(import.meta.dirname, "..", "..", "bin", "hsm.js");
  const hsm = (args: string[]) => spawnSync(process.execPath, [BIN, ...args], { encoding: "utf8" });

  it("stops with one line listing them, and runs the one --model-file names", async () => {
    const both = join(dir, "both");
    await writeTinyModel(both, OPTS, quantizedFiles("q4", true));
    await writeTinyModel(join(dir, "fp16-extra"), OPTS, quantizedFiles("fp16", true));
    copyFileSync(join(dir, "fp16-extra", "onnx", "model_fp16.onnx"), join(both, "onnx", "model_fp16.onnx"));
    const r = hsm(["inspect-model", both]);
    expect(r.status).toBe(1);
    expect(r.stderr.trim().split("\n")).toEqual([
      `hsm: ${both}: holds several graphs (onnx/model_fp16.onnx, onnx/model_q4.onnx); pick one with --model-file`,
    ]);
    const missing = hsm(["inspect-model", both, "--model-file", "model_int8.onnx"]);
    expect(missing.stderr.trim()).toBe(
      `hsm: ${join(both, "model_int8.onnx")}: is missing; the folder holds onnx/model_fp16.onnx, onnx/model_q4.onnx`,
    );
    const out = join(dir, "both-store");
    const x = hsm([
      "extract",
      "--model-dir",
      both,
      "--model-file",
      "model_fp16.onnx",
      "--bank",
      bank,
      "--out",
      out,
      "--quiet",
    ]);
    expect(x.status).toBe(0);
    const m = JSON.parse(readFileSync(join(out, "index.json"), "utf8"));
    expect(m).toMatchObject({ dtype: "float16", weights: "float16", complete: true });
  });
});

describe("a transformers.js graph with its weights in <file>_data chunks", () => {
  it("stores exactly what the same graph with inline weights stores", async () => {
    const chunked = join(dir, "q4-chunked");
    await writeTinyModel(chunked, OPTS, quantizedFiles("q4", true, 16 << 10));
    const files = readdirSync(join(chunked, "onnx")).sort();
    expect(files.slice(0, 3)).toEqual(["model_q4.onnx", "model_q4.onnx_data", "model_q4.onnx_data_1"]);
    expect(files.slice(3).every((f) => /^model_q4\.onnx_data_\d+$/.test(f))).toBe(true);
    const inline = join(dir, "q4-inline");
    await writeTinyModel(inline, OPTS, quantizedFiles("q4", true));
    const a = await extract({ modelDir: chunked, bank, out: join(dir, "q4-chunked-store"), batchSize: 16 });
    const b = await extract({ modelDir: inline, bank, out: join(dir, "q4-inline-store"), batchSize: 16 });
    for (const [name, entry] of Object.entries(b.manifest.files))
      expect(a.manifest.files[name]!.sha256).toBe(entry.sha256);
  });
});

describe.each(["q4", "nf4", "fp16", "q4f16"] as const)("generation on a transformers.js %s folder", (style) => {
  it("gives the float64 greedy text of the weights the graph multiplies by, at batch sizes 8 and 1, with the KV cache", async () => {
    const modelDir = join(dir, `gen-${style}`);
    await writeTinyModel(modelDir, OPTS, quantizedFiles(style, true));
    const config = tinyConfig(OPTS);
    const weights = styleWeights(style, tinyWeights(OPTS));
    const tok = await PromptTokenizer.load(modelDir);
    const decode = referenceDecoder(readFileSync(join(modelDir, "tokenizer.json"), "utf8"));
    const rows = readFileSync(bank, "utf8")
      .trim()
      .split("\n")
      .map((l) => JSON.parse(l))
      .slice(0, 10);
    const small = join(dir, `gen-bank-${style}.jsonl`);
    writeFileSync(small, rows.map((r) => JSON.stringify(r)).join("\n") + "\n");
    const eos = new Set([config.eos_token_id ?? []].flat());
    const want = rows.map((r) => decode(referenceGreedy(config, weights, tok.encode(buildPrompt(r)), eos, 6)));
    expect(new Set(want).size).toBeGreaterThan(3);
    for (const batchSize of [8, 1]) {
      const out = join(dir, `${style}-gen-${batchSize}.jsonl`);
      await generate({ modelDir, bank: small, out, batchSize, maxNewTokens: 6 });
      const got = new Map(
        readFileSync(out, "utf8")
          .trim()
          .split("\n")
          .map((l) => JSON.parse(l))
          .map((r) => [r.query_id, r.raw_response]),
      );
      expect(rows.map((r) => got.get(r.query_id))).toEqual(want);
    }
  });
});

describe("generation on a transformers.js int8 folder (activations quantized per tensor)", () => {
  it("decodes rows one at a time: the same text at batch sizes 8 and 1, and the first token the int8 reference's", async () => {
    const modelDir = join(dir, "gen-int8");
    await writeTinyModel(modelDir, OPTS, quantizedFiles("int8", true));
    const config = tinyConfig(OPTS);
    const weights = tinyWeights(OPTS);
    const tok = await PromptTokenizer.load(modelDir);
    const decode = referenceDecoder(readFileSync(join(modelDir, "tokenizer.json"), "utf8"));
    const rows = readFileSync(bank, "utf8")
      .trim()
      .split("\n")
      .map((l) => JSON.parse(l))
      .slice(0, 10);
    const small = join(dir, "gen-bank-int8.jsonl");
    writeFileSync(small, rows.map((r) => JSON.stringify(r)).join("\n") + "\n");
    // The first step reads the whole prompt, as the reference quantizes it: its token is the LM head's argmax over the int8 state.
    const eos = new Set([config.eos_token_id ?? []].flat());
    const first = rows.map((r) => {
      const logits = referenceLogits(config, weights, tok.encode(buildPrompt(r)), int8Projection);
      const best = logits.reduce((at, v, i) => (v > logits[at]! ? i : at), 0);
      return eos.has(best) ? "" : decode([best]);
    });
    const read = (out: string) =>
      new Map(
        readFileSync(out, "utf8")
          .trim()
          .split("\n")
          .map((l) => JSON.parse(l))
          .map((r) => [r.query_id, r]),
      );
    const one = join(dir, "int8-gen-first.jsonl");
    await generate({ modelDir, bank: small, out: one, batchSize: 8, maxNewTokens: 1 });
    const got = read(one);
    expect(rows.map((r) => got.get(r.query_id)!.raw_response)).toEqual(first);
    const texts = [];
    for (const batchSize of [8, 1]) {
      const out = join(dir, `int8-gen-${batchSize}.jsonl`);
      await generate({ modelDir, bank: small, out, batchSize, maxNewTokens: 6 });
      texts.push(rows.map((r) => read(out).get(r.query_id)!.raw_response));
    }
    expect(new Set(texts[0]).size).toBeGreaterThan(3);
    expect(texts[1]).toEqual(texts[0]);
  });
});
