/** The terminal table of `hsm compare`. */
import type { PairedDifference } from "../study/stats.js";
import type { Accuracy, Comparison } from "./compare.js";

const num = (v: number | null, digits = 4) => (v === null ? "—" : v.toFixed(digits));
const signed = (v: number | null) => (v === null ? "—" : `${v >= 0 ? "+" : ""}${v.toFixed(4)}`);
const pValue = (p: number | null) => (p === null ? "—" : p < 1e-4 ? p.toExponential(1) : p.toFixed(4));
const withInterval = (d: PairedDifference | null) =>
  d === null || d.difference === null ? "—" : `${signed(d.difference)} [${signed(d.low)}, ${signed(d.high)}]`;

/** Columns named in `left` are left-aligned, the others (numbers) right-aligned. */
function table(header: string[], rows: string[][], left = ["family"]): string[] {
  const widths = header.map((h, i) => Math.max(h.length, ...rows.map((r) => r[i]!.length)));
  const line = (cells: string[]) =>
    cells
      .map((c, i) => (left.includes(header[i]!) ? c.padEnd(widths[i]!) : c.padStart(widths[i]!)))
      .join("  ")
      .trimEnd();
  return [line(header), line(widths.map((w) => "─".repeat(w))), ...rows.map(line)];
}

/** The comparison as the terminal shows it: the correctness table, then ISS and KTS differences at matched depth. */
export function formatComparison(c: Comparison): string {
  const acc = (x: Accuracy) => `${num(x.accuracy)} [${num(x.low)}, ${num(x.high)}]`;
  const out = [
    `${c.a} (A) vs ${c.b} (B): paired on the same queries and facts; differences are A − B`,
    "",
    ...table(
      ["family", "acc A [95%]", "acc B [95%]", "A−B", "b", "c", "McNemar p", "BH p"],
      c.families.map((f) => [
        f.family,
        acc(f.a),
        acc(f.b),
        signed(f.paired.difference),
        String(f.paired.onlyA),
        String(f.paired.onlyB),
        pValue(f.paired.p),
        pValue(f.pAdjusted),
      ]),
    ),
    "",
    `ISS and KTS at matched depth (B's layer nearest A's l/(L−1)); paired bootstrap over facts, ${c.replicates} replicates, seed ${c.seed}`,
    "",
    ...table(
      ["layer A", "layer B", "depth A", "depth B", "family", "ΔISS [95%]", "ΔKTS [95%]", "facts"],
      c.depth.map((d) => [
        String(d.layerA),
        String(d.layerB),
        d.depthA.toFixed(3),
        d.depthB.toFixed(3),
        d.family,
        withInterval(d.iss),
        withInterval(d.kts),
        String(d.iss.nFacts),
      ]),
    ),
  ];
  return out.join("\n");
}
