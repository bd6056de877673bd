/**
 * Greedy decoding of one batch on a session rewritten by
 * `rewriteForGeneration` (generate.ts): the step loop, with or without the
 * KV cache. Everything it needs besides the session is plain data
 * ({@link DecodeSetup}), so that worker threads (worker.ts) run the
 * same loop as the main thread.
 */
import * as ort from "onnxruntime-node";

import { headKernels } from "../kernels/default.js";
import { InternalError } from "../errors.js";
import { leftPad, rightPad } from "../model/batching.js";
import { GreedyRows } from "./rules.js";
import { emptyPast, intTensor } from "../model/feeds.js";
import { isPresentOutput, pastFor } from "../onnx/kv-cache.js";
import type { HeadSetup } from "./lm-head.js";
import { DataType, valueShape, type ValueInfoProto } from "../onnx/graph.js";
import { breakBatchingForTest } from "../model/self-check.js";
import { EmbeddingRows, INPUTS_EMBEDS, type EmbeddingSource } from "./embedding.js";
import { JoinedCache, type CacheJoin } from "./cache-join.js";

/** The output of a rewritten graph: each row's next token. */
export const NEXT_TOKEN = "hsm_next_token";
/** The output of a graph whose LM head runs outside it: each row's last hidden state, `[B, 1, d]`. */
export const LAST_HIDDEN = "hsm_last_hidden";

/** A KV-cache input: its name, its declared shape (names of unnamed lengths kept), and whether it is float16. */
export interface PastInput {
  name: string;
  dims: (number | string)[];
  float16: boolean;
}

/** What a decoding loop needs to know about the model and its tokenizer. */
export interface DecodeSetup {
  padId: number;
  eos: number[];
  maxNewTokens: number;
  past: PastInput[];
  /** Whether the graph reads `position_ids`. */
  positions: boolean;
  /** Right padding (GroupQueryAttention graphs) instead of left. */
  right: boolean;
  /** A merged decoder's branch input: false on the first step (no cache yet), true after. */
  branch?: string;
  /** The LM head outside the graph (the graph outputs {@link LAST_HIDDEN}); undefined: the graph picks the tokens ({@link NEXT_TOKEN}). */
  head?: HeadSetup;
  /**
   * The token embedding outside the graph (the graph reads its rows as {@link INPUTS_EMBEDS}, and `input_ids` only
   * where `readsIds`); undefined: the graph reads `input_ids` alone.
   */
  embedding?: EmbeddingSource & { readsIds: boolean };
  /** The cache joined outside the graph, from the new positions each step outputs (cache-join.ts); undefined: the graph outputs the whole cache. */
  joins?: CacheJoin[];
  /** The inputs among `input_ids`, `attention_mask` and `position_ids` that the graph declares int32 (the others int64). */
  int32: string[];
  /** The batch the graph's inputs fix (see declaredBatch): a smaller batch decodes filled out to it. */
  fixedBatch?: number;
}

/**
 * The tokens (rows × padded length) a batch's first step runs at once where the cache is joined outside the graph;
 * a longer prompt runs in chunks of rows. The step's intermediate tensors grow with its tokens (its attention
 * scores with their square), and onnxruntime's arena keeps its largest size for the rest of the run. Each row's
 * values are the same in any chunk.
 */
export const PROMPT_STEP_TOKENS = 1024;

/** Each session's joined caches not in use, their buffers kept from one batch to the next. */
const joinedCaches = new WeakMap<ort.InferenceSession, JoinedCache[]>();

/** The next step's past inputs: the step's `present.*` outputs, each under its past input's name. */
function presentsAsPast(result: ort.InferenceSession.ReturnType, pastNames: ReadonlySet<string>) {
  const past: Record<string, ort.Tensor> = {};
  for (const [name, tensor] of Object.entries(result)) {
    const input = pastFor(name, pastNames);
    if (input) past[input] = tensor;
  }
  return past;
}

/** The past inputs of a graph as {@link DecodeSetup} describes them. */
export function pastInputs(values: readonly ValueInfoProto[]): PastInput[] {
  return values.map((v) => ({
    name: v.name!,
    dims: valueShape(v) ?? [],
    float16: v.type?.tensorType?.elemType === DataType.FLOAT16,
  }));
}

/**
 * Greedy decoding of one batch: per row, the generated ids (the EOS that
 * stopped it included). `cached`: whether steps after the first read the
 * cache (else every step recomputes the whole sequence, with empty past
 * inputs); `newTokens` overrides the setup's maximum.
 */
export async function decodeBatch(
  session: ort.InferenceSession,
  setup: DecodeSetup,
  prompts: number[][],
  cached: boolean,
  newTokens = setup.maxNewTokens,
): Promise<number[][]> {
  const fill = setup.fixedBatch === undefined ? 0 : setup.fixedBatch - prompts.length;
  // The rows filling out a fixed batch copy the last prompt; their tokens are dropped. (Extraction fills its
  // padded batches instead, with fillBatch: every step here pads again, so the copies must be prompts.)
  if (fill > 0) {
    const filled = [...prompts, ...Array.from({ length: fill }, () => prompts.at(-1)!)];
    return (await decodeBatch(session, setup, filled, cached, newTokens)).slice(0, prompts.length);
  }
  const B = prompts.length;
  const int32 = new Set(setup.int32);
  const ints = (name: string, values: BigInt64Array, dims: number[]) => intTensor(values, dims, int32.has(name));
  const nextTokens = tokenPicker(setup, B);
  const pad = setup.right ? rightPad : leftPad;
  const greedy = new GreedyRows(B, new Set(setup.eos), newTokens);
  const pastNames = new Set(setup.past.map((p) => p.name));
  // Step 0 reads the whole padded prompt; later steps one token each (or, without a cache, everything again).
  // With the cache, each row's mask grows by one: GroupQueryAttention graphs read only its sum (a row's length).
  let seqs = prompts.map((p) => [...p]);
  let f = breakBatchingForTest(pad(seqs, setup.padId));
  let mask = f.attentionMask;
  let maskLen = f.length;
  let lastPos = prompts.map((p) => p.length - 1);
  let past: Record<string, ort.Tensor> = {};
  for (const p of setup.past) past[p.name] = emptyPast(p.dims, p.float16, B);
  let ids = f.inputIds;
  let idsLen = f.length;
  let positions = f.positionIds;
  // The KV cache may live in the device's memory (see SessionOptions.deviceOutputs): every cache tensor is let go
  // as soon as the step after it has read it, and whatever is left when the batch ends or fails.
  const cacheTensors = new Set<ort.Tensor>();
  const embedding = setup.embedding;
  const rows = embedding && (await EmbeddingRows.open(embedding));
  const spare = setup.joins && (joinedCaches.get(session) ?? []);
  if (spare) joinedCaches.set(session, spare);
  const joined = setup.joins && (spare!.pop() ?? new JoinedCache(setup.joins));
  try {
    while (!greedy.done()) {
      const feeds: Record<string, ort.Tensor> = {
        attention_mask: ints("attention_mask", mask, [B, maskLen]),
        ...past,
      };
      if (!embedding || embedding.readsIds) feeds.input_ids = ints("input_ids", ids, [B, idsLen]);
      if (rows) feeds[INPUTS_EMBEDS] = new ort.Tensor("float32", rows.rows(ids), [B, idsLen, embedding!.d]);
      if (setup.positions) feeds.position_ids = ints("position_ids", positions, [B, idsLen]);
      if (setup.branch)
        feeds[setup.branch] = new ort.Tensor("bool", Uint8Array.of(cached && maskLen > idsLen ? 1 : 0), [1]);
      // The first step of a long batch runs in chunks of rows where the cache is joined from their pieces.
      // (Not where the graph's inputs fix the batch, which every chunk would have to fill.)
      const chunks =
        joined && idsLen > 1 && setup.fixedBatch === undefined ? Math.ceil((B * idsLen) / PROMPT_STEP_TOKENS) : 1;
      const results =
        chunks > 1 ? await runInChunks(session, feeds, B, Math.ceil(B / chunks)) : [await session.run(feeds)];
      const result = results.length === 1 ? results[0]! : joinRows(results, new Set(setup.joins!.map((j) => j.output)));
      const read = [...cacheTensors];
      cacheTensors.clear();
      for (const [name, tensor] of Object.entries(result)) if (isPresentOutput(name)) cacheTensors.add(tensor);
      for (const t of read) t.dispose();
      const next = nextTokens(result);
      if (greedy.push(next)) break;
      // The next step's inputs: every row advances by its chosen token (finished rows too; their output is ignored).
      const chosen = Array.from(next, (v) => Number(v));
      lastPos = lastPos.map((p) => p + 1);
      if (cached) {
        past = joined ? joined.next(past, results, newTokens) : presentsAsPast(result, pastNames);
        ids = BigInt64Array.from(chosen, (t) => BigInt(t));
        idsLen = 1;
        const grown = new BigInt64Array(B * (maskLen + 1));
        for (let b = 0; b < B; b++) {
          grown.set(mask.subarray(b * maskLen, (b + 1) * maskLen), b * (maskLen + 1));
          grown[b * (maskLen + 1) + maskLen] = 1n;
        }
        mask = grown;
        maskLen++;
        positions = BigInt64Array.from(lastPos, (p) => BigInt(p));
      } else {
        seqs = seqs.map((s, b) => [...s, chosen[b]!]);
        f = breakBatchingForTest(pad(seqs, setup.padId));
        ids = f.inputIds;
        idsLen = f.length;
        mask = f.attentionMask;
        maskLen = f.length;
        positions = f.positionIds;
      }
    }
  } finally {
    for (const t of cacheTensors) t.dispose();
    if (joined) spare!.push(joined);
    await rows?.close();
  }
  return greedy.ids;
}

/**
 * One step run over rows [r, r + rows) at a time: each feed whose first dimension is the batch's `B` cut to those
 * rows, the others fed whole. The results in row order.
 */
async function runInChunks(
  session: ort.InferenceSession,
  feeds: Readonly<Record<string, ort.Tensor>>,
  B: number,
  rows: number,
): Promise<ort.InferenceSession.ReturnType[]> {
  const results: ort.InferenceSession.ReturnType[] = [];
  for (let r = 0; r < B; r += rows) {
    const n = Math.min(rows, B - r);
    const cut: Record<string, ort.Tensor> = {};
    for (const [name, t] of Object.entries(feeds)) {
      if (t.dims[0] !== B) {
        cut[name] = t;
        continue;
      }
      const data = t.data as Float32Array | Uint16Array | BigInt64Array | Uint8Array;
      const row = data.length / B;
      cut[name] = new ort.Tensor(t.type, data.subarray(r * row, (r + n) * row), [n, ...t.dims.slice(1)]);
    }
    results.push(await session.run(cut));
  }
  return results;
}

/** The outputs of a step run in chunks of rows, each joined on its rows, except those in `skip` (the cache's new positions, which the cache joins itself). */
function joinRows(
  results: readonly ort.InferenceSession.ReturnType[],
  skip: ReadonlySet<string>,
): ort.InferenceSession.ReturnType {
  const out: Record<string, ort.Tensor> = {};
  for (const name of Object.keys(results[0]!)) {
    if (skip.has(name)) continue;
    const pieces = results.map((r) => r[name]!);
    const data = pieces[0]!.data as Float32Array | Uint16Array | BigInt64Array | Int32Array;
    const joined = new (data.constructor as new (n: number) => typeof data)(
      pieces.reduce((n, t) => n + (t.data as ArrayLike<unknown>).length, 0),
    );
    let at = 0;
    for (const t of pieces) {
      (joined as Float32Array).set(t.data as Float32Array, at);
      at += (t.data as ArrayLike<unknown>).length;
    }
    out[name] = new ort.Tensor(pieces[0]!.type, joined, [
      pieces.reduce((n, t) => n + t.dims[0]!, 0),
      ...pieces[0]!.dims.slice(1),
    ]);
  }
  return out;
}

/** Each step's next tokens: from the graph, or the argmax of the head outside it. */
function tokenPicker(
  setup: DecodeSetup,
  B: number,
): (result: ort.InferenceSession.ReturnType) => ArrayLike<number | bigint> {
  const h = setup.head;
  if (!h) return (result) => result[NEXT_TOKEN]!.data as BigInt64Array;
  const kernels = headKernels();
  if (!kernels)
    throw new InternalError(
      "the LM head was taken out of the graph, but the native core that computes it is not loaded",
    );
  const out = new Int32Array(B);
  return (result) => {
    kernels.headArgmax(result[LAST_HIDDEN]!.data as Float32Array, B, h.d, h.head, h.vocab, out, h.threads);
    return out;
  };
}
