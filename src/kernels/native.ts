/**
 * The one place that loads the native core (`native/`) and adapts what it
 * exports to the kernel interface (src/kernels/types.ts). Every option — the
 * thread count, whether the rank and head kernels may use bfloat16 — arrives here from
 * TypeScript and is passed to the addon as an argument. The one exception is the
 * SIMD level (HSM_SIMD, setNativeSimd), which is process-wide inside the addon.
 */
import { createRequire } from "node:module";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";

import { UsageError } from "../errors.js";
import type { JsonlScan } from "../util/jsonl.js";
import { f16BitsToNumber } from "./typescript/float16.js";
import { syncProducts } from "./typescript/products.js";
import type { FileHash, FileHashJob, KernelOptions, Kernels, LayerRows, Sha256Files, Sha256Stream } from "./types.js";

/** What `hsm_native.node` exports; nothing else touches the addon. */
interface NativeBinding {
  /** "f16c" where the CPU has AVX2 and F16C, else "portable" (the float16 path at the highest level). */
  simd: string;
  /** The SIMD levels this CPU has, lowest first. */
  simdLevels: SimdLevel[];
  /** Caps the SIMD level every kernel uses; throws for an unknown level or one the CPU lacks. */
  setSimd(level: string): void;
  /** The level in force. */
  simdLevel(): SimdLevel;
  f32ToF16(src: Float32Array, dst: Uint16Array, threads: number): void;
  f16ToF32(src: Uint16Array, dst: Float32Array, threads: number): void;
  f16Stats(src: Uint16Array, threads: number): [number, number];
  /** Hands malloc's free pages back to the system. */
  trimHeap(): void;
  /** A zero-filled ArrayBuffer in a mapping of its own, offered 2 MB pages. */
  largeBuffer(bytes: number): ArrayBuffer;
  /** The spans of top-level string members in whole lines of JSON (src/util/jsonl.ts's JsonlScan). */
  jsonlKeys(bytes: Uint8Array, keys: string[]): Int32Array;
  /** json_scan.h's IdRows of the `count` ids of `ids` (one per line), for jsonlJoin. */
  jsonlIdRows(ids: string, count: number): object;
  /** JSON lines' id member joined to rows and value member matched to `values` (native/json_scan.h's ScanJsonlJoin). */
  jsonlJoin(bytes: Uint8Array, keys: [string, string], idRows: object, values: readonly string[]): Int32Array;
  /** Where one JSON document's top-level arrays of plain strings are (native/json_scan.h), or null. */
  jsonRowArrays(bytes: Uint8Array, keys: string[]): Int32Array | null;
  /** `rows` ordered by (score, their order), −0 with +0; null where a score is NaN (native/order.h). */
  orderByScore(rows: Int32Array, score: Float64Array): Int32Array | null;
  /** Sorted rows taken into groups, with each group's unweighted AUROC (native/order.h); per group its ties' length. */
  sortedGroups(
    order: Int32Array,
    score: Float64Array,
    y: Uint8Array,
    groupOf: Int32Array,
    factOf: Int32Array,
    pooledFactOf: Int32Array,
    fact: Int32Array[],
    label: Uint8Array[],
    ties: Int32Array[],
    auroc: Float64Array,
  ): Int32Array;
  /** The whole-file hashing paths at the level in force: vector lanes ("avx512-lanes", "avx2-lanes") and "sha-ni", joined by "+", or "portable". */
  shaPaths(): string;
  /** Bytes of the hash state a caller keeps between chunks. */
  sha256StateBytes: number;
  sha256Init(state: Uint8Array): void;
  sha256Update(state: Uint8Array, data: Uint8Array, statsFrom: number, width: number): void;
  sha256Update2(
    stateA: Uint8Array,
    dataA: Uint8Array,
    statsFromA: number,
    stateB: Uint8Array,
    dataB: Uint8Array,
    statsFromB: number,
    width: number,
  ): void;
  sha256Final(state: Uint8Array, digest: Uint8Array): [number, number];
  /** Per path: [hex digest, bytes, nonfinite, maxBits], or the errno of the failed open or read. */
  sha256Files(
    paths: string[],
    statsFrom: Float64Array,
    widths: Uint8Array,
    threads: number,
  ): Promise<([string, number, number, number] | number)[]>;
  rankAgainstAnchors(
    x: Float32Array,
    rows: Int32Array,
    a: Float32Array,
    nAnchors: number,
    d: number,
    own: Int32Array,
    ownScore: Float32Array,
    above: Int32Array,
    threads: number,
    allowBf16: boolean,
  ): void;
  bootstrapMean(
    seed: number,
    stream: number,
    values: Float64Array,
    b: number,
    out: Float64Array,
    threads: number,
  ): void;
  rowsTimes(h: LayerRows, n: number, d: number, v: Float64Array, k: number, out: Float64Array, threads: number): void;
  rowsTransposeTimes(
    h: Float32Array,
    n: number,
    d: number,
    g: Float64Array,
    k: number,
    out: Float64Array,
    threads: number,
  ): void;
  centreRows(h: LayerRows, n: number, d: number, valid: Uint8Array, out: Float32Array, threads: number): number;
  anchorCosines(
    x: Float32Array,
    rows: Int32Array,
    a: Float32Array,
    nAnchors: number,
    d: number,
    own: Int32Array,
    ownCos: Float64Array,
    otherCos: Float64Array,
    threads: number,
  ): void;
  standardizeRows(
    h: LayerRows,
    rows: Int32Array,
    d: number,
    out: Float32Array,
    mean: Float64Array,
    scale: Float64Array,
    threads: number,
  ): void;
  addMoments(
    h: Float32Array,
    rows: Int32Array,
    d: number,
    sum: Float64Array,
    sumSquares: Float64Array,
    threads: number,
  ): void;
  foldMoments(
    h: Float32Array,
    d: number,
    rows: Int32Array,
    starts: Int32Array,
    sum: Float64Array,
    sumSquares: Float64Array,
    threads: number,
  ): boolean;
  logisticPass(
    h: Float32Array,
    n: number,
    d: number,
    v: Float64Array,
    offset: Float64Array,
    y: Uint8Array,
    train: Uint8Array,
    k: number,
    loss: Float64Array,
    gsum: Float64Array,
    grad: Float64Array,
    threads: number,
  ): void;
  prepareHead(
    w: Float32Array,
    d: number,
    vocab: number,
    hi: Uint16Array,
    lo: Uint16Array,
    norms: Float32Array,
    threads: number,
  ): void;
  /** Returns the float64 dot products taken. */
  headArgmax(
    h: Float32Array,
    batch: number,
    d: number,
    hi: Uint16Array,
    lo: Uint16Array,
    norms: Float32Array,
    vocab: number,
    out: Int32Array,
    threads: number,
    allowBf16: boolean,
  ): number;
  /** Each job: [seed, stream, fact, label, ties, nFacts, b, out, pFact, pLabel, pTies, pNFacts, toPaired, pOut]. */
  bootstrapAuroc(jobs: unknown[][], threads: number): Promise<void>;
}

/**
 * The SIMD levels the native core can be held to, lowest first: `portable`
 * (plain C++, no SHA extensions either), `avx2` (AVX2, F16C and the SHA
 * extensions), `avx512` (every AVX-512 path the CPU has as well), `amx` (the
 * AMX tile paths too).
 */
export const SIMD_LEVELS = ["portable", "avx2", "avx512", "amx"] as const;
export type SimdLevel = (typeof SIMD_LEVELS)[number];

/** The kernels the native core implements, and whole-file hashing (which only the native core does). */
export type NativeKernels = Pick<
  Kernels,
  | "f32ToF16"
  | "f16ToF32"
  | "f16Stats"
  | "sha256Stats"
  | "centreRows"
  | "rank"
  | "anchorCosines"
  | "standardizeRows"
  | "foldMoments"
  | "products"
  | "rowsTimes"
  | "bootstrapMean"
  | "bootstrapAuroc"
  | "prepareHead"
  | "headArgmax"
> & { sha256Files: Sha256Files };

const root = join(dirname(fileURLToPath(import.meta.url)), "..", "..");

/** Why the addon could not be loaded, one entry per place tried; empty when it loaded. */
export const nativeLoadErrors: string[] = [];

function loadBinding(): { binding: NativeBinding; path: string } | undefined {
  const require = createRequire(import.meta.url);
  // HSM_NATIVE_PATH names the one addon to try (a custom build, or a missing one to test the fallback).
  const candidates = process.env.HSM_NATIVE_PATH
    ? [process.env.HSM_NATIVE_PATH]
    : [
        join(root, "native", "build", "Release", "hsm_native.node"),
        join(root, "native", "build", "Debug", "hsm_native.node"),
      ];
  for (const path of candidates) {
    try {
      return { binding: require(path) as NativeBinding, path };
    } catch (err) {
      nativeLoadErrors.push(`${path}: ${(err as Error).message.split("\n")[0]}`);
    }
  }
  return undefined;
}

const loaded = loadBinding();
const binding = loaded?.binding;

/** The file the addon was loaded from (HSM_NATIVE_PATH where set), or undefined where it did not load. */
export const nativeAddonPath: string | undefined = loaded?.path;

/** Which float16 code path runs inside the addon ("f16c" or "portable"), or undefined where it did not load. */
export let nativeSimd: string | undefined = binding?.simd;

/** The SIMD levels this CPU offers the native core, lowest first; empty where the addon did not load. */
export const nativeSimdLevels: readonly SimdLevel[] = binding?.simdLevels ?? [];

/** The SIMD level the native core uses now, or undefined where it did not load. */
export function nativeSimdLevel(): SimdLevel | undefined {
  return binding?.simdLevel();
}

/**
 * Holds every native kernel to SIMD `level` at most, for the whole process
 * (HSM_SIMD does the same at start-up). Throws a UsageError for an unknown
 * level or one this CPU lacks. Change it only while no native kernel runs.
 */
export function setNativeSimd(level: string): void {
  if (!binding) throw new UsageError("Expected the native core for a SIMD level, but it is not loaded here");
  try {
    binding.setSimd(level);
  } catch (err) {
    throw new UsageError((err as Error).message);
  }
  nativeSimd = binding.simdLevel() === "portable" ? "portable" : binding.simd;
}

/** Why HSM_SIMD could not be applied; every use of the native kernels throws it. */
let simdError: UsageError | undefined;
if (binding && process.env.HSM_SIMD) {
  try {
    setNativeSimd(process.env.HSM_SIMD);
  } catch (err) {
    simdError = new UsageError(`HSM_SIMD: ${(err as Error).message}`);
  }
}

/**
 * The native core's memory, where the addon loaded: `trim` hands the buffers its kernels keep from call to call, and the
 * C heap's free pages (glibc; nothing elsewhere), back to the system.
 */
export const nativeHeap: { trim(): void } | undefined = binding && { trim: () => binding.trimHeap() };

/**
 * A zero-filled ArrayBuffer of `bytes`, for buffers of many megabytes. Where the addon loaded, one of 2 MB or more
 * is mapped on its own (native/large_buffers.h): its pages cost nothing until touched and go back to the system as
 * soon as it is collected. Elsewhere, or below 2 MB, it is an ordinary buffer in all but name.
 */
export function largeArrayBuffer(bytes: number): ArrayBuffer {
  return binding ? binding.largeBuffer(bytes) : new ArrayBuffer(bytes);
}

/**
 * The native scan of JSON lines for the values of top-level string members (native/json_scan.h), which lets a reader
 * take a few fields from each line without parsing whole records; undefined where the addon did not load.
 */
export const nativeJsonlScan: JsonlScan | undefined = binding && ((bytes, keys) => binding.jsonlKeys(bytes, keys));

/**
 * The native join of JSON lines to rows (native/json_scan.h's ScanJsonlJoin): `rows(ids)` indexes ids (none may
 * hold a "\n"), `join(bytes, [idKey, valueKey], rows, values)` gives per line that is not blank [line, start, end,
 * verdict, row, value index, id start, id end]; undefined where the addon did not load.
 */
export const nativeJsonlJoin:
  | {
      rows(ids: readonly string[]): object;
      join(bytes: Uint8Array, keys: [string, string], rows: object, values: readonly string[]): Int32Array;
    }
  | undefined = binding && {
  rows: (ids) => binding.jsonlIdRows(ids.join("\n"), ids.length),
  join: (bytes, keys, rows, values) => binding.jsonlJoin(bytes, keys, rows, values),
};

/**
 * KTS's order of rows by (score, row) (native/order.h), or null where a score is NaN; undefined where the addon did
 * not load.
 */
export const nativeOrderByScore: ((rows: Int32Array, score: Float64Array) => Int32Array | null) | undefined =
  binding && ((rows, score) => binding.orderByScore(rows, score));

/**
 * KTS's sorted groups taken from rows in score order, with each group's unweighted AUROC (native/order.h:
 * src/metrics/score-order.ts's sortedGroups is its caller); undefined where the addon did not load.
 */
export const nativeSortedGroups: NativeBinding["sortedGroups"] | undefined =
  binding && ((...args) => binding.sortedGroups(...args));

/**
 * The native scan of one JSON document for top-level arrays of plain strings (native/json_scan.h): per key, [start,
 * end, count, distinct (1 or 0)] of its array (start −1: absent), or null where the document must be parsed in
 * full; undefined where the addon did not load.
 */
export const nativeJsonRowArrays: ((bytes: Uint8Array, keys: string[]) => Int32Array | null) | undefined =
  binding && ((bytes, keys) => binding.jsonRowArrays(bytes, keys));

/**
 * Which sha256 code paths the addon runs at the SIMD level in force: vector lanes ("avx512-lanes", "avx2-lanes")
 * and the SHA extensions ("sha-ni"), joined by "+" ("avx512-lanes+sha-ni"), or "portable"; undefined where it did
 * not load.
 */
export function nativeShaPaths(): string | undefined {
  return binding?.shaPaths();
}

/** Each native hash stream's state, so that two streams can be updated together. */
const shaStates = new WeakMap<Sha256Stream, { state: Uint8Array; width: number }>();

const bitsF32 = new Float32Array(1);
const bitsU32 = new Uint32Array(bitsF32.buffer);

function f32BitsToNumber(bits: number): number {
  bitsU32[0] = bits;
  return bitsF32[0]!;
}

/** The loaded addon. */
type Binding = NonNullable<typeof binding>;

/** A streaming SHA-256 (with float statistics past `statsFrom` for a `width` of 2 or 4) whose state lives in the addon. */
function nativeSha256Stream(b: Binding, width: 0 | 2 | 4): Sha256Stream {
  const state = new Uint8Array(b.sha256StateBytes);
  b.sha256Init(state);
  const stream: Sha256Stream = {
    update: (chunk, statsFrom = 0) => b.sha256Update(state, chunk, statsFrom, width),
    updateWith(chunk, statsFrom, other, otherChunk, otherFrom) {
      const theirs = shaStates.get(other);
      if (theirs && theirs.width === width && theirs.state !== state)
        b.sha256Update2(state, chunk, statsFrom, theirs.state, otherChunk, otherFrom, width);
      else {
        stream.update(chunk, statsFrom);
        other.update(otherChunk, otherFrom);
      }
    },
    digest() {
      const digest = new Uint8Array(32);
      const [nonfinite, maxBits] = b.sha256Final(state, digest);
      const sha256 = Buffer.from(digest.buffer).toString("hex");
      return width === 0
        ? { sha256 }
        : { sha256, stats: { nonfinite, maxAbs: width === 2 ? f16BitsToNumber(maxBits) : f32BitsToNumber(maxBits) } };
    },
  };
  shaStates.set(stream, { state, width });
  return stream;
}

/** Hashes whole files on the addon's threads; undefined for a file that could not be read. */
async function nativeSha256Files(
  b: Binding,
  jobs: readonly FileHashJob[],
  threads: number,
): Promise<(FileHash | undefined)[]> {
  const got = await b.sha256Files(
    jobs.map((j) => j.path),
    Float64Array.from(jobs, (j) => j.statsFrom),
    Uint8Array.from(jobs, (j) => j.width),
    threads,
  );
  return got.map((r, i): FileHash | undefined => {
    if (typeof r === "number") return undefined;
    const [sha256, bytes, nonfinite, maxBits] = r;
    const width = jobs[i]!.width;
    return width === 0
      ? { sha256, bytes }
      : {
          sha256,
          bytes,
          stats: { nonfinite, maxAbs: width === 2 ? f16BitsToNumber(maxBits) : f32BitsToNumber(maxBits) },
        };
  });
}

/** The native kernels with `o`'s options bound, or undefined where the addon did not build or load. */
export function nativeKernels(o: KernelOptions): NativeKernels | undefined {
  if (!binding) return undefined;
  if (simdError) throw simdError;
  const b = binding;
  const threads = o.threads;
  return {
    f32ToF16: (src, dst) => binding.f32ToF16(src, dst, threads),
    f16ToF32: (src, dst) => binding.f16ToF32(src, dst, threads),
    f16Stats(src) {
      const [nonfinite, maxBits] = binding.f16Stats(src, threads);
      return { nonfinite, maxAbs: f16BitsToNumber(maxBits) };
    },
    sha256Stats: (width) => nativeSha256Stream(b, width),
    sha256Files: (jobs, threads) => nativeSha256Files(b, jobs, threads),
    rank: (x, rows, a, nAnchors, d, own, ownScore, above) =>
      binding.rankAgainstAnchors(x, rows, a, nAnchors, d, own, ownScore, above, threads, o.allowBf16),
    centreRows: (h, n, d, valid, out) => binding.centreRows(h, n, d, valid, out, threads),
    anchorCosines: (x, rows, a, nAnchors, d, own, ownCos, otherCos) =>
      binding.anchorCosines(x, rows, a, nAnchors, d, own, ownCos, otherCos, threads),
    standardizeRows(h, rows, d, into) {
      const out = {
        rows: into ? into.subarray(0, rows.length * d) : new Float32Array(rows.length * d),
        mean: new Float64Array(d),
        scale: new Float64Array(d),
      };
      binding.standardizeRows(h, rows, d, out.rows, out.mean, out.scale, threads);
      return out;
    },
    foldMoments(h, d, folds) {
      const sum = new Float64Array(folds.length * d);
      const sumSquares = new Float64Array(folds.length * d);
      // Every fold in one pass over the rows where each fold's rows ascend (KTS's do); else fold by fold.
      const starts = new Int32Array(folds.length + 1);
      folds.forEach((f, k) => (starts[k + 1] = starts[k]! + f.length));
      const rows = new Int32Array(starts[folds.length]!);
      folds.forEach((f, k) => rows.set(f, starts[k]));
      if (binding.foldMoments(h, d, rows, starts, sum, sumSquares, threads)) return { sum, sumSquares };
      folds.forEach((rows, k) =>
        binding.addMoments(
          h,
          rows,
          d,
          sum.subarray(k * d, (k + 1) * d),
          sumSquares.subarray(k * d, (k + 1) * d),
          threads,
        ),
      );
      return { sum, sumSquares };
    },
    products: (h, n, d) =>
      syncProducts(
        h,
        n,
        d,
        (h, n, d, v, k, out) => binding.rowsTimes(h, n, d, v, k, out, threads),
        (h, n, d, g, k, out) => binding.rowsTransposeTimes(h, n, d, g, k, out, threads),
        (h, n, d, v, offset, y, train, k, out) =>
          binding.logisticPass(h, n, d, v, offset, y, train, k, out.loss, out.gsum, out.grad, threads),
      ),
    rowsTimes: (h, n, d, v, k, out) => binding.rowsTimes(h, n, d, v, k, out, threads),
    bootstrapMean: (seed, stream, values, b, out) => binding.bootstrapMean(seed, stream, values, b, out, threads),
    bootstrapAuroc: (jobs) =>
      binding.bootstrapAuroc(
        jobs.map((j) => [
          j.seed,
          j.stream,
          j.group.fact,
          j.group.label,
          j.group.ties,
          j.group.nFacts,
          j.b,
          j.out,
          j.paired?.fact ?? null,
          j.paired?.label ?? null,
          j.paired?.ties ?? null,
          j.paired?.nFacts ?? 0,
          j.toPaired ?? null,
          j.pairedOut ?? null,
        ]),
        threads,
      ),
    prepareHead: (w, d, vocab, head) => binding.prepareHead(w, d, vocab, head.hi, head.lo, head.norms, threads),
    headArgmax: (h, batch, d, head, vocab, out, headThreads) =>
      binding.headArgmax(h, batch, d, head.hi, head.lo, head.norms, vocab, out, headThreads, o.allowBf16),
  };
}
