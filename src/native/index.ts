/**
 * The one place that loads the native core (`native/`) and says what it exports.
 * Everything else asks for {@link kernels} and gets either the native functions
 * or their pure-TypeScript twins, which compute the same bits.
 */
import { createRequire } from "node:module";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";

import * as ts from "../store/float16.js";
import { rankAgainstAnchorsTs, type RankAgainstAnchors } from "../metrics/rank.js";
import { bootstrapAurocTs, bootstrapMeanTs } from "../metrics/stats.js";
import { rowsTimesTs, rowsTransposeTimesTs } from "../metrics/probe.js";

/** The numeric kernels every implementation provides. */
export interface Kernels {
  /** "native" or "typescript". */
  readonly name: string;
  /** Which code path runs inside: "f16c", "portable" or "typescript". */
  readonly simd: string;
  f32ToF16(src: Float32Array, dst: Uint16Array): void;
  f16ToF32(src: Uint16Array, dst: Float32Array): void;
  f16Stats(src: Uint16Array): ts.F16Stats;
  /**
   * ISS's fused kernel: rows of `x` (n × d) against anchors `a` (F × d); per row
   * the score against anchor `own[i]` and the number of other anchors above it.
   */
  rankAgainstAnchors: RankAgainstAnchors;
  /** out (n × k) = H · V, column j of V at v[j·d …] (see src/metrics/probe.ts). */
  rowsTimes(h: Float32Array, n: number, d: number, v: Float64Array, k: number, out: Float64Array, threads: number): void;
  /** out (k columns of d) = Hᵀ · G for G (n × k). */
  rowsTransposeTimes(h: Float32Array, n: number, d: number, g: Float64Array, k: number, out: Float64Array, threads: number): void;
  /** Bootstrap replicates of a mean over facts (see src/metrics/stats.ts). */
  bootstrapMean(seed: number, stream: number, values: Float64Array, b: number, out: Float64Array): void;
  /** Bootstrap replicates of a weighted AUROC, optionally paired (see src/metrics/stats.ts). */
  bootstrapAuroc(
    seed: number,
    stream: number,
    group: { fact: Int32Array; label: Uint8Array; ties: Int32Array; nFacts: number },
    b: number,
    out: Float64Array,
    paired?: { fact: Int32Array; label: Uint8Array; ties: Int32Array; nFacts: number },
    toPaired?: Int32Array,
    pairedOut?: Float64Array,
  ): void;
}

/** What `hsm_native.node` exports; nothing else touches the addon. */
interface NativeBinding {
  simd: string;
  f32ToF16(src: Float32Array, dst: Uint16Array): void;
  f16ToF32(src: Uint16Array, dst: Float32Array): void;
  f16Stats(src: Uint16Array): [number, number];
  rankAgainstAnchors: Kernels["rankAgainstAnchors"];
  bootstrapMean: Kernels["bootstrapMean"];
  rowsTimes: Kernels["rowsTimes"];
  rowsTransposeTimes: Kernels["rowsTransposeTimes"];
  bootstrapAuroc(
    seed: number,
    stream: number,
    fact: Int32Array,
    label: Uint8Array,
    ties: Int32Array,
    nFacts: number,
    b: number,
    out: Float64Array,
    pFact: Int32Array | null,
    pLabel: Uint8Array | null,
    pTies: Int32Array | null,
    pNFacts: number,
    toPaired: Int32Array | null,
    pOut: Float64Array | null,
  ): void;
}

export const typescriptKernels: Kernels = {
  name: "typescript",
  simd: "typescript",
  f32ToF16: ts.f32ToF16,
  f16ToF32: ts.f16ToF32,
  f16Stats: ts.f16Stats,
  rankAgainstAnchors: rankAgainstAnchorsTs,
  bootstrapMean: bootstrapMeanTs,
  bootstrapAuroc: bootstrapAurocTs,
  rowsTimes: rowsTimesTs,
  rowsTransposeTimes: rowsTransposeTimesTs,
};

const root = join(dirname(fileURLToPath(import.meta.url)), "..", "..");

/** Why the addon could not be loaded, one entry per place tried; empty when it loaded. */
export const nativeLoadErrors: string[] = [];

function loadBinding(): NativeBinding | undefined {
  const require = createRequire(import.meta.url);
  // HSM_NATIVE_PATH names the one addon to try (a custom build, or a missing one to test the fallback).
  const candidates = process.env.HSM_NATIVE_PATH
    ? [process.env.HSM_NATIVE_PATH]
    : [join(root, "native", "build", "Release", "hsm_native.node"), join(root, "native", "build", "Debug", "hsm_native.node")];
  for (const path of candidates) {
    try {
      return require(path) as NativeBinding;
    } catch (err) {
      nativeLoadErrors.push(`${path}: ${(err as Error).message.split("\n")[0]}`);
    }
  }
  return undefined;
}

function wrap(binding: NativeBinding): Kernels {
  return {
    name: "native",
    simd: binding.simd,
    f32ToF16: (src, dst) => binding.f32ToF16(src, dst),
    f16ToF32: (src, dst) => binding.f16ToF32(src, dst),
    f16Stats(src) {
      const [nonfinite, maxBits] = binding.f16Stats(src);
      return { nonfinite, maxAbs: ts.f16BitsToNumber(maxBits) };
    },
    rankAgainstAnchors: (x, n, a, f, d, own, ownScore, above, threads) => binding.rankAgainstAnchors(x, n, a, f, d, own, ownScore, above, threads),
    bootstrapMean: (seed, stream, values, b, out) => binding.bootstrapMean(seed, stream, values, b, out),
    rowsTimes: (h, n, d, v, k, out, threads) => binding.rowsTimes(h, n, d, v, k, out, threads),
    rowsTransposeTimes: (h, n, d, g, k, out, threads) => binding.rowsTransposeTimes(h, n, d, g, k, out, threads),
    bootstrapAuroc: (seed, stream, g, b, out, p, toPaired, pOut) =>
      binding.bootstrapAuroc(seed, stream, g.fact, g.label, g.ties, g.nFacts, b, out, p?.fact ?? null, p?.label ?? null, p?.ties ?? null, p?.nFacts ?? 0, toPaired ?? null, pOut ?? null),
  };
}

const binding = loadBinding();

/** The native kernels, or undefined where the addon did not build or load. */
export const nativeKernels: Kernels | undefined = binding ? wrap(binding) : undefined;

let warned = false;

/**
 * The kernels to use: native when loaded, unless `HSM_NATIVE=0` asks for the
 * TypeScript path. Falling back prints one warning per process (`quiet` for
 * worker threads, whose parent has already warned).
 */
export function kernels(options: { quiet?: boolean } = {}): Kernels {
  if (process.env.HSM_NATIVE === "0") return typescriptKernels;
  if (nativeKernels) return nativeKernels;
  if (!warned && !options.quiet) {
    warned = true;
    process.emitWarning(
      `the native core is not loaded, so hsm runs its slower TypeScript fallback. Build it with: npm run build:native\n` +
        nativeLoadErrors.map((e) => `  tried ${e}`).join("\n"),
      { code: "HSM_NO_NATIVE" },
    );
  }
  return typescriptKernels;
}

/** Every available implementation, for tests and benchmarks that compare them. */
export function allKernels(): Kernels[] {
  return nativeKernels ? [typescriptKernels, nativeKernels] : [typescriptKernels];
}
