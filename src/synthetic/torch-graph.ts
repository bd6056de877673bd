/**
 * The pieces the writers of the families with graphs of their own
 * (learned-positions.ts: GPT-2, OPT; alibi.ts: BLOOM, MPT) build their
 * graphs from, as torch.onnx writes them at opset 17: the graph's inputs and
 * outputs, LayerNorm as one `LayerNormalization`, linear layers as the
 * writer's product and an `Add` of the bias, heads split and merged, a tied
 * LM head, and the seeded draws of their weights. Their KV cache is
 * llama.ts' writeKvCache.
 */
import { DataType, encodeModel, floatTensor, GraphBuilder, valueInfo, type ValueInfoProto } from "../onnx/graph.js";
import { Rng } from "../util/random.js";
import { float32Linear, type GraphVariant, type LinearWriter } from "./llama.js";

/** What every step of a graph shares: the builder, the variant, and the inputs and outputs it collects. */
export interface TorchGraph {
  g: GraphBuilder;
  linear: LinearWriter;
  withPast: boolean;
  present: boolean;
  /** The graph has a `position_ids` input. */
  hasPositions: boolean;
  inputs: ValueInfoProto[];
  outputs: ValueInfoProto[];
  /** A float32 scalar constant `${constants}/${name}`. */
  scalar: (name: string, v: number) => string;
  /** An int64 constant `${constants}/${name}`. */
  i64: (name: string, v: number[], dims?: number[]) => string;
}

/**
 * A new graph: inputs `input_ids`, `attention_mask` and, where `positions`, `position_ids`; output `logits`;
 * shared constants named under `constants` (`/transformer/constants`, `/model/decoder/constants`).
 */
export function startGraph(
  constants: string,
  vocab: number,
  withPast: boolean,
  variant: GraphVariant,
  positions: boolean,
): TorchGraph {
  const g = new GraphBuilder();
  return {
    g,
    linear: variant.linear ?? float32Linear,
    withPast,
    present: variant.present ?? false,
    hasPositions: positions,
    inputs: [
      valueInfo("input_ids", DataType.INT64, ["batch_size", "sequence_length"]),
      valueInfo("attention_mask", DataType.INT64, ["batch_size", "total_sequence_length"]),
      ...(positions ? [valueInfo("position_ids", DataType.INT64, ["batch_size", "sequence_length"])] : []),
    ],
    outputs: [valueInfo("logits", DataType.FLOAT, ["batch_size", "sequence_length", vocab])],
    scalar: (name, v) => g.floats(`${constants}/${name}`, Float32Array.of(v), []),
    i64: (name, v, dims) => g.ints(`${constants}/${name}`, v, dims),
  };
}

/** The encoded model, opset 17, produced by `producer`. */
export function finishGraph(w: TorchGraph, producer: string): Uint8Array {
  return encodeModel({
    irVersion: 8,
    producerName: producer,
    opsetImport: [{ domain: "", version: 17 }],
    graph: { name: "main_graph", node: w.g.nodes, initializer: w.g.initializers, input: w.inputs, output: w.outputs },
  });
}

/**
 * nn.LayerNorm over the last axis under `scope`, its weight and bias named `${prefix}.weight` / `.bias`;
 * without a bias, the zeros `Constant` torch's opset-17 symbolic writes for a LayerNorm whose bias is None.
 */
export function layerNorm(
  w: TorchGraph,
  scope: string,
  x: string,
  prefix: string,
  eps: number,
  weight: Float32Array,
  bias?: Float32Array,
): string {
  const { g } = w;
  const d = weight.length;
  const scale = g.floats(`${prefix}.weight`, weight, [d]);
  const b = bias
    ? g.floats(`${prefix}.bias`, bias, [d])
    : g.op1(scope, "Constant", [], { value: floatTensor("", new Float32Array(d), [d]) });
  return g.op1(scope, "LayerNormalization", [x, scale, b], {
    axis: -1,
    epsilon: { float: eps },
  });
}

/** A linear layer (HuggingFace [out, in] weight): the writer's product, then, where there is one, an Add of the bias. */
export function linearLayer(
  w: TorchGraph,
  scope: string,
  x: string,
  prefix: string,
  weight: Float32Array,
  out: number,
  inp: number,
  bias?: Float32Array,
): string {
  const y = w.linear(w.g, scope, x, `${prefix}.weight`, weight, out, inp);
  return bias ? w.g.op1(scope, "Add", [w.g.floats(`${prefix}.bias`, bias, [out]), y]) : y;
}

/** [B, T, heads·hd] → [B, heads, T, hd]. */
export function splitHeads(w: TorchGraph, scope: string, y: string, heads: number, hd: number): string {
  const shape = w.i64("shape_heads", [0, 0, heads, hd]);
  return w.g.op1(scope, "Transpose", [w.g.op1(scope, "Reshape", [y, shape])], { perm: [0, 2, 1, 3] });
}

/** [B, heads, T, hd] → [B, T, heads·hd]. */
export function mergeHeads(w: TorchGraph, scope: string, y: string, d: number): string {
  const t = w.g.op1(scope, "Transpose", [y], { perm: [0, 2, 1, 3] });
  return w.g.op1(scope, "Reshape", [t, w.i64("shape_merge_heads", [0, 0, d])]);
}

/**
 * The LM head (HuggingFace [V, d] weight) through the writer, its product renamed `logits`. Tied to the token
 * embedding, it still gets its own `lm_head.weight` initializer, a copy in the writer's layout, as exports where
 * tied weights were not deduplicated hold it; quantized writers need a copy of their own anyway.
 */
export function lmHead(w: TorchGraph, x: string, weight: Float32Array, vocab: number, d: number): void {
  const y = w.linear(w.g, "/lm_head", x, "lm_head.weight", weight, vocab, d);
  const node = w.g.nodes.findLast((n) => n.output?.includes(y));
  node!.output = node!.output!.map((o) => (o === y ? "logits" : o));
}

/** Seeded draws by stream: linear weights N(0, 1/in), biases N(0, 0.5), norm weights 1 + N(0, 0.1), norm biases N(0, 0.1). */
export function seededDraws(seed: number) {
  const rng = (stream: number) => new Rng(seed, stream);
  return {
    normal: (stream: number, n: number, scale: number) => rng(stream).fillNormal(new Float32Array(n), scale),
    matrix: (stream: number, out: number, inp: number) =>
      rng(stream).fillNormal(new Float32Array(out * inp), 1 / Math.sqrt(inp)),
    bias: (stream: number, n: number) => rng(stream).fillNormal(new Float32Array(n), 0.5),
    normWeight: (stream: number, n: number) =>
      rng(stream)
        .fillNormal(new Float32Array(n), 0.1)
        .map((x) => 1 + x),
    normBias: (stream: number, n: number) => rng(stream).fillNormal(new Float32Array(n), 0.1),
  };
}
