/**
 * Graph helpers: trailing empty inputs are dropped (ONNX reads them as optional inputs left out), in subgraphs
 * too, and an empty input before a given one stays where it is.
 */
import { describe, expect, it } from "vitest";

import { trimEmptyInputs, type GraphProto } from "../../src/onnx/graph.js";

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
