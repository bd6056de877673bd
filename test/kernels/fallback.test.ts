/**
 * The fallback order of a TensorFlow.js backend: its own kernels, then the
 * native core's where it is loaded, then TypeScript's. wasm stands for every
 * TensorFlow.js backend here, being the one always installed.
 */
import { afterEach, describe, expect, it } from "vitest";

import { BackendUnavailable, openKernels } from "../../src/kernels/registry.js";
import { nativeKernels } from "../../src/kernels/native.js";
import { kernelOptions } from "../../src/kernels/default.js";

const TF_OWN = ["rank", "products", "rowsTimes"];
const nativeLoaded = process.env.HSM_NATIVE !== "0" && nativeKernels(kernelOptions()) !== undefined;
const before = process.env.HSM_NATIVE;

afterEach(() => {
  if (before === undefined) delete process.env.HSM_NATIVE;
  else process.env.HSM_NATIVE = before;
});

describe("a TensorFlow.js backend's missing kernels", () => {
  it.skipIf(!nativeLoaded)("come from the native core where it is loaded", async () => {
    const r = await openKernels("wasm");
    for (const [kernel, from] of Object.entries(r.implementations))
      expect([kernel, from]).toEqual([kernel, TF_OWN.includes(kernel) ? "wasm" : "native"]);
    expect(r.detail.simd).not.toBe("typescript");
  });

  it("come from TypeScript where the native core is not loaded, the chosen backend still running", async () => {
    process.env.HSM_NATIVE = "0";
    const r = await openKernels("wasm");
    for (const [kernel, from] of Object.entries(r.implementations))
      expect([kernel, from]).toEqual([kernel, TF_OWN.includes(kernel) ? "wasm" : "typescript"]);
    expect(r.detail).toEqual({ tfjs: "wasm", simd: "typescript" });
    await expect(openKernels("native")).rejects.toBeInstanceOf(BackendUnavailable);
  });
});
