import type { Command } from "commander";

import { DEFAULT_DEMO_OUT } from "../../defaults.js";
import { runDemo } from "../../index.js";
import { logStep, out, printMetrics, progressFor } from "../print.js";

async function action(opts: { out: string; quiet?: boolean }): Promise<void> {
  const t0 = performance.now();
  const r = await runDemo({ out: opts.out, log: logStep, onProgress: progressFor(opts.quiet) });
  out("");
  await printMetrics(r.metrics, r.files, (performance.now() - t0) / 1000, undefined, r.skipped);
  out("");
  for (const sentence of r.summary) out(sentence);
  out(`report: ${r.report}`);
}

export function demoCommand(program: Command): void {
  program
    .command("demo")
    .summary("run the main job on the embedded default")
    .description(
      "Run the whole pipeline on the embedded default: a small Llama-style model constructed here from the bundled " +
        "125-query bank's anchor questions (it knows most of their facts; a real Llama 3.1 tokenizer) and that bank. " +
        "Writes the model, generations, scored rows, store, metrics, plots, both exports and an HTML report under --out, " +
        "and ends with the ISS and KTS tables, two sentences on what they show and the paths of the plots and the report. " +
        "Steps already done are skipped.",
    )
    .option("--out <dir>", "where to write everything", DEFAULT_DEMO_OUT)
    .option("-q, --quiet", "no progress on stderr")
    .action(action);
}
