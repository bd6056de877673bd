/**
 * runStudy on three generated models whose second folder is broken: the other
 * two finish, the second is reported; mended, a rerun finishes it and leaves
 * the finished models' stores byte for byte as they were.
 */
import { createHash } from "node:crypto";
import { existsSync, mkdirSync, readdirSync, readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { fileURLToPath } from "node:url";

import { beforeAll, describe, expect, it } from "vitest";

import { BankError, HsmError, StoreError, UsageError } from "../../src/errors.js";
import { writeTinyModel } from "../../src/synthetic/llama.js";
import { parseStudy, StudyFileError } from "../../src/study/study-file.js";
import { formatStudySummary, studyShardCommands, type StudySummary } from "../../src/study/layout.js";
import { submitStudy } from "../../src/pipeline/slurm.js";
import { runStudy } from "../../src/pipeline/study.js";
import { tempDir } from "../helpers/tmp.js";

const BANK = fileURLToPath(new URL("../../data/demo-bank.jsonl", import.meta.url));
const TINY = { layers: 2, hidden: 32, heads: 2, kvHeads: 1 } as const;

const dir = tempDir("hsm-study-");
const studyFile = join(dir, "study.yaml");

/** sha256 of every file of a folder, by name. */
function hashes(folder: string): Record<string, string> {
  return Object.fromEntries(
    readdirSync(folder).map((f) => [
      f,
      createHash("sha256")
        .update(readFileSync(join(folder, f)))
        .digest("hex"),
    ]),
  );
}

describe("runStudy", () => {
  let first: StudySummary;
  const logs: string[] = [];

  beforeAll(async () => {
    await writeTinyModel(join(dir, "models", "a"), { ...TINY, seed: 1 });
    await writeTinyModel(join(dir, "models", "b"), { ...TINY, seed: 2 });
    await writeTinyModel(join(dir, "models", "c"), { ...TINY, seed: 3 });
    writeFileSync(join(dir, "models", "b", "model.onnx"), "this is not an ONNX model");
    writeFileSync(
      studyFile,
      `bank: ${BANK}
outputs: out
generation: { max_new_tokens: 24, max_prompt_len: 192, seed: 20260101, temperature: 0 }
run: { batch_size: 8, threads: 1 }
models:
  - { name: tiny-a, model_dir: models/a }
  - { name: tiny-b, model_dir: models/b }
  - { name: tiny-c, model_dir: models/c }
`,
    );
    first = await runStudy(studyFile, { log: (model, step, message) => logs.push(`${model} ${step}: ${message}`) });
  });

  it("finishes the models that work and reports the broken one with its error", () => {
    expect(first.ok).toBe(false);
    expect(first.models.map((m) => [m.name, m.status])).toEqual([
      ["tiny-a", "done"],
      ["tiny-b", "failed"],
      ["tiny-c", "done"],
    ]);
    const [a, b, c] = first.models;
    expect(b!.error).toBeInstanceOf(Error);
    // The error already names the model's file, so the message is the error's own.
    expect(b!.message).toBe((b!.error as Error).message);
    expect(b!.message).toMatch(new RegExp(`^${join(dir, "models", "b", "model.onnx")}: is not a readable ONNX model`));
    expect(logs).toContain(`tiny-b failed: ${b!.message}`);
    for (const m of [a!, c!]) {
      expect(m.outputs).toBe(join(dir, "out"));
      expect(m.paths.store).toBe(join(dir, "out", "hidden", m.name));
      expect(JSON.parse(readFileSync(join(m.paths.store, "index.json"), "utf8"))).toMatchObject({
        complete: true,
        model: m.name,
      });
      expect(readdirSync(m.paths.metrics)).toEqual(expect.arrayContaining(["iss.json", "kts.json"]));
      // Accuracy is counted from the scored rows.
      const labels = readFileSync(m.paths.scored, "utf8")
        .trim()
        .split("\n")
        .map((l) => JSON.parse(l).label as string);
      expect(m.queries).toBe(labels.length);
      expect(m.correct).toBe(labels.filter((l) => l === "correct").length);
      expect(m.accuracy).toBe(m.correct! / m.queries!);
      expect(m.accuracyInterval![0]).toBeLessThanOrEqual(m.accuracy!);
      expect(m.accuracyInterval![1]).toBeGreaterThanOrEqual(m.accuracy!);
    }
    expect(b).toMatchObject({ correct: null, queries: null, accuracy: null, accuracyInterval: null });
  });

  it("records the study beside its models", () => {
    const record = JSON.parse(readFileSync(first.record, "utf8"));
    expect(first.record).toBe(join(dir, "out", "study.json"));
    expect(record).toMatchObject({
      format: "hsm-study/1",
      study_file: studyFile,
      bank: BANK,
      generation: { max_new_tokens: 24, max_prompt_len: 192, seed: 20260101 },
      models: [
        { name: "tiny-a", status: "done", error: null },
        { name: "tiny-b", status: "failed", error: first.models[1]!.message },
        { name: "tiny-c", status: "done", error: null },
      ],
    });
  });

  it("summarizes the study as a table, failures last", () => {
    const table = formatStudySummary(first).split("\n");
    expect(table[0]).toMatch(/^model\s+status\s+accuracy\s+95% interval\s+queries\s+seconds\s+outputs$/);
    expect(table[2]).toMatch(new RegExp(`^tiny-a\\s+done\\s+${first.models[0]!.accuracy!.toFixed(4)}\\s+\\[`));
    expect(table[3]).toMatch(/^tiny-b\s+failed\s+—\s+—\s+—\s+\d+\.\d\s/);
    expect(table.slice(-2)).toEqual(["1 of 3 models failed:", `  tiny-b: ${first.models[1]!.message}`]);
  });

  it("skips what is finished and finishes the mended model on a rerun", async () => {
    const before = { a: hashes(first.models[0]!.paths.store), c: hashes(first.models[2]!.paths.store) };
    await writeTinyModel(join(dir, "models", "b"), { ...TINY, seed: 2 });
    const rerunLogs: string[] = [];
    const again = await runStudy(studyFile, {
      log: (model, step, message) => rerunLogs.push(`${model} ${step}: ${message}`),
    });
    expect(again.ok).toBe(true);
    expect(again.models.map((m) => m.status)).toEqual(["done", "done", "done"]);
    expect(rerunLogs).toContain("tiny-a extract: store complete, skipped");
    expect(rerunLogs).toContain("tiny-c generate: all 125 queries already answered, skipped");
    expect(rerunLogs.some((l) => l.startsWith("tiny-b extract: ") && !l.endsWith("skipped"))).toBe(true);
    expect(hashes(again.models[0]!.paths.store)).toEqual(before.a);
    expect(hashes(again.models[2]!.paths.store)).toEqual(before.c);
    expect(again.models[0]!.accuracy).toBe(first.models[0]!.accuracy);
  });

  it("refuses a second study on an outputs root while one runs there, so only the first records its models", async () => {
    const file = join(dir, "twice.yaml");
    writeFileSync(
      file,
      `bank: ${BANK}\noutputs: out-twice\nrun: { batch_size: 8, threads: 1 }\nmodels:\n  - { name: tiny-a, model_dir: models/a }\n`,
    );
    const out = join(dir, "out-twice");
    const lock = join(out, ".hsm-study.lock");
    let settled = false;
    const running = runStudy(file).finally(() => (settled = true));
    while (!existsSync(lock) && !settled) await new Promise((resolve) => setTimeout(resolve, 2));
    const second = await runStudy(file).catch((e: unknown) => e);
    expect(second).toBeInstanceOf(StoreError);
    expect((second as Error).message).toMatch(
      new RegExp(`^${out}: is being written by another hsm process \\(pid ${process.pid} on `),
    );
    expect(existsSync(join(out, "study.json"))).toBe(false);
    const s = await running;
    expect(s.models.map((m) => [m.name, m.status])).toEqual([["tiny-a", "done"]]);
    const record = JSON.parse(readFileSync(join(out, "study.json"), "utf8"));
    expect(record.models.map((m: { status: string }) => m.status)).toEqual(["done"]);
    expect(existsSync(lock)).toBe(false);
  });

  it("imports a finished model from another outputs folder, and reports one that is not finished", async () => {
    const importing = join(dir, "import.yaml");
    writeFileSync(
      importing,
      `bank: ${BANK}\noutputs: out2\nmodels:\n  - { name: tiny-a, outputs: out }\n  - { name: tiny-z, outputs: out }\n`,
    );
    const s = await runStudy(importing);
    expect(s.models.map((m) => [m.name, m.status])).toEqual([
      ["tiny-a", "imported"],
      ["tiny-z", "failed"],
    ]);
    expect(s.models[0]).toMatchObject({ outputs: join(dir, "out"), accuracy: first.models[0]!.accuracy });
    const out = join(dir, "out");
    expect(s.models[1]!.message).toBe(
      `imported model "tiny-z" is not finished in ${out}: missing ${join(out, "evaluation", "tiny-z.scored.jsonl")}, ${join(out, "metrics", "tiny-z", "iss.json")}, ${join(out, "metrics", "tiny-z", "kts.json")}, ${join(out, "hidden", "tiny-z", "index.json")}; finish it with hsm run --outputs ${out} --model tiny-z`,
    );
    expect(s.models[1]!.error).toBeInstanceOf(HsmError);
  });

  it("reports an imported store extracted with another prompt length than the study's", async () => {
    const importing = join(dir, "import-128.yaml");
    writeFileSync(
      importing,
      `bank: ${BANK}\noutputs: out3\ngeneration: {max_prompt_len: 128}\nmodels:\n  - { name: tiny-c, outputs: out }\n`,
    );
    const s = await runStudy(importing);
    const store = join(dir, "out", "hidden", "tiny-c");
    expect(s.models[0]).toMatchObject({
      status: "failed",
      message: `${store} was extracted with max_prompt_len = 192 but the study's generation.max_prompt_len is 128; compare models run with the same settings`,
    });
  });
});

describe("a study that cannot run", () => {
  it("names a bank that does not exist", async () => {
    const study = parseStudy("bank: nowhere.jsonl\nmodels:\n  - {name: m, model_dir: m}\n", "/nonexistent/study.yaml");
    await expect(runStudy(study)).rejects.toThrow(
      new StudyFileError("/nonexistent/study.yaml", 1, "bank", "/nonexistent/nowhere.jsonl: no such file"),
    );
  });

  it("refuses decoding settings the pipeline does not run, before running anything", async () => {
    const study = parseStudy(
      `bank: ${BANK}\ngeneration:\n  max_new_tokens: 32\nmodels:\n  - {name: m, model_dir: m}\n`,
      "/nonexistent/study.yaml",
    );
    await expect(runStudy(study)).rejects.toThrow(
      '/nonexistent/study.yaml:3: field "generation.max_new_tokens": hsm runs models with the benchmark\'s max_new_tokens = 24; expected 24 but received 32',
    );
  });

  it("stops at an invalid bank with the bank's own error, before any model runs or study.json is written", async () => {
    const root = join(dir, "bad-bank");
    mkdirSync(root);
    const first = readFileSync(BANK, "utf8").split("\n")[0]!;
    writeFileSync(join(root, "bank.jsonl"), `${first}\n${first}\n`);
    writeFileSync(join(root, "study.yaml"), "bank: bank.jsonl\nmodels:\n  - {name: m, model_dir: m}\n");
    const id = JSON.parse(first).query_id as string;
    const error = new BankError(join(root, "bank.jsonl"), 2, "query_id", `duplicate "${id}" (first on line 1)`);
    await expect(runStudy(join(root, "study.yaml"))).rejects.toThrow(error);
    expect(existsSync(join(root, "outputs"))).toBe(false);
  });

  it("stops a study submitted to SLURM the same way, before any job is submitted", async () => {
    const root = join(dir, "slurm-decoding");
    const bin = join(root, "bin");
    mkdirSync(bin, { recursive: true });
    // A stand-in sbatch that records every call: none may come.
    writeFileSync(join(bin, "sbatch"), `#!/bin/sh\necho "$@" >> ${join(root, "sbatch.log")}\necho 1\n`, {
      mode: 0o755,
    });
    const study = parseStudy(
      `bank: ${BANK}\ngeneration:\n  max_new_tokens: 32\nmodels:\n  - {name: m, model_dir: m}\n`,
      join(root, "study.yaml"),
    );
    const path = process.env.PATH;
    process.env.PATH = `${bin}:${path}`;
    try {
      await expect(submitStudy(study, { shards: 2, hsm: ["hsm"] })).rejects.toThrow(
        `${join(root, "study.yaml")}:3: field "generation.max_new_tokens": hsm runs models with the benchmark's max_new_tokens = 24; expected 24 but received 32`,
      );
    } finally {
      process.env.PATH = path;
    }
    expect(existsSync(join(root, "sbatch.log"))).toBe(false);
    expect(existsSync(join(root, "outputs"))).toBe(false);
  });
});

describe("studyShardCommands", () => {
  it("prints the extract command of every shard of every model it runs, and the merge", () => {
    const study = parseStudy(
      "bank: bank.jsonl\noutputs: /scratch/my outputs\nrun: {batch_size: 32, device: cuda}\nmodels:\n  - {name: base, model_dir: /models/base}\n  - {name: old, outputs: /old}\n",
      "/studies/study.yaml",
    );
    expect(studyShardCommands(study, 2)).toEqual([
      {
        model: "base",
        extract: [
          "hsm extract --model-dir /models/base --bank /studies/bank.jsonl --out '/scratch/my outputs/shards/base/0-of-2' --model base --batch-size 32 --device cuda --shard 0/2",
          "hsm extract --model-dir /models/base --bank /studies/bank.jsonl --out '/scratch/my outputs/shards/base/1-of-2' --model base --batch-size 32 --device cuda --shard 1/2",
        ],
        merge:
          "hsm merge '/scratch/my outputs/hidden/base' '/scratch/my outputs/shards/base/0-of-2' '/scratch/my outputs/shards/base/1-of-2'",
      },
    ]);
    expect(() => studyShardCommands(study, 0)).toThrow(
      "Expected a positive integer for the shard count but received 0",
    );
  });

  it("passes the study's run.commit_rows to every shard's extraction", () => {
    const study = parseStudy(
      "bank: bank.jsonl\noutputs: /out\nrun: {threads: 1, commit_rows: 8}\nmodels:\n  - {name: base, model_dir: /models/base}\n",
      "/studies/study.yaml",
    );
    expect(studyShardCommands(study, 2)[0]!.extract).toEqual([
      "hsm extract --model-dir /models/base --bank /studies/bank.jsonl --out /out/shards/base/0-of-2 --model base --threads 1 --commit-rows 8 --shard 0/2",
      "hsm extract --model-dir /models/base --bank /studies/bank.jsonl --out /out/shards/base/1-of-2 --model base --threads 1 --commit-rows 8 --shard 1/2",
    ]);
  });

  it("given the bank's main-forward rows, refuses a shard count that would leave a shard empty", () => {
    const study = parseStudy(
      "bank: bank.jsonl\noutputs: /out\nrun: {commit_rows: 8}\nmodels:\n  - {name: base, model_dir: /models/base}\n",
      "/studies/study.yaml",
    );
    // 20 rows in blocks of 8: two shards are cut at row 8 (20/2 = 10, floored to a block), rows 0–7 and 8–19.
    expect(studyShardCommands(study, 2, 20)).toHaveLength(1);
    // Three: the first cut, 20/3 ≈ 6.7, floors to row 0, so shard 0 holds no row.
    expect(() => studyShardCommands(study, 3, 20)).toThrow(
      new UsageError(
        "--shards 3: shard 0 would be empty (20 rows in commit blocks of 8); use fewer shards or a smaller run.commit_rows in /studies/study.yaml",
      ),
    );
  });
});
