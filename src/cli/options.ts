/** Option parsers that turn bad flags into usage errors with the flag's name, and the options commands share. */
import type { Command } from "commander";

import { DEFAULT_BATCH_SIZE, DEFAULT_CPU_WORKERS, DEFAULT_DEVICE, DEVICES, MAX_THREADS } from "../defaults.js";
import { UsageError } from "../errors.js";
import type { ExportFormatRegistry, MetricRegistry } from "../index.js";

/** The registries commands build options and help from; src/cli/main.ts loads those the command line needs. */
export interface Registries {
  metrics: MetricRegistry;
  exportFormats: ExportFormatRegistry;
}

/** An integer of at least `min` (and, given `max`, at most `max`: beyond it a run would only exhaust memory). */
export function intOption(flag: string, min = 0, max?: number): (value: string) => number {
  return (value: string) => {
    const n = /^[0-9]+$/.test(value.trim()) ? Number(value) : NaN;
    if (!Number.isSafeInteger(n) || n < min) {
      throw new UsageError(`Expected an integer of at least ${min} for ${flag} but received "${value}"`);
    }
    if (max !== undefined && n > max)
      throw new UsageError(`Expected an integer of at most ${max} for ${flag} but received "${value}"`);
    return n;
  };
}

/** One of a closed set: `Expected --format eee or foundry but received "x"`. */
export function choiceOption<T extends string>(flag: string, choices: readonly T[]): (value: string) => T {
  return (value: string) => {
    if (!(choices as readonly string[]).includes(value)) {
      throw new UsageError(
        `Expected ${flag} ${choices.slice(0, -1).join(", ")} or ${choices.at(-1)} but received "${value}"`,
      );
    }
    return value as T;
  };
}

/** A number greater than zero. */
export function positiveOption(flag: string): (value: string) => number {
  return (value: string) => {
    const n = Number(value);
    if (!(n > 0)) throw new UsageError(`Expected a positive number for ${flag} but received "${value}"`);
    return n;
  };
}

/** `a`, `a and b`, `a, b and c` (or with another conjunction). */
export function wordList(words: readonly string[], conjunction = "and"): string {
  return words.length < 2 ? words.join("") : `${words.slice(0, -1).join(", ")} ${conjunction} ${words.at(-1)}`;
}

/** A comma-separated list, trimmed. */
export function listOption(value: string): string[] {
  return value.split(",").map((v) => v.trim());
}

/** Parses `18,20-24` into [18, 20, 21, 22, 23, 24]. */
export function parseLayerList(text: string): number[] {
  const out: number[] = [];
  for (const part of text
    .split(",")
    .map((p) => p.trim())
    .filter(Boolean)) {
    const m = /^(\d+)(?:-(\d+))?$/.exec(part);
    if (!m) throw new UsageError(`Expected --layers like 18,20-24 but received "${text}"`);
    const a = Number(m[1]);
    const b = m[2] === undefined ? a : Number(m[2]);
    if (b < a) throw new UsageError(`Expected an ascending range in --layers but received "${part}"`);
    for (let l = a; l <= b; l++) out.push(l);
  }
  if (out.length === 0) throw new UsageError(`Expected --layers like 18,20-24 but received "${text}"`);
  return [...new Set(out)].sort((x, y) => x - y);
}

/** Where a model-running command writes: `--out` for one file or store, `--outputs` for a whole run. */
export interface OutputOption {
  flags: string;
  description: string;
  defaultValue?: string;
}

/** The options of every command that runs a model over a bank (extract, generate, run). */
export function modelRunOptions(cmd: Command, output: OutputOption): Command {
  cmd
    .requiredOption(
      "--model-dir <dir>",
      "model folder (model.onnx, config.json, tokenizer.json, tokenizer_config.json), or a hub id hf:ORG/NAME[@REVISION]",
    )
    .requiredOption("--bank <file>", "query bank JSONL");
  if (output.defaultValue === undefined) cmd.requiredOption(output.flags, output.description);
  else cmd.option(output.flags, output.description, output.defaultValue);
  return cmd
    .option("--model-file <file>", MODEL_FILE_HELP)
    .option("--model <name>", "model name recorded in the outputs (default: the folder's name)")
    .option("--batch-size <n>", "prompts per forward pass", intOption("--batch-size", 1), DEFAULT_BATCH_SIZE)
    .option("--device <device>", DEVICES.join(", "), choiceOption("--device", DEVICES), DEFAULT_DEVICE)
    .option(
      "--threads <n>",
      "onnxruntime intra-op threads (default: one per physical core this process may use; with several workers, per session)",
      intOption("--threads", 1, MAX_THREADS),
    )
    .option(
      "--workers <n>",
      `batches run at once, each by an onnxruntime session of its own (with its own copy of the weights) in a worker thread (default: ${DEFAULT_CPU_WORKERS} on the CPU, sharing the cores, fewer on one core or where their copies would take over half the available memory; 1 on a GPU)`,
      intOption("--workers", 1),
    );
}

/** The help of `--model-file`, shared by every command that opens a model folder. */
export const MODEL_FILE_HELP =
  "the graph to run when the folder holds several, e.g. model_q4.onnx (looked for in the folder, then in onnx/)";

/** What {@link modelRunOptions} gives an action. */
export interface ModelRunFlags {
  modelDir: string;
  modelFile?: string;
  bank: string;
  model?: string;
  batchSize: number;
  device: (typeof DEVICES)[number];
  threads?: number;
  workers?: number;
  quiet?: boolean;
}
