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
 * name itself is recorded as given. Each step is skipped when its output is
 * already complete for the same inputs: generations and scores newer than
 * their inputs (the scores newer than the bank too), a complete store, metric results over the same store files and
 * scored rows with the same settings, exports that would be written the same.
 */
import { basename, join } from "node:path";
import { isDeepStrictEqual } from "node:util";

import { DEFAULT_OUTPUTS, defaultModelName } from "../defaults.js";
import { HsmError } from "../errors.js";
import { exportScored } from "../export/export.js";
import { computeMetrics, decidingSettings, type MetricsResult } from "../metrics/compute.js";
import { METRICS } from "../metrics/registry.js";
import { writeResults, type WrittenFiles } from "../metrics/report.js";
import { extract } from "../extract/extract.js";
import { generate } from "../generate/generate.js";
import type { Device } from "../model/session.js";
import { scoreFile } from "../score/score-file.js";
import type { Manifest } from "../store/manifest.js";
import { verifyStore } from "../store/verify.js";
import { modelPaths } from "../study/layout.js";
import { pathStem } from "../util/stem.js";
import { mtimeOf } from "./paths.js";
import { readText } from "../util/fs.js";

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
  /** Batches run at once by generation and extraction (see ModelRunOptions). */
  workers?: number;
  /** Rows per durable commit of the extraction (default DEFAULT_COMMIT_ROWS). */
  commitRows?: number;
  /** What each step did, for the user. */
  log?: (step: string, message: string) => void;
  onProgress?: (step: string, done: number, total: number) => void;
}

export interface RunResult {
  paths: { generations: string; scored: string; store: string; metrics: string; eee: string; foundry: string };
  /** The metrics as computed, or as read back from their finished files when the step was skipped. */
  metrics: MetricsResult;
  files: WrittenFiles;
  /** True when the metrics were finished already and their files kept. */
  skipped: boolean;
}

/** `a`, `a and b`, `a, b and c`. */
function wordList(words: string[]): string {
  return words.length < 2 ? words.join("") : `${words.slice(0, -1).join(", ")} and ${words.at(-1)}`;
}

/**
 * The results of a finished metrics step: every metric's `<name>.json`, `.csv`
 * and `.svg` under `dir`, each JSON computed over the store files of
 * `manifest` with the settings `expected` (src/metrics/compute.ts
 * decidingSettings). Undefined when any is missing, unreadable or different.
 */
async function finishedMetrics(
  dir: string,
  manifest: Manifest,
  expected: Record<string, unknown>,
): Promise<{ metrics: MetricsResult; files: WrittenFiles } | undefined> {
  const filesSha256 = Object.fromEntries(Object.entries(manifest.files).map(([n, e]) => [n, e.sha256]));
  const metrics: MetricsResult = { manifest, config: {}, backend: { name: "", tfjs: "", simd: "" }, rows: {} };
  const files: WrittenFiles = { json: [], csv: [], svg: [] };
  for (const { name } of METRICS) {
    const [json, csv, svg] = ["json", "csv", "svg"].map((ext) => join(dir, `${name}.${ext}`)) as [
      string,
      string,
      string,
    ];
    let result: { store?: { files_sha256?: unknown }; config?: Record<string, unknown>; rows?: unknown };
    try {
      result = JSON.parse(await readText(json));
    } catch {
      return undefined; // missing or torn: computed again, and a real problem then named
    }
    const { backend_detail: backend, ...config } = result.config ?? {};
    if (!isDeepStrictEqual(result.store?.files_sha256, filesSha256) || !Array.isArray(result.rows)) return undefined;
    if (Object.entries(expected).some(([k, v]) => !isDeepStrictEqual(config[k], v))) return undefined;
    if ((await mtimeOf(csv, "metric table")) === undefined || (await mtimeOf(svg, "metric plot")) === undefined)
      return undefined;
    metrics.config = config;
    metrics.backend = backend as MetricsResult["backend"];
    metrics.rows[name] = result.rows as MetricsResult["rows"][string];
    files.json.push(json);
    files.csv.push(csv);
    files.svg.push(svg);
  }
  return { metrics, files };
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
    workers: o.workers,
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

  // The bank counts too: its answers decide the labels.
  const [genTime, bankTime, scoredTime] = await Promise.all([
    mtimeOf(paths.generations, "generations file"),
    mtimeOf(o.bank, "bank"),
    mtimeOf(paths.scored, "scored file"),
  ]);
  const newest = Math.max(genTime ?? Infinity, bankTime ?? Infinity);
  if (scoredTime !== undefined && scoredTime >= newest && g.written === 0) log("score", "up to date, skipped");
  else {
    const s = await scoreFile({ bank: o.bank, generations: paths.generations, out: paths.scored, model });
    log(
      "score",
      `${s.rows} rows: ${Object.entries(s.labels)
        .map(([l, n]) => `${l} ${n}`)
        .join(", ")}`,
    );
  }

  const e = await extract({
    ...common,
    out: paths.store,
    commitRows: o.commitRows,
    onProgress: (d, t) => o.onProgress?.("extract", d, t),
  });
  log("extract", e.alreadyComplete ? "store complete, skipped" : `${e.rowsExtracted} rows (${e.seconds.toFixed(1)} s)`);

  const report = await verifyStore(paths.store);
  if (!report.ok)
    throw new HsmError(
      `${paths.store} does not verify: ${report.problems.map((p) => `${p.file}: ${p.message}`).join("; ")}`,
    );
  log("verify", `${report.files.length} files, checksums match`);

  const settings = { scored: paths.scored };
  const finished = await finishedMetrics(
    paths.metrics,
    e.manifest,
    await decidingSettings(e.manifest.layers, settings),
  );
  let metrics: MetricsResult;
  let files: WrittenFiles;
  if (finished) {
    ({ metrics, files } = finished);
    log("metrics", "up to date, skipped");
  } else {
    metrics = await computeMetrics(paths.store, settings);
    files = await writeResults(paths.metrics, metrics, paths.store);
    const computed = METRICS.filter((m) => metrics.rows[m.name]).map((m) => m.title);
    log("metrics", `${wordList(computed)} for ${metrics.manifest.layers.length} layers`);
  }

  const exported = { scored: paths.scored, bank: o.bank, replace: true };
  const benchmark = basename(o.bank).replace(/\.jsonl?$/, "");
  const eee = await exportScored({ format: "eee", ...exported, out: paths.eee, benchmark });
  const foundry = await exportScored({ format: "foundry", ...exported, out: paths.foundry });
  const said = (r: { files: string[]; unchanged?: boolean }) =>
    `${r.unchanged ? "up to date, kept " : ""}${r.files.join(", ")}`;
  log("export", `Every Eval Ever: ${said(eee)}; Foundry: ${said(foundry)}`);
  return { paths, metrics, files, skipped: finished !== undefined };
}
