/**
 * The LM-head kernels (prepareHead, headArgmax) against plain float64 loops
 * written here: random Gaussian heads at odd sizes (d below and off multiples
 * of 32, vocabularies off every tile size), planted near-ties that bfloat16
 * alone gets wrong (so a screening bound too small fails them), exact ties,
 * rows of wildly different norms and non-finite values. Every implementation —
 * TypeScript, and the native core at every SIMD level this CPU has (with and
 * without the bfloat16 instructions at avx512), on one to three threads — must
 * give the reference's indices exactly.
 */
import { describe, expect, it } from "vitest";

import { allocateHead, headSizes } from "../../src/kernels/head.js";
import { typescriptKernels } from "../../src/kernels/typescript/index.js";
import type { Kernels } from "../../src/kernels/types.js";
import { nativeKernels as loadNative, nativeSimdLevels } from "../../src/kernels/native.js";
import { Rng } from "../../src/util/random.js";
import { atSimdLevel } from "../helpers/backends.js";

type Head = Pick<Kernels, "prepareHead" | "headArgmax">;

const bf16Native = loadNative({ threads: 2, allowBf16: true });
const lanesNative = loadNative({ threads: 2, allowBf16: false });

/**
 * Every implementation, by name: the native core at each SIMD level here (with and without bfloat16 at avx512; on
 * AMX tiles at amx, where d is a whole number of 32-value steps, else its avx512 screen).
 */
const IMPLEMENTATIONS: [string, Head][] = [["typescript", typescriptKernels]];
for (const level of bf16Native ? nativeSimdLevels : []) {
  const at = (allowBf16: boolean) => atSimdLevel(loadNative({ threads: 2, allowBf16 })!, level);
  if (level === "avx512") {
    IMPLEMENTATIONS.push([`native[${level}] (bfloat16)`, at(true)], [`native[${level}] (float32 lanes)`, at(false)]);
  } else if (level === "amx") IMPLEMENTATIONS.push([`native[${level}] (bfloat16 tiles)`, at(true)]);
  else IMPLEMENTATIONS.push([`native[${level}]`, at(false)]);
}

/** The exact answer per row: float64 logits from W as stored (d × vocab), summed in order; ties to the lowest v; NaN never wins. */
function reference(h: Float32Array, batch: number, d: number, w: Float32Array, vocab: number): number[] {
  const out: number[] = [];
  for (let b = 0; b < batch; b++) {
    let best = -Infinity;
    let at = -1;
    for (let v = 0; v < vocab; v++) {
      let s = 0;
      for (let i = 0; i < d; i++) s += h[b * d + i]! * w[i * vocab + v]!;
      if (Number.isNaN(s)) continue;
      if (at < 0 || s > best) {
        best = s;
        at = v;
      }
    }
    out.push(Math.max(at, 0));
  }
  return out;
}

const view = new DataView(new ArrayBuffer(4));

/** x rounded to the nearest bfloat16 value (ties to even): keep the top 16 bits, round on the 16 dropped. */
function roundBf16(x: number): number {
  view.setFloat32(0, x);
  const hi = view.getUint16(0);
  const lo = view.getUint16(2);
  const up = lo > 0x8000 || (lo === 0x8000 && (hi & 1) === 1);
  view.setUint16(0, up ? hi + 1 : hi);
  view.setUint16(2, 0);
  return view.getFloat32(0);
}

/** The answer from bfloat16-rounded h and W alone (float64 sums): what a screen with no error bound would pick. */
function bf16Only(h: Float32Array, batch: number, d: number, w: Float32Array, vocab: number): number[] {
  return reference(h.map(roundBf16), batch, d, w.map(roundBf16), vocab);
}

/** Every implementation's answer (each native path on one, two and three threads); all must equal `expected`. */
function expectAll(
  h: Float32Array,
  batch: number,
  d: number,
  w: Float32Array,
  vocab: number,
  expected: number[],
): void {
  for (const [name, k] of IMPLEMENTATIONS) {
    const head = allocateHead(d, vocab);
    k.prepareHead(w, d, vocab, head);
    for (const threads of name === "typescript" ? [1] : [1, 2, 3]) {
      const out = new Int32Array(batch).fill(-7);
      k.headArgmax(h, batch, d, head, vocab, out, threads);
      expect([...out], `${name}, ${threads} thread(s)`).toEqual(expected);
    }
  }
}

/** W (d × vocab) with the vocabulary column `v` set to `col`. */
function setColumn(w: Float32Array, d: number, vocab: number, v: number, col: ArrayLike<number>): void {
  for (let i = 0; i < d; i++) w[i * vocab + v] = col[i]!;
}

function column(w: Float32Array, d: number, vocab: number, v: number): Float32Array {
  return Float32Array.from({ length: d }, (_, i) => w[i * vocab + v]!);
}

describe("prepareHead", () => {
  it("writes Wᵀ as the two halves of its float32 bits, and the row norms, the same bits in every implementation", () => {
    const rng = new Rng(11);
    const d = 37;
    const vocab = 53;
    const w = rng.fillNormal(new Float32Array(d * vocab));
    // Values whose bfloat16 truncation differs from rounding, the largest float32, a NaN, a subnormal, -0.
    const special = [1 + 2 ** -8, 1 + 3 * 2 ** -8, 1 + 2 ** -8 + 2 ** -20, -(1 + 2 ** -9), 3.4e38, NaN, 1e-40, -0];
    w.set(special, 0);
    const wBits = new Uint32Array(w.buffer);
    const n = headSizes(d, vocab);
    expect(n).toEqual({ hi: vocab * d, lo: vocab * d, norms: vocab });
    for (const [name, k] of IMPLEMENTATIONS) {
      const head = allocateHead(d, vocab, true);
      expect(head.hi.buffer).toBeInstanceOf(SharedArrayBuffer);
      k.prepareHead(w, d, vocab, head);
      for (let v = 0; v < vocab; v++) {
        let ss = 0;
        for (let i = 0; i < d; i++) {
          const x = w[i * vocab + v]!;
          const bits = ((head.hi[v * d + i]! << 16) | head.lo[v * d + i]!) >>> 0;
          expect(bits, `${name} Wᵀ[${v}, ${i}] of ${x}`).toBe(wBits[i * vocab + v]);
          ss += x * x;
        }
        expect(Object.is(head.norms[v], Math.fround(Math.sqrt(ss))), `${name} norms[${v}]`).toBe(true);
      }
      // hi alone is the value truncated toward zero: never larger in magnitude, within 2^-7 of it when normal.
      const truncated = special.map((_, j) => {
        view.setUint16(0, head.hi[j * d]!);
        view.setUint16(2, 0);
        return view.getFloat32(0);
      });
      expect(truncated.slice(0, 5), name).toEqual([1, 1 + 2 ** -7, 1, -1, 2 ** 127 * (1 + 127 / 128)]);
      expect([
        Number.isNaN(truncated[5]),
        truncated[6]! > 0 && truncated[6]! <= 1e-40,
        Object.is(truncated[7], -0),
      ]).toEqual([true, true, true]);
      for (let j = 0; j < d * vocab; j++) {
        view.setUint16(0, head.hi[j]!);
        view.setUint16(2, 0);
        const t = view.getFloat32(0);
        const x = w[(j % d) * vocab + Math.floor(j / d)]!;
        if (!Number.isFinite(x) || Math.abs(x) < 2 ** -126) continue;
        expect(
          Math.abs(t) <= Math.abs(x) && Math.abs(x - t) < 2 ** -7 * Math.abs(x) && Math.sign(t) === Math.sign(x),
        ).toBe(true);
      }
    }
    // The rounding cases the bfloat16-only reference uses: to even (down), to even (up), up, down, past the largest value.
    expect([1 + 2 ** -8, 1 + 3 * 2 ** -8, 1 + 2 ** -8 + 2 ** -20, -(1 + 2 ** -9), 3.4e38].map(roundBf16)).toEqual([
      1,
      1 + 2 ** -6,
      1 + 2 ** -7,
      -1,
      Infinity,
    ]);
  });
});

describe("headArgmax", () => {
  it("finds the exact float64 argmax of random Gaussian heads at odd sizes", () => {
    const rng = new Rng(5);
    for (const [batch, d, vocab] of [
      [1, 7, 13],
      [3, 31, 61],
      [5, 33, 130],
      [4, 100, 257],
      [16, 64, 1027],
      [17, 512, 389],
      [2, 1, 9],
      // Whole 32-value steps (the AMX screen), with vocabulary tails and one, two, three and four tiles of rows.
      [1, 32, 95],
      [16, 96, 1000],
      [33, 64, 161],
      [40, 128, 97],
      [64, 32, 64],
    ] as const) {
      const w = rng.fillNormal(new Float32Array(d * vocab));
      const h = rng.fillNormal(new Float32Array(batch * d));
      expectAll(h, batch, d, w, vocab, reference(h, batch, d, w, vocab));
    }
  });

  it("takes the exact winner where bfloat16 alone picks another (the screening bound must cover the rounding)", () => {
    const rng = new Rng(9);
    const d = 64;
    const vocab = 41;
    const batch = 2;
    const w = rng.fillNormal(new Float32Array(d * vocab)).map((x) => 0.1 * x);
    // Row `up` rounds up to bfloat16 in every other element (1 + 2^-8 + 2^-16 → 1 + 2^-7), row `down` rounds down in
    // every element (1 + 2^-8 - 2^-16 → 1): `down` is larger exactly by 32 (2^-8 - 3·2^-16), `up` larger in bfloat16 by
    // 32·2^-7 = 2^-2. h is exact in bfloat16, so the kernel's bound is 1.25 u|h||w| ≈ 1.25·2^-8·64 per row; a screen
    // with less than 2/5 of it (the two rows' bounds summing to under 2^-2) drops `down` and answers `up`.
    const up = Float32Array.from({ length: d }, (_, i) => (i % 2 === 0 ? 1 + 2 ** -8 + 2 ** -16 : 1));
    const down = new Float32Array(d).fill(1 + 2 ** -8 - 2 ** -16);
    setColumn(w, d, vocab, 6, up);
    setColumn(w, d, vocab, 29, down);
    // The second row asks the other way round: h negated, the rows' signs flipped, the exact winner at the lower index.
    setColumn(
      w,
      d,
      vocab,
      3,
      down.map((x) => -x),
    );
    setColumn(
      w,
      d,
      vocab,
      17,
      up.map((x) => -x),
    );
    const h = new Float32Array(batch * d);
    h.fill(1, 0, d);
    h.fill(-1, d, 2 * d);
    const expected = reference(h, batch, d, w, vocab);
    expect(expected).toEqual([29, 3]);
    expect(bf16Only(h, batch, d, w, vocab)).toEqual([6, 17]);
    expectAll(h, batch, d, w, vocab, expected);
  });

  it("breaks a one-ulp near-tie exactly and gives an exact tie to the lowest index", () => {
    const rng = new Rng(21);
    const d = 45;
    const vocab = 203;
    const w = rng.fillNormal(new Float32Array(d * vocab));
    const h = rng.fillNormal(new Float32Array(3 * d));
    h.copyWithin(d, 0, d); // rows 0 and 1 equal
    const [best] = reference(h, 1, d, w, vocab);
    // A copy of row 0's best column one float32 ulp larger in one element (towards h's sign), at the last index:
    // it wins, and bfloat16 cannot tell it from the original.
    const nudged = column(w, d, vocab, best!);
    const bits = new Uint32Array(nudged.buffer);
    const k = 4;
    bits[k] = Math.sign(h[k]!) === Math.sign(nudged[k]!) ? bits[k]! + 1 : bits[k]! - 1;
    expect(roundBf16(nudged[k]!)).toBe(roundBf16(w[k * vocab + best!]!));
    setColumn(w, d, vocab, vocab - 1, nudged);
    expect(reference(h, 1, d, w, vocab)).toEqual([vocab - 1]);
    expect(bf16Only(h, 1, d, w, vocab)).toEqual([best]);
    expectAll(h, 1, d, w, vocab, [vocab - 1]);
    // Exact copies of the nudged column below and above the original: the lowest index wins.
    setColumn(w, d, vocab, 1, nudged);
    setColumn(w, d, vocab, 150, nudged);
    // Row 2: its own best column copied to index 0 and past it.
    const [best2] = reference(h.subarray(2 * d), 1, d, w, vocab);
    expect(best2).toBeGreaterThan(0);
    setColumn(w, d, vocab, 0, column(w, d, vocab, best2!));
    setColumn(w, d, vocab, vocab - 2, column(w, d, vocab, best2!));
    const expected = reference(h, 3, d, w, vocab);
    expect(expected).toEqual([1, 1, 0]);
    expectAll(h, 3, d, w, vocab, expected);
  });

  it("is exact over rows of wildly different norms and zero rows", () => {
    const rng = new Rng(33);
    const d = 70;
    const vocab = 517;
    const batch = 6;
    const w = rng.fillNormal(new Float32Array(d * vocab));
    const scale = Float64Array.from({ length: vocab }, () => 10 ** (12 * rng.uniform() - 6));
    for (let i = 0; i < d; i++) for (let v = 0; v < vocab; v++) w[i * vocab + v]! *= scale[v]!;
    for (const v of [0, 13, 400]) setColumn(w, d, vocab, v, new Float32Array(d));
    const h = rng.fillNormal(new Float32Array(batch * d));
    // Rows of h from 1e-30 to 1e20 in scale, and one of subnormal values.
    [1e-30, 1e-5, 1, 1e5, 1e20].forEach((s, b) => {
      for (let i = 0; i < d; i++) h[b * d + i]! *= s;
    });
    for (let i = 0; i < d; i++) h[5 * d + i] = (i % 3) * 1e-39;
    expectAll(h, batch, d, w, vocab, reference(h, batch, d, w, vocab));
  });

  it("computes rows with non-finite values exactly, NaN logits never winning", () => {
    const rng = new Rng(44);
    const d = 40;
    const vocab = 97;
    const batch = 5;
    const w = rng.fillNormal(new Float32Array(d * vocab));
    setColumn(w, d, vocab, 7, new Float32Array(d)); // a zero column: 0 · ∞ is NaN there
    const h = rng.fillNormal(new Float32Array(batch * d));
    h[0 * d + 3] = NaN; // every logit NaN: 0
    h[1 * d + 5] = Infinity; // ±∞ by the sign of W[5, v], NaN at v = 7
    h[2 * d + 0] = -Infinity;
    h[2 * d + 1] = Infinity; // ∞ - ∞ (NaN) where W[0, v] and W[1, v] share a sign
    for (let i = 0; i < d; i++) h[3 * d + i] = 3e38; // finite, but the logits overflow to ±∞
    const expected = reference(h, batch, d, w, vocab);
    expect(expected[0]).toBe(0);
    expect(expected[1]).toBe(Array.from({ length: vocab }, (_, v) => v).find((v) => w[5 * vocab + v]! > 0));
    expectAll(h, batch, d, w, vocab, expected);
    // A head with a non-finite weight: every row computed exactly.
    const bad = w.slice();
    bad[2 * vocab + 50] = Infinity;
    bad[9 * vocab + 60] = NaN;
    const fine = rng.fillNormal(new Float32Array(3 * d));
    expectAll(fine, 3, d, bad, vocab, reference(fine, 3, d, bad, vocab));
  });

  it("answers 0 for every row without features, and nothing for no rows", () => {
    for (const [, k] of IMPLEMENTATIONS) {
      const head = allocateHead(0, 5);
      k.prepareHead(new Float32Array(0), 0, 5, head);
      const out = new Int32Array(3).fill(-1);
      k.headArgmax(new Float32Array(0), 3, 0, head, 5, out, 2);
      expect([...out]).toEqual([0, 0, 0]);
      const none = new Int32Array(0);
      k.headArgmax(new Float32Array(0), 0, 4, allocateHead(4, 5), 5, none, 1);
      expect(none.length).toBe(0);
    }
  });
});

describe.runIf(Boolean(bf16Native))("native headArgmax", () => {
  it("computes only a few logits exactly on a Gaussian head", () => {
    const rng = new Rng(77);
    const d = 96;
    const vocab = 4099;
    const batch = 8;
    const w = rng.fillNormal(new Float32Array(d * vocab));
    const h = rng.fillNormal(new Float32Array(batch * d));
    const head = allocateHead(d, vocab);
    bf16Native!.prepareHead(w, d, vocab, head);
    const expected = reference(h, batch, d, w, vocab);
    for (const k of [bf16Native!, lanesNative!]) {
      const out = new Int32Array(batch);
      const dots = k.headArgmax(h, batch, d, head, vocab, out, 1);
      expect([...out]).toEqual(expected);
      expect(dots).toBeGreaterThanOrEqual(batch);
      expect(dots).toBeLessThan((batch * vocab) / 20);
    }
    // TypeScript computes every logit.
    expect(typescriptKernels.headArgmax(h, batch, d, head, vocab, new Int32Array(batch), 1)).toBe(batch * vocab);
    // Views at an offset into larger buffers read and write where they start.
    const hAt = new Float32Array(batch * d + 5);
    hAt.set(h, 5);
    const outAt = new Int32Array(batch + 3).fill(-1);
    bf16Native!.headArgmax(hAt.subarray(5), batch, d, head, vocab, outAt.subarray(3), 2);
    expect([...outAt]).toEqual([-1, -1, -1, ...expected]);
  });

  it("refuses buffers smaller than the counts say", () => {
    const head = allocateHead(8, 10);
    expect(() => bf16Native!.headArgmax(new Float32Array(16), 2, 8, head, 10, new Int32Array(1), 1)).toThrow(
      /large enough/,
    );
    expect(() => bf16Native!.headArgmax(new Float32Array(16), 2, 8, head, 11, new Int32Array(2), 1)).toThrow(
      /large enough/,
    );
    expect(() => bf16Native!.prepareHead(new Float32Array(79), 8, 10, head)).toThrow(/large enough/);
  });
});
