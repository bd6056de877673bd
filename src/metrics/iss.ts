/**
 * ISS (docs/metrics.md): per family, the fact-macro mean of each query's
 * cosine with its own fact's anchor minus its mean cosine with the other
 * anchors, with R@1, MRR and a bootstrap interval over facts.
 */
import { ANCHOR_FAMILY } from "../bank/prompt.js";
import { largeArrayBuffer } from "../kernels/native.js";
import { ALL_FAMILIES, MetricsError, type LayerData, type Metric, type MetricSettings } from "./metric.js";
import { bootstrapStream, interval } from "./stats.js";

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
 * What ISS needs of the rows whatever a layer's values are, made once and
 * carried across layers: each row's fact and family as small integers (facts
 * numbered in order of first appearance), and a buffer for the anchors.
 */
interface IssLayout {
  /** Per row: fact number. */
  fact: Int32Array;
  facts: number;
  /** Per row: index into the layer data's familyNames; -1 for an anchor row, -2 for a family not named there. */
  family: Int32Array;
  /** Scratch, one slot per fact, all zero between uses. */
  slot: Int32Array;
  /** Anchor vectors, F × d of it used at each layer. */
  anchors: Float32Array;
}

function issLayout(data: LayerData): IssLayout {
  const cached = data.carry?.get("layout") as IssLayout | undefined;
  if (cached) return cached;
  const { n: N, facts, families, familyNames } = data;
  const factOf = new Map<string, number>();
  const fact = new Int32Array(N);
  for (let i = 0; i < N; i++) {
    let f = factOf.get(facts[i]!);
    if (f === undefined) factOf.set(facts[i]!, (f = factOf.size));
    fact[i] = f;
  }
  const familyOf = new Map(familyNames.map((name, j) => [name, j]));
  const family = Int32Array.from({ length: N }, (_, i) =>
    families[i] === ANCHOR_FAMILY ? -1 : (familyOf.get(families[i]!) ?? -2),
  );
  const layout: IssLayout = {
    fact,
    facts: factOf.size,
    family,
    slot: new Int32Array(factOf.size),
    anchors: new Float32Array(0),
  };
  data.carry?.set("layout", layout);
  return layout;
}

/**
 * ISS's anchors over centred unit rows `x`: one vector per fact with a usable
 * anchor row (several rows average and renormalize; rows whose mean is zero
 * leave their fact without one), numbered in order of their first usable
 * anchor row; `anchorOf[fact]` is that number (-1: none) and `A` holds the
 * vectors (F × d). Fewer than two stops the run.
 */
function anchorVectors(
  layer: number,
  x: Float32Array,
  valid: Uint8Array,
  lay: IssLayout,
  N: number,
  d: number,
): { anchorOf: Int32Array; A: Float32Array; F: number } {
  const { fact, family } = lay;
  const anchorOf = new Int32Array(lay.facts).fill(-1);
  // Each fact's usable anchor rows, in row order: the first, then next[] from each to the one after (-1: none).
  const first: number[] = [];
  const last: number[] = [];
  const next = new Int32Array(N).fill(-1);
  for (let i = 0; i < N; i++) {
    if (!valid[i] || family[i] !== -1) continue;
    const g = anchorOf[fact[i]!]!;
    if (g < 0) {
      anchorOf[fact[i]!] = first.length;
      first.push(i);
      last.push(i);
    } else {
      next[last[g]!] = i;
      last[g] = i;
    }
  }
  if (lay.anchors.length < first.length * d) lay.anchors = new Float32Array(largeArrayBuffer(first.length * d * 4));
  // Anchor g's final number (-1: its rows' mean is zero, so the fact has no usable anchor after all).
  const number = new Int32Array(first.length).fill(-1);
  let F = 0;
  for (let g = 0; g < first.length; g++) {
    const a = lay.anchors.subarray(F * d, (F + 1) * d);
    const r0 = first[g]!;
    if (next[r0] === -1) {
      a.set(x.subarray(r0 * d, (r0 + 1) * d));
      number[g] = F++;
      continue;
    }
    // Several rows: summed in float64 in row order, then renormalized. Rows that cancel out give no direction.
    const sum = new Float64Array(d);
    for (let r = r0; r !== -1; r = next[r]!) {
      for (let j = 0; j < d; j++) sum[j]! += x[r * d + j]!;
    }
    const norm = Math.sqrt(sum.reduce((t, v) => t + v * v, 0));
    if (!(norm > 0)) continue;
    for (let j = 0; j < d; j++) a[j] = sum[j]! / norm;
    number[g] = F++;
  }
  for (let f = 0; f < anchorOf.length; f++) if (anchorOf[f]! >= 0) anchorOf[f] = number[anchorOf[f]!]!;
  if (F < 2) throw new MetricsError(`layer ${layer}: ${F} fact(s) have a usable anchor row; ISS needs at least 2`);
  return { anchorOf, A: lay.anchors.subarray(0, F * d), F };
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
  const { layer, n: N, d, kernels: k } = data;
  const lay = issLayout(data);
  const { fact, family } = lay;
  const x = data.buffer(N * d);
  const valid = Uint8Array.from(data.finite);
  const excluded = k.centreRows(data.h16 ?? data.h, N, d, valid, x);
  data.release?.(); // the rest reads the centred rows
  const { anchorOf, A, F } = anchorVectors(layer, x, valid, lay, N, d);
  const q = new Int32Array(N);
  let nq = 0;
  let skipped = 0;
  for (let i = 0; i < N; i++) {
    if (!valid[i] || family[i] === -1) continue;
    if (anchorOf[fact[i]!]! >= 0) q[nq++] = i;
    else skipped++;
  }
  const rows = q.slice(0, nq);
  const own = rows.map((i) => anchorOf[fact[i]!]!);
  const above = new Int32Array(rows.length);
  await k.rank(x, rows, A, F, d, own, new Float32Array(rows.length), above);
  const ownCos = new Float64Array(rows.length);
  const otherCos = new Float64Array(rows.length);
  k.anchorCosines(x, rows, A, F, d, own, ownCos, otherCos);
  return { rows, above, ownCos, otherCos, excluded, skipped };
}

async function issRows(data: LayerData, s: MetricSettings): Promise<IssRow[]> {
  const { layer, kernels: k } = data;
  const { rows, above, ownCos, otherCos, excluded, skipped } = await issQueryScores(data);
  const { fact, family: familyOf, slot } = issLayout(data);
  const out: IssRow[] = [];
  const sel = new Int32Array(rows.length);
  for (const [index, family] of [...data.familyNames, ALL_FAMILIES].entries()) {
    let n = 0;
    for (let i = 0; i < rows.length; i++) {
      if (family === ALL_FAMILIES || familyOf[rows[i]!] === index) sel[n++] = i;
    }
    const row: IssRow = {
      layer,
      family,
      n_queries: n,
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
    if (n > 0) {
      // The family's facts numbered in order of first appearance among its query rows.
      const id = new Int32Array(n);
      let nf = 0;
      for (let j = 0; j < n; j++) {
        const f = fact[rows[sel[j]!]!]!;
        if (slot[f] === 0) slot[f] = ++nf;
        id[j] = slot[f]! - 1;
      }
      for (let j = 0; j < n; j++) slot[fact[rows[sel[j]!]!]!] = 0;
      const size = new Int32Array(nf);
      const sums = [
        new Float64Array(nf),
        new Float64Array(nf),
        new Float64Array(nf),
        new Float64Array(nf),
        new Float64Array(nf),
      ];
      sel.subarray(0, n).forEach((i, j) => {
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
