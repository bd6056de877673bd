/**
 * ISS and KTS over a hidden-state store, exactly as docs/metrics.md (after
 * ../shared/spec/metrics.md) defines them. One layer at a time: the layer is
 * streamed in row blocks into one float32 matrix, KTS reads it raw, then ISS
 * centres and normalizes it in place; nothing else of its size is held.
 */
import { availableParallelism } from "node:os";

import { HsmError } from "../errors.js";
import { kernels } from "../native/index.js";
import { ANCHOR_FAMILY } from "../bank/prompt.js";
import type { Manifest } from "../store/manifest.js";
import { StoreReader } from "../store/reader.js";
import { openBackend, type BackendName, type MetricsBackend } from "./backends.js";
import { NO_LABEL, readLabels } from "./labels.js";
import { trainProbes } from "./probe.js";
import { bootstrapStream, DEFAULT_BOOTSTRAP, DEFAULT_SEED, fnv1a32, interval, SortedScores } from "./stats.js";

export const ALL_FAMILIES = "all";
const threads = availableParallelism();

export interface MetricsOptions {
  metrics?: ("iss" | "kts")[];
  /** Scored JSONL; needed for KTS. */
  scored?: string;
  backend?: BackendName;
  probeC?: number;
  folds?: number;
  bootstrap?: number;
  seed?: number;
  /** Stored layers to compute (default: all). */
  layers?: number[];
  /** Families to report (default: all); "all" pools every non-anchor family regardless. */
  families?: string[];
  allowIncomplete?: boolean;
  abstainAsIncorrect?: boolean;
  allowMissingLabels?: boolean;
  onProgress?: (layer: number, phase: string) => void;
}

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

export interface MetricsResult {
  /** The manifest of the store the metrics were computed over (for the output files). */
  manifest: Manifest;
  config: Record<string, unknown>;
  backend: { name: string; tfjs: string; simd: string };
  iss: IssRow[];
  kts: KtsRow[];
}

export class MetricsError extends HsmError {}

/** Group-by helper: dense ids for the distinct values of `keys` over `rows`. */
function indexBy(keys: readonly string[], rows: Int32Array | number[]): { id: Int32Array; names: string[] } {
  const map = new Map<string, number>();
  const id = new Int32Array(rows.length);
  const names: string[] = [];
  rows.forEach((r, i) => {
    const k = keys[r]!;
    let v = map.get(k);
    if (v === undefined) {
      v = names.length;
      map.set(k, v);
      names.push(k);
    }
    id[i] = v;
  });
  return { id, names };
}

export async function computeMetrics(store: string, o: MetricsOptions = {}): Promise<MetricsResult> {
  const metrics = o.metrics ?? ["iss", "kts"];
  const C = o.probeC ?? 0.01;
  const K = o.folds ?? 5;
  const B = o.bootstrap ?? DEFAULT_BOOTSTRAP;
  const seed = o.seed ?? DEFAULT_SEED;
  if (!(C > 0)) throw new MetricsError(`Expected a positive --probe-c but received ${C}`);
  if (!Number.isSafeInteger(K) || K < 2) throw new MetricsError(`Expected --folds of at least 2 but received ${K}`);
  if (!Number.isSafeInteger(B) || B < 1) throw new MetricsError(`Expected --bootstrap of at least 1 but received ${B}`);
  const reader = await StoreReader.open(store, { allowIncomplete: o.allowIncomplete });
  try {
    const m = reader.manifest;
    const N = reader.readableRows;
    const d = reader.dModel;
    const layers = o.layers ?? m.layers;
    for (const l of layers) if (!m.layers.includes(l)) throw new MetricsError(`${store}: layer ${l} is not stored (stored: ${m.layers.join(", ")})`);
    const families = m.condition_families.slice(0, N);
    const facts = m.fact_ids.slice(0, N);
    const familyNames = [...new Set(families)].filter((f) => f !== ANCHOR_FAMILY).sort();
    const report = (f: string) => !o.families || o.families.includes(f);
    let labels: Uint8Array | undefined;
    if (metrics.includes("kts")) {
      if (!o.scored) throw new MetricsError("KTS needs the scored file: pass --scored SCORED.jsonl (or --metrics iss)");
      labels = await readLabels(o.scored, m.query_ids.slice(0, N), o);
    }
    const backend = await openBackend(o.backend ?? "auto");
    const h = new Float32Array(N * d);
    const result: MetricsResult = {
      manifest: m,
      config: {
        metrics,
        store,
        scored: o.scored ?? null,
        backend: backend.name,
        probe_c: C,
        folds: K,
        fold_rule: "fnv1a32(utf8(fact_id)) mod K",
        bootstrap: B,
        seed,
        generator: "xoshiro128** seeded by (seed, fnv1a32(metric/layer/family))",
        layers,
        families: o.families ?? null,
        allow_incomplete: Boolean(o.allowIncomplete),
        abstain_as_incorrect: Boolean(o.abstainAsIncorrect),
        allow_missing_labels: Boolean(o.allowMissingLabels),
        probe_max_iterations: 2000,
        probe_tolerance: "max |gradient| <= 1e-5 * C * n_train",
        rows: N,
        d_model: d,
      },
      backend: { name: backend.name, tfjs: backend.tfjs, simd: kernels().simd },
      iss: [],
      kts: [],
    };
    for (const layer of layers) {
      o.onProgress?.(layer, "read");
      // Stream the layer in row blocks into one float32 matrix; note non-finite rows.
      const finite = new Uint8Array(N).fill(1);
      for await (const block of reader.blocks(layer, 4096)) {
        kernels().f16ToF32(block.data, h.subarray(block.start * d, (block.start + block.count) * d));
        if (kernels().f16Stats(block.data).nonfinite === 0) continue; // the usual case: nothing to look for
        for (let i = 0; i < block.count; i++) {
          const row = block.data.subarray(i * d, (i + 1) * d);
          for (let j = 0; j < d; j++) {
            if ((row[j]! & 0x7c00) === 0x7c00) {
              finite[block.start + i] = 0;
              break;
            }
          }
        }
      }
      if (labels) {
        o.onProgress?.(layer, "kts");
        result.kts.push(...(await ktsLayer(layer, h, N, d, finite, labels, facts, families, familyNames, { C, K, B, seed, backend })).filter((r) => report(r.family)));
      }
      if (metrics.includes("iss")) {
        o.onProgress?.(layer, "iss");
        result.iss.push(...(await issLayer(layer, h, N, d, finite, facts, families, familyNames, { B, seed, backend })).filter((r) => report(r.family)));
      }
    }
    return result;
  } finally {
    await reader.close();
  }
}

async function issLayer(
  layer: number,
  h: Float32Array,
  N: number,
  d: number,
  finite: Uint8Array,
  facts: string[],
  families: string[],
  familyNames: string[],
  o: { B: number; seed: number; backend: MetricsBackend },
): Promise<IssRow[]> {
  const valid = Uint8Array.from(finite);
  // Centre on the mean of the usable rows (float64 sums), normalize each row in place.
  const mu = new Float64Array(d);
  let nValid = 0;
  for (let i = 0; i < N; i++) {
    if (!valid[i]) continue;
    nValid++;
    for (let j = 0; j < d; j++) mu[j]! += h[i * d + j]!;
  }
  for (let j = 0; j < d; j++) mu[j]! /= Math.max(nValid, 1);
  let excluded = 0;
  for (let i = 0; i < N; i++) {
    if (!valid[i]) {
      excluded++;
      continue;
    }
    const row = h.subarray(i * d, (i + 1) * d);
    let ss = 0;
    for (let j = 0; j < d; j++) {
      row[j] = row[j]! - mu[j]!;
      ss += row[j]! * row[j]!;
    }
    if (ss === 0) {
      valid[i] = 0;
      excluded++;
      continue;
    }
    const inv = 1 / Math.sqrt(ss);
    for (let j = 0; j < d; j++) row[j] = row[j]! * inv;
  }
  // Anchors: one vector per fact; several anchor rows average and renormalize.
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
  const S = new Float64Array(d);
  anchorRows.forEach((rows, g) => {
    const a = A.subarray(g * d, (g + 1) * d);
    if (rows.length === 1) a.set(h.subarray(rows[0]! * d, (rows[0]! + 1) * d));
    else {
      const sum = new Float64Array(d);
      for (const r of rows) for (let j = 0; j < d; j++) sum[j]! += h[r * d + j]!;
      const norm = Math.sqrt(sum.reduce((s, v) => s + v * v, 0));
      for (let j = 0; j < d; j++) a[j] = sum[j]! / norm;
    }
    for (let j = 0; j < d; j++) S[j]! += a[j]!;
  });
  // Query rows: usable non-anchor rows of anchored facts.
  const q: number[] = [];
  let skipped = 0;
  for (let i = 0; i < N; i++) {
    if (!valid[i] || families[i] === ANCHOR_FAMILY) continue;
    if (anchorOf.has(facts[i]!)) q.push(i);
    else skipped++;
  }
  const rows = Int32Array.from(q);
  const own = Int32Array.from(q, (i) => anchorOf.get(facts[i]!)!);
  const ownScore = new Float32Array(rows.length);
  const above = new Int32Array(rows.length);
  await o.backend.rank(h, rows, A, F, d, own, ownScore, above);
  // Per row: own, other, margin (float64), rank.
  const ownCos = new Float64Array(rows.length);
  const otherCos = new Float64Array(rows.length);
  rows.forEach((r, k) => {
    const x = h.subarray(r * d, (r + 1) * d);
    const a = A.subarray(own[k]! * d, (own[k]! + 1) * d);
    let s = 0;
    let t = 0;
    for (let j = 0; j < d; j++) {
      s += x[j]! * a[j]!;
      t += x[j]! * S[j]!;
    }
    ownCos[k] = s;
    otherCos[k] = (t - s) / (F - 1);
  });
  const out: IssRow[] = [];
  for (const family of [...familyNames, ALL_FAMILIES]) {
    const sel = q.map((_, k) => k).filter((k) => family === ALL_FAMILIES || families[rows[k]!] === family);
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
      const { id, names } = indexBy(facts, sel.map((k) => rows[k]!));
      const nf = names.length;
      const size = new Int32Array(nf);
      const sums = [new Float64Array(nf), new Float64Array(nf), new Float64Array(nf), new Float64Array(nf), new Float64Array(nf)];
      sel.forEach((k, i) => {
        const f = id[i]!;
        const rank = 1 + above[k]!;
        size[f]!++;
        sums[0]![f]! += ownCos[k]! - otherCos[k]!;
        sums[1]![f]! += ownCos[k]!;
        sums[2]![f]! += otherCos[k]!;
        sums[3]![f]! += rank === 1 ? 1 : 0;
        sums[4]![f]! += 1 / rank;
      });
      const factMeans = sums.map((s) => Float64Array.from(s, (v, f) => v / size[f]!));
      const macro = (v: Float64Array) => v.reduce((a, b) => a + b, 0) / nf;
      const margins = factMeans[0]!;
      const reps = new Float64Array(o.B);
      const bs = bootstrapStream(o.seed, "iss", layer, family);
      kernels().bootstrapMean(bs.seed, bs.stream, margins, o.B, reps);
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

async function ktsLayer(
  layer: number,
  h: Float32Array,
  N: number,
  d: number,
  finite: Uint8Array,
  y: Uint8Array,
  facts: string[],
  families: string[],
  familyNames: string[],
  o: { C: number; K: number; B: number; seed: number; backend: MetricsBackend },
): Promise<KtsRow[]> {
  const excluded = finite.reduce((s, v) => s + (v ? 0 : 1), 0);
  const foldCache = new Map<string, number>();
  const fold = (f: string) => {
    let k = foldCache.get(f);
    if (k === undefined) foldCache.set(f, (k = fnv1a32(f) % o.K));
    return k;
  };
  const labelled: number[] = [];
  for (let i = 0; i < N; i++) if (finite[i] && y[i] !== NO_LABEL) labelled.push(i);
  const anchors = labelled.filter((i) => families[i] === ANCHOR_FAMILY);
  const base = (family: string, rowsOf: number[]): KtsRow => {
    const nCorrect = rowsOf.reduce((s, i) => s + (y[i] === 1 ? 1 : 0), 0);
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
  const groups = [ANCHOR_FAMILY, ...familyNames, ALL_FAMILIES].map((family) => ({
    family,
    rows: labelled.filter((i) => (family === ALL_FAMILIES ? families[i] !== ANCHOR_FAMILY : families[i] === family)),
  }));

  // Train one probe per fold on the anchors of the other folds.
  // The anchors, centred and scaled by their own statistics so that float32 products stay accurate.
  const gMean = new Float64Array(d);
  const gScale = new Float64Array(d);
  for (const r of anchors) for (let j = 0; j < d; j++) gMean[j]! += h[r * d + j]! / anchors.length;
  for (const r of anchors) for (let j = 0; j < d; j++) gScale[j]! += (h[r * d + j]! - gMean[j]!) ** 2 / anchors.length;
  for (let j = 0; j < d; j++) gScale[j] = Math.sqrt(gScale[j]!) || 1;
  const ha = new Float32Array(anchors.length * d);
  anchors.forEach((r, i) => {
    for (let j = 0; j < d; j++) ha[i * d + j] = (h[r * d + j]! - gMean[j]!) / gScale[j]!;
  });
  const ya = Uint8Array.from(anchors, (r) => y[r]!);
  const folds = Array.from({ length: o.K }, (_, k) => ({ train: Int32Array.from(anchors.keys()).filter((i) => fold(facts[anchors[i]!]!) !== k) }));
  for (const [k, f] of folds.entries()) {
    const pos = f.train.reduce((s, i) => s + ya[i]!, 0);
    if (f.train.length === 0 || pos === 0 || pos === f.train.length) {
      const only = f.train.length === 0 ? "no labelled anchor rows" : pos === 0 ? 'only "incorrect" anchors' : 'only "correct" anchors';
      return groups.map((g) => ({ ...base(g.family, g.rows), kts_null_reason: `the probe cannot be trained: training fold ${k} has ${only}` }));
    }
  }
  const products = await o.backend.products(ha, anchors.length, d);
  let probes;
  try {
    probes = await trainProbes(ha, products, ya, folds, { c: o.C, prescale: { mean: gMean, scale: gScale } });
  } finally {
    products.dispose();
  }
  const notConverged = probes.filter((p) => !p.converged).length;
  // Out-of-fold scores for every labelled row: every row against every fold's probe in one product, then its own fold's column.
  const v = new Float64Array(o.K * d);
  probes.forEach((p, k) => v.set(p.v, k * d));
  const all = new Float64Array(N * o.K);
  kernels().rowsTimes(h, N, d, v, o.K, all, threads);
  const score = new Float64Array(N);
  for (const i of labelled) {
    const k = fold(facts[i]!);
    score[i] = all[i * o.K + k]! + probes[k]!.offset;
  }

  // Each group's rows sorted once; bootstrap replicates then reweight facts in one pass.
  const prepared = (rows: number[]) => {
    const { id, names } = indexBy(facts, rows);
    return { names, sorted: new SortedScores(Float64Array.from(rows, (i) => score[i]!), Uint8Array.from(rows, (i) => y[i]!), id, names.length) };
  };
  const anchorGroup = prepared(groups[0]!.rows);
  const anchorAuroc = anchorGroup.sorted.auroc();
  const anchorFactIndex = new Map(anchorGroup.names.map((n, f) => [n, f]));

  return groups.map(({ family, rows }) => {
    const row = base(family, rows);
    row.probes_not_converged = notConverged;
    if (rows.length === 0) {
      row.kts_null_reason = "no labelled rows";
      return row;
    }
    const g = family === ANCHOR_FAMILY ? anchorGroup : prepared(rows);
    row.auroc = g.sorted.auroc();
    // For the paired anchor AUROC: which anchor fact each of this family's facts is (-1: none).
    const toAnchor = Int32Array.from(g.names, (name) => anchorFactIndex.get(name) ?? -1);
    const aucReps = new Float64Array(o.B);
    const ancReps = new Float64Array(o.B);
    const bs = bootstrapStream(o.seed, "kts", layer, family);
    // Paired: the same drawn facts decide the anchor's AUROC in each replicate.
    if (family === ANCHOR_FAMILY) kernels().bootstrapAuroc(bs.seed, bs.stream, g.sorted, o.B, aucReps);
    else kernels().bootstrapAuroc(bs.seed, bs.stream, g.sorted, o.B, aucReps, anchorGroup.sorted, toAnchor, ancReps);
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
    return row;
  });
}
