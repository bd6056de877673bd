/**
 * A model folder as HuggingFace/optimum exports it: `model.onnx` (with
 * `model.onnx_data` when the weights live outside), `config.json`,
 * `tokenizer.json`, `tokenizer_config.json`.
 */
import { readFile, stat } from "node:fs/promises";
import { join } from "node:path";

import { HsmError } from "../errors.js";

export const MODEL_FILES = ["model.onnx", "config.json", "tokenizer.json", "tokenizer_config.json"] as const;

/** A model folder that cannot be used, with the file at fault. */
export class ModelDirError extends HsmError {
  constructor(
    readonly path: string,
    problem: string,
  ) {
    super(`${path}: ${problem}`);
  }
}

/** The config fields the runner reads, under the names architectures use. */
export interface ModelConfig {
  numLayers: number;
  hiddenSize: number;
  vocabSize: number;
  raw: Record<string, unknown>;
}

export interface ModelDir {
  dir: string;
  onnxPath: string;
  config: ModelConfig;
}

function pickInt(raw: Record<string, unknown>, keys: string[], path: string): number {
  for (const k of keys) {
    const v = raw[k];
    if (typeof v === "number" && Number.isSafeInteger(v) && v > 0) return v;
  }
  // Multimodal configs nest the language model's settings.
  const text = raw.text_config;
  if (text && typeof text === "object") return pickInt(text as Record<string, unknown>, keys, path);
  throw new ModelDirError(path, `has none of ${keys.map((k) => `"${k}"`).join(", ")} as a positive integer`);
}

/** Checks the folder's files and reads its config; no model is loaded yet. */
export async function openModelDir(dir: string): Promise<ModelDir> {
  const st = await stat(dir).catch(() => undefined);
  if (!st?.isDirectory()) throw new ModelDirError(dir, "no such model folder");
  for (const name of MODEL_FILES) {
    const f = await stat(join(dir, name)).catch(() => undefined);
    if (!f?.isFile()) {
      throw new ModelDirError(join(dir, name), `is missing; a model folder holds ${MODEL_FILES.join(", ")} (an optimum ONNX export)`);
    }
  }
  const path = join(dir, "config.json");
  let raw: Record<string, unknown>;
  try {
    raw = JSON.parse(await readFile(path, "utf8"));
  } catch (err) {
    throw new ModelDirError(path, `is not valid JSON (${(err as Error).message})`);
  }
  return {
    dir,
    onnxPath: join(dir, "model.onnx"),
    config: {
      numLayers: pickInt(raw, ["num_hidden_layers", "n_layer", "num_layers"], path),
      hiddenSize: pickInt(raw, ["hidden_size", "n_embd", "d_model"], path),
      vocabSize: pickInt(raw, ["vocab_size"], path),
      raw,
    },
  };
}
