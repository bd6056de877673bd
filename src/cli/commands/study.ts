import type { Command } from "commander";

import { readStudyFile, runStudy, studyShardCommands, formatStudySummary } from "../../index.js";
import { intOption } from "../options.js";
import { out, progressFor } from "../print.js";

async function printShards(file: string, n: number): Promise<void> {
  const commands = studyShardCommands(await readStudyFile(file), n);
  if (commands.length === 0) out("no model of this study runs here (every model is imported); nothing to extract");
  for (const c of commands) {
    out([`# ${c.model}: ${n} extraction shards, then the merge`, ...c.extract, c.merge].join("\n"));
    out("");
  }
  if (commands.length) out(`then: hsm study ${file}`);
}

async function action(file: string, opts: { shards?: number; quiet?: boolean }): Promise<void> {
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
        "model and the merge that joins them, for a cluster, and runs nothing.",
    )
    .argument("<study>", "study file (YAML, or JSON named .json)")
    .option("--shards <n>", "print N extraction shard commands per model instead of running", intOption("--shards", 1))
    .option("-q, --quiet", "no progress on stderr")
    .action(action);
}
