/**
 * A written model's inputs as other exporters declare them, the computation
 * unchanged: no `attention_mask` (an export of a model called without one,
 * which attends to every token: the graph's mask becomes all ones inside it),
 * int32 token ids, mask and positions (cast to int64 inside, as an export
 * traced with int32 inputs reads them), and fixed dimensions (an export
 * without dynamic axes). Passes over a written folder, like rename.ts and
 * opset.ts.
 */
import { readFile, writeFile } from "node:fs/promises";
import { join } from "node:path";

import { InternalError } from "../errors.js";
import { isPastInput } from "../onnx/kv-cache.js";
import { DataType, decodeModel, encodeModel, type GraphProto, type ModelProto } from "../onnx/graph.js";

/** Renames every read of `from` to `to` in `graph`'s nodes, in subgraphs too. */
function rewire(graph: GraphProto, from: string, to: string): void {
  for (const n of graph.node ?? []) {
    n.input = (n.input ?? []).map((i) => (i === from ? to : i));
    for (const a of n.attribute ?? []) for (const g of [a.g, ...(a.graphs ?? [])]) if (g) rewire(g, from, to);
  }
}

/**
 * Removes `model`'s `attention_mask` input, in place: its readers read a mask of ones shaped as `input_ids`
 * instead, which is what the graph computes for unpadded rows. A graph with past inputs, whose mask spans the
 * past too, is refused.
 */
export function dropAttentionMask(model: ModelProto): void {
  const graph = model.graph!;
  if ((graph.input ?? []).some((v) => isPastInput(v.name!)))
    throw new InternalError("a graph with past inputs keeps its attention_mask: the mask spans the past");
  const mask = (graph.input ?? []).find((v) => v.name === "attention_mask");
  if (!mask) throw new InternalError("the graph has no attention_mask input");
  const ones = "/model/attention_mask/ones";
  rewire(graph, "attention_mask", ones);
  const shape = "/model/attention_mask/Shape_output_0";
  graph.node = [
    { name: "/model/attention_mask/Shape", opType: "Shape", input: ["input_ids"], output: [shape] },
    {
      name: "/model/attention_mask/ConstantOfShape",
      opType: "ConstantOfShape",
      input: [shape],
      output: [ones],
      attribute: [{ name: "value", type: 4, t: { dataType: DataType.INT64, dims: [1], rawData: ONE_INT64 } }],
    },
    ...(graph.node ?? []),
  ];
  graph.input = (graph.input ?? []).filter((v) => v !== mask);
}

/** The inputs declared int32 by {@link int32Inputs}. */
const TOKEN_INPUTS = new Set(["input_ids", "attention_mask", "position_ids"]);

/** Declares `model`'s token ids, mask and positions int32, in place; the graph casts each to int64 before use. */
export function int32Inputs(model: ModelProto): void {
  const graph = model.graph!;
  const casts = [];
  for (const v of graph.input ?? []) {
    if (!TOKEN_INPUTS.has(v.name!)) continue;
    const wide = `/model/${v.name}/Cast_output_0`;
    rewire(graph, v.name!, wide);
    casts.push({
      name: `/model/${v.name}/Cast`,
      opType: "Cast",
      input: [v.name!],
      output: [wide],
      attribute: [{ name: "to", type: 2, i: DataType.INT64 }],
    });
    v.type!.tensorType!.elemType = DataType.INT32;
  }
  graph.node = [...casts, ...(graph.node ?? [])];
}

/**
 * Fixes dimension `axis` of every input of `model` that is `[batch, sequence]` or a KV-cache input (batch first)
 * at `size`, in place: the batch (axis 0) or the sequence length (axis 1) of an export without dynamic axes.
 */
export function fixDimension(model: ModelProto, axis: 0 | 1, size: number): void {
  for (const v of model.graph!.input ?? []) {
    if (!TOKEN_INPUTS.has(v.name!) && !(axis === 0 && isPastInput(v.name!))) continue;
    v.type!.tensorType!.shape!.dim![axis] = { dimValue: size };
  }
}

/** The int64 1, little-endian. */
const ONE_INT64 = new Uint8Array(new BigInt64Array([1n]).buffer);

/** Rewrites the graph of the model folder `dir` (`model.onnx`, weights inline) with `change`. */
export async function changeModelFile(dir: string, change: (model: ModelProto) => void): Promise<void> {
  const file = join(dir, "model.onnx");
  const model = decodeModel(await readFile(file));
  change(model);
  await writeFile(file, encodeModel(model));
}
