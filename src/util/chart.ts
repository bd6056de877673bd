/**
 * Line charts as SVG text: one line per series with its interval as a band,
 * round y ticks, a legend. `hsm metrics` draws its per-layer plots with it and
 * `hsm report` its small multiples, so both look and read alike. Lines carry
 * `class="line"`, bands `class="band"` and each series' elements
 * `data-series`, for anyone (or any test) inspecting a chart.
 */

/** One point of a series: `value` and its interval, each possibly missing. */
export interface ChartPoint {
  x: number;
  value: number | null;
  low: number | null;
  high: number | null;
}

export interface ChartSeries {
  name: string;
  points: ChartPoint[];
  /** Default: the palette's colour for the series' index. */
  color?: string;
}

export interface ChartOptions {
  /** Omitted: no title (and less room above). */
  title?: string;
  xLabel: string;
  /** Tick positions and labels on the x axis; the x range spans them and the points. */
  xTicks: { x: number; label: string }[];
  width?: number;
  height?: number;
  /** Legend at the right (default true); off, the right margin shrinks. */
  legend?: boolean;
  /** Fixed y range (default: the data's, padded 5%). */
  yRange?: [number, number];
}

/** The palette: series i gets colour i mod 10. */
export const CHART_COLORS = [
  "#1f77b4",
  "#ff7f0e",
  "#2ca02c",
  "#d62728",
  "#9467bd",
  "#8c564b",
  "#e377c2",
  "#7f7f7f",
  "#bcbd22",
  "#17becf",
];

export function escapeXml(s: string): string {
  return s.replace(/[<>&"]/g, (c) => ({ "<": "&lt;", ">": "&gt;", "&": "&amp;", '"': "&quot;" })[c]!);
}

const finite = (v: number | null): v is number => v !== null && Number.isFinite(v);

/** The y range of the data, padded 5% each side; a flat range is widened to ±0.5. */
function yDomain(series: ChartSeries[]): [number, number] {
  const ys = series.flatMap((s) => s.points.flatMap((p) => [p.value, p.low, p.high])).filter(finite);
  let y0 = ys.length ? Math.min(...ys) : 0;
  let y1 = ys.length ? Math.max(...ys) : 1;
  if (y1 - y0 < 1e-9) [y0, y1] = [y0 - 0.5, y1 + 0.5];
  const pad = (y1 - y0) * 0.05;
  return [y0 - pad, y1 + pad];
}

/** A line chart of every series against x, with bands where both ends of the interval are known. */
export function lineChart(series: ChartSeries[], o: ChartOptions): string {
  const W = o.width ?? 760;
  const H = o.height ?? 440;
  const legend = o.legend ?? true;
  const m = { l: 64, r: legend ? 150 : 16, t: o.title === undefined ? 16 : 40, b: 48 };
  const xs = [...o.xTicks.map((t) => t.x), ...series.flatMap((s) => s.points.map((p) => p.x))];
  const x0 = Math.min(...xs);
  const x1 = Math.max(...xs);
  const [y0, y1] = o.yRange ?? yDomain(series);
  const x = (v: number) => m.l + (x1 - x0 <= 0 ? (W - m.l - m.r) / 2 : ((v - x0) / (x1 - x0)) * (W - m.l - m.r));
  const y = (v: number) => m.t + (1 - (v - y0) / (y1 - y0)) * (H - m.t - m.b);
  const f = (v: number) => v.toFixed(1);
  const parts: string[] = [
    `<svg xmlns="http://www.w3.org/2000/svg" width="${W}" height="${H}" viewBox="0 0 ${W} ${H}" font-family="sans-serif" font-size="12">`,
    `<rect width="${W}" height="${H}" fill="white"/>`,
  ];
  if (o.title !== undefined)
    parts.push(`<text x="${W / 2 - m.r / 2}" y="22" text-anchor="middle" font-size="15">${escapeXml(o.title)}</text>`);
  // Axes and ticks at round values: steps of 1, 2 or 5 times a power of ten.
  const raw = (y1 - y0) / 5;
  const mag = 10 ** Math.floor(Math.log10(raw));
  const step = [1, 2, 5, 10].map((s) => s * mag).find((s) => s >= raw)!;
  const digits = Math.max(0, -Math.floor(Math.log10(step)));
  for (let v = Math.ceil(y0 / step) * step; v <= y1 + 1e-12; v += step) {
    parts.push(`<line x1="${m.l}" x2="${W - m.r}" y1="${f(y(v))}" y2="${f(y(v))}" stroke="#e5e5e5"/>`);
    parts.push(
      `<text x="${m.l - 6}" y="${f(y(v) + 4)}" text-anchor="end">${(Math.abs(v) < step / 1e6 ? 0 : v).toFixed(digits)}</text>`,
    );
  }
  for (const t of o.xTicks)
    parts.push(`<text x="${f(x(t.x))}" y="${H - m.b + 16}" text-anchor="middle">${escapeXml(t.label)}</text>`);
  parts.push(`<text x="${(m.l + W - m.r) / 2}" y="${H - 10}" text-anchor="middle">${escapeXml(o.xLabel)}</text>`);
  parts.push(
    `<line x1="${m.l}" x2="${m.l}" y1="${m.t}" y2="${H - m.b}" stroke="#333"/><line x1="${m.l}" x2="${W - m.r}" y1="${H - m.b}" y2="${H - m.b}" stroke="#333"/>`,
  );
  series.forEach((s, i) => {
    const color = s.color ?? CHART_COLORS[i % CHART_COLORS.length]!;
    const tag = `data-series="${escapeXml(s.name)}"`;
    const pts = [...s.points].sort((a, b) => a.x - b.x);
    const band = pts.filter((p) => finite(p.low) && finite(p.high));
    if (band.length > 1) {
      const poly = [
        ...band.map((p) => `${f(x(p.x))},${f(y(p.high!))}`),
        ...band.reverse().map((p) => `${f(x(p.x))},${f(y(p.low!))}`),
      ];
      parts.push(
        `<polygon points="${poly.join(" ")}" fill="${color}" fill-opacity="0.15" stroke="none" class="band" ${tag}/>`,
      );
    }
    const line = pts.filter((p) => finite(p.value));
    if (line.length > 1)
      parts.push(
        `<polyline points="${line.map((p) => `${f(x(p.x))},${f(y(p.value!))}`).join(" ")}" fill="none" stroke="${color}" stroke-width="2" class="line" ${tag}/>`,
      );
    for (const p of line) parts.push(`<circle cx="${f(x(p.x))}" cy="${f(y(p.value!))}" r="3" fill="${color}"/>`);
    if (!legend) return;
    const ly = m.t + 10 + i * 18;
    parts.push(
      `<line x1="${W - m.r + 14}" x2="${W - m.r + 34}" y1="${ly}" y2="${ly}" stroke="${color}" stroke-width="2"/>`,
    );
    parts.push(`<text x="${W - m.r + 40}" y="${ly + 4}">${escapeXml(s.name)}</text>`);
  });
  parts.push("</svg>");
  return parts.join("\n") + "\n";
}
