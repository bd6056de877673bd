/**
 * Rerunning the pipeline: a finished metrics step is skipped (its files left
 * byte for byte and untouched), the exports keep exactly one Every Eval Ever
 * record per model, and a setting or an input that changes the metrics makes
 * them computed again.
 */
import { createHash } from "node:crypto";
import { copyFileSync, readdirSync, readFileSync, rmSync, statSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { fileURLToPath } from "node:url";

import { beforeAll, describe, expect, it } from "vitest";

import { runMetrics } from "../../src/pipeline/metrics.js";
import { runPipeline, type RunOptions } from "../../src/pipeline/run.js";
import { writeTinyModel } from "../../src/synthetic/llama.js";
import { tempDir } from "../helpers/tmp.js";

const DEMO_BANK = fileURLToPath(new URL("../../data/demo-bank.jsonl", import.meta.url));
const dir = tempDir("hsm-rerun-");
/** The demo bank's first six facts: enough for both metrics, quick to answer. */
const BANK = join(dir, "bank.jsonl");
const modelDir = join(dir, "model");
const outputs = join(dir, "outputs");
const metricsDir = join(outputs, "metrics", "tiny");

/** Every file under `folder`, relative, sorted. */
function filesUnder(folder: string): string[] {
  return readdirSync(folder, { recursive: true, withFileTypes: true })
    .filter((e) => e.isFile())
    .map((e) => join(e.parentPath, e.name).slice(folder.length + 1))
    .sort();
}

/** Each file of a folder: its sha256 and modification time. */
function snapshot(folder: string): Record<string, [string, number]> {
  return Object.fromEntries(
    filesUnder(folder).map((f) => {
      const p = join(folder, f);
      return [f, [createHash("sha256").update(readFileSync(p)).digest("hex"), statSync(p).mtimeMs]];
    }),
  );
}

const eeeRecords = () => filesUnder(join(outputs, "eee")).filter((f) => !f.endsWith("_samples.jsonl"));
const eeeSamples = () => filesUnder(join(outputs, "eee")).filter((f) => f.endsWith("_samples.jsonl"));
/** Waits past the second: Every Eval Ever ids end in the time in seconds. */
const nextSecond = () => new Promise((r) => setTimeout(r, 1100));

async function run(): Promise<string[]> {
  const logs: string[] = [];
  const o: RunOptions = { modelDir, bank: BANK, outputs, model: "tiny", batchSize: 8, threads: 1 };
  await runPipeline({ ...o, log: (step, message) => logs.push(`${step}: ${message}`) });
  return logs;
}

beforeAll(async () => {
  const rows = readFileSync(DEMO_BANK, "utf8").trimEnd().split("\n");
  const facts = [...new Set(rows.map((r) => (JSON.parse(r) as { fact_id: string }).fact_id))].slice(0, 6);
  writeFileSync(BANK, rows.filter((r) => facts.includes(JSON.parse(r).fact_id)).join("\n") + "\n");
  await writeTinyModel(modelDir, { layers: 2, hidden: 32, heads: 2, kvHeads: 1, seed: 1 });
  await run();
});

describe("rerunning hsm run", () => {
  it("skips finished metrics and keeps the one Every Eval Ever record", async () => {
    const metrics = snapshot(metricsDir);
    const exports = snapshot(join(outputs, "eee"));
    const foundry = snapshot(join(outputs, "foundry"));
    expect(eeeRecords()).toHaveLength(1);
    await nextSecond();
    const logs = await run();
    expect(logs).toContain("metrics: up to date, skipped");
    expect(logs.filter((l) => l.startsWith("export: "))).toEqual([
      expect.stringMatching(/^export: Every Eval Ever: up to date, kept .*; Foundry: up to date, kept /),
    ]);
    expect(snapshot(metricsDir)).toEqual(metrics);
    expect(snapshot(join(outputs, "eee"))).toEqual(exports);
    expect(snapshot(join(outputs, "foundry"))).toEqual(foundry);
  });

  it("resumed after a stop that followed the metrics, writes the exports once", async () => {
    const metrics = snapshot(metricsDir);
    // A stop during the export: the samples of a new record written, its aggregate not yet.
    const [samples] = eeeSamples();
    const orphan = samples!.replace(/_\d+_samples\.jsonl$/, "_1_samples.jsonl");
    copyFileSync(join(outputs, "eee", samples!), join(outputs, "eee", orphan));
    rmSync(join(outputs, "foundry"), { recursive: true });
    await nextSecond();
    await run();
    expect(eeeRecords()).toHaveLength(1);
    expect(eeeSamples()).toEqual([samples]);
    expect(filesUnder(join(outputs, "foundry"))).toEqual(["tiny.jsonl"]);
    // A stop before any export: the old record's files gone.
    rmSync(join(outputs, "eee"), { recursive: true });
    await nextSecond();
    await run();
    expect(eeeRecords()).toHaveLength(1);
    expect(eeeSamples()).toHaveLength(1);
    expect(snapshot(metricsDir)).toEqual(metrics);
  });

  it("computes the metrics again when a setting or the labels changed, and replaces the record", async () => {
    // hsm metrics with another --bootstrap into the run's folder: not what hsm run computes.
    await runMetrics(join(outputs, "hidden", "tiny"), {
      scored: join(outputs, "evaluation", "tiny.scored.jsonl"),
      out: metricsDir,
      bootstrap: 20,
      threads: 1,
    });
    let logs = await run();
    expect(logs).not.toContain("metrics: up to date, skipped");
    const iss = () => JSON.parse(readFileSync(join(metricsDir, "iss.json"), "utf8"));
    expect(iss().config.bootstrap).toBe(1000);

    const before = snapshot(metricsDir);
    const record = eeeRecords()[0]!;
    const scored = join(outputs, "evaluation", "tiny.scored.jsonl");
    const lines = readFileSync(scored, "utf8").trimEnd().split("\n");
    const first = JSON.parse(lines[0]!);
    first.label = first.label === "correct" ? "incorrect" : "correct";
    writeFileSync(scored, [JSON.stringify(first), ...lines.slice(1)].join("\n") + "\n");
    await nextSecond();
    logs = await run();
    expect(logs).not.toContain("metrics: up to date, skipped");
    expect(snapshot(metricsDir)["kts.json"]![0]).not.toBe(before["kts.json"]![0]);
    expect(eeeRecords()).toHaveLength(1);
    expect(eeeRecords()[0]).not.toBe(record);
    expect(eeeSamples()).toHaveLength(1);
  });

  it("scores again when the bank's answers changed, and the record says so", async () => {
    const scored = join(outputs, "evaluation", "tiny.scored.jsonl");
    const answer = (JSON.parse(readFileSync(scored, "utf8").split("\n")[0]!) as { raw_response: string }).raw_response;
    const rows = readFileSync(BANK, "utf8").trimEnd().split("\n");
    const first = JSON.parse(rows[0]!);
    // The answer's first line as the only alias: the row is correct however the model answered.
    const line = answer.split("\n").find((l) => l.trim() !== "");
    expect(line).toBeDefined();
    first.answers = [line!.trim()];
    writeFileSync(BANK, [JSON.stringify(first), ...rows.slice(1)].join("\n") + "\n");
    await nextSecond();
    const logs = await run();
    expect(logs.filter((l) => l.startsWith("score: "))).toEqual([expect.stringMatching(/^score: \d+ rows: /)]);
    const row = JSON.parse(readFileSync(scored, "utf8").split("\n")[0]!);
    expect(row.query_id).toBe(first.query_id);
    expect(row.label).toBe("correct");
    const samples = readFileSync(join(outputs, "eee", eeeSamples()[0]!), "utf8").split("\n");
    const record = samples.map((l) => l && JSON.parse(l)).find((r) => r && r.sample_id === first.query_id);
    expect(record.input.reference).toEqual(first.answers);
    expect(record.evaluation.is_correct).toBe(row.label === "correct");
  });
});
