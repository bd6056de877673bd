import type { Command } from "commander";

import { DEFAULT_BACKEND, DEFAULT_BOOTSTRAP, DEFAULT_FOLDS, DEFAULT_PROBE_C, DEFAULT_SEED } from "../../defaults.js";
import { UsageError } from "../../errors.js";
import { BACKENDS, createProgress, runMetrics, type RunMetricsOptions } from "../../index.js";
import { intOption, listOption, parseLayerList, positiveOption } from "../options.js";
import { printMetrics } from "../print.js";

type MetricName = "iss" | "kts";

function metricList(value: string): MetricName[] {
  const metrics = listOption(value);
  for (const m of metrics) if (m !== "iss" && m !== "kts") throw new UsageError(`Expected --metrics iss, kts or iss,kts but received "${value}"`);
  return metrics as MetricName[];
}

async function action(store: string, opts: RunMetricsOptions & { quiet?: boolean }): Promise<void> {
  const t0 = performance.now();
  const { quiet, ...options } = opts;
  // A line per layer and phase; on long runs, between layers, the layers done with a rate and an ETA.
  const progress = createProgress("metrics", 0, { quiet, unit: "layers" });
  const onProgress = quiet
    ? undefined
    : (layer: number, phase: string, done: number, total: number) => {
        if (phase === "read") progress.update(done, total);
        process.stderr.write(`metrics: layer ${layer}: ${phase}\n`);
      };
  const { result, files } = await runMetrics(store, { ...options, onProgress });
  printMetrics(result, files, (performance.now() - t0) / 1000);
}

export function metricsCommand(program: Command): void {
  program
    .command("metrics")
    .summary("compute ISS and KTS over a hidden-state store")
    .description(
      "Compute ISS (does a perturbed question stay near its fact's anchor question inside the model?) and, with --scored, " +
        "KTS (does a correctness probe trained on anchors transfer to perturbed questions?) for every stored layer and " +
        "condition family, as defined in docs/metrics.md. Writes iss.json, kts.json, their .csv twins and iss.svg, kts.svg " +
        "under --out, and prints a compact table.",
    )
    .argument("<store>", "hidden-state store folder")
    .option("--scored <file>", "scored JSONL (needed for KTS)")
    .option("--metrics <list>", "iss, kts or iss,kts (default: both with --scored, else iss)", metricList)
    .option("--out <dir>", "output folder (default: outputs/metrics/<model>)")
    .option("--backend <name>", BACKENDS.join(", "), DEFAULT_BACKEND)
    .option("--bank <file>", "query bank, for a store from another tool whose index.json lacks fact ids and families")
    .option("--probe-c <c>", "inverse L2 strength of the KTS probe", positiveOption("--probe-c"), DEFAULT_PROBE_C)
    .option("--folds <k>", "KTS folds", intOption("--folds", 2), DEFAULT_FOLDS)
    .option("--bootstrap <b>", "bootstrap replicates", intOption("--bootstrap", 1), DEFAULT_BOOTSTRAP)
    .option("--seed <s>", "bootstrap seed", intOption("--seed", 0), DEFAULT_SEED)
    .option("--layers <list>", "stored layers to compute, e.g. 18,20-24 (default: all)", parseLayerList)
    .option("--families <list>", "families to report, comma-separated (default: all)", listOption)
    .option("--allow-incomplete", "read a store whose extraction has not finished (its rows so far)")
    .option("--abstain-as-incorrect", "count abstentions as incorrect in KTS")
    .option("--allow-missing-labels", "leave out store rows without a scored row instead of stopping")
    .option("--verify", "hash every store file against its manifest first")
    .option("-q, --quiet", "no progress on stderr")
    .action(action);
}
