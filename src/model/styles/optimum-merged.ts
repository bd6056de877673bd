/**
 * optimum's merged decoder: the whole model is one `If` (`optimum::if`) on the
 * input `use_cache_branch`, the with-past decoder in `then_branch` and the
 * decoder without past in `else_branch`; the layers exist only inside the
 * branches, reading the initializers both share from the main graph (hoisted
 * there as `<name>_merged_<n>`).
 *
 * With empty past and `use_cache_branch = false` the else branch is the model,
 * so this style prepares the graph by inlining that branch in place of the
 * `If`: its nodes and initializers move to the main graph, its outputs take
 * the `If`'s output names, and its reads of hoisted initializers resolve there
 * unchanged. The other styles then find the blocks in the inlined graph, and
 * extraction rewrites it; the past inputs and `use_cache_branch` are no longer
 * read and are pruned. Generation keeps the `If` and feeds
 * `use_cache_branch` (false on the first step, true once there is a cache).
 */
import { InternalError } from "../../errors.js";
import type { GraphProto, NodeProto } from "../../onnx/graph.js";
import type { GraphStyle } from "./style.js";

const BRANCH_INPUT = "use_cache_branch";

function mergedIf(graph: GraphProto): NodeProto | undefined {
  return (graph.node ?? []).find(
    (n) => n.opType === "If" && (n.name === "optimum::if" || n.input?.[0] === BRANCH_INPUT),
  );
}

/** Replaces the merged decoder's If by its else branch, in place. */
function inlineElseBranch(graph: GraphProto): void {
  const node = mergedIf(graph)!;
  const branch = node.attribute!.find((a) => a.name === "else_branch")!.g!;
  // The branch's outputs take the If's names.
  const rename = new Map<string, string>();
  (branch.output ?? []).forEach((o, k) => {
    const outer = node.output![k];
    if (outer && o.name !== outer) rename.set(o.name!, outer);
  });
  const to = (t: string) => rename.get(t) ?? t;
  const inlined = (branch.node ?? []).map((n) => ({
    ...n,
    input: (n.input ?? []).map(to),
    output: (n.output ?? []).map(to),
  }));
  const nodes = graph.node ?? [];
  const at = nodes.indexOf(node);
  graph.node = [...nodes.slice(0, at), ...inlined, ...nodes.slice(at + 1)];
  graph.initializer = [
    ...(graph.initializer ?? []),
    ...(branch.initializer ?? []).map((t) => ({ ...t, name: to(t.name!) })),
  ];
  graph.valueInfo = [...(graph.valueInfo ?? []), ...(branch.valueInfo ?? [])];
}

export const optimumMergedStyle: GraphStyle = {
  name: "optimum-merged",
  recognize: (graph) => {
    const node = mergedIf(graph);
    return node !== undefined && (node.attribute ?? []).some((a) => a.name === "else_branch" && a.g);
  },
  prepare: inlineElseBranch,
  locate: () => {
    throw new InternalError("optimum-merged prepares a graph; another style locates its tensors");
  },
};
