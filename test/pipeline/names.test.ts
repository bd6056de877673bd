/**
 * Model names become paths through one rule (src/util/stem.ts): a name never
 * reaches outside the output root nor nests folders, two names never share a
 * stem, and the name itself is kept as given in the records, by compare and by
 * the report.
 */
import { spawnSync } from "node:child_process";
import { readdirSync, readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { fileURLToPath } from "node:url";

import { beforeAll, describe, expect, it } from "vitest";

import { UsageError } from "../../src/errors.js";
import { runPipeline } from "../../src/pipeline/run.js";
import { modelPaths } from "../../src/study/layout.js";
import { writeTinyModel } from "../../src/synthetic/llama.js";
import { pathStem, STEM_MAX_LENGTH } from "../../src/util/stem.js";
import { tempDir } from "../helpers/tmp.js";

const BIN = fileURLToPath(new URL("../../bin/hsm.js", import.meta.url));
const DEMO_BANK = fileURLToPath(new URL("../../data/demo-bank.jsonl", import.meta.url));
const dir = tempDir("hsm-names-");
const work = join(dir, "a", "b");
const outputs = join(work, "outputs");
const bank = join(dir, "bank.jsonl");
const modelDir = join(dir, "model");
const hsm = (args: string[]) => spawnSync(process.execPath, [BIN, ...args], { encoding: "utf8", cwd: work });
const HF = "meta-llama/Llama-3.1-8B";

/** Every file under `folder`, relative, sorted. */
function filesUnder(folder: string): string[] {
  return readdirSync(folder, { recursive: true, withFileTypes: true })
    .filter((e) => e.isFile())
    .map((e) => join(e.parentPath, e.name).slice(folder.length + 1))
    .sort();
}

describe("pathStem", () => {
  it("keeps a plain name and makes any other safe, short and its own", () => {
    expect(pathStem("llama-3.1-8b_instruct+q4")).toBe("llama-3.1-8b_instruct+q4");
    expect(pathStem(HF)).toMatch(/^meta-llama_Llama-3\.1-8B-[0-9a-f]{8}$/);
    expect(pathStem(HF)).toBe(pathStem(HF));
    const similar = ["a/b", "a:b", "a b", "a//b", "a_b", "a\\b"].map((n) => pathStem(n));
    expect(new Set(similar).size).toBe(similar.length);
    for (const name of [".", "..", "...", ".hidden", "../../x", "/etc/passwd", "é", "a".repeat(300)]) {
      const stem = pathStem(name);
      expect(stem).toMatch(/^[A-Za-z0-9_+-][A-Za-z0-9._+-]*$/);
      expect(stem.length).toBeLessThanOrEqual(STEM_MAX_LENGTH + 9);
    }
    expect(pathStem("a".repeat(300))).not.toBe(pathStem("a".repeat(301)));
  });

  it("refuses a name with nothing visible or with a control character", () => {
    expect(() => pathStem("")).toThrow(
      new UsageError('Expected a model name with a visible character but received ""'),
    );
    expect(() => pathStem("  ")).toThrow(UsageError);
    expect(() => pathStem("a\nb")).toThrow(
      new UsageError('Expected a model name without control characters but received "a\\nb"'),
    );
  });
});

describe("model names in hsm run, compare and report", () => {
  beforeAll(async () => {
    const rows = readFileSync(DEMO_BANK, "utf8").trimEnd().split("\n");
    const facts = [...new Set(rows.map((r) => (JSON.parse(r) as { fact_id: string }).fact_id))].slice(0, 6);
    writeFileSync(bank, rows.filter((r) => facts.includes(JSON.parse(r).fact_id)).join("\n") + "\n");
    await writeTinyModel(modelDir, { layers: 2, hidden: 32, heads: 2, kvHeads: 1, seed: 1 });
    await runPipeline({ modelDir, bank, outputs, model: HF, batchSize: 8, threads: 1 });
  });

  it("keeps a name with .. inside --outputs and records it as given", () => {
    const r = hsm(["run", "--model-dir", modelDir, "--bank", bank, "--model", "../../x", "--outputs", "outputs", "-q"]);
    expect(r.stderr).not.toContain("Error");
    expect(r.status).toBe(0);
    expect(readdirSync(dir).sort()).toEqual(["a", "bank.jsonl", "model"]);
    expect(readdirSync(join(dir, "a"))).toEqual(["b"]);
    expect(readdirSync(work)).toEqual(["outputs"]);
    const paths = modelPaths(outputs, "../../x");
    expect(paths.store).toBe(join(outputs, "hidden", pathStem("../../x")));
    expect(JSON.parse(readFileSync(join(paths.store, "index.json"), "utf8")).model).toBe("../../x");
    expect(JSON.parse(readFileSync(paths.scored, "utf8").split("\n")[0]!).model).toBe("../../x");
    const records = filesUnder(join(outputs, "eee")).filter((f) => f.endsWith(".json"));
    const ids = records.map((f) => JSON.parse(readFileSync(join(outputs, "eee", f), "utf8")).model_info.id);
    expect(ids.sort()).toEqual(["../../x", HF]);
    expect(records.every((f) => !f.split("/").some((part) => part === ".." || part === "."))).toBe(true);
  });

  it("files a name with a / flat, and compare and report find it by its name", () => {
    const stem = pathStem(HF);
    expect(readdirSync(join(outputs, "hidden")).sort()).toEqual([pathStem("../../x"), stem].sort());
    expect(filesUnder(join(outputs, "foundry"))).toEqual([`${pathStem("../../x")}.jsonl`, `${stem}.jsonl`].sort());
    const c = hsm(["compare", "outputs", HF, "../../x", "--json", "--bootstrap", "20", "-q"]);
    expect(c.stderr).toBe("");
    expect(c.status).toBe(0);
    expect(JSON.parse(c.stdout)).toMatchObject({ a: HF, b: "../../x" });
    // The stem its files are named by finds it too.
    expect(JSON.parse(hsm(["compare", "outputs", stem, "../../x", "--json", "--bootstrap", "20", "-q"]).stdout).a).toBe(
      HF,
    );
    const r = hsm(["report", "outputs", "--bootstrap", "20", "--no-verify", "-q"]);
    expect(r.stderr).toBe("");
    expect(r.stdout).toContain(`: 2 models (../../x, ${HF}),`);
    expect(readFileSync(join(outputs, "report.html"), "utf8")).toContain(HF);
  });

  it("refuses an empty name as a usage error before writing anything", () => {
    const r = hsm(["run", "--model-dir", modelDir, "--bank", bank, "--model", "", "--outputs", "empty", "-q"]);
    expect(r.status).toBe(2);
    expect(r.stderr).toContain('Expected a model name with a visible character but received ""');
    expect(readdirSync(work)).toEqual(["outputs"]);
  });
});
