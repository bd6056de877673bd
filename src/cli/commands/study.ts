import { realpathSync } from "node:fs";
import { fileURLToPath } from "node:url";

import type { Command } from "commander";

import {
  mainForwardRows,
  readBank,
  readStudyFile,
  runStudy,
  shellWord,
  studyShardCommands,
  formatStudySummary,
  submitStudy,
  waitStudy,
} from "../../index.js";
import { intOption } from "../options.js";
import { out, progressFor } from "../print.js";

interface StudyFlags {
  shards?: number;
  quiet?: boolean;
  slurm?: boolean;
  partition?: string;
  sbatchArg: string[];
  wait?: boolean;
}

async function printShards(file: string, n: number): Promise<void> {
  const study = await readStudyFile(file);
  // A count that leaves a shard empty is refused, as hsm extract and --slurm would refuse it.
  const commands = studyShardCommands(study, n, mainForwardRows(await readBank(study.bank)).length);
  if (commands.length === 0) out("no model of this study runs here (every model is imported); nothing to extract");
  for (const c of commands) {
    out([`# ${c.model}: ${n} extraction shards, then the merge`, ...c.extract, c.merge].join("\n"));
    out("");
  }
  if (commands.length) out(`then: hsm study ${shellWord(file)}`);
}

async function slurm(file: string, opts: StudyFlags): Promise<void> {
  // Jobs run this very install: node's absolute path and this CLI's script, not whatever `hsm` a node's PATH finds.
  const script = realpathSync(fileURLToPath(new URL("../../../bin/hsm.js", import.meta.url)));
  const plan = await submitStudy(file, {
    shards: opts.shards,
    partition: opts.partition,
    sbatchArgs: opts.sbatchArg,
    hsm: [process.execPath, script],
    log: out,
  });
  const { submitted, kept } = plan;
  const finished = submitted.length === 0 && kept.length === 0;
  if (finished) out("every step of this study is finished; nothing submitted");
  else if (submitted.length === 0) out(`nothing to submit: ${kept.length} jobs of this study are queued or running`);
  if (!opts.wait) {
    if (finished) return;
    const again = [
      ...["hsm", "study", file, "--slurm", ...(opts.shards ? ["--shards", String(opts.shards)] : [])],
      ...(opts.partition ? ["--partition", opts.partition] : []),
      ...opts.sbatchArg.map((arg) => `--sbatch-arg=${arg}`),
    ];
    out(`follow them: squeue --me, or ${[...again, "--wait"].map(shellWord).join(" ")}; logs in ${plan.logs}`);
    return;
  }
  await waitStudy(plan, {
    shards: opts.shards,
    interval: Number(process.env.HSM_SLURM_POLL_SECONDS ?? 5),
    onProgress: (line) => !opts.quiet && process.stderr.write(`hsm: ${line}\n`),
  });
  out("every step finished and every store verifies");
}

async function action(file: string, opts: StudyFlags): Promise<void> {
  if (opts.slurm) return slurm(file, opts);
  if (opts.shards !== undefined) return printShards(file, opts.shards);
  const progress = progressFor(opts.quiet);
  const s = await runStudy(file, {
    log: (model, step, message) => out(`${model} ${step}: ${message}`),
    onProgress: progress && ((model, step, done, total) => progress(`${model} ${step}`, done, total)),
  });
  out("");
  out(formatStudySummary(s));
  out(`\nrecord: ${s.record}`);
  if (!s.ok) process.exitCode = 1;
}

export function studyCommand(program: Command): void {
  program
    .command("study")
    .summary("run the pipeline for every model of a study file into one output root")
    .description(
      "Runs `hsm run` for each model of STUDY.yaml (docs/study.md) into the study's output root, skipping finished steps and " +
        "resuming unfinished ones; a model that fails is reported and the others go on. Ends with a summary table and " +
        "<outputs>/study.json; exits 1 when a model failed. With --shards N, prints the hsm extract --shard commands of each " +
        "model and the merge that joins them, for a cluster, and runs nothing. With --slurm, submits the study as SLURM " +
        "jobs (per model a generation job, an array of N extraction shards and a job that merges, scores, verifies, " +
        "measures and exports; then a report job), only what is neither finished nor queued; --wait follows them.",
    )
    .argument("<study>", "study file (YAML, or JSON named .json)")
    .option(
      "--shards <n>",
      "extraction shards per model: printed as commands, or with --slurm run as an array",
      intOption("--shards", 1),
    )
    .option("--slurm", "submit the study's jobs with sbatch (scripts and logs under <outputs>/slurm/)")
    .option("--partition <p>", "with --slurm: the partition to submit to")
    .option(
      "--sbatch-arg <arg>",
      "with --slurm: an sbatch argument for every job, e.g. --sbatch-arg=--time=4:00:00 (repeatable)",
      (value: string, previous: string[]) => [...previous, value],
      [] as string[],
    )
    .option("--wait", "with --slurm: follow the jobs; exit 0 only when every step finished and verifies")
    .option("-q, --quiet", "no progress on stderr")
    .action(action);
}
