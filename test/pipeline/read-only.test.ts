/**
 * Outputs on read-only media (a bind mount made read-only, so these cases need root; CI runs as root): what is
 * finished is read where it is and every step that would write nothing runs, so `hsm run` over a finished
 * outputs root and `hsm adopt` of a complete store succeed; anything that must write names its output and
 * read-only file system (EROFS).
 */
import { execFileSync } from "node:child_process";
import { mkdirSync, readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { fileURLToPath } from "node:url";

import { afterAll, beforeAll, describe, expect, it } from "vitest";

import { FileError } from "../../src/errors.js";
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

describe.skipIf(process.getuid?.() !== 0)("outputs on read-only media (needs root to mount)", () => {
  beforeAll(async () => {
    const rows = readFileSync(DEMO_BANK, "utf8").trimEnd().split("\n");
    const facts = [...new Set(rows.map((r) => (JSON.parse(r) as { fact_id: string }).fact_id))].slice(0, 4);
    writeFileSync(BANK, rows.filter((r) => facts.includes(JSON.parse(r).fact_id)).join("\n") + "\n");
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
