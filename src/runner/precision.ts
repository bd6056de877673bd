/**
 * What a graph computes in and how its weights are stored, read from the graph
 * alone: the manifest's `dtype` (compute dtype) and `weights` (weight format).
 */
import { DataType, num, type GraphProto } from "./onnx-graph.js";

export interface GraphPrecision {
  /** The float type of most float parameters: the dtype the blocks compute in. */
  dtype: "float32" | "float16" | "bfloat16";
  /** How the projection weights are stored. */
  weights: "float32" | "float16" | "bfloat16" | "int4" | "int8" | "nf4";
  /**
   * True when the graph quantizes activations with one scale per tensor
   * (`DynamicQuantizeLinear`): a row's result then depends on the other rows
   * of its batch and on padding, so such graphs run one row at a time.
   */
  batchDependent: boolean;
}

const FLOATS: Record<number, GraphPrecision["dtype"]> = { [DataType.FLOAT]: "float32", [DataType.FLOAT16]: "float16", [DataType.BFLOAT16]: "bfloat16" };

export function graphPrecision(graph: GraphProto): GraphPrecision {
  const ops = new Map<string, number>();
  for (const n of graph.node ?? []) {
    const key = n.opType === "MatMulNBits" ? `MatMulNBits/${num((n.attribute ?? []).find((a) => a.name === "bits")?.i ?? 4)}` : n.opType!;
    ops.set(key, (ops.get(key) ?? 0) + 1);
  }
  // Elements per float type, over every initializer (external ones by their dims).
  const elements = new Map<string, number>();
  for (const t of graph.initializer ?? []) {
    const type = FLOATS[t.dataType ?? 0];
    if (!type) continue;
    elements.set(type, (elements.get(type) ?? 0) + (t.dims ?? []).reduce((a: number, d) => a * num(d), 1));
  }
  const dtype = ([...elements.entries()].sort((a, b) => b[1] - a[1])[0]?.[0] ?? "float32") as GraphPrecision["dtype"];
  let weights: GraphPrecision["weights"] = dtype;
  if (ops.has("MatMulNBits/8") || ops.has("MatMulInteger")) weights = "int8";
  if (ops.has("MatMulNBits/4")) weights = "int4";
  if (ops.has("MatMulBnb4")) weights = "nf4";
  return { dtype, weights, batchDependent: ops.has("DynamicQuantizeLinear") };
}
