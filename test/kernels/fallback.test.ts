/**
 * The fallback order of a TensorFlow.js backend: its own kernels, then the
 * native core's where it is loaded, then TypeScript's. wasm stands for every
 * TensorFlow.js backend here, being the one always installed.
 */
import { spawnSync } from "node:child_process";
import { join } from "node:path";

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

describe("the warning of a store that runs without the native core", () => {
  // In a child process: the warning is given once per process, by the compiled module the CLI runs.
  const warning = (env: Record<string, string>) => {
    const module = join(import.meta.dirname, "..", "..", "dist", "kernels", "default.js");
    const r = spawnSync(
      process.execPath,
      ["--input-type=module", "-e", `(await import(${JSON.stringify(module)})).storeKernels();`],
      { encoding: "utf8", env: { ...process.env, HSM_NATIVE: "", HSM_NATIVE_PATH: "", ...env } },
    );
    expect(r.status, r.stderr).toBe(0);
    return r.stderr;
  };

  it("says to unset the variable that turns the core off, not to build it", () => {
    const text = warning({ HSM_NATIVE: "0" });
    expect(text).toContain("[HSM_NO_NATIVE]");
    expect(text).toContain("HSM_NATIVE=0 is set");
    expect(text).toContain("unset HSM_NATIVE");
    expect(text).not.toContain("npm run build:native");
  });

  it("says to point HSM_NATIVE_PATH at a built core where it names one that does not load", () => {
    const missing = join(import.meta.dirname, "no-such-core.node");
    const text = warning({ HSM_NATIVE_PATH: missing });
    expect(text).toContain(`tried ${missing}`);
    expect(text).toContain("point HSM_NATIVE_PATH at a built core");
  });
});
