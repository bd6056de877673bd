/**
 * The families whose graphs are not Llama-shaped (GPT-2, OPT, GPT-Neo and
 * GPT-BigCode: learned absolute positions, BigCode's multi-query cache fused
 * into one key_value tensor per layer; BLOOM and MPT: ALiBi; GPT-J and
 * CodeGen: interleaved partial rotary in parallel blocks; Falcon, Phi and
 * StableLM: partial rotary, Falcon's one cached key/value head; Mistral,
 * Mixtral, OLMo and StarCoder2: sliding windows, a mixture of experts,
 * LayerNorm without weights, biases), and the Llama-shaped ones beside them
 * (Llama, Gemma2 with soft-capping and a window, Qwen2, Phi-3 with LongRoPE's both branches, GPT-NeoX's
 * parallel blocks), in each output optimum writes: `model.onnx` with past, the legacy decoder without past and
 * without `position_ids` (GPT-2's counts positions from the padded length),
 * and the merged decoder. Extraction at batch 16 and 1 stores what the
 * independent float64 forward pass computes, and generation at batch 16 and 1
 * writes its greedy text.
 */
import { readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";

import { beforeAll, describe, expect, it } from "vitest";

import { buildPrompt } from "../../src/bank/prompt.js";
import { extract, inspectModel } from "../../src/extract/extract.js";
import { generate } from "../../src/generate/generate.js";
import { PromptTokenizer } from "../../src/model/tokenizer.js";
import { writeModelInStyle } from "../../src/synthetic/export-styles.js";
import type { OwnFamily, OwnFamilyOptions } from "../../src/synthetic/families.js";
import { tinyConfig, tinyWeights, type LlamaFamily } from "../../src/synthetic/llama.js";
import { referenceGreedyFamily } from "../helpers/family-reference.js";
import { FAMILIES, FAMILY_KNOBS } from "../helpers/families.js";
import { referenceDecoder, referenceGreedy } from "../helpers/llama-reference.js";
import { ownFamilyForward, ownFamilyGreedy } from "../helpers/own-family-reference.js";
import { expectStoreMatchesReference } from "../helpers/reference-store.js";
import { tempDir } from "../helpers/tmp.js";

const dir = tempDir("hsm-families-");
const bank = join(dir, "bank.jsonl");
const QUERIES = [
  "What is the capital of France?",
  "Ok?",
  "Which element has the chemical symbol Fe, and is it magnetic at room temperature?",
  "Who wrote Don Quixote?",
  "¿Cuál es la capital de Perú?",
  "Name the largest planet.",
];
const MAX_NEW = 6;
const isLlamaShaped = (family: OwnFamily | LlamaFamily): family is LlamaFamily =>
  family === "llama" || family === "gemma" || family === "qwen2" || family === "phi3" || family === "neox";
/** The optimum outputs: the with-past model.onnx, the legacy decoder_model.onnx, and the merged decoder. */
const OUTPUTS = {
  "with-past": { style: "with-past", positionIds: true },
  legacy: { style: "plain", positionIds: false },
  merged: { style: "merged", positionIds: false },
} as const;
type Output = keyof typeof OUTPUTS;

const options = (family: OwnFamily | LlamaFamily, output: Output): OwnFamilyOptions => ({
  ...FAMILY_KNOBS[family],
  family,
  layers: 2,
  hidden: 32,
  heads: 4,
  tokenizer: "llama3.1-1k",
  seed: 60 + FAMILIES.indexOf(family),
  positionIds: OUTPUTS[output].positionIds,
});
const modelDir = (family: OwnFamily | LlamaFamily, output: Output) => join(dir, `${family}-${output}`);
const written = new Map<string, Promise<unknown>>();
/** Writes the model folder once, for whichever test needs it first. */
const ensureModel = (family: OwnFamily | LlamaFamily, output: Output) => {
  const md = modelDir(family, output);
  if (!written.has(md)) written.set(md, writeModelInStyle(md, OUTPUTS[output].style, options(family, output)));
  return written.get(md)!;
};

beforeAll(async () => {
  writeFileSync(
    bank,
    Array.from({ length: 8 }, (_, i) =>
      JSON.stringify({
        query_id: `q${i}`,
        fact_id: `f${i}`,
        condition_family: "anchor",
        query: `${QUERIES[i % QUERIES.length]}${i >= QUERIES.length ? ` #${i}` : ""}`,
        use_for_main_forward: true,
        answers: ["x"],
      }),
    ).join("\n") + "\n",
  );
});

const greedyTexts = new Map<string, Promise<Record<string, string>>>();
/**
 * The reference's greedy text per query: the family's outputs differ only in reading position_ids, neither the
 * weights nor an unpadded sequence's positions, so they share one reference (the float64 passes cost more than
 * the runs they check).
 */
function wanted(
  family: OwnFamily | LlamaFamily,
  md: string,
  rows: { query_id: string; condition_family: string; query: string }[],
): Promise<Record<string, string>> {
  if (!greedyTexts.has(family))
    greedyTexts.set(
      family,
      (async () => {
        const tok = await PromptTokenizer.load(md);
        const decode = referenceDecoder(readFileSync(join(md, "tokenizer.json"), "utf8"));
        const o = options(family, "with-past");
        const forward = isLlamaShaped(family) ? undefined : ownFamilyForward({ ...o, family });
        const greedy = (prompt: number[], eos: ReadonlySet<number>) =>
          forward
            ? ownFamilyGreedy(forward, prompt, eos, MAX_NEW)
            : family === "llama"
              ? referenceGreedy(tinyConfig(o), tinyWeights(o), prompt, eos, MAX_NEW)
              : referenceGreedyFamily(tinyConfig(o), tinyWeights(o), prompt, eos, MAX_NEW);
        const eos = new Set([1025]);
        return Object.fromEntries(rows.map((r) => [r.query_id, decode(greedy(tok.encode(buildPrompt(r)), eos))]));
      })(),
    );
  return greedyTexts.get(family)!;
}

describe.each(FAMILIES)("%s", (family) => {
  beforeAll(async () => {
    for (const output of Object.keys(OUTPUTS) as Output[]) await ensureModel(family, output);
  });

  it.each(Object.keys(OUTPUTS) as Output[])("%s: extraction at batch 16 and 1 stores the reference", async (output) => {
    for (const batchSize of [16, 1]) {
      const out = join(dir, `${family}-${output}-b${batchSize}`);
      const { manifest } = await extract({
        modelDir: modelDir(family, output),
        bank,
        out,
        batchSize,
        layerRule: "l >= 0",
      });
      expect(manifest.self_check?.status).toBe("pass");
      // Found by structure, the names agreeing.
      expect(manifest.style!.name).toMatch(/(^|\+)structural$/);
      expect(manifest.style!.cross_check).toBe("names (torch-names) agree on all 2 blocks");
      // Graphs without position_ids (the legacy outputs; BLOOM and MPT always) are right-padded.
      const positionIds = OUTPUTS[output].positionIds && family !== "bloom" && family !== "mpt";
      expect(manifest.padding_side).toBe(positionIds ? "left" : "right");
      await expectStoreMatchesReference(out, options(family, output), modelDir(family, output), bank);
    }
  });

  it.each(Object.keys(OUTPUTS) as Output[])(
    "%s: generation at batch 16 and 1 writes the reference's text",
    async (output) => {
      const md = modelDir(family, output);
      const rows = readFileSync(bank, "utf8")
        .trim()
        .split("\n")
        .map((l) => JSON.parse(l));
      const want = await wanted(family, md, rows);
      for (const batchSize of [16, 1]) {
        const out = join(dir, `${family}-${output}-b${batchSize}.jsonl`);
        const messages: string[] = [];
        const log = (m: string) => messages.push(m);
        expect(await generate({ modelDir: md, bank, out, batchSize, maxNewTokens: MAX_NEW, log })).toMatchObject({
          written: rows.length,
          failed: 0,
        });
        const got = readFileSync(out, "utf8")
          .trim()
          .split("\n")
          .map((l) => JSON.parse(l))
          .map((r) => [r.query_id, r.raw_response]);
        expect(Object.fromEntries(got)).toEqual(want);
        // The legacy decoder has no cache: one is added and used.
        if (output === "legacy")
          expect(messages).toContain("the model has no KV cache: decoding with one added to the graph");
      }
    },
  );
});

describe("phi3", () => {
  it("takes both LongRoPE branches, no prompt crossing original_max_position_embeddings while it is generated", async () => {
    await ensureModel("phi3", "with-past");
    const md = modelDir("phi3", "with-past");
    const original = JSON.parse(readFileSync(join(md, "config.json"), "utf8")).original_max_position_embeddings;
    const tok = await PromptTokenizer.load(md);
    const lengths = readFileSync(bank, "utf8")
      .trim()
      .split("\n")
      .map((l) => tok.encode(buildPrompt(JSON.parse(l))).length);
    expect(lengths.some((n) => n > original)).toBe(true);
    expect(lengths.filter((n) => n <= original).length).toBeGreaterThan(0);
    // The last token generated is never fed back: a prompt of n tokens feeds at most n + MAX_NEW - 1.
    expect(lengths.every((n) => n > original || n + MAX_NEW - 1 <= original)).toBe(true);
  });
});

describe("gpt_bigcode without multi_query", () => {
  it("carries its per-head fused cache [B, heads, seq, 2·head_dim]: the reference at batch 16 and 1", async () => {
    const o: OwnFamilyOptions = { ...options("gpt_bigcode", "with-past"), multiQuery: false, seed: 80 };
    const md = join(dir, "gpt_bigcode-mha");
    await writeModelInStyle(md, "with-past", o);
    const rows = readFileSync(bank, "utf8")
      .trim()
      .split("\n")
      .map((l) => JSON.parse(l));
    const tok = await PromptTokenizer.load(md);
    const decode = referenceDecoder(readFileSync(join(md, "tokenizer.json"), "utf8"));
    const forward = ownFamilyForward({ ...o, family: "gpt_bigcode" });
    const want = Object.fromEntries(
      rows.map((r) => [
        r.query_id,
        decode(ownFamilyGreedy(forward, tok.encode(buildPrompt(r)), new Set([1025]), MAX_NEW)),
      ]),
    );
    for (const batchSize of [16, 1]) {
      const store = join(dir, `gpt_bigcode-mha-b${batchSize}`);
      await extract({ modelDir: md, bank, out: store, batchSize, layerRule: "l >= 0" });
      await expectStoreMatchesReference(store, o, md, bank);
      const out = `${store}.jsonl`;
      await generate({ modelDir: md, bank, out, batchSize, maxNewTokens: MAX_NEW });
      const got = readFileSync(out, "utf8")
        .trim()
        .split("\n")
        .map((l) => JSON.parse(l))
        .map((r) => [r.query_id, r.raw_response]);
      expect(Object.fromEntries(got)).toEqual(want);
    }
  });
});

describe("tensors named with --hidden-tensors", () => {
  it("may be OPT's flattened [B·T, d] residual sums: read as [B, T, d], the reference at batch 16", async () => {
    await ensureModel("opt", "legacy");
    const md = modelDir("opt", "legacy");
    const found = (await inspectModel(md)).inspection.plan.tensors;
    const flat = found.find((t) => t.layer === 0)!.tensor;
    expect(flat).toMatch(/^\/model\/decoder\/layers\.0\/Add_\d+_output_0$/);
    const out = join(dir, "opt-named");
    const { manifest } = await extract({
      modelDir: md,
      bank,
      out,
      batchSize: 16,
      layerRule: "l >= 0",
      hiddenTensors: `0=${flat},final=${found.find((t) => t.layer === 1)!.tensor}`,
    });
    expect(manifest.style!.name).toBe("explicit");
    await expectStoreMatchesReference(out, options("opt", "legacy"), md, bank);
  });
});
