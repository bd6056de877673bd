/**
 * A written model moved to an older opset of the default ONNX domain, as
 * torch.onnx.export writes the same graph at opset 11 or 12: the axes of
 * `Unsqueeze`, `Squeeze` and `ReduceSum` and the sizes of `Split` as
 * attributes (inputs from opset 13), the axes of the other reductions as
 * attributes (inputs from opset 18), and `LessOrEqual` (opset 12) as
 * `Not(Greater)`. The moved graph computes exactly what the original does;
 * an operator it cannot move is an error naming it.
 */
import { readFile, writeFile } from "node:fs/promises";
import { join } from "node:path";

import { InternalError } from "../errors.js";
import {
  decodeModel,
  defaultOpset,
  encodeModel,
  int64Values,
  onnx,
  type GraphProto,
  type ModelProto,
  type NodeProto,
} from "../onnx/graph.js";

/** The default-domain opsets a graph can be moved to. */
export type OlderOpset = 11 | 12;

/** Operators the tiny models hold that a graph of an older opset lacks: the opset they came in. */
const NEWER: Readonly<Record<string, number>> = { CastLike: 15, LayerNormalization: 17, Trilu: 14, Range: 11 };

/** The first opset in which `opType` takes as an input what it took as the attribute `axes` or `split` before. */
function inputSince(opType: string): number | undefined {
  if (opType === "Unsqueeze" || opType === "Squeeze" || opType === "ReduceSum" || opType === "Split") return 13;
  return opType.startsWith("Reduce") ? 18 : undefined;
}

/** Moves `graph` (and its subgraphs) to `opset` in place. */
function moveGraph(graph: GraphProto, opset: OlderOpset): void {
  const constants = new Map((graph.initializer ?? []).map((t) => [t.name!, t]));
  const nodes: NodeProto[] = [];
  for (const n of graph.node ?? []) {
    for (const a of n.attribute ?? []) for (const g of [a.g, ...(a.graphs ?? [])]) if (g) moveGraph(g, opset);
    const since = inputSince(n.opType!);
    if (!n.domain && since !== undefined && opset < since && n.input?.[1]) {
      const values = int64Values(constants.get(n.input[1]));
      if (values === undefined)
        throw new InternalError(
          `${n.name}: ${n.opType}'s second input is not a constant; it cannot move to opset ${opset}`,
        );
      n.attribute = [
        ...(n.attribute ?? []),
        { name: n.opType === "Split" ? "split" : "axes", type: onnx.AttributeProto.AttributeType.INTS, ints: values },
      ];
      n.input = [n.input[0]!];
    }
    if (!n.domain && n.opType === "LessOrEqual" && opset < 12) {
      const greater = `${n.output![0]}/greater`;
      nodes.push({ name: `${n.name}/Greater`, opType: "Greater", input: n.input, output: [greater] });
      nodes.push({ name: n.name, opType: "Not", input: [greater], output: n.output });
      continue;
    }
    if (!n.domain && (NEWER[n.opType!] ?? 0) > opset)
      throw new InternalError(
        `${n.name}: ${n.opType} came in opset ${NEWER[n.opType!]}; it cannot move to opset ${opset}`,
      );
    nodes.push(n);
  }
  graph.node = nodes;
  // Initializers only the moved inputs read are dropped.
  const read = new Set((graph.node ?? []).flatMap((n) => [...(n.input ?? []), ...subgraphInputs(n)]));
  const outputs = new Set((graph.output ?? []).map((o) => o.name!));
  graph.initializer = (graph.initializer ?? []).filter((t) => read.has(t.name!) || outputs.has(t.name!));
}

/** The names a node's subgraphs read (outer tensors among them). */
function subgraphInputs(n: NodeProto): string[] {
  return (n.attribute ?? []).flatMap((a) =>
    [a.g, ...(a.graphs ?? [])].flatMap((g) =>
      g ? (g.node ?? []).flatMap((m) => [...(m.input ?? []), ...subgraphInputs(m)]) : [],
    ),
  );
}

/** `model` moved to default-domain `opset` in place (see the file's comment); it must be of opset 13 or later. */
function moveToOpset(model: ModelProto, opset: OlderOpset): void {
  if (defaultOpset(model) < 13) throw new InternalError(`the model is of opset ${defaultOpset(model)} already`);
  moveGraph(model.graph!, opset);
  for (const o of model.opsetImport ?? []) if (!o.domain || o.domain === "ai.onnx") o.version = opset;
}

/** Moves the graph of the model folder `dir` (`model.onnx`, weights inline) to `opset`. */
export async function writeAtOpset(dir: string, opset: OlderOpset): Promise<void> {
  const file = join(dir, "model.onnx");
  const model = decodeModel(await readFile(file));
  moveToOpset(model, opset);
  await writeFile(file, encodeModel(model));
}
