/**
 * The native core's boundary: a C++ exception in any entry (out of memory, a
 * thread that cannot start, anything else) reaches JavaScript as an Error naming
 * the entry instead of ending the process; every buffer is checked against the
 * counts that come with it, products taken without wrapping around; and the
 * SIMD level can be held down (setNativeSimd, HSM_SIMD). Were an exception to
 * escape, this file's process would abort and its tests fail.
 */
import { spawnSync } from "node:child_process";
import { createHash } from "node:crypto";
import { existsSync, mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { createRequire } from "node:module";
import { tmpdir } from "node:os";
import { join } from "node:path";

import { describe, expect, it } from "vitest";

import { UsageError } from "../../src/errors.js";
import {
  largeArrayBuffer,
  nativeSimdLevel,
  nativeSimdLevels,
  setNativeSimd,
  SIMD_LEVELS,
} from "../../src/kernels/native.js";

const root = join(import.meta.dirname, "..", "..");
const addonPath = process.env.HSM_NATIVE_PATH ?? join(root, "native", "build", "Release", "hsm_native.node");

/** The addon's raw exports, test hooks included (src/kernels/native.ts passes them by). */
const addon = existsSync(addonPath)
  ? (createRequire(import.meta.url)(addonPath) as Record<string, unknown>)
  : undefined;

/** Calls the addon's export `name`. */
function call(name: string, ...args: unknown[]): unknown {
  return (addon![name] as (...a: unknown[]) => unknown)(...args);
}

const f32 = (n: number) => new Float32Array(n);
const f64 = (n: number) => new Float64Array(n);
const i32 = (n: number) => new Int32Array(n);
const u8 = (n: number) => new Uint8Array(n);
const u16 = (n: number) => new Uint16Array(n);
/** A count whose product with another such count wraps around 64 bits. */
const HUGE = 2 ** 40;

describe.runIf(Boolean(addon))("native entries and C++ exceptions", () => {
  it.each([
    ["bad_alloc", /^testThrow: out of memory in the native core$/],
    ["system_error", /^testThrow: system error in the native core \(test: .+\)$/],
    ["runtime_error", /^testThrow: C\+\+ exception in the native core \(test\)$/],
    ["anything", /^testThrow: unknown C\+\+ exception in the native core$/],
  ])("a %s thrown in C++ becomes an Error naming the entry", (kind, message) => {
    expect(() => call("testThrow", kind)).toThrow(message);
  });

  it("a thread that cannot start fails the call, after the threads already started are joined", () => {
    const n = 4096;
    const h = f32(n * 4).fill(1);
    const out = f64(n);
    call("testFailThreadStart", 2); // the second of three shares' threads
    expect(() => call("rowsTimes", h, n, 4, f64(4).fill(1), 1, out, 3)).toThrow(
      /^rowsTimes: system error in the native core \(thread start failed/,
    );
    call("rowsTimes", h, n, 4, f64(4).fill(1), 1, out, 3);
    expect([out[0], out[n - 1]]).toEqual([4, 4]);
  });

  it("whole-file hashing shares the files among the threads that did start", async () => {
    const dir = mkdtempSync(join(tmpdir(), "hsm-boundary-"));
    try {
      const paths = [0, 1, 2].map((i) => join(dir, `f${i}`));
      paths.forEach((p, i) => writeFileSync(p, Buffer.alloc(1000 + i, i)));
      call("testFailThreadStart", 1);
      const got = (await call("sha256Files", paths, f64(3), u8(3), 3)) as [string][];
      const want = paths.map((_, i) =>
        createHash("sha256")
          .update(Buffer.alloc(1000 + i, i))
          .digest("hex"),
      );
      expect(got.map((r) => r[0])).toEqual(want);
    } finally {
      call("testFailThreadStart", 0);
      rmSync(dir, { recursive: true, force: true });
    }
  });
});

describe.runIf(Boolean(addon))("native buffer checks", () => {
  const state = () => {
    const s = u8(addon!.sha256StateBytes as number);
    call("sha256Init", s);
    return s;
  };
  it.each<[string, () => unknown[], string]>([
    ["rankAgainstAnchors", () => [f32(4), i32(1), f32(4), HUGE, HUGE, i32(1), f32(1), i32(1), 1, false], "anchors"],
    ["rankAgainstAnchors", () => [f32(4), i32(2), f32(4), 2, 2, i32(2), f32(1), i32(2), 1, false], "ownScore"],
    ["bootstrapMean", () => [1, 1, f64(2), 3, f64(2), 1], "out"],
    ["rowsTimes", () => [f32(4), 2, 2, f64(4), 2 ** 52, f64(4), 1], "v"],
    ["rowsTimes", () => [f32(4), 2, 2, f64(4), 2, f64(3), 1], "out"],
    ["rowsTransposeTimes", () => [f32(4), 2, 2, f64(4), 2 ** 52, f64(4), 1], "g"],
    ["logisticPass", () => [f32(4), 2, 2, f64(4), f64(2), u8(2), u8(3), 2, f64(2), f64(2), f64(4), 1], "train"],
    ["logisticPass", () => [f32(4), 2, 2, f64(4), f64(2), u8(2), u8(4), 2, f64(2), f64(2), f64(3), 1], "grad"],
    ["centreRows", () => [f32(4), HUGE, HUGE, u8(4), f32(4), 1], "h"],
    ["anchorCosines", () => [f32(4), i32(1), f32(4), HUGE, HUGE, i32(1), f64(1), f64(1), 1], "anchors"],
    ["standardizeRows", () => [f32(4), i32(1), 2, f32(1), f64(2), f64(2), 1], "out"],
    ["addMoments", () => [f32(4), i32(1), 4, f64(2), f64(4), 1], "sum"],
    ["prepareHead", () => [f32(4), HUGE, HUGE, u16(4), u16(4), f32(4), 1], "w"],
    ["headArgmax", () => [f32(4), HUGE, HUGE, u16(4), u16(4), f32(4), 1, i32(1), 1, false], "h"],
    ["sha256Final", () => [state(), u8(16)], "digest"],
  ])("%s refuses a short %s… (RangeError naming it)", (entry, args, name) => {
    expect(() => call(entry, ...args())).toThrow(RangeError);
    expect(() => call(entry, ...args())).toThrow(new RegExp(`^Expected ${name} large enough for `));
  });

  it("checks every bootstrapAuroc job before drawing any", () => {
    // One group: facts 0 and 1, labels 0 and 1, two runs of tied scores.
    const job = (out: Float64Array) => [
      1,
      2,
      Int32Array.of(0, 1),
      Uint8Array.of(0, 1),
      Int32Array.of(0, 1, 2),
      2,
      3,
      out,
    ];
    const paired = [null, null, null, 0, null, null];
    const first = f64(3).fill(7);
    expect(() =>
      call(
        "bootstrapAuroc",
        [
          [...job(first), ...paired],
          [...job(f64(2)), ...paired],
        ],
        1,
      ),
    ).toThrow(/^Expected out large enough for /);
    expect(() => call("bootstrapAuroc", [[...job(first), ...paired], job(f64(3))], 1)).toThrow(
      /^Expected each bootstrap job as an array of 14 arguments/,
    );
    expect(() => call("bootstrapAuroc", "jobs", 1)).toThrow(/^Expected an array of bootstrap jobs/);
    expect([...first]).toEqual([7, 7, 7]); // refused at once: nothing was drawn
  });

  it("joins JSON lines only against ids it indexed itself", () => {
    const bytes = Buffer.from('{"id":"a","v":"x"}');
    const ids = call("jsonlIdRows", "a\nb", 2);
    expect(() => call("jsonlIdRows", "a\nb", 1)).toThrow(/^Expected as many ids as the count/);
    expect(() => call("jsonlIdRows", "a\nb", 3)).toThrow(/^Expected as many ids as the count/);
    expect([...(call("jsonlJoin", bytes, ["id", "v"], ids, ["x"]) as Int32Array)]).toEqual([0, 0, 18, 0, 0, 0, 7, 8]);
    expect(() => call("jsonlJoin", bytes, ["id", "v"], {}, ["x"])).toThrow(/^Expected ids from jsonlIdRows/);
    expect(() => call("jsonlJoin", bytes, ["id", "v"], call("largeBuffer", 8), ["x"])).toThrow(
      /^Expected ids from jsonlIdRows/,
    );
    expect(() => call("jsonlJoin", bytes, ["id"], ids, ["x"])).toThrow(/^Expected the id key and the value key/);
    expect(() => call("jsonlJoin", bytes, ["id", "v"], ids, "x")).toThrow(/^Expected an array of values/);
  });

  it("places sorted groups from the order it checked, whatever the outputs share or the lists run", () => {
    const args = (order: Int32Array, facts: unknown[], fact = Int32Array.of(0)) => [
      order,
      Float64Array.of(0.5),
      Uint8Array.of(1),
      Int32Array.of(0),
      fact,
      Int32Array.of(-1),
      facts,
      [new Uint8Array(2)],
      [new Int32Array(3)],
      new Float64Array(1),
    ];
    // Group 0's facts share memory with the order: writing its first fact must not move the second row read.
    const buffer = new ArrayBuffer(12);
    const order = new Int32Array(buffer, 0, 2);
    expect([
      ...(call(
        "sortedGroups",
        ...args(order, [new Int32Array(buffer, 4, 2)], Int32Array.of(2 ** 31 - 1)),
      ) as Int32Array),
    ]).toEqual([2]);
    // A getter on the lists that rewrites the order runs before the order is read.
    const rewritten = Int32Array.of(0, 0);
    const facts: unknown[] = [];
    Object.defineProperty(facts, 0, { get: () => ((rewritten[1] = 2 ** 30), new Int32Array(2)) });
    expect(() => call("sortedGroups", ...args(rewritten, facts))).toThrow(/^Expected rows below the score count/);
  });

  it("refuses rows outside x", () => {
    const rank = (rows: Int32Array) => () =>
      call("rankAgainstAnchors", f32(4), rows, f32(4), 2, 2, i32(1), f32(1), i32(1), 1, false);
    expect(rank(Int32Array.of(2))).toThrow(/^Expected rows inside x/);
    expect(rank(Int32Array.of(-1))).toThrow(/^Expected rows inside x/);
    expect(rank(Int32Array.of(1))).not.toThrow();
    expect(() => call("anchorCosines", f32(4), Int32Array.of(2), f32(4), 2, 2, i32(1), f64(1), f64(1), 1)).toThrow(
      /^Expected rows inside x/,
    );
  });

  it("takes a layer's rows as float32 or as float16 bits, counted in values, and nothing else", () => {
    expect(() => call("rowsTimes", u16(3), 2, 2, f64(2), 1, f64(2), 1)).toThrow(/^Expected h large enough for /);
    expect(() => call("rowsTimes", u16(4), 2, 2, f64(2), 1, f64(2), 1)).not.toThrow();
    expect(() => call("rowsTimes", f64(4), 2, 2, f64(2), 1, f64(2), 1)).toThrow(
      /^Expected Float32Array or Uint16Array for h/,
    );
    expect(() => call("rowsTransposeTimes", u16(4), 2, 2, f64(2), 1, f64(2), 1)).toThrow(
      /^Expected Float32Array for h/,
    );
    expect(() => call("centreRows", f64(4), 2, 2, u8(2), f32(4), 1)).toThrow(TypeError);
    expect(() => call("standardizeRows", i32(4), i32(1), 2, f32(2), f64(2), f64(2), 1)).toThrow(TypeError);
  });

  it("takes fold moments' folds as starts into one row list, sums sized folds × d", () => {
    const starts = Int32Array.of(0, 1, 2);
    expect(() => call("foldMoments", f32(4), 2, i32(2), starts, f64(3), f64(4), 1)).toThrow(
      /^Expected sum large enough for folds × d/,
    );
    expect(() => call("foldMoments", f32(4), 2, i32(2), Int32Array.of(0, 2, 1), f64(4), f64(4), 1)).toThrow(
      /^Expected fold starts ascending from 0 to the row count/,
    );
    expect(() => call("foldMoments", f32(4), 2, Int32Array.of(0, 2), starts, f64(4), f64(4), 1)).toThrow(
      /^Expected rows inside h/,
    );
    expect(call("foldMoments", f32(4), 2, Int32Array.of(1, 0), starts, f64(4), f64(4), 1)).toBe(true);
    expect(call("foldMoments", f32(4), 2, Int32Array.of(1, 0, 0), Int32Array.of(0, 3), f64(2), f64(2), 1)).toBe(false);
  });

  it("refuses counts that are not whole numbers below 2^53", () => {
    for (const n of [-1, 0.5, 2 ** 53, 1e300, NaN]) {
      expect(() => call("rowsTimes", f32(4), n, 2, f64(4), 1, f64(4), 1)).toThrow(TypeError);
    }
  });
});

describe.runIf(Boolean(addon))("SIMD level override", () => {
  it("offers the portable level and those above it this CPU has, in order", () => {
    expect(nativeSimdLevels[0]).toBe("portable");
    expect(SIMD_LEVELS.slice(0, nativeSimdLevels.length)).toEqual(nativeSimdLevels);
    expect(nativeSimdLevel()).toBe(nativeSimdLevels.at(-1));
  });

  it("holds the kernels to each level, and refuses unknown levels and levels this CPU lacks", () => {
    try {
      for (const level of nativeSimdLevels) {
        setNativeSimd(level);
        expect(nativeSimdLevel()).toBe(level);
      }
      expect(() => setNativeSimd("sse4")).toThrow(UsageError);
      const unknown = /^Expected portable, avx2, avx512 or amx for the SIMD level but received "sse4"$/;
      expect(() => setNativeSimd("sse4")).toThrow(unknown);
      for (const level of SIMD_LEVELS.slice(nativeSimdLevels.length)) {
        expect(() => setNativeSimd(level)).toThrow(/Expected a SIMD level this CPU has/);
      }
    } finally {
      setNativeSimd(nativeSimdLevels.at(-1)!);
    }
  });

  /** What a fresh process reports under HSM_SIMD=`value`. */
  function underEnv(value: string): string {
    const script = `
      const n = await import(${JSON.stringify(join(root, "dist", "kernels", "native.js"))});
      try { n.nativeKernels({ threads: 1, allowBf16: true }); console.log(n.nativeSimdLevel(), n.nativeSimd); }
      catch (e) { console.log(e.name + ": " + e.message); }`;
    const env = { ...process.env, HSM_SIMD: value, HSM_NATIVE_PATH: addonPath };
    const r = spawnSync(process.execPath, ["--input-type=module", "-e", script], { encoding: "utf8", env });
    return r.stdout.trim();
  }

  it("reads HSM_SIMD once at load; a bad value makes every use of the native kernels a usage error", () => {
    expect(underEnv("portable")).toBe("portable portable");
    expect(underEnv("avx9")).toBe(
      'UsageError: HSM_SIMD: Expected portable, avx2, avx512 or amx for the SIMD level but received "avx9"',
    );
  });
});

describe.runIf(Boolean(addon))("large buffers", () => {
  it("are zero-filled, of the length asked, and hold what is written", () => {
    // Through largeArrayBuffer, and from the addon itself on either side of one 2 MB page, where its own mapping
    // gives way to an ordinary allocation.
    const buffers = [9 * 2 ** 20 + 3, 1000].map((bytes) => [bytes, largeArrayBuffer(bytes)] as const);
    for (const bytes of [0, 1000, 2 * 2 ** 20 - 1, 2 * 2 ** 20, 3 * 2 ** 20 + 5])
      buffers.push([bytes, call("largeBuffer", bytes) as ArrayBuffer]);
    for (const [bytes, buffer] of buffers) {
      const b = new Uint8Array(buffer);
      expect(b.byteLength).toBe(bytes);
      expect(b.every((v) => v === 0)).toBe(true);
      for (let i = 0; i < bytes; i += 4093) b[i] = i % 251;
      if (bytes > 0) b[bytes - 1] = 7;
      for (let i = 0; i < bytes - 1; i += 4093) expect(b[i]).toBe(i % 251);
      if (bytes > 0) expect(b[bytes - 1]).toBe(7);
    }
  });

  it("refuses a byte count that is not a whole number", () => {
    for (const bad of [-1, 1.5, Number.NaN, "8"]) expect(() => call("largeBuffer", bad)).toThrow(TypeError);
  });

  it("are unmapped once collected", () => {
    // 64 buffers of 64 MB, each filled and dropped: were none handed back, the process would peak at 4 GB. Node
    // runs the finalizers that unmap them between turns of the event loop, so each drop is followed by one.
    const script = `
      const { largeArrayBuffer } = await import(${JSON.stringify(join(root, "dist", "kernels", "native.js"))});
      for (let i = 0; i < 64; i++) {
        new Uint8Array(largeArrayBuffer(64 * 2 ** 20)).fill(1);
        await new Promise((turn) => setImmediate(turn));
      }
      console.log(process.resourceUsage().maxRSS * 1024);`;
    const env = { ...process.env, HSM_NATIVE_PATH: addonPath };
    const r = spawnSync(process.execPath, ["--input-type=module", "-e", script], { encoding: "utf8", env });
    expect(r.stderr).toBe("");
    expect(Number(r.stdout)).toBeLessThan(2 ** 30);
  });
});
