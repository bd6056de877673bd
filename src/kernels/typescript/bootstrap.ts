/**
 * Bootstrap replicates in TypeScript: the same generator (src/util/random.ts)
 * and the same sums in the same order as native/bootstrap.cc, so the
 * replicates are equal bit for bit.
 */
import { Rng } from "../../util/random.js";
import type { AurocJob, SortedArrays } from "../types.js";

/** Draws `b` multisets of `n` items with replacement; calls `replicate` with each draw's counts. */
function draws(
  n: number,
  b: number,
  seed: number,
  stream: number,
  replicate: (counts: Int32Array, r: number) => void,
): void {
  const rng = new Rng(seed, stream);
  const counts = new Int32Array(n);
  for (let r = 0; r < b; r++) {
    counts.fill(0);
    for (let i = 0; i < n; i++) counts[rng.int(n)]!++;
    replicate(counts, r);
  }
}

/** Replicates of the mean over facts of `values` (one per fact). */
export function bootstrapMeanTs(
  seed: number,
  stream: number,
  values: Float64Array,
  b: number,
  out: Float64Array,
): void {
  const n = values.length;
  draws(n, b, seed, stream, (counts, r) => {
    let s = 0;
    for (let f = 0; f < n; f++) s += counts[f]! * values[f]!;
    out[r] = s / n;
  });
}

/** Each job's replicates of a group's fact-weighted AUROC, optionally paired (see Kernels.bootstrapAuroc). */
export function bootstrapAurocTs(jobs: readonly AurocJob[]): void {
  for (const { seed, stream, group: g, b, out, paired, toPaired, pairedOut } of jobs) {
    const pw = new Float64Array(paired ? paired.nFacts : 0);
    draws(g.nFacts, b, seed, stream, (counts, r) => {
      out[r] = sortedAuroc(g, counts) ?? NaN;
      if (paired) {
        pw.fill(0);
        for (let f = 0; f < g.nFacts; f++) if (toPaired![f]! >= 0) pw[toPaired![f]!]! += counts[f]!;
        pairedOut![r] = sortedAuroc(paired, pw) ?? NaN;
      }
    });
  }
}

/** One weighted AUROC pass over rows sorted by score (ties ½); null when a class has no weight. */
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
