/**
 * onnxruntime-node sessions: CPU by default, CUDA or WebGPU on request — and a
 * clear error, never a silent fall-back, when the provider cannot run.
 *
 * The rewritten model reads its weights straight from the original file by
 * offset (external data), so it must sit in a folder where that file appears
 * under a plain name: onnxruntime refuses external data reached through a
 * symbolic link that leaves the model's folder. A hard link in a private
 * temporary folder does; where the file system will not allow one, the
 * rewritten model is staged beside the original for the moment the session
 * loads, and failing that the weights are copied inline.
 */
import { access, constants, link, mkdtemp, readdir, rm, unlink, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";

import * as ort from "onnxruntime-node";

import { DEVICES } from "../defaults.js";
import { HsmError } from "../errors.js";
import { ModelDirError } from "./model-dir.js";

// Failures reach the user as errors from here, with what to do; onnxruntime's own log lines would only repeat them.
ort.env.logLevel = "fatal";

export type Device = (typeof DEVICES)[number];

/** A device onnxruntime cannot use here, with what to install. */
export class DeviceError extends HsmError {}

/** A model onnxruntime refuses to load. */
export class ModelLoadError extends HsmError {}

/** What every command that runs a model over a bank is told. */
export interface ModelRunOptions {
  modelDir: string;
  bank: string;
  out: string;
  /** Name recorded in the outputs; default the model folder's name. */
  model?: string;
  batchSize?: number;
  device?: Device;
  threads?: number;
  onProgress?: (done: number, total: number) => void;
}

export interface SessionOptions {
  device?: Device;
  /** Intra-op threads; default: onnxruntime's choice (the core count). */
  threads?: number;
}

export const CUDA_HELP =
  "install onnxruntime-node's CUDA provider (CUDA 12 and cuDNN 9 on the machine, then: npm rebuild onnxruntime-node --onnxruntime-node-install=cuda12)";

export const WEBGPU_HELP =
  "WebGPU runs over Vulkan on Linux: install a Vulkan driver for the GPU (NVIDIA's driver ships one; Mesa's for AMD and Intel), or use --device cpu";

/**
 * On Linux, WebGPU needs the Vulkan loader. Without it onnxruntime's WebGPU
 * provider prints Vulkan warnings of its own before failing, so its absence is
 * found first, by asking the dynamic loader for it.
 */
function vulkanMissing(): boolean {
  if (process.platform !== "linux") return false;
  try {
    process.dlopen({ exports: {} }, "libvulkan.so.1");
  } catch (err) {
    return /cannot open shared object file/.test((err as Error).message);
  }
  return false;
}

/** The error for a device whose provider failed with `message`; undefined for the CPU. */
export function deviceError(device: Device, message: string): DeviceError | undefined {
  const first = message.split("\n")[0]!;
  if (device === "cuda") return new DeviceError(`the CUDA execution provider could not be used (${first}); ${CUDA_HELP}`);
  if (device === "webgpu") {
    const adapter = /Failed to get a WebGPU adapter: ([^\n]*)/.exec(message);
    const why = adapter ? `no WebGPU adapter was found (${adapter[1]!.trim()})` : `the WebGPU execution provider could not be used (${first})`;
    return new DeviceError(`--device webgpu: ${why}; ${WEBGPU_HELP}`);
  }
  return undefined;
}

/** Where a rewritten model is loaded from, and the name it gives the original file. */
export interface Stage {
  dir: string;
  /** The original model file as the rewritten graph names it in external-data locations. */
  sourceName: string;
  modelFile: string;
  cleanup(): Promise<void>;
}

function externalFiles(names: string[]): string[] {
  return names.filter((n) => n !== "model.onnx" && /\.(onnx_data|onnx\.data|data)$/.test(n));
}

/** Prepares a folder to load a rewritten model from; undefined when weights must be inlined. */
export async function stageModel(modelDir: string): Promise<Stage | undefined> {
  const names = await readdir(modelDir);
  const temp = await mkdtemp(join(tmpdir(), "hsm-model-"));
  try {
    await link(join(modelDir, "model.onnx"), join(temp, "hsm-source-model.onnx"));
    for (const name of externalFiles(names)) await link(join(modelDir, name), join(temp, name));
    return { dir: temp, sourceName: "hsm-source-model.onnx", modelFile: "hsm-rewritten.onnx", cleanup: () => rm(temp, { recursive: true, force: true }) };
  } catch {
    await rm(temp, { recursive: true, force: true });
  }
  try {
    await access(modelDir, constants.W_OK);
    const modelFile = `.hsm-rewritten-${process.pid}.onnx`;
    return { dir: modelDir, sourceName: "model.onnx", modelFile, cleanup: () => unlink(join(modelDir, modelFile)).catch(() => {}) };
  } catch {
    if (externalFiles(names).length > 0) {
      throw new ModelDirError(modelDir, `a model with external weight files needs a writable folder on the same file system as ${tmpdir()} or the model`);
    }
    return undefined;
  }
}

/** Opens a session over model bytes, staged as {@link stageModel} decided (inline when `stage` is undefined). */
export async function createSession(bytes: Uint8Array, stage: Stage | undefined, options: SessionOptions = {}): Promise<ort.InferenceSession> {
  const device = options.device ?? "cpu";
  if (device === "webgpu" && vulkanMissing()) {
    await stage?.cleanup();
    throw new DeviceError(`--device webgpu: no Vulkan loader (libvulkan.so.1) is installed; ${WEBGPU_HELP}`);
  }
  const sessionOptions: ort.InferenceSession.SessionOptions = {
    executionProviders: [device],
    graphOptimizationLevel: "all",
    logSeverityLevel: 4,
    ...(options.threads ? { intraOpNumThreads: options.threads, interOpNumThreads: 1 } : {}),
  };
  try {
    if (!stage) return await ort.InferenceSession.create(bytes, sessionOptions);
    await writeFile(join(stage.dir, stage.modelFile), bytes);
    return await ort.InferenceSession.create(join(stage.dir, stage.modelFile), sessionOptions);
  } catch (err) {
    const message = (err as Error).message;
    throw deviceError(device, message) ?? new ModelLoadError(`onnxruntime could not load the model: ${message.split("\n")[0]}`);
  } finally {
    await stage?.cleanup();
  }
}
