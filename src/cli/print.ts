/** How results reach the user: stdout for results, stderr for progress. */
import { createProgress, formatTable, type MetricsResult, type WrittenFiles } from "../index.js";

/** One line (or block) on stdout. */
export function out(text: string): void {
  process.stdout.write(text.endsWith("\n") ? text : `${text}\n`);
}

/** A pipeline's step messages, as `step: message` lines. */
export function logStep(step: string, message: string): void {
  out(`${step}: ${message}`);
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
