/**
 * ISS (docs/metrics.md): per family, the fact-macro mean of each query's
 * cosine with its own fact's anchor minus its mean cosine with the other
 * anchors, with R@1, MRR and a bootstrap interval over facts.
 */
import { ANCHOR_FAMILY } from "../bank/prompt.js";
import { ALL_FAMILIES, MetricsError, type LayerData, type Metric, type MetricSettings } from "./metric.js";
import { bootstrapStream, indexBy, interval } from "./stats.js";

export interface IssRow {
  layer: number;
  family: string;
  n_queries: number;
  n_facts: number;
  iss: number | null;
  own_cos: number | null;
  other_cos: number | null;
  r_at_1: number | null;
  mrr: number | null;
  iss_ci_low: number | null;
  iss_ci_high: number | null;
  excluded_nonfinite: number;
  skipped_no_anchor: number;
}

/**
 * ISS's anchors over centred unit rows `x`: one vector per fact with a usable
 * anchor row (several rows average and renormalize), `anchorOf` mapping each
 * such fact to its index in `A` (F × d). Fewer than two stops the run.
 */
function anchorVectors(
  layer: number,
  x: Float32Array,
  valid: Uint8Array,
  facts: readonly string[],
  families: readonly string[],
  N: number,
  d: number,
): { anchorOf: Map<string, number>; A: Float32Array; F: number } {
  const anchorOf = new Map<string, number>();
  const anchorRows: number[][] = [];
  for (let i = 0; i < N; i++) {
    if (!valid[i] || families[i] !== ANCHOR_FAMILY) continue;
    let g = anchorOf.get(facts[i]!);
    if (g === undefined) {
      g = anchorRows.length;
      anchorOf.set(facts[i]!, g);
      anchorRows.push([]);
    }
    anchorRows[g]!.push(i);
  }
  const F = anchorRows.length;
  if (F < 2) throw new MetricsError(`layer ${layer}: ${F} fact(s) have a usable anchor row; ISS needs at least 2`);
  const A = new Float32Array(F * d);
  anchorRows.forEach((rows, g) => {
    const a = A.subarray(g * d, (g + 1) * d);
    if (rows.length === 1) a.set(x.subarray(rows[0]! * d, (rows[0]! + 1) * d));
    else {
      const sum = new Float64Array(d);
      for (const r of rows) for (let j = 0; j < d; j++) sum[j]! += x[r * d + j]!;
      const norm = Math.sqrt(sum.reduce((t, v) => t + v * v, 0));
      for (let j = 0; j < d; j++) a[j] = sum[j]! / norm;
    }
  });
  return { anchorOf, A, F };
}

/** Each query row's scores at one layer: the store rows, their rank among the anchors and their cosines. */
export interface IssQueryScores {
  /** Store rows of the query rows: usable non-anchor rows of anchored facts, in row order. */
  rows: Int32Array;
  /** Anchors scoring above the row's own (rank − 1). */
  above: Int32Array;
  /** Cosine with the own anchor, and the mean cosine with the others (float64). */
  ownCos: Float64Array;
  otherCos: Float64Array;
  /** Rows left out as non-finite, and non-anchor rows whose fact has no usable anchor. */
  excluded: number;
  skipped: number;
}

/** Centres and normalizes the layer in ISS's own buffer (the layer's rows stay as read), builds the anchors and scores every query row. */
export async function issQueryScores(data: LayerData): Promise<IssQueryScores> {
  const { layer, n: N, d, facts, families, kernels: k } = data;
  const x = data.buffer(N * d);
  const valid = Uint8Array.from(data.finite);
  const excluded = k.centreRows(data.h, N, d, valid, x);
  const { anchorOf, A, F } = anchorVectors(layer, x, valid, facts, families, N, d);
  const q: number[] = [];
  let skipped = 0;
  for (let i = 0; i < N; i++) {
    if (!valid[i] || families[i] === ANCHOR_FAMILY) continue;
    if (anchorOf.has(facts[i]!)) q.push(i);
    else skipped++;
  }
  const rows = Int32Array.from(q);
  const own = Int32Array.from(q, (i) => anchorOf.get(facts[i]!)!);
  const above = new Int32Array(rows.length);
  await k.rank(x, rows, A, F, d, own, new Float32Array(rows.length), above);
  const ownCos = new Float64Array(rows.length);
  const otherCos = new Float64Array(rows.length);
  k.anchorCosines(x, rows, A, F, d, own, ownCos, otherCos);
  return { rows, above, ownCos, otherCos, excluded, skipped };
}

export async function issRows(data: LayerData, s: MetricSettings): Promise<IssRow[]> {
  const { layer, facts, families, kernels: k } = data;
  const { rows, above, ownCos, otherCos, excluded, skipped } = await issQueryScores(data);
  const q = Array.from(rows);
  const out: IssRow[] = [];
  for (const family of [...data.familyNames, ALL_FAMILIES]) {
    const sel = q.map((_, i) => i).filter((i) => family === ALL_FAMILIES || families[rows[i]!] === family);
    const row: IssRow = {
      layer,
      family,
      n_queries: sel.length,
      n_facts: 0,
      iss: null,
      own_cos: null,
      other_cos: null,
      r_at_1: null,
      mrr: null,
      iss_ci_low: null,
      iss_ci_high: null,
      excluded_nonfinite: excluded,
      skipped_no_anchor: skipped,
    };
    if (sel.length > 0) {
      const { id, names } = indexBy(
        facts,
        sel.map((i) => rows[i]!),
      );
      const nf = names.length;
      const size = new Int32Array(nf);
      const sums = [
        new Float64Array(nf),
        new Float64Array(nf),
        new Float64Array(nf),
        new Float64Array(nf),
        new Float64Array(nf),
      ];
      sel.forEach((i, j) => {
        const f = id[j]!;
        const rank = 1 + above[i]!;
        size[f]!++;
        sums[0]![f]! += ownCos[i]! - otherCos[i]!;
        sums[1]![f]! += ownCos[i]!;
        sums[2]![f]! += otherCos[i]!;
        sums[3]![f]! += rank === 1 ? 1 : 0;
        sums[4]![f]! += 1 / rank;
      });
      const factMeans = sums.map((t) => Float64Array.from(t, (v, f) => v / size[f]!));
      const macro = (v: Float64Array) => v.reduce((a, b) => a + b, 0) / nf;
      const margins = factMeans[0]!;
      const reps = new Float64Array(s.bootstrap);
      const bs = bootstrapStream(s.seed, "iss", layer, family);
      await k.bootstrapMean(bs.seed, bs.stream, margins, s.bootstrap, reps);
      const [lo, hi] = interval(reps);
      Object.assign(row, {
        n_facts: nf,
        iss: macro(margins),
        own_cos: macro(factMeans[1]!),
        other_cos: macro(factMeans[2]!),
        r_at_1: macro(factMeans[3]!),
        mrr: macro(factMeans[4]!),
        iss_ci_low: lo,
        iss_ci_high: hi,
      });
    }
    out.push(row);
  }
  return out;
}

export const ISS: Metric<IssRow> = {
  name: "iss",
  title: "ISS",
  description: "does a perturbed question stay near its fact's anchor question inside the model?",
  tableTitle: "ISS (fact-macro margin; higher: perturbed questions stay near their anchor)",
  needs: [],
  compute: issRows,
  columns: { value: "iss", low: "iss_ci_low", high: "iss_ci_high" },
  notes: () => [],
};
