/**
 * `hsm extract`: for every main-forward query of a bank, the hidden state at
 * the last prompt token after each stored decoder block, written to a
 * float16 store. Rows are processed in commit blocks of bank order (each
 * block's rows sorted by length into batches), so a killed run resumes at the
 * last committed block and ends byte-identical to an uninterrupted one, and
 * shards cut on block boundaries merge into exactly the single-process store.
 */
import { createHash } from "node:crypto";
import { basename, join } from "node:path";

import { mainForwardRows, readBank, type BankRow } from "../bank/bank.js";
import { buildPrompt } from "../bank/prompt.js";
import {
  DEFAULT_BATCH_SIZE,
  DEFAULT_COMMIT_ROWS,
  DEFAULT_LAYER_RULE,
  DEFAULT_SELF_CHECK_ROWS,
  defaultModelName,
  MAX_PROMPT_LEN,
} from "../defaults.js";
import { BankError, HsmError, UsageError } from "../errors.js";
import { selectLayers } from "../store/layers.js";
import { fileSha256 } from "../store/hash.js";
import { acquireLock } from "../store/lock.js";
import { MANIFEST_NAME, type Manifest, type ShardInfo } from "../store/manifest.js";
import { layerFileName } from "../store/names.js";
import { StoreWriter, type StoreInit } from "../store/writer.js";
import { makeDir, readText, refuseInputAsOutput } from "../util/fs.js";
import { collectGarbage } from "../util/memory.js";
import { checkName } from "../util/stem.js";
import { forEachSettled } from "../util/settle.js";
import { lengthBreaks, leftPad, planBatches, positionLimit, rightPad, type BatchRule } from "../model/batching.js";
import {
  DetectionError,
  detectHiddenTensors,
  parseHiddenTensorMap,
  styleRecord,
  type HiddenPlan,
  type HiddenTensor,
} from "../model/detect.js";
import { declaredBatch } from "../model/feeds.js";
import type { InputPlan } from "../model/styles/style.js";
import { decodeModelOf, openModelDir, type ModelConfig } from "../model/model-dir.js";
import { graphFormat, type GraphFormat } from "../model/model-report.js";
import { OpsetError, valueShape, type ModelProto } from "../onnx/graph.js";
import { rewriteForExtraction, type RewriteResult } from "../onnx/rewrite.js";
import { readModel, readModelStructure, type ModelStructure } from "../onnx/structure.js";
import { breakBatchingForTest, runSelfCheck, selfCheckFailure } from "../model/self-check.js";
import { hiddenOutputType } from "../model/hidden-output.js";
import {
  checkDevice,
  forDevice,
  graphNeeds,
  loadSession,
  runError,
  stageModel,
  withStagedModel,
  type Device,
  type ModelRunOptions,
  type Stage,
} from "../model/session.js";
import { tokenizerAndModel } from "../model/tokenizer.js";
import { parallelLine, placeSessions, weightBytes } from "../model/workers.js";
import { shardFromEnv, shardRange } from "./shard.js";
import { extractionWorkerScript, sessionStates, workerStates, type StateRunner, type StatesSetup } from "./states.js";

/**
 * Rewrites the inspected model for extraction (weights by reference into the
 * staged file where there is one) and drops the decoded model and the file's
 * bytes from `inspected`: nothing else holds them, so they can be collected
 * before onnxruntime maps the weights. Done in a function of its own so that
 * no variable of the caller's still points at them. Returns the rewritten
 * model and the inputs it still reads.
 */
function rewriteAndRelease(
  inspected: { model: ModelProto; source: ModelStructure },
  tensors: HiddenTensor[],
  dModel: number,
  stage: Stage | undefined,
  rightPaddedMask: string | undefined,
  device: Device,
): { rewritten: RewriteResult; live: Set<string> } {
  const rewritten = rewriteForExtraction(
    inspected.model,
    tensors,
    dModel,
    stage ? { bytes: inspected.source.bytes, name: stage.sourceName } : undefined,
    rightPaddedMask,
    hiddenOutputType(device),
  );
  const live = new Set((inspected.model.graph!.input ?? []).map((v) => v.name!));
  inspected.model = undefined as never;
  inspected.source = undefined as never;
  return { rewritten, live };
}

/**
 * Tensors named by `--hidden-tensors` whose shape the graph declares must be `d_model` wide: the rows are read as
 * `d_model` values each, and a wider tensor (the logits, say) would fill them with slices of something else.
 */
function checkGivenWidths(model: ModelProto, tensors: HiddenTensor[], dModel: number): void {
  const graph = model.graph!;
  const declared = new Map(
    [...(graph.valueInfo ?? []), ...(graph.output ?? []), ...(graph.input ?? [])].map((v) => [v.name!, v]),
  );
  for (const t of tensors) {
    const v = declared.get(t.tensor);
    const width = v ? valueShape(v)?.at(-1) : undefined;
    if (typeof width === "number" && width !== dModel)
      throw new DetectionError(
        `--hidden-tensors names "${t.tensor}" for layer ${t.layer}, which the graph declares ${width} wide; a stored state is d_model = ${dModel} wide`,
      );
  }
}

/** A bank with no row to run. */
class EmptyBankError extends HsmError {
  constructor(
    readonly path: string,
    problem: string,
  ) {
    super(`${path}: ${problem}`);
  }
}

export interface ExtractOptions extends ModelRunOptions {
  /** Layer rule in l and L. */
  layerRule?: string;
  /** `K/N`: this process extracts shard K (0-based) of N. */
  shard?: { index: number; count: number };
  hiddenTensors?: string;
  commitRows?: number;
  /** Rows re-run alone at batch 1 once every row is stored, to check the batched states; 0 turns it off. */
  selfCheck?: number;
  /** Messages for the user: what was done ("info") and what to look at ("warn"). */
  log?: (message: string, level: "info" | "warn") => void;
}

export interface ExtractResult {
  manifest: Manifest;
  /** True when the store was already complete and nothing was done. */
  alreadyComplete: boolean;
  rowsExtracted: number;
  seconds: number;
}

async function isComplete(dir: string): Promise<boolean> {
  try {
    return JSON.parse(await readText(join(dir, MANIFEST_NAME))).complete === true;
  } catch {
    return false;
  }
}

/** Parses `K/N` (0-based K), or `auto` / `auto/N` read from a scheduler's variables (./shard.ts). */
export function parseShard(text: string, env: NodeJS.ProcessEnv = process.env): { index: number; count: number } {
  if (text.trim().startsWith("auto")) return shardFromEnv(text, env);
  const m = /^(\d+)\/(\d+)$/.exec(text.trim());
  const index = m ? Number(m[1]) : NaN;
  const count = m ? Number(m[2]) : NaN;
  if (!m || count < 1 || index >= count)
    throw new UsageError(`Expected --shard K/N with 0 ≤ K < N, auto or auto/N but received "${text}"`);
  return { index, count };
}

/** Everything about a model that extraction needs, and what `inspect-model` prints. */
export interface ModelInspection {
  dir: string;
  /** The graph file run (model.onnx, or the one picked under onnx/). */
  onnxPath: string;
  /** `hf:ORG/NAME@COMMIT` for a model named by hub id. */
  source?: string;
  numLayers: number;
  dModel: number;
  vocabSize: number;
  tokenizerSize: number;
  addsPrefix: number[];
  plan: HiddenPlan;
  storedLayers: number[];
  inputs: { name: string; shape: (number | string)[] | undefined }[];
  outputs: string[];
  /** The graph's compute dtype and weight format. */
  format: GraphFormat;
  /** The side whole prompts are padded on (see {@link promptPadding}). */
  promptPadding: "left" | "right";
  /**
   * Batches hold only prompts of one length, never padded: the graph has no `attention_mask` input, so nothing
   * could hide padding from its attention. Positions are then 0…n−1 in every row.
   */
  sameLength: boolean;
}

/**
 * Inspects a model folder. The graph file is read whole, or with `weights: false` without its large weights
 * (`source.fill()` reads them), for a caller that hands them to onnxruntime by offset or never looks at them.
 */
export async function inspectModel(
  modelDir: string,
  options: { layerRule?: string; hiddenTensors?: string; modelFile?: string; hash?: boolean; weights?: boolean } = {},
) {
  const md = await openModelDir(modelDir, options.modelFile);
  // With `hash`, the model file is hashed in another thread while this one loads the tokenizer (and another reads the file).
  const hashing = options.hash ? fileSha256(md.onnxPath) : undefined;
  hashing?.catch(() => {});
  const { tokenizer, source } = await tokenizerAndModel(md, options.weights === false ? readModelStructure : readModel);
  const model = decodeModelOf(md, source.bytes);
  const L = md.config.numLayers;
  const explicit = options.hiddenTensors ? parseHiddenTensorMap(options.hiddenTensors, L) : undefined;
  // A genai build's count is genai_config.json's (it has no config.json).
  const layersFrom = `${basename(md.config.path)}'s ${md.config.layersField}`;
  const plan = detectHiddenTensors(model.graph!, L, explicit, undefined, layersFrom);
  if (explicit) checkGivenWidths(model, plan.tensors, md.config.hiddenSize);
  const storedLayers = selectLayers(L, options.layerRule ?? DEFAULT_LAYER_RULE);
  const missing = storedLayers.filter((l) => !plan.tensors.some((t) => t.layer === l));
  if (missing.length)
    throw new DetectionError(
      `no tensor is known for stored layer(s) ${missing.join(", ")}; add them to --hidden-tensors`,
    );
  const inspection: ModelInspection = {
    dir: modelDir,
    onnxPath: md.onnxPath,
    ...(md.source ? { source: md.source } : {}),
    numLayers: L,
    dModel: md.config.hiddenSize,
    vocabSize: md.config.vocabSize,
    tokenizerSize: tokenizer.size,
    addsPrefix: tokenizer.prefix,
    plan,
    storedLayers,
    inputs: (model.graph!.input ?? []).map((v) => ({ name: v.name!, shape: valueShape(v) })),
    outputs: (model.graph!.output ?? []).map((v) => v.name!),
    format: graphFormat(model.graph!),
    promptPadding: promptPadding(plan.inputs),
    sameLength: !hasMask(plan.inputs),
  };
  return { inspection, model, source, tokenizer, sha256: hashing, config: md.config };
}

export async function extract(o: ExtractOptions): Promise<ExtractResult> {
  const t0 = performance.now();
  const log = o.log ?? (() => {});
  const batchSize = o.batchSize ?? DEFAULT_BATCH_SIZE;
  const commitRows = o.commitRows ?? DEFAULT_COMMIT_ROWS;
  if (!Number.isSafeInteger(batchSize) || batchSize < 1)
    throw new UsageError(`Expected a positive --batch-size but received ${batchSize}`);
  if (o.selfCheck !== undefined && !(Number.isSafeInteger(o.selfCheck) && o.selfCheck >= 0)) {
    throw new UsageError(`Expected --self-check to be 0 or a positive number of rows but received ${o.selfCheck}`);
  }

  // Everything is checked before anything is written: the name first, which the manifest and every later step record.
  checkName(o.model ?? defaultModelName(o.modelDir));
  await refuseInputAsOutput({ name: "--out", path: o.out }, [
    { name: "--model-dir", path: o.modelDir },
    { name: "--bank", path: o.bank },
  ]);
  const bankRows = await readBank(o.bank);
  const main = mainForwardRows(bankRows);
  if (main.length === 0)
    throw new EmptyBankError(o.bank, "no row has use_for_main_forward: true, so there is nothing to extract");
  const inspected = await inspectModel(o.modelDir, {
    layerRule: o.layerRule,
    hiddenTensors: o.hiddenTensors,
    modelFile: o.modelFile,
    hash: true,
    // The weights go to onnxruntime by offset into the file (see rewriteAndRelease).
    weights: false,
  });
  const { inspection, tokenizer } = inspected;
  for (const w of inspection.plan.warnings) log(`warning: ${w}`, "warn");
  const layers = inspection.storedLayers;
  const tensors = layers.map((l) => inspection.plan.tensors.find((t) => t.layer === l)!);
  const [start, end] = o.shard ? shardRange(main.length, o.shard.index, o.shard.count, commitRows) : [0, main.length];
  if (end <= start) {
    throw new UsageError(
      `shard ${o.shard!.index}/${o.shard!.count} would be empty: ${main.length} rows in blocks of ${commitRows}; use fewer shards`,
    );
  }
  const rows = main.slice(start, end);
  const shard: ShardInfo | undefined = o.shard
    ? { index: o.shard.index, count: o.shard.count, row_start: start, row_end: end, rows_total: main.length }
    : undefined;
  const modelSha = await inspected.sha256!;
  const batching = rowsPerRun(inspected, batchSize);

  const init = storeInit(o, inspection, tensors, rows, shard, modelSha);
  init.extraction = {
    rows_sha256: rowsSha256(main),
    batch_size: batching.rows,
    commit_rows: commitRows,
    device: o.device ?? "cpu",
  };
  // A finished store is left alone (after checking it was made the same way).
  if (await isComplete(o.out)) {
    const writer = await StoreWriter.open(o.out, init);
    await writer.close();
    return {
      manifest: writer.manifest,
      alreadyComplete: true,
      rowsExtracted: 0,
      seconds: (performance.now() - t0) / 1000,
    };
  }
  // The sessions load (in their threads) while this one tokenizes.
  const opening = openSession(inspected, tensors, batching, rows.length, o, log);
  opening.catch(() => {});
  let tokens: number[][];
  try {
    tokens = rows.map((r) => tokenizer.encode(buildPrompt(r)));
    refuseBeyondContext(rows, tokens, inspected.config, o.bank);
  } catch (err) {
    await opening.then((opened) => opened.runner.close()).catch(() => {});
    throw err;
  }
  const { runner, pad, rule } = await opening;
  // The shortest row runs once before anything is written: a graph onnxruntime cannot run leaves no store behind.
  try {
    await runner.run(pad([tokens.reduce((a, t) => (t.length < a.length ? t : a))], tokenizer.padId));
  } catch (err) {
    await runner.close().catch(() => {});
    throw runError(o.device ?? "cpu", inspection.onnxPath, err) ?? err;
  }
  let release: (() => Promise<void>) | undefined;
  let writer: StoreWriter | undefined;
  try {
    await makeDir(o.out);
    release = await acquireLock(o.out);
    writer = await StoreWriter.open(o.out, init);
    const d = inspection.dModel;
    const resumedAt = writer.rowsDone;
    const { padId } = tokenizer;
    const job: Blocks = { runner, writer, layers, d, tokens, commitRows, rule, pad, padId };
    const onDevice = <T>(work: Promise<T>) =>
      work.catch((err: unknown) => {
        throw runError(o.device ?? "cpu", inspection.onnxPath, err) ?? err;
      });
    await onDevice(writeBlocks(job, o.onProgress));
    const check = await onDevice(
      runSelfCheck({
        runner,
        dir: o.out,
        layers,
        dModel: d,
        tokens,
        queryIds: init.query_ids,
        padId: tokenizer.padId,
        rule,
        commitRows,
        count: o.selfCheck ?? DEFAULT_SELF_CHECK_ROWS,
        dtype: init.dtype,
      }),
    );
    writer.manifest.self_check = check;
    // Rows that differ from themselves run alone are not kept: a rerun writes them all again.
    if (check.status === "fail") {
      await writer.abandonRows();
      throw selfCheckFailure(check, o.out);
    }
    const manifest = await writer.finish();
    await writer.close();
    warnOverflow(manifest, layers, log);
    return {
      manifest,
      alreadyComplete: false,
      rowsExtracted: rows.length - resumedAt,
      seconds: (performance.now() - t0) / 1000,
    };
  } finally {
    await runner.close().catch(() => {});
    await writer?.close();
    await release?.();
  }
}

/**
 * Refuses a prompt longer than the positions the model's configuration gives it, naming its bank line, before anything is
 * written: a learned position table fails inside onnxruntime on it, and states read past the model's context are no
 * state the model was made to produce.
 */
function refuseBeyondContext(
  rows: readonly BankRow[],
  tokens: number[][],
  config: Pick<ModelConfig, "raw" | "path">,
  bank: string,
): void {
  const limit = positionLimit(config.raw);
  if (limit === undefined) return;
  const i = tokens.findIndex((t) => t.length > limit.positions);
  if (i < 0) return;
  throw new BankError(
    bank,
    rows[i]!.line,
    "query",
    `the prompt of "${rows[i]!.query_id}" is ${tokens[i]!.length} tokens, beyond the model's ${limit.positions} ` +
      `positions (${limit.key} in ${config.path}); shorten the query or leave it out of the main forward pass`,
  );
}

/** The manifest fields an extraction records before its first row: the model, the layers and the row order. */
function storeInit(
  o: ExtractOptions,
  inspection: ModelInspection,
  tensors: HiddenTensor[],
  rows: ReturnType<typeof mainForwardRows>,
  shard: ShardInfo | undefined,
  modelSha: string,
): StoreInit {
  const layers = inspection.storedLayers;
  return {
    model: o.model ?? defaultModelName(o.modelDir),
    model_sha256: modelSha,
    ...(inspection.source ? { model_source: inspection.source } : {}),
    num_layers: inspection.numLayers,
    d_model: inspection.dModel,
    layers,
    layer_rule: o.layerRule ?? DEFAULT_LAYER_RULE,
    last_layer_final_norm: inspection.plan.lastLayerFinalNorm && layers.includes(inspection.numLayers - 1),
    dtype: inspection.format.dtype,
    weights: inspection.format.weights,
    padding_side: inspection.promptPadding,
    query_ids: rows.map((r) => r.query_id),
    fact_ids: rows.map((r) => r.fact_id),
    condition_families: rows.map((r) => r.condition_family),
    max_prompt_len: MAX_PROMPT_LEN,
    ...(shard ? { shard } : {}),
    style: styleRecord(inspection.plan, tensors),
  };
}

/**
 * sha256 of what the rows bring to a store: one line per row, in order, `[query_id, fact_id, condition_family,
 * prompt]` as JSON. The whole run's rows, so that every shard of a run records the same digest.
 */
function rowsSha256(rows: readonly BankRow[]): string {
  const hash = createHash("sha256");
  for (const r of rows) hash.update(`${JSON.stringify([r.query_id, r.fact_id, r.condition_family, buildPrompt(r)])}\n`);
  return hash.digest("hex");
}

/**
 * Stages and rewrites the model, checks that every input it still reads can be fed, and opens its session. The
 * session is made before the store: a model or device that cannot run leaves nothing behind.
 */
async function openSession(
  inspected: Awaited<ReturnType<typeof inspectModel>>,
  tensors: HiddenTensor[],
  batching: ReturnType<typeof rowsPerRun>,
  rows: number,
  o: ExtractOptions,
  log: NonNullable<ExtractOptions["log"]>,
) {
  const { inspection } = inspected;
  const device = o.device ?? "cpu";
  checkDevice(device, graphNeeds(inspection.onnxPath, inspected.model));
  const { rows: perRun, fixed, why } = batching;
  const weights = weightBytes(inspection.onnxPath, inspected.model.graph!);
  const place = placeSessions(o, weights, Math.ceil(rows / perRun), "extracting", log);
  // The weights were left unread (inspectModel); WebGPU may widen float16 ones in memory.
  if (device === "webgpu") await inspected.source.fill();
  const widened = forDevice(device, inspection.onnxPath, inspected.model);
  if (widened !== undefined) log(widened, "info");
  const stage = await stageModel(inspection.onnxPath, inspected.model.graph!);
  // A model that cannot be staged carries its weights inline.
  if (stage === undefined) await inspected.source.fill();
  const paddingSide = inspection.promptPadding;
  // Right-padded rows are read at their last real token, found from the mask inside the graph.
  const mask = inspection.plan.inputs.feeds.find((f) => f.kind === "attention_mask")?.name;
  if (paddingSide === "right" && mask === undefined) {
    await stage?.cleanup();
    throw new DetectionError(
      `graphs of style ${inspection.plan.strategy} are right-padded, but this one has no attention_mask input to find each row's last token`,
    );
  }
  let rewriting: ReturnType<typeof rewriteAndRelease>;
  try {
    rewriting = rewriteAndRelease(
      inspected,
      tensors,
      inspection.dModel,
      stage,
      paddingSide === "right" ? mask : undefined,
      device,
    );
  } catch (err) {
    await stage?.cleanup();
    throw err instanceof OpsetError ? err.in(inspection.onnxPath) : err;
  }
  const { rewritten, live } = rewriting;
  // Only the inputs the rewritten graph still reads are fed; a widened graph's float16 KV-cache inputs as float32.
  const inputFeeds = inspection.plan.inputs.feeds
    .filter((f) => live.has(f.name))
    .map((f) => (widened !== undefined ? { ...f, float16: false } : f));
  const unknown = inspection.plan.inputs.unknown.filter((name) => live.has(name));
  if (unknown.length > 0) {
    await stage?.cleanup();
    throw new DetectionError(`the model has an input "${unknown[0]}" that hsm does not know how to feed`);
  }
  const pad = paddingSide === "right" ? rightPad : leftPad;
  collectGarbage();
  const setup: StatesSetup = {
    inputFeeds,
    layers: tensors.length,
    d: inspection.dModel,
    ...(fixed !== undefined ? { fixedBatch: fixed } : {}),
  };
  const script = extractionWorkerScript();
  // Worker threads load the staged file; where there is none (weights inlined, or running from the TypeScript
  // sources), one session on the main thread takes every core.
  const runner = await withStagedModel(inspection.onnxPath, rewritten.bytes, stage, device, async (file) =>
    typeof file === "string" && script && place.workers > 1
      ? workerStates(script, place.workers, { model: file, options: place.sessionOptions, setup })
      : sessionStates(await loadSession(file, place.aloneOptions), setup),
  );
  if (why !== undefined) log(why, "info");
  log(
    `graph rewritten: ${rewritten.keptNodes} nodes kept, ${rewritten.removedNodes} removed (LM head and unused outputs)`,
    "info",
  );
  const line = parallelLine("extracting", runner.parallel, place.sessionOptions.threads);
  if (line) log(line, "info");
  const rule: BatchRule = {
    size: perRun,
    breaks: lengthBreaks(inspected.config.raw),
    sameLength: inspection.sameLength,
  };
  return { runner, pad, rule };
}

/**
 * Rows per batch: `batchSize`, or fewer where the graph needs it, with the line telling the user why. Activations
 * quantized per tensor make a row's state depend on its batch, so such graphs run one row at a time; a graph whose
 * inputs fix the batch at n (see declaredBatch) runs batches of at most n rows, a smaller one filled out to n.
 */
function rowsPerRun(
  inspected: Awaited<ReturnType<typeof inspectModel>>,
  batchSize: number,
): { rows: number; fixed?: number; why?: string } {
  const { inspection } = inspected;
  const fixed = declaredBatch(inspection.onnxPath, inspected.model.graph!, inspection.plan.inputs.feeds);
  const at = fixed === undefined ? {} : { fixed };
  if (inspection.format.batchDependent)
    return {
      rows: 1,
      ...at,
      why: "the graph quantizes activations per tensor (DynamicQuantizeLinear), so rows run one at a time",
    };
  if (fixed === undefined) return { rows: batchSize };
  const rows = Math.min(batchSize, fixed);
  const how =
    fixed === 1 ? "rows run one at a time" : `every batch runs as ${fixed} rows, a smaller one filled out with copies`;
  return { rows, fixed, why: `${inspection.onnxPath}: the graph's inputs fix the batch at ${fixed}, so ${how}` };
}

/**
 * The side whole prompts are padded on. A graph without a `position_ids` input counts positions itself, and
 * may count them from the padded length (optimum's legacy GPT-2 decoder), which left padding would shift; padded
 * on the right, every row's tokens sit at 0…n−1 however the graph counts, and a causal model's real tokens never
 * see the padding after them. A graph that takes positions is padded on the left, as its plan says. A graph
 * without an `attention_mask` input is never padded (its batches hold prompts of one length): each row's last
 * token is the last position, as with left padding.
 */
function promptPadding(inputs: InputPlan): "left" | "right" {
  if (inputs.paddingSide === "right") return "right";
  return hasMask(inputs) && !inputs.feeds.some((f) => f.kind === "position_ids") ? "right" : "left";
}

/** Whether the graph takes an `attention_mask`, which hides padding from its attention. */
function hasMask(inputs: InputPlan): boolean {
  return inputs.feeds.some((f) => f.kind === "attention_mask");
}

/** What writing the rows in commit blocks needs. */
interface Blocks {
  runner: StateRunner;
  writer: StoreWriter;
  layers: number[];
  d: number;
  tokens: number[][];
  commitRows: number;
  rule: BatchRule;
  pad: typeof leftPad;
  padId: number;
}

/**
 * Runs the rows from where the store left off, one commit block at a time (each block's rows batched by length,
 * the batches run as the runner takes them), and commits each block's rows to every layer file.
 */
async function writeBlocks(b: Blocks, onProgress: ExtractOptions["onProgress"]): Promise<void> {
  const { runner, writer, layers, d, tokens, commitRows, rule, pad, padId } = b;
  const total = tokens.length;
  const n = layers.length;
  // A block never holds more rows than the run has (--commit-rows may exceed them).
  const blocks = layers.map(() => new Uint16Array(Math.min(commitRows, total) * d));
  let done = writer.rowsDone;
  onProgress?.(done, total);
  while (done < total) {
    const blockEnd = Math.min(total, done + commitRows);
    const lengths = tokens.slice(done, blockEnd).map((t) => t.length);
    const start = done;
    await forEachSettled(planBatches(lengths, rule), runner.parallel, async (batch) => {
      const seqs = batch.map((i) => tokens[start + i]!);
      const data = await runner.run(breakBatchingForTest(pad(seqs, padId)));
      batch.forEach((i, b) => {
        for (let k = 0; k < n; k++) blocks[k]!.set(data.subarray((b * n + k) * d, (b * n + k + 1) * d), i * d);
      });
    });
    const count = blockEnd - done;
    for (let k = 0; k < n; k++) {
      await writer.writeRows(layers[k]!, done, blocks[k]!.subarray(0, count * d));
    }
    await writer.commit(blockEnd);
    done = blockEnd;
    onProgress?.(done, total);
  }
}

/** Tells the user which layers held values beyond float16's range (stored as ±inf). */
function warnOverflow(manifest: Manifest, layers: number[], log: NonNullable<ExtractOptions["log"]>): void {
  const overflowed = layers.filter((l) => manifest.files[layerFileName(l)]!.nonfinite > 0);
  if (overflowed.length > 0) {
    log(
      `warning: values beyond float16's range were stored as ±inf (as NumPy's astype does) in layer(s) ` +
        overflowed.map((l) => `${l} (${manifest.files[layerFileName(l)]!.nonfinite})`).join(", "),
      "warn",
    );
  }
}
