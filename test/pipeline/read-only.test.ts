/**
 * Outputs on read-only media (a bind mount made read-only, so these cases need root; CI runs as root): what is
 * finished is read where it is and every step that would write nothing runs, so `hsm run` over a finished
 * outputs root and `hsm adopt` of a complete store succeed; anything that must write names its output and
 * read-only file system (EROFS).
 */
import { execFileSync } from "node:child_process";
import { cpSync, mkdirSync, readdirSync, readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { fileURLToPath } from "node:url";

import { afterAll, beforeAll, describe, expect, it } from "vitest";

import { FileError } from "../../src/errors.js";
import { extract } from "../../src/extract/extract.js";
import { generate } from "../../src/generate/generate.js";
import { runPipeline, type RunOptions } from "../../src/pipeline/run.js";
import { adoptStore } from "../../src/store/adopt.js";
import { writeTinyModel } from "../../src/synthetic/llama.js";
import { writeFixture } from "../../src/synthetic/store.js";
import { tempDir } from "../helpers/tmp.js";

const DEMO_BANK = fileURLToPath(new URL("../../data/demo-bank.jsonl", import.meta.url));
const dir = tempDir("hsm-read-only-");
const BANK = join(dir, "bank.jsonl");
const modelDir = join(dir, "model");
const source = join(dir, "source");
const ro = join(dir, "ro");

beforeAll(() => {
  const rows = readFileSync(DEMO_BANK, "utf8").trimEnd().split("\n");
  const facts = [...new Set(rows.map((r) => (JSON.parse(r) as { fact_id: string }).fact_id))].slice(0, 4);
  writeFileSync(BANK, rows.filter((r) => facts.includes(JSON.parse(r).fact_id)).join("\n") + "\n");
});

describe.skipIf(process.getuid?.() !== 0)("outputs on read-only media (needs root to mount)", () => {
  beforeAll(async () => {
    await writeTinyModel(modelDir, { layers: 2, hidden: 32, heads: 2, kvHeads: 1, seed: 1 });
    await runPipeline(options(join(source, "outputs")));
    mkdirSync(ro);
    execFileSync("mount", ["--bind", source, ro]);
    execFileSync("mount", ["-o", "remount,bind,ro", ro]);
  });
  afterAll(() => {
    execFileSync("umount", ["--lazy", ro]);
  });

  function options(outputs: string, log?: RunOptions["log"]): RunOptions {
    return { modelDir, bank: BANK, outputs, model: "tiny", batchSize: 8, threads: 1, log };
  }

  it("hsm run over a finished outputs root skips every step and writes nothing", async () => {
    const logs: string[] = [];
    await runPipeline(options(join(ro, "outputs"), (step, message) => logs.push(`${step}: ${message}`)));
    expect(logs).toContain(
      `generate: all ${readFileSync(BANK, "utf8").trimEnd().split("\n").length} queries already answered, skipped`,
    );
    expect(logs).toContain("extract: store complete, skipped");
    expect(logs).toContain("metrics: up to date, skipped");
  });

  it("adopt returns a complete store as it is", async () => {
    const store = join(ro, "outputs", "hidden", "tiny");
    const manifest = await adoptStore(store, { bank: BANK });
    expect(manifest).toEqual(JSON.parse(readFileSync(join(store, "index.json"), "utf8")));
  });

  it("generate, fixture and make-model that must write name their output and EROFS", async () => {
    const refused = (path: string) => ({
      constructor: FileError,
      code: "EROFS",
      message: `${path}: cannot be written: read-only file system (EROFS)`,
    });
    const gens = join(ro, "gens.jsonl");
    await expect(generate({ modelDir, bank: BANK, out: gens, batchSize: 8 })).rejects.toMatchObject(refused(gens));
    await expect(writeFixture(join(ro, "fx"), { facts: 4 })).rejects.toMatchObject(refused(join(ro, "fx")));
    await expect(writeTinyModel(join(ro, "m"), { layers: 1, hidden: 8, heads: 1 })).rejects.toMatchObject(
      refused(join(ro, "m")),
    );
  });
});

describe.skipIf(process.getuid?.() !== 0)(
  "a read-only model folder with external weights (needs root to mount)",
  () => {
    // A file system of its own, as a cluster's shared model folder is: the weights cannot be hard-linked next to a
    // rewritten graph in the temporary directory, nor the graph written beside them.
    const shared = join(dir, "shared");
    const writable = join(dir, "writable-model");
    beforeAll(async () => {
      mkdirSync(shared);
      execFileSync("mount", ["-t", "tmpfs", "-o", "size=64m", "tmpfs", shared]);
      await writeTinyModel(join(shared, "model"), {
        layers: 2,
        hidden: 32,
        heads: 2,
        kvHeads: 1,
        seed: 3,
        externalData: true,
      });
      execFileSync("mount", ["-o", "remount,ro", shared]);
      cpSync(join(shared, "model"), writable, { recursive: true });
    });
    afterAll(() => {
      execFileSync("umount", ["--lazy", shared]);
    });

    it("extract and generate read it where it is, with the results of a writable copy", async () => {
      expect(readdirSync(join(shared, "model"))).toContain("model.onnx_data");
      const run = async (modelDir: string, name: string) => {
        await extract({ modelDir, bank: BANK, out: join(dir, `${name}-store`), model: "m", batchSize: 8, threads: 1 });
        await generate({ modelDir, bank: BANK, out: join(dir, `${name}.jsonl`), model: "m", batchSize: 8, threads: 1 });
        const store = join(dir, `${name}-store`);
        const npy = readdirSync(store).filter((f) => f.endsWith(".npy"));
        const answers = readFileSync(join(dir, `${name}.jsonl`), "utf8")
          .trimEnd()
          .split("\n")
          .map((l) => (JSON.parse(l) as { raw_response: string }).raw_response);
        return { npy, states: npy.map((f) => readFileSync(join(store, f))), answers };
      };
      const there = await run(join(shared, "model"), "read-only");
      const copy = await run(writable, "writable");
      expect(there.npy.length).toBeGreaterThan(0);
      expect(there).toEqual(copy);
    });
  },
);
