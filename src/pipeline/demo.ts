/**
 * `hsm demo`: the whole pipeline on the embedded default — a small Llama-style
 * model generated on the spot (seeded random weights, the real Llama 3.1
 * tokenizer) and the bundled 125-query bank — under one folder, ending with
 * the HTML report of its outputs.
 */
import { dirname, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";

import { DEFAULT_DEMO_OUT } from "../defaults.js";
import { writeTinyModel } from "../synthetic/llama.js";
import { writeReport } from "../report/build.js";
import { pathKind } from "./paths.js";
import { runPipeline, type RunOptions, type RunResult } from "./run.js";

/** The embedded default model: six blocks, d_model 64, with a KV cache. */
const DEMO_MODEL = { layers: 6, hidden: 64, heads: 4, kvHeads: 2, withPast: true, seed: 20260101 } as const;
/** The name the demo's outputs are filed under. */
const DEMO_MODEL_NAME = "tiny-llama";
const DEMO_BANK = join(dirname(fileURLToPath(import.meta.url)), "..", "..", "data", "demo-bank.jsonl");

export interface DemoOptions {
  /** Where everything is written; default `hsm-demo`. */
  out?: string;
  /** What each step did, for the user (the first step is "model"). */
  log?: RunOptions["log"];
  onProgress?: RunOptions["onProgress"];
}

export interface DemoResult extends RunResult {
  modelDir: string;
  /** The HTML report (`<out>/report.html`). */
  report: string;
}

/** Writes the model unless it is there, runs {@link runPipeline} (steps already done are skipped), then writes the report. */
export async function runDemo(o: DemoOptions = {}): Promise<DemoResult> {
  const log = o.log ?? (() => {});
  const dir = resolve(o.out ?? DEFAULT_DEMO_OUT);
  const modelDir = join(dir, "model");
  if ((await pathKind(join(modelDir, "model.onnx"), "demo model")) !== "missing")
    log("model", `${modelDir} exists, skipped`);
  else {
    const c = await writeTinyModel(modelDir, DEMO_MODEL);
    log(
      "model",
      `${modelDir} — ${c.num_hidden_layers} layers, d_model ${c.hidden_size}, seeded random weights (its answers are noise; the pipeline is real)`,
    );
  }
  const r = await runPipeline({
    modelDir,
    bank: DEMO_BANK,
    outputs: dir,
    model: DEMO_MODEL_NAME,
    log: o.log,
    onProgress: o.onProgress,
  });
  const report = await writeReport(dir, { out: join(dir, "report.html") });
  log("report", `${report.path} (${(report.bytes / 1e6).toFixed(2)} MB; open it in a browser)`);
  return { ...r, modelDir, report: report.path };
}
