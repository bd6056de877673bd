/**
 * Statistics for comparing models on one bank: Wilson intervals for accuracy,
 * McNemar's exact test for paired correctness, Benjamini–Hochberg adjustment,
 * and paired bootstraps over facts for differences of fact-macro means and of
 * AUROC/KTS. Every definition is written out in docs/study.md.
 */
import { DEFAULT_BOOTSTRAP } from "../defaults.js";
import { CHANCE_AUROC, fnv1a32, KTS_MIN_ANCHOR_AUROC, percentile, SortedScores } from "../metrics/stats.js";
import { Rng } from "../util/random.js";

/** The standard normal's 97.5th percentile, Φ⁻¹(0.975), for two-sided 95% intervals. */
export const Z_95 = 1.959963984540054;

/**
 * McNemar's tail sum stops at a term below this fraction of the sum: under half an ulp of it (2⁻⁵³ ≈ 1.1e-16),
 * so adding it cannot change the float64 result, and each later term is smaller still.
 */
const NEGLIGIBLE_TERM = 1e-17;

function expectCount(name: string, value: number): void {
  if (!Number.isInteger(value) || value < 0)
    throw new RangeError(`Expected non-negative integer for ${name} but received ${value}`);
}

/**
 * Wilson score interval for `successes` out of `n` at 95% (or `z`); `[0, 1]` when `n` is 0.
 * @example wilsonInterval(5, 10) // [0.2366…, 0.7633…]
 */
export function wilsonInterval(successes: number, n: number, z = Z_95): [number, number] {
  expectCount("successes", successes);
  expectCount("n", n);
  if (successes > n) throw new RangeError(`Expected successes ≤ n but received ${successes} > ${n}`);
  if (n === 0) return [0, 1];
  const p = successes / n;
  const z2 = z * z;
  const denom = 1 + z2 / n;
  const centre = (p + z2 / (2 * n)) / denom;
  const half = (z / denom) * Math.sqrt((p * (1 - p)) / n + z2 / (4 * n * n));
  // The ends are exactly 0 and 1 at the extremes; rounding must not move them.
  return [successes === 0 ? 0 : Math.max(0, centre - half), successes === n ? 1 : Math.min(1, centre + half)];
}

/**
 * McNemar's exact test: two-sided binomial test of the discordant pairs,
 * `p = min(1, 2·P(X ≤ min(b, c)))` with `X ~ Bin(b + c, ½)`; 1 when `b + c = 0`.
 * Stable for any `b + c` (terms summed relative to the largest, in log space);
 * a p-value below ~1e-308 underflows to 0.
 * @example mcnemarExact(0, 5) // 0.0625
 */
export function mcnemarExact(b: number, c: number): number {
  expectCount("b", b);
  expectCount("c", c);
  const n = b + c;
  if (n === 0) return 1;
  const k = Math.min(b, c);
  // log P(X = k) = log C(n, k) − n·log 2, built from the ratios C(n, i+1)/C(n, i) = (n − i)/(i + 1);
  // Kahan summation keeps the error of the ~n/2 logarithms near one ulp of the total.
  let logTerm = -n * Math.LN2;
  let carry = 0;
  for (let i = 0; i < k; i++) {
    const y = Math.log((n - i) / (i + 1)) - carry;
    const t = logTerm + y;
    carry = t - logTerm - y;
    logTerm = t;
  }
  // P(X ≤ k) = P(X = k)·(1 + r_{k−1} + r_{k−1}·r_{k−2} + …), each ratio P(X = i−1)/P(X = i) = i/(n − i + 1) ≤ 1 for k ≤ n/2.
  let tail = 1;
  let term = 1;
  for (let i = k; i > 0; i--) {
    term *= i / (n - i + 1);
    tail += term;
    if (term < NEGLIGIBLE_TERM * tail) break;
  }
  return Math.min(1, 2 * Math.exp(logTerm + Math.log(tail)));
}

/** Two models' correctness on the queries both answered: the 2×2 table, McNemar's p and the accuracy difference A − B. */
export interface PairedCorrectness {
  /** Queries both models answered. */
  n: number;
  bothRight: number;
  /** A right, B wrong (McNemar's b). */
  onlyA: number;
  /** B right, A wrong (McNemar's c). */
  onlyB: number;
  bothWrong: number;
  /** McNemar's exact p; null when no query was answered by both (there is no test). */
  p: number | null;
  /** (onlyA − onlyB)/n: accuracy of A minus accuracy of B on the shared queries; null when n is 0. */
  difference: number | null;
}

/**
 * McNemar's exact test of two models on the same queries, joined on query id
 * (queries one model lacks are left out); `true` means answered correctly.
 * Without a query both answered there is no test, and `p` is null.
 */
export function pairedCorrectness(a: ReadonlyMap<string, boolean>, b: ReadonlyMap<string, boolean>): PairedCorrectness {
  const t = { n: 0, bothRight: 0, onlyA: 0, onlyB: 0, bothWrong: 0 };
  for (const [query, rightA] of a) {
    const rightB = b.get(query);
    if (rightB === undefined) continue;
    t.n++;
    if (rightA && rightB) t.bothRight++;
    else if (rightA) t.onlyA++;
    else if (rightB) t.onlyB++;
    else t.bothWrong++;
  }
  return {
    ...t,
    p: t.n ? mcnemarExact(t.onlyA, t.onlyB) : null,
    difference: t.n ? (t.onlyA - t.onlyB) / t.n : null,
  };
}

/**
 * Benjamini–Hochberg adjusted p-values, in the input's order: for the i-th
 * smallest of m p-values, `min(1, min_{j ≥ i} m·p_(j)/j)`. Entries that are
 * null (no test) stay null and do not count in m.
 * @example benjaminiHochberg([0.01, 0.04, 0.03]) // [0.03, 0.04, 0.04]
 */
export function benjaminiHochberg(pValues: readonly (number | null)[]): (number | null)[] {
  const tested: number[] = [];
  pValues.forEach((p, i) => {
    if (p === null) return;
    if (!(p >= 0 && p <= 1)) throw new RangeError(`Expected a p-value in [0, 1] at index ${i} but received ${p}`);
    tested.push(i);
  });
  const m = tested.length;
  // Ascending by p; equal p-values keep their input order (the adjustment is the same for ties).
  tested.sort((x, y) => pValues[x]! - pValues[y]! || x - y);
  const out: (number | null)[] = pValues.map(() => null);
  let running = 1;
  for (let rank = m; rank >= 1; rank--) {
    const i = tested[rank - 1]!;
    running = Math.min(running, (m * pValues[i]!) / rank);
    out[i] = running;
  }
  return out;
}

/**
 * Where a paired bootstrap's draws come from: the project's xoshiro128**
 * generator seeded with `seed` and the stream `fnv1a32("paired/" + key)`, the
 * way the metrics seed theirs, so one comparison gets the same draws whatever
 * else is compared and in whatever order.
 */
export interface PairedStream {
  seed: number;
  stream: number;
}

/** The stream of the paired bootstrap named `key` (e.g. `iss/0.75/paraphrase`). */
export function pairedStream(seed: number, key: string): PairedStream {
  return { seed: seed >>> 0, stream: fnv1a32(`paired/${key}`) };
}

/**
 * Draws fact resamples: each call fills `out` (length n) with n fact indices
 * drawn uniformly with replacement from [0, n). Successive calls give the
 * successive replicates of the stream; the draws are those of the metrics'
 * bootstrap for the same seed and stream.
 */
export function factSampler(n: number, s: PairedStream): (out: Int32Array) => Int32Array {
  const rng = new Rng(s.seed, s.stream);
  return (out) => {
    for (let i = 0; i < n; i++) out[i] = rng.int(n);
    return out;
  };
}

/** Options of the paired bootstraps. */
export interface PairedBootstrapOptions {
  /** Replicates (default DEFAULT_BOOTSTRAP, 1000). */
  replicates?: number;
  /** Where the draws come from; see {@link pairedStream}. */
  stream: PairedStream;
}

/** A paired comparison of model A with model B: the point difference A − B and its 95% percentile interval. */
export interface PairedDifference {
  /** A − B on the facts both models have; null where either statistic is undefined. */
  difference: number | null;
  /** 2.5th and 97.5th percentiles of the replicates' differences; null when no replicate is defined. */
  low: number | null;
  high: number | null;
  /** Facts resampled: those with rows for both models. */
  nFacts: number;
  /** Facts with rows for one model only, left out of the comparison. */
  onlyA: number;
  onlyB: number;
  /** Replicates whose difference was undefined (e.g. a class missing from the drawn facts), left out of the interval. */
  undefinedReplicates: number;
}

/** A statistic of one model recomputed under fact weights (1 each for the point estimate, the draw counts for a replicate). */
type WeightedStatistic = (weight: Float64Array) => number | null;

/**
 * The paired bootstrap's core: every replicate draws one multiset of the
 * common facts and recomputes both models' statistics under it.
 */
function pairedOverFacts(
  nFacts: number,
  statA: WeightedStatistic,
  statB: WeightedStatistic,
  o: PairedBootstrapOptions,
  onlyA: number,
  onlyB: number,
): PairedDifference {
  const b = o.replicates ?? DEFAULT_BOOTSTRAP;
  expectCount("replicates", b);
  const empty = { nFacts, onlyA, onlyB };
  if (nFacts === 0) return { difference: null, low: null, high: null, ...empty, undefinedReplicates: b };
  const ones = new Float64Array(nFacts).fill(1);
  const a0 = statA(ones);
  const b0 = statB(ones);
  const difference = a0 === null || b0 === null ? null : a0 - b0;
  const draw = factSampler(nFacts, o.stream);
  const idx = new Int32Array(nFacts);
  const counts = new Float64Array(nFacts);
  const reps: number[] = [];
  for (let r = 0; r < b; r++) {
    draw(idx);
    counts.fill(0);
    for (let i = 0; i < nFacts; i++) counts[idx[i]!]!++;
    const ra = statA(counts);
    const rb = statB(counts);
    if (ra !== null && rb !== null && Number.isFinite(ra - rb)) reps.push(ra - rb);
  }
  const defined = reps.length > 0;
  return {
    difference,
    low: defined ? percentile(reps, 2.5) : null,
    high: defined ? percentile(reps, 97.5) : null,
    ...empty,
    undefinedReplicates: b - reps.length,
  };
}

/** Facts of both models in code-unit order (the resampling order), and the count of facts each has alone. */
function commonFacts(a: readonly string[], b: readonly string[]): { facts: string[]; onlyA: number; onlyB: number } {
  const inA = new Set(a);
  const inB = new Set(b);
  const facts = [...inA].filter((f) => inB.has(f)).sort((x, y) => (x < y ? -1 : x > y ? 1 : 0));
  return { facts, onlyA: inA.size - facts.length, onlyB: inB.size - facts.length };
}

/** One model's rows of a per-row value (e.g. an ISS margin), with the fact of each row. */
export interface FactValues {
  fact: readonly string[];
  value: ArrayLike<number>;
}

function factMeans(rows: FactValues, index: Map<string, number>): Float64Array {
  if (rows.value.length !== rows.fact.length)
    throw new RangeError(
      `Expected one fact per value but received ${rows.fact.length} facts for ${rows.value.length} values`,
    );
  const sum = new Float64Array(index.size);
  const count = new Float64Array(index.size);
  for (let r = 0; r < rows.fact.length; r++) {
    const f = index.get(rows.fact[r]!);
    if (f === undefined) continue;
    sum[f]! += rows.value[r]!;
    count[f]!++;
  }
  return sum.map((s, f) => s / count[f]!);
}

/**
 * Paired bootstrap over facts of the difference of two models' fact-macro means
 * (mean within each fact, then over facts), A − B. Each replicate draws one
 * multiset of the facts both models have and weights both models' fact means
 * by it; facts, not rows, are resampled.
 */
export function pairedFactMeanDifference(a: FactValues, b: FactValues, o: PairedBootstrapOptions): PairedDifference {
  const { facts, onlyA, onlyB } = commonFacts(a.fact, b.fact);
  const index = new Map(facts.map((f, i) => [f, i]));
  const meanA = factMeans(a, index);
  const meanB = factMeans(b, index);
  const weighted = (means: Float64Array) => (w: Float64Array) => {
    let s = 0;
    for (let f = 0; f < means.length; f++) s += w[f]! * means[f]!;
    return s / means.length;
  };
  return pairedOverFacts(facts.length, weighted(meanA), weighted(meanB), o, onlyA, onlyB);
}

/** One model's scored rows: a probe score, the label (1 correct, 0 incorrect) and the fact of each row. */
export interface ScoredRows {
  fact: readonly string[];
  score: ArrayLike<number>;
  label: ArrayLike<number>;
}

/** AUROC of `rows` with each row weighted by its fact's weight; rows of facts outside `index` weigh 0. */
function factWeightedAuroc(rows: ScoredRows, index: Map<string, number>): WeightedStatistic {
  const n = rows.fact.length;
  if (rows.score.length !== n || rows.label.length !== n)
    throw new RangeError(
      `Expected one fact, score and label per row but received ${n}, ${rows.score.length}, ${rows.label.length}`,
    );
  const outside = index.size;
  const factOfRow = Int32Array.from(rows.fact, (f) => index.get(f) ?? outside);
  const sorted = new SortedScores(Float64Array.from(rows.score), Uint8Array.from(rows.label), factOfRow, outside + 1);
  const w = new Float64Array(outside + 1);
  return (weight) => {
    w.set(weight);
    return sorted.auroc(w);
  };
}

/**
 * Paired bootstrap over facts of the difference of two models' AUROCs on one
 * family (Mann–Whitney, ties ½, rows weighted by how often their fact is drawn).
 */
export function pairedAurocDifference(a: ScoredRows, b: ScoredRows, o: PairedBootstrapOptions): PairedDifference {
  const { facts, onlyA, onlyB } = commonFacts(a.fact, b.fact);
  const index = new Map(facts.map((f, i) => [f, i]));
  return pairedOverFacts(facts.length, factWeightedAuroc(a, index), factWeightedAuroc(b, index), o, onlyA, onlyB);
}

/** One model's rows for KTS: a perturbation family's scored rows and the anchor rows they are measured against. */
export interface KtsRows {
  family: ScoredRows;
  anchor: ScoredRows;
}

function kts(rows: KtsRows, index: Map<string, number>): WeightedStatistic {
  const family = factWeightedAuroc(rows.family, index);
  const anchor = factWeightedAuroc(rows.anchor, index);
  return (w) => {
    const f = family(w);
    const a = anchor(w);
    if (f === null || a === null || a <= KTS_MIN_ANCHOR_AUROC) return null;
    return (f - CHANCE_AUROC) / (a - CHANCE_AUROC);
  };
}

/**
 * Paired bootstrap over facts of the difference of two models' KTS on one
 * family: each replicate recomputes, under one draw of the facts both models
 * have (in the family or the anchor rows), the family's and the anchor's AUROC
 * of both models.
 */
export function pairedKtsDifference(a: KtsRows, b: KtsRows, o: PairedBootstrapOptions): PairedDifference {
  const { facts, onlyA, onlyB } = commonFacts(
    [...a.family.fact, ...a.anchor.fact],
    [...b.family.fact, ...b.anchor.fact],
  );
  const index = new Map(facts.map((f, i) => [f, i]));
  return pairedOverFacts(facts.length, kts(a, index), kts(b, index), o, onlyA, onlyB);
}
