/**
 * KTS's order of rows by (score, row): the native core's radix sort and the
 * TypeScript one against the comparison sort on scores with ties, both zeros,
 * both signs, infinities and magnitudes across the float64 range, and the
 * comparison's order where a score is NaN. Then the groups taken in that
 * order, native against TypeScript, their AUROCs against counting every pair.
 */
import { describe, expect, it } from "vitest";

import { nativeOrderByScore } from "../../src/kernels/native.js";
import {
  orderByScore,
  orderByScoreComparing,
  orderByScoreRadix,
  sortedGroups,
  type GroupPlaces,
} from "../../src/metrics/score-order.js";
import { Rng } from "../../src/util/random.js";

/** Every labelled row of a store of `n`, one in three left out, with scores drawn by `draw`. */
function case_(n: number, draw: (rng: Rng) => number): { rows: Int32Array; score: Float64Array } {
  const rng = new Rng(n);
  const rows = Int32Array.from({ length: n }, (_, i) => i).filter((i) => i % 3 !== 1);
  const score = Float64Array.from({ length: n }, () => draw(rng));
  return { rows, score };
}

describe("orderByScore", () => {
  it.each([
    ["distinct scores", (r: Rng) => r.normal() * 3],
    ["coarse scores, many ties", (r: Rng) => Math.round(r.normal() * 4) / 4],
    ["both zeros and both signs", (r: Rng) => [0, -0, 1e-300, -1e-300, 2, -2][r.int(6)]!],
    [
      "infinities and the float64 range",
      (r: Rng) => [Infinity, -Infinity, 1e308, -1e308, 5e-324, r.normal()][r.int(6)]!,
    ],
    ["scores a few units in the last place apart", (r: Rng) => (r.int(2) ? 1 : -3) + r.int(5000) * 2 ** -52],
    ["magnitudes from 1e-200 to 1e200", (r: Rng) => (r.normal() < 0 ? -1 : 1) * 10 ** (r.normal() * 70)],
  ])("orders %s as the comparison sort does", (_name, draw) => {
    for (const n of [0, 1, 2, 1000, 20011]) {
      const { rows, score } = case_(n, draw);
      const want = orderByScoreComparing(rows, score);
      expect(orderByScoreRadix(rows, score)).toEqual(want);
      expect(nativeOrderByScore!(rows, score)).toEqual(want);
      expect(orderByScore(rows, score)).toEqual(want);
    }
  });

  it("orders rows by score, equal scores (−0 with +0) in row order", () => {
    const score = Float64Array.of(2, -0, 1, 0, 2, -1);
    for (const order of [orderByScoreRadix, nativeOrderByScore!]) {
      expect([...order(Int32Array.of(0, 1, 2, 3, 4, 5), score)!]).toEqual([5, 1, 3, 2, 0, 4]);
    }
  });

  it("puts NaN scores last, in row order", () => {
    const score = Float64Array.of(NaN, 1, 2, NaN, -1, 1);
    const rows = Int32Array.of(0, 1, 2, 3, 4, 5);
    for (const order of [orderByScore, orderByScoreComparing, orderByScoreRadix]) {
      expect([...order(rows, score)]).toEqual([4, 1, 5, 2, 0, 3]);
    }
  });

  it("leaves a NaN score to the comparison sort", () => {
    const { rows, score } = case_(500, (r) => (r.int(50) === 0 ? NaN : r.normal()));
    expect([...orderByScoreComparing(rows, score)].sort((a, b) => a - b)).toEqual([...rows]); // each row once
    expect(nativeOrderByScore!(rows, score)).toBeNull();
    expect(orderByScoreRadix(rows, score)).toEqual(orderByScoreComparing(rows, score));
    expect(orderByScore(rows, score)).toEqual(orderByScoreComparing(rows, score));
  });

  it("refuses rows outside the scores in the native core", () => {
    expect(() => nativeOrderByScore!(Int32Array.of(0, 3), new Float64Array(3))).toThrow(/rows below the score count/);
  });
});

/**
 * A layer of `n` rows for three groups and the pooled one: four in five rows labelled, each in a random group
 * (pooled unless it is group 0) with a random fact, scores on a coarse grid (many ties), labels with `pPositive`.
 */
function groupCase(
  n: number,
  pPositive: number,
): { order: Int32Array; score: Float64Array; y: Uint8Array; places: GroupPlaces } {
  const rng = new Rng(n + 7);
  const nFacts = [5, 7, 3, 11];
  const groupOf = new Int32Array(n).fill(-1);
  const factOf = new Int32Array(n).fill(-1);
  const pooledFactOf = new Int32Array(n).fill(-1);
  const rows = [0, 0, 0, 0];
  const labelled: number[] = [];
  for (let r = 0; r < n; r++) {
    if (rng.int(5) === 0) continue;
    labelled.push(r);
    const g = rng.int(3);
    groupOf[r] = g;
    factOf[r] = rng.int(nFacts[g]!);
    rows[g]!++;
    if (g > 0) {
      pooledFactOf[r] = rng.int(nFacts[3]!);
      rows[3]!++;
    }
  }
  const score = Float64Array.from({ length: n }, () => Math.round(rng.normal() * 3) / 2);
  const y = Uint8Array.from({ length: n }, () => (rng.uniform() < pPositive ? 1 : 0));
  const order = orderByScoreComparing(Int32Array.from(labelled), score);
  return { order, score, y, places: { groupOf, factOf, pooledFactOf, rows, nFacts } };
}

/** AUROC by counting every (positive, negative) pair of a group's rows, a tie counting ½; null without both labels. */
function pairAuroc(members: number[], score: Float64Array, y: Uint8Array): number | null {
  let wins = 0;
  let pairs = 0;
  for (const p of members.filter((r) => y[r])) {
    for (const q of members.filter((r) => !y[r])) {
      pairs++;
      wins += score[p]! > score[q]! ? 1 : score[p] === score[q] ? 0.5 : 0;
    }
  }
  return pairs ? wins / pairs : null;
}

describe("sortedGroups", () => {
  it.each([
    [0, 0.5],
    [1, 0.5],
    [60, 0.5],
    [3000, 0.3],
    [200, 1],
  ])("takes %i rows into groups in the native core as in TypeScript, AUROCs as pairs count", (n, pPositive) => {
    const { order, score, y, places } = groupCase(n, pPositive);
    const native = sortedGroups(order, score, y, places);
    const ts = sortedGroups(order, score, y, places, false);
    expect(native).toEqual(ts);
    for (let g = 0; g < 4; g++) {
      const members = [...order].filter((r) => (g === 3 ? places.pooledFactOf[r]! >= 0 : places.groupOf[r] === g));
      expect(ts.auroc[g]).toBe(pairAuroc(members, score, y));
      const a = ts.arrays[g]!;
      expect([...a.label]).toEqual(members.map((r) => y[r]));
      expect([...a.fact]).toEqual(members.map((r) => (g === 3 ? places.pooledFactOf[r] : places.factOf[r])));
      const ties = members.flatMap((r, i) => (i === 0 || score[r] !== score[members[i - 1]!] ? [i] : []));
      expect([...a.ties]).toEqual([...ties, members.length]);
    }
  });

  it("marks a run of equal scores once, −0 with +0", () => {
    const score = Float64Array.of(0, -0, 1, 1, 2);
    const places: GroupPlaces = {
      groupOf: Int32Array.of(0, 0, 0, 0, 0),
      factOf: Int32Array.of(0, 1, 0, 1, 0),
      pooledFactOf: Int32Array.of(-1, -1, -1, -1, -1),
      rows: [5, 0],
      nFacts: [2, 0],
    };
    const y = Uint8Array.of(0, 1, 0, 1, 1);
    for (const native of [true, false]) {
      const { arrays, auroc } = sortedGroups(Int32Array.of(0, 1, 2, 3, 4), score, y, places, native);
      expect([...arrays[0]!.ties]).toEqual([0, 2, 4, 5]);
      expect([...arrays[1]!.ties]).toEqual([0]);
      // Positives 1, 3, 4 against negatives 0, 2: ½ + 0 + 1 + ½ + 1 + 1 = 4 of 6.
      expect(auroc).toEqual([4 / 6, null]);
    }
  });

  it("refuses groups not sized to their rows in the native core", () => {
    const { order, score, y, places } = groupCase(60, 0.5);
    const short = { ...places, rows: places.rows.map((r, g) => (g === 1 ? r - 1 : r)) };
    expect(() => sortedGroups(order, score, y, short)).toThrow(/sized to the rows it takes/);
    const long = { ...places, rows: places.rows.map((r, g) => (g === 2 ? r + 1 : r)) };
    expect(() => sortedGroups(order, score, y, long)).toThrow(/sized to the rows it takes/);
  });
});
