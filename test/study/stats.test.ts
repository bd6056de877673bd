/**
 * The study's statistics against hand-worked cases, exact rational arithmetic,
 * and NumPy / scikit-learn replaying the same bootstrap draws.
 */
import { writeFileSync } from "node:fs";
import { join } from "node:path";

import { describe, expect, it } from "vitest";

import {
  benjaminiHochberg,
  factSampler,
  mcnemarExact,
  pairedAurocDifference,
  pairedCorrectness,
  pairedFactMeanDifference,
  pairedKtsDifference,
  pairedStream,
  wilsonInterval,
  Z_95,
  type FactValues,
  type KtsRows,
  type ScoredRows,
} from "../../src/study/stats.js";
import { Rng } from "../../src/util/random.js";
import { hasNumpy, hasSklearn, numpyRequired, python } from "../helpers/numpy.js";
import { tempDir } from "../helpers/tmp.js";
import { BINOMIAL_TAIL_RELATIVE, SAME_DRAWS_FLOAT64 } from "../tolerances.js";

const dir = tempDir("hsm-study-stats-");

const withNumpy = hasNumpy || numpyRequired ? it : it.skip;
const numpySkipReason =
  hasNumpy || numpyRequired
    ? ""
    : " (skipped: python3 cannot import numpy; set HSM_REQUIRE_NUMPY=1 to make that a failure)";
const withSklearn = hasSklearn || numpyRequired ? it : it.skip;
const sklearnSkipReason =
  hasSklearn || numpyRequired
    ? ""
    : " (skipped: python3 cannot import numpy and sklearn; set HSM_REQUIRE_NUMPY=1 to make that a failure)";

describe("Wilson interval", () => {
  // Published values (Newcombe 1998, Table I style) to four digits, and the exact
  // ends as the roots of (n + z²)p² − (2k + z²)p + k²/n = 0.
  const roots = (k: number, n: number): [number, number] => {
    const a = n + Z_95 ** 2;
    const b = -(2 * k + Z_95 ** 2);
    const c = (k * k) / n;
    const d = Math.sqrt(b * b - 4 * a * c);
    return [(-b - d) / (2 * a), (-b + d) / (2 * a)];
  };

  it.each([
    [0, 10, 0, 0.2775],
    [5, 10, 0.2366, 0.7634],
    [10, 10, 0.7225, 1],
    [1, 1000, 0.0001765, 0.005643],
  ])("%i of %i: [%f, %f]", (k, n, low, high) => {
    const [l, h] = wilsonInterval(k, n);
    expect(l).toBeCloseTo(low, 4);
    expect(h).toBeCloseTo(high, 4);
    const [rl, rh] = roots(k, n);
    expect(l).toBeCloseTo(rl, 12);
    expect(h).toBeCloseTo(rh, 12);
  });

  it("ends exactly at 0 and 1 at the extremes, and says nothing about an empty count", () => {
    expect(wilsonInterval(0, 7)[0]).toBe(0);
    expect(wilsonInterval(7, 7)[1]).toBe(1);
    expect(wilsonInterval(0, 0)).toEqual([0, 1]);
  });

  it("rejects counts that are not counts", () => {
    expect(() => wilsonInterval(11, 10)).toThrow("Expected successes ≤ n but received 11 > 10");
    expect(() => wilsonInterval(-1, 10)).toThrow("Expected non-negative integer for successes but received -1");
    expect(() => wilsonInterval(1, 2.5)).toThrow("Expected non-negative integer for n but received 2.5");
  });
});

/** 2·P(X ≤ min(b, c)) for X ~ Bin(b + c, ½), capped at 1, in exact integers, then rounded once to float64. */
function mcnemarExactBigInt(b: number, c: number): number {
  const n = b + c;
  const k = Math.min(b, c);
  let coeff = 1n;
  let sum = 1n;
  for (let i = 0; i < k; i++) {
    coeff = (coeff * BigInt(n - i)) / BigInt(i + 1);
    sum += coeff;
  }
  const num = 2n * sum;
  const den = 1n << BigInt(n);
  if (num >= den) return 1;
  // num/den = q·2^-shift with q holding 64 significant bits.
  const shift = den.toString(2).length - num.toString(2).length + 64;
  const q = (num << BigInt(shift)) / den;
  let p = Number(q);
  for (let s = shift; s > 0; s -= 512) p *= 2 ** -Math.min(512, s);
  return p;
}

describe("McNemar's exact test", () => {
  it("matches hand-worked cases", () => {
    expect(mcnemarExact(0, 5)).toBe(0.0625); // 2 · 1/32
    expect(mcnemarExact(5, 0)).toBe(0.0625);
    // n = 13: P(X ≤ 3) = (1 + 13 + 78 + 286)/8192 = 378/8192.
    expect(mcnemarExact(3, 10)).toBeCloseTo(756 / 8192, 15);
    expect(mcnemarExact(10, 3)).toBeCloseTo(756 / 8192, 15);
    expect(mcnemarExact(2, 0)).toBe(0.5); // 2 · 1/4
    expect(mcnemarExact(1, 1)).toBe(1); // 2 · 3/4, capped
    expect(mcnemarExact(4, 4)).toBe(1);
    expect(mcnemarExact(0, 0)).toBe(1);
  });

  it.each([
    [900, 1100],
    [0, 1074],
    [10, 1000],
    [19900, 24516],
    [21000, 23416],
    [22100, 22316],
  ])("agrees with exact rational arithmetic at b = %i, c = %i", (b, c) => {
    const exact = mcnemarExactBigInt(b, c);
    expect(exact).toBeGreaterThan(0);
    expect(Math.abs(mcnemarExact(b, c) - exact)).toBeLessThanOrEqual(BINOMIAL_TAIL_RELATIVE * exact);
  });

  it("stays within the Berry–Esseen bound of the normal approximation for large b + c", () => {
    // |P(X ≤ k) − Φ((k − n/2)/(√n/2))| ≤ 0.4748/√n for Bernoulli(½) sums (ρ/σ³ = 1), so the
    // two-sided p-values differ by at most twice that.
    const phi = (x: number) => 0.5 * erfc(-x / Math.SQRT2);
    for (const [b, c] of [
      [20000, 20400],
      [22000, 22416],
      [14000, 14500],
    ] as const) {
      const n = b + c;
      const normal = Math.min(1, 2 * phi((Math.min(b, c) - n / 2) / (Math.sqrt(n) / 2)));
      const p = mcnemarExact(b, c);
      expect(Math.abs(p - normal)).toBeLessThanOrEqual((2 * 0.4748) / Math.sqrt(n));
      expect(p).toBeGreaterThan(0);
      expect(p).toBeLessThan(1);
    }
  });

  it("tabulates two models' answers on the queries both have", () => {
    const a = new Map([
      ["q1", true],
      ["q2", true],
      ["q3", false],
      ["q4", false],
      ["q5", true],
      ["q6", true],
      ["only-a", true],
    ]);
    const b = new Map([
      ["q1", true],
      ["q2", false],
      ["q3", true],
      ["q4", false],
      ["q5", false],
      ["q6", false],
      ["only-b", false],
    ]);
    // Shared q1…q6: both right q1; A only q2, q5, q6; B only q3; both wrong q4. b = 3, c = 1: p = 2·(1 + 4)/16.
    expect(pairedCorrectness(a, b)).toEqual({
      n: 6,
      bothRight: 1,
      onlyA: 3,
      onlyB: 1,
      bothWrong: 1,
      p: 0.625,
      difference: 2 / 6,
    });
    expect(pairedCorrectness(a, new Map())).toEqual({
      n: 0,
      bothRight: 0,
      onlyA: 0,
      onlyB: 0,
      bothWrong: 0,
      p: null,
      difference: null,
    });
  });

  it("rejects counts that are not counts", () => {
    expect(() => mcnemarExact(-1, 3)).toThrow("Expected non-negative integer for b but received -1");
    expect(() => mcnemarExact(1, 0.5)).toThrow("Expected non-negative integer for c but received 0.5");
  });
});

/** erfc to ~1e-15 (continued fraction for large x, series for small), enough for a bound of ~1e-3. */
function erfc(x: number): number {
  if (x < 0) return 2 - erfc(-x);
  if (x < 2) {
    // erf by its Taylor series.
    let term = x;
    let sum = x;
    for (let k = 1; k < 100; k++) {
      term *= (-x * x) / k;
      sum += term / (2 * k + 1);
    }
    return 1 - (2 / Math.sqrt(Math.PI)) * sum;
  }
  let f = 0;
  for (let k = 60; k >= 1; k--) f = k / 2 / (x + f);
  return Math.exp(-x * x) / Math.sqrt(Math.PI) / (x + f);
}

describe("Benjamini–Hochberg", () => {
  it("matches a hand-worked table, in the input's order", () => {
    // Sorted: 0.005, 0.01, 0.03, 0.04, 0.20 (m = 5); m·p/j = 0.025, 0.025, 0.05, 0.05, 0.20;
    // running minimum from the largest: 0.20, 0.05, 0.05, 0.025, 0.025.
    const adjusted = benjaminiHochberg([0.01, 0.04, 0.03, 0.005, 0.2, null]);
    expect(adjusted.map((p) => (p === null ? null : Number(p.toFixed(12))))).toEqual([
      0.025,
      0.05,
      0.05,
      0.025,
      0.2,
      null,
    ]);
  });

  it("is monotone in the raw p-values, never below them and never above 1", () => {
    const raw = [0.9, 0.8, 0.85, 1, 0.001, 0.001];
    const adjusted = benjaminiHochberg(raw) as number[];
    const order = raw.map((_, i) => i).sort((a, b) => raw[a]! - raw[b]!);
    for (let i = 1; i < order.length; i++)
      expect(adjusted[order[i]!]!).toBeGreaterThanOrEqual(adjusted[order[i - 1]!]!);
    raw.forEach((p, i) => {
      expect(adjusted[i]!).toBeGreaterThanOrEqual(p);
      expect(adjusted[i]!).toBeLessThanOrEqual(1);
    });
    expect(adjusted[4]).toBeCloseTo(0.003, 15); // 6 · 0.001 / 2
    expect(benjaminiHochberg([])).toEqual([]);
  });

  it("rejects a value that is not a p-value", () => {
    expect(() => benjaminiHochberg([0.1, 1.5])).toThrow("Expected a p-value in [0, 1] at index 1 but received 1.5");
    expect(() => benjaminiHochberg([NaN])).toThrow("Expected a p-value in [0, 1] at index 0 but received NaN");
  });

  withNumpy(`agrees with a NumPy implementation on 300 p-values with ties${numpySkipReason}`, () => {
    const rng = new Rng(7);
    const raw = Array.from({ length: 300 }, (_, i) => (i % 10 === 0 ? null : i % 7 === 0 ? 0.02 : rng.uniform() ** 3));
    const file = join(dir, "bh.json");
    writeFileSync(file, JSON.stringify(raw));
    const expected = JSON.parse(
      python(
        `import json, sys, numpy as np
raw = json.load(open(sys.argv[1]))
idx = np.array([i for i, p in enumerate(raw) if p is not None])
p = np.array([raw[i] for i in idx])
m = len(p)
order = np.argsort(p, kind="stable")
scaled = p[order] * m / np.arange(1, m + 1)
adj = np.minimum.accumulate(scaled[::-1])[::-1].clip(max=1)
out = [None] * len(raw)
for j, o in enumerate(order): out[int(idx[o])] = float(adj[j])
print(json.dumps(out))`,
        file,
      ),
    ) as (number | null)[];
    const got = benjaminiHochberg(raw);
    got.forEach((p, i) => {
      if (expected[i] === null) expect(p).toBeNull();
      else expect(Math.abs(p! - expected[i]!)).toBeLessThanOrEqual(SAME_DRAWS_FLOAT64);
    });
  });
});

/** Rows of the facts `names`, `rowsPerFact(f)` rows each, valued `value(f, j)`. */
function factRows(
  names: string[],
  rowsPerFact: (f: number) => number,
  value: (f: number, j: number) => number,
): FactValues & { value: number[] } {
  const fact: string[] = [];
  const v: number[] = [];
  names.forEach((name, f) => {
    for (let j = 0; j < rowsPerFact(f); j++) {
      fact.push(name);
      v.push(value(f, j));
    }
  });
  return { fact, value: v };
}

const names = (n: number, prefix = "fact_") =>
  Array.from({ length: n }, (_, i) => `${prefix}${String(i).padStart(3, "0")}`);

/** The draws a paired bootstrap of `nFacts` facts makes, as arrays, for NumPy to replay. */
function draws(nFacts: number, replicates: number, key: string): number[][] {
  const draw = factSampler(nFacts, pairedStream(20260101, key));
  return Array.from({ length: replicates }, () => Array.from(draw(new Int32Array(nFacts))));
}

describe("paired bootstrap over facts", () => {
  const stream = pairedStream(20260101, "iss/0.5/paraphrase");

  it("is exact where model B is model A shifted fact by fact", () => {
    const rng = new Rng(3);
    const a = factRows(
      names(40),
      (f) => 1 + (f % 4),
      () => rng.normal(),
    );
    const b = { fact: a.fact, value: Array.from(a.value, (v) => v - 0.1) };
    const r = pairedFactMeanDifference(a, b, { stream });
    expect(r.difference!).toBeCloseTo(0.1, 12);
    expect(r.low!).toBeCloseTo(0.1, 12);
    expect(r.high!).toBeCloseTo(0.1, 12);
    expect(r).toMatchObject({ nFacts: 40, onlyA: 0, onlyB: 0, undefinedReplicates: 0 });
    // The same model A against a model that is 0 everywhere varies as much as A does: pairing is what removed it.
    const zero = { fact: a.fact, value: a.value.map(() => 0) };
    const unpairedLike = pairedFactMeanDifference(a, zero, { stream });
    expect(unpairedLike.high! - unpairedLike.low!).toBeGreaterThan(0.2);
  });

  it("resamples facts, not rows", () => {
    // Eight facts whose rows all share one value per fact; fact f has 1 + 20·(f mod 2) rows.
    // Values in eighths, so a fact's mean over its repeated rows is exact.
    const values = [0.875, -0.375, 0.25, 0.125, -0.75, 0.5, 0, 0.625];
    const many = factRows(
      names(8),
      (f) => 1 + 20 * (f % 2),
      (f) => values[f]!,
    );
    const one = factRows(
      names(8),
      () => 1,
      (f) => values[f]!,
    );
    const zero = (rows: FactValues) => ({ fact: rows.fact, value: rows.fact.map(() => 0) });
    const byFacts = pairedFactMeanDifference(many, zero(many), { stream });
    // Repeating rows inside a fact changes nothing: only facts are drawn.
    expect(byFacts).toEqual(pairedFactMeanDifference(one, zero(one), { stream }));
    // Resampling the 88 rows instead (the same generator, row-macro mean) gives a much narrower interval.
    const rowDraw = factSampler(many.fact.length, stream);
    const idx = new Int32Array(many.fact.length);
    const reps = Array.from({ length: 1000 }, () => {
      rowDraw(idx);
      let s = 0;
      for (const i of idx) s += many.value[i]!;
      return s / idx.length;
    }).sort((x, y) => x - y);
    const rowWidth = reps[974]! - reps[24]!;
    const factWidth = byFacts.high! - byFacts.low!;
    expect(factWidth).toBeGreaterThan(2 * rowWidth);
  });

  it("compares only the facts both models have, and is deterministic per stream", () => {
    const a = factRows(
      names(12),
      () => 2,
      (f, j) => f + j,
    );
    const b = factRows(
      [...names(10), "fact_x", "fact_y", "fact_z"],
      () => 3,
      (f, j) => f * j,
    );
    const r = pairedFactMeanDifference(a, b, { stream, replicates: 200 });
    expect(r).toMatchObject({ nFacts: 10, onlyA: 2, onlyB: 3 });
    // Fact f of the ten: A's mean f + ½, B's mean f; the difference is ½ in every fact.
    expect(r.difference!).toBeCloseTo(0.5, 12);
    expect(pairedFactMeanDifference(a, b, { stream, replicates: 200 })).toEqual(r);
    const none = pairedFactMeanDifference(
      a,
      factRows(
        ["other"],
        () => 1,
        () => 0,
      ),
      { stream },
    );
    expect(none).toMatchObject({ difference: null, low: null, high: null, nFacts: 0, onlyA: 12, onlyB: 1 });
  });

  it("draws differently for different comparisons", () => {
    expect(draws(20, 3, "iss/0.5/typo")).not.toEqual(draws(20, 3, "iss/0.5/paraphrase"));
    expect(draws(20, 3, "iss/0.5/typo")).toEqual(draws(20, 3, "iss/0.5/typo"));
  });

  it("rejects values without their facts", () => {
    expect(() =>
      pairedFactMeanDifference({ fact: ["a"], value: [1, 2] }, { fact: ["a"], value: [1] }, { stream }),
    ).toThrow("Expected one fact per value but received 1 facts for 2 values");
  });

  withNumpy(`agrees with NumPy replaying the same draws${numpySkipReason}`, () => {
    const rng = new Rng(11);
    const a = factRows(
      names(37),
      (f) => 1 + (f % 5),
      () => rng.normal() * 0.3 + 0.2,
    );
    const bNames = names(40).filter((_, i) => i !== 4);
    const b = factRows(
      bNames,
      (f) => 1 + (f % 3),
      () => rng.normal() * 0.3,
    );
    const key = "iss/0.75/typo";
    const r = pairedFactMeanDifference(a, b, { stream: pairedStream(20260101, key), replicates: 500 });
    const file = join(dir, "paired-mean.json");
    writeFileSync(file, JSON.stringify({ a, b, draws: draws(r.nFacts, 500, key) }));
    const [difference, low, high, nFacts] = JSON.parse(
      python(
        `import json, sys, numpy as np
d = json.load(open(sys.argv[1]))
def means(rows):
    out = {}
    for f, v in zip(rows["fact"], rows["value"]): out.setdefault(f, []).append(v)
    return {f: np.mean(v) for f, v in out.items()}
ma, mb = means(d["a"]), means(d["b"])
facts = sorted(set(ma) & set(mb))
diff = np.array([ma[f] - mb[f] for f in facts])
reps = diff[np.array(d["draws"])].mean(axis=1)
lo, hi = np.percentile(reps, [2.5, 97.5])
print(json.dumps([diff.mean(), lo, hi, len(facts)]))`,
        file,
      ),
    ) as number[];
    expect(r.nFacts).toBe(nFacts);
    expect(r).toMatchObject({ onlyA: 1, onlyB: 3 }); // A's fact_004 is not in B; B's fact_037…039 are not in A
    expect(Math.abs(r.difference! - difference!)).toBeLessThanOrEqual(SAME_DRAWS_FLOAT64);
    expect(Math.abs(r.low! - low!)).toBeLessThanOrEqual(SAME_DRAWS_FLOAT64);
    expect(Math.abs(r.high! - high!)).toBeLessThanOrEqual(SAME_DRAWS_FLOAT64);
  });
});

/** Scored rows of `nFacts` facts: a score that predicts the label with strength `signal`, ties from rounding. */
function scoredRows(rng: Rng, factNames: string[], signal: number, rowsPerFact = 3): ScoredRows {
  const fact: string[] = [];
  const score: number[] = [];
  const label: number[] = [];
  for (const f of factNames) {
    for (let j = 0; j < rowsPerFact; j++) {
      const y = rng.uniform() < 0.5 ? 1 : 0;
      fact.push(f);
      label.push(y);
      score.push(Math.round((signal * (y ? 1 : -1) + rng.normal()) * 4) / 4);
    }
  }
  return { fact, score, label };
}

const SKLEARN_REPLAY = `import json, sys, numpy as np
from sklearn.metrics import roc_auc_score
d = json.load(open(sys.argv[1]))
facts = sorted(set(d["factsA"]) & set(d["factsB"]))
index = {f: i for i, f in enumerate(facts)}
def auc(rows, w):
    fw = np.array([w[index[f]] if f in index else 0.0 for f in rows["fact"]])
    y = np.array(rows["label"])
    if fw[y == 1].sum() == 0 or fw[y == 0].sum() == 0: return None
    return roc_auc_score(y, np.array(rows["score"]), sample_weight=fw)
def kts(m, w):
    f, a = auc(m["family"], w), auc(m["anchor"], w)
    if f is None or a is None or a <= 0.55: return None
    return (f - 0.5) / (a - 0.5)
stat = auc if d["kind"] == "auroc" else kts
def diff(w):
    x, y = stat(d["a"], w), stat(d["b"], w)
    return None if x is None or y is None else x - y
point = diff(np.ones(len(facts)))
reps = [diff(np.bincount(np.array(dr), minlength=len(facts)).astype(float)) for dr in d["draws"]]
ok = [r for r in reps if r is not None]
lo, hi = np.percentile(ok, [2.5, 97.5])
print(json.dumps([point, lo, hi, len(facts), len(reps) - len(ok)]))`;

describe("paired bootstrap of AUROC and KTS", () => {
  it("is exact where both models order every fact's rows the same way", () => {
    const rng = new Rng(5);
    const a = scoredRows(rng, names(30), 1);
    const b = { ...a, score: Array.from(a.score, (s) => 3 * s - 1) };
    const r = pairedAurocDifference(a, b, { stream: pairedStream(1, "auroc") });
    expect(r).toMatchObject({ difference: 0, low: 0, high: 0, nFacts: 30 });
  });

  withSklearn(`AUROC difference agrees with scikit-learn replaying the same draws${sklearnSkipReason}`, () => {
    const rng = new Rng(13);
    const a = scoredRows(rng, names(25), 0.8);
    const b = scoredRows(rng, names(27).slice(2), 0.3, 4);
    const key = "kts-auroc/1/paraphrase";
    const r = pairedAurocDifference(a, b, { stream: pairedStream(20260101, key), replicates: 300 });
    const file = join(dir, "paired-auroc.json");
    writeFileSync(
      file,
      JSON.stringify({ kind: "auroc", a, b, factsA: a.fact, factsB: b.fact, draws: draws(r.nFacts, 300, key) }),
    );
    const [point, low, high, nFacts, undefinedReplicates] = JSON.parse(python(SKLEARN_REPLAY, file)) as number[];
    expect(r).toMatchObject({ nFacts, undefinedReplicates, onlyA: 2, onlyB: 2 });
    expect(Math.abs(r.difference! - point!)).toBeLessThanOrEqual(SAME_DRAWS_FLOAT64);
    expect(Math.abs(r.low! - low!)).toBeLessThanOrEqual(SAME_DRAWS_FLOAT64);
    expect(Math.abs(r.high! - high!)).toBeLessThanOrEqual(SAME_DRAWS_FLOAT64);
  });

  withSklearn(`KTS difference agrees with scikit-learn replaying the same draws${sklearnSkipReason}`, () => {
    const rng = new Rng(17);
    const model = (anchor: number, family: number): KtsRows => ({
      anchor: scoredRows(rng, names(20), anchor, 1),
      family: scoredRows(rng, names(20), family, 2),
    });
    const a = model(1.5, 0.9);
    const b = model(0.6, 0.5);
    const key = "kts/0.5/typo";
    const r = pairedKtsDifference(a, b, { stream: pairedStream(20260101, key), replicates: 300 });
    const file = join(dir, "paired-kts.json");
    const facts = (m: KtsRows) => [...m.family.fact, ...m.anchor.fact];
    writeFileSync(
      file,
      JSON.stringify({ kind: "kts", a, b, factsA: facts(a), factsB: facts(b), draws: draws(r.nFacts, 300, key) }),
    );
    const [point, low, high, nFacts, undefinedReplicates] = JSON.parse(python(SKLEARN_REPLAY, file)) as (
      number | null
    )[];
    expect(r).toMatchObject({ nFacts, undefinedReplicates });
    expect(point).not.toBeNull();
    expect(Math.abs(r.difference! - point!)).toBeLessThanOrEqual(SAME_DRAWS_FLOAT64);
    expect(Math.abs(r.low! - low!)).toBeLessThanOrEqual(SAME_DRAWS_FLOAT64);
    expect(Math.abs(r.high! - high!)).toBeLessThanOrEqual(SAME_DRAWS_FLOAT64);
  });

  it("is undefined where a model's anchor AUROC shows nothing to transfer", () => {
    const rng = new Rng(19);
    const a: KtsRows = { anchor: scoredRows(rng, names(20), 2), family: scoredRows(rng, names(20), 1) };
    const flat = (rows: ScoredRows): ScoredRows => ({ ...rows, score: Array.from(rows.score, () => 0) });
    const b: KtsRows = { anchor: flat(a.anchor), family: a.family };
    const r = pairedKtsDifference(a, b, { stream: pairedStream(1, "kts"), replicates: 50 });
    expect(r).toMatchObject({ difference: null, low: null, high: null, undefinedReplicates: 50 });
  });
});
