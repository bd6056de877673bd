/**
 * Rewrites an exported decoder so that only what is stored leaves the session:
 * the chosen hidden tensors are gathered at the last position, stacked and cast
 * to float16 inside the graph — one `[B, n_layers, d]` output — and every node
 * that output does not depend on (the LM head, the KV-cache outputs) is removed.
 */
import { DataType, encodeModel, GraphBuilder, pruneGraph, valueInfo, type ModelProto } from "./onnx-graph.js";
import type { HiddenTensor } from "./detect.js";

export const HIDDEN_OUTPUT = "hsm_hidden_states";

export interface RewriteResult {
  bytes: Uint8Array;
  removedNodes: number;
  keptNodes: number;
}

/**
 * Rewrites `model` in place and returns its encoding. `tensors` are in
 * stored-layer order. When `source` (the bytes `model` was decoded from) is
 * given, every large initializer is turned into an external-data reference to
 * its own bytes inside the original file (named `source.name` where the session
 * loads), so the rewritten model is a few kilobytes and no weight is copied.
 */
export function rewriteForExtraction(
  model: ModelProto,
  tensors: HiddenTensor[],
  dModel: number,
  source?: { bytes: Uint8Array; name: string },
  rightPaddedMask?: string,
): RewriteResult {
  const graph = model.graph!;
  const taken = new Set((graph.node ?? []).map((n) => n.name!).filter(Boolean));
  const g = new GraphBuilder(taken);
  const probe = rightPaddedMask === undefined ? lastPosition(g) : lastRealToken(g, rightPaddedMask, dModel);
  const rows = tensors.map((t) => probe(t.tensor, `/hsm/layer.${t.layer}`));
  const stacked = rows.length === 1 ? rows[0]! : g.op1("/hsm", "Concat", rows, { axis: 1 });
  g.nodes.push({ name: "/hsm/Cast", opType: "Cast", input: [stacked], output: [HIDDEN_OUTPUT], attribute: [{ name: "to", type: 2, i: DataType.FLOAT16 }] });
  graph.node = [...(graph.node ?? []), ...g.nodes];
  graph.initializer = [...(graph.initializer ?? []), ...g.initializers];
  const original = graph.output ?? [];
  graph.output = [valueInfo(HIDDEN_OUTPUT, DataType.FLOAT16, ["batch_size", tensors.length, dModel])];
  const { removedNodes } = pruneGraph(graph);
  // A node kept for the states keeps its other graph outputs (GroupQueryAttention's
  // `present.*`): left dangling, onnxruntime's planner may write such an output
  // in place into an input's buffer of another shape (the empty past) and fail.
  const produced = new Set(graph.node!.flatMap((n) => n.output ?? []));
  graph.output.push(...original.filter((v) => produced.has(v.name!)));
  if (source) externalizeInitializers(graph, source.bytes, source.name);
  return { bytes: encodeModel(model), removedNodes, keptNodes: graph.node.length };
}

/** Left padding: every row's last real token is the last position; `[B, T, d]` → `[B, 1, d]`. */
function lastPosition(g: GraphBuilder): (tensor: string, scope: string) => string {
  const last = g.ints("/hsm/constants/last_position", [-1], []);
  const axis1 = g.ints("/hsm/constants/axes_1", [1]);
  return (tensor, scope) => g.op1(scope, "Unsqueeze", [g.op1(scope, "Gather", [tensor, last], { axis: 1 }), axis1]);
}

/**
 * Right padding: row b's last real token is at sum(mask_b) − 1, gathered per
 * row (GatherElements over positions with that index repeated across d);
 * `[B, T, d]` → `[B, 1, d]`.
 */
function lastRealToken(g: GraphBuilder, mask: string, dModel: number): (tensor: string, scope: string) => string {
  const S = "/hsm/probe";
  const count = g.op1(S, "ReduceSum", [mask, g.ints("/hsm/constants/axes_1", [1])], { keepdims: 1 }); // [B, 1]
  const index = g.op1(S, "Sub", [count, g.ints("/hsm/constants/one", [1], [])]);
  const index3 = g.op1(S, "Unsqueeze", [index, g.ints("/hsm/constants/axes_2", [2])]); // [B, 1, 1]
  const spread = g.op1(S, "Expand", [index3, g.ints("/hsm/constants/shape_1_1_d", [1, 1, dModel])]); // [B, 1, d]
  return (tensor, scope) => g.op1(scope, "GatherElements", [tensor, spread], { axis: 1 });
}

/** Points a model's large initializers at their bytes in the file it was decoded from (see rewriteForExtraction). */
export function rewriteWeightsInPlace(model: ModelProto, source: Uint8Array, name: string): void {
  externalizeInitializers(model.graph!, source, name);
}

/** Points initializers whose raw bytes lie inside `source` at those bytes, by offset. */
function externalizeInitializers(graph: NonNullable<ModelProto["graph"]>, source: Uint8Array, name: string): void {
  for (const t of graph.initializer ?? []) {
    const raw = t.rawData;
    if (!raw || raw.length < 4096 || raw.buffer !== source.buffer) continue;
    const offset = raw.byteOffset - source.byteOffset;
    if (offset < 0 || offset + raw.length > source.length) continue;
    t.rawData = new Uint8Array(0);
    t.dataLocation = 1; // EXTERNAL
    t.externalData = [
      { key: "location", value: name },
      { key: "offset", value: String(offset) },
      { key: "length", value: String(raw.length) },
    ];
  }
}

/**
 * The naive alternative, kept for benchmarks: block outputs added as graph
 * outputs beside everything else (`logits` included), full `[B, T, d]` each.
 */
export function addHiddenOutputs(model: ModelProto, tensors: HiddenTensor[]): Uint8Array {
  const graph = model.graph!;
  graph.output = [...(graph.output ?? []), ...tensors.map((t) => valueInfo(t.tensor, DataType.FLOAT, ["batch_size", "sequence_length", "d_model"]))];
  return encodeModel(model);
}
