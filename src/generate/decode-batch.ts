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
import { emptyPast } from "../model/feeds.js";
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
}

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
  const B = prompts.length;
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
        attention_mask: new ort.Tensor("int64", mask, [B, maskLen]),
        ...past,
      };
      if (!embedding || embedding.readsIds) feeds.input_ids = new ort.Tensor("int64", ids, [B, idsLen]);
      if (rows) feeds[INPUTS_EMBEDS] = new ort.Tensor("float32", rows.rows(ids), [B, idsLen, embedding!.d]);
      if (setup.positions) feeds.position_ids = new ort.Tensor("int64", positions, [B, idsLen]);
      if (setup.branch)
        feeds[setup.branch] = new ort.Tensor("bool", Uint8Array.of(cached && maskLen > idsLen ? 1 : 0), [1]);
      const result = await session.run(feeds);
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
        past = joined ? joined.next(past, result, newTokens) : presentsAsPast(result, pastNames);
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
