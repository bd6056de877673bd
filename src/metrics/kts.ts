/**
 * KTS (docs/metrics.md): a correctness probe trained on the anchors of the
 * other folds scores every labelled row out of fold; per family, the AUROC of
 * those scores, and how much of the anchors' AUROC above chance transfers.
 */
import { ANCHOR_FAMILY } from "../bank/prompt.js";
import { NO_LABEL } from "./labels.js";
import { orderByScore, sortedGroups } from "./score-order.js";
import type { AurocJob, Kernels } from "../kernels/types.js";
import { ALL_FAMILIES, type LayerData, type Metric, type MetricSettings } from "./metric.js";
import { PROBE_MAX_ITERATIONS, trainProbes } from "./probe.js";
import { bootstrapStream, CHANCE_AUROC, fnv1a32, indexBy, interval, KTS_MIN_ANCHOR_AUROC } from "./stats.js";

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

/** One reported group of labelled rows: a family's rows (or, for `all`, every non-anchor row) in row order. */
interface Group {
  family: string;
  rows: Int32Array;
  /** The group's facts, in order of first appearance over its rows. */
  names: string[];
  /** Which anchor fact each of the group's facts is (−1: none), for the paired anchor AUROC. */
  toAnchor: Int32Array;
  nCorrect: number;
}

/**
 * What a layer's KTS needs that depends only on which rows are labelled and finite, not on the
 * layer's values: the same for every layer with the same non-finite rows (usually none), so built
 * once and kept across layers.
 */
export interface Layout {
  /** The fold count and the non-finite rows it was built for. */
  key: string;
  labelled: Int32Array;
  anchors: Int32Array;
  /** The anchors' labels, and the folds (indices into `anchors`) each probe trains on. */
  ya: Uint8Array;
  folds: { train: Int32Array }[];
  /** Per row of the store: its fold (labelled rows only). */
  foldOf: Int32Array;
  /** The anchor group first, then each family, then all. */
  groups: Group[];
  /** Per row of the store: its family's group (−1: none), and its fact there as an index into the group's names. */
  groupOf: Int32Array;
  factOf: Int32Array;
  /** Per row of the store: its fact in the pooled group (last of `groups`), −1 where it is not pooled. */
  pooledFactOf: Int32Array;
}

/**
 * Built once, on the first layer, in plain loops: run once, the code is mostly not yet optimized by V8, and a
 * callback per row (filter, forEach, reduce) cost several times the loop's own work over the store's rows.
 */
function layout(data: LayerData, K: number, key: string): Layout {
  const { n: N, finite, facts, families } = data;
  const y = data.labels!;
  const foldCache = new Map<string, number>();
  const names = [ANCHOR_FAMILY, ...data.familyNames, ALL_FAMILIES];
  const index = new Map(names.map((f, g) => [f, g]));
  const pooled = names.length - 1;
  const labelled: number[] = [];
  const members: number[][] = names.map(() => []);
  const foldOf = new Int32Array(N).fill(-1);
  const groupOf = new Int32Array(N).fill(-1);
  for (let i = 0; i < N; i++) {
    if (!finite[i] || y[i] === NO_LABEL) continue;
    labelled.push(i);
    const fact = facts[i]!;
    let j = foldCache.get(fact);
    if (j === undefined) foldCache.set(fact, (j = fnv1a32(fact) % K));
    foldOf[i] = j;
    const g = index.get(families[i]!) ?? -1;
    groupOf[i] = g;
    if (g >= 0) members[g]!.push(i);
    if (families[i] !== ANCHOR_FAMILY) members[pooled]!.push(i);
  }
  const anchors = Int32Array.from(members[0]!);
  const ya = new Uint8Array(anchors.length);
  for (let a = 0; a < anchors.length; a++) ya[a] = y[anchors[a]!]!;
  const folds = Array.from({ length: K }, (_, j) => {
    const train: number[] = [];
    for (let a = 0; a < anchors.length; a++) if (foldOf[anchors[a]!] !== j) train.push(a);
    return { train: Int32Array.from(train) };
  });
  const factOf = new Int32Array(N).fill(-1);
  const pooledFactOf = new Int32Array(N).fill(-1);
  const groups: Group[] = [];
  let anchorFact: Map<string, number> | undefined;
  for (const [g, family] of names.entries()) {
    const rows = Int32Array.from(members[g]!);
    const { id, names: factNames } = indexBy(facts, rows);
    const factIn = g === pooled ? pooledFactOf : factOf;
    let nCorrect = 0;
    for (let i = 0; i < rows.length; i++) {
      factIn[rows[i]!] = id[i]!;
      if (y[rows[i]!] === 1) nCorrect++;
    }
    let toAnchor: Int32Array;
    if (anchorFact === undefined) {
      anchorFact = new Map();
      for (let f = 0; f < factNames.length; f++) anchorFact.set(factNames[f]!, f);
      toAnchor = Int32Array.from(factNames.keys());
    } else {
      toAnchor = new Int32Array(factNames.length);
      for (let f = 0; f < factNames.length; f++) toAnchor[f] = anchorFact.get(factNames[f]!) ?? -1;
    }
    groups.push({ family, rows, names: factNames, toAnchor, nCorrect });
  }
  return {
    key,
    labelled: Int32Array.from(labelled),
    anchors,
    ya,
    folds,
    foldOf,
    groups,
    groupOf,
    factOf,
    pooledFactOf,
  };
}

/** A layer's out-of-fold probe scores: per store row (labelled rows only), or why no probe could be trained. */
export interface KtsScores {
  layout: Layout;
  /** Rows left out as non-finite. */
  excluded: number;
  score: Float64Array;
  notConverged: number;
  /** Set when a fold cannot be trained; `score` is then empty. */
  nullReason?: string;
}

/** Trains one probe per fold on the other folds' anchors and scores every labelled row with its own fold's probe. */
export async function ktsScores(data: LayerData, s: MetricSettings): Promise<KtsScores> {
  const { n: N, d, finite, kernels: k } = data;
  const h = data.h16 ?? data.h;
  const K = s.folds;
  let excluded = 0;
  const nonfinite: number[] = [];
  for (let i = 0; i < N; i++) {
    if (!finite[i]) {
      nonfinite.push(i);
      excluded++;
    }
  }
  const key = `${K}:${nonfinite.join(",")}`;
  let lay = data.carry?.get("layout") as Layout | undefined;
  if (!lay || lay.key !== key) {
    lay = layout(data, K, key);
    data.carry?.set("layout", lay);
  }
  const { labelled, anchors, ya, folds, foldOf } = lay;
  for (const [j, f] of folds.entries()) {
    const pos = f.train.reduce((t, i) => t + ya[i]!, 0);
    if (f.train.length === 0 || pos === 0 || pos === f.train.length) {
      const only =
        f.train.length === 0
          ? "no labelled anchor rows"
          : pos === 0
            ? 'only "incorrect" anchors'
            : 'only "correct" anchors';
      return {
        layout: lay,
        excluded,
        score: new Float64Array(0),
        notConverged: 0,
        nullReason: `the probe cannot be trained: training fold ${j} has ${only}`,
      };
    }
  }
  // The anchors, centred and scaled by their own statistics so that float32 products stay accurate.
  const prescaled = k.standardizeRows(h, anchors, d, data.buffer(anchors.length * d));
  const products = await k.products(prescaled.rows, anchors.length, d);
  let probes;
  try {
    // Adjacent layers' standardized features are alike: each fold starts from its solution on the layer before.
    const start = data.carry?.get("probes") as Float64Array[] | undefined;
    probes = await trainProbes(prescaled.rows, products, ya, folds, {
      c: s.probeC,
      prescale: prescaled,
      kernels: k,
      start,
    });
  } finally {
    products.dispose();
  }
  data.carry?.set(
    "probes",
    probes.map((p) => Float64Array.of(...p.w, p.b)),
  );
  // Out-of-fold scores for every labelled row: every row against every fold's probe in one product, then its own fold's column.
  const v = new Float64Array(K * d);
  probes.forEach((p, j) => v.set(p.v, j * d));
  const all = new Float64Array(N * K);
  await k.rowsTimes(h, N, d, v, K, all);
  data.release?.();
  const score = new Float64Array(N);
  for (const i of labelled) score[i] = all[i * K + foldOf[i]!]! + probes[foldOf[i]!]!.offset;
  return { layout: lay, excluded, score, notConverged: probes.filter((p) => !p.converged).length };
}

async function ktsRows(data: LayerData, s: MetricSettings): Promise<KtsRow[]> {
  return (await ktsStart(data, s))();
}

/**
 * KTS in two parts: the scores, which read the layer, then (returned) the groups' AUROCs and their bootstrap
 * intervals, which read only the scores and the layout.
 */
async function ktsStart(data: LayerData, s: MetricSettings): Promise<() => Promise<KtsRow[]>> {
  const scores = await ktsScores(data, s);
  const { layer, kernels } = data;
  return () => ktsFromScores(scores, data.labels!, layer, kernels, s);
}

async function ktsFromScores(
  scores: KtsScores,
  y: Uint8Array,
  layer: number,
  k: Kernels,
  s: MetricSettings,
): Promise<KtsRow[]> {
  const { layout: lay, excluded, score, notConverged, nullReason } = scores;
  const { groups } = lay;
  const base = (g: Group): KtsRow => ({
    layer,
    family: g.family,
    n_queries: g.rows.length,
    n_facts: g.names.length,
    n_correct: g.nCorrect,
    accuracy: g.rows.length ? g.nCorrect / g.rows.length : null,
    auroc: null,
    auroc_ci_low: null,
    auroc_ci_high: null,
    kts: null,
    kts_ci_low: null,
    kts_ci_high: null,
    kts_null_reason: null,
    probes_not_converged: 0,
    excluded_nonfinite: excluded,
  });
  if (nullReason) return groups.map((g) => ({ ...base(g), kts_null_reason: nullReason }));

  // One sort of every labelled row by (score, row); each group takes its rows in that order, with runs of equal
  // scores marked. Bootstrap replicates then reweight facts in one pass over each group. The pooled group is last.
  const { arrays, auroc } = sortedGroups(orderByScore(lay.labelled, score), score, y, {
    ...lay,
    rows: groups.map((g) => g.rows.length),
    nFacts: groups.map((g) => g.names.length),
  });
  const anchorSorted = arrays[0]!;
  const anchorAuroc = auroc[0]!;

  // Every group's replicates in one call: the native core draws them one group after another without waiting on
  // the JavaScript thread between two, which is busy with the next layer meanwhile.
  const out: KtsRow[] = [];
  const pending: { row: KtsRow; job: AurocJob }[] = [];
  for (const [gi, g] of groups.entries()) {
    const row = base(g);
    row.probes_not_converged = notConverged;
    out.push(row);
    if (g.rows.length === 0) {
      row.kts_null_reason = "no labelled rows";
      continue;
    }
    row.auroc = auroc[gi]!;
    row.kts_null_reason = transferNullReason(g.family, row.auroc, anchorAuroc);
    const bs = bootstrapStream(s.seed, "kts", layer, g.family);
    const job: AurocJob = { ...bs, group: arrays[gi]!, b: s.bootstrap, out: new Float64Array(s.bootstrap) };
    // Paired where there is a transfer to bound: the same drawn facts decide the anchor's AUROC in each replicate.
    // Without one, the anchor's AUROC under the draws is not needed (the draws, and so the family's replicates,
    // are the same with or without it).
    if (row.kts_null_reason === null) {
      Object.assign(job, { paired: anchorSorted, toPaired: g.toAnchor, pairedOut: new Float64Array(s.bootstrap) });
    }
    pending.push({ row, job });
  }
  await k.bootstrapAuroc(pending.map((p) => p.job));
  for (const { row, job } of pending) {
    [row.auroc_ci_low, row.auroc_ci_high] = interval(job.out);
    if (!job.pairedOut) continue;
    const ancReps = job.pairedOut;
    const ktsReps = job.out.map((fam, r) => {
      const anc = ancReps[r]!;
      if (Number.isNaN(fam) || Number.isNaN(anc) || anc <= KTS_MIN_ANCHOR_AUROC) return NaN;
      return (fam - CHANCE_AUROC) / (anc - CHANCE_AUROC);
    });
    row.kts = (row.auroc! - CHANCE_AUROC) / (anchorAuroc! - CHANCE_AUROC);
    [row.kts_ci_low, row.kts_ci_high] = interval(ktsReps);
  }
  return out;
}

/** Why a group has no transfer to bound (null: it has one), from its AUROC and the anchor's. */
function transferNullReason(family: string, groupAuroc: number | null, anchorAuroc: number | null): string | null {
  if (family === ANCHOR_FAMILY) return "anchor is the reference family";
  if (groupAuroc === null) return "auroc undefined: only one label class among this family's rows";
  if (anchorAuroc === null) return "anchor auroc undefined: only one label class among the anchors";
  if (anchorAuroc <= KTS_MIN_ANCHOR_AUROC) {
    const below = `auroc_anchor ${anchorAuroc.toFixed(4)} ≤ ${KTS_MIN_ANCHOR_AUROC}`;
    return `${below}: the probe learned nothing to transfer`;
  }
  return null;
}

export const KTS: Metric<KtsRow> = {
  name: "kts",
  title: "KTS",
  description: "does a correctness probe trained on anchors transfer to perturbed questions?",
  tableTitle: "KTS (1: the anchor probe's signal transfers fully; 0: not at all)",
  needs: ["labels"],
  compute: ktsRows,
  start: ktsStart,
  columns: { value: "kts", low: "kts_ci_low", high: "kts_ci_high", nullReason: "kts_null_reason" },
  shown: (row) => row.family !== ANCHOR_FAMILY,
  notes: (rows) => [
    ...new Set(rows.filter((r) => r.family !== ANCHOR_FAMILY && r.kts === null).map((r) => `  — ${r.kts_null_reason}`)),
    ...rows
      .filter((r) => r.family === ANCHOR_FAMILY && r.probes_not_converged > 0)
      .map(
        (r) =>
          `  layer ${r.layer}: ${r.probes_not_converged} probe(s) did not converge in ${PROBE_MAX_ITERATIONS.toLocaleString("en-US")} iterations`,
      ),
  ],
};
