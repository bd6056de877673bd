/** Small statistics shared by ISS and KTS: folds, percentiles, bootstrap, AUROC. */
import { Rng } from "../util/random.js";

/** FNV-1a, 32 bits, over the UTF-8 bytes of `text` (metrics.md: folds). */
export function fnv1a32(text: string): number {
  let h = 0x811c9dc5;
  for (const byte of new TextEncoder().encode(text)) {
    h ^= byte;
    h = Math.imul(h, 0x01000193) >>> 0;
  }
  return h >>> 0;
}

/** NumPy's default percentile (linear interpolation between order statistics), q in [0, 100]. */
export function percentile(values: Float64Array | number[], q: number): number {
  const v = Float64Array.from(values).sort();
  if (v.length === 0) return NaN;
  const pos = ((v.length - 1) * q) / 100;
  const lo = Math.floor(pos);
  const hi = Math.ceil(pos);
  return v[lo]! + (v[hi]! - v[lo]!) * (pos - lo);
}

export const DEFAULT_SEED = 20260101;
export const DEFAULT_BOOTSTRAP = 1000;

/**
 * Where one bootstrap's draws come from: xoshiro128** (src/util/random.ts, and
 * its twin in native/bootstrap.cc) seeded with the user's seed and a stream
 * derived from the metric, layer and family, so every (layer, family) gets the
 * same draws on every backend and in any order.
 */
export interface BootstrapStream {
  seed: number;
  stream: number;
}

export function bootstrapStream(seed: number, metric: string, layer: number, family: string): BootstrapStream {
  return { seed: seed >>> 0, stream: fnv1a32(`${metric}/${layer}/${family}`) };
}

/** Draws `b` multisets of `n` items with replacement; calls `replicate` with each draw's counts. */
export function bootstrap(n: number, b: number, s: BootstrapStream, replicate: (counts: Int32Array) => number): Float64Array {
  const rng = new Rng(s.seed, s.stream);
  const out = new Float64Array(b);
  const counts = new Int32Array(n);
  for (let r = 0; r < b; r++) {
    counts.fill(0);
    for (let i = 0; i < n; i++) counts[rng.int(n)]!++;
    out[r] = replicate(counts);
  }
  return out;
}

/** Replicates of the mean over facts of `values` (one per fact). TypeScript twin of native bootstrapMean. */
export function bootstrapMeanTs(seed: number, stream: number, values: Float64Array, b: number, out: Float64Array): void {
  const n = values.length;
  out.set(
    bootstrap(n, b, { seed, stream }, (counts) => {
      let s = 0;
      for (let f = 0; f < n; f++) s += counts[f]! * values[f]!;
      return s / n;
    }),
  );
}

/** The arrays of a {@link SortedScores}, as the native kernel takes them. */
export interface SortedArrays {
  fact: Int32Array;
  label: Uint8Array;
  ties: Int32Array;
  nFacts: number;
}

/**
 * Replicates of a group's fact-weighted AUROC (NaN where a class has no
 * weight); with `paired`, also the paired group's AUROC under the same draw,
 * each fact's count carried to `toPaired[f]`. TypeScript twin of native bootstrapAuroc.
 */
export function bootstrapAurocTs(
  seed: number,
  stream: number,
  g: SortedArrays,
  b: number,
  out: Float64Array,
  paired?: SortedArrays,
  toPaired?: Int32Array,
  pairedOut?: Float64Array,
): void {
  const pw = new Float64Array(paired ? paired.nFacts : 0);
  let r = 0;
  bootstrap(g.nFacts, b, { seed, stream }, (counts) => {
    out[r] = sortedAuroc(g, counts) ?? NaN;
    if (paired) {
      pw.fill(0);
      for (let f = 0; f < g.nFacts; f++) if (toPaired![f]! >= 0) pw[toPaired![f]!]! += counts[f]!;
      pairedOut![r] = sortedAuroc(paired, pw) ?? NaN;
    }
    r++;
    return 0;
  });
}

/** One weighted AUROC pass over rows sorted by score. */
export function sortedAuroc(g: SortedArrays, factWeight?: Float64Array | Int32Array): number | null {
  const { fact, label, ties } = g;
  let negBelow = 0;
  let sumPos = 0;
  let wins = 0;
  for (let t = 0; t + 1 < ties.length; t++) {
    let pos = 0;
    let neg = 0;
    for (let i = ties[t]!; i < ties[t + 1]!; i++) {
      const w = factWeight ? factWeight[fact[i]!]! : 1;
      if (label[i]) pos += w;
      else neg += w;
    }
    wins += pos * (negBelow + neg / 2);
    negBelow += neg;
    sumPos += pos;
  }
  if (sumPos === 0 || negBelow === 0) return null;
  return wins / (sumPos * negBelow);
}

/** 95% percentile interval, skipping replicates that are not numbers. */
export function interval(replicates: Float64Array): [number | null, number | null] {
  const ok = replicates.filter((x) => Number.isFinite(x));
  if (ok.length === 0) return [null, null];
  return [percentile(ok, 2.5), percentile(ok, 97.5)];
}

/**
 * A group of scored rows prepared for many weighted AUROCs: rows sorted by
 * score once, tie groups marked, each row's weight looked up by its fact.
 * {@link SortedScores.auroc} is then one linear pass per bootstrap replicate.
 */
export class SortedScores implements SortedArrays {
  readonly fact: Int32Array;
  readonly label: Uint8Array;
  /** Start of each run of equal scores in sorted order, plus the end. */
  readonly ties: Int32Array;

  constructor(
    scores: Float64Array,
    labels: Uint8Array,
    factOfRow: Int32Array,
    readonly nFacts: number,
  ) {
    const order = scoreOrder(scores);
    this.fact = Int32Array.from(order, (r) => factOfRow[r]!);
    this.label = Uint8Array.from(order, (r) => labels[r]!);
    const ties: number[] = [];
    for (let i = 0; i < order.length; i++) if (i === 0 || scores[order[i]!] !== scores[order[i - 1]!]) ties.push(i);
    ties.push(order.length);
    this.ties = Int32Array.from(ties);
  }

  /** AUROC with each row weighted by `factWeight[its fact]` (1 each when omitted); null when a class has no weight. */
  auroc(factWeight?: Float64Array | Int32Array): number | null {
    return sortedAuroc(this, factWeight);
  }
}

/** Row indices sorted by score, ascending (ties in index order). */
export function scoreOrder(scores: Float64Array): Int32Array {
  return Int32Array.from(scores.keys()).sort((a, b) => scores[a]! - scores[b]! || a - b);
}
