/**
 * `hsm study --slurm`: a study as SLURM jobs. Per model that the study runs:
 * a generation job, an extraction job array (one task per shard, `--shard
 * auto/N`) and, after both (`afterok`), a job that merges the shards and runs
 * `hsm run` (score, verify, metrics, exports; generation and extraction are
 * then finished and skipped). After every model, one report job runs `hsm study`
 * (which writes study.json, every step skipped) and `hsm report`.
 *
 * Jobs are named `hsm-<hash of the output root>-<model>-<hash of the model's
 * name>-<step>`; what is
 * finished is read from the output root (complete stores and shard stores, a
 * generations file answering every query, metric results, the report), what is
 * queued or running from squeue. Submitting again submits only what is
 * neither, so a cancelled or failed array task is resubmitted (and resumes
 * from its last committed rows), and a pending downstream job whose inputs
 * were resubmitted is replaced by one that waits for the new ones. A pending
 * job that can never start (a job it waits for failed) is cancelled, whether
 * or not a model of the study still needs it.
 */
import { execFile } from "node:child_process";
import { createHash } from "node:crypto";
import { readdir, stat } from "node:fs/promises";
import { join, resolve } from "node:path";
import { promisify } from "node:util";

import { mainForwardRows, readBank } from "../bank/bank.js";
import { HsmError, UsageError } from "../errors.js";
import { DEFAULT_COMMIT_ROWS } from "../defaults.js";
import { METRICS } from "../metrics/registry.js";
import { acquireLock } from "../store/lock.js";
import { verifyStore } from "../store/verify.js";
import { checkStudy } from "../study/check.js";
import { checkShardsFilled, modelPaths, SHARDS_FOLDER } from "../study/layout.js";
import { shellWord } from "../util/shell.js";
import { readStudyFile, type Study, type StudyModel } from "../study/study-file.js";
import { makeDir, readText, writeFileAtomic } from "../util/fs.js";
import { jsonLines } from "../util/jsonl.js";
import { pathStem } from "../util/stem.js";

const run = promisify(execFile);

/** The folder under the output root holding the job scripts and logs. */
const SLURM_FOLDER = "slurm";
/** The lock in SLURM_FOLDER that one submission of the study holds. */
const SUBMIT_LOCK = ".hsm-submit.lock";

export interface SlurmOptions {
  /** Extraction shards per model (array tasks); default 1. */
  shards?: number;
  partition?: string;
  /**
   * Further sbatch arguments, passed to every submission as given (e.g. `--time=4:00:00`); one setting an option hsm
   * passes itself (`--job-name`, `--output`, `--dependency`, …) is refused.
   */
  sbatchArgs?: string[];
  /** The command that runs hsm on the nodes: absolute paths of node and of hsm's CLI script. */
  hsm: string[];
  /** What was submitted, kept or cancelled, for the user. */
  log?: (line: string) => void;
}

const STEPS = ["generate", "extract", "finish", "report"] as const;
type Step = (typeof STEPS)[number];

/** squeue's reason for a pending job that waits (afterok) for a job that failed: it never starts. */
const NEVER = "DependencyNeverSatisfied";

/** A job of the study that squeue lists: one line per array task. */
interface QueuedJob {
  /** `123` or, for an array task, `123_4`: what a dependency names. */
  id: string;
  name: string;
  state: string;
  /** The array task id, for an array task. */
  task?: number;
  reason: string;
}

/** One job of a study, submitted or found queued. */
export interface StudyJob {
  id: string;
  name: string;
  /** The model, or undefined for the report job. */
  model?: string;
  step: Step;
  /** The shards an extraction array runs. */
  shards?: number[];
  /** The log file as sbatch's `--output` reads it: `%A_%a` (or `%j`) left for the job ids, a `%` of the path doubled. */
  log: string;
  state: "submitted" | string;
}

/** The on-disk state of one model the study runs. */
export interface ModelProgress {
  model: string;
  generated: boolean;
  /** Per shard: its store is complete (or the merged store is). */
  shards: boolean[];
  stored: boolean;
  /** Every step finished: store, scored rows, metric results, Foundry export. */
  done: boolean;
}

export interface SlurmPlan {
  study: Study;
  /** `hsm-<hash>-`: every job of this study's output root is named with it. */
  prefix: string;
  /** The folder of the jobs' logs. */
  logs: string;
  models: ModelProgress[];
  reportDone: boolean;
  /** Jobs submitted by this call. */
  submitted: StudyJob[];
  /** Jobs of the study already queued or running and kept. */
  kept: StudyJob[];
  /** Pending jobs cancelled because their inputs were resubmitted. */
  cancelled: StudyJob[];
}

async function exists(path: string): Promise<boolean> {
  return (await stat(path).catch(() => undefined)) !== undefined;
}

async function mtime(path: string): Promise<number> {
  return (await stat(path).catch(() => undefined))?.mtimeMs ?? Infinity;
}

async function storeComplete(dir: string): Promise<boolean> {
  try {
    return (JSON.parse(await readText(join(dir, "index.json"))) as { complete?: unknown }).complete === true;
  } catch {
    return false;
  }
}

/** True when the generations file answers every query of the bank (a row without `error` for each id). */
async function generationsComplete(file: string, queryIds: Set<string>): Promise<boolean> {
  if (!(await exists(file))) return false;
  const answered = new Set<string>();
  try {
    for await (const { value } of jsonLines(file, (line, problem) => new HsmError(`${file}:${line}: ${problem}`)))
      if (typeof value.query_id === "string" && value.error === undefined) answered.add(value.query_id);
  } catch {
    return false; // a torn last line: the generation job resumes it
  }
  return [...queryIds].every((id) => answered.has(id));
}

/** A name SLURM and squeue's output keep as it is. */
function jobWord(stem: string): string {
  return stem.replace(/[^A-Za-z0-9._-]/g, "_").slice(0, 48);
}

/**
 * `<prefix><model>-<8 hex of sha256(name)>-`, the start of every job name of model `name`. The stem is cut and its
 * odd characters replaced, so two models can share it (`a+b` and `a_b`, or names that differ only after 48
 * characters); the hash of the whole name keeps their jobs apart, as squeue's state is read by job name.
 */
export function modelJobPrefix(prefix: string, name: string): string {
  return `${prefix}${jobWord(pathStem(name))}-${createHash("sha256").update(name).digest("hex").slice(0, 8)}-`;
}

/** `hsm-<8 hex of sha256(output root)>-`. */
export function studyJobPrefix(study: Study): string {
  return `hsm-${createHash("sha256").update(study.outputs).digest("hex").slice(0, 8)}-`;
}

/**
 * The log of job `name` as sbatch's `--output` reads it: `%j` the job id, or `%A_%a` the array job's and the task's,
 * and a `%` of the output root's path doubled (sbatch would read `%a` in `runs/100%a` as the task id).
 */
function logPattern(study: Study, name: string, array: boolean): string {
  return join(study.outputs.replaceAll("%", "%%"), SLURM_FOLDER, "logs", `${name}-${array ? "%A_%a" : "%j"}.log`);
}

function shardDir(study: Study, model: StudyModel, shard: number | string, n: number): string {
  return join(study.outputs, SHARDS_FOLDER, pathStem(model.name), `${shard}-of-${n}`);
}

/**
 * How the last run of job `name` (or of its array task `task`) went wrong, from the newest of its logs among `files`
 * (the names in the folder `logs`): the exit status its script logged at its end, or that it logged no end (killed
 * outright). Undefined where it has no log or ended with status 0.
 */
async function lastRunTrouble(
  logs: string,
  files: readonly string[],
  name: string,
  task?: number,
): Promise<string | undefined> {
  const id = task === undefined ? /^-([0-9]+)\.log$/ : new RegExp(`^-([0-9]+_${task})\\.log$`);
  const found = files.flatMap((file) => {
    const m = file.startsWith(name) ? id.exec(file.slice(name.length)) : null;
    return m ? [{ file: join(logs, file), job: m[1]! }] : [];
  });
  const times = await Promise.all(found.map((f) => mtime(f.file)));
  const newest = found[times.indexOf(Math.max(...times))];
  if (!newest) return undefined;
  const last = (await readText(newest.file).catch(() => "")).trimEnd().split("\n").at(-1)!;
  const status = /^hsm-job: end \S+ status ([0-9]+)$/.exec(last)?.[1];
  if (status === "0") return undefined;
  const how = status === undefined ? "logged no end (killed outright?)" : `ended with status ${status}`;
  return `its last run, job ${newest.job}, ${how}; log: ${newest.file}`;
}

/** Reads what is finished under the study's output root. */
async function studyProgress(study: Study, shards: number): Promise<{ models: ModelProgress[]; reportDone: boolean }> {
  const queryIds = new Set((await readBank(study.bank)).map((r) => r.query_id));
  const models: ModelProgress[] = [];
  const inputs: string[] = [];
  for (const m of study.models) {
    const paths = modelPaths(m.outputs ?? study.outputs, m.name);
    const metrics = METRICS.map(({ name }) => join(paths.metrics, `${name}.json`));
    inputs.push(paths.scored, ...metrics);
    if (m.modelDir === undefined) continue;
    const stored = await storeComplete(paths.store);
    const shardDone = await Promise.all(
      Array.from({ length: shards }, async (_, k) => stored || storeComplete(shardDir(study, m, k, shards))),
    );
    const foundry = join(study.outputs, "foundry", `${pathStem(m.name)}.jsonl`);
    const finished = await Promise.all([paths.scored, ...metrics, foundry].map(exists));
    models.push({
      model: m.name,
      generated: await generationsComplete(paths.generations, queryIds),
      shards: shardDone,
      stored,
      done: stored && finished.every(Boolean),
    });
  }
  const report = join(study.outputs, "report.html");
  const newest = Math.max(...(await Promise.all([join(study.outputs, "study.json"), ...inputs].map(mtime))));
  const reportDone = models.every((m) => m.done) && (await mtime(report)) >= newest && newest !== Infinity;
  return { models, reportDone };
}

/** The study's jobs squeue lists (one line per array task). */
async function queued(prefix: string): Promise<QueuedJob[]> {
  const { stdout } = await run("squeue", ["--me", "-r", "--noheader", "--format=%i|%j|%T|%K|%r"]).catch(
    (err: unknown) => {
      const e = err as { stderr?: string; message: string };
      const why = (e.stderr || e.message).trim().split("\n")[0];
      throw new HsmError(`squeue failed (${why}); submit from a machine that reaches the SLURM controller`);
    },
  );
  return stdout
    .split("\n")
    .map((line) => line.trim().split("|"))
    .filter((f) => f.length >= 5 && f[1]!.startsWith(prefix))
    .map(([id, name, state, task, reason]) => ({
      id: id!,
      name: name!,
      state: state!,
      ...(/^[0-9]+$/.test(task!) ? { task: Number(task) } : {}),
      reason: reason!,
    }));
}

const HEADER = (what: string) => [
  "#!/bin/bash",
  `# ${what}`,
  "# Written by hsm study --slurm; submitted with sbatch --job-name, --output and, where it waits, --dependency.",
  "#SBATCH --requeue",
  "#SBATCH --open-mode=append",
  "set -euo pipefail",
  // eslint-disable-next-line no-template-curly-in-string -- a shell line, expanded by bash
  'echo "hsm-job: start $(date +%s.%N) job ${SLURM_JOB_ID:-} task ${SLURM_ARRAY_TASK_ID:-} on $(hostname)"',
  // $? read first: the command substitution of date would leave 0 in it.
  "trap 'status=$?; echo \"hsm-job: end $(date +%s.%N) status $status\"' EXIT",
  // A job cancelled, requeued or out of time is sent SIGTERM, after which bash would find 0 in $?: exit 128 + 15.
  "trap 'exit 143' TERM",
];

/** The job scripts of one model: generation, the extraction array's task, the finishing job. */
function modelScripts(study: Study, m: StudyModel, n: number, hsm: string): Record<Exclude<Step, "report">, string> {
  const paths = modelPaths(study.outputs, m.name);
  const w = shellWord;
  const model = ["--model-dir", m.modelDir!, "--bank", study.bank, "--model", m.name];
  const runFlags = [
    ...(study.run.batchSize ? ["--batch-size", String(study.run.batchSize)] : []),
    ...(study.run.device ? ["--device", study.run.device] : []),
    ...(study.run.threads ? ["--threads", String(study.run.threads)] : []),
  ];
  const cmd = (args: string[]) => `${hsm} ${args.map(w).join(" ")}`;
  const shards = Array.from({ length: n }, (_, k) => w(shardDir(study, m, k, n))).join(" ");
  const merging = `${paths.store}.merging`;
  return {
    generate: [
      ...HEADER(`hsm: greedy generations of ${m.name}`),
      cmd(["generate", ...model, ...runFlags, "--out", paths.generations, "--quiet"]),
    ].join("\n"),
    extract: [
      ...HEADER(`hsm: hidden states of ${m.name}, shard $SLURM_ARRAY_TASK_ID of ${n} (an array task per shard)`),
      `${cmd(["extract", ...model, ...runFlags])} --commit-rows ${study.run.commitRows ?? DEFAULT_COMMIT_ROWS} \\`,
      `  --out ${w(join(study.outputs, SHARDS_FOLDER, pathStem(m.name)))}/"$SLURM_ARRAY_TASK_ID"-of-${n} --shard auto/${n} --quiet`,
    ].join("\n"),
    finish: [
      ...HEADER(`hsm: ${m.name}'s shards merged, then scored, verified, measured and exported`),
      `if ! grep -qs '"complete": *true' ${w(join(paths.store, "index.json"))}; then`,
      `  rm -rf ${w(merging)}`,
      `  ${cmd(["merge", merging])} ${shards} --quiet`,
      `  rm -rf ${w(paths.store)}`,
      `  mv ${w(merging)} ${w(paths.store)}`,
      "fi",
      cmd(["run", ...model, ...runFlags, "--outputs", study.outputs, "--quiet"]),
      `rm -rf ${w(join(study.outputs, SHARDS_FOLDER, pathStem(m.name)))}`,
    ].join("\n"),
  };
}

function reportScript(study: Study, hsm: string): string {
  return [
    ...HEADER("hsm: the study's record (every step finished and skipped) and its report"),
    `${hsm} study ${shellWord(resolve(study.file))} --quiet`,
    `${hsm} report ${shellWord(study.outputs)} --quiet`,
  ].join("\n");
}

async function sbatch(args: string[]): Promise<string> {
  try {
    const { stdout } = await run("sbatch", ["--parsable", ...args]);
    return stdout.trim().split(";")[0]!;
  } catch (err) {
    const e = err as { stderr?: string; message: string };
    // Quoted as a shell would need them, so that an argument with a space reads as the one argument it is.
    const command = ["sbatch", ...args].map(shellWord).join(" ");
    throw new HsmError(`${command} failed: ${(e.stderr || e.message).trim().split("\n")[0]}`);
  }
}

/**
 * Refuses shard count `n` for model `m` while an extraction submitted with another count is unfinished (its store not
 * merged), which another count would start again from its first row: shard folders `<k>-of-<count>` under
 * `shards/<stem>/`, and, where `queuedExtract` (its extraction job's name) is given, its queued tasks, their count read
 * from the script they run (`--shard auto/<count>`; hsm rewrites it only where the count is not refused).
 */
async function checkShardCount(
  study: Study,
  m: StudyModel,
  n: number,
  queuedExtract: string | undefined,
): Promise<void> {
  const shards = join(study.outputs, SHARDS_FOLDER, pathStem(m.name));
  const counts = new Set<number>();
  for (const entry of await readdir(shards).catch(() => [] as string[])) {
    const count = /^[0-9]+-of-([0-9]+)$/.exec(entry)?.[1];
    if (count !== undefined) counts.add(Number(count));
  }
  const folders = counts.size > 0;
  const script = join(study.outputs, SLURM_FOLDER, pathStem(m.name), "extract.sbatch");
  const scriptCount = queuedExtract && / --shard auto\/([0-9]+) /.exec(await readText(script).catch(() => ""))?.[1];
  if (scriptCount) counts.add(Number(scriptCount));
  counts.delete(n);
  if (counts.size === 0) return;
  const earlier = [...counts].sort((a, b) => a - b);
  const startOver = [
    ...(queuedExtract ? [`cancel its extraction (scancel --name=${queuedExtract})`] : []),
    ...(folders ? [`remove ${shards}`] : []),
  ];
  throw new UsageError(
    `${m.name}: its extraction was submitted with ${earlier.map((c) => `--shards ${c}`).join(" and ")} and is not ` +
      `finished; submit with ${earlier.length === 1 ? `--shards ${earlier[0]}` : "one of them"} to go on, or, to ` +
      `start over with --shards ${n}, ${startOver.join(" and ")}`,
  );
}

/** The options hsm passes to sbatch for its own bookkeeping, and what an `--sbatch-arg` setting one would break. */
const OWN_OPTIONS = [
  { long: "job-name", short: "J", why: "hsm finds the study's jobs by their names" },
  { long: "output", short: "o", why: "hsm reads each job's log in slurm/logs" },
  { long: "error", short: "e", why: "hsm reads each job's errors in its log in slurm/logs" },
  { long: "open-mode", why: "each job's log is appended to across requeues, for hsm to read how each run ended" },
  { long: "dependency", short: "d", why: "hsm makes each job wait for the jobs it needs" },
  { long: "array", short: "a", why: "hsm runs an array task for each unfinished shard" },
  { long: "parsable", why: "hsm passes it to read each job's id" },
];

/** sbatch's short options without a value: in one word (`-HJx`), the letters after them are options too. */
const SHORT_FLAGS = "hHkOQsvVW";

/**
 * Refuses an sbatch argument that sets an option of {@link OWN_OPTIONS}, as sbatch reads it: `--name[=value]` and
 * any abbreviation of the name (`--job=x`, as getopt takes it), `-X[value]`, also after value-less short options.
 */
function checkSbatchArgs(args: string[]): void {
  for (const arg of args) {
    let own: (typeof OWN_OPTIONS)[number][] = [];
    if (arg.startsWith("--")) {
      const name = arg.slice(2).split("=")[0]!;
      if (name !== "") own = OWN_OPTIONS.filter((o) => o.long.startsWith(name));
    } else if (/^-[^-]/.test(arg))
      for (const letter of arg.slice(1)) {
        own = OWN_OPTIONS.filter((o) => o.short === letter);
        if (own.length || !SHORT_FLAGS.includes(letter)) break;
      }
    if (own.length)
      throw new UsageError(
        `--sbatch-arg ${shellWord(arg)} sets ${own.map((o) => `--${o.long}`).join(" or ")}, which hsm sets itself: ` +
          `${own.map((o) => o.why).join("; ")}; leave it out`,
      );
  }
}

/**
 * Submits what of a study is neither finished nor queued: see the module's
 * description. Writes the job scripts under `<outputs>/slurm/`, the logs
 * beside them in `logs/`.
 */
export async function submitStudy(file: string | Study, o: SlurmOptions): Promise<SlurmPlan> {
  const study = typeof file === "string" ? await readStudyFile(file) : file;
  const n = o.shards ?? 1;
  if (!Number.isInteger(n) || n < 1) throw new UsageError(`Expected a positive integer for --shards but received ${n}`);
  checkSbatchArgs(o.sbatchArgs ?? []);
  // What stops a local study stops it here too, before any job is submitted.
  const bank = await checkStudy(study);
  checkShardsFilled(study, n, mainForwardRows(bank).length);
  const root = join(study.outputs, SLURM_FOLDER);
  await makeDir(join(root, "logs"));
  // One submission of a study at a time: two at once would both find nothing queued and submit every job twice.
  const release = await acquireLock(root, SUBMIT_LOCK);
  try {
    return await submitJobs(study, n, o);
  } finally {
    await release();
  }
}

/** Submits what of `study` is neither finished nor queued, its submission lock held. */
async function submitJobs(study: Study, n: number, o: SlurmOptions): Promise<SlurmPlan> {
  const prefix = studyJobPrefix(study);
  const root = join(study.outputs, SLURM_FOLDER);
  const hsm = o.hsm.map(shellWord).join(" ");
  const { models, reportDone } = await studyProgress(study, n);
  const jobs = await queued(prefix);
  // Every model's count checked before any job is submitted.
  for (const m of study.models) {
    if (models.find((p) => p.model === m.name)?.stored !== false) continue;
    const extract = `${modelJobPrefix(prefix, m.name)}extract`;
    await checkShardCount(study, m, n, jobs.some((j) => j.name === extract) ? extract : undefined);
  }
  const logs = join(root, "logs");
  // The logs of earlier runs, listed once: each job submitted again looks for its own among them.
  const logFiles = await readdir(logs).catch(() => [] as string[]);
  const plan: SlurmPlan = { study, prefix, logs, models, reportDone, submitted: [], kept: [], cancelled: [] };
  const say = o.log ?? (() => {});
  const common = [
    ...(o.partition ? ["--partition", o.partition] : []),
    ...(study.run.threads ? ["--cpus-per-task", String(study.run.threads)] : []),
    ...(o.sbatchArgs ?? []),
  ];
  const find = (name: string) => jobs.filter((j) => j.name === name);
  const keep = (j: QueuedJob, model: string | undefined, step: Step): StudyJob => {
    const log = logPattern(study, j.name, j.task !== undefined);
    const job: StudyJob = { id: j.id, name: j.name, model, step, log, state: j.state };
    plan.kept.push(job);
    return job;
  };
  const submit = async (
    name: string,
    model: string | undefined,
    step: Step,
    script: string,
    after: string[],
    shards?: number[],
  ): Promise<StudyJob> => {
    const log = logPattern(study, name, shards !== undefined);
    const args = [
      "--job-name",
      name,
      "--output",
      log,
      ...(shards ? [`--array=${shards.join(",")}`] : []),
      ...(after.length ? [`--dependency=afterok:${after.join(":")}`] : []),
      ...common,
      script,
    ];
    const id = await sbatch(args);
    const job: StudyJob = { id, name, model, step, log, state: "submitted", ...(shards ? { shards } : {}) };
    plan.submitted.push(job);
    say(`submitted ${name}${shards ? ` shards ${shards.join(",")}` : ""}: job ${id}`);
    // Why it runs again, where an earlier run failed or was stopped: the user may have a folder to fix first.
    for (const task of shards ?? [undefined]) {
      const trouble = await lastRunTrouble(logs, logFiles, name, task);
      if (trouble) say(`  ${task === undefined ? "" : `shard ${task}: `}${trouble}`);
    }
    return job;
  };
  const cancel = async (j: QueuedJob, model: string | undefined, step: Step, why: string) => {
    await run("scancel", [j.id]);
    plan.cancelled.push({ id: j.id, name: j.name, model, step, log: "", state: j.state });
    say(`cancelled ${j.name}: job ${j.id} (${why})`);
  };
  /** Keeps a queued downstream job unless its inputs changed; a pending one then gives way. */
  const downstream = async (q: QueuedJob[], changed: boolean, model: string | undefined, step: Step) => {
    const kept: StudyJob[] = [];
    for (const j of q) {
      const neverRuns = j.reason === NEVER;
      if ((changed || neverRuns) && j.state === "PENDING")
        await cancel(j, model, step, changed ? "its inputs were resubmitted" : "a job it waits for failed");
      else kept.push(keep(j, model, step));
    }
    return kept;
  };

  const finishIds: string[] = [];
  let anyChanged = false;
  for (const m of study.models) {
    if (m.modelDir === undefined) continue;
    const state = models.find((p) => p.model === m.name)!;
    if (state.done) continue;
    const stem = pathStem(m.name);
    const base = modelJobPrefix(prefix, m.name);
    const scripts = modelScripts(study, m, n, hsm);
    const dir = join(root, stem);
    await makeDir(dir);
    const scriptPath = (step: string) => join(dir, `${step}.sbatch`);
    for (const [step, text] of Object.entries(scripts)) await writeFileAtomic(scriptPath(step), text + "\n");

    const after: string[] = [];
    let changed = false;
    if (!state.generated) {
      const q = find(`${base}generate`);
      if (q.length) after.push(...q.map((j) => keep(j, m.name, "generate").id));
      else {
        after.push((await submit(`${base}generate`, m.name, "generate", scriptPath("generate"), [])).id);
        changed = true;
      }
    }
    const queuedTasks = find(`${base}extract`);
    const missing: number[] = [];
    for (let k = 0; k < n; k++) {
      if (state.shards[k]) continue;
      const q = queuedTasks.filter((j) => j.task === k);
      if (q.length) after.push(...q.map((j) => keep(j, m.name, "extract").id));
      else missing.push(k);
    }
    if (missing.length) {
      after.push((await submit(`${base}extract`, m.name, "extract", scriptPath("extract"), [], missing)).id);
      changed = true;
    }
    const finishing = await downstream(find(`${base}finish`), changed, m.name, "finish");
    if (finishing.length) finishIds.push(...finishing.map((j) => j.id));
    else {
      finishIds.push((await submit(`${base}finish`, m.name, "finish", scriptPath("finish"), after)).id);
      changed = true;
    }
    anyChanged ||= changed;
  }
  // A job no model claimed (its model left the study, or is finished) that waits for a failed job never runs, and a
  // report waiting for it neither: cancelled, with the report submitted anew to wait only for the jobs kept.
  const claimed = new Set([...plan.kept, ...plan.cancelled].map((j) => j.id));
  for (const j of jobs)
    if (j.name !== `${prefix}report` && !claimed.has(j.id) && j.state === "PENDING" && j.reason === NEVER) {
      const step = STEPS.find((s) => j.name.endsWith(`-${s}`)) ?? "finish";
      await cancel(j, undefined, step, "a job it waits for failed, and no model of the study needs it");
      anyChanged = true;
    }
  if (!reportDone) {
    const script = join(root, "report.sbatch");
    await writeFileAtomic(script, reportScript(study, hsm) + "\n");
    const reporting = await downstream(find(`${prefix}report`), anyChanged, undefined, "report");
    if (reporting.length === 0) await submit(`${prefix}report`, undefined, "report", script, finishIds);
  }
  return plan;
}

/** Why a pending job waits when all is well: its turn, free resources, its inputs. */
const WAITING = new Set(["None", "Priority", "Resources", "Dependency"]);

/**
 * A queued job's state as `waitStudy` shows it: `running`, `pending`, and why it pends where that is not its turn or
 * its inputs (`pending (ReqNodeNotAvail, UnavailableNodes:node3)`: a node drained, say), which may need the user.
 */
function shownState(job: QueuedJob | undefined): string {
  if (!job) return "not queued";
  const state = job.state.toLowerCase();
  return job.state === "PENDING" && !WAITING.has(job.reason) ? `${state} (${job.reason})` : state;
}

/** What `waitStudy` says about a job that ended without finishing its step. */
async function jobOutcome(id: string): Promise<{ state: string; exit: string } | undefined> {
  try {
    const { stdout } = await run("scontrol", ["show", "job", "-o", id]);
    // An array job lists a line per task; the one asked for is the first.
    const line = stdout.split("\n")[0]!;
    const state = /JobState=(\S+)/.exec(line)?.[1];
    const exit = /ExitCode=(\S+)/.exec(line)?.[1] ?? "?";
    return state ? { state, exit } : undefined;
  } catch {
    return undefined; // gone from the controller's memory (MinJobAge)
  }
}

function logOf(job: StudyJob, id: string): string {
  const [arrayId, task] = id.split("_");
  const value: Record<string, string> = { "%": "%", A: arrayId!, a: task ?? "", j: id };
  return job.log.replace(/%([%Aaj])/g, (_, c: string) => value[c]!);
}

export interface WaitOptions {
  shards?: number;
  /** Seconds between looks at squeue and the output root; default 5. */
  interval?: number;
  /** A line for each change of a model's or shard's state. */
  onProgress?: (line: string) => void;
}

/**
 * Follows the study's jobs until none is left: resolves when every model's
 * steps and the report are finished and every store verifies; throws an
 * HsmError naming the job that failed and its log otherwise.
 */
export async function waitStudy(plan: SlurmPlan, o: WaitOptions = {}): Promise<void> {
  const { study, prefix } = plan;
  const n = o.shards ?? 1;
  const known = new Map<string, StudyJob>();
  for (const j of [...plan.submitted, ...plan.kept]) known.set(j.id.split("_")[0]!, j);
  const said = new Map<string, string>();
  const tell = (key: string, text: string) => {
    if (said.get(key) !== text) o.onProgress?.(`${key}: ${text}`);
    said.set(key, text);
  };
  const jobFor = (q: QueuedJob): StudyJob | undefined => {
    const j = known.get(q.id.split("_")[0]!);
    if (j) return j;
    const step = STEPS.find((s) => q.name.endsWith(`-${s}`));
    if (!step) return undefined;
    const log = logPattern(study, q.name, q.task !== undefined);
    const model = study.models.find((m) => q.name === `${modelJobPrefix(prefix, m.name)}${step}`)?.name;
    const job: StudyJob = { id: q.id, name: q.name, model, step, log, state: q.state };
    known.set(q.id.split("_")[0]!, job);
    return job;
  };
  // Every job and array task this wait is answerable for, to name the one that failed.
  const seen = new Set<string>(
    [...plan.submitted, ...plan.kept].flatMap((j) => (j.shards ? j.shards.map((k) => `${j.id}_${k}`) : [j.id])),
  );
  for (;;) {
    const jobs = await queued(prefix);
    for (const q of jobs) {
      jobFor(q);
      seen.add(q.id);
    }
    const { models, reportDone } = await studyProgress(study, n);
    for (const m of models) {
      const step = (s: Step, task?: number) =>
        jobs.find(
          (q) => q.name.endsWith(`-${s}`) && jobFor(q)?.model === m.model && (task === undefined || q.task === task),
        );
      const state = (done: boolean, s: Step, task?: number) => (done ? "done" : shownState(step(s, task)));
      tell(`${m.model} generate`, state(m.generated, "generate"));
      m.shards.forEach((d, k) => tell(`${m.model} extract ${k}/${n}`, state(d, "extract", k)));
      tell(`${m.model} finish`, state(m.done, "finish"));
    }
    tell("report", reportDone ? "done" : shownState(jobs.find((q) => q.name === `${prefix}report`)));
    const stuck = jobs.find((q) => q.reason === NEVER);
    if (jobs.length === 0 || stuck) {
      if (jobs.length === 0 && reportDone && models.every((m) => m.done)) break;
      // Name the job that failed: the first seen that ended in a state other than COMPLETED.
      for (const id of seen) {
        if (jobs.some((q) => q.id === id)) continue;
        const end = await jobOutcome(id);
        if (end && end.state !== "COMPLETED") {
          const job = known.get(id.split("_")[0]!)!;
          throw new HsmError(
            `job ${id} (${job.name}) ended ${end.state} (exit ${end.exit}); log: ${logOf(job, id)}; submit again to resume`,
          );
        }
      }
      const what = stuck
        ? `job ${stuck.id} (${stuck.name}) can never start: a job it waits for failed`
        : "the jobs ended";
      throw new HsmError(
        `${what}, and the study is not finished; see the logs in ${join(study.outputs, SLURM_FOLDER, "logs")} and submit again to resume`,
      );
    }
    await new Promise((r) => setTimeout(r, (o.interval ?? 5) * 1000));
  }
  for (const m of study.models) {
    const store = modelPaths(m.outputs ?? study.outputs, m.name).store;
    const report = await verifyStore(store);
    if (!report.ok)
      throw new HsmError(
        `${store} does not verify: ${report.problems.map((p) => `${p.file}: ${p.message}`).join("; ")}`,
      );
  }
}
