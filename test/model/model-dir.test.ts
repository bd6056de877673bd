/**
 * Model folders as they sit on disk: a Hugging Face hub cache folder
 * (`models--ORG--NAME`, its snapshot's files symbolic links into `blobs/`)
 * extracts and generates byte for byte as the same files copied flat, and a
 * folder with several graphs and no choice names them.
 */
import { createHash } from "node:crypto";
import { mkdirSync, readdirSync, readFileSync, renameSync, symlinkSync, writeFileSync } from "node:fs";
import { basename, dirname, join } from "node:path";

import { beforeAll, describe, expect, it } from "vitest";

import { extract, inspectModel } from "../../src/extract/extract.js";
import { generate } from "../../src/generate/generate.js";
import { openModelDir } from "../../src/model/model-dir.js";
import { encodeModel, loadModel, pointToExternalData } from "../../src/onnx/graph.js";
import { writeModelInStyle } from "../../src/synthetic/export-styles.js";
import { writeTinyModel, type TinyModelOptions } from "../../src/synthetic/llama.js";
import { tempDir } from "../helpers/tmp.js";

const dir = tempDir("hsm-model-dir-");
const MODEL: TinyModelOptions = {
  layers: 2,
  hidden: 32,
  heads: 4,
  kvHeads: 2,
  withPast: true,
  externalData: true,
  tokenizer: "llama3.1-1k",
  seed: 5,
};
const flat = join(dir, "flat");
const cache = join(dir, "hub", "models--hsm--tiny");
const REVISION = "0123456789abcdef0123456789abcdef01234567";
const bank = join(dir, "bank.jsonl");

/** Moves a flat model folder into a hub cache: files under blobs/<sha256>, the snapshot's names relative links to them. */
function hubCacheOf(source: string, target: string): void {
  const snapshot = join(target, "snapshots", REVISION);
  mkdirSync(join(target, "blobs"), { recursive: true });
  mkdirSync(snapshot, { recursive: true });
  mkdirSync(join(target, "refs"), { recursive: true });
  for (const name of readdirSync(source)) {
    const hash = createHash("sha256")
      .update(readFileSync(join(source, name)))
      .digest("hex");
    renameSync(join(source, name), join(target, "blobs", hash));
    symlinkSync(join("..", "..", "blobs", hash), join(snapshot, name));
  }
  writeFileSync(join(target, "refs", "main"), REVISION);
}

beforeAll(async () => {
  await writeTinyModel(flat, MODEL);
  await writeTinyModel(join(dir, "moved"), MODEL);
  hubCacheOf(join(dir, "moved"), cache);
  const queries = ["What is the capital of France?", "Ok?", "Who wrote Don Quixote?", "Name the largest planet."];
  const lines = Array.from({ length: 10 }, (_, i) =>
    JSON.stringify({
      query_id: `q${i}`,
      fact_id: `f${i >> 1}`,
      condition_family: i % 2 ? "typo" : "anchor",
      query: `${queries[i % queries.length]} (${i})`,
      use_for_main_forward: true,
      answers: ["x"],
    }),
  );
  writeFileSync(bank, lines.join("\n") + "\n");
});

describe("a hub cache folder", () => {
  it("stands for the snapshot refs/main names", async () => {
    const md = await openModelDir(cache);
    expect(md.dir).toBe(join(cache, "snapshots", REVISION));
    expect(md.onnxPath).toBe(join(cache, "snapshots", REVISION, "model.onnx"));
  });

  it("extracts the same bytes as the files copied flat, external weights reached through links", async () => {
    const stores = [flat, cache].map((m, k) => ({ m, out: join(dir, `store-${k}`) }));
    const manifests = [];
    for (const { m, out } of stores)
      manifests.push((await extract({ modelDir: m, bank, out, model: "tiny", batchSize: 4 })).manifest);
    expect(manifests[1]!.model_sha256).toBe(manifests[0]!.model_sha256);
    for (const layer of manifests[0]!.layers) {
      const name = `L${String(layer).padStart(3, "0")}.npy`;
      expect(readFileSync(join(stores[1]!.out, name))).toEqual(readFileSync(join(stores[0]!.out, name)));
    }
    // Nothing staged is left in the cache.
    expect(readdirSync(join(cache, "blobs")).every((n) => /^[0-9a-f]{64}$/.test(n))).toBe(true);
  });

  it("generates the same file as the files copied flat", async () => {
    const outs = [flat, cache].map((_, k) => join(dir, `gen-${k}.jsonl`));
    for (const [k, m] of [flat, cache].entries())
      expect(
        await generate({ modelDir: m, bank, out: outs[k]!, model: "tiny", batchSize: 4, maxNewTokens: 6 }),
      ).toMatchObject({ written: 10, failed: 0 });
    expect(readFileSync(outs[1]!, "utf8")).toBe(readFileSync(outs[0]!, "utf8"));
  });

  it("without refs/main names its snapshots; a ref to a missing snapshot is named", async () => {
    const bare = join(dir, "hub", "models--hsm--bare");
    mkdirSync(join(bare, "snapshots", REVISION), { recursive: true });
    await expect(openModelDir(bare)).rejects.toThrow(
      `${join(bare, "refs", "main")}: is missing: a hub cache folder names its current snapshot there; pass one of its snapshots as --model-dir (${join(bare, "snapshots", REVISION)})`,
    );
    mkdirSync(join(bare, "refs"));
    writeFileSync(join(bare, "refs", "main"), "f".repeat(40));
    await expect(openModelDir(bare)).rejects.toThrow(`${join(bare, "snapshots", "f".repeat(40))}: is missing`);
  });
});

/** Moves every initializer of 1 KiB or more of `dir`'s inline model.onnx into the file `fileOf` names for it. */
async function relocateWeights(dir: string, fileOf: (tensor: string) => string): Promise<void> {
  const model = await loadModel(join(dir, "model.onnx"));
  const files = new Map<string, Uint8Array[]>();
  for (const t of model.graph!.initializer!) {
    if (t.rawData!.length < 1024) continue;
    const file = fileOf(t.name!);
    const parts = files.get(file) ?? [];
    const raw = t.rawData!;
    pointToExternalData(
      t,
      file,
      parts.reduce((n, p) => n + p.length, 0),
      raw.length,
    );
    files.set(file, [...parts, raw]);
  }
  for (const [file, parts] of files) {
    mkdirSync(dirname(join(dir, file)), { recursive: true });
    writeFileSync(join(dir, file), Buffer.concat(parts));
  }
  writeFileSync(join(dir, "model.onnx"), encodeModel(model));
}

describe("external data in files of any name", () => {
  // As onnx.save_model writes them: a file of the user's choosing, one file per tensor (torch's export of a model
  // over 2 GB), a file in a subfolder. The staging folder must hold exactly the files the graph names.
  const LAYOUTS = {
    "weights.bin": () => "weights.bin",
    "one file per tensor": (tensor: string) => tensor,
    "weights/model.bin": () => join("weights", "model.bin"),
  };

  it.each(Object.entries(LAYOUTS))("%s: extracts and generates what model.onnx_data does", async (name, fileOf) => {
    const folder = join(dir, `any-name-${name.replace(/\W/g, "-")}`);
    const outOf = (m: string, what: string) => `${folder}-${what}-${basename(m)}`;
    await writeTinyModel(folder, { ...MODEL, externalData: false });
    await relocateWeights(folder, fileOf);
    expect(readdirSync(folder).some((f) => /(_data|\.data)$/.test(f))).toBe(false);
    const stores = [folder, flat].map((m) => ({ m, out: outOf(m, "store") }));
    const manifests = [];
    for (const { m, out } of stores)
      manifests.push((await extract({ modelDir: m, bank, out, model: "tiny", batchSize: 4 })).manifest);
    for (const layer of manifests[0]!.layers) {
      const file = `L${String(layer).padStart(3, "0")}.npy`;
      expect(readFileSync(join(stores[0]!.out, file))).toEqual(readFileSync(join(stores[1]!.out, file)));
    }
    const texts = [];
    for (const m of [folder, flat]) {
      const out = `${outOf(m, "generated")}.jsonl`;
      expect(await generate({ modelDir: m, bank, out, model: "tiny", batchSize: 4, maxNewTokens: 6 })).toMatchObject({
        written: 10,
        failed: 0,
      });
      texts.push(
        readFileSync(out, "utf8")
          .trim()
          .split("\n")
          .map((l) => JSON.parse(l).raw_response),
      );
    }
    expect(texts[0]).toEqual(texts[1]);
  });
});

describe("a folder with several graphs", () => {
  it("names them when none is chosen, and takes the only one there is", async () => {
    const legacy = join(dir, "legacy");
    await writeTinyModel(legacy, { ...MODEL, externalData: false });
    renameSync(join(legacy, "model.onnx"), join(legacy, "decoder_model.onnx"));
    expect((await openModelDir(legacy)).onnxPath).toBe(join(legacy, "decoder_model.onnx"));
    writeFileSync(join(legacy, "decoder_with_past_model.onnx"), readFileSync(join(legacy, "decoder_model.onnx")));
    await expect(openModelDir(legacy)).rejects.toThrow(
      `${legacy}: holds several graphs (decoder_model.onnx, decoder_with_past_model.onnx); pick one with --model-file`,
    );
    expect((await openModelDir(legacy, "decoder_with_past_model.onnx")).onnxPath).toBe(
      join(legacy, "decoder_with_past_model.onnx"),
    );
  });

  it("refuses a --model-file outside the folder, relative or absolute", async () => {
    const folder = join(dir, "inside");
    await writeTinyModel(folder, { ...MODEL, externalData: false });
    for (const file of ["../legacy/decoder_model.onnx", join(dir, "legacy", "decoder_model.onnx")]) {
      await expect(openModelDir(folder, file)).rejects.toThrow(
        `${folder}: --model-file ${JSON.stringify(file)} is outside the model folder; name a graph inside it`,
      );
    }
    expect((await openModelDir(folder, "./model.onnx")).onnxPath).toBe(join(folder, "model.onnx"));
  });
});

describe("a block count that disagrees with the graph", () => {
  it("names the field config.json gives it under (GPT-2's n_layer), not one the file lacks", async () => {
    const md = join(dir, "gpt2-three");
    await writeModelInStyle(md, "plain", { family: "gpt2", layers: 2, hidden: 32, heads: 4, tokenizer: "llama3.1-1k" });
    const config = JSON.parse(readFileSync(join(md, "config.json"), "utf8"));
    expect(config).not.toHaveProperty("num_hidden_layers");
    writeFileSync(join(md, "config.json"), JSON.stringify({ ...config, n_layer: 3 }));
    expect((await openModelDir(md)).config).toMatchObject({ numLayers: 3, layersField: "n_layer" });
    await expect(inspectModel(md)).rejects.toThrow(
      /^structure: the residual stream holds 2 blocks \(4 residual Adds, two per pre-norm block\) but config\.json's n_layer is 3 /,
    );
    const nested = join(dir, "gpt2-nested");
    await writeModelInStyle(nested, "plain", {
      family: "gpt2",
      layers: 2,
      hidden: 32,
      heads: 4,
      tokenizer: "llama3.1-1k",
    });
    const { n_layer: _n, ...rest } = config;
    writeFileSync(join(nested, "config.json"), JSON.stringify({ ...rest, text_config: { n_layer: 3 } }));
    await expect(inspectModel(nested)).rejects.toThrow(/ but config\.json's text_config\.n_layer is 3 /);
  });
});
