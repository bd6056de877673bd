/**
 * ISS's fused rank kernel: the native core against its TypeScript twin, on rows
 * with planted near-ties, at odd sizes (partial tiles and panels), with rows
 * that have no own anchor; every native path (each SIMD level this CPU has,
 * with bfloat16 screening where AVX-512 has it, on AMX tiles where the CPU has
 * them, and without) must count exactly as the twin does.
 */
import { describe, expect, it } from "vitest";

import { kernelOptions } from "../../src/kernels/default.js";
import { typescriptKernels } from "../../src/kernels/typescript/index.js";
import { nativeHeap, nativeKernels as loadNative, nativeSimdLevels } from "../../src/kernels/native.js";
import { Rng } from "../../src/util/random.js";
import { atSimdLevel } from "../helpers/backends.js";
import { COSINE_F32 } from "../tolerances.js";

function unitRows(n: number, d: number, rng: Rng): Float32Array {
  const x = rng.fillNormal(new Float32Array(n * d));
  for (let i = 0; i < n; i++) {
    let s = 0;
    for (let j = 0; j < d; j++) s += x[i * d + j]! ** 2;
    for (let j = 0; j < d; j++) x[i * d + j]! /= Math.sqrt(s);
  }
  return x;
}

const all = (n: number) => Int32Array.from({ length: n }, (_, i) => i);

/** Row i of x (d values) set to `toward` plus `weight` times itself, then scaled to unit length. */
function leanRow(x: Float32Array, i: number, d: number, toward: Float32Array, weight: number): void {
  let norm = 0;
  for (let j = 0; j < d; j++) norm += (x[i * d + j] = toward[j]! + weight * x[i * d + j]!) ** 2;
  for (let j = 0; j < d; j++) x[i * d + j]! /= Math.sqrt(norm);
}

/** How many anchors score above each row's own, by kernels k: every row of x against every anchor of a. */
function aboveCounts(
  k: Pick<NonNullable<ReturnType<typeof loadNative>>, "rank">,
  x: Float32Array,
  a: Float32Array,
  F: number,
  d: number,
  own: Int32Array,
): number[] {
  const c = new Int32Array(own.length);
  k.rank(x, all(own.length), a, F, d, own, new Float32Array(own.length), c);
  return Array.from(c);
}

function rankCase(seed: number) {
  const rng = new Rng(seed);
  const n = 517;
  const F = 83;
  const d = 97;
  const a = unitRows(F, d, rng);
  const x = unitRows(n, d, rng);
  // Every third row sits almost on an anchor, so scores crowd around its own.
  for (let i = 0; i < n; i += 3)
    for (let j = 0; j < d; j++) x[i * d + j] = 0.5 * a[((i * 7) % F) * d + j]! + 0.002 * x[i * d + j]!;
  // Exact ties: some rows equal to another row's anchor.
  for (let i = 1; i < n; i += 11) x.set(a.subarray(((i * 5) % F) * d, (((i * 5) % F) + 1) * d), i * d);
  const own = Int32Array.from({ length: n }, (_, i) => (i % 13 === 0 ? -1 : (i * 7) % F));
  return { x, a, n, F, d, own };
}

/** Rows near their own anchor, every own anchor followed by an exact copy of itself. */
function copiedAnchors() {
  const rng = new Rng(17);
  const n = 240;
  const F = 50;
  const d = 1024;
  const a = unitRows(F, d, rng);
  for (let g = 1; g < F; g += 2) a.copyWithin(g * d, (g - 1) * d, g * d);
  const x = unitRows(n, d, rng);
  const own = Int32Array.from({ length: n }, (_, i) => 2 * (i % (F / 2)));
  for (let i = 0; i < n; i++) {
    let norm = 0;
    for (let j = 0; j < d; j++) norm += (x[i * d + j] = a[own[i]! * d + j]! + 0.05 * x[i * d + j]!) ** 2;
    for (let j = 0; j < d; j++) x[i * d + j]! /= Math.sqrt(norm);
  }
  return { x, a, n, F, d, own };
}

/**
 * 300 rows and 200 anchors of d = 96 leaning on `kinds` random directions: anchor g on direction kind(g), row i on
 * its own anchor's, (13 i) mod 200, each with `weight` times a random unit vector added (leanRow).
 */
function leaningCase(seed: number, kinds: number, weight: number, kind: (g: number) => number) {
  const [d, n, F] = [96, 300, 200];
  const rng = new Rng(seed);
  const directions = unitRows(kinds, d, rng);
  const lean = (m: number, kindOf: (i: number) => number) => {
    const v = unitRows(m, d, rng);
    for (let i = 0; i < m; i++) leanRow(v, i, d, directions.subarray(kindOf(i) * d, (kindOf(i) + 1) * d), weight);
    return v;
  };
  const a = lean(F, kind);
  const own = Int32Array.from({ length: n }, (_, i) => (i * 13) % F);
  const x = lean(n, (i) => kind(own[i]!));
  return { x, a, F, d, own };
}

const LEVELS = loadNative({ threads: 1, allowBf16: false }) ? nativeSimdLevels : [];

describe.each(LEVELS)("rank kernel on native[%s]", (level) => {
  const nativeKernels = atSimdLevel(loadNative({ threads: 2, allowBf16: true })!, level);
  const nativeFloat32 = atSimdLevel(loadNative({ threads: 3, allowBf16: false })!, level);

  it("counts exactly as the TypeScript twin", () => {
    for (const seed of [1, 2, 3]) {
      const { x, a, n, F, d, own } = rankCase(seed);
      const s1 = new Float32Array(n);
      const s2 = new Float32Array(n);
      const c1 = new Int32Array(n);
      const c2 = new Int32Array(n);
      typescriptKernels.rank(x, all(n), a, F, d, own, s1, c1);
      nativeKernels!.rank(x, all(n), a, F, d, own, s2, c2);
      expect(Array.from(c2)).toEqual(Array.from(c1));
      s1.forEach((v, i) => expect(Math.abs(s2[i]! - v)).toBeLessThan(COSINE_F32));
      own.forEach((o, i) => o < 0 && expect([s2[i], c2[i]]).toEqual([0, 0]));
    }
  });

  it("gives the same counts without bfloat16 screening", () => {
    const rng = new Rng(9);
    const n = 301;
    const F = 57;
    const d = 1030;
    const a = unitRows(F, d, rng);
    const x = unitRows(n, d, rng);
    for (let i = 0; i < n; i += 2)
      for (let j = 0; j < d; j++) x[i * d + j] = 0.3 * a[(i % F) * d + j]! + 0.01 * x[i * d + j]!;
    const own = Int32Array.from({ length: n }, (_, i) => i % F);
    const counts = (k: NonNullable<typeof nativeKernels>) => {
      const c = new Int32Array(n);
      k.rank(x, all(n), a, F, d, own, new Float32Array(n), c);
      return Array.from(c);
    };
    const reference = new Int32Array(n);
    typescriptKernels.rank(x, all(n), a, F, d, own, new Float32Array(n), reference);
    expect(counts(nativeKernels!)).toEqual(Array.from(reference));
    expect(counts(nativeFloat32!)).toEqual(Array.from(reference));
  });

  it("ranks a selection of rows as it ranks those rows copied out, past one gathered slice", () => {
    // 9,000 of 18,001 rows, every other one, in a scrambled order: more than the 8,192 rows the
    // float32 tiles gather at a time.
    const rng = new Rng(4);
    const N = 18001;
    const F = 21;
    const d = 12;
    const a = unitRows(F, d, rng);
    const x = unitRows(N, d, rng);
    const rows = Int32Array.from({ length: 9000 }, (_, i) => 2 * ((i * 4001) % 9000) + 1);
    const own = Int32Array.from(rows, (r) => (r % 7 === 0 ? -1 : r % F));
    const copied = new Float32Array(rows.length * d);
    rows.forEach((r, i) => copied.set(x.subarray(r * d, (r + 1) * d), i * d));
    for (const k of [nativeKernels!, nativeFloat32!]) {
      const picked = { score: new Float32Array(rows.length), above: new Int32Array(rows.length) };
      const whole = { score: new Float32Array(rows.length), above: new Int32Array(rows.length) };
      k.rank(x, rows, a, F, d, own, picked.score, picked.above);
      k.rank(copied, all(rows.length), a, F, d, own, whole.score, whole.above);
      expect(Array.from(picked.above)).toEqual(Array.from(whole.above));
      expect(Array.from(picked.score)).toEqual(Array.from(whole.score));
      expect(picked.above.some((c) => c > 0)).toBe(true);
    }
  });

  it("counts as the float32 kernel with panels kept from a call on non-finite anchors", () => {
    // The screens' anchor panels from 2 MB up are kept for the next call (native/large_buffers.h). The first call
    // fills them with NaN; the second pads each row of 520 values to 272 bfloat16 pairs on AMX tiles, and a NaN
    // left in that padding would turn every screened score to NaN.
    nativeHeap!.trim();
    const rng = new Rng(31);
    const poisoned = new Float32Array(2048 * 544).fill(NaN);
    nativeKernels!.rank(
      unitRows(16, 544, rng),
      all(16),
      poisoned,
      2048,
      544,
      all(16),
      new Float32Array(16),
      new Int32Array(16),
    );
    const n = 64;
    const F = 2040;
    const d = 520;
    const a = unitRows(F, d, rng);
    const x = unitRows(n, d, rng);
    for (let i = 0; i < n; i++) leanRow(x, i, d, a.subarray(i * 31 * d, (i * 31 + 1) * d), 8);
    const own = Int32Array.from({ length: n }, (_, i) => i * 31);
    const screened = aboveCounts(nativeKernels!, x, a, F, d, own);
    expect(screened).toEqual(aboveCounts(nativeFloat32!, x, a, F, d, own));
    expect(screened.some((c) => c > 0)).toBe(true);
    nativeHeap!.trim();
  });

  it("counts rows whose scores crowd around their own as the float32 kernel does", () => {
    // Anchors close to one direction and rows of noise: every row's scores lie within a few thousandths
    // of its own, so the screen leaves many anchors of each block to the float32 dot products that settle
    // them. d = 1001 leaves a partial step of coordinates.
    for (const d of [1024, 1001]) {
      const rng = new Rng(d);
      const n = 120;
      const F = 450;
      const u = unitRows(1, d, rng);
      const a = unitRows(F, d, rng);
      for (let g = 0; g < F; g++) {
        let norm = 0;
        for (let j = 0; j < d; j++) norm += (a[g * d + j] = 0.95 * u[j]! + 0.3 * a[g * d + j]!) ** 2;
        for (let j = 0; j < d; j++) a[g * d + j]! /= Math.sqrt(norm);
      }
      const x = unitRows(n, d, rng);
      const own = Int32Array.from({ length: n }, (_, i) => (i * 37) % F);
      const counts = (k: NonNullable<typeof nativeKernels>) => {
        const c = new Int32Array(n);
        k.rank(x, all(n), a, F, d, own, new Float32Array(n), c);
        return Array.from(c);
      };
      const float32 = counts(nativeFloat32!);
      // Own scores fall among the others, not above or below them all: most rows rank mid-field.
      expect(float32.filter((c) => c > 20 && c < F - 20).length).toBeGreaterThan(n / 2);
      expect(counts(nativeKernels!)).toEqual(float32);
    }
  });

  it("counts anchors a hair from the own anchor as the float32 kernel does", () => {
    // Each row's own anchor has 40 near-copies, a millionth apart: their scores differ from the own score in the
    // last digits of float32, which only the float32 path's own sums can order. d = 1001 leaves a partial step of
    // coordinates.
    for (const d of [1024, 1001]) {
      const rng = new Rng(d + 1);
      const n = 30;
      const copies = 40;
      const F = 3 * (copies + 1);
      const a = unitRows(F, d, rng);
      const noise = unitRows(F, d, rng);
      for (let g = 0; g < F; g++) {
        const base = g - (g % (copies + 1));
        if (g === base) continue;
        let norm = 0;
        for (let j = 0; j < d; j++) norm += (a[g * d + j] = a[base * d + j]! + 1e-6 * noise[g * d + j]!) ** 2;
        for (let j = 0; j < d; j++) a[g * d + j]! /= Math.sqrt(norm);
      }
      const own = Int32Array.from({ length: n }, (_, i) => (i % 3) * (copies + 1));
      const x = unitRows(n, d, rng);
      for (let i = 0; i < n; i++) leanRow(x, i, d, a.subarray(own[i]! * d, (own[i]! + 1) * d), 0.3);
      const float32 = aboveCounts(nativeFloat32!, x, a, F, d, own);
      // Some copies score above the own anchor and some below, row by row.
      expect(float32.some((c) => c > 0 && c < copies)).toBe(true);
      expect(aboveCounts(nativeKernels!, x, a, F, d, own)).toEqual(float32);
    }
  });

  it("counts rows whose every anchor of one kind crowds the own score, in runs of many rows, as the float32 kernel does", () => {
    // Every row and anchor is one of two directions, nudged by a ten-thousandth: a row's scores against the anchors
    // of its own direction crowd its own score within float32 rounding, and the AMX screen, finding whole groups of
    // 32 rows on 32 anchors it cannot call, stops screening the groups that follow.
    const { x, a, F, d, own } = leaningCase(37, 2, 1e-4, (g) => ((g * 7) % 3 === 0 ? 1 : 0));
    const float32 = aboveCounts(nativeFloat32!, x, a, F, d, own);
    // Rows rank all through their own direction's anchors.
    expect(new Set(float32).size).toBeGreaterThan(50);
    expect(aboveCounts(nativeKernels!, x, a, F, d, own)).toEqual(float32);
  });

  it("counts rows of one direction, whose anchors crowd the own score past the screen's reach but not the reordered sum's, as the float32 kernel does", () => {
    // Rows and anchors all lean on one direction, a tenth of their length off it at random: a row's scores spread
    // over a few thousandths around its own, so that the screen calls few of them (whole panels are left near), while
    // the reordered float32 sum (Dot4) could settle most. Those panels go to the float32 tiles whole.
    const { x, a, F, d, own } = leaningCase(43, 1, 0.1, () => 0);
    const float32 = aboveCounts(nativeFloat32!, x, a, F, d, own);
    // Rows rank all through the anchors.
    expect(new Set(float32).size).toBeGreaterThan(50);
    expect(aboveCounts(nativeKernels!, x, a, F, d, own)).toEqual(float32);
  });

  it("counts rows against tight kinds of anchors settled from each pair of panels' centre as the float32 kernel does", () => {
    // 192 anchors along a short segment (u + t v, |t| <= 0.05) and 16 near-copies of w. Rows near u + v/2 whose own
    // anchors sit at the top of the segment score a few of its anchors above their own, and the segment's centres
    // below it by less than the segment's reach: a centre settles nothing there. Rows whose own anchors are the
    // copies of w score every anchor of the segment above their own, which a centre settles for 32 at a time.
    const d = 96;
    const rng = new Rng(41);
    const [u, v, w] = [0, 1, 2].map(() => unitRows(1, d, rng));
    const along = (t: number, noise: Float32Array) => Float32Array.from(noise, (z, j) => u![j]! + t * v![j]! + z);
    const line = 192;
    const F = line + 16;
    const t = Float32Array.from({ length: line }, () => 0.1 * rng.uniform() - 0.05);
    const a = new Float32Array(F * d);
    for (let g = 0; g < line; g++) a.set(along(t[g]!, new Float32Array(d)), g * d);
    const jitter = unitRows(F, d, rng);
    for (let g = line; g < F; g++)
      a.set(
        Float32Array.from(w!, (c, j) => c + 1e-3 * jitter[g * d + j]!),
        g * d,
      );
    for (let g = 0; g < F; g++) leanRow(a, g, d, new Float32Array(d), 1);
    const top = Array.from(t.keys()).sort((p, q) => t[q]! - t[p]!);
    const n = 160;
    const own = Int32Array.from({ length: n }, (_, i) => (i < 96 ? top[i % 16]! : line + (i % 16)));
    const x = unitRows(n, d, rng);
    for (let i = 0; i < n; i++) {
      const toward = i < 96 ? along(0.5, new Float32Array(d)) : Float32Array.from(w!, (c, j) => 0.1 * c + u![j]!);
      leanRow(x, i, d, toward, 0.01);
    }
    const float32 = aboveCounts(nativeFloat32!, x, a, F, d, own);
    expect(float32.slice(0, 96).some((c) => c > 0 && c < 16)).toBe(true);
    expect(float32.slice(96).every((c) => c >= line)).toBe(true);
    expect(aboveCounts(nativeKernels!, x, a, F, d, own)).toEqual(float32);
  });

  it("counts crowds of near-copies scattered through the anchors as the float32 kernel does", () => {
    // Five groups of near-copies (1e-6 to 1e-5 apart), interleaved among 700 anchors so that no two copies sit
    // side by side, and 163 rows, each near one group's anchors: every row has dozens of anchors within float32
    // rounding of its own score, in every anchor block, with rows of one group side by side and mixed.
    for (const d of [1024, 1001]) {
      const rng = new Rng(d + 5);
      const n = 163;
      const F = 700;
      const groups = 5;
      const a = unitRows(F, d, rng);
      const bases = unitRows(groups, d, rng);
      const noise = unitRows(F, d, rng);
      // Anchors g ≡ 0 (mod 3) are copies of base g mod 5; the rest stay random.
      const groupOf = (g: number) => (g % 3 === 0 ? (g / 3) % groups : -1);
      for (let g = 0; g < F; g++) {
        const b = groupOf(g);
        if (b < 0) continue;
        a.set(noise.subarray(g * d, (g + 1) * d), g * d);
        leanRow(a, g, d, bases.subarray(b * d, (b + 1) * d), 1e-6 * (1 + (g % 10)));
      }
      // Row i leans on group (i * 7) mod 5 (runs of rows of one group, and rows of every group side by side); its
      // own anchor is one of that group's copies.
      const rowGroup = (i: number) => (i < 80 ? Math.floor(i / 16) : (i * 7) % groups);
      const own = Int32Array.from({ length: n }, (_, i) => (i % 17 === 0 ? -1 : 3 * (rowGroup(i) + groups * (i % 40))));
      const x = unitRows(n, d, rng);
      for (let i = 0; i < n; i++) leanRow(x, i, d, bases.subarray(rowGroup(i) * d, (rowGroup(i) + 1) * d), 0.3);
      const float32 = aboveCounts(nativeFloat32!, x, a, F, d, own);
      // Each row with an own anchor lands mid-field among its group's 47 copies.
      const copies = Math.ceil(F / 3 / groups);
      expect(float32.filter((c, i) => own[i]! >= 0 && c > 2 && c < copies - 2).length).toBeGreaterThan(n / 2);
      expect(aboveCounts(nativeKernels!, x, a, F, d, own)).toEqual(float32);
    }
  });

  it("recomputes an anchor whose bfloat16 rounding errors all lean one way", () => {
    // Row r and its competitor (anchor 2r) hold ±m in one sign pattern, m just under half a bfloat16 step
    // above 2^-5: every coordinate rounds down, so the screen scores the competitor about 0.0078 (the
    // bound's worst case) below its float32 score. The own anchor (2r + 1), same pattern, scores between
    // the two, so only a screen that allows for the whole error finds the competitor above it.
    const d = 1024;
    const n = 6;
    const F = 40;
    const rng = new Rng(23);
    const m = Math.fround((1 + 0.99 * 2 ** -8) * 2 ** -5);
    const mOwn = Math.fround(2 ** -5 * (1.006 / (1 + 0.99 * 2 ** -8)));
    const a = unitRows(F, d, rng);
    const x = new Float32Array(n * d);
    for (let r = 0; r < n; r++) {
      for (let j = 0; j < d; j++) {
        const sign = rng.uniform() < 0.5 ? -1 : 1;
        x[r * d + j] = sign * m;
        a[2 * r * d + j] = sign * m;
        a[(2 * r + 1) * d + j] = sign * mOwn;
      }
    }
    const own = Int32Array.from({ length: n }, (_, r) => 2 * r + 1);
    const counts = (k: NonNullable<typeof nativeKernels>) => {
      const c = new Int32Array(n);
      k.rank(x, all(n), a, F, d, own, new Float32Array(n), c);
      return Array.from(c);
    };
    expect(counts(nativeFloat32!)).toEqual(new Array<number>(n).fill(1));
    expect(counts(nativeKernels!)).toEqual(new Array<number>(n).fill(1));
  });

  // Below AVX-512 the tiles (portable, AVX2) round each product and each sum as the own score does, in the
  // same order, so an exact copy of the own anchor ties with it bit for bit and never counts as above.
  it("ties an exact copy of the own anchor with the own score, screened or not", () => {
    // Every row's own anchor has an exact copy among the anchors: the own score is computed in the arithmetic of
    // the tiles that score the copy (fused multiply-adds from AVX-512 up), so the copy never counts as above.
    const { x, a, n, F, d, own } = copiedAnchors();
    for (const k of [nativeFloat32!, nativeKernels!]) {
      const c = new Int32Array(n);
      k.rank(x, all(n), a, F, d, own, new Float32Array(n), c);
      expect(Array.from(c)).toEqual(new Array<number>(n).fill(0));
    }
  });
});

describe("rank kernel options", () => {
  it("HSM_NO_BF16 turns the screening off, read once in TypeScript", () => {
    const saved = process.env.HSM_NO_BF16;
    try {
      delete process.env.HSM_NO_BF16;
      expect(kernelOptions().allowBf16).toBe(true);
      process.env.HSM_NO_BF16 = "1";
      expect(kernelOptions().allowBf16).toBe(false);
      expect(kernelOptions({ allowBf16: true }).allowBf16).toBe(true);
    } finally {
      if (saved === undefined) delete process.env.HSM_NO_BF16;
      else process.env.HSM_NO_BF16 = saved;
    }
  });
});
