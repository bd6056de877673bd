/**
 * Graph helpers: trailing empty inputs are dropped (ONNX reads them as optional inputs left out), in subgraphs
 * too, and an empty input before a given one stays where it is; the builder writes each operator in the form of
 * the graph's default-domain opset, and refuses one the opset lacks.
 */
import { describe, expect, it } from "vitest";

import { defaultOpset, GraphBuilder, OpsetError, trimEmptyInputs, type GraphProto } from "../../src/onnx/graph.js";

describe("trimEmptyInputs", () => {
  it("drops only the trailing empty inputs of each node, in If branches too", () => {
    const branch: GraphProto = { node: [{ opType: "Clip", input: ["x", "", ""], output: ["y"] }] };
    const graph: GraphProto = {
      node: [
        { opType: "LayerNormalization", input: ["x", "scale", ""], output: ["a"] },
        { opType: "Resize", input: ["x", "", "scales", ""], output: ["b"] },
        { opType: "Add", input: ["a", "b"], output: ["c"] },
        { opType: "If", input: ["cond"], output: ["d"], attribute: [{ name: "then_branch", g: branch }] },
      ],
    };
    trimEmptyInputs(graph);
    expect(graph.node!.map((n) => n.input)).toEqual([["x", "scale"], ["x", "", "scales"], ["a", "b"], ["cond"]]);
    expect(branch.node![0]!.input).toEqual(["x"]);
  });
});

describe("GraphBuilder at a graph's opset", () => {
  // The ONNX operator changelog: Unsqueeze, Squeeze and ReduceSum take their axes as an input from opset 13,
  // ReduceMean and the other reductions from opset 18; before, as the attribute `axes`.
  const AXES_INPUT_FROM = { Unsqueeze: 13, Squeeze: 13, ReduceSum: 13, ReduceMean: 18, ReduceMax: 18 };

  it.each([11, 12, 13, 17, 18, 21])("writes axes as the opset %i takes them", (opset) => {
    for (const [op, from] of Object.entries(AXES_INPUT_FROM)) {
      const g = new GraphBuilder(new Set(), opset);
      g.alongAxes("/s", op, "x", [1], "/c/axes_1", op.startsWith("Reduce") ? { keepdims: 1 } : {});
      const [node] = g.nodes;
      const axes = node!.attribute!.find((a) => a.name === "axes");
      if (opset >= from) {
        expect(node!.input, `${op} at ${opset}`).toEqual(["x", "/c/axes_1"]);
        expect(axes).toBeUndefined();
        expect(g.initializers.map((t) => t.name)).toEqual(["/c/axes_1"]);
      } else {
        expect(node!.input, `${op} at ${opset}`).toEqual(["x"]);
        expect(axes?.ints).toEqual([1]);
        expect(g.initializers).toEqual([]);
      }
    }
  });

  it("refuses an operator the opset lacks, naming both", () => {
    const g = new GraphBuilder(new Set(), 10);
    expect(() => g.op1("/s", "GatherElements", ["x", "i"], { axis: 1 })).toThrow(OpsetError);
    expect(() => g.op1("/s", "GatherElements", ["x", "i"], { axis: 1 })).toThrow(
      "the graph imports default-domain opset 10, and hsm's rewrite needs GatherElements of opset 11 or later; " +
        "export the model with opset 11 or later",
    );
    const e = new OpsetError(10, "GatherElements", 11).in("m/model.onnx");
    expect(e.message).toMatch(/^m\/model\.onnx: the graph imports default-domain opset 10, /);
    expect(new GraphBuilder(new Set(), 11).op1("/s", "GatherElements", ["x", "i"])).toBe("/s/GatherElements_output_0");
  });

  it("reads the default domain's opset however it is spelt", () => {
    expect(
      defaultOpset({
        opsetImport: [
          { domain: "com.microsoft", version: 1 },
          { domain: "", version: 12 },
        ],
      }),
    ).toBe(12);
    expect(defaultOpset({ opsetImport: [{ domain: "ai.onnx", version: 11 }] })).toBe(11);
    expect(defaultOpset({ opsetImport: [{ version: 14 }] })).toBe(14);
  });
});
