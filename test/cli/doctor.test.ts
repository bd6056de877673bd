/**
 * `hsm doctor` on this machine: with a WebGPU adapter (SwiftShader's in CI, test/helpers/software-gpu.ts) it lists
 * the adapter's features as Dawn reports them to a separate probe; without one (the Vulkan loader pointed at no
 * driver) it says so with the fix. Either way it exits 0 and keeps Dawn's own messages off the terminal.
 */
import { spawnSync } from "node:child_process";
import { existsSync, readdirSync, readFileSync } from "node:fs";
import { createRequire } from "node:module";
import { dirname, join } from "node:path";

import { describe, expect, it } from "vitest";

import { kernelOptions } from "../../src/kernels/default.js";
import { nativeKernels } from "../../src/kernels/native.js";
import { PROBE_MS } from "../../src/kernels/webgpu-adapter.js";
import { PROVIDER_PROBE_MS } from "../../src/model/session.js";
import { gpuEnv, gpuFeatures, gpuSkipReason } from "../helpers/software-gpu.js";

const BIN = join(import.meta.dirname, "..", "..", "bin", "hsm.js");

interface Finding {
  name: string;
  available: boolean;
  detail: string;
  fix?: string;
}

function doctor(env: NodeJS.ProcessEnv, json = true) {
  const r = spawnSync(process.execPath, [BIN, "doctor", ...(json ? ["--json"] : [])], { env, encoding: "utf8" });
  expect(r.status, r.stderr).toBe(0);
  expect(r.stderr).toBe("");
  return r;
}

function findings(stdout: string): { byName: Record<string, Finding>; adapter: { features: string[] } | null } {
  const report = JSON.parse(stdout) as { findings: Finding[]; adapter: { features: string[] } | null };
  return { byName: Object.fromEntries(report.findings.map((f) => [f.name, f])), adapter: report.adapter };
}

/** An environment whose Vulkan loader finds no driver: no adapter, whatever the machine has. */
const NO_GPU: NodeJS.ProcessEnv = { ...process.env, VK_ICD_FILENAMES: join(import.meta.dirname, "no-such-icd.json") };

describe("hsm doctor", () => {
  it.skipIf(gpuSkipReason !== undefined)("lists the adapter and its features where there is one", () => {
    const { byName, adapter } = findings(doctor(gpuEnv()).stdout);
    expect(adapter!.features).toEqual([...gpuFeatures].sort());
    expect(byName["webgpu adapter"]!.available).toBe(true);
    const f16 = gpuFeatures.includes("shader-f16") ? "; shader-f16" : "; no shader-f16";
    expect(byName["webgpu adapter"]!.detail.endsWith(f16)).toBe(true);
    expect(byName["onnxruntime webgpu"]!.available).toBe(true);
    expect(byName["metrics webgpu"]!.available).toBe(true);
    const text = doctor(gpuEnv(), false).stdout;
    expect(text).toContain(`adapter features: ${[...gpuFeatures].sort().join(", ")}\n`);
    expect(text).toMatch(/^adapter limits: maxBufferSize \d+, /m);
  });

  it("reports a missing adapter with the fix, and the rest of the machine as it is", () => {
    const { byName, adapter } = findings(doctor(NO_GPU).stdout);
    expect(adapter).toBeNull();
    for (const name of ["webgpu adapter", "onnxruntime webgpu", "metrics webgpu"]) {
      expect(byName[name]!.available, name).toBe(false);
      expect(byName[name]!.fix, name).toMatch(/install a Vulkan driver for the GPU/);
    }
    // The way round names the option of the command that would use it: --device for extract and generate, --backend
    // for metrics (which has no --device).
    expect(byName["onnxruntime webgpu"]!.fix).toMatch(/, or use --device cpu$/);
    for (const name of ["webgpu adapter", "metrics webgpu"])
      expect(byName[name]!.fix, name).toMatch(/, or use hsm metrics --backend native or wasm$/);
    expect(byName["onnxruntime webgpu"]!.detail).toMatch(/^no WebGPU adapter was found/);
    expect(byName["native core"]!.available).toBe(nativeKernels(kernelOptions()) !== undefined);
    expect(byName["metrics wasm"]!.available).toBe(true);

    const bin = join(dirname(dirname(createRequire(import.meta.url).resolve("onnxruntime-node"))), "bin");
    const cuda = readdirSync(bin, { recursive: true, encoding: "utf8" }).some((f) =>
      f.includes(`${process.platform}/${process.arch}/libonnxruntime_providers_cuda.so`),
    );
    expect(byName["onnxruntime cuda"]!.available).toBe(cuda);
    if (!cuda) expect(byName["onnxruntime cuda"]!.fix).toContain("ONNXRUNTIME_NODE_INSTALL=cuda12");
    const tfjsNode = existsSync(join(dirname(bin), "..", "@tensorflow", "tfjs-node"));
    if (!tfjsNode) expect(byName["metrics tfjs-node"]!.fix).toBe("npm install @tensorflow/tfjs-node");

    const text = doctor(NO_GPU, false).stdout;
    expect(text).toMatch(/^webgpu adapter +no +no WebGPU adapter was found\n +to add it: WebGPU runs over Vulkan/m);
    expect(text).not.toContain("adapter features:");
  });

  it("gives a fix for a native core turned off or pointed elsewhere that adds it", () => {
    const cases = [
      [{ HSM_NATIVE: "0" }, "HSM_NATIVE=0 is set", "unset HSM_NATIVE"],
      [{ HSM_NATIVE_PATH: join(import.meta.dirname, "no-such-core.node") }, "no-such-core.node", "HSM_NATIVE_PATH"],
    ] as const;
    for (const [env, why, fix] of cases) {
      const native = findings(doctor({ ...NO_GPU, ...env }).stdout).byName["native core"]!;
      expect(native.available).toBe(false);
      expect(native.detail).toContain(why);
      // Building the core changes nothing while the variable is set.
      expect(native.fix).toContain(fix);
      expect(native.fix).not.toBe("npm run build:native");
    }
  });
});

describe("docs/extract.md on hsm doctor", () => {
  it("states each probe's time limit as the probes set it", () => {
    const doc = readFileSync(join(import.meta.dirname, "..", "..", "docs", "extract.md"), "utf8").replace(/\s+/g, " ");
    const limits = /Each GPU probe runs in a child process[^.]*?[.:]([^]*?)It exits 0/.exec(doc)![1]!;
    expect(limits).toContain(`${PROVIDER_PROBE_MS / 1000} s for onnxruntime's WebGPU provider`);
    expect(limits).toContain(`${PROBE_MS / 1000} s for the \`webgpu\` package's adapter`);
    expect(doc).not.toMatch(/one-minute limit/);
  });
});
