/**
 * The float16 kernels of every backend available here (each resolves them to
 * its own or its fallback's): all 65,536 halves, hand-computed rounding cases,
 * and a million random float32 values compared between the implementations
 * and with NumPy.
 */
import { readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";

import { describe, expect, it } from "vitest";

import { kernelOptions } from "../../src/kernels/default.js";
import { typescriptKernels } from "../../src/kernels/typescript/index.js";
import type { Kernels } from "../../src/kernels/types.js";
import { nativeKernels as loadNative } from "../../src/kernels/native.js";
import { Rng } from "../../src/util/random.js";
import { AVAILABLE } from "../helpers/backends.js";
import { hasNumpy, numpyRequired, python } from "../helpers/numpy.js";
import { tempDir } from "../helpers/tmp.js";

/** An independent decoder of half bits, by the formula, not by bit tricks. */
function halfValue(h: number): number {
  const sign = h & 0x8000 ? -1 : 1;
  const e = (h >> 10) & 0x1f;
  const m = h & 0x3ff;
  if (e === 0) return sign * m * 2 ** -24;
  if (e === 31) return m === 0 ? sign * Infinity : NaN;
  return sign * (1 + m / 1024) * 2 ** (e - 15);
}

const nativeKernels = loadNative(kernelOptions());
const BACKENDS = AVAILABLE.map((r) => [r.label, r.kernels] as const);

function f32(bits: number): number {
  return new Float32Array(new Uint32Array([bits]).buffer)[0]!;
}

function toHalf(k: Kernels, values: number[] | Float32Array): Uint16Array {
  const src = values instanceof Float32Array ? values : Float32Array.from(values);
  const dst = new Uint16Array(src.length);
  k.f32ToF16(src, dst);
  return dst;
}

const ALL_HALVES = Uint16Array.from({ length: 65536 }, (_, i) => i);

/** A million float32 bit patterns: uniform bits (NaN payloads too) and the ranges where rounding is delicate. */
function randomFloat32(n: number, seed: number): Float32Array {
  const rng = new Rng(seed);
  const bits = new Uint32Array(n);
  for (let i = 0; i < n; i++) {
    const kind = i % 6;
    if (kind === 0)
      bits[i] = rng.u32(); // anything, NaNs and infs included
    else if (kind === 1)
      bits[i] = f32Bits(rng.uniform() * 2 ** -14 * (rng.uniform() < 0.5 ? -1 : 1)); // half subnormals
    else if (kind === 2)
      bits[i] = f32Bits((65000 + rng.uniform() * 1000) * (rng.uniform() < 0.5 ? -1 : 1)); // overflow edge
    else if (kind === 3) {
      // exact ties: a half plus half an ulp, as float32
      const h = rng.int(0x7bff);
      const lo = halfValue(h);
      const hi = halfValue(h + 1);
      bits[i] = f32Bits((lo + hi) / 2);
    } else if (kind === 4) bits[i] = f32Bits((rng.normal() * 10) ** 3);
    else bits[i] = (rng.u32() & 0x807fffff) | ((rng.int(60) + 95) << 23); // exponents around half's range
  }
  return new Float32Array(bits.buffer);
}

function f32Bits(x: number): number {
  return new Uint32Array(new Float32Array([x]).buffer)[0]!;
}

describe.each(BACKENDS)("float16 kernels: %s", (_name, k) => {
  it("widens every half exactly, NaN payloads kept", () => {
    const out = new Float32Array(65536);
    k.f16ToF32(ALL_HALVES, out);
    const bits = new Uint32Array(out.buffer);
    for (let h = 0; h < 65536; h++) {
      const want = halfValue(h);
      if (Number.isNaN(want)) {
        expect(bits[h]! >>> 0).toBe((((h & 0x8000) << 16) | 0x7f800000 | ((h & 0x3ff) << 13)) >>> 0);
      } else {
        expect(Object.is(out[h], want) || out[h] === want).toBe(true);
        if (want === 0) expect(Object.is(out[h], want)).toBe(true); // signed zero
      }
    }
  });

  it("round-trips every half bit pattern through float32", () => {
    const wide = new Float32Array(65536);
    k.f16ToF32(ALL_HALVES, wide);
    expect(toHalf(k, wide)).toEqual(ALL_HALVES);
  });

  it.each([
    ["1 + 2^-11 ties to even (1.0)", 1 + 2 ** -11, 0x3c00],
    ["1 + 3·2^-11 ties to even (1 + 2^-9)", 1 + 3 * 2 ** -11, 0x3c02],
    ["just above a tie rounds up", f32(0x3f801001), 0x3c01],
    ["65504 is the largest half", 65504, 0x7bff],
    ["65519.996 still rounds to 65504", f32(0x477fefff), 0x7bff],
    ["65520 overflows to inf", 65520, 0x7c00],
    ["-65520 overflows to -inf", -65520, 0xfc00],
    ["1e9 overflows to inf", 1e9, 0x7c00],
    ["inf", Infinity, 0x7c00],
    ["-0 keeps its sign", -0, 0x8000],
    ["2^-24 is the smallest subnormal", 2 ** -24, 0x0001],
    ["2^-25 ties to even (0)", 2 ** -25, 0x0000],
    ["3·2^-25 ties to even (2·2^-24)", 3 * 2 ** -25, 0x0002],
    ["2^-25 plus a little rounds up", f32(0x33000001), 0x0001],
    ["2^-14 - 2^-25 rounds up to the smallest normal", 2 ** -14 - 2 ** -25, 0x0400],
    ["float32 subnormals flush to signed zero", -f32(0x00000001), 0x8000],
  ])("%s", (_what, x, want) => {
    expect(toHalf(k, [x])[0]).toBe(want);
  });

  it.each([
    [0x7fc00000, 0x7e00],
    [0xffc00000, 0xfe00],
    [0x7f800001, 0x7c01], // low payload bits would vanish: stays NaN, not inf
    [0x7f802000, 0x7c01],
    [0x7fbfe000, 0x7dff],
  ])("NaN %s keeps its payload's top bits as NumPy does", (bits, want) => {
    expect(toHalf(k, new Float32Array(new Uint32Array([bits]).buffer))[0]).toBe(want);
  });

  it("respects typed-array views that do not start at offset 0", () => {
    const backing = new Float32Array(40).map((_, i) => i + 0.5);
    const src = backing.subarray(3, 35);
    const dstBacking = new Uint16Array(64);
    const dst = dstBacking.subarray(5, 37);
    k.f32ToF16(src, dst);
    expect(Array.from(dst)).toEqual(Array.from(toHalf(typescriptKernels, Array.from(src))));
    expect(dstBacking[4]).toBe(0);
    expect(dstBacking[37]).toBe(0);
    const back = new Float32Array(64);
    k.f16ToF32(dst, back.subarray(1, 33));
    expect(Array.from(back.subarray(1, 33))).toEqual(Array.from(src));
    expect(back[0]).toBe(0);
  });

  it("rejects buffers of different lengths", () => {
    expect(() => k.f32ToF16(new Float32Array(3), new Uint16Array(2))).toThrow(/equal length/);
  });

  it("counts non-finite values and finds the largest finite magnitude", () => {
    const halves = Uint16Array.from([0x3c00, 0xfbff, 0x7c00, 0xfc00, 0x7e00, 0x0001, 0x4000]);
    // Enough values to cross any vector width, with the extremes in the tail.
    const long = new Uint16Array(1000).fill(0x3c00);
    long[997] = 0x7c00;
    long[998] = 0x7bfe;
    expect(k.f16Stats(halves)).toEqual({ nonfinite: 3, maxAbs: 65504 });
    expect(k.f16Stats(long)).toEqual({ nonfinite: 1, maxAbs: 65472 });
    expect(k.f16Stats(new Uint16Array(0))).toEqual({ nonfinite: 0, maxAbs: 0 });
  });
});

describe("native core", () => {
  it.runIf(process.env.HSM_REQUIRE_NATIVE === "1")("is built and loaded", () => {
    expect(AVAILABLE.find((r) => r.backend === "native")?.implementations.f32ToF16).toBe("native");
  });

  it.runIf(Boolean(nativeKernels))("agrees with the TypeScript reference on a million random float32 values", () => {
    const src = randomFloat32(1_000_000, 7);
    const a = new Uint16Array(src.length);
    const b = new Uint16Array(src.length);
    typescriptKernels.f32ToF16(src, a);
    nativeKernels!.f32ToF16(src, b);
    expect(Buffer.from(b.buffer).equals(Buffer.from(a.buffer))).toBe(true);
    const wa = new Float32Array(src.length);
    const wb = new Float32Array(src.length);
    typescriptKernels.f16ToF32(a, wa);
    nativeKernels!.f16ToF32(a, wb);
    expect(Buffer.from(wb.buffer).equals(Buffer.from(wa.buffer))).toBe(true);
    expect(nativeKernels!.f16Stats(a)).toEqual(typescriptKernels.f16Stats(a));
  });

  it.runIf(Boolean(nativeKernels))(
    "counts like the reference at every length up to three vectors, the extremes in any lane",
    () => {
      const rng = new Rng(5);
      const special = [0x7c00, 0xfc00, 0x7e01, 0xffff, 0x7bfe, 0xfbfe, 0x0000, 0x8000];
      for (let n = 0; n <= 200; n++) {
        // The largest finite half on both sides, and nowhere inside: a kernel that reads past either end finds it.
        const backing = new Uint16Array(n + 65).fill(0x7bff);
        for (let i = 1; i <= n; i++)
          backing[i] = rng.uniform() < 0.1 ? special[rng.int(special.length)]! : rng.int(0x7800);
        const a = backing.subarray(1, n + 1); // off 4-byte alignment, as a store's data can be
        expect(nativeKernels!.f16Stats(a), `length ${n}`).toEqual(typescriptKernels.f16Stats(a));
      }
    },
  );

  it.runIf(Boolean(nativeKernels))(
    "agrees on buffers big enough for threads and streaming stores, at unaligned offsets",
    () => {
      const n = 9_000_003;
      const backing = randomFloat32(n + 5, 13);
      const src = backing.subarray(3, 3 + n);
      const a = new Uint16Array(n + 1).subarray(1); // destination off 16-byte alignment
      const b = new Uint16Array(n);
      nativeKernels!.f32ToF16(src, a);
      typescriptKernels.f32ToF16(src, b);
      expect(Buffer.from(a.buffer, a.byteOffset, a.byteLength).equals(Buffer.from(b.buffer))).toBe(true);
      const wa = new Float32Array(n + 3).subarray(3);
      const wb = new Float32Array(n);
      nativeKernels!.f16ToF32(a, wa);
      typescriptKernels.f16ToF32(b, wb);
      expect(Buffer.from(wa.buffer, wa.byteOffset, wa.byteLength).equals(Buffer.from(wb.buffer))).toBe(true);
    },
  );
});

describe.skipIf(!hasNumpy && !numpyRequired)("float16 against NumPy's astype", () => {
  const dir = tempDir();

  it("matches NumPy on a million random float32 values and on every half", () => {
    const src = randomFloat32(1_000_000, 11);
    writeFileSync(join(dir, "in.f32"), new Uint8Array(src.buffer));
    python(
      `import numpy as np, sys, warnings
warnings.simplefilter("ignore")
d = sys.argv[1]
x = np.fromfile(d + "/in.f32", dtype="<f4")
x.astype(np.float16).tofile(d + "/out.f2")
h = np.arange(65536, dtype=np.uint16).view(np.float16)
h.astype(np.float32).tofile(d + "/halves.f4")`,
      dir,
    );
    const want = new Uint16Array(readFileSync(join(dir, "out.f2")).buffer.slice(0));
    const wantHalves = new Uint32Array(readFileSync(join(dir, "halves.f4")).buffer.slice(0));
    for (const [name, k] of BACKENDS) {
      const got = new Uint16Array(src.length);
      k.f32ToF16(src, got);
      let mismatches = 0;
      for (let i = 0; i < got.length; i++) if (got[i] !== want[i]) mismatches++;
      expect({ backend: name, mismatches }).toEqual({ backend: name, mismatches: 0 });
      const wide = new Float32Array(65536);
      k.f16ToF32(ALL_HALVES, wide);
      expect(Buffer.from(wide.buffer).equals(Buffer.from(wantHalves.buffer))).toBe(true);
    }
  });
});
