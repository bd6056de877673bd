/** How results reach the user: stdout for results, stderr for progress. */
import { join } from "node:path";

import { createProgress, formatTable, type MetricsResult, type VerifyReport, type WrittenFiles } from "../index.js";

/** One line (or block) on stdout. */
export function out(text: string): void {
  process.stdout.write(text.endsWith("\n") ? text : `${text}\n`);
}

/** A pipeline's step messages, as `step: message` lines. */
export function logStep(step: string, message: string): void {
  out(`${step}: ${message}`);
}

function mb(bytes: number): string {
  return `${(bytes / 1e6).toFixed(1)} MB`;
}

/** A progress callback per pipeline step, on stderr; each step's result is logged by the pipeline itself. */
export function progressFor(quiet?: boolean): ((step: string, done: number, total: number) => void) | undefined {
  if (quiet) return undefined;
  const bars = new Map<string, ReturnType<typeof createProgress>>();
  return (step, done, total) => {
    let bar = bars.get(step);
    if (!bar) bars.set(step, (bar = createProgress(step, total, { unit: step === "generate" ? "queries" : "rows" })));
    bar.update(done, total);
    if (done < total) return;
    bar.end(null);
    bars.delete(step);
  };
}

/** The KTS table, then why some cells are empty and which probes did not converge. */
function printKts(result: MetricsResult): void {
  const perturbed = result.kts.filter((r) => r.family !== "anchor");
  out(formatTable("KTS (1: the anchor probe's signal transfers fully; 0: not at all)", perturbed.map((r) => ({ layer: r.layer, family: r.family, value: r.kts }))) + "\n");
  for (const reason of new Set(perturbed.filter((r) => r.kts === null).map((r) => r.kts_null_reason))) out(`  — ${reason}`);
  for (const r of result.kts.filter((x) => x.family === "anchor" && x.probes_not_converged > 0)) {
    out(`  layer ${r.layer}: ${r.probes_not_converged} probe(s) did not converge in 2,000 iterations`);
  }
}

/** The ISS and KTS tables, null reasons, non-converged probes, backend and files written. */
export function printMetrics(result: MetricsResult, files: WrittenFiles, seconds: number): void {
  if (result.iss.length) out(formatTable("ISS (fact-macro margin; higher: perturbed questions stay near their anchor)", result.iss.map((r) => ({ layer: r.layer, family: r.family, value: r.iss }))) + "\n");
  if (result.kts.length) printKts(result);
  out(`backend: ${result.backend.name} (tfjs ${result.backend.tfjs}, native ${result.backend.simd}); ${seconds.toFixed(1)} s`);
  out(`wrote ${[...files.json, ...files.csv].join(", ")}`);
  out(`plots: ${files.svg.join(", ")}`);
}

/** Prints a verify report the way a person reads it (or as JSON); returns the exit code. */
export function printVerifyReport(report: VerifyReport, seconds: number, json: boolean): number {
  if (json) {
    out(JSON.stringify({ ...report, seconds: Number(seconds.toFixed(3)) }, null, 2));
    return report.ok ? 0 : 1;
  }
  for (const p of report.problems) out(`${join(report.store, p.file)}: ${p.message}`);
  for (const n of report.notes) out(`${join(report.store, n.file)}: note: ${n.message}`);
  const bytes = report.files.reduce((s, f) => s + (f.bytes ?? 0), 0);
  const c = report.self_check;
  if (c) {
    const worst = c.status === "off" ? "" : `, worst deviation ${c.worst_rel_dev === null ? "non-finite" : c.worst_rel_dev.toExponential(2)} of the row's largest value (layer ${c.worst_layer})`;
    out(`${report.store}: self-check ${c.status === "warn" ? "WARN" : c.status}: ${c.rows} rows re-run alone at batch 1${worst}`);
  }
  if (report.ok) {
    out(`${report.store}: OK — ${report.files.length} files, ${report.rows} rows, complete; ${mb(bytes)} hashed in ${seconds.toFixed(2)} s`);
    return 0;
  }
  const n = report.problems.length;
  out(`${report.store}: ${n} problem${n === 1 ? "" : "s"}; do not trust this store`);
  return 1;
}
