/**
 * The inputs of a pass over whole prompts, built from a style's input plan:
 * left-padded ids, mask and positions, empty KV-cache inputs, and
 * `use_cache_branch` false (a merged decoder's branch without cache).
 */
import * as ort from "onnxruntime-node";

import type { BatchFeeds } from "./batching.js";
import type { InputPlan } from "./styles/style.js";

export function promptFeeds(plan: InputPlan["feeds"], f: BatchFeeds): Record<string, ort.Tensor> {
  const feeds: Record<string, ort.Tensor> = {};
  for (const { name, kind, dims, float16 } of plan) {
    if (kind === "input_ids") feeds[name] = new ort.Tensor("int64", f.inputIds, [f.batch, f.length]);
    else if (kind === "attention_mask") feeds[name] = new ort.Tensor("int64", f.attentionMask, [f.batch, f.length]);
    else if (kind === "position_ids") feeds[name] = new ort.Tensor("int64", f.positionIds, [f.batch, f.length]);
    else if (kind === "use_cache_branch") feeds[name] = new ort.Tensor("bool", Uint8Array.of(0), [1]);
    else feeds[name] = emptyPast(dims, Boolean(float16), f.batch);
  }
  return feeds;
}

/** An empty KV-cache input: batch first, then the fixed dimensions; every unnamed length (the past sequence) is 0. */
export function emptyPast(dims: readonly (number | string)[], float16: boolean, batch: number): ort.Tensor {
  const shape = dims.map((s, k) => (k === 0 ? batch : typeof s === "number" ? s : 0));
  return float16
    ? new ort.Tensor("float16", new Uint16Array(0), shape)
    : new ort.Tensor("float32", new Float32Array(0), shape);
}
