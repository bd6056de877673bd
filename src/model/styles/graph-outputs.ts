/**
 * Graphs exported with `output_hidden_states`: outputs `hidden_states.0 …
 * hidden_states.L` in HuggingFace's numbering (block `l`'s output is
 * `hidden_states.{l+1}`; `hidden_states.L` carries the final norm).
 */
import type { GraphProto } from "../../onnx/graph.js";
import type { GraphStyle } from "./style.js";

const outputName = (layer: number) => `hidden_states.${layer + 1}`;

function outputs(graph: GraphProto): Set<string> {
  return new Set((graph.output ?? []).map((o) => o.name!));
}

export const graphOutputsStyle: GraphStyle = {
  name: "graph-outputs",
  notFound: "there are no hidden_states.N outputs",
  recognize(graph, { numLayers }) {
    const outs = outputs(graph);
    return Array.from({ length: numLayers }, (_, l) => outputName(l)).every((n) => outs.has(n));
  },
  locate: (_graph, numLayers) => ({
    tensors: Array.from({ length: numLayers }, (_, l) => ({
      layer: l,
      tensor: outputName(l),
      how:
        l === numLayers - 1 ? "graph output hidden_states.L (after the final norm)" : `graph output ${outputName(l)}`,
    })),
    lastLayerFinalNorm: true,
  }),
};
