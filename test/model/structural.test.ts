/**
 * Structural detection on generated decoders: it finds the same tensors as
 * torch/optimum names on every named style, the same tensors on renamed
 * copies (dynamo names, no names) as names do on the original, and stops in
 * one line naming the style seen, the candidates and --hidden-tensors on a
 * missing block, a block count that disagrees with config.json, and a fused
 * op it does not know on the residual stream. onnxruntime-genai graphs are
 * read through their Skip norms, genai names agreeing, and so are graphs
 * fused by onnxruntime's optimizer, torch names agreeing. A graph with no LM head
 * (a base model's export, genai's exclude_lm_head build) gives its output, the
 * final norm's, for the last block.
 */
import { describe, expect, it } from "vitest";

import { buildLlamaOnnx, tinyConfig, tinyWeights, type TinyModelOptions } from "../../src/synthetic/llama.js";
import { detectHiddenTensors, DetectionError } from "../../src/model/detect.js";
import { buildGenaiModel } from "../../src/synthetic/genai.js";
import { convertToFloat16, linearWriter } from "../../src/synthetic/quantize.js";
import { decodeModel, encodeModel, pruneGraph, type GraphProto } from "../../src/onnx/graph.js";
import { genaiStyle } from "../../src/model/styles/genai.js";
import { renameGraph, RENAME_STYLES, type RenameStyle } from "../../src/synthetic/rename.js";
import { locateByStructure } from "../../src/model/styles/structural.js";
import { torchNamesStyle } from "../../src/model/styles/torch-names.js";
import { buildGpt2Onnx, gpt2Config, gpt2Weights } from "../../src/synthetic/learned-positions.js";
import { buildStarcoder2Onnx, starcoder2Config, starcoder2Weights } from "../../src/synthetic/llama-relatives.js";
import { baseModelNames, dropLmHead } from "../helpers/base-model.js";
import { fuseNorms } from "../helpers/ort-fusion.js";
import { streamFirstOrder } from "../helpers/parallel-residual.js";

const BASE: TinyModelOptions = { layers: 2, hidden: 32, heads: 4, kvHeads: 2, seed: 3 };

/** Seeded weights depend only on these; generating them is most of a graph's cost, so each set is made once. */
const weightsMade = new Map<string, ReturnType<typeof tinyWeights>>();
function weightsOf(o: TinyModelOptions): ReturnType<typeof tinyWeights> {
  const key = JSON.stringify([tinyConfig(o), o.seed, o.embedScale, o.family, o.forcedNext]);
  let w = weightsMade.get(key);
  if (!w) weightsMade.set(key, (w = tinyWeights(o)));
  return w;
}

/** A fresh graph each call (tests rename and cut them), from bytes built once per options. */
const bytesMade = new Map<string, Uint8Array>();
function graphOf(o: TinyModelOptions): GraphProto {
  const key = JSON.stringify(o);
  let bytes = bytesMade.get(key);
  if (!bytes) bytesMade.set(key, (bytes = buildLlamaOnnx(tinyConfig(o), weightsOf(o), o.withPast ?? false)));
  return decodeModel(bytes).graph!;
}

/** The genai build of the tiny model, as onnxruntime-genai's builder lays it out. */
function genaiGraph(layers: number, precision: "fp32" | "fp16" | "int4" = "fp32"): GraphProto {
  const o = { ...BASE, layers };
  const model = buildGenaiModel(tinyConfig(o), weightsOf(o), linearWriter(precision === "int4" ? "int4" : "float32"));
  if (precision === "fp16") convertToFloat16(model);
  return decodeModel(encodeModel(model)).graph!;
}
/** Output 3 (the residual sum) of block l's input or post-attention Skip norm. */
const skipSum = (l: number, norm: "input" | "post_attention") =>
  `/model/layers.${l}/${norm}_layernorm/SkipSimplifiedLayerNormalization_output_3`;

const byNames = (g: GraphProto, L: number) =>
  torchNamesStyle.locate(g, L, { numLayers: L }).tensors.map((t) => t.tensor);
const byStructure = (g: GraphProto, L: number) => locateByStructure(g, L).tensors.map((t) => t.tensor);

describe("structural detection", () => {
  const named: [string, TinyModelOptions][] = [
    ["plain", BASE],
    ["with-past", { ...BASE, withPast: true }],
    ["forced LM-head features", { ...BASE, forcedNext: [[25, 7]] }],
    ["three layers, one kv head", { ...BASE, layers: 3, kvHeads: 1 }],
  ];
  it.each(named)("finds what names find on the %s graph, and the registry uses it with names agreeing", (_label, o) => {
    const g = graphOf(o);
    const L = o.layers!;
    const want = [
      ...Array.from({ length: L - 1 }, (_, l) => `/model/layers.${l}/Add_1_output_0`),
      "/model/norm/Mul_1_output_0",
    ];
    expect(byNames(g, L)).toEqual(want);
    expect(byStructure(g, L)).toEqual(want);
    const plan = detectHiddenTensors(g, L);
    expect(plan.strategy).toBe("structural");
    expect(plan.tensors.map((t) => t.tensor)).toEqual(want);
    expect(plan.crossCheck).toBe(`names (torch-names) agree on all ${L} blocks`);
    expect(plan.warnings).toEqual([]);
    expect(plan.tensors[0]!.how).toMatch(/^structure: residual Add 2 of \d+, the end of block 0/);
  });

  it("reads a base model's names (/layers.N/, /norm/: no /model/ prefix) as torch names, which agree", () => {
    const g = graphOf(BASE);
    const map = baseModelNames(g, "/model");
    expect(g.node!.find((n) => n.name === "/layers.1/Add_1")).toBeDefined();
    const want = byNames(graphOf(BASE), 2).map((t) => map.get(t));
    expect(want).toEqual(["/layers.0/Add_1_output_0", "/norm/Mul_1_output_0"]);
    expect(byNames(g, 2)).toEqual(want);
    const plan = detectHiddenTensors(g, 2);
    expect(plan.tensors.map((t) => t.tensor)).toEqual(want);
    expect(plan.crossCheck).toBe("names (torch-names) agree on all 2 blocks");
  });
});

/**
 * Names and structure agree on the 3-block graph of `o` (each block's last residual Add, then the final norm),
 * and structure finds the same tensors once the graph is renamed in `style`.
 */
function expectThreeBlocks(o: TinyModelOptions, style: RenameStyle): void {
  const want = ["/model/layers.0/Add_1_output_0", "/model/layers.1/Add_1_output_0", "/model/norm/Mul_1_output_0"];
  const g = graphOf(o);
  expect(byNames(g, 3)).toEqual(want);
  expect(byStructure(g, 3)).toEqual(want);
  const renamed = graphOf(o);
  const map = renameGraph(renamed, style, 2);
  expect(byStructure(renamed, 3)).toEqual(want.map((t) => map.get(t)));
}

describe("structural detection on other families' graph shapes", () => {
  it("gemma: the √d embedding scale and (1 + w) norms, four norms per block; two residual Adds per block", () => {
    const o = { ...BASE, layers: 3, family: "gemma" } as const;
    const g = graphOf(o);
    expect(g.node!.some((n) => n.name === "/model/layers.0/post_feedforward_layernorm/Mul_1")).toBe(true);
    expectThreeBlocks(o, "anonymous");
    expect(locateByStructure(g, 3).tensors[1]!.how).toMatch(/^structure: residual Add 4 of 6, the end of block 1/);
  });

  it("gpt-2: position embeddings added to the token embeddings before the first block", () => {
    const g = graphOf(BASE);
    const embed = g.node!.find((n) => n.name === "/model/embed_tokens/Gather")!;
    const out = embed.output![0]!;
    for (const n of g.node!) n.input = n.input!.map((i) => (i === out ? "/model/Add_wpe_output_0" : i));
    const at = g.node!.indexOf(embed) + 1;
    g.node!.splice(
      at,
      0,
      {
        name: "/model/wpe/Gather",
        opType: "Gather",
        input: ["model.embed_tokens.weight", "position_ids"],
        output: ["/model/wpe/Gather_output_0"],
      },
      {
        name: "/model/Add_wpe",
        opType: "Add",
        input: [out, "/model/wpe/Gather_output_0"],
        output: ["/model/Add_wpe_output_0"],
      },
    );
    expect(byStructure(g, 2)).toEqual(byNames(g, 2));
  });

  it("reads of the embedding's shape and type (masks, rotary tables cast like it) are not part of the stream", () => {
    // Detection only: the edited graph is never run.
    const g = graphOf(BASE);
    const embed = g.node!.find((n) => n.name === "/model/embed_tokens/Gather")!.output![0]!;
    const cos = g.node!.find((n) => n.name === "/model/rotary_emb/Gather")!;
    g.node!.push({
      name: "/model/rotary_emb/CastLike",
      opType: "CastLike",
      input: [cos.output![0]!, embed],
      output: ["cos_cast"],
    });
    for (const n of g.node!)
      if (n.name !== "/model/rotary_emb/CastLike")
        n.input = n.input!.map((i) => (i === cos.output![0] ? "cos_cast" : i));
    // Topological order: the CastLike right after the embedding, before every reader of the table.
    g.node!.splice(
      g.node!.indexOf(g.node!.find((n) => n.name === "/model/embed_tokens/Gather")!) + 1,
      0,
      g.node!.pop()!,
    );
    const shape = { name: "/model/Shape_embeds", opType: "Shape", input: [embed], output: ["embeds_shape"] };
    g.node!.splice(g.node!.indexOf(g.node!.find((n) => n.name === "/model/embed_tokens/Gather")!) + 1, 0, shape);
    const bias = g.node!.find((n) => n.opType === "Where")!;
    const expand = {
      name: "/model/Expand_bias",
      opType: "Expand",
      input: [bias.output![0]!, "embeds_shape"],
      output: ["bias_expanded"],
    };
    for (const n of g.node!) n.input = n.input!.map((i) => (i === bias.output![0] ? "bias_expanded" : i));
    g.node!.splice(g.node!.indexOf(g.node!.find((n) => n.name === "/model/layers.0/input_layernorm/Pow")!), 0, expand);
    expect(byStructure(g, 2)).toEqual(byNames(g, 2));
  });

  it("qwen2: the bias Adds after the q, k and v MatMuls are not residual Adds", () => {
    const o = { ...BASE, layers: 3, family: "qwen2" } as const;
    const g = graphOf(o);
    const biasAdds = g.node!.filter((n) => n.opType === "Add" && n.input!.some((i) => /_proj\.bias$/.test(i)));
    expect(biasAdds.map((n) => n.name).slice(0, 3)).toEqual([
      "/model/layers.0/self_attn/q_proj/Add",
      "/model/layers.0/self_attn/k_proj/Add",
      "/model/layers.0/self_attn/v_proj/Add",
    ]);
    expectThreeBlocks(o, "anonymous");
    expect(locateByStructure(g, 3).tensors[1]!.how).toMatch(/^structure: residual Add 4 of 6, the end of block 1/);
  });

  it("phi3: packed qkv and gate_up projections split, and LongRoPE's If choosing the rotary tables", () => {
    const o = { ...BASE, layers: 3, family: "phi3" } as const;
    const g = graphOf(o);
    expect(
      g
        .node!.filter((n) => n.opType === "Split")
        .map((n) => n.name)
        .slice(0, 2),
    ).toEqual(["/model/layers.0/self_attn/Split", "/model/layers.0/mlp/Split"]);
    const rotary = g.node!.find((n) => n.opType === "If")!;
    expect(rotary.attribute!.map((a) => [a.name, a.g!.node!.map((n) => n.opType)])).toEqual([
      ["then_branch", ["Constant", "Constant"]],
      ["else_branch", ["Constant", "Constant"]],
    ]);
    expectThreeBlocks(o, "dynamo-names");
    const plan = detectHiddenTensors(g, 3);
    expect(plan).toMatchObject({
      strategy: "structural",
      crossCheck: "names (torch-names) agree on all 3 blocks",
      warnings: [],
    });
  });

  it("parallel blocks added stream first, (x + attn) + mlp (Cohere, StableLM): one residual Add per block, names agreeing", () => {
    const o = { ...BASE, layers: 3, family: "neox" } as const;
    const g = graphOf(o);
    expect(streamFirstOrder(g)).toBe(3);
    // Each block still ends in its Add_1, now (x + attn) + mlp: the tensor the next block reads.
    const want = ["/model/layers.0/Add_1_output_0", "/model/layers.1/Add_1_output_0", "/model/norm/Mul_1_output_0"];
    expect(byNames(g, 3)).toEqual(want);
    const plan = detectHiddenTensors(g, 3);
    expect(plan.tensors.map((t) => t.tensor)).toEqual(want);
    expect(plan.tensors[1]!.how).toMatch(/^structure: residual Add 2 of 3, the end of block 1/);
    expect(plan).toMatchObject({ crossCheck: "names (torch-names) agree on all 3 blocks", warnings: [] });
    const renamed = graphOf(o);
    streamFirstOrder(renamed);
    const map = renameGraph(renamed, "anonymous", 2);
    expect(byStructure(renamed, 3)).toEqual(want.map((t) => map.get(t)));
    expect(() => locateByStructure(g, 2)).toThrow(
      /the residual stream holds 3 blocks \(3 residual Adds, one per parallel block\) but config\.json's num_hidden_layers is 2/,
    );
  });

  it("neox: parallel attention and MLP, one residual Add per block", () => {
    const o = { ...BASE, layers: 3, family: "neox" } as const;
    const g = graphOf(o);
    expectThreeBlocks(o, "dynamo-names");
    expect(locateByStructure(g, 3).tensors[1]!.how).toMatch(/^structure: residual Add 2 of 3, the end of block 1/);
    expect(() => locateByStructure(g, 2)).toThrow(
      /the residual stream holds 3 blocks \(3 residual Adds, one per parallel block\) but config\.json's num_hidden_layers is 2/,
    );
  });
});

describe("structural detection on onnxruntime-genai graphs (Skip norms, GroupQueryAttention)", () => {
  const genaiNames = (g: GraphProto, L: number) =>
    genaiStyle.locate(g, L, { numLayers: L }).tensors.map((t) => t.tensor);
  it.each(["fp32", "fp16", "int4"] as const)(
    "%s: finds output 3 of each next input Skip norm and output 0 of the final one, as genai names do",
    (precision) => {
      const g = genaiGraph(3, precision);
      const want = [
        skipSum(1, "input"),
        skipSum(2, "input"),
        "/model/layers.3/final_norm_layernorm/SkipSimplifiedLayerNormalization_output_0",
      ];
      expect(genaiNames(g, 3)).toEqual(want);
      expect(byStructure(g, 3)).toEqual(want);
      const plan = detectHiddenTensors(g, 3);
      expect(plan).toMatchObject({
        strategy: "structural",
        crossCheck: "names (genai) agree on all 3 blocks",
        warnings: [],
        inputs: { paddingSide: "right" },
      });
      expect(plan.tensors[1]!.how).toBe(
        "structure: residual sum 4 of 6 (output 3, input_skip_bias_sum, of SkipSimplifiedLayerNormalization), the end of block 1 (/model/layers.2/input_layernorm/SkipLayerNorm)",
      );
    },
  );

  it("finds the same on a genai graph stripped of its names, padded right for its GroupQueryAttention", () => {
    const original = genaiGraph(3);
    const renamed = genaiGraph(3);
    const map = renameGraph(renamed, "anonymous", 4);
    const plan = detectHiddenTensors(renamed, 3);
    expect(plan).toMatchObject({
      strategy: "structural",
      crossCheck: "names: none to check against (graph style seen: anonymous)",
      inputs: { paddingSide: "right" },
    });
    expect(plan.tensors.map((t) => t.tensor)).toEqual(genaiNames(original, 3).map((t) => map.get(t)));
  });

  it("a block count that disagrees with genai_config.json: one line naming the style seen, the candidates and the flag", () => {
    const layersFrom = "genai_config.json's num_hidden_layers";
    expect(() => detectHiddenTensors(genaiGraph(3), 4, undefined, undefined, layersFrom)).toThrow(
      /^structure: the residual stream holds 3 blocks \(6 residual sums, two per pre-norm block\) but genai_config\.json's num_hidden_layers is 4 \(graph style seen: genai\)\. Name the tensors with --hidden-tensors LAYER=TENSOR,…,final=TENSOR; candidate tensors: \/model\/embed_tokens\/Gather_output_0, [^\n]*$/,
    );
  });
});

describe("structural detection on graphs with no LM head (the stream's end is the graph's output)", () => {
  const d = BASE.hidden!;
  it("a base model's export (last_hidden_state, /layers.N/ names): the output, the final norm's, for the last block", () => {
    const g = graphOf(BASE);
    const map = baseModelNames(g, "/model");
    // What the LM head read: the final norm's output, which the base model outputs as last_hidden_state.
    expect(dropLmHead(g, "/lm_head/MatMul", "last_hidden_state", d)).toBe(map.get("/model/norm/Mul_1_output_0"));
    const plan = detectHiddenTensors(g, 2);
    expect(plan.tensors.map((t) => t.tensor)).toEqual(["/layers.0/Add_1_output_0", "last_hidden_state"]);
    expect(plan.tensors[1]!.how).toBe(
      "structure: final norm output after the last residual (/norm/Mul_1), which the graph outputs as last_hidden_state: it has no LM head",
    );
    expect(plan).toMatchObject({ crossCheck: "names (torch-names) agree on all 2 blocks", warnings: [] });
  });

  it("starcoder2's base model: its final LayerNormalization gives last_hidden_state", () => {
    const c = starcoder2Config({ ...BASE, family: "starcoder2" });
    const g = decodeModel(buildStarcoder2Onnx(c, starcoder2Weights(c, 5), false)).graph!;
    baseModelNames(g, "/model");
    dropLmHead(g, "/lm_head/MatMul", "last_hidden_state", d);
    expect(g.node!.find((n) => n.output![0] === "last_hidden_state")).toMatchObject({
      name: "/norm/LayerNormalization",
      opType: "LayerNormalization",
    });
    const plan = detectHiddenTensors(g, 2);
    expect(plan.tensors.map((t) => t.tensor)).toEqual(["/layers.0/Add_1_output_0", "last_hidden_state"]);
    expect(plan).toMatchObject({ crossCheck: "names (torch-names) agree on all 2 blocks", warnings: [] });
  });

  it("gpt-2's base model: a LayerNormalization, then the view back to [B, T, d], gives last_hidden_state", () => {
    const c = gpt2Config({ ...BASE, family: "gpt2" });
    const g = decodeModel(buildGpt2Onnx(c, gpt2Weights(c, 5), false)).graph!;
    baseModelNames(g, "/transformer");
    // The LM head reads the reshaped norm output; the state is the norm's own output behind the reshape.
    dropLmHead(g, "/lm_head/MatMul", "last_hidden_state", d);
    expect(g.node!.find((n) => n.output![0] === "last_hidden_state")).toMatchObject({
      opType: "Reshape",
      input: ["/ln_f/LayerNormalization_output_0", expect.any(String)],
    });
    const plan = detectHiddenTensors(g, 2);
    expect(plan.tensors.map((t) => t.tensor)).toEqual(["/h.0/Add_1_output_0", "/ln_f/LayerNormalization_output_0"]);
    expect(plan).toMatchObject({ crossCheck: "names (torch-names) agree on all 2 blocks", warnings: [] });
  });

  it("an onnxruntime-genai exclude_lm_head build: the final Skip norm's output 0 is the graph's hidden_states", () => {
    const g = genaiGraph(3);
    const final = "/model/layers.3/final_norm_layernorm/SkipSimplifiedLayerNormalization_output_0";
    expect(dropLmHead(g, "/lm_head/MatMul", "hidden_states", d)).toBe(final);
    const plan = detectHiddenTensors(g, 3);
    expect(plan.tensors.map((t) => t.tensor)).toEqual([skipSum(1, "input"), skipSum(2, "input"), "hidden_states"]);
    expect(plan.tensors[2]!.how).toBe(
      "structure: output 0 of the last residual sum's SkipSimplifiedLayerNormalization, the final norm (/model/layers.3/final_norm_layernorm/SkipLayerNorm), which the graph outputs as hidden_states: it has no LM head",
    );
    expect(plan).toMatchObject({ crossCheck: "names (genai) agree on all 3 blocks", warnings: [] });
  });

  it("an output that is the last residual Add itself, no final norm before it: one line saying so", () => {
    const g = graphOf(BASE);
    g.output = g.output!.map((o) => (o.name === "logits" ? { ...o, name: "/model/layers.1/Add_1_output_0" } : o));
    pruneGraph(g);
    expect(() => detectHiddenTensors(g, 2)).toThrow(
      /^structure: no LM head follows the last residual Add \(\/model\/layers\.1\/Add_1\), and the graph's output \/model\/layers\.1\/Add_1_output_0 is not a final norm's \(graph style seen: torch-names\)\. /,
    );
  });
});

describe("structural detection on graphs fused by onnxruntime's optimizer (torch names, Skip norms)", () => {
  it("finds what names find on the unfused graph; names read the fused sums and agree, no warning", () => {
    const want = byNames(graphOf({ ...BASE, layers: 3 }), 3);
    const g = graphOf({ ...BASE, layers: 3 });
    fuseNorms(g);
    expect(g.node!.filter((n) => n.opType === "SkipSimplifiedLayerNormalization").map((n) => n.name)).toEqual([
      "/model/layers.0/post_attention_layernorm/SkipLayerNorm",
      "/model/layers.1/input_layernorm/SkipLayerNorm",
      "/model/layers.1/post_attention_layernorm/SkipLayerNorm",
      "/model/layers.2/input_layernorm/SkipLayerNorm",
      "/model/layers.2/post_attention_layernorm/SkipLayerNorm",
      "/model/norm/SkipLayerNorm",
    ]);
    expect(g.node!.some((n) => n.opType === "Add" && /^\/model\/layers\.\d+\/Add/.test(n.name!))).toBe(false);
    const named = torchNamesStyle.locate(g, 3, { numLayers: 3 }).tensors;
    expect(named.map((t) => t.tensor)).toEqual(want);
    expect(named[0]!.how).toBe(
      "output 3 (input_skip_bias_sum) of /model/layers.1/input_layernorm/SkipLayerNorm, block 0's last residual Add fused with block 1's first norm",
    );
    const plan = detectHiddenTensors(g, 3);
    expect(plan.tensors.map((t) => t.tensor)).toEqual(want);
    expect(plan).toMatchObject({ crossCheck: "names (torch-names) agree on all 3 blocks", warnings: [] });
  });
});

describe("structural detection on renamed graphs", () => {
  const cases = RENAME_STYLES.flatMap((style) => [false, true].map((withPast) => [style, withPast] as const));
  it.each(cases)("finds on a %s graph (with past: %s) what names find on the original", (style, withPast) => {
    const o = { ...BASE, layers: 3, withPast };
    const original = graphOf(o);
    const renamed = graphOf(o);
    const map = renameGraph(renamed, style, 11);
    expect(renamed.node!.some((n) => /layers\./.test(n.name ?? "") || /layers\./.test(n.output![0]!))).toBe(false);
    const plan = detectHiddenTensors(renamed, 3);
    expect(plan.strategy).toBe("structural");
    expect(plan.tensors.map((t) => t.tensor)).toEqual(byNames(original, 3).map((t) => map.get(t)));
    expect(plan.crossCheck).toBe(`names: none to check against (graph style seen: ${style})`);
    if (style === "dynamo-names")
      expect(renamed.node!.find((n) => n.opType === "Add")).toMatchObject({ name: "node_add", output: ["add"] });
    else expect(renamed.node!.every((n) => n.name === "")).toBe(true);
  });
});

describe("structural detection failures: one line, the style seen, the candidates, the flag", () => {
  const TAIL = "Name the tensors with --hidden-tensors LAYER=TENSOR,…,final=TENSOR; candidate tensors: ";
  const stream = (L: number) => [
    "/model/embed_tokens/Gather_output_0",
    ...Array.from({ length: L }, (_, l) => [
      `/model/layers.${l}/Add_output_0`,
      `/model/layers.${l}/Add_1_output_0`,
    ]).flat(),
  ];
  const fails = (g: GraphProto, L: number) => {
    let err: unknown;
    try {
      detectHiddenTensors(g, L);
    } catch (e) {
      err = e;
    }
    expect(err).toBeInstanceOf(DetectionError);
    expect((err as Error).message.split("\n")).toHaveLength(1);
    return (err as Error).message;
  };

  it("a block count that disagrees with config.json", () => {
    expect(fails(graphOf({ ...BASE, layers: 3 }), 4)).toBe(
      `structure: the residual stream holds 3 blocks (6 residual Adds, two per pre-norm block) but config.json's num_hidden_layers is 4 (graph style seen: torch-names). ${TAIL}${stream(3).join(", ")}`,
    );
  });

  it("a missing block: one block's MLP cut out of the stream", () => {
    const g = graphOf({ ...BASE, layers: 3 });
    for (const n of g.node!)
      n.input = n.input!.map((i) => (i === "/model/layers.1/Add_1_output_0" ? "/model/layers.1/Add_output_0" : i));
    const cut = stream(3).filter((t) => t !== "/model/layers.1/Add_1_output_0");
    expect(fails(g, 3)).toBe(
      `structure: block 1 is incomplete: residual Add 3 of 5 (/model/layers.1/Add) adds attention with no MLP after it; a block may be missing (graph style seen: torch-names). ${TAIL}${cut.join(", ")}`,
    );
  });

  it("an unknown fused op on the residual stream", () => {
    const g = graphOf(BASE);
    const add = g.node!.find((n) => n.name === "/model/layers.0/Add_1")!;
    Object.assign(add, { opType: "FusedAddRmsNorm", domain: "com.example" });
    for (const n of g.node!) n.name = "";
    expect(fails(g, 2)).toBe(
      `structure: an operator it does not know, com.example.FusedAddRmsNorm, sits on the residual stream after residual Add 1 (graph style seen: anonymous). ${TAIL}${stream(1).slice(0, 2).join(", ")}`,
    );
  });

  it("an unknown fused op in place of a genai Skip norm", () => {
    const g = genaiGraph(3);
    const skip = g.node!.find((n) => n.name === "/model/layers.1/input_layernorm/SkipLayerNorm")!;
    Object.assign(skip, { opType: "SkipGroupRmsNorm", domain: "com.example" });
    expect(fails(g, 3)).toBe(
      `structure: an operator it does not know, com.example.SkipGroupRmsNorm (/model/layers.1/input_layernorm/SkipLayerNorm), sits on the residual stream after residual sum 1 (graph style seen: genai). ${TAIL}/model/embed_tokens/Gather_output_0, ${skipSum(0, "post_attention")}`,
    );
  });

  it("a genai Skip norm that does not emit the residual sum, yet the stream goes on", () => {
    const g = genaiGraph(3);
    const skip = g.node!.find((n) => n.name === "/model/layers.1/input_layernorm/SkipLayerNorm")!;
    const sum = skip.output![3]!;
    skip.output = [skip.output![0]!];
    for (const n of g.node!) n.input = n.input!.map((i) => (i === sum ? skip.output![0]! : i));
    expect(fails(g, 3)).toBe(
      `structure: com.microsoft.SkipSimplifiedLayerNormalization (/model/layers.1/input_layernorm/SkipLayerNorm) gives only its normalized output 0, not the residual sum (output 3), yet the stream goes on after it to com.microsoft.SkipSimplifiedLayerNormalization (/model/layers.1/post_attention_layernorm/SkipLayerNorm) (graph style seen: genai). ${TAIL}/model/embed_tokens/Gather_output_0, ${skipSum(0, "post_attention")}`,
    );
  });

  it("names that disagree with the structure: a warning, and the structure's tensor is used", () => {
    const g = graphOf(BASE);
    // The final norm's last Mul moved out of the norm's scope by name: names now take the Mul before it.
    g.node!.find((n) => n.name === "/model/norm/Mul_1")!.name = "/lm_head/Mul";
    const plan = detectHiddenTensors(g, 2);
    expect(plan.tensors.at(-1)!.tensor).toBe("/model/norm/Mul_1_output_0");
    const note =
      "structure and names disagree on 1 layer(s) (layer 1: structure /model/norm/Mul_1_output_0, names /model/norm/Mul_output_0); the structure's tensors are used";
    expect(plan.warnings).toEqual([note]);
    expect(plan.crossCheck).toBe(note);
  });
});
