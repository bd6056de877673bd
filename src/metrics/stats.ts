/** Small statistics shared by ISS and KTS: folds, percentiles, bootstrap streams, AUROC, grouping. */
import { sortedAuroc } from "../kernels/typescript/bootstrap.js";
import type { SortedArrays } from "../kernels/types.js";

const utf8 = new TextEncoder();

/** The AUROC of scores that carry no signal; KTS compares AUROCs above it. */
export const CHANCE_AUROC = 0.5;
/**
 * KTS is null where the anchors' AUROC is at most this (docs/metrics.md#kts-fields): the probe learned
 * nothing to transfer, and a ratio over an anchor AUROC this close to chance would turn noise into transfer.
 */
export const KTS_MIN_ANCHOR_AUROC = 0.55;

/** FNV-1a, 32 bits, over the UTF-8 bytes of `text` (docs/metrics.md#kts-definition: folds). */
export function fnv1a32(text: string): number {
  let h = 0x811c9dc5;
  for (const byte of utf8.encode(text)) {
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

/**
 * Where one bootstrap's draws come from: xoshiro128** (src/util/random.ts, and
 * its twin in native/bootstrap.cc; the bootstrap kernels draw with it) seeded with the user's seed and a stream
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
    /** The rows already in {@link scoreOrder}'s order, where the caller has it (default: sorted here). */
    order: Int32Array = scoreOrder(scores),
  ) {
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
function scoreOrder(scores: Float64Array): Int32Array {
  return Int32Array.from(scores.keys()).sort((a, b) => scores[a]! - scores[b]! || a - b);
}

/** Group-by helper: dense ids for the distinct values of `keys` over `rows`, in order of first appearance. */
export function indexBy(keys: readonly string[], rows: Int32Array | number[]): { id: Int32Array; names: string[] } {
  const map = new Map<string, number>();
  const id = new Int32Array(rows.length);
  const names: string[] = [];
  for (let i = 0; i < rows.length; i++) {
    const k = keys[rows[i]!]!;
    let v = map.get(k);
    if (v === undefined) {
      v = names.length;
      map.set(k, v);
      names.push(k);
    }
    id[i] = v;
  }
  return { id, names };
}
