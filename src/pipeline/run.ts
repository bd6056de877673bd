/**
 * `hsm run`: the whole pipeline for one model — generate, score, extract,
 * verify, metrics, exports — into the benchmark's layout under `outputs`:
 *
 *   evaluation/<stem>.jsonl, evaluation/<stem>.scored.jsonl
 *   hidden/<stem>/                  (the store)
 *   metrics/<stem>/                 (<metric>.json, .csv, .svg: iss, kts)
 *   eee/data/…, foundry/<stem>.jsonl
 *
 * where `<stem>` is the model name made safe as a path (src/util/stem.ts); the
 * name itself is recorded as given.
 * Each step is skipped when its output is already complete and newer than its inputs.
 */
import { basename, join } from "node:path";

import { DEFAULT_OUTPUTS, defaultModelName } from "../defaults.js";
import { HsmError } from "../errors.js";
import { exportScored } from "../export/export.js";
import { computeMetrics, type MetricsResult } from "../metrics/compute.js";
import { METRICS } from "../metrics/registry.js";
import { writeResults, type WrittenFiles } from "../metrics/report.js";
import { extract } from "../extract/extract.js";
import { generate } from "../generate/generate.js";
import type { Device } from "../model/session.js";
import { scoreFile } from "../score/score-file.js";
import { verifyStore } from "../store/verify.js";
import { modelPaths } from "../study/layout.js";
import { pathStem } from "../util/stem.js";
import { mtimeOf } from "./paths.js";

export interface RunOptions {
  modelDir: string;
  /** The graph to run when the model folder holds several (see ModelRunOptions). */
  modelFile?: string;
  bank: string;
  /** Output root; default `outputs`. */
  outputs?: string;
  model?: string;
  batchSize?: number;
  device?: Device;
  threads?: number;
  /** What each step did, for the user. */
  log?: (step: string, message: string) => void;
  onProgress?: (step: string, done: number, total: number) => void;
}

export interface RunResult {
  paths: { generations: string; scored: string; store: string; metrics: string; eee: string; foundry: string };
  metrics: MetricsResult;
  files: WrittenFiles;
}

/** `a`, `a and b`, `a, b and c`. */
function wordList(words: string[]): string {
  return words.length < 2 ? words.join("") : `${words.slice(0, -1).join(", ")} and ${words.at(-1)}`;
}

export async function runPipeline(o: RunOptions): Promise<RunResult> {
  const log = o.log ?? (() => {});
  const model = o.model ?? defaultModelName(o.modelDir);
  const outputs = o.outputs ?? DEFAULT_OUTPUTS;
  const paths = {
    ...modelPaths(outputs, model),
    eee: join(outputs, "eee"),
    foundry: join(outputs, "foundry", `${pathStem(model)}.jsonl`),
  };
  const common = {
    modelDir: o.modelDir,
    modelFile: o.modelFile,
    bank: o.bank,
    model,
    batchSize: o.batchSize,
    device: o.device,
    threads: o.threads,
  };

  const g = await generate({
    ...common,
    out: paths.generations,
    onProgress: (d, t) => o.onProgress?.("generate", d, t),
  });
  log(
    "generate",
    g.written
      ? `${g.written} queries answered (${g.seconds.toFixed(1)} s)`
      : `all ${g.skipped} queries already answered, skipped`,
  );

  const [genTime, scoredTime] = await Promise.all([
    mtimeOf(paths.generations, "generations file"),
    mtimeOf(paths.scored, "scored file"),
  ]);
  if (scoredTime !== undefined && genTime !== undefined && scoredTime >= genTime && g.written === 0)
    log("score", "up to date, skipped");
  else {
    const s = await scoreFile({ bank: o.bank, generations: paths.generations, out: paths.scored, model });
    log(
      "score",
      `${s.rows} rows: ${Object.entries(s.labels)
        .map(([l, n]) => `${l} ${n}`)
        .join(", ")}`,
    );
  }

  const e = await extract({ ...common, out: paths.store, onProgress: (d, t) => o.onProgress?.("extract", d, t) });
  log("extract", e.alreadyComplete ? "store complete, skipped" : `${e.rowsExtracted} rows (${e.seconds.toFixed(1)} s)`);

  const report = await verifyStore(paths.store);
  if (!report.ok)
    throw new HsmError(
      `${paths.store} does not verify: ${report.problems.map((p) => `${p.file}: ${p.message}`).join("; ")}`,
    );
  log("verify", `${report.files.length} files, checksums match`);

  const metrics = await computeMetrics(paths.store, { scored: paths.scored });
  const files = await writeResults(paths.metrics, metrics, paths.store);
  const computed = METRICS.filter((m) => metrics.rows[m.name]).map((m) => m.title);
  log("metrics", `${wordList(computed)} for ${metrics.manifest.layers.length} layers`);

  const eee = await exportScored({
    format: "eee",
    scored: paths.scored,
    bank: o.bank,
    out: paths.eee,
    benchmark: basename(o.bank).replace(/\.jsonl?$/, ""),
  });
  await exportScored({ format: "foundry", scored: paths.scored, bank: o.bank, out: paths.foundry });
  log("export", `Every Eval Ever: ${eee.files.join(", ")}; Foundry: ${paths.foundry}`);
  return { paths, metrics, files };
}
