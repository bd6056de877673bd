/**
 * Every metrics backend that can run on this machine, resolved once: typescript
 * and wasm always, native where the core is built and enabled, tfjs-node,
 * tfjs-node-gpu and webgpu where installed and (for the GPU ones) a device exists.
 * The native core appears once per SIMD level this CPU has ("native[portable]",
 * "native[avx2]", "native[avx512]"), each of its kernels run at that level.
 * HSM_TEST_BACKENDS (comma-separated names) narrows the set to those backends,
 * each of which must then run: how a child process with a GPU's environment runs
 * the suites on webgpu alone (test/kernels/webgpu.test.ts).
 */
import {
  BACKENDS as NAMES,
  BackendUnavailable,
  openKernels,
  type ConcreteBackend,
  type ResolvedKernels,
} from "../../src/kernels/registry.js";
import { nativeSimdLevel, nativeSimdLevels, setNativeSimd, type SimdLevel } from "../../src/kernels/native.js";

/** A resolved kernel set and the label its tests carry. */
export type LabelledKernels = ResolvedKernels & { readonly label: string };

/** Runs `fn` with the native core held to `level`, the level before restored when it returns or settles. */
function underLevel<T>(level: SimdLevel, fn: () => T): T {
  const before = nativeSimdLevel()!;
  setNativeSimd(level);
  let out: T;
  try {
    out = fn();
  } catch (err) {
    setNativeSimd(before);
    throw err;
  }
  if (out instanceof Promise) return out.finally(() => setNativeSimd(before)) as T;
  setNativeSimd(before);
  return out;
}

/**
 * The function properties of `target` (a fresh native kernel set) replaced, in
 * place (so that objects keep their identity), by ones that run at SIMD `level`;
 * so too those of the objects they return (a hash stream's methods).
 */
export function atSimdLevel<T extends object>(target: T, level: SimdLevel): T {
  const record = target as Record<string, unknown>;
  for (const [key, value] of Object.entries(record)) {
    if (typeof value !== "function") continue;
    const fn = value as (...args: unknown[]) => unknown;
    record[key] = (...args: unknown[]) =>
      underLevel(level, () => {
        const out = fn(...args);
        const plain = out !== null && typeof out === "object" && Object.getPrototypeOf(out) === Object.prototype;
        return plain ? atSimdLevel(out, level) : out;
      });
  }
  return target;
}

const only = process.env.HSM_TEST_BACKENDS?.split(",").filter(Boolean);

export const AVAILABLE: LabelledKernels[] = [];
for (const name of NAMES) {
  if (name === "auto" || (only && !only.includes(name))) continue;
  try {
    if (name !== "native") {
      AVAILABLE.push({ ...(await openKernels(name)), label: name });
      continue;
    }
    for (const level of nativeSimdLevels) {
      const r = await openKernels(name);
      AVAILABLE.push({ ...r, kernels: atSimdLevel(r.kernels, level), label: `native[${level}]` });
    }
  } catch (err) {
    if (!(err instanceof BackendUnavailable) || only) throw err;
  }
}

/** The names of the available backends, typescript (the reference) first. */
export const BACKENDS: ConcreteBackend[] = [
  "typescript",
  ...new Set(AVAILABLE.map((k) => k.backend).filter((b) => b !== "typescript")),
];
