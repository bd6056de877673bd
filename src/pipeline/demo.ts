/**
 * `hsm demo`: the whole pipeline on the embedded default — a small Llama-style
 * model constructed on the spot from the bundled 125-query bank's anchor
 * questions (docs/demo.md; the real Llama 3.1 tokenizer) and that bank — under
 * one folder, ending with the HTML report of its outputs.
 */
import { dirname, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";

import { ANCHOR_FAMILY } from "../bank/prompt.js";
import { DEFAULT_DEMO_OUT } from "../defaults.js";
import { ISS } from "../metrics/iss.js";
import { KTS } from "../metrics/kts.js";
import { ALL_FAMILIES, metricRows } from "../metrics/metric.js";
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
  /** Two sentences on what the ISS and KTS tables show, from this run's numbers. */
  summary: string[];
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
  return { ...r, modelDir, report: report.path, summary: demoSummary(r.metrics) };
}

/** The families with a value at `layer` (the pooled one left out), highest first. */
function ranked<Row extends { layer: number; family: string }>(
  rows: readonly Row[],
  layer: number,
  value: (r: Row) => number | null,
): [family: string, value: number][] {
  return rows
    .filter((r) => r.layer === layer && r.family !== ALL_FAMILIES && value(r) !== null)
    .map((r): [string, number] => [r.family, value(r)!])
    .sort((a, b) => b[1] - a[1]);
}

/** What the demo's tables show, in two sentences: accuracy and ISS by family, then how far KTS transfers. */
function demoSummary(m: RunResult["metrics"]): string[] {
  const kts = metricRows(m, KTS);
  const iss = metricRows(m, ISS);
  const layer = Math.max(...m.manifest.layers);
  const pct = (v: number) => `${Math.round(100 * v)}%`;
  const num = ([f, v]: [string, number]) => `${f} (${v.toFixed(2)})`;
  const accuracy = ranked(kts, layer, (r) => r.accuracy);
  const anchor = accuracy.find(([f]) => f === ANCHOR_FAMILY);
  const others = accuracy.filter(([f]) => f !== ANCHOR_FAMILY);
  const byIss = ranked(iss, layer, (r) => r.iss);
  const byKts = ranked(kts, layer, (r) => r.kts).filter(([f]) => f !== ANCHOR_FAMILY);
  const first =
    `The model answers ${anchor ? pct(anchor[1]) : "none"} of the anchor questions right, and of the perturbed ones ` +
    `${others.map(([f, v]) => `${f} ${pct(v)}`).join(", ")}; ` +
    (byIss.length
      ? `ISS at layer ${layer} shows which stay near their anchor inside the model: most ${num(byIss[0]!)}, ` +
        `least ${num(byIss.at(-1)!)}.`
      : "ISS is undefined at every layer.");
  const second = byKts.length
    ? `KTS shows how much of a correctness probe trained on the anchors still works on each family at layer ` +
      `${layer}: most on ${num(byKts[0]!)}, least on ${num(byKts.at(-1)!)}.`
    : `KTS is undefined at layer ${layer}: ${kts.find((r) => r.layer === layer)?.kts_null_reason ?? "no labelled rows"}.`;
  return [first, second];
}
