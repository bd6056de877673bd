/**
 * The hsm library: every step the `hsm` command runs, as typed functions
 * (`import { extract, verifyStore } from "hsm"`). docs/api.md has an example of each.
 *
 * Importing "hsm" is cheap. Modules that load onnxruntime-node, TensorFlow.js,
 * the native core, protobuf or the expression parser are imported on a
 * function's first call, which is why those functions are async even where the
 * work itself is not (`selectLayers`).
 */
import type { AdoptOptions } from "./store/adopt.js";
import type { AdoptVllmOptions } from "./store/vllm.js";
import type { BankSummary } from "./pipeline/bank.js";
import type { DemoOptions, DemoResult } from "./pipeline/demo.js";
import type { RunMetricsOptions, RunMetricsResult } from "./pipeline/metrics.js";
import type { RunOptions, RunResult } from "./pipeline/run.js";
import type { ExportOptions } from "./export/export.js";
import type { ExportFormatRegistry } from "./export/formats/format.js";
import type { FixtureOptions, FixtureResult } from "./synthetic/store.js";
import type { FixturePreset } from "./synthetic/store-presets.js";
import type { MetricsOptions, MetricsResult } from "./metrics/compute.js";
import type { MetricRegistry } from "./metrics/metric.js";
import type { WrittenFiles } from "./metrics/report.js";
import type { LlamaConfig, TinyModelOptions } from "./synthetic/llama.js";
import type { ExtractOptions as RunnerExtractOptions, ExtractResult, ModelInspection } from "./extract/extract.js";
import type { GenerateOptions, GenerateResult } from "./generate/generate.js";
import type { ScoreOptions, ScoreSummary } from "./score/score-file.js";
import type { Manifest } from "./store/manifest.js";
import type { VerifyOptions, VerifyReport } from "./store/verify.js";
import type { Study } from "./study/study-file.js";
import type { StudyOptions } from "./pipeline/study.js";
import type { SlurmOptions, SlurmPlan, WaitOptions } from "./pipeline/slurm.js";
import type { StudySummary } from "./study/layout.js";
import type { CompareOptions, Comparison, LoadOptions } from "./report/compare.js";
import type { ReportOptions, ReportResult } from "./report/build.js";
import type { DeviceReport } from "./model/devices.js";

// Light modules: loaded with "hsm" itself.
export * from "./defaults.js";
export * from "./errors.js";
export { VERSION, TOOL_VERSION } from "./version.js";
export { createProgress, type Progress } from "./util/progress.js";
export { readBank, summarizeBank, mainForwardRows, type BankRow } from "./bank/bank.js";
export { formatTable } from "./metrics/table.js";
export { registerExportFormat, type ExportFormat, type ExportFormatRegistry } from "./export/formats/format.js";
export type { ExportInput, ExportSettings, ExportWritten, ScoredRow } from "./export/formats/format.js";
export { metricRows, registerMetric, type Metric, type MetricName, type MetricRegistry } from "./metrics/metric.js";
export type { LayerData, MetricRow, MetricSettings } from "./metrics/metric.js";
export { BACKENDS, type BackendName } from "./kernels/names.js";
export { BENCH_FIXTURE, FIXTURE_PRESETS, type FixturePreset } from "./synthetic/store-presets.js";
export {
  formatStudySummary,
  modelPaths,
  studyShardCommands,
  type ModelPaths,
  type ModelSummary,
  type ShardCommands,
} from "./study/layout.js";
export { pathStem } from "./util/stem.js";
export { shellWord } from "./util/shell.js";
export { formatComparison } from "./report/format.js";
export { matchDepth, type LayerPair } from "./report/depth.js";

export type { BankSummary, DemoOptions, DemoResult, RunMetricsOptions, RunMetricsResult, RunOptions, RunResult };
export type {
  ExportOptions,
  FixtureOptions,
  FixtureResult,
  MetricsOptions,
  MetricsResult,
  LlamaConfig,
  TinyModelOptions,
};
export type { Study, StudyOptions, StudySummary, CompareOptions, Comparison, LoadOptions, ReportOptions, ReportResult };
export type { DepthComparison, FamilyComparison, Accuracy } from "./report/compare.js";
export type {
  ExtractResult,
  ModelInspection,
  GenerateOptions,
  GenerateResult,
  ScoreOptions,
  ScoreSummary,
  Manifest,
  VerifyOptions,
  VerifyReport,
};
export type { IssRow, KtsRow } from "./metrics/compute.js";
export type { WrittenFiles };
export type { VerifyProblem, VerifiedFile } from "./store/verify.js";
export type { AdoptOptions } from "./store/adopt.js";
export type { AdoptVllmOptions } from "./store/vllm.js";
export type { Device } from "./model/session.js";
export { tensorMethod, type GraphFormat, type TensorMethod } from "./model/model-report.js";
export type { DeviceFinding, DeviceReport } from "./model/devices.js";
export type { WebgpuAdapter } from "./kernels/webgpu-adapter.js";
export type { TokenizerName } from "./synthetic/llama.js";

/** {@link extract}'s options; `shard` may also be written `"K/N"`. */
export interface ExtractOptions extends Omit<RunnerExtractOptions, "shard"> {
  shard?: { index: number; count: number } | string;
}

/** Stores the last-token hidden states of a model's upper layers over a bank; resumable. */
export async function extract(o: ExtractOptions): Promise<ExtractResult> {
  const m = await import("./extract/extract.js");
  return m.extract({ ...o, shard: typeof o.shard === "string" ? m.parseShard(o.shard) : o.shard });
}

/** What hsm finds in a model folder: L, d_model, the tokenizer's prefix, and the tensor stored for each layer. */
export async function inspectModel(
  modelDir: string,
  options: { layerRule?: string; hiddenTensors?: string; modelFile?: string } = {},
): Promise<ModelInspection> {
  return (await (await import("./extract/extract.js")).inspectModel(modelDir, { ...options, weights: false }))
    .inspection;
}

/** Greedy answers to every bank query, appended to a JSONL file; a rerun skips the queries already answered. */
export async function generate(o: GenerateOptions): Promise<GenerateResult> {
  return (await import("./generate/generate.js")).generate(o);
}

/** Labels generations against the bank's answers and writes the scored JSONL. */
export async function scoreFile(o: ScoreOptions): Promise<ScoreSummary> {
  return (await import("./score/score-file.js")).scoreFile(o);
}

/** Writes scored rows in a registered format: Every Eval Ever (validated) or Foundry, built in. */
export async function exportScored(
  o: ExportOptions,
  registry?: ExportFormatRegistry,
): Promise<{ files: string[]; rows: number }> {
  return (await import("./export/export.js")).exportScored(o, registry);
}

/** The built-in export formats (EEE, Foundry), to choose from or to extend with {@link registerExportFormat}. */
export async function exportFormatRegistry(): Promise<ExportFormatRegistry> {
  return (await import("./export/formats/registry.js")).EXPORT_FORMATS;
}

/** The devices and backends this machine offers hsm, and how to add the missing ones; never throws for one missing. */
export async function examineDevices(): Promise<DeviceReport> {
  return (await import("./model/devices.js")).examineDevices();
}

/** Checks a store: manifest, names, headers, sizes, sha256 of every file. Never throws for a bad store; reports it. */
export async function verifyStore(dir: string, options: VerifyOptions = {}): Promise<VerifyReport> {
  return (await import("./store/verify.js")).verifyStore(dir, options);
}

/** {@link verifyStore} for a folder a user named: missing or unreadable folders are errors that say which. */
export async function verifyStoreFolder(
  dir: string,
  options: VerifyOptions = {},
): Promise<{ report: VerifyReport; seconds: number }> {
  return (await import("./pipeline/verify.js")).verifyStoreFolder(dir, options);
}

/** Writes a conforming index.json for a folder of L###.npy written by another tool (rows from the bank); a foreign index.json is kept as index.orig.json. */
export async function adoptStore(dir: string, o: AdoptOptions): Promise<Manifest> {
  // A missing folder is said as such, as verify says it, not as its lock file that cannot be written.
  await (await import("./pipeline/paths.js")).requireStoreFolder(dir);
  return (await import("./store/adopt.js")).adoptStore(dir, o);
}

/** Writes a store from vLLM's hidden-state files (one safetensors file per request), each row its last prompt token. */
export async function adoptVllm(dir: string, o: AdoptVllmOptions): Promise<Manifest> {
  return (await import("./store/vllm.js")).adoptVllm(dir, o);
}

/** Joins shard stores into the store a single run would have written. */
export async function mergeShards(
  out: string,
  shardDirs: string[],
  options: { onProgress?: (done: number, total: number) => void } = {},
): Promise<Manifest> {
  return (await import("./store/merge.js")).mergeShards(out, shardDirs, options);
}

/** Rows of each requested metric of the registry (default: ISS, KTS) per stored layer and family; writes nothing. */
export async function computeMetrics(store: string, o: MetricsOptions = {}): Promise<MetricsResult> {
  return (await import("./metrics/compute.js")).computeMetrics(store, o);
}

/** The built-in metric registry (ISS, KTS), to select from or to extend with {@link registerMetric}. */
export async function metricRegistry(): Promise<MetricRegistry> {
  return (await import("./metrics/registry.js")).METRICS;
}

/** Every computed metric's table with its notes, in the registry's order: what `hsm metrics` prints. */
export async function formatTables(result: MetricsResult, registry?: MetricRegistry): Promise<string> {
  return (await import("./metrics/report.js")).formatTables(result, registry);
}

/** Writes metric results under `dir`: one JSON, CSV and SVG per metric with rows (docs/formats.md#metric-results); returns the paths written. */
export async function writeResults(
  dir: string,
  result: MetricsResult,
  storePath: string,
  registry?: MetricRegistry,
): Promise<WrittenFiles> {
  return (await import("./metrics/report.js")).writeResults(dir, result, storePath, registry);
}

/** `hsm metrics`: checks (and with `verify`, hashes) the store, computes the metrics and writes their files. */
export async function runMetrics(store: string, o: RunMetricsOptions = {}): Promise<RunMetricsResult> {
  return (await import("./pipeline/metrics.js")).runMetrics(store, o);
}

/** The whole pipeline for one model into `outputs/`; finished steps are skipped. */
export async function runPipeline(o: RunOptions): Promise<RunResult> {
  return (await import("./pipeline/run.js")).runPipeline(o);
}

/** The whole pipeline on the embedded default model and bank. */
export async function runDemo(o: DemoOptions = {}): Promise<DemoResult> {
  return (await import("./pipeline/demo.js")).runDemo(o);
}

/** The blocks a store keeps for a model of `L` blocks under a layer rule in `l` and `L` (exact rational arithmetic). */
export async function selectLayers(L: number, rule?: string): Promise<number[]> {
  return (await import("./store/layers.js")).selectLayers(L, rule);
}

/** Validates a whole bank and counts rows, main-forward rows, facts and families. */
export async function checkBank(file: string): Promise<BankSummary> {
  return (await import("./pipeline/bank.js")).checkBank(file);
}

/** Writes a synthetic bank, store and scored file with planted structure into a new folder. */
export async function writeFixture(
  out: string,
  options: FixtureOptions & { preset?: FixturePreset } = {},
): Promise<FixtureResult> {
  const [{ writeFixture: write }, { withPreset }] = await Promise.all([
    import("./synthetic/store.js"),
    import("./synthetic/store-presets.js"),
  ]);
  return write(out, withPreset(options));
}

/**
 * Writes a small Llama-style ONNX model folder with seeded random weights, after checking its geometry. `dir` must
 * not exist yet (or be an empty folder): what a folder holds is never replaced by a test model.
 */
export async function writeTinyModel(
  dir: string,
  options: TinyModelOptions & { style?: string } = {},
): Promise<LlamaConfig> {
  const [{ writeTinyModel: write }, { validateTinyModelOptions }, { refuseFilled }] = await Promise.all([
    import("./synthetic/llama.js"),
    import("./synthetic/options.js"),
    import("./util/fs.js"),
  ]);
  const { style, ...rest } = options;
  const checked = validateTinyModelOptions(rest);
  await refuseFilled(dir, "the model");
  if (style !== undefined || rest.family !== undefined) {
    return (await import("./synthetic/export-styles.js")).writeModelInStyle(dir, style ?? "plain", checked);
  }
  return write(dir, checked);
}

/** Reads and checks a study file (YAML, or JSON when named `.json`); errors name the file, line and field. */
export async function readStudyFile(file: string): Promise<Study> {
  return (await import("./study/study-file.js")).readStudyFile(file);
}

/** Runs every model of a study into its output root, skipping what is finished; one model's failure does not stop the others. */
export async function runStudy(file: string | Study, o: StudyOptions = {}): Promise<StudySummary> {
  return (await import("./pipeline/study.js")).runStudy(file, o);
}

export type { SlurmOptions, SlurmPlan, WaitOptions };

/** Submits a study's jobs to SLURM: only what is neither finished nor already queued or running. */
export async function submitStudy(file: string | Study, o: SlurmOptions): Promise<SlurmPlan> {
  return (await import("./pipeline/slurm.js")).submitStudy(file, o);
}

/** Follows a submitted study's jobs; throws naming the failed job and its log unless every step finished and verifies. */
export async function waitStudy(plan: SlurmPlan, o: WaitOptions = {}): Promise<void> {
  return (await import("./pipeline/slurm.js")).waitStudy(plan, o);
}

/** The paired comparison of two models of an outputs root: correctness per family, ISS and KTS at matched depth. */
export async function compareModels(
  outputs: string,
  a: string,
  b: string,
  o: CompareOptions & LoadOptions = {},
): Promise<Comparison> {
  return (await import("./report/compare.js")).compareModels(outputs, a, b, o);
}

/** Writes the self-contained HTML report of every model under an outputs root. */
export async function writeReport(outputs: string, o: ReportOptions = {}): Promise<ReportResult> {
  return (await import("./report/build.js")).writeReport(outputs, o);
}
