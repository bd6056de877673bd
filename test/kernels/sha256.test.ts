/**
 * The hash kernel of every backend available here against node:crypto's
 * sha256 (an independent implementation) and against float statistics counted
 * value by value here: random lengths, chunks split at odd offsets, empty
 * input, two streams updated together, and every float16 class of value;
 * then the native core's whole-file hashing against the same references.
 */
import { createHash } from "node:crypto";
import { writeFileSync } from "node:fs";
import { createRequire } from "node:module";
import { join } from "node:path";

import { describe, expect, it } from "vitest";

import { kernelOptions } from "../../src/kernels/default.js";
import {
  nativeKernels,
  nativeShaPaths,
  nativeSimdLevel,
  nativeSimdLevels,
  setNativeSimd,
} from "../../src/kernels/native.js";
import { Rng } from "../../src/util/random.js";
import { AVAILABLE, atSimdLevel } from "../helpers/backends.js";
import { tempDir } from "../helpers/tmp.js";

const BACKENDS = AVAILABLE.map((r) => [r.label, r.kernels] as const);

function randomBytes(rng: Rng, n: number): Uint8Array {
  const out = new Uint8Array(n);
  for (let i = 0; i < n; i++) out[i] = rng.u32() & 0xff;
  return out;
}

function sha256(data: Uint8Array): string {
  return createHash("sha256").update(data).digest("hex");
}

/** Cut points: random, so that chunks start and end at odd offsets and inside blocks. */
function cuts(rng: Rng, n: number, pieces: number): number[] {
  const at = new Set<number>([0, n]);
  for (let i = 0; i < pieces; i++) at.add(rng.u32() % (n + 1));
  return [...at].sort((a, b) => a - b);
}

/** Counted value by value from the definition: ±inf and NaN are not finite. */
function expectedStats(values: number[]): { nonfinite: number; maxAbs: number } {
  let nonfinite = 0;
  let maxAbs = 0;
  for (const v of values) {
    if (!Number.isFinite(v)) nonfinite++;
    else maxAbs = Math.max(maxAbs, Math.abs(v));
  }
  return { nonfinite, maxAbs };
}

function halfValue(h: number): number {
  const sign = h & 0x8000 ? -1 : 1;
  const e = (h >> 10) & 0x1f;
  const m = h & 0x3ff;
  if (e === 0) return sign * m * 2 ** -24;
  if (e === 31) return m === 0 ? sign * Infinity : NaN;
  return sign * (1 + m / 1024) * 2 ** (e - 15);
}

describe.each(BACKENDS)("sha256Stats on %s", (_name, k) => {
  it("gives node:crypto's digest for the empty input and for lengths around block edges", () => {
    const rng = new Rng(7);
    for (const n of [0, 1, 55, 56, 63, 64, 65, 119, 120, 128, 1000, 4096 + 3]) {
      const data = randomBytes(rng, n);
      const h = k.sha256Stats(0);
      h.update(data);
      expect(h.digest()).toEqual({ sha256: sha256(data) });
    }
    const empty = k.sha256Stats(2);
    expect(empty.digest()).toEqual({ sha256: sha256(new Uint8Array(0)), stats: { nonfinite: 0, maxAbs: 0 } });
  });

  it("gives the same digest however the input is split, at odd offsets and with empty chunks", () => {
    const rng = new Rng(11);
    for (let trial = 0; trial < 20; trial++) {
      const n = rng.u32() % 300_000;
      const data = randomBytes(rng, n);
      const h = k.sha256Stats(0);
      const at = cuts(rng, n, 1 + (rng.u32() % 12));
      h.update(data.subarray(0, 0));
      for (let i = 1; i < at.length; i++) h.update(data.subarray(at[i - 1]!, at[i]!));
      expect(h.digest().sha256).toBe(sha256(data));
    }
  });

  it("updates two streams together as if each were alone, chunks of unequal lengths included", () => {
    const rng = new Rng(13);
    for (let trial = 0; trial < 10; trial++) {
      const a = randomBytes(rng, rng.u32() % 200_000);
      const b = randomBytes(rng, rng.u32() % 200_000);
      const ha = k.sha256Stats(2);
      const hb = k.sha256Stats(2);
      const ca = cuts(rng, a.length, 6);
      const cb = cuts(rng, b.length, 6);
      // Even cut points keep every float16 value whole; the header (the first 128 bytes) is not counted.
      const even = (xs: number[], n: number) =>
        [...new Set(xs.map((x) => Math.min(n, x - (x % 2))).concat([n]))].sort((x, y) => x - y);
      const ea = even(ca, a.length);
      const eb = even(cb, b.length);
      for (let i = 1; i < Math.max(ea.length, eb.length); i++) {
        const pa = i < ea.length ? a.subarray(ea[i - 1]!, ea[i]!) : a.subarray(a.length);
        const pb = i < eb.length ? b.subarray(eb[i - 1]!, eb[i]!) : b.subarray(b.length);
        const fa = i < ea.length ? Math.max(0, 128 - ea[i - 1]!) : 0;
        const fb = i < eb.length ? Math.max(0, 128 - eb[i - 1]!) : 0;
        ha.updateWith(pa, Math.min(fa, pa.length), hb, pb, Math.min(fb, pb.length));
      }
      const halves = (x: Uint8Array) => {
        const out: number[] = [];
        for (let i = 128; i + 1 < x.length; i += 2) out.push(halfValue(x[i]! | (x[i + 1]! << 8)));
        return out;
      };
      expect(ha.digest()).toEqual({ sha256: sha256(a), stats: expectedStats(halves(a)) });
      expect(hb.digest()).toEqual({ sha256: sha256(b), stats: expectedStats(halves(b)) });
    }
  });

  it("counts every float16 value class: all 65,536 halves, data starting after a header", () => {
    const halves = new Uint16Array(65_536);
    for (let i = 0; i < halves.length; i++) halves[i] = i;
    const data = new Uint8Array(64 + halves.byteLength);
    data.set(new Uint8Array(halves.buffer), 64);
    const h = k.sha256Stats(2);
    // Split inside the data at a value boundary, not at a block edge.
    h.update(data.subarray(0, 64 + 2 * 3001), 64);
    h.update(data.subarray(64 + 2 * 3001));
    expect(h.digest()).toEqual({ sha256: sha256(data), stats: expectedStats(Array.from(halves, halfValue)) });
    // 2 × 1024 × 2 − 2 NaN payloads (both signs) and 2 infinities; 65504 the largest finite half.
    expect(expectedStats(Array.from(halves, halfValue))).toEqual({ nonfinite: 2048, maxAbs: 65504 });
  });

  it("counts float32 values: infinities, NaNs, the largest finite float32, negative zero", () => {
    const rng = new Rng(17);
    const values = new Float32Array(100_003);
    for (let i = 0; i < values.length; i++) values[i] = (rng.u32() / 2 ** 32 - 0.5) * 1e6;
    values[5] = Infinity;
    values[77] = -Infinity;
    values[1000] = NaN;
    values[99_999] = -3.4028234663852886e38;
    values[3] = -0;
    const data = new Uint8Array(128 + values.byteLength);
    data.set(new Uint8Array(values.buffer), 128);
    const h = k.sha256Stats(4);
    h.update(data.subarray(0, 128 + 4 * 777), 128);
    h.update(data.subarray(128 + 4 * 777));
    expect(h.digest()).toEqual({ sha256: sha256(data), stats: { nonfinite: 3, maxAbs: 3.4028234663852886e38 } });
  });
});

const native = nativeKernels(kernelOptions());

describe.skipIf(!native)("sha256Files (native core)", () => {
  const dir = tempDir("hsm-sha256-files-");
  const rng = new Rng(19);
  const CHUNK = 128 << 10; // the native read size: lengths around it cross chunk edges
  const WINDOW = 2 << 20; // the bytes of a file the native core maps at a time
  const write = (name: string, data: Uint8Array) => {
    writeFileSync(join(dir, name), data);
    return join(dir, name);
  };

  it("gives node:crypto's digest and the length of files around block, chunk and window edges, on 1 to 8 threads", async () => {
    const datas = [
      ...[0, 1, 63, 64, 65, 1000, CHUNK - 1, CHUNK, CHUNK + 1, 2 * CHUNK + 37, 3 * CHUNK],
      ...[WINDOW - 1, WINDOW, WINDOW + 1, 2 * WINDOW + CHUNK + 37],
    ].map((n) => randomBytes(rng, n));
    const jobs = datas.map((d, i) => ({ path: write(`bytes-${i}.bin`, d), statsFrom: 0, width: 0 as const }));
    for (const threads of [1, 2, 3, 8]) {
      const got = await native!.sha256Files(jobs, threads);
      expect(got).toEqual(datas.map((d) => ({ sha256: sha256(d), bytes: d.length })));
    }
  });

  it("counts float16 values after a header across chunk edges, and float32 values, files of both widths together", async () => {
    // Every half value, twice over, so that infinities and NaNs sit on both sides of a chunk edge.
    const halves = new Uint16Array(2 * 65_536 + 5);
    for (let i = 0; i < halves.length; i++) halves[i] = (i * 7919) & 0xffff;
    const f16 = new Uint8Array(128 + halves.byteLength);
    f16.set(new Uint8Array(halves.buffer), 128);
    const floats = new Float32Array(CHUNK / 4 + 1001);
    for (let i = 0; i < floats.length; i++) floats[i] = (rng.u32() / 2 ** 32 - 0.5) * 1e30;
    floats[CHUNK / 4 - 32] = Infinity;
    floats[CHUNK / 4 - 31] = NaN;
    floats[CHUNK / 4 + 7] = -3.4028234663852886e38;
    const f32 = new Uint8Array(64 + floats.byteLength);
    f32.set(new Uint8Array(floats.buffer), 64);
    const jobs = [
      { path: write("a.f16", f16), statsFrom: 128, width: 2 as const },
      { path: write("b.f32", f32), statsFrom: 64, width: 4 as const },
      { path: write("c.f16", f16.subarray(0, f16.length - 1)), statsFrom: 128, width: 2 as const },
      { path: join(dir, "a.f16"), statsFrom: 0, width: 0 as const },
    ];
    const want = [
      { sha256: sha256(f16), bytes: f16.length, stats: expectedStats(Array.from(halves, halfValue)) },
      { sha256: sha256(f32), bytes: f32.length, stats: expectedStats(Array.from(floats)) },
      // A trailing odd byte is hashed but is no value.
      {
        sha256: sha256(f16.subarray(0, f16.length - 1)),
        bytes: f16.length - 1,
        stats: expectedStats(Array.from(halves.subarray(0, halves.length - 1), halfValue)),
      },
      { sha256: sha256(f16), bytes: f16.length },
    ];
    expect(want[1]!.stats).toEqual({ nonfinite: 2, maxAbs: 3.4028234663852886e38 });
    for (const threads of [1, 2]) expect(await native!.sha256Files(jobs, threads)).toEqual(want);
  });

  it("gives undefined for a file it cannot open or read, and still hashes the others", async () => {
    const data = randomBytes(rng, 5000);
    const path = write("ok.bin", data);
    const got = await native!.sha256Files(
      [
        { path: join(dir, "missing.bin"), statsFrom: 0, width: 0 },
        { path, statsFrom: 0, width: 0 },
        { path: dir, statsFrom: 0, width: 0 },
      ],
      2,
    );
    expect(got).toEqual([undefined, { sha256: sha256(data), bytes: 5000 }, undefined]);
  });
});

/** The addon's test hook for where the sixteen lanes start (src/kernels/native.ts passes test hooks by). */
function setWideFrom(streams: number): void {
  const path =
    process.env.HSM_NATIVE_PATH ??
    join(import.meta.dirname, "..", "..", "native", "build", "Release", "hsm_native.node");
  (createRequire(import.meta.url)(path) as { testShaWideFrom(k: number): void }).testShaWideFrom(streams);
}

/**
 * The native core's whole-file hashing at each SIMD level this CPU has: plain C++, and from avx2 up the SHA
 * extensions with the vector lanes (eight AVX2 lanes at avx2, sixteen AVX-512 lanes above) where timed to win, from
 * two streams, and never.
 */
const FILE_HASHERS = native
  ? nativeSimdLevels.flatMap((level) =>
      (level === "portable" ? [0] : [0, 2, 17]).map((wideFrom) => {
        const label = wideFrom === 0 ? level : `${level}, lanes ${wideFrom === 2 ? "from two streams" : "never"}`;
        return [label, atSimdLevel(nativeKernels(kernelOptions())!, level).sha256Files, wideFrom] as const;
      }),
    )
  : [];

describe.skipIf(FILE_HASHERS.length === 0).each(FILE_HASHERS)(
  "sha256Files with many files at once, %s",
  (_l, hashFilesAtLevel, wideFrom) => {
    const hashFiles: typeof hashFilesAtLevel = async (jobs, threads) => {
      setWideFrom(wideFrom);
      try {
        return await hashFilesAtLevel(jobs, threads);
      } finally {
        setWideFrom(0);
      }
    };
    const dir = tempDir("hsm-sha256-lanes-");
    const rng = new Rng(23);
    const CHUNK = 128 << 10;

    it("gives node:crypto's digests and counts when up to sixteen files share a thread and end at different blocks", async () => {
      // Lengths from nothing to a few chunks, some on block and chunk edges: the lanes run dry one by one,
      // so every count of streams in flight is hashed, wide lanes and the SHA extensions' groups alike.
      const lengths = Array.from({ length: 37 }, (_, i) =>
        i % 6 === 0 ? CHUNK * (1 + (i % 3)) + 64 * (i % 5) : 128 + 2 * (rng.u32() % (2 * CHUNK)),
      );
      const datas = lengths.map((n) => randomBytes(rng, n));
      const jobs = datas.map((d, i) => {
        writeFileSync(join(dir, `f${i}.bin`), d);
        return { path: join(dir, `f${i}.bin`), statsFrom: 128, width: 2 as const };
      });
      const want = datas.map((d) => {
        const halves = new Uint16Array(d.buffer, 128, (d.length - 128) / 2);
        return { sha256: sha256(d), bytes: d.length, stats: expectedStats(Array.from(halves, halfValue)) };
      });
      // One thread takes sixteen files at a time, two and three threads sixteen and thirteen, five threads eight.
      for (const threads of [1, 2, 3, 5]) expect(await hashFiles(jobs, threads)).toEqual(want);
    });

    it("hashes sixteen files of one length in lockstep, and a seventeenth after them", async () => {
      const datas = Array.from({ length: 17 }, () => randomBytes(rng, 3 * CHUNK + 1000));
      const jobs = datas.map((d, i) => {
        writeFileSync(join(dir, `same${i}.bin`), d);
        return { path: join(dir, `same${i}.bin`), statsFrom: 0, width: 0 as const };
      });
      expect(await hashFiles(jobs, 1)).toEqual(datas.map((d) => ({ sha256: sha256(d), bytes: d.length })));
    });
  },
);

describe.skipIf(!native)("the whole-file hashing paths named", () => {
  it("follow the SIMD level in force: AVX2 lanes at avx2, AVX-512 lanes above, neither lanes nor SHA extensions at portable", () => {
    const before = nativeSimdLevel()!;
    try {
      for (const level of nativeSimdLevels) {
        setNativeSimd(level);
        const paths = nativeShaPaths()!;
        if (level === "portable") expect(paths).toBe("portable");
        else if (level === "avx2") expect(paths).toMatch(/^avx2-lanes(\+sha-ni)?$/);
        else expect(paths).toMatch(/^avx512-lanes(\+sha-ni)?$/);
      }
    } finally {
      setNativeSimd(before);
    }
  });
});
