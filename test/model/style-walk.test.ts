/**
 * docs/contributing.md's graph style, run as the page writes it: registered in
 * a registry of its own, it locates the blocks of a graph in its style, is
 * passed over for a graph that is not, and says what it missed when nothing
 * applies.
 */
import { describe, expect, it } from "vitest";

import { DetectionError, detectHiddenTensors, planInputs } from "../../src/model/detect.js";
import { explicitStyle } from "../../src/model/styles/explicit.js";
import { graphOutputsStyle } from "../../src/model/styles/graph-outputs.js";
import { STYLES } from "../../src/model/styles/index.js";
import type { GraphStyle } from "../../src/model/styles/style.js";
import { DataType, GraphBuilder, valueInfo, type GraphProto } from "../../src/onnx/graph.js";
import { importWalk } from "../helpers/walks.js";

const { blockOutputsStyle } = await importWalk<{ blockOutputsStyle: GraphStyle }>("src/model/styles/block-outputs.ts");

/** Three anonymous blocks (`Add`), a final norm, and the blocks' outputs listed as `blocks.N.output` when asked. */
function graph(withBlockOutputs: boolean): GraphProto {
  const g = new GraphBuilder();
  const node = (op: string, inputs: string[], output: string) =>
    g.nodes.push({ name: `n${g.nodes.length}`, opType: op, input: inputs, output: [output] });
  node("Gather", ["embed", "input_ids"], "x0");
  for (let l = 0; l < 3; l++) node("Add", [`x${l}`, `x${l}`], `x${l + 1}`);
  node("Mul", ["x3", "x3"], "normed");
  const outputs = [valueInfo("logits", DataType.FLOAT, ["batch_size", "sequence_length", 8])];
  if (withBlockOutputs) {
    ["x1", "x2", "normed"].forEach((t, l) => node("Identity", [t], `blocks.${l}.output`));
    outputs.push(
      ...[0, 1, 2].map((l) => valueInfo(`blocks.${l}.output`, DataType.FLOAT, ["batch_size", "sequence_length", 4])),
    );
  }
  const inputs = ["input_ids", "attention_mask"].map((n) =>
    valueInfo(n, DataType.INT64, ["batch_size", "sequence_length"]),
  );
  return { name: "walk", node: g.nodes, input: inputs, output: outputs };
}

/** The built-in registry with the walk's style where the page registers it: after graph-outputs. */
const registry = STYLES.flatMap((s) => (s === graphOutputsStyle ? [s, blockOutputsStyle] : [s]));

describe("the graph style of docs/contributing.md", () => {
  it("locates each block's output in a graph of its style, the last after the final norm", () => {
    const plan = detectHiddenTensors(graph(true), 3, undefined, registry);
    expect(plan.strategy).toBe("block-outputs");
    expect(plan.lastLayerFinalNorm).toBe(true);
    expect(plan.tensors).toEqual(
      [0, 1, 2].map((l) => ({ layer: l, tensor: `blocks.${l}.output`, how: `graph output blocks.${l}.output` })),
    );
    expect(planInputs(graph(true), 3, registry)).toEqual({
      feeds: [
        { name: "input_ids", kind: "input_ids", dims: ["batch_size", "sequence_length"] },
        { name: "attention_mask", kind: "attention_mask", dims: ["batch_size", "sequence_length"] },
      ],
      unknown: [],
      paddingSide: "left",
    });
  });

  it("leaves a graph without the outputs to the others, and names what it missed when none applies", () => {
    expect(blockOutputsStyle.recognize(graph(false), { numLayers: 3 })).toBe(false);
    expect(blockOutputsStyle.recognize(graph(true), { numLayers: 4 })).toBe(false);
    const bare = [explicitStyle, blockOutputsStyle];
    expect(() => detectHiddenTensors(graph(false), 3, undefined, bare)).toThrow(DetectionError);
    expect(() => detectHiddenTensors(graph(false), 3, undefined, bare)).toThrow(
      /there are no blocks\.N\.output outputs/,
    );
  });

  it("without it, the built-in registry cannot place these blocks", () => {
    expect(() => detectHiddenTensors(graph(true), 3)).toThrow(DetectionError);
  });
});
