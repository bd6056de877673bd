/**
 * KTS's order of rows by (score, row): the native core's radix sort and the
 * TypeScript one against the comparison sort on scores with ties, both zeros,
 * both signs, infinities and magnitudes across the float64 range, and the
 * comparison's order where a score is NaN.
 */
import { describe, expect, it } from "vitest";

import { nativeOrderByScore } from "../../src/kernels/native.js";
import { orderByScore, orderByScoreComparing, orderByScoreRadix } from "../../src/metrics/score-order.js";
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

  it("leaves a NaN score to the comparison sort", () => {
    const { rows, score } = case_(500, (r) => (r.int(50) === 0 ? NaN : r.normal()));
    expect(nativeOrderByScore!(rows, score)).toBeNull();
    expect(orderByScoreRadix(rows, score)).toEqual(orderByScoreComparing(rows, score));
    expect(orderByScore(rows, score)).toEqual(orderByScoreComparing(rows, score));
  });

  it("refuses rows outside the scores in the native core", () => {
    expect(() => nativeOrderByScore!(Int32Array.of(0, 3), new Float64Array(3))).toThrow(/rows below the score count/);
  });
});
