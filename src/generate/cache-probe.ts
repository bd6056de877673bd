/**
 * The probe that decides whether a KV cache added to a graph is used: a few
 * prompts decoded with the cache and by recomputing the whole sequence. The
 * two run the same float32 arithmetic in another order, so they may part
 * where two tokens' logits are within rounding of each other; such a step is
 * a near tie (see {@link NEAR_TIE}), either token is the model's greedy
 * choice within float32, and a difference there says nothing against the
 * cache. A difference anywhere else refuses it.
 */
import type * as ort from "onnxruntime-node";

import { f16ToF32 } from "../kernels/typescript/float16.js";
import type { BatchRule } from "../model/batching.js";
import { intTensor } from "../model/feeds.js";
import { createSession, loadSession, ModelLoadError, stageModel, type SessionOptions } from "../model/session.js";
import { decodeModel, encodeModel, trimEmptyInputs } from "../onnx/graph.js";
import { rewriteWeightsInPlace } from "../onnx/rewrite.js";
import { readWhole } from "../util/fs.js";
import type { DecodeSetup } from "./decode-batch.js";
import type { Decoders } from "./workers.js";

/** New tokens an added KV cache must agree on with full recomputation before it is used. */
const CACHE_PROBE_TOKENS = 4;

/**
 * A step is a near tie where the token the cache chose has a recomputed logit within
 * `NEAR_TIE × max(1, |top logit|)` of the top one (docs/generate.md, "An added KV cache").
 */
const NEAR_TIE = 1e-4;

/** The float32 logits of a prompt's next token, computed by the graph as exported (no cache, no rewrite). */
export type LastLogits = (prompt: readonly number[]) => Promise<Float32Array>;

/**
 * Where a KV cache added to the graph departs from full recomputation: the
 * shortest prompt and one of another length (so that left padding is
 * exercised, where the rows are ever padded) are decoded both ways for a few
 * tokens. At a row's first differing token the recomputed logits of that
 * prefix are read (`logitsOf`): a near tie there ends that row's comparison,
 * anything else refuses the cache. Undefined where the cache is accepted;
 * else one line naming the difference (the probe row, its prompt's length,
 * the new token's index, both tokens and their logits' gap against the
 * margin) or the error the cache failed with.
 */
export async function cacheDeparture(
  decoders: Decoders,
  tokens: readonly number[][],
  rule: BatchRule,
  logitsOf: LastLogits,
): Promise<string | undefined> {
  const order = tokens.map((_, i) => i).sort((a, b) => tokens[a]!.length - tokens[b]!.length || a - b);
  if (order.length === 0) return "no prompt to try it on";
  const shortest = order[0]!;
  const other =
    order.slice(order.length >> 1).find((i) => tokens[i]!.length !== tokens[shortest]!.length) ?? order.at(-1)!;
  const probe = [...new Set([shortest, other])].map((i) => tokens[i]!);
  try {
    // Each prompt alone where batches hold one length, or fewer rows than the probe's (a graph fixing the batch at 1).
    for (const batch of rule.sameLength || rule.size < probe.length ? probe.map((p) => [p]) : [probe]) {
      const withCache = await decoders.decode(batch, true, CACHE_PROBE_TOKENS);
      const recomputed = await decoders.decode(batch, false, CACHE_PROBE_TOKENS);
      for (const [b, want] of recomputed.entries()) {
        const got = withCache[b]!;
        const step = want.findIndex((t, k) => got[k] !== t);
        if (step < 0 && got.length === want.length) continue;
        const k = step < 0 ? want.length : step;
        const where =
          `prompt of ${batch[b]!.length} tokens (row ${b} of a batch of ${batch.length}), new token ${k + 1}: ` +
          `${got[k] ?? "none"} with the cache, ${want[k] ?? "none"} recomputing`;
        if (got[k] === undefined || want[k] === undefined) return where;
        const tie = nearTie(await logitsOf([...batch[b]!, ...want.slice(0, k)]), got[k]!);
        if (!tie.near)
          return `${where}; recomputed logits ${tie.gap.toPrecision(3)} apart, margin ${tie.margin.toPrecision(3)}`;
      }
    }
    return undefined;
  } catch (err) {
    return `it fails: ${(err as Error).message?.split("\n")[0] ?? String(err)}`;
  }
}

/**
 * How far `token`'s logit lies below the top one (`gap`), the near-tie margin
 * `NEAR_TIE × max(1, |top|)`, and whether the gap is within it.
 */
function nearTie(logits: Float32Array, token: number): { gap: number; margin: number; near: boolean } {
  let top = -Infinity;
  for (const v of logits) if (v > top) top = v;
  const margin = NEAR_TIE * Math.max(1, Math.abs(top));
  const gap = top - (logits[token] ?? -Infinity);
  return { gap, margin, near: gap <= margin };
}

/**
 * A session over the graph file as exported; where its nodes have trailing empty inputs, over the same graph
 * without them (staged beside its weights, as generation stages its rewrite): onnxruntime crashes on some.
 */
async function exportedSession(onnxPath: string, options: SessionOptions): Promise<ort.InferenceSession> {
  const bytes = await readWhole(onnxPath);
  const model = decodeModel(bytes);
  if (!trimEmptyInputs(model.graph!))
    return loadSession(onnxPath, options).catch((err: unknown) => {
      throw err instanceof ModelLoadError ? new ModelLoadError(err.reason, onnxPath) : err;
    });
  const stage = await stageModel(onnxPath, model.graph!);
  if (stage) rewriteWeightsInPlace(model, bytes, stage.sourceName);
  return createSession(onnxPath, encodeModel(model), stage, options);
}

/**
 * Reads the next token's logits of one prompt from the graph file as exported, in a session of its own opened
 * per call (it runs only where the probe's tokens differ): batch 1 (the prompt repeated where the graph's inputs
 * fix a larger batch), no padding, positions 0…n−1 where the graph takes them, each input in the integer type the
 * graph declares; float16 logits widened. The graph's first output holds the logits where it has none named
 * `logits`.
 */
export function exportedLogits(
  onnxPath: string,
  options: SessionOptions,
  setup: Pick<DecodeSetup, "positions" | "int32" | "fixedBatch">,
): LastLogits {
  const int32 = new Set(setup.int32);
  const rows = setup.fixedBatch ?? 1;
  return async (prompt) => {
    const session = await exportedSession(onnxPath, options);
    try {
      const n = prompt.length;
      const ints = (name: string, row: (i: number) => number) =>
        intTensor(
          BigInt64Array.from({ length: rows * n }, (_, i) => BigInt(row(i % n))),
          [rows, n],
          int32.has(name),
        );
      const feeds: Record<string, ort.Tensor> = {
        input_ids: ints("input_ids", (i) => prompt[i]!),
        attention_mask: ints("attention_mask", () => 1),
      };
      if (setup.positions) feeds.position_ids = ints("position_ids", (i) => i);
      const name = session.outputNames.includes("logits") ? "logits" : session.outputNames[0]!;
      const out = (await session.run(feeds, [name]))[name]!;
      const vocab = out.dims.at(-1)!;
      const last = (out.data as Float32Array | Uint16Array).subarray(out.size - vocab);
      if (last instanceof Float32Array) return Float32Array.from(last);
      const logits = new Float32Array(vocab);
      f16ToF32(last, logits);
      return logits;
    } finally {
      await session.release();
    }
  };
}
