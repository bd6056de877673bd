/**
 * The graph-style registry on small hand-made graphs: styles are tried in
 * order and the first that recognizes a graph locates its tensors; a new style
 * slots in without touching the loop; inputs are planned by name.
 */
import { describe, expect, it } from "vitest";

import { DetectionError, detectHiddenTensors, planInputs } from "../../src/model/detect.js";
import { DataType, GraphBuilder, valueInfo, type GraphProto } from "../../src/onnx/graph.js";
import { explicitStyle } from "../../src/model/styles/explicit.js";
import { graphOutputsStyle } from "../../src/model/styles/graph-outputs.js";
import { STYLES } from "../../src/model/styles/index.js";
import { standardInputs, type GraphStyle } from "../../src/model/styles/style.js";
import { structuralStyle } from "../../src/model/styles/structural.js";
import { torchNamesStyle } from "../../src/model/styles/torch-names.js";

/**
 * Two "blocks" (`/model/layers.N/Add`) and a final norm (`/model/norm/Mul`),
 * optionally with hidden_states.N outputs, and the given extra inputs.
 */
function graph(o: { hiddenOutputs?: boolean; names?: boolean; inputs?: string[] } = {}): GraphProto {
  const g = new GraphBuilder();
  const named = o.names ?? true;
  const node = (name: string, op: string, inputs: string[], output: string) =>
    g.nodes.push({ name: named ? name : `n${g.nodes.length}`, opType: op, input: inputs, output: [output] });
  node("/model/embed_tokens/Gather", "Gather", ["embed", "input_ids"], "x0");
  node("/model/layers.0/Add", "Add", ["x0", "x0"], "x1");
  node("/model/layers.1/Add", "Add", ["x1", "x1"], "x2");
  node("/model/norm/Mul", "Mul", ["x2", "x2"], "normed");
  node("/lm_head/MatMul", "MatMul", ["normed", "head"], "logits");
  const outputs = [valueInfo("logits", DataType.FLOAT, ["batch_size", "sequence_length", 8])];
  if (o.hiddenOutputs) {
    node("/hsm/h1", "Identity", ["x1"], "hidden_states.1");
    node("/hsm/h2", "Identity", ["normed"], "hidden_states.2");
    outputs.push({ name: "hidden_states.1" }, { name: "hidden_states.2" });
  }
  const inputs = ["input_ids", ...(o.inputs ?? [])].map((n) =>
    valueInfo(n, n === "input_ids" ? DataType.INT64 : DataType.FLOAT, ["batch_size", 2, "past_sequence_length", 4]),
  );
  return { name: "toy", node: g.nodes, input: inputs, output: outputs };
}

/** The registry without structure: the toy graphs have names but no decoder structure (no attention, no MLP). */
const NAMED = STYLES.filter((s) => s !== structuralStyle);

describe("graph-style registry", () => {
  it("is ordered optimum-merged (a preparation), explicit, graph-outputs, structural, genai, torch-names", () => {
    expect(STYLES.map((s) => s.name)).toEqual([
      "optimum-merged",
      "explicit",
      "graph-outputs",
      "structural",
      "genai",
      "torch-names",
    ]);
  });

  it("tries structure for every graph with an embedding, and says what it saw when the structure is no decoder", () => {
    expect(() => detectHiddenTensors(graph(), 2)).toThrow(
      /^structure: block 0 is incomplete: residual Add 1 of 2 \(\/model\/layers\.0\/Add\) adds neither attention nor an MLP; a block may be missing \(graph style seen: torch-names\)\. Name the tensors with --hidden-tensors LAYER=TENSOR,…,final=TENSOR; candidate tensors: x0, x1, x2$/,
    );
  });

  it("uses the first style that recognizes the graph", () => {
    expect(detectHiddenTensors(graph(), 2, undefined, NAMED)).toMatchObject({
      strategy: "torch-names",
      lastLayerFinalNorm: true,
      tensors: [
        { layer: 0, tensor: "x1" },
        { layer: 1, tensor: "normed" },
      ],
    });
    expect(
      detectHiddenTensors(graph({ hiddenOutputs: true }), 2, undefined, NAMED).tensors.map((t) => t.tensor),
    ).toEqual(["hidden_states.1", "hidden_states.2"]);
    const given = detectHiddenTensors(graph({ hiddenOutputs: true }), 2, new Map([[0, "x0"]]));
    expect(given).toMatchObject({
      strategy: "explicit",
      lastLayerFinalNorm: false,
      tensors: [{ layer: 0, tensor: "x0", how: "given with --hidden-tensors" }],
    });
  });

  it("takes a new style where it is registered, and lists every style's lack when none applies", () => {
    const toy: GraphStyle = {
      name: "toy",
      notFound: "the graph is not called toy-decoder",
      recognize: (g) => g.name === "toy-decoder",
      locate: (_g, L) => ({
        tensors: Array.from({ length: L }, (_, l) => ({ layer: l, tensor: `x${l + 1}`, how: "by toy rule" })),
        lastLayerFinalNorm: false,
      }),
      inputs: (g) => ({ ...standardInputs(g), paddingSide: "right" }),
    };
    const registry = [explicitStyle, toy, graphOutputsStyle, torchNamesStyle];
    const plan = detectHiddenTensors({ ...graph(), name: "toy-decoder" }, 2, undefined, registry);
    expect(plan).toMatchObject({
      strategy: "toy",
      tensors: [{ tensor: "x1" }, { tensor: "x2" }],
      inputs: { paddingSide: "right" },
    });
    expect(detectHiddenTensors(graph(), 2, undefined, registry).strategy).toBe("torch-names");
    const anonymous = graph({ names: false });
    expect(() => detectHiddenTensors(anonymous, 2, undefined, registry)).toThrow(DetectionError);
    expect(() => detectHiddenTensors(anonymous, 2, undefined, registry)).toThrow(
      /^no decoder blocks found: node names do not follow \/model\/layers\.N\/ and there are no hidden_states\.N outputs and the graph is not called toy-decoder\. Name the tensors with --hidden-tensors; candidate tensors: x1, x2, normed$/,
    );
  });

  it("refuses a block count that disagrees with config.json, and an explicit tensor the graph lacks", () => {
    expect(() => detectHiddenTensors(graph(), 3, undefined, NAMED)).toThrow(
      /the graph has 2 decoder blocks by name but config\.json says 3/,
    );
    expect(() => detectHiddenTensors(graph(), 2, new Map([[1, "nope"]]))).toThrow(
      /--hidden-tensors names "nope" for layer 1, but the graph has no such tensor/,
    );
  });
});

describe("input plans", () => {
  it("feeds inputs by name, KV-cache inputs empty, and lists the inputs it cannot feed", () => {
    const plan = detectHiddenTensors(
      graph({
        inputs: [
          "attention_mask",
          "position_ids",
          "past_key_values.0.key",
          "past.1.value",
          "use_cache_branch",
          "pixel_values",
        ],
      }),
      2,
      undefined,
      NAMED,
    ).inputs;
    expect(plan.feeds.map((f) => [f.name, f.kind])).toEqual([
      ["input_ids", "input_ids"],
      ["attention_mask", "attention_mask"],
      ["position_ids", "position_ids"],
      ["past_key_values.0.key", "past"],
      ["past.1.value", "past"],
      ["use_cache_branch", "use_cache_branch"],
    ]);
    expect(plan.feeds[3]!.dims).toEqual(["batch_size", 2, "past_sequence_length", 4]);
    expect(plan.unknown).toEqual(["pixel_values"]);
    expect(plan.paddingSide).toBe("left");
  });

  it("pads a GroupQueryAttention graph right whichever style finds its states, --hidden-tensors included", () => {
    const gqa = graph({ inputs: ["attention_mask"] });
    gqa.node!.splice(1, 0, {
      name: "/model/layers.0/attn/GroupQueryAttention",
      opType: "GroupQueryAttention",
      domain: "com.microsoft",
      input: ["x0", "x0", "x0"],
      output: ["attn"],
    });
    expect(detectHiddenTensors(gqa, 2, new Map([[0, "x1"]])).inputs.paddingSide).toBe("right");
    expect(detectHiddenTensors(gqa, 2, undefined, NAMED).inputs.paddingSide).toBe("right");
    expect(planInputs(gqa, 2).paddingSide).toBe("right");
    expect(detectHiddenTensors(graph(), 2, new Map([[0, "x1"]])).inputs.paddingSide).toBe("left");
  });

  it("plans inputs by name for a graph no style recognizes, and by its style's plan otherwise", () => {
    const anonymous = graph({ names: false, inputs: ["attention_mask"] });
    expect(planInputs(anonymous, 2).feeds.map((f) => f.kind)).toEqual(["input_ids", "attention_mask"]);
    const right: GraphStyle = {
      name: "right",
      recognize: () => true,
      locate: () => ({ tensors: [], lastLayerFinalNorm: false }),
      inputs: (g) => ({ ...standardInputs(g), paddingSide: "right" }),
    };
    expect(planInputs(anonymous, 2, [right]).paddingSide).toBe("right");
  });
});
