/**
 * onnxruntime-node sessions: CPU by default, CUDA on request — and a clear
 * error, never a silent fall-back, when the CUDA provider is not installed.
 */
import { mkdtemp, readdir, rm, symlink, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";

import * as ort from "onnxruntime-node";

import { HsmError } from "../errors.js";

export type Device = "cpu" | "cuda";

export interface SessionOptions {
  device?: Device;
  /** Intra-op threads; default: onnxruntime's choice (the core count). */
  threads?: number;
}

export const CUDA_HELP =
  "install onnxruntime-node's CUDA provider (CUDA 12 and cuDNN 9 on the machine, then: npm rebuild onnxruntime-node --onnxruntime-node-install=cuda12)";

/**
 * Opens a session over model bytes. A model with external weights is loaded
 * from a private folder that links to the original weight files, so their
 * relative paths still resolve.
 */
export async function createSession(bytes: Uint8Array, modelDir: string, options: SessionOptions = {}): Promise<ort.InferenceSession> {
  const device = options.device ?? "cpu";
  const sessionOptions: ort.InferenceSession.SessionOptions = {
    executionProviders: device === "cuda" ? ["cuda"] : ["cpu"],
    graphOptimizationLevel: "all",
    logSeverityLevel: 3,
    ...(options.threads ? { intraOpNumThreads: options.threads, interOpNumThreads: 1 } : {}),
  };
  const external = (await readdir(modelDir)).filter((n) => n !== "model.onnx" && (n.endsWith(".onnx_data") || n.endsWith(".onnx.data") || n.endsWith(".data")));
  try {
    if (external.length === 0) return await ort.InferenceSession.create(bytes, sessionOptions);
    const dir = await mkdtemp(join(tmpdir(), "hsm-model-"));
    try {
      for (const name of external) await symlink(resolve(modelDir, name), join(dir, name));
      await writeFile(join(dir, "model.onnx"), bytes);
      return await ort.InferenceSession.create(join(dir, "model.onnx"), sessionOptions);
    } finally {
      await rm(dir, { recursive: true, force: true });
    }
  } catch (err) {
    const message = (err as Error).message;
    if (device === "cuda") throw new HsmError(`the CUDA execution provider could not be used (${message.split("\n")[0]}); ${CUDA_HELP}`);
    throw new HsmError(`onnxruntime could not load the model: ${message.split("\n")[0]}`);
  }
}
