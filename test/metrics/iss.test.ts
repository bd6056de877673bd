/**
 * ISS on hand-computed cases. Rows are chosen so that their mean is zero and
 * their norms simple, so every field can be worked out on paper:
 *
 *   anchors  f1 (1,0,0,0)  f2 (0,1,0,0)  f3 (0,0,1,0)       S = (1,1,1,0), F = 3
 *   para     f1 (0,0,0,1)        own 0      other 0         margin 0          rank 1
 *            f2 (0,-1,0,-1)/√2   own -1/√2  other 0         margin -1/√2      rank 3
 *   typo     f1 (-1,0,-1,0)/√2   own -1/√2  other -1/(2√2)  margin -1/(2√2)   rank 2 (a tie with f3's anchor does not count)
 */
import { join } from "node:path";

import { describe, expect, it } from "vitest";

import { computeMetrics, type IssRow } from "../../src/metrics/compute.js";
import { BACKENDS } from "../helpers/backends.js";
import { referenceDraws, referenceFnv1a, referencePercentile } from "../helpers/reference-rng.js";
import { tempDir } from "../helpers/tmp.js";
import { FLOAT64_REORDER, HAND_COMPUTED_DIGITS } from "../tolerances.js";
import { tinyStore, type TinyRow } from "../helpers/tiny-store.js";

const dir = tempDir("hsm-iss-");
const r2 = Math.SQRT1_2;

const BASE: TinyRow[] = [
  { fact: "f1", family: "anchor", h: [1, 0, 0, 0] },
  { fact: "f2", family: "anchor", h: [0, 1, 0, 0] },
  { fact: "f3", family: "anchor", h: [0, 0, 1, 0] },
  { fact: "f1", family: "para", h: [0, 0, 0, 1] },
  { fact: "f2", family: "para", h: [0, -1, 0, -1] },
  { fact: "f1", family: "typo", h: [-1, 0, -1, 0] },
];

const EXPECTED: Record<string, Partial<IssRow>> = {
  para: { n_queries: 2, n_facts: 2, iss: -r2 / 2, own_cos: -r2 / 2, other_cos: 0, r_at_1: 0.5, mrr: (1 + 1 / 3) / 2 },
  typo: {
    n_queries: 1,
    n_facts: 1,
    iss: -r2 / 2,
    own_cos: -r2,
    other_cos: -r2 / 2,
    r_at_1: 0,
    mrr: 0.5,
    iss_ci_low: -r2 / 2,
    iss_ci_high: -r2 / 2,
  },
  // f1: (para, typo), f2: (para) — facts first, then the mean over facts.
  all: {
    n_queries: 3,
    n_facts: 2,
    iss: (-r2 / 4 - r2) / 2,
    own_cos: (-r2 / 2 - r2) / 2,
    other_cos: -r2 / 8,
    r_at_1: 0.25,
    mrr: (0.75 + 1 / 3) / 2,
  },
};

let n = 0;
async function iss(rows: TinyRow[], backend: (typeof BACKENDS)[number] = "typescript") {
  const { store } = await tinyStore(join(dir, `case-${n++}`), rows);
  return (await computeMetrics(store, { metrics: ["iss"], backend, bootstrap: 200 })).rows.iss as IssRow[];
}

function expectRows(rows: IssRow[], expected: Record<string, Partial<IssRow>>, counts: Partial<IssRow> = {}) {
  expect(rows.map((r) => r.family)).toEqual(["para", "typo", "all"]);
  for (const row of rows) {
    for (const [k, v] of Object.entries({ ...expected[row.family], ...counts })) {
      if (typeof v === "number" && !Number.isInteger(v))
        expect(row[k as keyof IssRow] as number).toBeCloseTo(v, HAND_COMPUTED_DIGITS);
      else expect(row[k as keyof IssRow]).toBe(v);
    }
    expect(row.iss_ci_low!).toBeLessThanOrEqual(row.iss! + FLOAT64_REORDER);
    expect(row.iss_ci_high!).toBeGreaterThanOrEqual(row.iss! - FLOAT64_REORDER);
  }
}

describe("ISS, hand-computed", () => {
  it("every field of a 3-fact, 2-family, d = 4 case, ties included", async () => {
    expectRows(await iss(BASE), EXPECTED, { excluded_nonfinite: 0, skipped_no_anchor: 0, layer: 3 });
  });

  it("the same numbers on every backend", async () => {
    for (const backend of BACKENDS) expectRows(await iss(BASE, backend), EXPECTED);
  });

  it("drops non-finite rows from everything, and counts them", async () => {
    const rows = [
      ...BASE,
      { fact: "f2", family: "typo", h: [Infinity, 0, 0, 0] },
      { fact: "f3", family: "para", h: [0, NaN, 0, 0] },
    ];
    expectRows(await iss(rows), EXPECTED, { excluded_nonfinite: 2, skipped_no_anchor: 0 });
  });

  it("skips rows of facts without an anchor (they still count in the mean)", async () => {
    const rows = [
      ...BASE,
      { fact: "f4", family: "typo", h: [0, 0, 0, 2] },
      { fact: "f4", family: "para", h: [0, 0, 0, -2] },
    ];
    expectRows(await iss(rows), EXPECTED, { excluded_nonfinite: 0, skipped_no_anchor: 2 });
  });

  it("leaves a fact without an anchor where its anchor rows cancel out, on every backend", async () => {
    // f4's two anchor rows are opposite about the layer's mean (zero): their mean has no direction to renormalize.
    // Its rows are skipped as a fact's without an anchor, and F stays 3 for everyone else.
    const rows: TinyRow[] = [
      ...BASE,
      { fact: "f4", family: "anchor", h: [0, 0, 2, 2] },
      { fact: "f4", family: "anchor", h: [0, 0, -2, -2] },
      { fact: "f4", family: "para", h: [0, 0, 0, 3] },
      { fact: "f4", family: "typo", h: [0, 0, 0, -3] },
    ];
    for (const backend of BACKENDS)
      expectRows(await iss(rows, backend), EXPECTED, { excluded_nonfinite: 0, skipped_no_anchor: 2 });
  });

  it("averages a fact's two anchors and renormalizes", async () => {
    // a1 = (1,0,0,1)/√2, a2 = (0,1,0,0); q = (-1,-1,0,-1)/√3.
    const rows: TinyRow[] = [
      { fact: "f1", family: "anchor", h: [1, 0, 0, 0] },
      { fact: "f1", family: "anchor", h: [0, 0, 0, 1] },
      { fact: "f2", family: "anchor", h: [0, 1, 0, 0] },
      { fact: "f1", family: "para", h: [-1, -1, 0, -1] },
    ];
    const [para] = await iss(rows);
    const own = -2 / Math.sqrt(6);
    const other = -1 / Math.sqrt(3);
    expect(para!.own_cos!).toBeCloseTo(own, HAND_COMPUTED_DIGITS);
    expect(para!.other_cos!).toBeCloseTo(other, HAND_COMPUTED_DIGITS);
    expect(para!.iss!).toBeCloseTo(own - other, HAND_COMPUTED_DIGITS);
    expect(para!.r_at_1).toBe(0);
    expect(para!.mrr).toBe(0.5);
  });

  it("refuses fewer than 2 facts with an anchor, clearly", async () => {
    const rows: TinyRow[] = [
      { fact: "f1", family: "anchor", h: [1, 0] },
      { fact: "f1", family: "para", h: [-1, 0] },
      { fact: "f2", family: "anchor", h: [Infinity, 0] },
    ];
    await expect(iss(rows)).rejects.toThrow("layer 3: 1 fact(s) have a usable anchor row; ISS needs at least 2");
  });

  it("draws its intervals as docs/metrics.md#bootstrap-definition defines them, the same on every backend", async () => {
    // Per-fact margins from the table above, facts in order of first appearance.
    const margins: Record<string, number[]> = { para: [0, -r2], typo: [-r2 / 2], all: [(0 - r2 / 2) / 2, -r2] };
    // Few replicates, so the interpolated percentiles depend on each draw; several seeds.
    const B = 8;
    const { store } = await tinyStore(join(dir, "seeded"), BASE);
    for (const backend of BACKENDS) {
      for (const seed of [5, 6, 7, 8]) {
        const rows = (await computeMetrics(store, { metrics: ["iss"], backend, seed, bootstrap: B })).rows
          .iss as IssRow[];
        for (const row of rows) {
          const m = margins[row.family]!;
          const reps = referenceDraws(seed, referenceFnv1a(`iss/3/${row.family}`), m.length, B).map(
            (counts) => counts.reduce((s, c, f) => s + c * m[f]!, 0) / m.length,
          );
          // The hand-computed margins differ from the float32 cosines by their rounding only.
          expect(row.iss_ci_low!).toBeCloseTo(referencePercentile(reps, 2.5), HAND_COMPUTED_DIGITS);
          expect(row.iss_ci_high!).toBeCloseTo(referencePercentile(reps, 97.5), HAND_COMPUTED_DIGITS);
        }
      }
    }
  });
});
