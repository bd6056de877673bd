/**
 * `hsm generate`: greedy decoding (num_beams 1, max_new_tokens 24) with the
 * prompts, left truncation and padding of extraction (left, or right for
 * GroupQueryAttention graphs, as the graph style says), under the decoding
 * rules of docs/formats.md#decoding (see rules.ts). The graph is rewritten so that
 * the LM head runs on each row's next-token position only and the argmax
 * happens inside it; models with KV-cache inputs decode with the cache. Models
 * without one get a cache added to the graph (add-cache.ts), used only where it
 * gives the tokens full recomputation gives on a few prompts; otherwise they
 * recompute the whole sequence each step. Graphs that quantize activations per
 * tensor decode one row at a time.
 *
 * Every batch is appended and fsynced as soon as it is done, so a stopped run
 * loses nothing it finished. A rerun skips the query_ids already written,
 * never duplicates a line, and plans the same batches, so a killed and resumed
 * run ends with the same file as an uninterrupted one. A query that fails even
 * when run alone is written with an `error` field instead of an answer (and
 * tried again by the next run); a model that fails on every query stops the run.
 */
import { stat, truncate, unlink, type FileHandle } from "node:fs/promises";
import { basename, dirname } from "node:path";

import { readBank, type BankRow } from "../bank/bank.js";
import { buildPrompt } from "../bank/prompt.js";
import { DEFAULT_BATCH_SIZE, DEFAULT_GENERATE_CHECK_ROWS, defaultModelName, MAX_NEW_TOKENS } from "../defaults.js";
import { BankError, FileError, HsmError, UsageError } from "../errors.js";
import { JSONL_LINE_MAX_BYTES } from "../util/jsonl.js";
import { lockUnlessReadOnly } from "../store/lock-read-only.js";
import { headKernels, type HeadKernels } from "../kernels/default.js";
import {
  fileError,
  makeDir,
  openOutput,
  readInput,
  readWhole,
  refuseInputAsOutput,
  writeFileAtomic,
} from "../util/fs.js";
import { checkName } from "../util/stem.js";
import { collectGarbage } from "../util/memory.js";
import { computeCores } from "../util/cores.js";
import { lengthBreaks, planBatches, positionLimit, type BatchRule } from "../model/batching.js";
import { DetectionError, planInputs } from "../model/detect.js";
import { declaredBatch } from "../model/feeds.js";
import { addKvCache, attentionShape, type AttentionShape } from "../onnx/add-cache.js";
import { LAST_HIDDEN, NEXT_TOKEN, pastInputs, type DecodeSetup } from "./decode-batch.js";
import { cacheDeparture, exportedLogits } from "./cache-probe.js";
import { decodingWorkerScript, sessionDecoders, workerDecoders, type Decoders } from "./workers.js";
import { parallelLine, placeSessions, weightBytes, type SessionPlace } from "../model/workers.js";
import { outputNewPositions } from "./cache-join.js";
import { answerFields, readEosIds } from "./rules.js";
import { fileSha256 } from "../store/hash.js";
import { checkGenerations, generationCheckWarning } from "./check.js";
import { isPastInput, isPresentOutput } from "../onnx/kv-cache.js";
import { prepareHead, type HeadSetup } from "./lm-head.js";
import { takeEmbeddingOut } from "./embedding.js";
import { decodeModelOf, openModelDir, type ModelConfig, type ModelDir } from "../model/model-dir.js";
import {
  DataType,
  defaultOpset,
  encodeModel,
  GraphBuilder,
  graphIndex,
  num,
  OpsetError,
  pruneGraph,
  valueInfo,
  type GraphProto,
  type ModelProto,
  type TensorProto,
  type ValueInfoProto,
} from "../onnx/graph.js";
import { graphFormat } from "../model/model-report.js";
import { rewriteWeightsInPlace } from "../onnx/rewrite.js";
import {
  checkDevice,
  DeviceError,
  forDevice,
  graphNeeds,
  loadSession,
  ModelLoadError,
  runError,
  stageModel,
  withStagedModel,
  type ModelRunOptions,
} from "../model/session.js";
import { tokenizerAndModel, type PromptTokenizer } from "../model/tokenizer.js";

/** Rows sorted by length together: batches are planned within windows of this many rows in bank order. */
const SORT_WINDOW = 256;
/** Queries failing in a row, with none answered yet, that mean the model cannot generate at all. */
const FAILURES_BEFORE_STOP = 8;

export interface GenerateOptions extends ModelRunOptions {
  maxNewTokens?: number;
  /** Rows regenerated alone at batch 1 after the run, whose text must not change (`<out>.check.json`); 0 turns it off. */
  selfCheck?: number;
  /** Messages for the user: what was done ("info") and what to look at ("warn"). */
  log?: (message: string, level: "info" | "warn") => void;
}

export interface GenerateResult {
  /** Rows written with an answer by this run. */
  written: number;
  /** Rows already in the file with an answer. */
  skipped: number;
  /** Rows written with an `error` field by this run. */
  failed: number;
  seconds: number;
}

/** A generations file this run cannot continue. */
class GenerationsFileError extends HsmError {
  constructor(
    readonly path: string,
    readonly line: number | undefined,
    problem: string,
  ) {
    super(`${path}${line ? `:${line}` : ""}: ${problem}`);
  }
}

/** A model (its graph file `file`) that failed on every query tried, so nothing could be generated. */
export class GenerationError extends HsmError {
  constructor(
    readonly file: string,
    readonly queryIds: string[],
    cause: unknown,
  ) {
    super(
      `${file}: generation failed on ${queryIds.length} queries in a row (${queryIds.slice(0, 3).join(", ")}${queryIds.length > 3 ? ", …" : ""}), even one at a time, ` +
        `and none succeeded: ${(cause as Error).message?.split("\n")[0] ?? String(cause)}. Answers written before them are kept; rerunning resumes there`,
      { cause },
    );
  }
}

/**
 * Rewrites a decoder for greedy steps: the LM head's MatMul reads only the
 * position of each row's next token, an ArgMax picks the next token inside the
 * graph, and the outputs are that token and the KV cache (`present.*`). With
 * left padding that position is the last; with right padding
 * (`rightPaddedMask` names the mask input) it is row b's last real token,
 * min(sum(mask_b) − 1, S − 1): the prompt's last token on the first step, and
 * the one new token on cached steps.
 *
 * With `headOutside`, an LM head that is one float32 MatMul by a weight
 * `[d, V]` stored in the model leaves the graph: the output is then the
 * head's input at that position (`[B, 1, d]`, {@link LAST_HIDDEN}), and the
 * weight is returned for the caller's own head (see head.ts).
 */
export function rewriteForGeneration(
  model: ModelProto,
  rightPaddedMask?: string,
  headOutside = false,
): { cached: boolean; head?: TensorProto } {
  const graph = model.graph!;
  const logits = (graph.output ?? []).find((o) => o.name === "logits");
  if (!logits)
    throw new DetectionError(
      `the model has no "logits" output; outputs are ${(graph.output ?? []).map((o) => o.name).join(", ")}`,
    );
  const { producer } = graphIndex(graph);
  const g = new GraphBuilder(new Set((graph.node ?? []).map((n) => n.name!)), defaultOpset(model));
  const pick = rightPaddedMask === undefined ? lastPosition(g) : lastRealToken(g, rightPaddedMask);
  const head = producer.get("logits");
  const weight = headOutside && head?.opType === "MatMul" ? float32Matrix(graph, head.input![1]!) : undefined;
  const presents = (graph.output ?? []).filter((o) => isPresentOutput(o.name!));
  let first: ValueInfoProto;
  if (weight) {
    const last = pick(head!.input![0]!);
    g.nodes.push({ name: "/hsm/last_hidden", opType: "Identity", input: [last], output: [LAST_HIDDEN] });
    first = valueInfo(LAST_HIDDEN, DataType.FLOAT, ["batch_size", 1, num(weight.dims![0])]);
  } else {
    let lastLogits: string;
    if (head?.opType === "MatMul") {
      // Gather the position before the LM head: [B, T, d] → [B, 1, d].
      head.input![0] = pick(head.input![0]!);
      lastLogits = "logits";
    } else {
      lastLogits = pick("logits");
    }
    const arg = g.op1("/hsm", "ArgMax", [lastLogits], { axis: -1, keepdims: 0 }); // [B, 1]
    const next = g.alongAxes("/hsm", "Squeeze", arg, [1], "/hsm/constants/axes_1");
    g.nodes.push({ name: "/hsm/next_token", opType: "Identity", input: [next], output: [NEXT_TOKEN] });
    first = valueInfo(NEXT_TOKEN, DataType.INT64, ["batch_size"]);
  }
  graph.node = [...(graph.node ?? []), ...g.nodes];
  graph.initializer = [...(graph.initializer ?? []), ...g.initializers];
  graph.output = [first, ...presents];
  pruneGraph(graph);
  return { cached: presents.length > 0, ...(weight ? { head: weight } : {}) };
}

/**
 * {@link rewriteForGeneration}, with the head taken out of the graph prepared
 * for `kernels` (where they are given). Nothing returned points into the
 * model file's bytes, so they can be collected once the graph is staged.
 */
async function rewriteWithHead(
  model: ModelProto,
  rightPaddedMask: string | undefined,
  kernels: HeadKernels | undefined,
  onnxPath: string,
  threads: number,
): Promise<{ cached: boolean; headSetup?: HeadSetup }> {
  let rewritten: ReturnType<typeof rewriteForGeneration>;
  try {
    rewritten = rewriteForGeneration(model, rightPaddedMask, kernels !== undefined);
  } catch (err) {
    throw err instanceof OpsetError ? err.in(onnxPath) : err;
  }
  const { cached, head } = rewritten;
  return { cached, headSetup: head && (await prepareHead(kernels!, head, dirname(onnxPath), threads)) };
}

/** The float32 initializer named `name` when it is a matrix, else undefined. */
function float32Matrix(graph: GraphProto, name: string): TensorProto | undefined {
  const t = (graph.initializer ?? []).find((x) => x.name === name);
  return t && t.dataType === DataType.FLOAT && t.dims?.length === 2 ? t : undefined;
}

/** `[B, T, x]` → `[B, 1, x]` at the last position. */
function lastPosition(g: GraphBuilder): (tensor: string) => string {
  const last = g.ints("/hsm/constants/last_positions", [-1]);
  return (tensor) => g.op1("/hsm/lm_head", "Gather", [tensor, last], { axis: 1 });
}

/** `[B, S, x]` → `[B, 1, x]` at min(sum(mask_b) − 1, S − 1), per row. */
function lastRealToken(g: GraphBuilder, mask: string): (tensor: string) => string {
  const S = "/hsm/next_position";
  const one = g.ints("/hsm/constants/one", [1]);
  const count = g.alongAxes(S, "ReduceSum", mask, [1], "/hsm/constants/axes_1", { keepdims: 1 }); // [B, 1]
  const steps = g.op1(S, "Slice", [g.op1(S, "Shape", ["input_ids"]), one, g.ints("/hsm/constants/two", [2])]); // [1]: S
  const index = g.op1(S, "Sub", [g.op1(S, "Min", [count, steps]), one]); // [B, 1]
  return (tensor) => {
    const width = g.op1(S, "Slice", [
      g.op1(S, "Shape", [tensor]),
      g.ints("/hsm/constants/two", [2]),
      g.ints("/hsm/constants/three", [3]),
    ]);
    const target = g.op1(S, "Concat", [one, one, width], { axis: 0 }); // [1, 1, x]
    const spread = g.op1(S, "Expand", [g.alongAxes(S, "Unsqueeze", index, [2], "/hsm/constants/axes_2"), target]);
    return g.op1(S, "GatherElements", [tensor, spread], { axis: 1 });
  };
}

/** What every line already in the output must agree with for this run to continue it. */
interface OwnAnswers {
  /** The `--model` name rows are written under. */
  model: string;
  /** sha256 of the ONNX graph file that answers (as a store's `model_sha256`). */
  modelSha256: string;
  onnxPath: string;
  maxNewTokens: number;
  bank: string;
  rows: readonly BankRow[];
  prompts: readonly string[];
}

/** What a resumed file must be: its own lines and nothing else, so a mix-up costs a new --out, not mixed answers. */
const NOT_OURS = "refusing to append to it: use a new --out, or delete the file to start again";

/**
 * Reads what a previous run wrote: the query_ids answered, and whether rows
 * carrying an `error` are to be tried again. A last line cut off mid-write (no
 * newline yet, and beginning as this run's rows begin) is removed; any other
 * line that is not one of this run's own rows (see {@link foreignField}) stops
 * the run, the file left as it was.
 */
async function resumeFile(path: string, own: OwnAnswers): Promise<{ done: Set<string>; keep: string[] | undefined }> {
  const done = new Set<string>();
  let bytes: Buffer;
  try {
    bytes = await readInput(path);
  } catch (err) {
    if (err instanceof FileError && err.problem === "missing") return { done, keep: undefined };
    throw err;
  }
  const index = new Map(own.rows.map((r, i) => [r.query_id, i]));
  const firstLine = new Map<string, number>();
  const kept: string[] = [];
  let failedRows = 0;
  let start = 0;
  let lineNo = 0;
  for (let end = bytes.indexOf(10); end >= 0; start = end + 1, end = bytes.indexOf(10, start)) {
    lineNo++;
    const line = bytes.toString("utf8", start, end);
    let row: Record<string, unknown> | undefined;
    try {
      row = JSON.parse(line);
    } catch {
      row = undefined;
    }
    if (!row || typeof row !== "object" || Array.isArray(row) || typeof row.query_id !== "string") {
      throw new GenerationsFileError(
        path,
        lineNo,
        `is not a generations row (a JSON object with a query_id); ${NOT_OURS}`,
      );
    }
    const id = row.query_id;
    const i = index.get(id);
    const problem =
      i === undefined
        ? `field "query_id": ${JSON.stringify(id)} is not in the bank ${own.bank}`
        : firstLine.has(id)
          ? `field "query_id": ${JSON.stringify(id)} is there twice (lines ${firstLine.get(id)} and ${lineNo})`
          : foreignField(row, i, own);
    if (problem) throw new GenerationsFileError(path, lineNo, `${problem}; ${NOT_OURS}`);
    firstLine.set(id, lineNo);
    if (row.error !== undefined) failedRows++;
    else {
      done.add(id);
      kept.push(line);
    }
  }
  // What follows the last newline is a line torn by a crash, if it begins as this run's rows begin; anything
  // else there (a file without a newline: a JSON document, a binary file, a one-line bank) is not ours to cut.
  if (start < bytes.length) {
    if (!tornOwnLine(bytes.subarray(start), own)) {
      throw new GenerationsFileError(
        path,
        lineNo + 1,
        `is not a generations row of this run, nor a line of one cut off by a crash; ${NOT_OURS}`,
      );
    }
    try {
      await truncate(path, start);
    } catch (err) {
      throw fileError(err, path, "write");
    }
  }
  return { done, keep: failedRows > 0 ? kept : undefined };
}

/** The fields every row of a generations file begins with, in the order they are written. */
function rowStart(r: BankRow, model: string, modelSha256: string) {
  return {
    query_id: r.query_id,
    fact_id: r.fact_id,
    condition_family: r.condition_family,
    model,
    model_sha256: modelSha256,
  };
}

/** One generations row as hsm writes it: the query's fields, the model, the prompt, then `fields`. */
function rowLine(
  r: BankRow,
  who: { model: string; modelSha256: string; modelSource: string | undefined },
  prompt: string,
  fields: Record<string, unknown>,
  bank: string,
): string {
  const line = JSON.stringify({
    ...rowStart(r, who.model, who.modelSha256),
    ...(who.modelSource ? { model_source: who.modelSource } : {}),
    prompt,
    ...fields,
  });
  // A line no reader takes (hsm score, a resumed run) is never written: the query's text made it that long.
  const bytes = Buffer.byteLength(line, "utf8");
  if (bytes > JSONL_LINE_MAX_BYTES) {
    throw new BankError(
      bank,
      r.line,
      "query",
      `makes the generation row of "${r.query_id}" ${bytes} bytes (it holds the prompt), over the ` +
        `${JSONL_LINE_MAX_BYTES} bytes (1 MiB) a JSONL line may hold; shorten the query`,
    );
  }
  return line;
}

/**
 * Whether `tail`, the bytes after the last newline, is what a crash leaves of one of this run's rows: the start of
 * a row for some bank query as {@link batchWriter} writes it, up to its `model_sha256` at least where it is that long.
 */
function tornOwnLine(tail: Buffer, own: OwnAnswers): boolean {
  return own.rows.some((r) => {
    const head = JSON.stringify(rowStart(r, own.model, own.modelSha256));
    // The row goes on past model_sha256 (",\"prompt\"…"), so its closing brace is not part of the fixed start.
    const fixed = Buffer.from(head.slice(0, -1));
    return tail.length <= fixed.length
      ? fixed.subarray(0, tail.length).equals(tail)
      : tail.subarray(0, fixed.length).equals(fixed);
  });
}

/**
 * Why `row`, written for bank row `i`, is not a row this run would write — another `--model` name, another model
 * file, another prompt (the bank's text or family changed), an answer another `--max-new-tokens` gives — or
 * undefined when it is. Greedy answers are prefixes of each other: a row that stopped on an EOS within the limit,
 * or ran to exactly the limit, is what this run writes.
 */
function foreignField(row: Record<string, unknown>, i: number, own: OwnAnswers): string | undefined {
  const bankRow = own.rows[i]!;
  const expected: [string, unknown, string][] = [
    ["model", own.model, "this run writes"],
    ["model_sha256", own.modelSha256, `this run's model file ${own.onnxPath} has`],
    ["prompt", own.prompts[i], "the bank and the template now give"],
    ["fact_id", bankRow.fact_id, "the bank now says"],
    ["condition_family", bankRow.condition_family, "the bank now says"],
  ];
  for (const [field, want, whose] of expected) {
    const got = row[field];
    if (got === undefined) {
      return field === "model_sha256"
        ? `field "model_sha256" is missing: written by another tool or an older hsm, ` +
            "so the model that answered is unknown"
        : `field "${field}" is missing: not an answer of hsm generate`;
    }
    if (got !== want) return `field "${field}": ${JSON.stringify(got)} but ${whose} ${JSON.stringify(want)}`;
  }
  if (row.error !== undefined) return undefined;
  const n = row.generated_tokens;
  const reason = row.finish_reason;
  if (typeof row.raw_response !== "string") return `field "raw_response" is missing: not an answer of hsm generate`;
  if (!(typeof n === "number" && Number.isSafeInteger(n) && n >= 1))
    return `field "generated_tokens": expected a positive integer but found ${JSON.stringify(n) ?? "nothing"}`;
  if (reason !== "stop" && reason !== "length")
    return `field "finish_reason": expected "stop" or "length" but found ${JSON.stringify(reason) ?? "nothing"}`;
  if (reason === "length" ? n !== own.maxNewTokens : n > own.maxNewTokens) {
    const limit = own.maxNewTokens;
    return (
      `field "generated_tokens": ${n} (finish_reason "${reason}") ` +
      `but this run generates at most ${limit} tokens (--max-new-tokens ${limit})`
    );
  }
  return undefined;
}

/** Replaces `path` with `lines`, atomically. */
async function rewriteLines(path: string, lines: string[]): Promise<void> {
  await writeFileAtomic(path, lines.map((l) => `${l}\n`).join(""));
}

export async function generate(o: GenerateOptions): Promise<GenerateResult> {
  const t0 = performance.now();
  const log = o.log ?? (() => {});
  const maxNew = o.maxNewTokens ?? MAX_NEW_TOKENS;
  const batchSize = o.batchSize ?? DEFAULT_BATCH_SIZE;
  checkCounts(batchSize, maxNew, o.selfCheck);
  const modelName = o.model ?? defaultModelName(o.modelDir);
  // Refused before the model is read: the score and the exports would refuse it later, far from its cause.
  checkName(modelName);
  await refuseInputAsOutput({ name: "--out", path: o.out }, [{ name: "--bank", path: o.bank }]);
  const job = await prepareJob(o, batchSize, maxNew);
  // Every row is checked with an empty answer before anything runs; the answer's own length is checked as it is written.
  const who = { model: modelName, modelSha256: job.modelSha256, modelSource: job.md.source };
  const noAnswer = { raw_response: "", generated_tokens: maxNew, finish_reason: "length" };
  job.rows.forEach((r, i) => rowLine(r, who, job.prompts[i]!, noAnswer, o.bank));
  // A device that cannot run fails before the output's folder is made; where the file is there already, it may
  // answer every query, which needs no device (below).
  let unusable: DeviceError | undefined;
  try {
    checkDevice(o.device ?? "cpu", graphNeeds(job.md.onnxPath, job.model));
  } catch (err) {
    if (!(err instanceof DeviceError) || !(await stat(o.out).catch(() => undefined))?.isFile()) throw err;
    unusable = err;
  }
  await makeDir(dirname(o.out));
  // One writer per generations file; what it holds is checked before the model is loaded. On read-only media
  // there is no lock to take and nobody to write: a finished file is read as it is, anything else cannot be done.
  const lock = await lockUnlessReadOnly(dirname(o.out), `.${basename(o.out)}.lock`);
  try {
    const { done, keep } = await resumeFile(o.out, {
      model: modelName,
      modelSha256: job.modelSha256,
      onnxPath: job.md.onnxPath,
      maxNewTokens: maxNew,
      bank: o.bank,
      rows: job.rows,
      prompts: job.prompts,
    });
    // Every query answered: nothing to decode or write, so the file is read as it is, no model loaded.
    if (!keep && done.size === job.rows.length) {
      o.onProgress?.(done.size, job.rows.length);
      return { written: 0, skipped: done.size, failed: 0, seconds: (performance.now() - t0) / 1000 };
    }
    if (lock.readOnly) throw fileError(lock.readOnly.cause, o.out, "write");
    if (unusable) throw unusable;
    if (keep) await rewriteLines(o.out, keep);
    return await decodeJob(o, job, { modelName, done, batchSize, log, t0 });
  } finally {
    await lock.release();
  }
}

/** Opens the decoders for `job` and generates every row not in `done`. */
async function decodeJob(
  o: GenerateOptions,
  job: GenerationJob,
  run: { modelName: string; done: Set<string>; batchSize: number; log: Log; t0: number },
): Promise<GenerateResult> {
  const { log } = run;
  const place = placeSessions(o, weightBytes(job.md.onnxPath, job.model.graph!), job.batches.length, "decoding", log);
  // On the CPU the LM head runs outside onnxruntime where the native core can compute it (lm-head.ts).
  const kernels = place.device === "cpu" ? headKernels() : undefined;
  const opened = await openDecoders({ ...place, job, kernels });
  const { decoders } = opened;
  if (opened.widened !== undefined) log(opened.widened, "info");
  logDecoders(opened.head, decoders.parallel, place.sessionOptions.threads, log);
  let useCache = opened.cached;
  if (!opened.cached) log("the model has no KV cache, and hsm finds none it can add: recomputing every step", "info");
  try {
    if (opened.added) {
      const logitsOf = exportedLogits(job.md.onnxPath, place.sessionOptions, job.setup);
      const differs = await cacheDeparture(decoders, job.tokens, job.rule, logitsOf);
      useCache = differs === undefined;
      log(
        differs === undefined
          ? "the model has no KV cache: decoding with one added to the graph"
          : `the model has no KV cache, and one added to the graph changes its tokens (${differs}): recomputing every step`,
        "info",
      );
    }
    return await generateRows(
      o,
      {
        rows: job.rows,
        prompts: job.prompts,
        tokens: job.tokens,
        batches: job.batches,
        eos: job.eos,
        modelName: run.modelName,
        modelSha256: job.modelSha256,
        modelSource: job.md.source,
        onnxPath: job.md.onnxPath,
        decoders,
        useCache,
        log,
        batchSize: run.batchSize,
        rule: job.rule,
        t0: run.t0,
        detokenize: (ids) => job.tokenizer.decode(ids),
        beyondContext: contextReason(job.md.config, job.setup.maxNewTokens),
      },
      run.done,
    );
  } catch (err) {
    // onnxruntime refusing the graph's own nodes (probing the cache, checking the answers) is the model's problem.
    throw runError(place.device, job.md.onnxPath, err) ?? err;
  } finally {
    await decoders.close().catch(() => {});
  }
}

/** What generation knows before it opens a session: the rows and their tokens, the graph and how to feed it. */
interface GenerationJob {
  md: ModelDir;
  /** sha256 of the graph file, written on every row. */
  modelSha256: string;
  rows: BankRow[];
  prompts: string[];
  tokens: number[][];
  tokenizer: PromptTokenizer;
  eos: Set<number>;
  model: ModelProto;
  /** The bytes `model` was decoded from; the only reference to them, so that dropping it frees them. */
  source: { bytes?: Buffer };
  /** The graph's inputs by name, as exported. */
  inputs: Map<string, ValueInfoProto>;
  batches: number[][];
  /** How rows share batches. */
  rule: BatchRule;
  setup: DecodeSetup;
  /** Attention shape for an added cache; undefined where a cache cannot be added. */
  shape: AttentionShape | undefined;
  opset: number;
  canAdd: boolean;
}

/** Reads the bank and the model folder, tokenizes, and plans the feeds and batches. */
async function prepareJob(o: GenerateOptions, batchSize: number, maxNew: number): Promise<GenerationJob> {
  const rows = await readBank(o.bank);
  const md = await openModelDir(o.modelDir, o.modelFile);
  // Hashed in another thread while this one tokenizes.
  const hashing = fileSha256(md.onnxPath);
  hashing.catch(() => {});
  const { tokenizer, source } = await tokenizerAndModel(md, readWhole);
  const eos = await readEosIds(md.dir, md.config, tokenizer.eosIds);
  const prompts = rows.map((r) => buildPrompt(r));
  const tokens = prompts.map((p) => tokenizer.encode(p));
  const model = decodeModelOf(md, source);
  const plan = planInputs(model.graph!, md.config.numLayers);
  if (plan.unknown.length > 0)
    throw new DetectionError(`the model has an input "${plan.unknown[0]}" that hsm does not know how to feed`);
  const inputs = new Map(model.graph!.input!.map((v) => [v.name!, v]));
  const right = plan.paddingSide === "right";
  if (right && !inputs.has("attention_mask"))
    throw new DetectionError(`${md.onnxPath}: a right-padded graph needs an attention_mask input`);
  // Activations quantized per tensor make a row's tokens depend on its batch: such graphs decode one row at a time.
  const batchDependent = graphFormat(model.graph!).batchDependent;
  // A graph whose inputs fix the batch decodes batches of at most that many rows, filled out to it.
  const fixedBatch = declaredBatch(md.onnxPath, model.graph!, plan.feeds);
  const branch = plan.feeds.find((f) => f.kind === "use_cache_branch")?.name;
  const setup: DecodeSetup = {
    padId: tokenizer.padId,
    eos: [...eos],
    maxNewTokens: maxNew,
    past: [],
    positions: inputs.has("position_ids"),
    right,
    branch,
    int32: plan.feeds.filter((f) => f.int32).map((f) => f.name),
    ...(fixedBatch !== undefined ? { fixedBatch } : {}),
  };
  // A cache changes what a step quantizes per tensor (one token instead of the whole sequence), so those graphs keep recomputing.
  const shape = attentionShape(md.config.raw);
  // A graph that counts positions itself counts them from the cache's length, and one without a mask cannot hide
  // padding from its attention: their rows are never padded.
  const rule: BatchRule = {
    size: batchDependent ? 1 : Math.min(batchSize, fixedBatch ?? batchSize),
    breaks: lengthBreaks(md.config.raw),
    sameLength: !right && (!setup.positions || !inputs.has("attention_mask")),
  };
  return {
    md,
    modelSha256: await hashing,
    rows,
    prompts,
    tokens,
    tokenizer,
    eos,
    model,
    source: { bytes: source },
    inputs,
    batches: planAll(tokens, rule),
    rule,
    setup,
    shape,
    opset: defaultOpset(model),
    canAdd: !batchDependent && !right && !branch && shape !== undefined,
  };
}

/** Where and how the decoders run. */
type DecoderPlace = SessionPlace & { job: GenerationJob; kernels: HeadKernels | undefined };

interface OpenedDecoders {
  decoders: Decoders;
  /** The graph decodes with a KV cache (its own or an added one). */
  cached: boolean;
  /** A KV cache was added to the graph (and is to be probed before use). */
  added: boolean;
  head: HeadSetup | undefined;
  /** The line telling the user that the float16 graph runs widened to float32 (see forDevice), or undefined. */
  widened: string | undefined;
}

/**
 * Opens the decoders on the graph, with a KV cache added where one can be;
 * an added cache onnxruntime refuses (its tensors typed unlike the graph's
 * keys) leaves the graph as exported.
 */
async function openDecoders(place: DecoderPlace): Promise<OpenedDecoders> {
  const { job } = place;
  const added = job.canAdd && addKvCache(job.model.graph!, job.opset, job.md.config.numLayers, job.shape!);
  try {
    return await openGraph(place, job.model, added);
  } catch (err) {
    if (!added || !(err instanceof ModelLoadError)) throw err;
    job.source.bytes = await readWhole(job.md.onnxPath);
    return await openGraph(place, decodeModelOf(job.md, job.source.bytes), false);
  }
}

/** Rewrites `m` (a KV cache already added where `added`) for generation, the LM head inside it, and loads it in sessions or workers. */
async function openGraph(place: DecoderPlace, m: ModelProto, added: boolean): Promise<OpenedDecoders> {
  const { job, device, workers, sessionOptions } = place;
  const { md } = job;
  const widened = forDevice(device, md.onnxPath, m);
  const { cached, headSetup } = await rewriteWithHead(
    m,
    job.setup.right ? "attention_mask" : undefined,
    place.kernels,
    md.onnxPath,
    sessionOptions.threads ?? computeCores(),
  );
  const stage = await stageModel(md.onnxPath, m.graph!);
  // Weights stay where they are, read by offset from the original file (see extraction).
  // `job.source` holds the bytes `m` was decoded from: every call below decodes it first.
  if (stage) rewriteWeightsInPlace(m, job.source.bytes!, stage.sourceName);
  const past = pastInputs((added ? m.graph!.input! : [...job.inputs.values()]).filter((v) => isPastInput(v.name!))).map(
    (p) => (widened === undefined ? p : { ...p, float16: false }),
  );
  // On the CPU the embedding's rows are read from the file as steps need them (embedding.ts).
  const embedding =
    stage && device === "cpu"
      ? takeEmbeddingOut(m.graph!, dirname(md.onnxPath), { name: stage.sourceName, path: md.onnxPath })
      : undefined;
  if (embedding) pruneGraph(m.graph!);
  const readsIds = m.graph!.input!.some((v) => v.name === "input_ids");
  // On the CPU the cache is joined outside the graph, without a whole copy of it made each step (cache-join.ts).
  const joins = device === "cpu" && cached && past.length > 0 ? outputNewPositions(m.graph!) : undefined;
  const setup = {
    ...job.setup,
    past,
    head: headSetup,
    ...(joins ? { joins } : {}),
    ...(embedding ? { embedding: { ...embedding, readsIds } } : {}),
  };
  // On WebGPU the cache each step writes stays in the device's memory for the next step to read.
  const presents = m.graph!.output!.map((v) => v.name!).filter(isPresentOutput);
  const options = { ...sessionOptions, deviceOutputs: presents };
  const bytes = encodeModel(m);
  // The file's bytes (which the decoded graph's small initializers still view) are not needed again
  // unless the session fails to load; onnxruntime is about to map the weights.
  m.graph = null;
  job.source.bytes = undefined;
  if (stage) collectGarbage();
  const script = decodingWorkerScript();
  const decoders = await withStagedModel(md.onnxPath, bytes, stage, device, async (file) => {
    if (typeof file !== "string" || !script || workers === 1)
      return sessionDecoders(await loadSession(file, { ...place.aloneOptions, deviceOutputs: presents }), setup);
    return workerDecoders(script, workers, { model: file, options, setup });
  });
  return { decoders, cached: cached && past.length > 0, added, head: headSetup, widened };
}

type Log = NonNullable<GenerateOptions["log"]>;

/** Throws a UsageError for a batch size or token count that is not positive, or a self-check size below 0. */
function checkCounts(batchSize: number, maxNew: number, selfCheck: number | undefined): void {
  if (!Number.isSafeInteger(batchSize) || batchSize < 1)
    throw new UsageError(`Expected a positive --batch-size but received ${batchSize}`);
  if (!Number.isSafeInteger(maxNew) || maxNew < 1)
    throw new UsageError(`Expected a positive number of new tokens but received ${maxNew}`);
  if (selfCheck !== undefined && !(Number.isSafeInteger(selfCheck) && selfCheck >= 0)) {
    throw new UsageError(`Expected --self-check to be 0 or a positive number of rows but received ${selfCheck}`);
  }
}

/** Tells the user where the LM head runs and how many batches decode at once. */
function logDecoders(
  head: { d: number; vocab: number } | undefined,
  parallel: number,
  threads: number | undefined,
  log: Log,
): void {
  if (head) {
    const how = "exact argmax of float64 logits, screened in bfloat16";
    log(`the LM head (${head.d} × ${head.vocab}) runs in the native core: ${how}`, "info");
  }
  const line = parallelLine("decoding", parallel, threads);
  if (line) log(line, "info");
}

interface Generation {
  rows: BankRow[];
  prompts: string[];
  tokens: number[][];
  batches: number[][];
  eos: ReadonlySet<number>;
  modelName: string;
  modelSha256: string;
  /** `hf:ORG/NAME@COMMIT` for a model named by hub id. */
  modelSource?: string;
  /** The graph file, named where it fails on every query tried. */
  onnxPath: string;
  decoders: Decoders;
  useCache: boolean;
  log: (message: string, level: "info" | "warn") => void;
  batchSize: number;
  rule: BatchRule;
  t0: number;
  detokenize: (ids: number[]) => string;
  /** Why a prompt of this many tokens cannot be answered within the model's positions; undefined where it can. */
  beyondContext: (promptTokens: number) => string | undefined;
}

/**
 * Says when a prompt and its new tokens need more positions than the model's configuration gives it: the reason a
 * query fails inside onnxruntime (a learned position table or a rotary cache without the row) that no rerun cures.
 * The last new token is never fed back, so `n` prompt tokens and `maxNew` new ones take `n + maxNew − 1` positions.
 */
function contextReason(config: ModelConfig, maxNew: number): (promptTokens: number) => string | undefined {
  const limit = positionLimit(config.raw);
  return (n) =>
    limit !== undefined && n + maxNew - 1 > limit.positions
      ? `the prompt's ${n} tokens and up to ${maxNew} new ones need ${n + maxNew - 1} positions, beyond the ` +
        `model's ${limit.positions} (${limit.key} in ${config.path})`
      : undefined;
}

/** What one decoded batch brings per row: its tokens, its error, or nothing for a row written already. */
type BatchResults = (number[] | Error | undefined)[];

/**
 * Appends decoded batches to the open generations file `fh`, answers first,
 * holding failures back until some query succeeds (a model that cannot run at
 * all writes no error rows, and stops after FAILURES_BEFORE_STOP).
 */
function batchWriter(o: GenerateOptions, g: Generation, done: Set<string>, fh: FileHandle) {
  const { rows, prompts, eos, modelName } = g;
  let written = 0;
  let failed = 0;
  const texts = new Map<number, string>();
  let pending: { i: number; err: unknown }[] = [];
  const answered = () => done.size + written;
  const who = { model: modelName, modelSha256: g.modelSha256, modelSource: g.modelSource };
  const row = (i: number, fields: Record<string, unknown>) => rowLine(rows[i]!, who, prompts[i]!, fields, o.bank);
  // onnxruntime's message, after the reason where the query needs more positions than the model has.
  const reason = (i: number, err: unknown) => {
    const message = (err as Error).message?.split("\n")[0] ?? String(err);
    const beyond = g.beyondContext(g.tokens[i]!.length);
    return beyond === undefined ? message : `${beyond}: ${message}`;
  };
  const failure = (i: number, err: unknown) => row(i, { error: reason(i, err) });
  const write = async (batch: number[], results: BatchResults) => {
    const answers: string[] = [];
    const failures: { i: number; err: unknown }[] = [];
    batch.forEach((i, b) => {
      const res = results[b];
      if (res === undefined) return;
      if (res instanceof Error) failures.push({ i, err: res });
      else {
        let fields: ReturnType<typeof answerFields>;
        try {
          fields = answerFields(res, eos, g.detokenize);
        } catch (err) {
          failures.push({ i, err });
          return;
        }
        // A row too long to write stops the run (rowLine): an error row would not cure it.
        answers.push(row(i, { ...fields }));
        texts.set(i, fields.raw_response);
      }
    });
    let errors: string[] = [];
    if (answers.length > 0 || answered() > 0) {
      errors = [...pending, ...failures].map((f) => failure(f.i, f.err));
      pending = [];
    } else {
      pending.push(...failures);
      if (pending.length >= Math.min(FAILURES_BEFORE_STOP, rows.length - done.size)) {
        const first = pending[0]!;
        throw new GenerationError(
          g.onnxPath,
          pending.map((f) => rows[f.i]!.query_id),
          new Error(reason(first.i, first.err), { cause: first.err }),
        );
      }
    }
    if (answers.length + errors.length === 0) return;
    await appendBatch(fh, o.out, [...answers, ...errors].map((l) => `${l}\n`).join(""));
    written += answers.length;
    failed += errors.length;
    o.onProgress?.(answered() + failed, rows.length);
  };
  return { write, texts, counts: () => ({ written, failed }) };
}

/**
 * Appends one batch's lines to the generations file and fsyncs them. A write that fails (a full disk, a quota)
 * takes back what it wrote, so the file ends on a whole line, and names the file. A short write (the disk filling
 * midway) goes on with the rest, which then fails or lands.
 */
async function appendBatch(fh: FileHandle, path: string, text: string): Promise<void> {
  const bytes = Buffer.from(text, "utf8");
  let size: number | undefined;
  try {
    size = (await fh.stat()).size;
    for (let at = 0; at < bytes.length;) at += (await fh.write(bytes, at, bytes.length - at)).bytesWritten;
    await fh.sync();
  } catch (err) {
    if (size !== undefined) await fh.truncate(size).catch(() => {});
    throw fileError(err, path, "write");
  }
}

/**
 * Decodes the batches with a row not in `done`, in plan order, and hands each
 * to `write`: up to `parallel` batches are decoding while the oldest is written.
 */
async function decodeInOrder(
  g: Generation,
  done: Set<string>,
  decode: (batch: number[][]) => Promise<number[][]>,
  write: (batch: number[], results: BatchResults) => Promise<void>,
): Promise<void> {
  const { rows, tokens, decoders } = g;
  // None of these promises rejects.
  const inFlight: { batch: number[]; results: Promise<BatchResults> }[] = [];
  // Batches are written in order, so a worker that finishes before the oldest batch would wait for it. With
  // several workers, a sort window's batches (and one more per worker) wait in their queue, and a free worker
  // takes the longest: the window's longest batch, planned last, then does not end the run on one worker alone.
  const depth = decoders.parallel > 1 ? Math.ceil(SORT_WINDOW / g.batchSize) + decoders.parallel : 1;
  for (const batch of g.batches) {
    const wanted = batch.map((i) => !done.has(rows[i]!.query_id));
    if (!wanted.includes(true)) continue;
    // The whole batch runs even when some of its rows are written already: the rest then comes out as it would have.
    inFlight.push({
      batch,
      results: decodeOrIsolate(
        decode,
        batch.map((i) => tokens[i]!),
        wanted,
      ),
    });
    if (inFlight.length < depth) continue;
    const oldest = inFlight.shift()!;
    await write(oldest.batch, await oldest.results);
  }
  for (const { batch, results } of inFlight.splice(0)) await write(batch, await results);
}

/**
 * Decodes every batch not written yet and appends it, in the order of the
 * plan, however many batches are decoded at once.
 */
async function generateRows(o: GenerateOptions, g: Generation, done: Set<string>): Promise<GenerateResult> {
  const { rows, tokens, eos, decoders, log } = g;
  const decode = (batch: number[][]) => decoders.decode(batch, g.useCache);
  const existed = await stat(o.out).then(
    () => true,
    () => false,
  );
  const fh = await openOutput(o.out, "append");
  const writer = batchWriter(o, g, done, fh);
  o.onProgress?.(done.size, rows.length);
  try {
    await decodeInOrder(g, done, decode, writer.write);
  } catch (err) {
    // A run that stops before its first line leaves no empty file of its own behind.
    const { written, failed } = writer.counts();
    if (!existed && written + failed === 0) await unlink(o.out).catch(() => {});
    throw err;
  } finally {
    await fh.close();
  }
  const { written, failed } = writer.counts();
  const texts = writer.texts;
  const alone = async (p: number[]) => answerFields((await decode([p]))[0]!, eos, g.detokenize).raw_response;
  const check = await checkGenerations({
    generateAlone: alone,
    tokens,
    queryIds: rows.map((r) => r.query_id),
    written: texts,
    batchSize: g.batchSize,
    rule: g.rule,
    window: SORT_WINDOW,
    count: o.selfCheck ?? DEFAULT_GENERATE_CHECK_ROWS,
    parallel: decoders.parallel,
    out: o.out,
  });
  const warning = check && generationCheckWarning(check, o.out);
  if (warning) log(warning, "warn");
  if (failed > 0) {
    log(
      `warning: ${failed} queries could not be generated; their rows carry an "error" field and are tried again when hsm generate runs again`,
      "warn",
    );
  }
  return { written, skipped: done.size, failed, seconds: (performance.now() - g.t0) / 1000 };
}

/** Every batch of the run, in order: windows of bank order, each sorted by length. */
function planAll(tokens: number[][], rule: BatchRule): number[][] {
  const plan: number[][] = [];
  for (let c = 0; c < tokens.length; c += SORT_WINDOW) {
    const lengths = tokens.slice(c, c + SORT_WINDOW).map((t) => t.length);
    for (const batch of planBatches(lengths, rule)) plan.push(batch.map((i) => c + i));
  }
  return plan;
}

/**
 * Runs a batch; when it fails, runs each wanted row alone so that one bad row
 * costs only itself. Per row: the generated ids, the error it failed with, or
 * undefined for rows not wanted.
 */
async function decodeOrIsolate(
  decode: (batch: number[][]) => Promise<number[][]>,
  prompts: number[][],
  wanted: boolean[],
): Promise<(number[] | Error | undefined)[]> {
  try {
    const ids = await decode(prompts);
    return ids.map((r, b) => (wanted[b] ? r : undefined));
  } catch (err) {
    if (prompts.length === 1) return [err instanceof Error ? err : new Error(String(err))];
    const out: (number[] | Error | undefined)[] = [];
    for (const [b, p] of prompts.entries()) {
      if (!wanted[b]) {
        out.push(undefined);
        continue;
      }
      try {
        out.push((await decode([p]))[0]!);
      } catch (e) {
        out.push(e instanceof Error ? e : new Error(String(e)));
      }
    }
    return out;
  }
}
