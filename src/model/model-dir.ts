/**
 * A model folder as HuggingFace/optimum exports it: `model.onnx` (with
 * `model.onnx_data` when the weights live outside), `config.json`,
 * `tokenizer.json`, `tokenizer_config.json`. Two other layouts are read too:
 * transformers.js / onnx-community folders keep their graphs under `onnx/`
 * (`model.onnx`, `model_q4.onnx`, `model_fp16.onnx`, …; one is picked with
 * `--model-file` when there are several), and onnxruntime-genai builds have
 * `genai_config.json` instead of `config.json`.
 */
import { readdir, stat } from "node:fs/promises";
import { isAbsolute, join, normalize, relative, sep } from "node:path";

import { HsmError } from "../errors.js";
import { MAX_BLOCKS } from "../store/layers.js";
import { readText } from "../util/fs.js";
import { CONFIG_KEYS } from "../onnx/config-keys.js";
import { decodeModel, trimEmptyInputs, type ModelProto } from "../onnx/graph.js";
import { jsonSyntax } from "../util/jsonl.js";
import { fetchHubModel, isHubId } from "./hub.js";

const MODEL_FILES = ["model.onnx", "config.json", "tokenizer.json", "tokenizer_config.json"] as const;

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
  /** The field `numLayers` was read from: `num_hidden_layers`, GPT-2's `n_layer`, `text_config.num_hidden_layers`, … */
  layersField: string;
  hiddenSize: number;
  vocabSize: number;
  raw: Record<string, unknown>;
  /** The file `raw` was read from: config.json, or genai_config.json for an onnxruntime-genai build. */
  path: string;
}

export interface ModelDir {
  dir: string;
  onnxPath: string;
  config: ModelConfig;
  /** `hf:ORG/NAME@COMMIT` for a model named by hub id: the commit its files came from. */
  source?: string;
}

function pickInt(raw: Record<string, unknown>, keys: readonly string[], path: string): number {
  return pickField(raw, keys, path).value;
}

/** The first of `keys` that `raw` holds as a positive integer (under `text_config` if not at the top), and its name. */
function pickField(
  raw: Record<string, unknown>,
  keys: readonly string[],
  path: string,
): { value: number; field: string } {
  for (const k of keys) {
    const v = raw[k];
    if (typeof v === "number" && Number.isSafeInteger(v) && v > 0) return { value: v, field: k };
  }
  // Multimodal configs nest the language model's settings.
  const text = raw.text_config;
  if (text && typeof text === "object") {
    const { value, field } = pickField(text as Record<string, unknown>, keys, path);
    return { value, field: `text_config.${field}` };
  }
  throw new ModelDirError(path, `has none of ${keys.map((k) => `"${k}"`).join(", ")} as a positive integer`);
}

/** A block count read from `path`, at most {@link MAX_BLOCKS} (no decoder has more; more would exhaust memory). */
function blockCount(n: number, path: string): number {
  if (n > MAX_BLOCKS)
    throw new ModelDirError(path, `gives ${n} decoder blocks; no decoder has more than ${MAX_BLOCKS}`);
  return n;
}

/**
 * The graph of `md` from its bytes, its nodes' trailing empty inputs dropped (`trimEmptyInputs`): a file that is not
 * an ONNX model, or holds no graph (an empty file, a file cut short), is an error naming it; so is a config.json
 * whose vocabulary or hidden size is not the graph's token embedding's row count or width (a config from another
 * model).
 */
export function decodeModelOf(md: ModelDir, bytes: Uint8Array): ModelProto {
  let model: ModelProto;
  try {
    model = decodeModel(bytes);
  } catch (err) {
    throw new ModelDirError(md.onnxPath, `is not a readable ONNX model (${(err as Error).message})`);
  }
  const graph = model.graph;
  if (!graph || (graph.node ?? []).length === 0) {
    throw new ModelDirError(
      md.onnxPath,
      `holds no ONNX graph (${bytes.length} bytes): the file is empty or not a model`,
    );
  }
  trimEmptyInputs(graph);
  const { hiddenSize, vocabSize } = md.config;
  const tables = new Map((graph.initializer ?? []).map((t) => [t.name, (t.dims ?? []).map(Number)]));
  for (const node of graph.node ?? []) {
    if (node.opType !== "Gather") continue;
    const dims = tables.get(node.input?.[0] ?? "");
    if (dims?.length !== 2) continue;
    // The table gathered by input_ids itself has a row per token of the vocabulary.
    if (node.input?.[1] === "input_ids" && dims[0] !== vocabSize) {
      throw new ModelDirError(
        join(md.dir, "config.json"),
        `says the vocabulary has ${vocabSize} tokens, but the graph's token embedding ${node.input[0]} has ` +
          `${dims[0]} rows: this config.json is not the graph's`,
      );
    }
    // The token embedding: a [vocab_size, width] table gathered by token ids.
    if (dims[0] !== vocabSize) continue;
    if (dims[1] !== hiddenSize) {
      throw new ModelDirError(
        join(md.dir, "config.json"),
        `says the hidden size is ${hiddenSize}, but the graph's token embedding ${node.input![0]} is ` +
          `${dims[1]} wide: this config.json is not the graph's`,
      );
    }
    break;
  }
  return model;
}

const isFile = async (path: string) => (await stat(path).catch(() => undefined))?.isFile() ?? false;

async function readJson(path: string): Promise<Record<string, unknown>> {
  let value: unknown;
  try {
    value = JSON.parse(await readText(path, { follow: true }));
  } catch (err) {
    throw new ModelDirError(path, `is not valid JSON (${jsonSyntax(err)})`);
  }
  return jsonObject(value, path);
}

/** `value`, parsed from the model folder's file `path`, as the JSON object every such file holds; else an error naming it. */
export function jsonObject(value: unknown, path: string): Record<string, unknown> {
  if (typeof value !== "object" || value === null || Array.isArray(value))
    throw new ModelDirError(path, `is not a JSON object but ${JSON.stringify(value).slice(0, 40)}`);
  return value as Record<string, unknown>;
}

/**
 * The fields of an onnxruntime-genai `genai_config.json` under the names
 * config.json uses (`model.decoder.num_hidden_layers` → `num_hidden_layers`, …),
 * and the graph file it names.
 */
function fromGenaiConfig(genai: Record<string, unknown>): { raw: Record<string, unknown>; filename?: string } {
  const model = (genai.model ?? {}) as Record<string, unknown>;
  const decoder = (model.decoder ?? {}) as Record<string, unknown>;
  const raw: Record<string, unknown> = {
    model_type: model.type,
    vocab_size: model.vocab_size,
    bos_token_id: model.bos_token_id,
    eos_token_id: model.eos_token_id,
    context_length: model.context_length,
  };
  for (const key of ["num_hidden_layers", "hidden_size", "num_attention_heads", "num_key_value_heads", "head_size"])
    raw[key] = decoder[key];
  return { raw, filename: typeof decoder.filename === "string" ? decoder.filename : undefined };
}

/**
 * The graph to run: `file` when given (relative to the folder), else
 * `model.onnx`, else the one `.onnx` under `onnx/`; several there without a
 * choice stop with the list.
 */
async function pickOnnx(dir: string, file: string | undefined, preferred: string | undefined): Promise<string> {
  if (file !== undefined) {
    const inside = normalize(file);
    if (isAbsolute(inside) || inside === ".." || inside.startsWith(`..${sep}`))
      throw new ModelDirError(
        dir,
        `--model-file ${JSON.stringify(file)} is outside the model folder; name a graph inside it`,
      );
    for (const candidate of [join(dir, file), join(dir, "onnx", file)]) if (await isFile(candidate)) return candidate;
    throw new ModelDirError(
      join(dir, file),
      `is missing; the folder holds ${(await onnxFiles(dir)).join(", ") || "no .onnx file"}`,
    );
  }
  for (const name of [preferred, "model.onnx"]) if (name && (await isFile(join(dir, name)))) return join(dir, name);
  const found = await onnxFiles(dir);
  const nested = found.filter((f) => f.startsWith("onnx/"));
  // transformers.js folders keep their variants under onnx/; otherwise any graph of the folder counts.
  const choices = nested.length > 0 ? nested : found;
  if (choices.length === 1) return join(dir, choices[0]!);
  if (choices.length > 1)
    throw new ModelDirError(dir, `holds several graphs (${choices.join(", ")}); pick one with --model-file`);
  throw new ModelDirError(
    join(dir, "model.onnx"),
    `is missing; a model folder holds ${MODEL_FILES.join(", ")} (an optimum ONNX export)`,
  );
}

async function onnxFiles(dir: string): Promise<string[]> {
  const names: string[] = [];
  for (const sub of [dir, join(dir, "onnx")]) {
    const entries = await readdir(sub).catch(() => [] as string[]);
    // Names starting with a dot are hsm's own staged graphs, or hidden files.
    names.push(
      ...entries.filter((n) => n.endsWith(".onnx") && !n.startsWith(".")).map((n) => relative(dir, join(sub, n))),
    );
  }
  return names.sort();
}

/**
 * The folder a model lives in: `dir` itself, or, for a Hugging Face hub cache folder (`models--ORG--NAME`, holding
 * `refs/` and `snapshots/`), the snapshot its `refs/main` names.
 */
async function resolveModelDir(dir: string): Promise<string> {
  const snapshots = join(dir, "snapshots");
  if (!(await stat(snapshots).catch(() => undefined))?.isDirectory()) return dir;
  const ref = join(dir, "refs", "main");
  let revision: string;
  try {
    revision = (await readText(ref, { follow: true, maxBytes: 4096, what: "a hub ref" })).trim();
  } catch {
    const revisions = await readdir(snapshots).catch(() => [] as string[]);
    throw new ModelDirError(
      ref,
      `is missing: a hub cache folder names its current snapshot there; pass one of its snapshots as --model-dir (${revisions.map((r) => join(snapshots, r)).join(", ") || "none"})`,
    );
  }
  if (!/^[0-9a-f]{40}$/.test(revision))
    throw new ModelDirError(ref, `should hold a 40-digit commit hash but holds "${revision.slice(0, 60)}"`);
  const snapshot = join(snapshots, revision);
  if (!(await stat(snapshot).catch(() => undefined))?.isDirectory())
    throw new ModelDirError(snapshot, `is missing, though ${ref} names it`);
  return snapshot;
}

/**
 * Checks the folder's files and reads its config; no model is loaded yet. `modelFile` picks one graph of several.
 * A hub cache folder stands for its current snapshot (see {@link resolveModelDir}); files may be symbolic links.
 * A hub id (`hf:ORG/NAME[@REVISION]`) stands for its snapshot in the hub cache, fetched first where need be.
 */
export async function openModelDir(given: string, modelFile?: string): Promise<ModelDir> {
  if (isHubId(given)) {
    const hub = await fetchHubModel(given, { modelFile });
    return { ...(await openModelDir(hub.dir, hub.graph ?? modelFile)), source: hub.source };
  }
  const st = await stat(given).catch(() => undefined);
  if (!st?.isDirectory()) throw new ModelDirError(given, "no such model folder");
  const dir = await resolveModelDir(given);
  let path = join(dir, "config.json");
  let raw: Record<string, unknown>;
  let preferred: string | undefined;
  if (!(await isFile(path)) && (await isFile(join(dir, "genai_config.json")))) {
    path = join(dir, "genai_config.json");
    ({ raw, filename: preferred } = fromGenaiConfig(await readJson(path)));
  } else {
    for (const name of MODEL_FILES.filter((n) => n !== "model.onnx")) {
      if (!(await isFile(join(dir, name)))) {
        throw new ModelDirError(
          join(dir, name),
          `is missing; a model folder holds ${MODEL_FILES.join(", ")} (an optimum ONNX export)`,
        );
      }
    }
    raw = await readJson(path);
  }
  const layers = pickField(raw, CONFIG_KEYS.layers, path);
  return {
    dir,
    onnxPath: await pickOnnx(dir, modelFile, preferred),
    config: {
      numLayers: blockCount(layers.value, path),
      layersField: layers.field,
      hiddenSize: pickInt(raw, CONFIG_KEYS.hidden, path),
      vocabSize: pickInt(raw, ["vocab_size"], path),
      raw,
      path,
    },
  };
}
