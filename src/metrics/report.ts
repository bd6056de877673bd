/**
 * Metric results on disk (contracts.md §5): `<metric>.json` (`iss.json`,
 * `kts.json`) with the store's checksums and every knob, their `.csv` twins, a
 * per-layer plot of each metric (one line per family, 95% bands) as SVG, and
 * the compact table the CLI prints. What each metric shows comes from its
 * registry entry (src/metrics/metric.ts). Files are written only once
 * everything is computed, each atomically.
 */
import { mkdir, rename, writeFile } from "node:fs/promises";
import { join } from "node:path";

import type { MetricsResult } from "./compute.js";
import type { Metric, MetricRow } from "./metric.js";
import { METRICS, type MetricRegistry } from "./registry.js";

async function writeAtomic(path: string, text: string): Promise<void> {
  const temp = `${path}.${process.pid}.tmp`;
  await writeFile(temp, text);
  await rename(temp, path);
}

export function toCsv(rows: object[]): string {
  if (rows.length === 0) return "";
  const keys = Object.keys(rows[0]!);
  const cell = (v: unknown) => {
    if (v === null || v === undefined) return "";
    const s = String(v);
    return /[",\n]/.test(s) ? `"${s.replace(/"/g, '""')}"` : s;
  };
  return [keys.join(","), ...rows.map((r) => keys.map((k) => cell((r as Record<string, unknown>)[k])).join(","))].join("\n") + "\n";
}

const COLORS = ["#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22", "#17becf"];

/** A line plot of `value` against layer, one line per family, with its interval as a band. */
export function svgPlot(title: string, rows: { layer: number; family: string; value: number | null; low: number | null; high: number | null }[]): string {
  const W = 760;
  const H = 440;
  const m = { l: 64, r: 150, t: 40, b: 48 };
  const layers = [...new Set(rows.map((r) => r.layer))].sort((a, b) => a - b);
  const families = [...new Set(rows.map((r) => r.family))];
  const ys = rows.flatMap((r) => [r.value, r.low, r.high]).filter((v): v is number => v !== null && Number.isFinite(v));
  let y0 = ys.length ? Math.min(...ys) : 0;
  let y1 = ys.length ? Math.max(...ys) : 1;
  if (y1 - y0 < 1e-9) [y0, y1] = [y0 - 0.5, y1 + 0.5];
  const pad = (y1 - y0) * 0.05;
  y0 -= pad;
  y1 += pad;
  const x = (l: number) => m.l + (layers.length <= 1 ? (W - m.l - m.r) / 2 : ((l - layers[0]!) / (layers.at(-1)! - layers[0]!)) * (W - m.l - m.r));
  const y = (v: number) => m.t + (1 - (v - y0) / (y1 - y0)) * (H - m.t - m.b);
  const f = (v: number) => v.toFixed(1);
  const parts: string[] = [
    `<svg xmlns="http://www.w3.org/2000/svg" width="${W}" height="${H}" viewBox="0 0 ${W} ${H}" font-family="sans-serif" font-size="12">`,
    `<rect width="${W}" height="${H}" fill="white"/>`,
    `<text x="${W / 2 - m.r / 2}" y="22" text-anchor="middle" font-size="15">${escapeXml(title)}</text>`,
  ];
  // Axes and ticks at round values: steps of 1, 2 or 5 times a power of ten.
  const raw = (y1 - y0) / 5;
  const mag = 10 ** Math.floor(Math.log10(raw));
  const step = [1, 2, 5, 10].map((s) => s * mag).find((s) => s >= raw)!;
  const digits = Math.max(0, -Math.floor(Math.log10(step)));
  for (let v = Math.ceil(y0 / step) * step; v <= y1 + 1e-12; v += step) {
    parts.push(`<line x1="${m.l}" x2="${W - m.r}" y1="${f(y(v))}" y2="${f(y(v))}" stroke="#e5e5e5"/>`);
    parts.push(`<text x="${m.l - 6}" y="${f(y(v) + 4)}" text-anchor="end">${(Math.abs(v) < step / 1e6 ? 0 : v).toFixed(digits)}</text>`);
  }
  for (const l of layers) parts.push(`<text x="${f(x(l))}" y="${H - m.b + 16}" text-anchor="middle">${l}</text>`);
  parts.push(`<text x="${(m.l + W - m.r) / 2}" y="${H - 10}" text-anchor="middle">layer</text>`);
  parts.push(`<line x1="${m.l}" x2="${m.l}" y1="${m.t}" y2="${H - m.b}" stroke="#333"/><line x1="${m.l}" x2="${W - m.r}" y1="${H - m.b}" y2="${H - m.b}" stroke="#333"/>`);
  families.forEach((family, i) => {
    const color = COLORS[i % COLORS.length]!;
    const pts = rows.filter((r) => r.family === family).sort((a, b) => a.layer - b.layer);
    const band = pts.filter((p) => p.low !== null && p.high !== null);
    if (band.length > 1) {
      const poly = [...band.map((p) => `${f(x(p.layer))},${f(y(p.high!))}`), ...band.reverse().map((p) => `${f(x(p.layer))},${f(y(p.low!))}`)];
      parts.push(`<polygon points="${poly.join(" ")}" fill="${color}" fill-opacity="0.15" stroke="none"/>`);
    }
    const line = pts.filter((p) => p.value !== null && Number.isFinite(p.value));
    if (line.length > 1) parts.push(`<polyline points="${line.map((p) => `${f(x(p.layer))},${f(y(p.value!))}`).join(" ")}" fill="none" stroke="${color}" stroke-width="2"/>`);
    for (const p of line) parts.push(`<circle cx="${f(x(p.layer))}" cy="${f(y(p.value!))}" r="3" fill="${color}"/>`);
    const ly = m.t + 10 + i * 18;
    parts.push(`<line x1="${W - m.r + 14}" x2="${W - m.r + 34}" y1="${ly}" y2="${ly}" stroke="${color}" stroke-width="2"/>`);
    parts.push(`<text x="${W - m.r + 40}" y="${ly + 4}">${escapeXml(family)}</text>`);
  });
  parts.push("</svg>");
  return parts.join("\n") + "\n";
}

function escapeXml(s: string): string {
  return s.replace(/[<>&"]/g, (c) => ({ "<": "&lt;", ">": "&gt;", "&": "&amp;", '"': "&quot;" })[c]!);
}

export interface WrittenFiles {
  json: string[];
  csv: string[];
  svg: string[];
}

/** A metric's rows as the table and the plot show them: the shown rows' value and interval. */
function shownValues(metric: Metric<MetricRow>, rows: MetricRow[]): { layer: number; family: string; value: number | null; low: number | null; high: number | null }[] {
  const c = metric.columns;
  const get = (r: MetricRow, k: string) => ((r as unknown as Record<string, number | null | undefined>)[k] ?? null);
  return rows.filter((r) => metric.shown?.(r) ?? true).map((r) => ({ layer: r.layer, family: r.family, value: get(r, c.value), low: get(r, c.low), high: get(r, c.high) }));
}

/** Writes the results under `dir`, one JSON, CSV and SVG per metric with rows; returns the paths written. */
export async function writeResults(dir: string, result: MetricsResult, storePath: string, registry: MetricRegistry = METRICS): Promise<WrittenFiles> {
  const manifest = result.manifest;
  await mkdir(dir, { recursive: true });
  const store = { path: storePath, files_sha256: Object.fromEntries(Object.entries(manifest.files).map(([n, e]) => [n, e.sha256])) };
  const written: WrittenFiles = { json: [], csv: [], svg: [] };
  for (const metric of registry) {
    const rows = result.rows[metric.name] ?? [];
    if (rows.length === 0) continue;
    const json = { metric: metric.title, model: manifest.model, store, config: { ...result.config, backend_detail: result.backend }, rows };
    const paths = [join(dir, `${metric.name}.json`), join(dir, `${metric.name}.csv`), join(dir, `${metric.name}.svg`)];
    await writeAtomic(paths[0]!, JSON.stringify(json, null, 2) + "\n");
    await writeAtomic(paths[1]!, toCsv(rows));
    await writeAtomic(paths[2]!, svgPlot(`${metric.title} by layer — ${manifest.model}`, shownValues(metric, rows)));
    written.json.push(paths[0]!);
    written.csv.push(paths[1]!);
    written.svg.push(paths[2]!);
  }
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

/** Every computed metric's table, each followed by its notes (null reasons, probes that did not converge). */
export function formatTables(result: MetricsResult, registry: MetricRegistry = METRICS): string {
  const parts: string[] = [];
  for (const metric of registry) {
    const rows = result.rows[metric.name] ?? [];
    if (rows.length === 0) continue;
    const notes = metric.notes ? metric.notes(rows) : nullReasons(metric, rows);
    parts.push([formatTable(metric.tableTitle, shownValues(metric, rows)) + "\n", ...notes].join("\n"));
  }
  return parts.join("\n");
}

/** Layers down, families across: one metric per cell. */
export function formatTable(title: string, rows: { layer: number; family: string; value: number | null }[]): string {
  if (rows.length === 0) return "";
  const families = [...new Set(rows.map((r) => r.family))];
  const layers = [...new Set(rows.map((r) => r.layer))].sort((a, b) => a - b);
  const width = Math.max(8, ...families.map((f) => f.length)) + 2;
  const cell = (v: number | null | undefined) => (v === null || v === undefined ? "—" : v.toFixed(3)).padStart(width);
  const lines = [title, `${"layer".padEnd(7)}${families.map((f) => f.padStart(width)).join("")}`];
  for (const l of layers) lines.push(`${String(l).padEnd(7)}${families.map((f) => cell(rows.find((r) => r.layer === l && r.family === f)?.value)).join("")}`);
  return lines.join("\n");
}
