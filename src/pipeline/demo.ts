/**
 * `hsm demo`: the whole pipeline on the embedded default — a small Llama-style
 * model constructed on the spot from the bundled 125-query bank's anchor
 * questions (docs/demo.md; the real Llama 3.1 tokenizer) and that bank — under
 * one folder, ending with the HTML report of its outputs.
 */
import { dirname, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";

import { DEFAULT_DEMO_OUT } from "../defaults.js";
import { writeDemoModel } from "../synthetic/demo-model.js";
import { writeReport } from "../report/build.js";
import { pathKind } from "./paths.js";
import { runPipeline, type RunOptions, type RunResult } from "./run.js";

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
    const { config: c, facts } = await writeDemoModel(modelDir, DEMO_BANK);
    const known = facts.filter((f) => f.known).length;
    log(
      "model",
      `${modelDir} — ${c.num_hidden_layers} layers, d_model ${c.hidden_size}, weights set from the bank's anchors: ` +
        `it knows ${known} of their ${facts.length} facts (docs/demo.md)`,
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
