/**
 * The two orders in which a parallel block `x + attn(ln(x)) + mlp(ln(x))` is
 * added up: GPT-NeoX's `(mlp + attn) + x`, as the synthetic `neox` graph has
 * it, and `(x + attn) + mlp`, as HuggingFace writes Cohere's and StableLM's
 * (`use_parallel_residual`) and torch exports them.
 */
import type { GraphProto } from "../../src/onnx/graph.js";

/** Rewrites every block of a synthetic `neox` graph from `(mlp + attn) + x` to `(x + attn) + mlp`; returns how many. */
export function streamFirstOrder(graph: GraphProto): number {
  const nodes = graph.node ?? [];
  let blocks = 0;
  for (const outer of nodes) {
    const block = /^(\/model\/layers\.\d+)\/Add_1$/.exec(outer.name ?? "")?.[1];
    const inner = block && nodes.find((n) => n.name === `${block}/Add`);
    if (!inner) continue;
    const [mlp, attn] = inner.input!;
    const x = outer.input![1]!;
    inner.input = [x, attn!];
    outer.input = [inner.output![0]!, mlp!];
    blocks++;
  }
  return blocks;
}
