/**
 * The kernels that run without a backend being chosen: the store's (float16
 * conversion and statistics, hashing) and greedy decoding's LM head. They are
 * the native core's, built once per process with the default options, and
 * TypeScript's where the addon is not loaded. Light on purpose: `hsm verify`
 * reaches its hashing through this module without loading the backends of
 * src/kernels/registry.ts.
 */
import { availableParallelism } from "node:os";
import { basename, dirname, join } from "node:path";
import { fileURLToPath } from "node:url";

import { shellWord } from "../util/shell.js";

import { nativeKernels as loadNative, nativeLoadErrors, type NativeKernels } from "./native.js";
import { f16Stats, f16ToF32, f32ToF16 } from "./typescript/float16.js";
import { sha256StatsTs } from "./typescript/sha256.js";
import type { KernelOptions, Kernels, Sha256Files } from "./types.js";

/** The options every kernel receives: threads from the machine, bfloat16 unless HSM_NO_BF16 is set. */
export function kernelOptions(o: Partial<KernelOptions> = {}): KernelOptions {
  return {
    threads: Math.max(1, Math.floor(o.threads ?? availableParallelism())),
    allowBf16: o.allowBf16 ?? !process.env.HSM_NO_BF16,
  };
}

/** The native kernels, unless the addon is missing or HSM_NATIVE=0 asks for TypeScript. */
export function nativeKernels(o: KernelOptions): NativeKernels | undefined {
  return process.env.HSM_NATIVE === "0" ? undefined : loadNative(o);
}

/**
 * The command that builds the native core: `npm run build:native` in hsm's own checkout; where hsm is installed as
 * a package (in a node_modules folder), which has no such script at hand, its build script by path.
 */
function buildCommand(): string {
  const root = join(dirname(fileURLToPath(import.meta.url)), "..", "..");
  if (basename(dirname(root)) !== "node_modules") return "npm run build:native";
  return `node ${shellWord(join(root, "scripts", "build-native.mjs"))} --strict`;
}

/**
 * What loads the native core where it is not loaded: building it, unless the environment turns it off (HSM_NATIVE=0)
 * or names another file to load (HSM_NATIVE_PATH), where building it changes nothing.
 */
export function nativeCoreFix(): string {
  if (process.env.HSM_NATIVE === "0") return "unset HSM_NATIVE";
  if (process.env.HSM_NATIVE_PATH)
    return `point HSM_NATIVE_PATH at a built core, or unset it to load the one ${buildCommand()} builds`;
  return buildCommand();
}

let withDefaults: NativeKernels | undefined;

/** The native kernels with the default options, built once per process; undefined where the addon is not loaded. */
function defaultNative(): NativeKernels | undefined {
  return (withDefaults ??= nativeKernels(kernelOptions()));
}

/** Greedy decoding's LM head (native/head.cc). */
export type HeadKernels = Pick<Kernels, "prepareHead" | "headArgmax">;

/**
 * The native core's LM head, undefined where the addon is not loaded: the
 * head then stays inside onnxruntime's graph, which is faster than the
 * TypeScript fallback's float64 logits.
 */
export function headKernels(): HeadKernels | undefined {
  return defaultNative();
}

/** What the store computes with: float16 conversion and statistics, hashing, and whole-file hashing where the native core has it. */
export type StoreKernels = Pick<Kernels, "f32ToF16" | "f16ToF32" | "f16Stats" | "sha256Stats"> & {
  sha256Files?: Sha256Files;
};

const typescriptStore: StoreKernels = { f32ToF16, f16ToF32, f16Stats, sha256Stats: sha256StatsTs };

let warned = false;

/**
 * The synchronous kernels the store uses (float16 conversion and stats): the
 * native core's where it loaded, else TypeScript's, with one warning per
 * process (`quiet` for worker threads, whose parent has already warned).
 */
export function storeKernels(options: { quiet?: boolean } = {}): StoreKernels {
  const native = defaultNative();
  if (native) return native;
  if (!warned && !options.quiet) {
    warned = true;
    const why = process.env.HSM_NATIVE === "0" ? ["HSM_NATIVE=0 is set"] : nativeLoadErrors.map((e) => `tried ${e}`);
    process.emitWarning(
      `the native core is not loaded, so hsm runs its slower TypeScript fallback. To load it: ${nativeCoreFix()}\n` +
        why.map((w) => `  ${w}`).join("\n"),
      { code: "HSM_NO_NATIVE" },
    );
  }
  return typescriptStore;
}
