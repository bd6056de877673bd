import type { Command } from "commander";

import { DEFAULT_BACKEND, DEFAULT_BOOTSTRAP, DEFAULT_SEED, MAX_BOOTSTRAP, MAX_SEED } from "../../defaults.js";
import { compareModels, formatComparison, BACKENDS, type BackendName } from "../../index.js";
import { choiceOption, intOption, wordList } from "../options.js";
import { out } from "../print.js";

interface CompareFlags {
  json?: boolean;
  bootstrap: number;
  seed: number;
  backend: BackendName;
  quiet?: boolean;
}

async function action(outputs: string, a: string, b: string, opts: CompareFlags): Promise<void> {
  const onProgress = opts.quiet
    ? undefined
    : (model: string, layer: number, phase: string) =>
        process.stderr.write(`compare: ${model}: layer ${layer}: ${phase}\n`);
  const c = await compareModels(outputs, a, b, {
    replicates: opts.bootstrap,
    seed: opts.seed,
    backend: opts.backend,
    onProgress,
  });
  out(opts.json ? JSON.stringify(c, null, 2) : formatComparison(c));
}

export function compareCommand(program: Command): void {
  program
    .command("compare")
    .summary("paired comparison of two models of one outputs root")
    .description(
      "Compares MODEL_A with MODEL_B under OUTPUTS (as hsm run and hsm study lay it out) on the same queries and facts: per " +
        "condition family each model's accuracy with its Wilson 95% interval, McNemar's exact test and Benjamini–Hochberg " +
        "adjusted p-values; per family and layer of A, at matched normalized depth l/(L−1), the ISS and KTS differences " +
        "A − B with paired bootstrap intervals over facts (docs/report.md). The per-row values are recomputed from the stores.",
    )
    .argument("<outputs>", "outputs root")
    .argument("<model-a>", "model A's name")
    .argument("<model-b>", "model B's name")
    .option("--json", "print the comparison as JSON")
    .option("--bootstrap <b>", "bootstrap replicates", intOption("--bootstrap", 1, MAX_BOOTSTRAP), DEFAULT_BOOTSTRAP)
    .option("--seed <s>", "bootstrap seed", intOption("--seed", 0, MAX_SEED), DEFAULT_SEED)
    .option(
      "--backend <name>",
      `kernels for the per-row values: ${wordList(BACKENDS, "or")}`,
      choiceOption("--backend", BACKENDS),
      DEFAULT_BACKEND,
    )
    .option("-q, --quiet", "no progress on stderr")
    .action(action);
}
