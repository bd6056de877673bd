/**
 * A causal LM's graph turned into the export of its base model: optimum's
 * feature-extraction task exports `LlamaModel` or `GPT2Model`, whose modules
 * are the root's own (nodes `/layers.N/…`, `/norm/…`, no `/model/` or
 * `/transformer/` prefix).
 */
import type { GraphProto } from "../../src/onnx/graph.js";

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
  for (const v of [...(graph.output ?? []), ...(graph.valueInfo ?? [])]) v.name = rename(v.name!);
  return map;
}
