import type { Command } from "commander";

import { DEFAULT_OUTPUTS } from "../../defaults.js";
import { runPipeline } from "../../index.js";
import { modelRunOptions, type ModelRunFlags } from "../options.js";
import { logStep, out, printMetrics, progressFor } from "../print.js";

async function action(opts: ModelRunFlags & { outputs: string }): Promise<void> {
  const t0 = performance.now();
  const { quiet, ...rest } = opts;
  const r = await runPipeline({ ...rest, log: logStep, onProgress: progressFor(quiet) });
  out("");
  await printMetrics(r.metrics, r.files, (performance.now() - t0) / 1000, undefined, r.skipped);
}

export function runCommand(program: Command): void {
  const cmd = program
    .command("run")
    .summary("the whole pipeline for one model: generate, score, extract, verify, metrics, exports")
    .description(
      "One command per model: greedy generations, scored rows, the hidden-state store, its verification, ISS and KTS, and " +
        "the Every Eval Ever and Foundry exports, under --outputs in the benchmark's layout (evaluation/, hidden/, metrics/, " +
        "eee/, foundry/). Finished steps are skipped, unfinished ones resumed.",
    );
  modelRunOptions(cmd, { flags: "--outputs <dir>", description: "output root", defaultValue: DEFAULT_OUTPUTS })
    .option("-q, --quiet", "no progress on stderr")
    .action(action);
}
