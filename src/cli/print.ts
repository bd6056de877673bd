/** How results reach the user: stdout for results, stderr for progress. */
import { createProgress, formatTables, type MetricRegistry, type MetricsResult, type WrittenFiles } from "../index.js";

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

/** Each computed metric's table with its notes (from the registry), the backend and the files written. */
export async function printMetrics(
  result: MetricsResult,
  files: WrittenFiles,
  seconds: number,
  registry?: MetricRegistry,
  kept = false,
): Promise<void> {
  const tables = await formatTables(result, registry);
  if (tables) out(tables);
  out(
    `backend: ${result.backend.name} (tfjs ${result.backend.tfjs}, native ${result.backend.simd}); ${seconds.toFixed(1)} s`,
  );
  out(`${kept ? "kept (up to date)" : "wrote"} ${[...files.json, ...files.csv].join(", ")}`);
  out(`plots: ${files.svg.join(", ")}`);
}
