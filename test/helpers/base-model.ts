/**
 * A causal LM's graph turned into the exports of its base model, for the
 * tests of graphs with no LM head: optimum's feature-extraction task exports
 * `LlamaModel` or `GPT2Model`, whose modules are the root's own (nodes
 * `/layers.N/…`, `/norm/…`, no `/model/` or `/transformer/` prefix) and whose
 * output `last_hidden_state` is the final norm's; onnxruntime-genai's
 * `exclude_lm_head` build outputs the final norm's output as `hidden_states`.
 */
import { DataType, pruneGraph, valueInfo, type GraphProto } from "../../src/onnx/graph.js";

/** Renames every node and tensor under `prefix` (`/model`) to the root: `/model/layers.0/Add` becomes `/layers.0/Add`. */
export function baseModelNames(graph: GraphProto, prefix: string): Map<string, string> {
  const map = new Map<string, string>();
  const rename = (name: string) => {
    if (!name.startsWith(`${prefix}/`)) return name;
    const to = name.slice(prefix.length);
    map.set(name, to);
    return to;
  };
  for (const n of graph.node ?? []) {
    n.name = rename(n.name ?? "");
    n.input = (n.input ?? []).map(rename);
    n.output = (n.output ?? []).map(rename);
  }
  for (const v of [...(graph.input ?? []), ...(graph.output ?? []), ...(graph.valueInfo ?? [])])
    v.name = rename(v.name!);
  for (const t of graph.initializer ?? []) t.name = rename(t.name!);
  return map;
}

/**
 * Removes the LM head (the node named `head`, and all that only the logits need): the tensor it read becomes
 * the graph output `output`, `[batch_size, sequence_length, hidden]`, in place of `logits`. Returns the tensor
 * the head read, by its name before the renaming.
 */
export function dropLmHead(graph: GraphProto, head: string, output: string, hidden: number): string {
  const node = (graph.node ?? []).find((n) => n.name === head);
  if (!node) throw new Error(`no node ${head}`);
  const state = node.input![0]!;
  for (const n of graph.node ?? []) {
    n.input = (n.input ?? []).map((i) => (i === state ? output : i));
    n.output = (n.output ?? []).map((o) => (o === state ? output : o));
  }
  graph.output = (graph.output ?? []).map((o) =>
    o.name === "logits" ? valueInfo(output, DataType.FLOAT, ["batch_size", "sequence_length", hidden]) : o,
  );
  pruneGraph(graph);
  return state;
}
