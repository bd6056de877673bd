/**
 * The kernel suite: each kernel of a resolved set checked against an
 * independent expectation — float64 loops written out here, a pairwise AUROC, a
 * BigInt twin of the generator (test/helpers/reference-rng.ts) — bitwise where
 * the kernel is exact (see src/kernels/types.ts), within test/tolerances.ts
 * otherwise, and the exact kernels against the TypeScript reference bit for
 * bit. test/kernels/kernels.test.ts runs it on every backend available here;
 * a new backend runs it as test/kernels/toy-backend.test.ts does.
 */
import { describe, expect, it } from "vitest";

import type { Kernels, SortedArrays } from "../../src/kernels/types.js";
import { f16ToF32, f32ToF16 } from "../../src/kernels/typescript/float16.js";
import { Rng } from "../../src/util/random.js";
import { COSINE_F32, FLOAT32_ROUNDING, FLOAT64_REORDER, PRODUCTS_F32 } from "../tolerances.js";
import { referenceDraws } from "./reference-rng.js";

/** A kernel set and its label in test names. */
export type KernelCase = readonly [label: string, resolved: { readonly kernels: Kernels }];

/** Weighted Mann–Whitney AUROC over every (positive, negative) pair, ties ½; NaN when a class has no weight. */
function pairwiseAuroc(scores: number[], labels: number[], weight: number[]): number {
  let num = 0;
  let pos = 0;
  let neg = 0;
  for (let i = 0; i < scores.length; i++) {
    if (labels[i]) pos += weight[i]!;
    else neg += weight[i]!;
  }
  if (pos === 0 || neg === 0) return NaN;
  for (let i = 0; i < scores.length; i++) {
    if (!labels[i]) continue;
    for (let j = 0; j < scores.length; j++) {
      if (labels[j]) continue;
      const w = weight[i]! * weight[j]!;
      num += scores[i]! > scores[j]! ? w : scores[i] === scores[j] ? w / 2 : 0;
    }
  }
  return num / (pos * neg);
}

/** A sorted group (as SortedScores builds one) from scores with planted ties. */
/** Rows with scores on a grid of 1/`grid` (coarse: many ties; fine: mostly distinct scores). */
function group(
  rng: Rng,
  rows: number,
  nFacts: number,
  grid = 4,
): { g: SortedArrays; scores: number[]; labels: number[]; fact: number[] } {
  const scores = Array.from({ length: rows }, () => Math.round(rng.normal() * grid) / grid);
  const fact = Array.from({ length: rows }, (_, i) => (i < nFacts ? i : rng.int(nFacts)));
  const labels = scores.map((s) => (s + rng.normal() > 0 ? 1 : 0));
  const order = Array.from(scores.keys()).sort((a, b) => scores[a]! - scores[b]! || a - b);
  const ties = [0];
  for (let i = 1; i < rows; i++) if (scores[order[i]!] !== scores[order[i - 1]!]) ties.push(i);
  ties.push(rows);
  return {
    g: {
      fact: Int32Array.from(order, (r) => fact[r]!),
      label: Uint8Array.from(order, (r) => labels[r]!),
      ties: Int32Array.from(ties),
      nFacts,
    },
    scores,
    labels,
    fact,
  };
}

function normalRows(rng: Rng, n: number, d: number, scale = 1): Float32Array {
  return Float32Array.from({ length: n * d }, () => rng.normal() * scale);
}

/** Scales each row of x (n × d) to unit length, as ISS's rows are. */
function unit(x: Float32Array, d: number): Float32Array {
  for (let i = 0; i < x.length / d; i++) {
    const norm = Math.hypot(...x.subarray(i * d, (i + 1) * d));
    for (let j = 0; j < d; j++) x[i * d + j]! /= norm;
  }
  return x;
}

/** Every test of the suite, once per case; `reference` is the TypeScript kernel set the exact kernels must equal. */
export function kernelSuite(cases: readonly KernelCase[], reference: Kernels): void {
  describe.each(cases)("kernels on %s", (_name, { kernels: k }) => {
    it("rank: own float32 score and the anchors strictly above it, near-ties within float32 rounding", async () => {
      const rng = new Rng(3);
      const n = 203;
      const F = 37;
      const d = 45;
      const a = normalRows(rng, F, d);
      const x = normalRows(rng, n + 10, d);
      // Rows planted near an anchor crowd the scores around their own.
      for (let i = 0; i < n; i += 4)
        for (let j = 0; j < d; j++) x[(i + 10) * d + j] = a[(i % F) * d + j]! + 0.001 * x[(i + 10) * d + j]!;
      unit(a, d);
      unit(x, d);
      const rows = Int32Array.from({ length: n }, (_, i) => n + 9 - i); // a permutation: rows are picked, not assumed contiguous
      const own = Int32Array.from({ length: n }, (_, i) => (i % 17 === 5 ? -1 : (i * 3) % F));
      const ownScore = new Float32Array(n).fill(7);
      const above = new Int32Array(n).fill(7);
      await k.rank(x, rows, a, F, d, own, ownScore, above);
      for (let i = 0; i < n; i++) {
        if (own[i]! < 0) {
          expect([ownScore[i], above[i]]).toEqual([0, 0]);
          continue;
        }
        const dot = (g: number) => {
          let s = 0;
          for (let j = 0; j < d; j++) s += x[rows[i]! * d + j]! * a[g * d + j]!;
          return s;
        };
        const mine = dot(own[i]!);
        expect(Math.abs(ownScore[i]! - mine)).toBeLessThan(COSINE_F32);
        let surely = 0;
        let maybe = 0;
        for (let g = 0; g < F; g++) {
          if (g === own[i]) continue;
          const s = dot(g);
          if (s > mine + COSINE_F32) surely++;
          if (s > mine - COSINE_F32) maybe++;
        }
        expect(above[i]!).toBeGreaterThanOrEqual(surely);
        expect(above[i]!).toBeLessThanOrEqual(maybe);
      }
    });

    it("products' fused logistic pass, where a backend has one: loss and gradient sums within float32 accumulation", async () => {
      const rng = new Rng(6);
      const n = 700; // enough rows for the native pass to split them across threads
      const d = 45;
      const K = 3;
      const h = normalRows(rng, n, d);
      const v = Float64Array.from({ length: K * d }, () => rng.normal() * 0.3);
      const offset = Float64Array.from({ length: K }, () => rng.normal());
      const y = Uint8Array.from({ length: n }, () => (rng.normal() > 0 ? 1 : 0));
      const train = Uint8Array.from({ length: K * n }, (_, i) => (i % K === 1 ? 0 : 1));
      const want = { loss: new Float64Array(K), gsum: new Float64Array(K), grad: new Float64Array(K * d) };
      for (let j = 0; j < K; j++) {
        for (let i = 0; i < n; i++) {
          if (!train[j * n + i]) continue;
          let dot = offset[j]!;
          for (let c = 0; c < d; c++) dot += h[i * d + c]! * v[j * d + c]!;
          const s = y[i] ? 1 : -1;
          want.loss[j]! += Math.log(1 + Math.exp(-s * dot));
          const g = -s / (1 + Math.exp(s * dot));
          want.gsum[j]! += g;
          for (let c = 0; c < d; c++) want.grad[j * d + c]! += g * h[i * d + c]!;
        }
      }
      const p = await k.products(h, n, d);
      try {
        if (!p.logistic) return; // this backend trains from its two products
        const got = await p.logistic(v, offset, y, train, K);
        for (const key of ["loss", "gsum", "grad"] as const) {
          const scale = Math.max(...want[key].map(Math.abs));
          want[key].forEach((w, i) => expect(Math.abs(got[key][i]! - w)).toBeLessThan(PRODUCTS_F32 * scale));
        }
      } finally {
        p.dispose();
      }
    });

    it("products and rowsTimes: H·V and Hᵀ·G within float32 accumulation", async () => {
      const rng = new Rng(5);
      const n = 131;
      const d = 37;
      const K = 3;
      const h = normalRows(rng, n, d);
      const v = Float64Array.from({ length: K * d }, () => rng.normal());
      const g = Float64Array.from({ length: n * K }, (_, i) => (i % 5 === 0 ? 0 : rng.normal()));
      const hv = new Float64Array(n * K);
      const htg = new Float64Array(K * d);
      for (let i = 0; i < n; i++) {
        for (let j = 0; j < K; j++) {
          for (let c = 0; c < d; c++) {
            hv[i * K + j]! += h[i * d + c]! * v[j * d + c]!;
            htg[j * d + c]! += h[i * d + c]! * g[i * K + j]!;
          }
        }
      }
      const near = (got: Float64Array, want: Float64Array) => {
        expect(got.length).toBe(want.length);
        const scale = Math.max(...want.map(Math.abs));
        for (let i = 0; i < want.length; i++) expect(Math.abs(got[i]! - want[i]!)).toBeLessThan(PRODUCTS_F32 * scale);
      };
      const p = await k.products(h, n, d);
      try {
        near(await p.times(v, K), hv);
        near(await p.transposeTimes(g, K), htg);
      } finally {
        p.dispose();
      }
      const out = new Float64Array(n * K);
      await k.rowsTimes(h, n, d, v, K, out);
      near(out, hv);
    });

    it("bootstrapMean: the generator's draws, replicate for replicate", async () => {
      const values = Float64Array.from({ length: 23 }, (_, i) => Math.sin(i) * 3 + i / 7);
      const out = new Float64Array(40);
      await k.bootstrapMean(20260101, 0xdeadbeef, values, 40, out);
      referenceDraws(20260101, 0xdeadbeef, values.length, 40).forEach((counts, r) => {
        let s = 0;
        for (let f = 0; f < values.length; f++) s += counts[f]! * values[f]!;
        expect(out[r]).toBe(s / values.length); // the same sum in the same order: bit for bit
      });
    });

    it("bootstrapAuroc: weighted AUROC of each draw, paired draws carried to the paired group", async () => {
      const rng = new Rng(8);
      const nFacts = 14;
      const fam = group(rng, 60, nFacts);
      const anc = group(rng, 25, 11);
      const toPaired = Int32Array.from({ length: nFacts }, (_, f) => (f < 11 ? 10 - f : -1));
      const B = 30;
      const out = new Float64Array(B);
      const pairedOut = new Float64Array(B);
      await k.bootstrapAuroc([{ seed: 77, stream: 1234, group: fam.g, b: B, out, paired: anc.g, toPaired, pairedOut }]);
      const alone = new Float64Array(B);
      await k.bootstrapAuroc([{ seed: 77, stream: 1234, group: fam.g, b: B, out: alone }]);
      expect(alone).toEqual(out);
      // Jobs given together: each one's replicates are those it gives alone, whatever its place.
      const other = new Float64Array(B);
      await k.bootstrapAuroc([{ seed: 5, stream: 6, group: anc.g, b: B, out: other }]);
      const together = [new Float64Array(B), new Float64Array(B), new Float64Array(B), new Float64Array(B)];
      await k.bootstrapAuroc([
        { seed: 5, stream: 6, group: anc.g, b: B, out: together[0]! },
        {
          seed: 77,
          stream: 1234,
          group: fam.g,
          b: B,
          out: together[1]!,
          paired: anc.g,
          toPaired,
          pairedOut: together[2]!,
        },
        { seed: 77, stream: 1234, group: fam.g, b: B, out: together[3]! },
      ]);
      expect(together).toEqual([other, out, pairedOut, alone]);
      referenceDraws(77, 1234, nFacts, B).forEach((counts, r) => {
        const want = pairwiseAuroc(
          fam.scores,
          fam.labels,
          fam.fact.map((f) => counts[f]!),
        );
        const carried = new Array<number>(11).fill(0);
        for (let f = 0; f < nFacts; f++) if (toPaired[f]! >= 0) carried[toPaired[f]!]! += counts[f]!;
        const wantPaired = pairwiseAuroc(
          anc.scores,
          anc.labels,
          anc.fact.map((f) => carried[f]!),
        );
        for (const [got, w] of [
          [out[r]!, want],
          [pairedOut[r]!, wantPaired],
        ] as const) {
          if (Number.isNaN(w)) expect(got).toBeNaN();
          else expect(Math.abs(got - w)).toBeLessThan(FLOAT64_REORDER);
        }
      });
    });

    it("centreRows: valid rows centred on their mean and unit length, zero rows dropped, input untouched", () => {
      const rng = new Rng(11);
      const n = 9;
      const d = 5;
      const h = normalRows(rng, n, d, 3);
      h.fill(1e30, 2 * d, 3 * d); // an invalid row must not move the mean
      const mean = new Float64Array(d);
      const valid = Uint8Array.from({ length: n }, (_, i) => (i === 2 ? 0 : 1));
      for (let i = 0; i < n; i++) if (valid[i]) for (let j = 0; j < d; j++) mean[j]! += h[i * d + j]! / 8;
      for (let j = 0; j < d; j++) h[6 * d + j] = Math.fround(mean[j]!); // centres to (nearly) zero
      const before = h.slice();
      const out = new Float32Array(n * d);
      const excluded = k.centreRows(h, n, d, valid, out);
      expect(h).toEqual(before);
      // Recompute the mean with the planted row in place.
      mean.fill(0);
      for (let i = 0; i < n; i++) if (i !== 2) for (let j = 0; j < d; j++) mean[j]! += h[i * d + j]! / 8;
      for (let i = 0; i < n; i++) {
        if (i === 2) continue;
        const c = Array.from({ length: d }, (_, j) => h[i * d + j]! - mean[j]!);
        const norm = Math.hypot(...c);
        if (norm < 1e-5) continue; // the planted row: dropped or kept depending on float rounding, checked below
        for (let j = 0; j < d; j++) expect(Math.abs(out[i * d + j]! - c[j]! / norm)).toBeLessThan(FLOAT32_ROUNDING * 8);
      }
      expect(excluded).toBe(n - valid.reduce((s, v) => s + v, 0));
      expect(valid[2]).toBe(0);
    });

    it("anchorCosines: own and mean other cosines in float64", () => {
      const rng = new Rng(12);
      const d = 6;
      const F = 4;
      const a = normalRows(rng, F, d);
      const x = normalRows(rng, 7, d);
      const rows = Int32Array.from([6, 0, 3]);
      const own = Int32Array.from([1, 3, 0]);
      const ownCos = new Float64Array(3);
      const otherCos = new Float64Array(3);
      k.anchorCosines(x, rows, a, F, d, own, ownCos, otherCos);
      rows.forEach((r, i) => {
        const dot = (g: number) =>
          Array.from({ length: d }, (_, j) => x[r * d + j]! * a[g * d + j]!).reduce((s, v) => s + v, 0);
        expect(Math.abs(ownCos[i]! - dot(own[i]!))).toBeLessThan(FLOAT64_REORDER);
        const others = [0, 1, 2, 3].filter((g) => g !== own[i]).map(dot);
        expect(Math.abs(otherCos[i]! - others.reduce((s, v) => s + v, 0) / 3)).toBeLessThan(FLOAT64_REORDER);
      });
    });

    it("standardizeRows and foldMoments: the selected rows' statistics", () => {
      const rng = new Rng(13);
      const d = 4;
      const h = normalRows(rng, 10, d, 5);
      h.fill(2.5, 3 * d, 4 * d);
      for (let i = 0; i < 10; i++) h[i * d + 1] = 2.5; // a constant column divides by 1
      const rows = Int32Array.from([1, 3, 4, 8, 9]);
      const s = k.standardizeRows(h, rows, d);
      for (let j = 0; j < d; j++) {
        const col = Array.from(rows, (r) => h[r * d + j]!);
        const m = col.reduce((a, b) => a + b, 0) / col.length;
        const sd = Math.sqrt(col.reduce((a, b) => a + (b - m) ** 2, 0) / col.length) || 1;
        expect(Math.abs(s.mean[j]! - m)).toBeLessThan(FLOAT64_REORDER * 10);
        expect(Math.abs(s.scale[j]! - sd)).toBeLessThan(FLOAT64_REORDER * 10);
        col.forEach((v, i) => expect(Math.abs(s.rows[i * d + j]! - (v - m) / sd)).toBeLessThan(FLOAT32_ROUNDING * 8));
      }
      const folds = [Int32Array.from([0, 2, 5]), Int32Array.from([]), Int32Array.from([9])];
      const { sum, sumSquares } = k.foldMoments(h, d, folds);
      folds.forEach((f, fk) => {
        for (let j = 0; j < d; j++) {
          const col = Array.from(f, (r) => h[r * d + j]!);
          expect(Math.abs(sum[fk * d + j]! - col.reduce((a, b) => a + b, 0))).toBeLessThan(FLOAT64_REORDER * 10);
          expect(Math.abs(sumSquares[fk * d + j]! - col.reduce((a, b) => a + b * b, 0))).toBeLessThan(
            FLOAT64_REORDER * 100,
          );
        }
      });
    });
  });

  describe("float16 rows read in place of float32", () => {
    // Enough rows for native threads; a constant row, a constant column, and the edges of float16.
    it.each(cases)(
      "%s: centreRows, standardizeRows and rowsTimes give what they give on the rows widened",
      async (_name, { kernels: k }) => {
        const rng = new Rng(14);
        const n = 600;
        const d = 130;
        const h16 = new Uint16Array(n * d);
        f32ToF16(normalRows(rng, n, d, 3), h16);
        h16.fill(0x3c00, 3 * d, 4 * d); // 1.0
        for (let i = 0; i < n; i++) h16[i * d + 4] = 0xc080; // -2.25
        h16.set([0x0001, 0x8000, 0x7bff, 0xfbff, 0x0400, 0x83ff], 9 * d); // subnormal, −0, ±65504, smallest normal
        const h = new Float32Array(n * d);
        f16ToF32(h16, h);
        const bits = (a: ArrayBufferView) => Buffer.from(a.buffer, a.byteOffset, a.byteLength);
        const same = (got: ArrayBufferView, want: ArrayBufferView) => expect(bits(got).equals(bits(want))).toBe(true);

        const validOf = () => Uint8Array.from({ length: n }, (_, i) => (i % 11 === 5 ? 0 : 1));
        const [valid16, valid32] = [validOf(), validOf()];
        const [out16, out32] = [new Float32Array(n * d), new Float32Array(n * d)];
        expect(k.centreRows(h16, n, d, valid16, out16)).toBe(k.centreRows(h, n, d, valid32, out32));
        same(out16, out32);
        same(valid16, valid32);

        const rows = Int32Array.from({ length: 400 }, (_, i) => (i * 7) % n);
        const [st16, st32] = [k.standardizeRows(h16, rows, d), k.standardizeRows(h, rows, d)];
        same(st16.rows, st32.rows);
        same(st16.mean, st32.mean);
        same(st16.scale, st32.scale);

        const K = 3;
        const v = Float64Array.from({ length: K * d }, () => rng.normal());
        const [p16, p32] = [new Float64Array(n * K), new Float64Array(n * K)];
        await k.rowsTimes(h16, n, d, v, K, p16);
        await k.rowsTimes(h, n, d, v, K, p32);
        same(p16, p32);
      },
    );
  });

  describe("exact kernels agree bit for bit across backends", () => {
    it.each(cases)("%s", async (_name, { kernels: k }) => {
      const run = async (kk: Kernels) => {
        const rng = new Rng(21);
        const fam = group(rng, 200, 40);
        const anc = group(rng, 90, 30);
        const toPaired = Int32Array.from({ length: 40 }, (_, f) => (f % 4 === 0 ? -1 : f % 30));
        const out = new Float64Array(100);
        const paired = new Float64Array(100);
        await kk.bootstrapAuroc([
          { seed: 3, stream: 9, group: fam.g, b: 100, out, paired: anc.g, toPaired, pairedOut: paired },
        ]);
        const mean = new Float64Array(100);
        await kk.bootstrapMean(
          3,
          10,
          Float64Array.from({ length: 40 }, () => rng.normal()),
          100,
          mean,
        );
        return [out, paired, mean];
      };
      const [got, want] = [await run(k), await run(reference)];
      got.forEach((a, i) => expect(Buffer.from(a.buffer).equals(Buffer.from(want[i]!.buffer))).toBe(true));
    });
    // The row passes: float64 sums in one fixed order everywhere, on enough rows for native threads.
    it.each(cases)("%s, row passes", async (_name, { kernels: k }) => {
      const run = (kk: Kernels) => {
        const rng = new Rng(9);
        const n = 600;
        const d = 130;
        const h = normalRows(rng, n, d, 7);
        for (let j = 0; j < d; j++) h[3 * d + j] = 1.5; // a row of one value, and (below) one column of one value
        for (let i = 0; i < n; i++) h[i * d + 4] = -2.25;
        const valid = Uint8Array.from({ length: n }, (_, i) => (i % 11 === 5 ? 0 : 1));
        const centred = new Float32Array(n * d);
        const excluded = kk.centreRows(h, n, d, valid, centred);
        const rows = Int32Array.from({ length: 400 }, (_, i) => (i * 7) % n);
        const anchors = centred.slice(0, 50 * d);
        const own = Int32Array.from(rows, (r) => r % 50);
        const ownCos = new Float64Array(rows.length);
        const otherCos = new Float64Array(rows.length);
        kk.anchorCosines(centred, rows, anchors, 50, d, own, ownCos, otherCos);
        const st = kk.standardizeRows(h, rows, d);
        const m = kk.foldMoments(st.rows, d, [
          rows.filter((r) => r % 3 !== 0).map((_, i) => i),
          Int32Array.from([]),
          Int32Array.from([5, 1, 5]),
        ]);
        return [
          centred,
          valid,
          Float64Array.of(excluded),
          ownCos,
          otherCos,
          st.rows,
          st.mean,
          st.scale,
          m.sum,
          m.sumSquares,
        ];
      };
      const [got, want] = [run(k), run(reference)];
      got.forEach((a, i) => expect(Buffer.from(a.buffer).equals(Buffer.from(want[i]!.buffer))).toBe(true));
    });

    // KTS's folds: each fold's rows ascending, every row in all folds but its own (and some in none), which the
    // native core sums in one pass over the rows; more folds than bits in a word are summed fold by fold.
    it.each(cases)("%s, fold moments", async (_name, { kernels: k }) => {
      const run = (kk: Kernels, K: number) => {
        const rng = new Rng(10);
        const n = 700;
        const d = 150;
        const h = normalRows(rng, n, d, 2);
        const own = Int32Array.from({ length: n }, () => rng.int(K + 1)); // K: in no fold's training rows
        const folds = Array.from({ length: K }, (_, f) =>
          Int32Array.from(own.keys()).filter((i) => own[i] !== f && own[i] !== K),
        );
        const m = kk.foldMoments(h, d, folds);
        return [m.sum, m.sumSquares];
      };
      for (const K of [5, 70]) {
        const [got, want] = [run(k, K), run(reference, K)];
        got.forEach((a, i) => expect(Buffer.from(a.buffer).equals(Buffer.from(want[i]!.buffer))).toBe(true));
      }
    });

    // Large enough that native kernels split the replicates across threads, each
    // starting the generator part-way through the stream; a replicate count that
    // is no multiple of any lane width; distinct scores beside tied ones.
    it.each(cases)("%s, with replicates split across threads", async (_name, { kernels: k }) => {
      const run = async (kk: Kernels) => {
        const rng = new Rng(5);
        const fam = group(rng, 12000, 3000, 1e6);
        const anc = group(rng, 4000, 2500, 8);
        const toPaired = Int32Array.from({ length: 3000 }, (_, f) => (f % 7 === 0 ? -1 : f % 2500));
        const out = new Float64Array(203);
        const paired = new Float64Array(203);
        await kk.bootstrapAuroc([
          { seed: 11, stream: 12, group: fam.g, b: 203, out, paired: anc.g, toPaired, pairedOut: paired },
        ]);
        const mean = new Float64Array(203);
        await kk.bootstrapMean(
          11,
          13,
          Float64Array.from({ length: 3000 }, () => rng.normal()),
          203,
          mean,
        );
        return [out, paired, mean];
      };
      const [got, want] = [await run(k), await run(reference)];
      got.forEach((a, i) => expect(Buffer.from(a.buffer).equals(Buffer.from(want[i]!.buffer))).toBe(true));
    });

    // Native kernels count a replicate's draws in 16 bits below 2^16 facts and in 32 bits from there on.
    it.each(cases)("%s, with more facts than 16-bit counts reach", async (_name, { kernels: k }) => {
      const nFacts = 2 ** 16 + 7;
      const B = 19;
      const rng = new Rng(6);
      const fam = group(rng, nFacts + 3000, nFacts);
      const anc = group(rng, 3000, 1500);
      const toPaired = Int32Array.from({ length: nFacts }, (_, f) => (f % 5 === 0 ? -1 : f % 1500));
      const values = Float64Array.from({ length: nFacts }, () => rng.normal());
      // Replicates of the AUROC, of the paired group's, and of the mean: this backend's, then the reference's.
      const [mine, theirs] = await Promise.all(
        [k, reference].map(async (kk) => {
          const [out, paired, mean] = [new Float64Array(B), new Float64Array(B), new Float64Array(B)];
          await kk.bootstrapAuroc([
            { seed: 13, stream: 14, group: fam.g, b: B, out, paired: anc.g, toPaired, pairedOut: paired },
          ]);
          await kk.bootstrapMean(13, 15, values, B, mean);
          return [out, paired, mean].map((a) => Buffer.from(a.buffer));
        }),
      );
      mine!.forEach((a, i) => expect(a.equals(theirs![i]!)).toBe(true));
    });
  });
}
