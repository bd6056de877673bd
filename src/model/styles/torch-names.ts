/**
 * torch.onnx / optimum exports, recognized by node names: every node of
 * decoder block N lives under `/model/layers.N/` (or `/transformer/h.N/`,
 * `/gpt_neox/layers.N/`, …), or under `/layers.N/` (`/h.N/`) where the base
 * model was exported without its LM head (optimum's feature-extraction task:
 * `LlamaModel`, `GPT2Model`, whose modules are the root's own). A block's
 * output is its last residual `Add` whose output the next block reads, or,
 * where onnxruntime's optimizer fused that Add with the next block's first
 * norm into a com.microsoft Skip norm (`SkipSimplifiedLayerNormalization`),
 * that norm's output 3, the sum; the last block's stored state is the output
 * of the final norm (`/model/norm/…`, `/norm/…`), as HuggingFace's
 * `hidden_states[L]`.
 */
import { graphIndex, type GraphProto, type NodeProto } from "../../onnx/graph.js";
import { candidates, DetectionError, isSkipNorm, type GraphStyle, type HiddenTensor } from "./style.js";

/** The module holding the blocks, absent in a base model's export (its blocks are the root's modules). */
const SCOPE = "(?:\\/(?:model|transformer|gpt_neox|model\\/decoder|model\\/language_model))?";
const BLOCK = new RegExp(`^${SCOPE}\\/(?:layers|h|blocks|layer)\\.(\\d+)\\/`);
/** Operators a block's output may pass through before the next block reads it, and how many in a row. */
const PASSING = new Set(["Reshape", "Cast", "Identity", "Dropout", "Flatten", "Squeeze", "Unsqueeze"]);
const PASS_DEPTH = 4;
const FINAL_NORM = new RegExp(`^${SCOPE}\\/(?:norm|norm_f|ln_f|final_layer_norm|final_layernorm|final_norm)\\/`);

/** Nodes grouped by the block their name places them in, and the final norm's nodes. */
function scopes(graph: GraphProto): { byBlock: Map<number, NodeProto[]>; normNodes: NodeProto[] } {
  const byBlock = new Map<number, NodeProto[]>();
  const normNodes: NodeProto[] = [];
  for (const n of graph.node ?? []) {
    const m = BLOCK.exec(n.name ?? "");
    if (m) {
      const b = Number(m[1]);
      let list = byBlock.get(b);
      if (!list) byBlock.set(b, (list = []));
      list.push(n);
    } else if (FINAL_NORM.test(n.name ?? "")) normNodes.push(n);
  }
  return { byBlock, normNodes };
}

export const torchNamesStyle: GraphStyle = {
  name: "torch-names",
  notFound: "node names do not follow /model/layers.N/",
  recognize: (graph) => (graph.node ?? []).some((n) => BLOCK.test(n.name ?? "")),
  locate(graph, numLayers) {
    const { byBlock, normNodes } = scopes(graph);
    if (byBlock.size !== numLayers || !byBlock.has(numLayers - 1)) {
      throw new DetectionError(
        `the graph has ${byBlock.size} decoder blocks by name but config.json says ${numLayers}`,
      );
    }
    const { consumers } = graphIndex(graph);
    const tensors: HiddenTensor[] = [];
    for (let l = 0; l < numLayers - 1; l++) {
      const nodes = byBlock.get(l)!;
      const next = new Set(byBlock.get(l + 1) ?? []);
      // The residual output: an Add of this block read by the next block, directly or through this block's
      // reshapes and casts (OPT adds the MLP's residual on the flattened stream and reshapes it back).
      const own = new Set(nodes);
      const ownOutputs = new Set(nodes.flatMap((n) => n.output ?? []));
      const reachesNext = (t: string, depth = 0): boolean =>
        (consumers.get(t) ?? []).some(
          (c) =>
            next.has(c) ||
            (depth < PASS_DEPTH && own.has(c) && PASSING.has(c.opType ?? "") && reachesNext(c.output![0]!, depth + 1)),
        );
      const found = nodes.filter((n) => n.opType === "Add" && (n.output ?? []).some((o) => reachesNext(o)));
      const last = found.at(-1); // nodes are in topological order: the final residual comes last
      if (last) {
        tensors.push({ layer: l, tensor: last.output![0]!, how: `last residual Add of block ${l} (${last.name})` });
        continue;
      }
      // onnxruntime's optimizer fuses that Add into the next block's first norm: the Skip norm there summing
      // tensors of this block gives their sum as output 3.
      const fused = byBlock
        .get(l + 1)
        ?.find((n) => isSkipNorm(n) && n.output?.[3] && (n.input ?? []).slice(0, 2).some((i) => ownOutputs.has(i)));
      if (!fused) {
        throw new DetectionError(
          `cannot find the residual output of block ${l}: no Add in /…layers.${l}/ feeds block ${l + 1}, and no Skip norm of block ${l + 1} sums its output. ` +
            `Name it with --hidden-tensors ${l}=TENSOR; candidate tensors: ${candidates(graph, nodes)}`,
        );
      }
      tensors.push({
        layer: l,
        tensor: fused.output![3]!,
        how: `output 3 (input_skip_bias_sum) of ${fused.name}, block ${l}'s last residual Add fused with block ${l + 1}'s first norm`,
      });
    }
    // The final norm's output is the norm-scope tensor read outside the norm.
    const normSet = new Set(normNodes);
    const graphOutputs = new Set((graph.output ?? []).map((g) => g.name!));
    const normOut = normNodes.flatMap((n) =>
      (n.output ?? []).filter((o) => (consumers.get(o) ?? []).some((c) => !normSet.has(c)) || graphOutputs.has(o)),
    );
    if (normOut.length !== 1) {
      throw new DetectionError(
        `cannot find the final norm after block ${numLayers - 1} (${normOut.length === 0 ? "no /model/norm/ output" : `several: ${normOut.join(", ")}`}). ` +
          `Name it with --hidden-tensors final=TENSOR; candidate tensors: ${candidates(graph, normNodes.length ? normNodes : byBlock.get(numLayers - 1))}`,
      );
    }
    tensors.push({ layer: numLayers - 1, tensor: normOut[0]!, how: `final norm output (${normNodes.at(-1)!.name})` });
    return { tensors, lastLayerFinalNorm: true };
  },
};
