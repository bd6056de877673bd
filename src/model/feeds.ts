/**
 * The inputs of a pass over whole prompts, built from a style's input plan:
 * left-padded ids, mask and positions (in the integer type the graph
 * declares), empty KV-cache inputs, and `use_cache_branch` false (a merged
 * decoder's branch without cache); and what a graph's declared inputs allow.
 */
import * as ort from "onnxruntime-node";

import type { BatchFeeds } from "./batching.js";
import { DataType, valueShape, type GraphProto } from "../onnx/graph.js";
import { DetectionError, type InputPlan } from "./styles/style.js";

export function promptFeeds(plan: InputPlan["feeds"], f: BatchFeeds): Record<string, ort.Tensor> {
  const feeds: Record<string, ort.Tensor> = {};
  for (const { name, kind, dims, int32, float16 } of plan) {
    if (kind === "input_ids") feeds[name] = intTensor(f.inputIds, [f.batch, f.length], int32);
    else if (kind === "attention_mask") feeds[name] = intTensor(f.attentionMask, [f.batch, f.length], int32);
    else if (kind === "position_ids") feeds[name] = intTensor(f.positionIds, [f.batch, f.length], int32);
    else if (kind === "use_cache_branch") feeds[name] = new ort.Tensor("bool", Uint8Array.of(0), [1]);
    else feeds[name] = emptyPast(dims, Boolean(float16), f.batch);
  }
  return feeds;
}

/** Token ids, a mask or positions as an int64 tensor, or as int32 where the graph declares that (`int32`). */
export function intTensor(values: BigInt64Array, dims: number[], int32 = false): ort.Tensor {
  return int32
    ? new ort.Tensor(
        "int32",
        Int32Array.from(values, (v) => Number(v)),
        dims,
      )
    : new ort.Tensor("int64", values, dims);
}

/** An empty KV-cache input: batch first, then the fixed dimensions; every unnamed length (the past sequence) is 0. */
export function emptyPast(dims: readonly (number | string)[], float16: boolean, batch: number): ort.Tensor {
  const shape = dims.map((s, k) => (k === 0 ? batch : typeof s === "number" ? s : 0));
  return float16
    ? new ort.Tensor("float16", new Uint16Array(0), shape)
    : new ort.Tensor("float32", new Float32Array(0), shape);
}

/** The fed inputs of a token's kind: `[batch, sequence]` integers. */
const TOKEN_KINDS = new Set(["input_ids", "attention_mask", "position_ids"]);

const TYPE_NAMES: Readonly<Record<number, string>> = {
  [DataType.FLOAT]: "float",
  [DataType.BOOL]: "bool",
  [DataType.FLOAT16]: "float16",
  [DataType.DOUBLE]: "double",
  [DataType.BFLOAT16]: "bfloat16",
};

/**
 * What the declared inputs of `graph` (read from `file`) allow, checked before anything runs: token ids, mask
 * and positions must be `[batch, sequence]` int32 or int64 tensors whose sequence length is free (prompts differ in
 * length). Returns the batch every run must have where an input fed fixes its first dimension (undefined: any);
 * the graph runs batches of exactly that many rows. Anything else fails in one line naming the file and the input.
 */
export function declaredBatch(file: string, graph: GraphProto, plan: InputPlan["feeds"]): number | undefined {
  const declared = new Map((graph.input ?? []).map((v) => [v.name!, v]));
  let batch: { rows: number; input: string } | undefined;
  for (const { name, kind } of plan) {
    if (kind === "use_cache_branch") continue;
    const v = declared.get(name);
    const dims = v ? valueShape(v) : undefined;
    const type = v?.type?.tensorType?.elemType ?? 0;
    if (TOKEN_KINDS.has(kind)) {
      if (type !== 0 && type !== DataType.INT64 && type !== DataType.INT32)
        throw new DetectionError(
          `${file}: input ${name} is declared ${TYPE_NAMES[type] ?? `of ONNX type ${type}`}; hsm feeds ${kind} as int32 or int64 integers`,
        );
      if (dims && dims.length !== 2)
        throw new DetectionError(
          `${file}: input ${name} is declared [${dims.join(", ")}]; hsm feeds ${kind} as [batch, sequence]`,
        );
      if (typeof dims?.[1] === "number")
        throw new DetectionError(
          `${file}: input ${name} fixes the sequence length at ${dims[1]}; prompts differ in length, so hsm needs ` +
            `a graph exported with a dynamic sequence axis`,
        );
    }
    const rows = dims?.[0];
    if (typeof rows !== "number") continue;
    if (batch && batch.rows !== rows)
      throw new DetectionError(
        `${file}: input ${name} fixes the batch at ${rows} and input ${batch.input} at ${batch.rows}`,
      );
    batch = { rows, input: name };
  }
  return batch?.rows;
}
