import type { Command } from "commander";

import {
  DEFAULT_BACKEND,
  DEFAULT_BOOTSTRAP,
  DEFAULT_FOLDS,
  DEFAULT_PROBE_C,
  DEFAULT_SEED,
  MAX_BOOTSTRAP,
  MAX_FOLDS,
  MAX_SEED,
} from "../../defaults.js";
import { UsageError } from "../../errors.js";
import { BACKENDS, createProgress, runMetrics, type MetricRegistry, type RunMetricsOptions } from "../../index.js";
import { intOption, listOption, parseLayerList, positiveOption, wordList } from "../options.js";
import { printMetrics } from "../print.js";
import type { Registries } from "../options.js";

/** The `--metrics` parser: a comma-separated list of the registry's names. */
function metricList(registry: MetricRegistry): (value: string) => string[] {
  const names = registry.map((m) => m.name);
  const expected = names.length > 1 ? `${names.join(", ")} or ${names.join(",")}` : names.join("");
  return (value) => {
    const metrics = listOption(value);
    for (const m of metrics) {
      if (!names.includes(m)) throw new UsageError(`Expected --metrics ${expected} but received "${value}"`);
    }
    return metrics;
  };
}

/** The command's help, from the registry: each metric's title and question, and which need --scored. */
function describe(registry: MetricRegistry): { summary: string; description: string; scored: string; metrics: string } {
  const scored = (m: MetricRegistry[number]) => m.needs.includes("labels");
  const each = registry.map((m) => `${m.title} (${scored(m) ? "with --scored: " : ""}${m.description})`);
  const names = registry.map((m) => m.name);
  const alone = registry.filter((m) => !scored(m)).map((m) => m.name);
  return {
    summary: `compute ${wordList(registry.map((m) => m.title))} over a hidden-state store`,
    description:
      `Compute ${wordList(each)} for every stored layer and condition family, as defined in docs/metrics.md. Writes ` +
      `<metric>.json, its .csv twin and <metric>.svg for each (${names.map((n) => `${n}.json`).join(", ")}, …) ` +
      "under " +
      "--out, and prints a compact table.",
    scored: `scored JSONL (needed for ${wordList(registry.filter(scored).map((m) => m.title))})`,
    metrics: `${names.join(", ")}, comma-separated (default: all with --scored, else ${alone.join(",")})`,
  };
}

type Flags = RunMetricsOptions & { quiet?: boolean };

async function action(store: string, opts: Flags, registry: MetricRegistry): Promise<void> {
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
  const { result, files } = await runMetrics(store, { ...options, registry, onProgress });
  await printMetrics(result, files, (performance.now() - t0) / 1000, registry);
}

export function metricsCommand(program: Command, { metrics: registry }: Registries): void {
  const help = describe(registry);
  program
    .command("metrics")
    .summary(help.summary)
    .description(help.description)
    .argument("<store>", "hidden-state store folder")
    .option("--scored <file>", help.scored)
    .option("--metrics <list>", help.metrics, metricList(registry))
    .option("--out <dir>", "output folder (default: outputs/metrics/<model>)")
    .option("--backend <name>", BACKENDS.join(", "), DEFAULT_BACKEND)
    .option("--bank <file>", "query bank, for a store from another tool whose index.json lacks fact ids and families")
    .option("--probe-c <c>", "inverse L2 strength of the KTS probe", positiveOption("--probe-c"), DEFAULT_PROBE_C)
    .option("--folds <k>", "KTS folds", intOption("--folds", 2, MAX_FOLDS), DEFAULT_FOLDS)
    .option("--bootstrap <b>", "bootstrap replicates", intOption("--bootstrap", 1, MAX_BOOTSTRAP), DEFAULT_BOOTSTRAP)
    .option("--seed <s>", "bootstrap seed", intOption("--seed", 0, MAX_SEED), DEFAULT_SEED)
    .option("--layers <list>", "stored layers to compute, e.g. 18,20-24 (default: all)", parseLayerList)
    .option("--families <list>", "families to report, comma-separated (default: all)", listOption)
    .option("--allow-incomplete", "read a store whose extraction has not finished (its rows so far)")
    .option("--abstain-as-incorrect", "count abstentions as incorrect in KTS")
    .option("--allow-missing-labels", "leave out store rows without a scored row instead of stopping")
    .option("--verify", "hash every store file against its manifest first")
    .option("-q, --quiet", "no progress on stderr")
    .action((store: string, opts: Flags) => action(store, opts, registry));
}
