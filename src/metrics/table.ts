/**
 * The compact table the CLI prints for a metric. A module of its own, with
 * nothing to import, so that the public API can offer it without loading the
 * metrics.
 */

/** Layers down, families across: one metric per cell. */
export function formatTable(title: string, rows: { layer: number; family: string; value: number | null }[]): string {
  if (rows.length === 0) return "";
  const families = [...new Set(rows.map((r) => r.family))];
  const layers = [...new Set(rows.map((r) => r.layer))].sort((a, b) => a - b);
  const width = Math.max(8, ...families.map((f) => f.length)) + 2;
  const cell = (v: number | null | undefined) => (v === null || v === undefined ? "—" : v.toFixed(3)).padStart(width);
  const lines = [title, `${"layer".padEnd(7)}${families.map((f) => f.padStart(width)).join("")}`];
  for (const l of layers)
    lines.push(
      `${String(l).padEnd(7)}${families.map((f) => cell(rows.find((r) => r.layer === l && r.family === f)?.value)).join("")}`,
    );
  return lines.join("\n");
}
