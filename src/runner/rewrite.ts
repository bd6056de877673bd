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

/** Rewrites `model` in place and returns its encoding. `tensors` are in stored-layer order. */
export function rewriteForExtraction(model: ModelProto, tensors: HiddenTensor[], dModel: number): RewriteResult {
  const graph = model.graph!;
  const taken = new Set((graph.node ?? []).map((n) => n.name!).filter(Boolean));
  const g = new GraphBuilder(taken);
  const last = g.ints("/hsm/constants/last_position", [-1], []);
  const axis1 = g.ints("/hsm/constants/axes_1", [1]);
  const rows = tensors.map((t) => {
    const at = g.op1(`/hsm/layer.${t.layer}`, "Gather", [t.tensor, last], { axis: 1 }); // [B, d]
    return g.op1(`/hsm/layer.${t.layer}`, "Unsqueeze", [at, axis1]); // [B, 1, d]
  });
  const stacked = rows.length === 1 ? rows[0]! : g.op1("/hsm", "Concat", rows, { axis: 1 });
  g.nodes.push({ name: "/hsm/Cast", opType: "Cast", input: [stacked], output: [HIDDEN_OUTPUT], attribute: [{ name: "to", type: 2, i: DataType.FLOAT16 }] });
  graph.node = [...(graph.node ?? []), ...g.nodes];
  graph.initializer = [...(graph.initializer ?? []), ...g.initializers];
  graph.output = [valueInfo(HIDDEN_OUTPUT, DataType.FLOAT16, ["batch_size", tensors.length, dModel])];
  const { removedNodes } = pruneGraph(graph);
  return { bytes: encodeModel(model), removedNodes, keptNodes: graph.node.length };
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
