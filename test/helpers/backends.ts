/**
 * Every metrics backend that can run on this machine, resolved once: typescript
 * and wasm always, native where the core is built and enabled, tfjs-node,
 * tfjs-node-gpu and webgpu where installed and (for the GPU ones) a device exists.
 */
import { BACKENDS as NAMES, BackendUnavailable, openKernels, type ConcreteBackend, type ResolvedKernels } from "../../src/kernels/registry.js";

export const AVAILABLE: ResolvedKernels[] = [];
for (const name of NAMES) {
  if (name === "auto") continue;
  try {
    AVAILABLE.push(await openKernels(name));
  } catch (err) {
    if (!(err instanceof BackendUnavailable)) throw err;
  }
}

/** The names of the available backends, typescript (the reference) first. */
export const BACKENDS: ConcreteBackend[] = ["typescript", ...AVAILABLE.map((k) => k.backend).filter((b) => b !== "typescript")];
