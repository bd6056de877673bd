/**
 * KTS (docs/metrics.md): a correctness probe trained on the anchors of the
 * other folds scores every labelled row out of fold; per family, the AUROC of
 * those scores, and how much of the anchors' AUROC above chance transfers.
 */
import { ANCHOR_FAMILY } from "../bank/prompt.js";
import { NO_LABEL } from "./labels.js";
import { ALL_FAMILIES, type LayerData, type Metric, type MetricSettings } from "./metric.js";
import { PROBE_MAX_ITERATIONS, trainProbes } from "./probe.js";
import { bootstrapStream, fnv1a32, indexBy, interval, SortedScores } from "./stats.js";

export interface KtsRow {
  layer: number;
  family: string;
  n_queries: number;
  n_facts: number;
  n_correct: number;
  accuracy: number | null;
  auroc: number | null;
  auroc_ci_low: number | null;
  auroc_ci_high: number | null;
  kts: number | null;
  kts_ci_low: number | null;
  kts_ci_high: number | null;
  kts_null_reason: string | null;
  probes_not_converged: number;
  excluded_nonfinite: number;
}

export async function ktsRows(data: LayerData, s: MetricSettings): Promise<KtsRow[]> {
  const { layer, n: N, d, h, finite, facts, families, kernels: k } = data;
  const y = data.labels!;
  const K = s.folds;
  const excluded = finite.reduce((t, v) => t + (v ? 0 : 1), 0);
  const foldCache = new Map<string, number>();
  const fold = (f: string) => {
    let j = foldCache.get(f);
    if (j === undefined) foldCache.set(f, (j = fnv1a32(f) % K));
    return j;
  };
  const labelled: number[] = [];
  for (let i = 0; i < N; i++) if (finite[i] && y[i] !== NO_LABEL) labelled.push(i);
  const anchors = Int32Array.from(labelled.filter((i) => families[i] === ANCHOR_FAMILY));
  const base = (family: string, rowsOf: number[]): KtsRow => {
    const nCorrect = rowsOf.reduce((t, i) => t + (y[i] === 1 ? 1 : 0), 0);
    return {
      layer,
      family,
      n_queries: rowsOf.length,
      n_facts: new Set(rowsOf.map((i) => facts[i]!)).size,
      n_correct: nCorrect,
      accuracy: rowsOf.length ? nCorrect / rowsOf.length : null,
      auroc: null,
      auroc_ci_low: null,
      auroc_ci_high: null,
      kts: null,
      kts_ci_low: null,
      kts_ci_high: null,
      kts_null_reason: null,
      probes_not_converged: 0,
      excluded_nonfinite: excluded,
    };
  };
  const groups = [ANCHOR_FAMILY, ...data.familyNames, ALL_FAMILIES].map((family) => ({
    family,
    rows: labelled.filter((i) => (family === ALL_FAMILIES ? families[i] !== ANCHOR_FAMILY : families[i] === family)),
  }));

  // One probe per fold, trained on the anchors of the other folds.
  const ya = Uint8Array.from(anchors, (r) => y[r]!);
  const folds = Array.from({ length: K }, (_, j) => ({ train: Int32Array.from(anchors.keys()).filter((i) => fold(facts[anchors[i]!]!) !== j) }));
  for (const [j, f] of folds.entries()) {
    const pos = f.train.reduce((t, i) => t + ya[i]!, 0);
    if (f.train.length === 0 || pos === 0 || pos === f.train.length) {
      const only = f.train.length === 0 ? "no labelled anchor rows" : pos === 0 ? 'only "incorrect" anchors' : 'only "correct" anchors';
      return groups.map((g) => ({ ...base(g.family, g.rows), kts_null_reason: `the probe cannot be trained: training fold ${j} has ${only}` }));
    }
  }
  // The anchors, centred and scaled by their own statistics so that float32 products stay accurate.
  const prescaled = k.standardizeRows(h, anchors, d);
  const products = await k.products(prescaled.rows, anchors.length, d);
  let probes;
  try {
    // Adjacent layers' standardized features are alike: each fold starts from its solution on the layer before.
    const start = data.carry?.get("probes") as Float64Array[] | undefined;
    probes = await trainProbes(prescaled.rows, products, ya, folds, { c: s.probeC, prescale: prescaled, kernels: k, start });
  } finally {
    products.dispose();
  }
  data.carry?.set("probes", probes.map((p) => Float64Array.of(...p.w, p.b)));
  const notConverged = probes.filter((p) => !p.converged).length;
  // Out-of-fold scores for every labelled row: every row against every fold's probe in one product, then its own fold's column.
  const v = new Float64Array(K * d);
  probes.forEach((p, j) => v.set(p.v, j * d));
  const all = new Float64Array(N * K);
  await k.rowsTimes(h, N, d, v, K, all);
  const score = new Float64Array(N);
  for (const i of labelled) {
    const j = fold(facts[i]!);
    score[i] = all[i * K + j]! + probes[j]!.offset;
  }

  // One sort of every labelled row by (score, row); a group's rows, listed in row order, take their
  // order from it. Bootstrap replicates then reweight facts in one pass over each group.
  const sortedRows = Int32Array.from(labelled).sort((a, b) => score[a]! - score[b]! || a - b);
  const local = new Int32Array(N).fill(-1);
  const prepared = (rows: number[]) => {
    const { id, names } = indexBy(facts, rows);
    rows.forEach((r, i) => (local[r] = i));
    const order = new Int32Array(rows.length);
    let at = 0;
    for (const r of sortedRows) if (local[r]! >= 0) order[at++] = local[r]!;
    for (const r of rows) local[r] = -1;
    return { names, sorted: new SortedScores(Float64Array.from(rows, (i) => score[i]!), Uint8Array.from(rows, (i) => y[i]!), id, names.length, order) };
  };
  const anchorGroup = prepared(groups[0]!.rows);
  const anchorAuroc = anchorGroup.sorted.auroc();
  const anchorFactIndex = new Map(anchorGroup.names.map((n, f) => [n, f]));

  const out: KtsRow[] = [];
  for (const { family, rows } of groups) {
    const row = base(family, rows);
    row.probes_not_converged = notConverged;
    out.push(row);
    if (rows.length === 0) {
      row.kts_null_reason = "no labelled rows";
      continue;
    }
    const g = family === ANCHOR_FAMILY ? anchorGroup : prepared(rows);
    row.auroc = g.sorted.auroc();
    // For the paired anchor AUROC: which anchor fact each of this family's facts is (-1: none).
    const toAnchor = Int32Array.from(g.names, (name) => anchorFactIndex.get(name) ?? -1);
    const aucReps = new Float64Array(s.bootstrap);
    const ancReps = new Float64Array(s.bootstrap);
    const bs = bootstrapStream(s.seed, "kts", layer, family);
    // Paired: the same drawn facts decide the anchor's AUROC in each replicate.
    if (family === ANCHOR_FAMILY) await k.bootstrapAuroc(bs.seed, bs.stream, g.sorted, s.bootstrap, aucReps);
    else await k.bootstrapAuroc(bs.seed, bs.stream, g.sorted, s.bootstrap, aucReps, anchorGroup.sorted, toAnchor, ancReps);
    const ktsReps = aucReps.map((fam, r) => {
      const anc = ancReps[r]!;
      return Number.isNaN(fam) || Number.isNaN(anc) || anc <= 0.55 ? NaN : (fam - 0.5) / (anc - 0.5);
    });
    [row.auroc_ci_low, row.auroc_ci_high] = interval(aucReps);
    if (family === ANCHOR_FAMILY) row.kts_null_reason = "anchor is the reference family";
    else if (row.auroc === null) row.kts_null_reason = "auroc undefined: only one label class among this family's rows";
    else if (anchorAuroc === null) row.kts_null_reason = "anchor auroc undefined: only one label class among the anchors";
    else if (anchorAuroc <= 0.55) row.kts_null_reason = `auroc_anchor ${anchorAuroc.toFixed(4)} ≤ 0.55: the probe learned nothing to transfer`;
    else {
      row.kts = (row.auroc - 0.5) / (anchorAuroc - 0.5);
      [row.kts_ci_low, row.kts_ci_high] = interval(ktsReps);
    }
  }
  return out;
}

export const KTS: Metric<KtsRow> = {
  name: "kts",
  title: "KTS",
  tableTitle: "KTS (1: the anchor probe's signal transfers fully; 0: not at all)",
  needs: ["labels"],
  compute: ktsRows,
  columns: { value: "kts", low: "kts_ci_low", high: "kts_ci_high", nullReason: "kts_null_reason" },
  shown: (row) => row.family !== ANCHOR_FAMILY,
  notes: (rows) => [
    ...new Set(rows.filter((r) => r.family !== ANCHOR_FAMILY && r.kts === null).map((r) => `  — ${r.kts_null_reason}`)),
    ...rows
      .filter((r) => r.family === ANCHOR_FAMILY && r.probes_not_converged > 0)
      .map((r) => `  layer ${r.layer}: ${r.probes_not_converged} probe(s) did not converge in ${PROBE_MAX_ITERATIONS.toLocaleString("en-US")} iterations`),
  ],
};
