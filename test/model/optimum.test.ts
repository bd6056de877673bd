/**
 * Export styles beyond the plain optimum graph: with-past graphs whose weights
 * live in `model.onnx_data` and that have no `position_ids` input, the merged
 * decoder (one `If` on `use_cache_branch`), graphs renamed as the dynamo
 * exporter names them or with no names at all, names that disagree with the
 * structure, a base model's export without its LM head (optimum's
 * feature-extraction task), and other families' graph shapes (gemma, qwen2,
 * phi3 with both LongRoPE branches, neox in both orders of its parallel
 * sums). Extraction
 * stores what the independent float64 forward pass computes (batch 1 and 16,
 * padded batches, a prompt over 192 tokens) and records the style in the
 * manifest; generation on the merged decoder and the with-past graph writes
 * the float64 greedy reference's text at batch 1 and 8.
 */
import { readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";

import * as ort from "onnxruntime-node";
import { beforeAll, describe, expect, it } from "vitest";

import { buildPrompt } from "../../src/bank/prompt.js";
import { MAX_NEW_TOKENS } from "../../src/defaults.js";
import { tinyConfig, tinyWeights, writeTinyModel, type TinyModelOptions } from "../../src/synthetic/llama.js";
import { MERGED_IF, USE_CACHE_BRANCH, writeMergedModel } from "../../src/synthetic/merged.js";
import { renameModelFile } from "../../src/synthetic/rename.js";
import { writeModelInStyle } from "../../src/synthetic/export-styles.js";
import { extract, inspectModel } from "../../src/extract/extract.js";
import { generate } from "../../src/generate/generate.js";
import { encodeModel, loadModel } from "../../src/onnx/graph.js";
import { PromptTokenizer } from "../../src/model/tokenizer.js";
import { referenceDecoder, referenceGreedy, referenceLogits } from "../helpers/llama-reference.js";
import { expectStoreMatchesReference } from "../helpers/reference-store.js";
import { baseModelNames, dropLmHead } from "../helpers/base-model.js";
import { streamFirstOrder } from "../helpers/parallel-residual.js";
import { tempDir } from "../helpers/tmp.js";
import { LOGITS_F32 } from "../tolerances.js";

const dir = tempDir("hsm-optimum-");
const bank = join(dir, "bank.jsonl");
const QUERIES = [
  "What is the capital of France?",
  "Ok?",
  `${"Setting the scene at some length, ".repeat(40)}what is the boiling point of water?`,
  "Who wrote Don Quixote?",
  "¿Cuál es la capital de Perú?",
];
const BASE: TinyModelOptions = { layers: 2, hidden: 32, heads: 4, kvHeads: 2, seed: 31, tokenizer: "llama3.1-1k" };
const MODELS = {
  /** with-past, weights in model.onnx_data, no position_ids input. */
  external: { ...BASE, withPast: true, externalData: true, positionIds: false },
  merged: { ...BASE, seed: 32 },
  mergedExternal: { ...BASE, seed: 33, externalData: true, positionIds: false },
  /** Renamed after writing: torch dynamo's names, and none at all. */
  dynamo: { ...BASE, seed: 34, withPast: true },
  anonymous: { ...BASE, seed: 35 },
  /** Other families' graph shapes (the reference follows them: test/helpers/family-reference.ts). */
  gemma: { ...BASE, seed: 36, family: "gemma", withPast: true },
  neox: { ...BASE, seed: 37, family: "neox" },
  qwen2: { ...BASE, seed: 38, family: "qwen2", withPast: true },
  phi3: { ...BASE, seed: 39, family: "phi3" },
  /** The same families as merged decoders and with dynamo names (the phi3 LongRoPE If nested in the merged If's branches). */
  qwen2Merged: { ...BASE, seed: 41, family: "qwen2" },
  phi3Merged: { ...BASE, seed: 42, family: "phi3" },
  qwen2Dynamo: { ...BASE, seed: 43, family: "qwen2", withPast: true },
  phi3Dynamo: { ...BASE, seed: 44, family: "phi3" },
  /** phi3 with a 128-position context: prompts over 64 tokens take LongRoPE's long-factor branch. */
  phi3Short: { ...BASE, seed: 40, family: "phi3", maxPositions: 128 },
} satisfies Record<string, TinyModelOptions>;
type Name = keyof typeof MODELS;
const modelDir = (name: Name) => join(dir, name);

beforeAll(async () => {
  writeFileSync(
    bank,
    Array.from({ length: 10 }, (_, i) =>
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
  await writeTinyModel(modelDir("external"), MODELS.external);
  await writeMergedModel(modelDir("merged"), MODELS.merged);
  await writeMergedModel(modelDir("mergedExternal"), MODELS.mergedExternal);
  for (const name of ["gemma", "neox", "qwen2", "phi3", "phi3Short"] as const)
    await writeTinyModel(modelDir(name), MODELS[name]);
  for (const name of ["qwen2Merged", "phi3Merged"] as const) await writeMergedModel(modelDir(name), MODELS[name]);
  for (const name of ["dynamo", "anonymous", "qwen2Dynamo", "phi3Dynamo"] as const) {
    await writeTinyModel(modelDir(name), MODELS[name]);
    await renameModelFile(modelDir(name), name === "anonymous" ? "anonymous" : "dynamo-names", 5);
  }
});

const bankRows = () =>
  readFileSync(bank, "utf8")
    .trim()
    .split("\n")
    .map((l) => JSON.parse(l));

const expectReference = (store: string, name: Name) =>
  expectStoreMatchesReference(store, MODELS[name], modelDir(name), bank);

describe("the optimum writers", () => {
  it("write a merged decoder as optimum does: one If on use_cache_branch, layers only in the branches, shared weights hoisted", async () => {
    const model = await loadModel(join(modelDir("merged"), "model.onnx"));
    const g = model.graph!;
    expect(g.node!.map((n) => [n.name, n.opType, n.input])).toEqual([[MERGED_IF, "If", [USE_CACHE_BRANCH]]]);
    expect(g.input!.at(-1)!.name).toBe(USE_CACHE_BRANCH);
    expect(g.initializer!.map((t) => t.name)).toContain(
      "model.layers.0.self_attn.q_proj.weight_merged_" +
        g.initializer!.findIndex((t) => t.name!.startsWith("model.layers.0.self_attn.q_proj.weight")),
    );
    expect(g.initializer!.every((t) => /_merged_\d+$/.test(t.name!))).toBe(true);
    const [then, otherwise] = ["then_branch", "else_branch"].map(
      (b) => g.node![0]!.attribute!.find((a) => a.name === b)!.g!,
    );
    const layerNodes = (b: typeof then) => b!.node!.map((n) => n.name!).filter((n) => n.startsWith("/model/layers."));
    expect(layerNodes(otherwise).every((n) => layerNodes(then).includes(n))).toBe(true);
    expect(layerNodes(otherwise).length).toBeGreaterThan(50);
  });

  it("merged: logits of the reference on both branches, the cache step continuing the first", async () => {
    const o = MODELS.merged;
    const ids = [1024, 791, 68, 315, 982];
    const session = await ort.InferenceSession.create(join(modelDir("merged"), "model.onnx"));
    const ints = (v: number[], dims: number[]) => new ort.Tensor("int64", BigInt64Array.from(v, BigInt), dims);
    const empty = Object.fromEntries(
      [0, 1].flatMap((l) =>
        ["key", "value"].map((k) => [
          `past_key_values.${l}.${k}`,
          new ort.Tensor("float32", new Float32Array(0), [1, 2, 0, 8]),
        ]),
      ),
    );
    const first = await session.run({
      input_ids: ints(ids.slice(0, 4), [1, 4]),
      attention_mask: ints([1, 1, 1, 1], [1, 4]),
      position_ids: ints([0, 1, 2, 3], [1, 4]),
      ...empty,
      [USE_CACHE_BRANCH]: new ort.Tensor("bool", Uint8Array.of(0), [1]),
    });
    const past = Object.fromEntries(
      Object.entries(first)
        .filter(([k]) => k.startsWith("present."))
        .map(([k, v]) => [k.replace("present.", "past_key_values."), v]),
    );
    const second = await session.run({
      input_ids: ints([ids[4]!], [1, 1]),
      attention_mask: ints([1, 1, 1, 1, 1], [1, 5]),
      position_ids: ints([4], [1, 1]),
      ...past,
      [USE_CACHE_BRANCH]: new ort.Tensor("bool", Uint8Array.of(1), [1]),
    });
    const V = tinyConfig(o).vocab_size;
    const weights = tinyWeights(o);
    for (const [out, prefix, at] of [
      [first, ids.slice(0, 4), 3],
      [second, ids, 0],
    ] as const) {
      const want = referenceLogits(tinyConfig(o), weights, [...prefix]);
      const got = (out.logits!.data as Float32Array).subarray(at * V, (at + 1) * V);
      let worst = 0;
      for (let v = 0; v < V; v++) worst = Math.max(worst, Math.abs(got[v]! - want[v]!));
      expect(worst).toBeLessThanOrEqual(LOGITS_F32);
    }
    await session.release();
  });
});

describe("hsm extract on optimum exports", () => {
  it("with-past, weights in model.onnx_data, no position_ids: the reference at batch 16 and 1", async () => {
    const { inspection } = await inspectModel(modelDir("external"));
    expect(inspection.inputs.map((i) => i.name)).not.toContain("position_ids");
    expect(inspection.plan).toMatchObject({
      strategy: "structural",
      prepared: [],
      crossCheck: "names (torch-names) agree on all 2 blocks",
    });
    for (const batchSize of [16, 1]) {
      const out = join(dir, `external-b${batchSize}`);
      const { manifest } = await extract({ modelDir: modelDir("external"), bank, out, batchSize, layerRule: "l >= 0" });
      expect(manifest.layers).toEqual([0, 1]);
      await expectReference(out, "external");
    }
  });

  for (const name of ["merged", "mergedExternal"] as const) {
    it(`${name === "merged" ? "a merged decoder" : "a merged decoder with external weights and no position_ids"}: the else branch inlined, the reference at batch 16 and 1`, async () => {
      const { inspection } = await inspectModel(modelDir(name));
      expect(inspection.plan).toMatchObject({
        strategy: "structural",
        prepared: ["optimum-merged"],
        crossCheck: "names (torch-names) agree on all 2 blocks",
      });
      expect(inspection.plan.tensors.map((t) => t.tensor)).toEqual([
        "/model/layers.0/Add_1_output_0",
        "/model/norm/Mul_1_output_0",
      ]);
      for (const batchSize of [16, 1]) {
        const out = join(dir, `${name}-b${batchSize}`);
        const { manifest } = await extract({ modelDir: modelDir(name), bank, out, batchSize, layerRule: "l >= 0" });
        expect(manifest.layers).toEqual([0, 1]);
        expect(manifest.style).toEqual({
          name: "optimum-merged+structural",
          cross_check: "names (torch-names) agree on all 2 blocks",
          layers: [
            {
              layer: 0,
              tensor: "/model/layers.0/Add_1_output_0",
              how: "structure: residual Add 2 of 4, the end of block 0 (/model/layers.0/Add_1)",
            },
            {
              layer: 1,
              tensor: "/model/norm/Mul_1_output_0",
              how: "structure: final norm output between the last residual and the LM head (/model/norm/Mul_1)",
            },
          ],
        });
        await expectReference(out, name);
      }
    });
  }
});

describe("hsm extract on graphs whose names say nothing", () => {
  for (const [name, seen] of [
    ["dynamo", "dynamo-names"],
    ["anonymous", "anonymous"],
  ] as const) {
    it(`${seen}: found by structure, the reference at batch 16`, async () => {
      const out = join(dir, `${name}-b16`);
      const { manifest } = await extract({ modelDir: modelDir(name), bank, out, batchSize: 16, layerRule: "l >= 0" });
      expect(manifest.style).toMatchObject({
        name: "structural",
        cross_check: `names: none to check against (graph style seen: ${seen})`,
      });
      expect(manifest.style!.layers.map((l) => l.how.replace(/[,(].*$/, "").trim())).toEqual([
        "structure: residual Add 2 of 4",
        "structure: final norm output between the last residual and the LM head",
      ]);
      await expectReference(out, name);
    });
  }
});

describe("hsm extract when names and structure disagree", () => {
  it("warns once, records the disagreement in the manifest, and stores the structure's tensors (the reference)", async () => {
    const m = join(dir, "misnamed");
    await writeTinyModel(m, MODELS.anonymous);
    const model = await loadModel(join(m, "model.onnx"));
    // The final norm's last Mul moved out of the norm's scope by name: names take the Mul before it.
    model.graph!.node!.find((n) => n.name === "/model/norm/Mul_1")!.name = "/lm_head/Mul";
    writeFileSync(join(m, "model.onnx"), encodeModel(model));
    const warnings: string[] = [];
    const out = join(dir, "misnamed-b16");
    const { manifest } = await extract({
      modelDir: m,
      bank,
      out,
      batchSize: 16,
      log: (msg, level) => level === "warn" && warnings.push(msg),
    });
    const note =
      "structure and names disagree on 1 layer(s) (layer 1: structure /model/norm/Mul_1_output_0, names /model/norm/Mul_output_0); the structure's tensors are used";
    expect(warnings).toEqual([`warning: ${note}`]);
    expect(manifest.style).toMatchObject({
      name: "structural",
      cross_check: note,
      layers: [{ layer: 1, tensor: "/model/norm/Mul_1_output_0" }],
    });
    await expectStoreMatchesReference(out, MODELS.anonymous, m, bank);
  });
});

describe("hsm extract on a base model's export (optimum feature-extraction: last_hidden_state, no LM head)", () => {
  it.each([
    ["llama", { ...BASE, seed: 45 }],
    ["starcoder2", { ...BASE, seed: 46, family: "starcoder2" }],
  ] as const)(
    "%s: the last block is the graph's output, the final norm's; the reference at batch 16",
    async (name, o) => {
      const m = join(dir, `base-${name}`);
      await writeModelInStyle(m, "plain", o);
      const model = await loadModel(join(m, "model.onnx"));
      baseModelNames(model.graph!, "/model");
      dropLmHead(model.graph!, "/lm_head/MatMul", "last_hidden_state", BASE.hidden!);
      writeFileSync(join(m, "model.onnx"), encodeModel(model));
      const warnings: string[] = [];
      const out = join(dir, `base-${name}-b16`);
      const { manifest } = await extract({
        modelDir: m,
        bank,
        out,
        batchSize: 16,
        layerRule: "l >= 0",
        log: (msg, level) => level === "warn" && warnings.push(msg),
      });
      expect(warnings).toEqual([]);
      expect(manifest).toMatchObject({
        last_layer_final_norm: true,
        style: {
          name: "structural",
          cross_check: "names (torch-names) agree on all 2 blocks",
          layers: [
            { layer: 0, tensor: "/layers.0/Add_1_output_0" },
            { layer: 1, tensor: "last_hidden_state" },
          ],
        },
      });
      await expectStoreMatchesReference(out, o, m, bank);
    },
  );
});

describe("hsm extract on other families' graph shapes", () => {
  for (const name of ["gemma", "neox", "qwen2", "phi3"] as const) {
    it(`${name}: found by structure, names agreeing, the reference at batch 16 and 1`, async () => {
      for (const batchSize of [16, 1]) {
        const out = join(dir, `${name}-b${batchSize}`);
        const { manifest } = await extract({ modelDir: modelDir(name), bank, out, batchSize, layerRule: "l >= 0" });
        expect(manifest.style).toMatchObject({
          name: "structural",
          cross_check: "names (torch-names) agree on all 2 blocks",
        });
        await expectReference(out, name);
      }
    });
  }

  it("neox with its parallel blocks added stream first, (x + attn) + mlp (Cohere, StableLM): the reference at batch 16", async () => {
    const m = join(dir, "neox-stream-first");
    await writeTinyModel(m, MODELS.neox);
    const model = await loadModel(join(m, "model.onnx"));
    expect(streamFirstOrder(model.graph!)).toBe(2);
    writeFileSync(join(m, "model.onnx"), encodeModel(model));
    const out = join(dir, "neox-stream-first-b16");
    const { manifest } = await extract({ modelDir: m, bank, out, batchSize: 16, layerRule: "l >= 0" });
    expect(manifest.style).toMatchObject({
      name: "structural",
      cross_check: "names (torch-names) agree on all 2 blocks",
      layers: [{ layer: 0, tensor: "/model/layers.0/Add_1_output_0" }, { layer: 1 }],
    });
    await expectStoreMatchesReference(out, MODELS.neox, m, bank);
  });

  for (const [name, style, seen] of [
    ["qwen2Merged", "optimum-merged+structural", "names (torch-names) agree on all 2 blocks"],
    ["phi3Merged", "optimum-merged+structural", "names (torch-names) agree on all 2 blocks"],
    ["qwen2Dynamo", "structural", "names: none to check against (graph style seen: dynamo-names)"],
    ["phi3Dynamo", "structural", "names: none to check against (graph style seen: dynamo-names)"],
  ] as const) {
    it(`${name}: ${style}, the reference at batch 16`, async () => {
      const out = join(dir, `${name}-b16`);
      const { manifest } = await extract({ modelDir: modelDir(name), bank, out, batchSize: 16, layerRule: "l >= 0" });
      expect(manifest.style).toMatchObject({ name: style, cross_check: seen });
      await expectReference(out, name);
    });
  }

  /** Prompts on both sides of the 128-position phi3's original_max_position_embeddings (64), all within its tables. */
  async function longRopeBank(): Promise<string> {
    const tok = await PromptTokenizer.load(modelDir("phi3Short"));
    const queries = [
      "Ok?",
      "Who wrote Don Quixote?",
      "Name the river that flows through the capital of Hungary and the sea it reaches.",
      "Which element has the chemical symbol Fe, and is it magnetic at room temperature, or only when cold?",
    ];
    const rows = queries.map((query, i) => ({
      query_id: `p${i}`,
      fact_id: `p${i}`,
      condition_family: "anchor",
      query,
      use_for_main_forward: true,
      answers: ["x"],
    }));
    const lengths = rows.map((r) => tok.encode(buildPrompt(r)).length);
    expect(lengths.some((n) => n <= 64) && lengths.some((n) => n > 64) && lengths.every((n) => n <= 128)).toBe(true);
    const path = join(dir, "phi3-short-bank.jsonl");
    writeFileSync(path, rows.map((r) => JSON.stringify(r)).join("\n") + "\n");
    return path;
  }

  it("phi3: LongRoPE's If takes the short factors up to original_max_position_embeddings and the long ones past it (the reference at batch 1)", async () => {
    const o = MODELS.phi3Short;
    expect(tinyConfig(o)).toMatchObject({ max_position_embeddings: 128, original_max_position_embeddings: 64 });
    const shortBank = await longRopeBank();
    const out = join(dir, "phi3Short-b1");
    await extract({
      modelDir: modelDir("phi3Short"),
      bank: shortBank,
      out,
      batchSize: 1,
      layerRule: "l >= 0",
      selfCheck: 0,
    });
    await expectStoreMatchesReference(out, o, modelDir("phi3Short"), shortBank);
  });

  it("phi3: no batch mixes prompts on both sides of original_max_position_embeddings, so batch 4 is batch 1's store", async () => {
    const out = join(dir, "phi3Short-b4");
    const shortBank = await longRopeBank();
    const { manifest } = await extract({
      modelDir: modelDir("phi3Short"),
      bank: shortBank,
      out,
      batchSize: 4,
      layerRule: "l >= 0",
    });
    expect(manifest.self_check).toMatchObject({ status: "pass" });
    await expectStoreMatchesReference(out, MODELS.phi3Short, modelDir("phi3Short"), shortBank);
  });
});

describe("hsm generate on optimum exports", () => {
  async function expectGreedy(name: Name) {
    const o = MODELS[name];
    const config = tinyConfig(o);
    const tok = await PromptTokenizer.load(modelDir(name));
    const decode = referenceDecoder(readFileSync(join(modelDir(name), "tokenizer.json"), "utf8"));
    const outs = [1, 8].map((b) => join(dir, `${name}-gen-b${b}.jsonl`));
    for (const [k, b] of [1, 8].entries())
      expect(await generate({ modelDir: modelDir(name), bank, out: outs[k]!, batchSize: b })).toMatchObject({
        written: 10,
        failed: 0,
      });
    const [one, eight] = outs.map(
      (p) =>
        new Map(
          readFileSync(p, "utf8")
            .trim()
            .split("\n")
            .map((l) => JSON.parse(l))
            .map((r) => [r.query_id, r]),
        ),
    );
    const weights = tinyWeights(o);
    for (const row of bankRows().slice(0, 4)) {
      const ids = referenceGreedy(
        config,
        weights,
        tok.encode(buildPrompt(row)),
        new Set([config.eos_token_id ?? []].flat()),
        MAX_NEW_TOKENS,
      );
      const want = { raw_response: decode(ids), generated_tokens: ids.length };
      expect(one!.get(row.query_id)).toMatchObject(want);
      expect(eight!.get(row.query_id)).toMatchObject(want);
    }
    for (const [id, row] of one!) expect(eight!.get(id)).toEqual(row);
  }

  it("a merged decoder: use_cache_branch false on the first step, true with the cache after; the reference's text at batch 1 and 8", async () => {
    await expectGreedy("merged");
  });

  it("with-past, external weights, no position_ids: the reference's text at batch 1 and 8", async () => {
    await expectGreedy("external");
  });

  it("dynamo names (with past) and no names at all: the reference's text at batch 1 and 8", async () => {
    await expectGreedy("dynamo");
    await expectGreedy("anonymous");
  });
});
