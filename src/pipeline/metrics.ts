/** `hsm metrics` as a library call: check (and optionally verify) a store, compute, write the files. */
import { join } from "node:path";

import { DEFAULT_OUTPUTS } from "../defaults.js";
import { HsmError } from "../errors.js";
import { computeMetrics, type MetricsOptions, type MetricsResult } from "../metrics/compute.js";
import { METRICS } from "../metrics/registry.js";
import { writeResults, type WrittenFiles } from "../metrics/report.js";
import { verifyStore } from "../store/verify.js";
import { pathStem } from "../util/stem.js";
import { requireStoreFolder } from "./paths.js";

export interface RunMetricsOptions extends MetricsOptions {
  /** Output folder; default `outputs/metrics/<model>` (the store's model name as a path stem, src/util/stem.ts). */
  out?: string;
  /** Hash every store file against its manifest first, and stop on a difference. */
  verify?: boolean;
}

export interface RunMetricsResult {
  result: MetricsResult;
  files: WrittenFiles;
  /** The folder written. */
  dir: string;
}

/**
 * Computes the metrics of a store and writes each one's `<name>.json`, its CSV
 * twin and plot. Without `metrics`, every metric of the registry is computed
 * that can be: those that need labels (KTS) only when `scored` is given.
 */
export async function runMetrics(store: string, o: RunMetricsOptions = {}): Promise<RunMetricsResult> {
  const { out, verify, ...options } = o;
  await requireStoreFolder(store);
  if (verify) {
    const report = await verifyStore(store, { bank: o.bank });
    if (!report.ok)
      throw new HsmError(
        `${store} does not verify:\n${report.problems.map((p) => `  ${p.file}: ${p.message}`).join("\n")}`,
      );
  }
  const registry = o.registry ?? METRICS;
  const metrics = o.metrics ?? registry.filter((m) => o.scored || !m.needs.includes("labels")).map((m) => m.name);
  const result = await computeMetrics(store, { ...options, registry, metrics });
  const dir = out ?? join(DEFAULT_OUTPUTS, "metrics", pathStem(result.manifest.model));
  return { result, files: await writeResults(dir, result, store, registry), dir };
}
