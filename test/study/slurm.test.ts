/**
 * `hsm study --slurm` on a real single-host SLURM cluster (test/helpers/slurm.ts):
 * two tiny models, three extraction shards each. One array task is cancelled
 * right after submission; submitting again with --wait resubmits only it and
 * waits for the rest, and every store layer, generations file and scored file
 * equals a local `hsm study` of the same study file byte for byte, with no
 * shard ever running twice at once. A finished study then submits nothing.
 * Skipped where the cluster cannot start, unless HSM_REQUIRE_SLURM=1.
 */
import { execFileSync } from "node:child_process";
import { existsSync, readdirSync, readFileSync, writeFileSync } from "node:fs";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";

import { afterAll, beforeAll, describe, expect, it } from "vitest";

import { runStudy } from "../../src/pipeline/study.js";
import { writeTinyModel } from "../../src/synthetic/llama.js";
import { runChild } from "../helpers/child.js";
import { startSlurm, type SlurmCluster } from "../helpers/slurm.js";
import { tempDir } from "../helpers/tmp.js";

const HSM = fileURLToPath(new URL("../../bin/hsm.js", import.meta.url));
const DEMO_BANK = fileURLToPath(new URL("../../data/demo-bank.jsonl", import.meta.url));
const TINY = { layers: 2, hidden: 32, heads: 2, kvHeads: 1, tokenizer: "llama3.1-1k" } as const;
const MODELS = ["tiny-a", "tiny-b"];

const dir = tempDir("hsm-slurm-study-");
const cluster = await startSlurm();
const required = process.env.HSM_REQUIRE_SLURM === "1";
if (typeof cluster === "string") {
  if (required) throw new Error(`HSM_REQUIRE_SLURM=1 but ${cluster}`);
  console.warn(`skipping the SLURM tests: ${cluster}`);
}
const slurm = typeof cluster === "string" ? undefined : (cluster as SlurmCluster);
afterAll(() => slurm?.stop());

function study(outputs: string): string {
  return `bank: bank.jsonl\noutputs: ${outputs}\nrun: { batch_size: 4, threads: 1, commit_rows: 4 }\nmodels:\n${MODELS.map(
    (m, i) => `  - { name: ${m}, model_dir: models/${"ab"[i]} }\n`,
  ).join("")}`;
}

/** Runs the CLI with the cluster's environment; resolves with its exit status and output. */
function hsm(args: string[]) {
  return runChild(process.execPath, [HSM, ...args], {
    cwd: dir,
    env: { ...slurm!.env, HSM_SLURM_POLL_SECONDS: "0.5" },
  });
}

function squeue(): string[] {
  return execFileSync("squeue", ["-r", "--noheader", "--format=%j|%K|%T"], { env: slurm!.env, encoding: "utf8" })
    .split("\n")
    .filter(Boolean);
}

/** Every file the comparison covers: each store's layers, and each model's generations and scored rows. */
function comparedFiles(outputs: string): Record<string, Buffer> {
  const files: Record<string, Buffer> = {};
  for (const m of MODELS) {
    for (const f of readdirSync(join(outputs, "hidden", m)).filter((f) => f.endsWith(".npy")))
      files[`hidden/${m}/${f}`] = readFileSync(join(outputs, "hidden", m, f));
    for (const f of [`${m}.jsonl`, `${m}.scored.jsonl`])
      files[`evaluation/${f}`] = readFileSync(join(outputs, "evaluation", f));
  }
  return files;
}

/** A store's index.json without what records when and how fast it was written. */
function manifestContent(outputs: string, m: string): unknown {
  const { created_at, manifest_sha256, self_check, ...rest } = JSON.parse(
    readFileSync(join(outputs, "hidden", m, "index.json"), "utf8"),
  );
  void created_at;
  void manifest_sha256;
  return { ...rest, self_check: { ...self_check, seconds: undefined } };
}

describe.skipIf(!slurm)("hsm study --slurm on a local SLURM cluster", () => {
  beforeAll(async () => {
    await writeTinyModel(join(dir, "models", "a"), { ...TINY, seed: 1 });
    await writeTinyModel(join(dir, "models", "b"), { ...TINY, seed: 2 });
    // 30 queries, 29 of them main-forward: three shards of commit blocks of 4 rows.
    writeFileSync(join(dir, "bank.jsonl"), readFileSync(DEMO_BANK, "utf8").split("\n").slice(0, 30).join("\n") + "\n");
    writeFileSync(join(dir, "local.yaml"), study("local"));
    writeFileSync(join(dir, "study.yaml"), study("cluster"));
    await runStudy(join(dir, "local.yaml"));
  });

  it("resubmits a cancelled array task only, and ends byte-identical to a local study", async () => {
    const first = await hsm(["study", "study.yaml", "--slurm", "--shards", "3"]);
    expect(first.stderr).toBe("");
    expect(first.status).toBe(0);
    const array = /submitted (hsm-[0-9a-f]{8}-tiny-a-[0-9a-f]{8}-extract) shards 0,1,2: job (\d+)/.exec(first.stdout);
    expect(array).not.toBeNull();
    execFileSync("scancel", [`${array![2]}_2`], { env: slurm!.env });

    // Running jobs sampled while the study runs: no shard twice at once.
    const twice: string[] = [];
    const sampler = setInterval(() => {
      const running = squeue().filter((l) => l.endsWith("|RUNNING"));
      for (const l of new Set(running)) if (running.indexOf(l) !== running.lastIndexOf(l)) twice.push(l);
    }, 200);
    const second = await hsm(["study", "study.yaml", "--slurm", "--shards", "3", "--wait"]);
    clearInterval(sampler);
    expect(second.stdout).toContain("every step finished and every store verifies");
    expect(second.status).toBe(0);
    // Only the cancelled task is submitted again; its finishing job and the report give way to ones waiting for it.
    expect(second.stdout).toMatch(new RegExp(`submitted ${array![1]} shards 2: job \\d+`));
    expect(second.stdout).not.toMatch(/submitted \S+-(generate|tiny-b-[0-9a-f]{8}-extract)/);
    expect(second.stdout).toMatch(/cancelled \S+-tiny-a-[0-9a-f]{8}-finish/);
    expect(second.stderr).toMatch(/tiny-a extract 2\/3: done/);
    expect(twice).toEqual([]);
    const logs = join(dir, "cluster", "slurm", "logs");
    for (const f of readdirSync(logs)) expect(readFileSync(join(logs, f), "utf8")).not.toMatch(/another hsm process/);

    const local = comparedFiles(join(dir, "local"));
    const remote = comparedFiles(join(dir, "cluster"));
    expect(Object.keys(remote).sort()).toEqual(Object.keys(local).sort());
    expect(Object.keys(local).filter((f) => f.endsWith(".npy")).length).toBeGreaterThanOrEqual(2);
    for (const [f, bytes] of Object.entries(local)) expect(remote[f]!.equals(bytes), f).toBe(true);
    for (const m of MODELS)
      expect(manifestContent(join(dir, "cluster"), m)).toEqual(manifestContent(join(dir, "local"), m));
    expect(readdirSync(join(dir, "cluster"))).toEqual(
      expect.arrayContaining(["report.html", "study.json", "metrics", "eee", "foundry"]),
    );
  });

  it("submits nothing for a finished study", async () => {
    const again = await hsm(["study", "study.yaml", "--slurm", "--shards", "3"]);
    expect(again.stdout.trim()).toBe("every step of this study is finished; nothing submitted");
    expect(again.status).toBe(0);
    expect(squeue()).toEqual([]);
  });

  it("keeps apart the jobs of models whose stems begin alike, and resubmits the lost shard of the right one", async () => {
    const names = [
      "neuralmagic/Meta-Llama-3.1-8B-Instruct-quantized.w4a16",
      "neuralmagic/Meta-Llama-3.1-8B-Instruct-quantized.w8a8",
    ];
    writeFileSync(
      join(dir, "alike.yaml"),
      `bank: bank.jsonl\noutputs: alike\nrun: { batch_size: 4, threads: 1, commit_rows: 4 }\nmodels:\n` +
        names.map((m, i) => `  - { name: ${m}, model_dir: models/${"ab"[i]} }\n`).join(""),
    );
    // Held: nothing runs, so what squeue lists is only what was submitted.
    const submit = () => hsm(["study", "alike.yaml", "--slurm", "--shards", "3", "--sbatch-arg=--hold"]);
    try {
      const first = await submit();
      expect(first.stderr).toBe("");
      const arrays = [...first.stdout.matchAll(/submitted (\S+-extract) shards 0,1,2: job (\d+)/g)];
      expect(arrays.length).toBe(2);
      expect(arrays[0]![1]).not.toBe(arrays[1]![1]);
      const [, second, id] = arrays[1]!;
      execFileSync("scancel", [`${id}_1`], { env: slurm!.env });
      for (let t0 = Date.now(); squeue().some((l) => l.startsWith(`${second}|1|`)) && Date.now() - t0 < 10_000;)
        await new Promise((r) => setTimeout(r, 100));
      const again = await submit();
      expect(again.stderr).toBe("");
      expect(again.stdout).toMatch(new RegExp(`submitted ${second} shards 1: job \\d+`));
      expect(again.stdout).not.toContain(`submitted ${arrays[0]![1]}`);
    } finally {
      execFileSync("scancel", ["--quiet", "--user", "root"], { env: slurm!.env });
    }
  });

  it("writes the logs under an output root whose path holds a %", async () => {
    writeFileSync(
      join(dir, "percent.yaml"),
      "bank: bank.jsonl\noutputs: runs/100%a\nrun: { threads: 1 }\nmodels:\n  - { name: tiny-a, model_dir: models/a }\n",
    );
    try {
      const submitted = await hsm(["study", "percent.yaml", "--slurm"]);
      expect(submitted.stderr).toBe("");
      const [, name, id] = /submitted (\S+-generate): job (\d+)/.exec(submitted.stdout)!;
      // Until the generation job has started (its log then exists) or ended (a job whose log cannot be opened fails).
      const log = join(dir, "runs", "100%a", "slurm", "logs", `${name}-${id}.log`);
      const state = () => execFileSync("scontrol", ["show", "job", "-o", id!], { env: slurm!.env, encoding: "utf8" });
      const ended = () => !/JobState=(PENDING|CONFIGURING|RUNNING) /.test(state());
      for (let t0 = Date.now(); !existsSync(log) && !ended() && Date.now() - t0 < 30_000;)
        await new Promise((r) => setTimeout(r, 200));
      expect(existsSync(log), /JobState=\S+ Reason=\S+/.exec(state())?.[0]).toBe(true);
    } finally {
      execFileSync("scancel", ["--quiet", "--user", "root"], { env: slurm!.env });
    }
  });

  it("cancels a job that can never start once its model leaves the study, and the report that waits for it", async () => {
    const file = (models: string[]) =>
      writeFileSync(
        join(dir, "gone.yaml"),
        `bank: bank.jsonl\noutputs: gone\nrun: { batch_size: 4, threads: 1, commit_rows: 4 }\nmodels:\n` +
          models.map((m, i) => `  - { name: ${m}, model_dir: models/${"ab"[i]} }\n`).join(""),
      );
    // Not before an hour from now: nothing runs, so what squeue lists is only what was submitted.
    const submit = () => hsm(["study", "gone.yaml", "--slurm", "--sbatch-arg=--begin=now+3600"]);
    const reason = (id: string) =>
      execFileSync("squeue", ["--noheader", "--jobs", id, "--format=%r"], { env: slurm!.env, encoding: "utf8" }).trim();
    try {
      file(MODELS);
      const first = await submit();
      expect(first.stderr).toBe("");
      const id = (step: string, model = "tiny-b") =>
        new RegExp(`submitted (\\S+-${model}-[0-9a-f]{8}-${step}): job (\\d+)`).exec(first.stdout)!.slice(1);
      // It says how to follow the jobs, and the folder their logs go to.
      const follow = /^follow them: squeue --me, or (.*); logs in (.*)$/m.exec(first.stdout);
      expect(follow?.[1]).toBe("hsm study gone.yaml --slurm --sbatch-arg=--begin=now+3600 --wait");
      const [finish, finishId] = id("finish");
      const job = execFileSync("scontrol", ["show", "job", "-o", finishId!], { env: slurm!.env, encoding: "utf8" });
      expect(dirname(/StdOut=(\S+)/.exec(job)![1]!)).toBe(follow![2]);
      // tiny-b's generation fails (cancelled here): its finishing job can never start.
      execFileSync("scancel", [id("generate")[1]!], { env: slurm!.env });
      for (let t0 = Date.now(); reason(finishId!) !== "DependencyNeverSatisfied" && Date.now() - t0 < 30_000;)
        await new Promise((r) => setTimeout(r, 200));
      expect(reason(finishId!)).toBe("DependencyNeverSatisfied");

      // The user takes tiny-b out of the study; the report must no longer wait for its finishing job.
      file(MODELS.slice(0, 1));
      const again = await submit();
      expect(again.stderr).toBe("");
      expect(again.stdout).toContain(`cancelled ${finish}: job ${finishId} (a job it waits for failed`);
      const report = /submitted (hsm-[0-9a-f]{8}-report): job (\d+)/.exec(again.stdout);
      expect(report).not.toBeNull();
      const show = execFileSync("scontrol", ["show", "job", "-o", report![2]!], { env: slurm!.env, encoding: "utf8" });
      expect(/Dependency=(\S+)/.exec(show)![1]).toBe(`afterok:${id("finish", "tiny-a")[1]}(unfulfilled)`);
      expect(squeue().filter((l) => l.startsWith(`${finish}|`))).toEqual([]);
    } finally {
      execFileSync("scancel", ["--quiet", "--user", "root"], { env: slurm!.env });
    }
  });
});

describe.skipIf(!slurm)("the test cluster", () => {
  it("leaves no process behind when it stops with a job running", async () => {
    const other = (await startSlurm()) as SlurmCluster;
    const conf = `SLURM_CONF=${join(other.dir, "slurm.conf")}\0`;
    try {
      execFileSync("sbatch", ["--wrap", "sleep 60", "--output", "/dev/null"], { env: other.env });
      const states = () => execFileSync("squeue", ["--noheader", "--format=%T"], { env: other.env, encoding: "utf8" });
      for (let t0 = Date.now(); !states().includes("RUNNING") && Date.now() - t0 < 10_000;)
        await new Promise((r) => setTimeout(r, 100));
      expect(states()).toContain("RUNNING");
    } finally {
      other.stop();
    }
    // Every process the cluster started carries its SLURM_CONF: its daemons and each job's slurmstepd.
    const left = readdirSync("/proc").filter((pid) => {
      try {
        return /^[0-9]+$/.test(pid) && readFileSync(`/proc/${pid}/environ`, "latin1").includes(conf);
      } catch {
        return false; // ended meanwhile
      }
    });
    expect(left.map((pid) => readFileSync(`/proc/${pid}/comm`, "utf8").trim())).toEqual([]);
  });
});
