/**
 * `--device webgpu` on a machine without a WebGPU adapter (no Vulkan, or no
 * GPU), and `--device cuda` without onnxruntime's CUDA provider: one line
 * saying what to install, exit status 1, and nothing written.
 */
import { spawnSync } from "node:child_process";
import { existsSync, mkdirSync, readdirSync, readFileSync, writeFileSync } from "node:fs";
import { createRequire } from "node:module";
import { dirname, join } from "node:path";

import { beforeAll, describe, expect, it } from "vitest";

import { writeTinyModel } from "../../src/synthetic/llama.js";
import { cudaLibrary, deviceError } from "../../src/model/session.js";
import { tempDir } from "../helpers/tmp.js";

const BIN = join(import.meta.dirname, "..", "..", "bin", "hsm.js");
const dir = tempDir("hsm-device-");
const modelDir = join(dir, "model");
const bank = join(dir, "bank.jsonl");

beforeAll(async () => {
  await writeTinyModel(modelDir, { layers: 2, hidden: 32, heads: 4, kvHeads: 2, seed: 3 });
  writeFileSync(
    bank,
    JSON.stringify({
      query_id: "q0",
      fact_id: "f0",
      condition_family: "anchor",
      query: "Why?",
      use_for_main_forward: true,
      answers: ["x"],
    }) + "\n",
  );
});

// What onnxruntime-node 1.30 throws on a machine with the Vulkan loader but no adapter.
const NO_ADAPTER =
  "/onnxruntime_src/onnxruntime/core/providers/webgpu/webgpu_context.cc:136 onnxruntime::webgpu::WebGpuContext::Initialize(const onnxruntime::webgpu::WebGpuContextConfig&)::<lambda()> adapter_result.status == wgpu::RequestAdapterStatus::Success was false. Failed to get a WebGPU adapter: No supported adapters\n";

describe("--device webgpu without an adapter", () => {
  it("turns onnxruntime's failure into one line naming the cause and the fix", () => {
    const err = deviceError("webgpu", NO_ADAPTER)!;
    expect(err.name).toBe("DeviceError");
    expect(err.exitCode).toBe(1);
    expect(err.message).toMatch(
      /^--device webgpu: no WebGPU adapter was found \(No supported adapters\); .*Vulkan driver.*--device cpu$/,
    );
    expect(err.message).not.toContain("\n");
    expect(deviceError("cpu", NO_ADAPTER)).toBeUndefined();
  });

  it.each(["extract", "generate"])("%s stops with one line, exit 1, before anything is written", (command) => {
    const out = join(dir, `${command}-out`, command === "extract" ? "store" : "gen.jsonl");
    const r = spawnSync(
      process.execPath,
      [BIN, command, "--model-dir", modelDir, "--bank", bank, "--out", out, "--device", "webgpu", "--quiet"],
      { encoding: "utf8" },
    );
    expect(r.status).toBe(1);
    const lines = r.stderr.trim().split("\n");
    expect(lines).toHaveLength(1);
    expect(lines[0]).toMatch(/^hsm: --device webgpu: .*(Vulkan|adapter).*--device cpu$/);
    expect(r.stdout).toBe("");
    expect(existsSync(join(dir, `${command}-out`))).toBe(false);
  });
});

// What onnxruntime-node 1.30 throws where the CUDA provider's library, or a library it loads (libcudnn.so.9,
// libcublasLt.so.12), cannot be loaded; and where the provider loads but finds no GPU.
const NO_LIBRARY = "OrtSessionOptionsAppendExecutionProvider_Cuda: Failed to load shared library";
const NO_GPU =
  "/onnxruntime_src/onnxruntime/core/providers/cuda/cuda_call.cc:129 std::conditional_t<THRW, void, onnxruntime::common::Status> onnxruntime::CudaCall(ERRTYPE, const char*, const char*, SUCCTYPE, const char*, const char*, int) [with ERRTYPE = cudaError; bool THRW = true; SUCCTYPE = cudaError; std::conditional_t<THRW, void, common::Status> = void] CUDA failure 100: no CUDA-capable device is detected ; GPU=0 ; hostname=node ; file=/onnxruntime_src/onnxruntime/core/providers/cuda/cuda_execution_provider.cc ; line=282 ; expr=cudaSetDevice(info_.device_id); \n";

describe("--device cuda's advice", () => {
  const layout = join(dir, "binding", "napi-v6", "linux", "x64");

  it("finds the provider's library in the binding's folder, and nothing where it is not there", () => {
    expect(cudaLibrary(join(dir, "no-such-folder"))).toBeUndefined();
    mkdirSync(layout, { recursive: true });
    writeFileSync(join(layout, "libonnxruntime.so.1"), "");
    expect(cudaLibrary(layout)).toBeUndefined();
    writeFileSync(join(layout, "libonnxruntime_providers_cuda.so"), "");
    expect(cudaLibrary(layout)).toBe(join(layout, "libonnxruntime_providers_cuda.so"));
  });

  it("says to install the provider where its library is missing", () => {
    const err = deviceError("cuda", NO_LIBRARY, undefined)!;
    expect(err.exitCode).toBe(1);
    expect(err.message).toBe(
      `the CUDA execution provider could not be used (${NO_LIBRARY}); install onnxruntime-node's CUDA provider ` +
        "(CUDA 12 and cuDNN 9 on the machine, then: ONNXRUNTIME_NODE_INSTALL=cuda12 npm rebuild onnxruntime-node)",
    );
  });

  it.each([
    ["a library it loads", NO_LIBRARY],
    ["a GPU", NO_GPU],
  ])("with the library installed and %s missing, gives onnxruntime's reason and what else it needs", (_, why) => {
    const library = join(layout, "libonnxruntime_providers_cuda.so");
    const err = deviceError("cuda", why, library)!;
    expect(err.exitCode).toBe(1);
    expect(err.message).not.toContain("\n");
    expect(err.message).not.toContain("npm rebuild");
    expect(err.message.startsWith(`the CUDA execution provider could not be used (${why.split("\n")[0]})`)).toBe(true);
    expect(err.message).toContain(library);
    for (const need of ["CUDA 12", "cuDNN 9", "GPU", "--device cpu"]) expect(err.message).toContain(need);
  });
});

// onnxruntime-node's CUDA provider, where `ONNXRUNTIME_NODE_INSTALL=cuda12 npm rebuild onnxruntime-node` put it.
const ortBin = join(dirname(dirname(createRequire(import.meta.url).resolve("onnxruntime-node"))), "bin");
const cudaInstalled = readdirSync(ortBin, { recursive: true, encoding: "utf8" }).some((f) =>
  f.includes("libonnxruntime_providers_cuda.so"),
);

describe.skipIf(cudaInstalled)("--device cuda without onnxruntime's CUDA provider", () => {
  it.each([
    ["extract", "--out", join("extract-cuda", "new", "store")],
    ["generate", "--out", join("generate-cuda", "new", "gen.jsonl")],
    ["run", "--outputs", join("run-cuda", "outputs")],
  ])("%s stops with one line, exit 1, before any folder is made", (command, flag, out) => {
    const r = spawnSync(
      process.execPath,
      [BIN, command, "--model-dir", modelDir, "--bank", bank, flag, join(dir, out), "--device", "cuda", "--quiet"],
      { encoding: "utf8" },
    );
    expect(r.status).toBe(1);
    const lines = r.stderr.trim().split("\n");
    expect(lines).toHaveLength(1);
    expect(lines[0]).toMatch(/^hsm: the CUDA execution provider could not be used \(.*ONNXRUNTIME_NODE_INSTALL=cuda12/);
    expect(r.stdout).toBe("");
    expect(existsSync(join(dir, out.split("/")[0]!))).toBe(false);
  });

  it("generate needs no device for a file that answers every query, and stops where one is missing", () => {
    const gens = join(dir, "answered.jsonl");
    const generate = (device: string) =>
      spawnSync(
        process.execPath,
        [BIN, "generate", "--model-dir", modelDir, "--bank", bank, "--out", gens, "--device", device, "--quiet"],
        { encoding: "utf8" },
      );
    expect(generate("cpu").status).toBe(0);
    const answered = readFileSync(gens, "utf8");
    expect(answered.trim().split("\n")).toHaveLength(1);
    // A rerun (hsm run's, or a study's finishing job on a node without a GPU) reads the file and loads no model.
    const rerun = generate("cuda");
    expect(rerun.stderr).toBe("");
    expect(rerun.status).toBe(0);
    expect(rerun.stdout).toBe(`${gens}: 0 generated, 1 already there\n`);
    expect(readFileSync(gens, "utf8")).toBe(answered);
    // With a query left to answer (an empty file), the device is needed: one line, and the file left as it was.
    writeFileSync(gens, "");
    const stopped = generate("cuda");
    expect(stopped.status).toBe(1);
    expect(stopped.stderr).toMatch(/^hsm: the CUDA execution provider could not be used \(.*\n$/);
    expect(readFileSync(gens, "utf8")).toBe("");
  });
});
