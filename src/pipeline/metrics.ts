/** `hsm metrics` as a library call: check (and optionally verify) a store, compute, write the files. */
import { join } from "node:path";

import { DEFAULT_OUTPUTS } from "../defaults.js";
import { HsmError } from "../errors.js";
import { computeMetrics, type MetricsOptions, type MetricsResult } from "../metrics/compute.js";
import { writeResults, type WrittenFiles } from "../metrics/report.js";
import { verifyStore } from "../store/verify.js";
import { requireStoreFolder } from "./paths.js";

export interface RunMetricsOptions extends MetricsOptions {
  /** Output folder; default `outputs/metrics/<model>`. */
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
 * Computes the metrics of a store and writes `iss.json`, `kts.json`, their CSV
 * twins and plots. Without `metrics`, KTS is computed only when `scored` is given.
 */
export async function runMetrics(store: string, o: RunMetricsOptions = {}): Promise<RunMetricsResult> {
  const { out, verify, ...options } = o;
  await requireStoreFolder(store);
  if (verify) {
    const report = await verifyStore(store, { bank: o.bank });
    if (!report.ok) throw new HsmError(`${store} does not verify:\n${report.problems.map((p) => `  ${p.file}: ${p.message}`).join("\n")}`);
  }
  const metrics = o.metrics ?? (o.scored ? ["iss", "kts"] : ["iss"]);
  const result = await computeMetrics(store, { ...options, metrics });
  const dir = out ?? join(DEFAULT_OUTPUTS, "metrics", result.manifest.model);
  return { result, files: await writeResults(dir, result, store), dir };
}
