/**
 * Metric results on disk (docs/formats.md#metric-results): `<metric>.json` (`iss.json`,
 * `kts.json`, one per registered metric) with the store's checksums and every knob, their `.csv` twins, a
 * per-layer plot of each metric (one line per family, 95% bands) as SVG, and
 * the tables the CLI prints (each drawn by table.ts). What each metric shows comes from its
 * registry entry (src/metrics/metric.ts). Files are written only once
 * everything is computed, each atomically.
 */
import { join } from "node:path";

import { lineChart } from "../util/chart.js";
import { fileError, makeDir, writeFilesAtomic } from "../util/fs.js";
import type { MetricsResult } from "./compute.js";
import type { Metric, MetricRow } from "./metric.js";
import { METRICS, type MetricRegistry } from "./registry.js";
import { formatTable } from "./table.js";

function toCsv(rows: object[]): string {
  if (rows.length === 0) return "";
  const keys = Object.keys(rows[0]!);
  const cell = (v: unknown) => {
    if (v === null || v === undefined) return "";
    const s = String(v);
    return /[",\n]/.test(s) ? `"${s.replace(/"/g, '""')}"` : s;
  };
  return (
    [keys.join(","), ...rows.map((r) => keys.map((k) => cell((r as Record<string, unknown>)[k])).join(","))].join(
      "\n",
    ) + "\n"
  );
}

/** A line plot of `value` against layer, one line per family, with its interval as a band. */
function svgPlot(
  title: string,
  rows: { layer: number; family: string; value: number | null; low: number | null; high: number | null }[],
): string {
  const layers = [...new Set(rows.map((r) => r.layer))].sort((a, b) => a - b);
  const series = [...new Set(rows.map((r) => r.family))].map((family) => ({
    name: family,
    points: rows
      .filter((r) => r.family === family)
      .map((r) => ({ x: r.layer, value: r.value, low: r.low, high: r.high })),
  }));
  return lineChart(series, { title, xLabel: "layer", xTicks: layers.map((l) => ({ x: l, label: String(l) })) });
}

export interface WrittenFiles {
  json: string[];
  csv: string[];
  svg: string[];
}

/** A metric's rows as the table and the plot show them: the shown rows' value and interval. */
function shownValues(
  metric: Metric<MetricRow>,
  rows: MetricRow[],
): { layer: number; family: string; value: number | null; low: number | null; high: number | null }[] {
  const c = metric.columns;
  const get = (r: MetricRow, k: string) => (r as unknown as Record<string, number | null | undefined>)[k] ?? null;
  return rows
    .filter((r) => metric.shown?.(r) ?? true)
    .map((r) => ({
      layer: r.layer,
      family: r.family,
      value: get(r, c.value),
      low: get(r, c.low),
      high: get(r, c.high),
    }));
}

/** Writes the results under `dir`, one JSON, CSV and SVG per metric with rows; returns the paths written. */
export async function writeResults(
  dir: string,
  result: MetricsResult,
  storePath: string,
  registry: MetricRegistry = METRICS,
): Promise<WrittenFiles> {
  const manifest = result.manifest;
  try {
    await makeDir(dir);
  } catch (err) {
    throw fileError(err, dir, "write");
  }
  const store = {
    path: storePath,
    files_sha256: Object.fromEntries(Object.entries(manifest.files).map(([n, e]) => [n, e.sha256])),
  };
  const written: WrittenFiles = { json: [], csv: [], svg: [] };
  const files: [string, string][] = [];
  for (const metric of registry) {
    const rows = result.rows[metric.name] ?? [];
    if (rows.length === 0) continue;
    const json = {
      metric: metric.title,
      model: manifest.model,
      store,
      config: { ...result.config, backend_detail: result.backend },
      rows,
    };
    const paths = [join(dir, `${metric.name}.json`), join(dir, `${metric.name}.csv`), join(dir, `${metric.name}.svg`)];
    files.push(
      [paths[0]!, JSON.stringify(json, null, 2) + "\n"],
      [paths[1]!, toCsv(rows)],
      [paths[2]!, svgPlot(`${metric.title} by layer — ${manifest.model}`, shownValues(metric, rows))],
    );
    written.json.push(paths[0]!);
    written.csv.push(paths[1]!);
    written.svg.push(paths[2]!);
  }
  // All written or none: a full disk never leaves one metric's new files beside another's old ones.
  await writeFilesAtomic(files);
  return written;
}

/** The default notes under a metric's table: the distinct reasons its shown values are null. */
function nullReasons(metric: Metric<MetricRow>, rows: MetricRow[]): string[] {
  const reason = metric.columns.nullReason;
  if (!reason) return [];
  const field = (r: MetricRow, k: string) => (r as unknown as Record<string, unknown>)[k];
  const nulls = rows.filter((r) => (metric.shown?.(r) ?? true) && field(r, metric.columns.value) === null);
  return [...new Set(nulls.map((r) => `  — ${String(field(r, reason))}`))];
}

/**
 * Every computed metric's table, in the registry's order, each followed by its
 * notes (null reasons, probes that did not converge), one line each: what
 * `hsm metrics` prints.
 */
export function formatTables(result: MetricsResult, registry: MetricRegistry = METRICS): string {
  const lines: string[] = [];
  for (const metric of registry) {
    const rows = result.rows[metric.name] ?? [];
    if (rows.length === 0) continue;
    const notes = metric.notes ? metric.notes(rows) : nullReasons(metric, rows);
    lines.push(formatTable(metric.tableTitle, shownValues(metric, rows)), ...notes);
  }
  return lines.join("\n");
}
