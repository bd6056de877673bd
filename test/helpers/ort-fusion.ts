/**
 * A torch export's norms fused as onnxruntime's transformer optimizer fuses
 * them, for the tests of such graphs: each RMSNorm written out (`Pow`,
 * `ReduceMean`, `Add`, `Sqrt`, `Div`, `Mul`, `Mul_1`) becomes one
 * `SimplifiedLayerNormalization`, and each residual `Add` read by a norm
 * becomes, with that norm, a com.microsoft `SkipSimplifiedLayerNormalization`
 * (output 0 the normed value, output 3 the sum where anything else reads it).
 * Node names keep their scopes, and the sums and norm outputs their tensors'
 * names, as the optimizer leaves a torch export's.
 */
import type { GraphProto, NodeProto } from "../../src/onnx/graph.js";

/** Fuses the norms of a synthetic Llama graph (RMSNorms under `…layernorm` and `/model/norm`) in place. */
export function fuseNorms(graph: GraphProto): void {
  let nodes = graph.node ?? [];
  // 1. Each written-out RMSNorm becomes one SimplifiedLayerNormalization, where its last Mul was.
  for (const pow of nodes.filter((n) => n.opType === "Pow" && /(layernorm|\/model\/norm)\/Pow$/.test(n.name ?? ""))) {
    const scope = pow.name!.slice(0, -"/Pow".length);
    const last = nodes.find((n) => n.name === `${scope}/Mul_1`)!;
    const norm: NodeProto = {
      name: `${scope}/SimplifiedLayerNormalization`,
      opType: "SimplifiedLayerNormalization",
      input: [pow.input![0]!, last.input![0]!],
      output: [last.output![0]!],
      attribute: [
        { name: "axis", type: 2, i: -1 },
        { name: "epsilon", type: 1, f: 1e-5 },
      ],
    };
    nodes = nodes.flatMap((n) => (n === last ? [norm] : n.name!.startsWith(`${scope}/`) ? [] : [n]));
  }
  // 2. Each residual Add read by a norm becomes a Skip norm, where the Add was.
  const readers = (t: string) => nodes.filter((n) => n.input!.includes(t));
  const fused = new Set<NodeProto>();
  nodes = nodes.map((add) => {
    if (!/^\/model\/layers\.\d+\/Add(_1)?$/.test(add.name ?? "")) return add;
    const sum = add.output![0]!;
    const norms = readers(sum).filter((n) => n.opType === "SimplifiedLayerNormalization");
    if (norms.length !== 1) return add;
    const norm = norms[0]!;
    fused.add(norm);
    const others = readers(sum).length > 1 || (graph.output ?? []).some((o) => o.name === sum);
    return {
      name: norm.name!.replace(/SimplifiedLayerNormalization$/, "SkipLayerNorm"),
      opType: "SkipSimplifiedLayerNormalization",
      domain: "com.microsoft",
      input: [add.input![0]!, add.input![1]!, norm.input![1]!],
      output: others ? [norm.output![0]!, "", "", sum] : [norm.output![0]!],
      attribute: [{ name: "epsilon", type: 1, f: 1e-5 }],
    };
  });
  graph.node = nodes.filter((n) => !fused.has(n));
}
