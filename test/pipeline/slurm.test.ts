/**
 * SLURM jobs (src/pipeline/slurm.ts) without a cluster: job names, where one model's jobs never share a name with
 * another model's, and the job scripts, submitted to stand-in squeue and sbatch commands and run here with bash.
 */
import { spawn, spawnSync } from "node:child_process";
import { createHash } from "node:crypto";
import { mkdirSync, mkdtempSync, readFileSync, rmSync, utimesSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { fileURLToPath } from "node:url";

import { describe, expect, it } from "vitest";

import { modelJobPrefix, studyJobPrefix, submitStudy, waitStudy } from "../../src/pipeline/slurm.js";
import { parseStudy } from "../../src/study/study-file.js";
import { tempDir } from "../helpers/tmp.js";

const BANK = fileURLToPath(new URL("../../data/demo-bank.jsonl", import.meta.url));
const dir = tempDir("hsm-slurm-jobs-");

/** A study of one model `m` over the demo bank, writing to `outputs`, committing every `commitRows` rows if given. */
const oneModelStudy = (outputs: string, commitRows?: number) =>
  parseStudy(
    `bank: ${BANK}\noutputs: ${outputs}\n${commitRows ? `run: {commit_rows: ${commitRows}}\n` : ""}models:\n  - {name: m, model_dir: m}\n`,
    join(dir, "study.yaml"),
  );

/** Runs `body` with stand-in commands (name → shell script) first on PATH. */
async function withStandIns<T>(scripts: Record<string, string>, body: () => Promise<T>): Promise<T> {
  const bin = mkdtempSync(join(dir, "bin-"));
  for (const [name, text] of Object.entries(scripts)) writeFileSync(join(bin, name), text, { mode: 0o755 });
  const path = process.env.PATH;
  process.env.PATH = `${bin}:${path}`;
  try {
    return await body();
  } finally {
    process.env.PATH = path;
  }
}

const PREFIX = "hsm-773b8e13-";
const hex8 = (text: string) => createHash("sha256").update(text).digest("hex").slice(0, 8);

describe("modelJobPrefix", () => {
  it("names a model by its stem and 8 hex digits of its whole name's sha256", () => {
    expect(modelJobPrefix(PREFIX, "tiny-a")).toBe(`hsm-773b8e13-tiny-a-${hex8("tiny-a")}-`);
  });

  it("keeps apart models whose stems are cut or changed alike", () => {
    const pairs = [
      [
        "neuralmagic/Meta-Llama-3.1-8B-Instruct-quantized.w4a16",
        "neuralmagic/Meta-Llama-3.1-8B-Instruct-quantized.w8a8",
      ],
      ["a+b", "a_b"],
      ["x".repeat(60) + "1", "x".repeat(60) + "2"],
    ];
    for (const [a, b] of pairs) {
      expect(modelJobPrefix(PREFIX, a!), `${a} / ${b}`).not.toBe(modelJobPrefix(PREFIX, b!));
      for (const name of [a!, b!])
        expect(modelJobPrefix(PREFIX, name)).toMatch(/^hsm-773b8e13-[A-Za-z0-9._-]{1,48}-[0-9a-f]{8}-$/);
    }
  });
});

describe("the job scripts", () => {
  it("log the exit status of a command that failed", async () => {
    const outputs = join(dir, "failing");
    const study = oneModelStudy(outputs);
    // The command that stands for hsm exits with status 3.
    // An empty queue, and every job submitted as job 7.
    const standIns = { squeue: "#!/bin/sh\n", sbatch: "#!/bin/sh\necho 7\n" };
    await withStandIns(standIns, () => submitStudy(study, { hsm: ["/bin/sh", "-c", "exit 3", "hsm"] }));
    const job = spawnSync("bash", [join(outputs, "slurm", "m", "generate.sbatch")], { encoding: "utf8" });
    expect(job.status).toBe(3);
    expect(job.stdout.trim().split("\n").at(-1)).toMatch(/^hsm-job: end [0-9]+\.[0-9]+ status 3$/);
  });

  it("log status 143 for a job stopped by SIGTERM, as scancel and a requeue stop it", async () => {
    const outputs = join(dir, "stopped");
    const study = oneModelStudy(outputs);
    // The command that stands for hsm waits until it is stopped.
    const standIns = { squeue: "#!/bin/sh\n", sbatch: "#!/bin/sh\necho 7\n" };
    await withStandIns(standIns, () => submitStudy(study, { hsm: ["/bin/sh", "-c", "sleep 30", "hsm"] }));
    // In a process group of its own, stopped as SLURM stops a job: SIGTERM to each of its processes.
    const job = spawn("bash", [join(outputs, "slurm", "m", "generate.sbatch")], { detached: true });
    let stdout = "";
    job.stdout.on("data", (chunk: Buffer) => (stdout += chunk.toString()));
    for (let t0 = Date.now(); !stdout.includes("hsm-job: start") && Date.now() - t0 < 10_000;)
      await new Promise((r) => setTimeout(r, 20));
    await new Promise((r) => setTimeout(r, 200)); // the stand-in started
    process.kill(-job.pid!, "SIGTERM");
    const status = await new Promise((resolve) => job.on("close", resolve));
    expect(status).toBe(128 + 15);
    expect(stdout.trim().split("\n").at(-1)).toMatch(/^hsm-job: end [0-9]+\.[0-9]+ status 143$/);
  });
});

describe("submitStudy", () => {
  it("submits each job once when the same study is submitted twice at once", async () => {
    const outputs = join(dir, "twice");
    const queue = join(dir, "twice.queue");
    writeFileSync(queue, "");
    const study = oneModelStudy(outputs);
    // sbatch queues the job it is given under the next id; squeue lists the queue as hsm asks for it.
    const standIns = {
      squeue: `#!/bin/sh\ncat ${queue}\n`,
      sbatch: [
        "#!/bin/sh",
        `id=$(($(wc -l < ${queue}) + 1))`,
        'while [ $# -gt 0 ]; do [ "$1" = --job-name ] && name=$2; shift; done',
        `echo "$id|$name|PENDING|N/A|None" >> ${queue}`,
        "echo $id",
        "",
      ].join("\n"),
    };
    const both = await withStandIns(standIns, () =>
      Promise.allSettled([submitStudy(study, { hsm: ["hsm"] }), submitStudy(study, { hsm: ["hsm"] })]),
    );
    const names = readFileSync(queue, "utf8")
      .trim()
      .split("\n")
      .map((line) => line.split("|")[1]);
    expect(names.length).toBe(4); // generation, extraction, finishing, report
    expect(new Set(names).size).toBe(names.length);
    // The second is refused while the first submits, and says why.
    expect(both.map((r) => r.status).sort()).toEqual(["fulfilled", "rejected"]);
    const refused = both.find((r) => r.status === "rejected") as PromiseRejectedResult;
    expect(String(refused.reason)).toContain("another hsm process");
  });
});

describe("a job submitted again", () => {
  it("says how its last run ended where it failed, and names its log", async () => {
    const outputs = join(dir, "again");
    const study = oneModelStudy(outputs, 4);
    const name = (step: string) => `${modelJobPrefix(studyJobPrefix(study), "m")}${step}`;
    const logs = join(outputs, "slurm", "logs");
    mkdirSync(logs, { recursive: true });
    const log = (file: string, lines: string[], seconds: number) => {
      writeFileSync(join(logs, file), lines.map((l) => `${l}\n`).join(""));
      utimesSync(join(logs, file), seconds, seconds);
    };
    const start = "hsm-job: start 1.5 job 4 task  on node1";
    // The generation ran twice, the second time failing; shard 0 ended well, shard 1 was killed outright.
    log(`${name("generate")}-2.log`, [start, "hsm-job: end 2.5 status 0"], 1_000);
    log(`${name("generate")}-4.log`, [start, "hsm: m: no such folder", "hsm-job: end 3.5 status 1"], 2_000);
    log(`${name("extract")}-5_0.log`, [start, "hsm-job: end 4.5 status 0"], 2_000);
    log(`${name("extract")}-5_1.log`, [start], 2_000);
    const lines: string[] = [];
    const standIns = { squeue: "#!/bin/sh\n", sbatch: "#!/bin/sh\necho 7\n" };
    await withStandIns(standIns, () => submitStudy(study, { shards: 2, hsm: ["hsm"], log: (l) => lines.push(l) }));
    expect(lines.filter((l) => l.startsWith("  "))).toEqual([
      `  its last run, job 4, ended with status 1; log: ${join(logs, `${name("generate")}-4.log`)}`,
      `  shard 1: its last run, job 5_1, logged no end (killed outright?); log: ${join(logs, `${name("extract")}-5_1.log`)}`,
    ]);
  });
});

describe("waitStudy", () => {
  it("says why a job pends where a node is drained, not only that it pends", async () => {
    const outputs = join(dir, "drained");
    const queue = join(dir, "drained.queue");
    writeFileSync(queue, "");
    const study = oneModelStudy(outputs);
    // squeue lists the queue once, then an empty one: the wait then ends, the study unfinished.
    // sbatch gives ids 1, 2, …
    const ids = join(dir, "drained.ids");
    const standIns = {
      squeue: `#!/bin/sh\ncat ${queue}\n: > ${queue}\n`,
      sbatch: `#!/bin/sh\necho >> ${ids}\nwc -l < ${ids}\n`,
    };
    const lines: string[] = [];
    const error = await withStandIns(standIns, async () => {
      const plan = await submitStudy(study, { hsm: ["hsm"] });
      // As squeue lists a job whose only node is drained.
      const generate = plan.submitted.find((j) => j.step === "generate")!;
      writeFileSync(queue, `${generate.id}|${generate.name}|PENDING|N/A|ReqNodeNotAvail, UnavailableNodes:node3\n`);
      return waitStudy(plan, { interval: 0.01, onProgress: (l) => lines.push(l) }).catch((e: Error) => e);
    });
    expect(lines).toContain("m generate: pending (ReqNodeNotAvail, UnavailableNodes:node3)");
    expect(String(error)).toContain("the study is not finished");
  });
});

describe("a submission sbatch refuses", () => {
  it("names sbatch's arguments as a shell would read them, one with a space as one", async () => {
    const outputs = join(dir, "refused");
    const given = join(dir, "refused.args");
    const study = oneModelStudy(outputs);
    // sbatch keeps the arguments it was given, a line each, and refuses them.
    const standIns = {
      squeue: "#!/bin/sh\n",
      sbatch: `#!/bin/sh\nprintf '%s\\n' "$@" > ${given}\necho "sbatch: unrecognized option '--time 10'" >&2\nexit 1\n`,
    };
    const error = await withStandIns(standIns, () =>
      submitStudy(study, { hsm: ["hsm"], sbatchArgs: ["--time 10", "--comment=it's"] }).catch((e: Error) => e),
    );
    const [, command, why] = /^(sbatch .*) failed: (.*)$/.exec((error as Error).message)!;
    expect(why).toBe("sbatch: unrecognized option '--time 10'");
    // The words a shell reads from the named command are the arguments sbatch was given (less --parsable, which
    // hsm adds to read the job id).
    const words = spawnSync("sh", ["-c", `printf '%s\\n' ${command!.slice("sbatch ".length)}`], { encoding: "utf8" });
    expect(words.stdout).toBe(readFileSync(given, "utf8").replace(/^--parsable\n/, ""));
    expect(words.stdout).toContain("\n--time 10\n--comment=it's\n");
  });
});

describe("an --sbatch-arg that sets what hsm sets itself", () => {
  const study = () => oneModelStudy(join(dir, "own"));
  // sbatch records that it was called; squeue lists nothing.
  const calls = join(dir, "own.calls");
  const standIns = { squeue: "#!/bin/sh\n", sbatch: `#!/bin/sh\necho called >> ${calls}\necho 7\n` };

  it("is refused before any job is submitted, naming the argument and the option it sets", async () => {
    // Each spelling sbatch reads as an option hsm passes for its bookkeeping (getopt: `--job` abbreviates --job-name,
    // `-HJx` is --hold then -J x), with the option it sets.
    const cases = [
      ["--job-name=x", "--job-name"],
      ["--job-name", "--job-name"],
      ["--job=x", "--job-name"],
      ["-J", "--job-name"],
      ["-Jx", "--job-name"],
      ["-J x", "--job-name"],
      ["-HJx", "--job-name"],
      ["--output=/tmp/a.log", "--output"],
      ["-o/tmp/a.log", "--output"],
      ["--error", "--error"],
      ["-e", "--error"],
      ["--dependency=afterany:3", "--dependency"],
      ["--dep=afterany:3", "--dependency"],
      ["-d", "--dependency"],
      ["--array=0-3", "--array"],
      ["-a0-3", "--array"],
      ["--parsable", "--parsable"],
      ["--open-mode=truncate", "--open-mode"],
    ];
    for (const [arg, option] of cases) {
      writeFileSync(calls, "");
      const error = await withStandIns(standIns, () =>
        submitStudy(study(), { hsm: ["hsm"], sbatchArgs: ["--time=10", arg!] }).catch((e: Error) => e),
      );
      expect(error, arg).toBeInstanceOf(Error);
      const message = (error as Error).message;
      expect(message.split("\n"), arg).toHaveLength(1);
      expect(message, arg).toContain(arg);
      expect(message, arg).toContain(`sets ${option}`);
      expect((error as { exitCode?: number }).exitCode, arg).toBe(2);
      expect(readFileSync(calls, "utf8"), arg).toBe("");
    }
  });

  it("leaves other options alone, also where their values look like hsm's", async () => {
    const args = ["--time=10", "-t10", "--gres=gpu:1", "--comment=-Jx", "-vt10", "--partition=p", "--mem", "4G"];
    writeFileSync(calls, "");
    await withStandIns(standIns, () => submitStudy(study(), { hsm: ["hsm"], sbatchArgs: args }));
    expect(readFileSync(calls, "utf8").trim().split("\n")).toHaveLength(4);
  });
});

describe("a study submitted again with another --shards", () => {
  const setUp = (name: string) => {
    const outputs = join(dir, name);
    const queue = join(dir, `${name}.queue`);
    writeFileSync(queue, "");
    const study = oneModelStudy(outputs, 4);
    // sbatch queues the job it is given (a line per array task) under the next id; squeue lists the queue.
    const standIns = {
      squeue: `#!/bin/sh\ncat ${queue}\n`,
      sbatch: [
        "#!/bin/sh",
        `id=$(($(wc -l < ${queue}) + 1))`,
        'tasks=""',
        "while [ $# -gt 0 ]; do",
        // eslint-disable-next-line no-template-curly-in-string -- a shell line, expanded by sh
        '  case "$1" in --job-name) name=$2 ;; --array=*) tasks=$(echo "${1#--array=}" | tr , " ") ;; esac',
        "  shift",
        "done",
        'if [ -z "$tasks" ]; then',
        `  echo "$id|$name|PENDING|N/A|None" >> ${queue}`,
        "else",
        `  for t in $tasks; do echo "\${id}_$t|$name|PENDING|$t|None" >> ${queue}; done`,
        "fi",
        "echo $id",
        "",
      ].join("\n"),
    };
    const submitted = () =>
      readFileSync(queue, "utf8")
        .trim()
        .split("\n")
        .filter(Boolean)
        .map((line) => line.split("|")[0]!);
    return { outputs, queue, study, standIns, submitted };
  };

  it("is refused while shards of the earlier count are unfinished, naming that count", async () => {
    const { outputs, queue, study, standIns, submitted } = setUp("recount");
    // An earlier submission with --shards 4 ran shard 0 to its end and shard 1 part of the way; its jobs are gone.
    const shards = join(outputs, "shards", "m");
    mkdirSync(join(shards, "0-of-4"), { recursive: true });
    writeFileSync(join(shards, "0-of-4", "index.json"), JSON.stringify({ complete: true }));
    mkdirSync(join(shards, "1-of-4"), { recursive: true });
    for (const shards of [2, undefined]) {
      const error = await withStandIns(standIns, () =>
        submitStudy(study, { shards, hsm: ["hsm"] }).catch((e: Error) => e),
      );
      expect(error).toBeInstanceOf(Error);
      const message = (error as Error).message;
      expect(message.split("\n")).toHaveLength(1);
      expect(message).toContain("--shards 4");
      expect(message).toContain(shards === undefined ? "--shards 1" : "--shards 2");
      expect(message).toContain(join(outputs, "shards", "m"));
      expect((error as { exitCode?: number }).exitCode).toBe(2);
      expect(submitted()).toEqual([]);
    }
    // The earlier count goes on with the shards it left: 1, 2 and 3.
    await withStandIns(standIns, () => submitStudy(study, { shards: 4, hsm: ["hsm"] }));
    expect(readFileSync(queue, "utf8")).toMatch(/^2_1\|[^|]*-extract\|/m);
    expect(submitted().filter((id) => id.startsWith("2_"))).toEqual(["2_1", "2_2", "2_3"]);
  });

  it("is refused while the earlier count's extraction tasks are queued, before any of them has started", async () => {
    const { study, standIns, submitted } = setUp("requeued");
    await withStandIns(standIns, () => submitStudy(study, { shards: 3, hsm: ["hsm"] }));
    const before = submitted();
    expect(before).toContain("2_2");
    const error = await withStandIns(standIns, () => submitStudy(study, { hsm: ["hsm"] }).catch((e: Error) => e));
    expect(error).toBeInstanceOf(Error);
    expect((error as Error).message).toContain("--shards 3");
    expect((error as Error).message).toContain("scancel");
    expect(submitted()).toEqual(before);
  });

  it("starts over with a new count once the earlier shards are removed and none is queued", async () => {
    const { outputs, study, standIns, submitted } = setUp("restart");
    mkdirSync(join(outputs, "shards", "m", "0-of-4"), { recursive: true });
    await withStandIns(standIns, () => submitStudy(study, { hsm: ["hsm"] }).catch(() => undefined));
    expect(submitted()).toEqual([]);
    rmSync(join(outputs, "shards", "m"), { recursive: true });
    await withStandIns(standIns, () => submitStudy(study, { shards: 2, hsm: ["hsm"] }));
    expect(submitted().filter((id) => id.startsWith("2_"))).toEqual(["2_0", "2_1"]);
  });
});
