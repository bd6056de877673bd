/**
 * Rewrites an exported decoder so that only what is stored leaves the session:
 * the chosen hidden tensors are gathered at the last position, stacked and cast
 * to float16 inside the graph — one `[B, n_layers, d]` output — and every node
 * that output does not depend on (the LM head, the KV-cache outputs) is removed.
 * Where the device may lack float16 arithmetic (WebGPU without `shader-f16`),
 * the output is cast to float32 instead and the host rounds it to float16.
 */
import {
  DataType,
  defaultOpset,
  encodeModel,
  GraphBuilder,
  graphIndex,
  int64Values,
  num,
  pointToExternalData,
  pruneGraph,
  valueInfo,
  type GraphProto,
  type ModelProto,
  type NodeProto,
} from "./graph.js";

export const HIDDEN_OUTPUT = "hsm_hidden_states";

/** Where the stored state of one layer comes from: the graph tensor holding that block's output. */
export interface HiddenTensor {
  layer: number;
  tensor: string;
  /** How it was found, in words, for `inspect-model` and the manifest. */
  how: string;
}

export interface RewriteResult {
  bytes: Uint8Array;
  removedNodes: number;
  keptNodes: number;
}

/**
 * Rewrites `model` in place and returns its encoding. `tensors` are in
 * stored-layer order. When `source` (the bytes `model` was decoded from) is
 * given, every large initializer is turned into an external-data reference to
 * its own bytes inside the original file (named `source.name` where the session
 * loads), so the rewritten model is a few kilobytes and no weight is copied.
 * `outputType` is the element type of the output: float16, or float32 for the
 * host to round (a float32 graph's states then leave it as computed).
 */
export function rewriteForExtraction(
  model: ModelProto,
  tensors: HiddenTensor[],
  dModel: number,
  source?: { bytes: Uint8Array; name: string },
  rightPaddedMask?: string,
  outputType: typeof DataType.FLOAT16 | typeof DataType.FLOAT = DataType.FLOAT16,
): RewriteResult {
  const graph = model.graph!;
  const taken = new Set((graph.node ?? []).map((n) => n.name!).filter(Boolean));
  const g = new GraphBuilder(taken, defaultOpset(model));
  const probe = rightPaddedMask === undefined ? lastPosition(g) : lastRealToken(g, rightPaddedMask, dModel);
  const asRows = rowsOf(g, graph, dModel);
  const rows = tensors.map((t) => {
    const scope = `/hsm/layer.${t.layer}`;
    return probe(asRows(t.tensor, scope), scope);
  });
  const stacked = rows.length === 1 ? rows[0]! : g.op1("/hsm", "Concat", rows, { axis: 1 });
  g.nodes.push({
    name: "/hsm/Cast",
    opType: "Cast",
    input: [stacked],
    output: [HIDDEN_OUTPUT],
    attribute: [{ name: "to", type: 2, i: outputType }],
  });
  graph.node = [...(graph.node ?? []), ...g.nodes];
  graph.initializer = [...(graph.initializer ?? []), ...g.initializers];
  const original = graph.output ?? [];
  graph.output = [valueInfo(HIDDEN_OUTPUT, outputType, ["batch_size", tensors.length, dModel])];
  const { removedNodes } = pruneGraph(graph);
  // A node kept for the states keeps its other graph outputs (GroupQueryAttention's
  // `present.*`): left dangling, onnxruntime's planner may write such an output
  // in place into an input's buffer of another shape (the empty past) and fail.
  const produced = new Set(graph.node!.flatMap((n) => n.output ?? []));
  graph.output.push(...original.filter((v) => produced.has(v.name!)));
  if (rightPaddedMask === undefined) gatherBeforeTail(graph, tensors.at(-1)!.tensor, g);
  if (source) externalizeInitializers(graph, source.bytes, source.name);
  return { bytes: encodeModel(model), removedNodes, keptNodes: graph.node.length };
}

/**
 * Each stored tensor as `[B, T, d]`: a Reshape to `[B, −1, d]`, B from `input_ids`, which leaves a `[B, T, d]`
 * tensor as it is and unflattens a `[B·T, d]` one (OPT's residual stream around its MLPs). Graphs without an
 * `input_ids` input keep their tensors as they are.
 */
function rowsOf(g: GraphBuilder, graph: GraphProto, dModel: number): (tensor: string, scope: string) => string {
  if (!(graph.input ?? []).some((v) => v.name === "input_ids")) return (tensor) => tensor;
  const S = "/hsm/rows";
  const batch = g.op1(S, "Gather", [g.op1(S, "Shape", ["input_ids"]), g.ints("/hsm/constants/batch_axis", [0])], {
    axis: 0,
  });
  const shape = g.op1(S, "Concat", [batch, g.ints("/hsm/constants/rows_rest", [-1, dModel])], { axis: 0 });
  return (tensor, scope) => g.op1(scope, "Reshape", [tensor, shape]);
}

/** Left padding: every row's last real token is the last position; `[B, T, d]` → `[B, 1, d]`. */
function lastPosition(g: GraphBuilder): (tensor: string, scope: string) => string {
  const last = g.ints("/hsm/constants/last_position", [-1], []);
  return (tensor, scope) => unsqueezed1(g, scope, g.op1(scope, "Gather", [tensor, last], { axis: 1 }));
}

/** `[B, d]` → `[B, 1, d]`. */
function unsqueezed1(g: GraphBuilder, scope: string, x: string): string {
  return g.alongAxes(scope, "Unsqueeze", x, [1], "/hsm/constants/axes_1");
}

/**
 * Right padding: row b's last real token is at sum(mask_b) − 1, gathered per
 * row (GatherElements over positions with that index repeated across d);
 * `[B, T, d]` → `[B, 1, d]`.
 */
function lastRealToken(g: GraphBuilder, mask: string, dModel: number): (tensor: string, scope: string) => string {
  const S = "/hsm/probe";
  const count = g.alongAxes(S, "ReduceSum", mask, [1], "/hsm/constants/axes_1", { keepdims: 1 }); // [B, 1]
  const index = g.op1(S, "Sub", [count, g.ints("/hsm/constants/one", [1], [])]);
  const index3 = g.alongAxes(S, "Unsqueeze", index, [2], "/hsm/constants/axes_2"); // [B, 1, 1]
  const spread = g.op1(S, "Expand", [index3, g.ints("/hsm/constants/shape_1_1_d", [1, 1, dModel])]); // [B, 1, d]
  return (tensor, scope) => g.op1(scope, "GatherElements", [tensor, spread], { axis: 1 });
}

const QUANTIZED_MATMULS = new Set(["MatMulNBits", "MatMulBnb4"]);
/** Operators that may flatten a tensor: what they make may hold its positions on another axis than 1. */
const FLATTENING = new Set(["Reshape", "Flatten", "Squeeze"]);

/** Operators that act on every position alone, given constant operands of rank ≤ 1 (see gatherBeforeTail). */
const ELEMENTWISE = new Set([
  "Add",
  "Sub",
  "Mul",
  "Div",
  "Pow",
  "Sqrt",
  "Reciprocal",
  "Neg",
  "Sigmoid",
  "Tanh",
  "Erf",
  "Relu",
  "Softplus",
  "Cast",
  "Identity",
]);

/** Which node makes each tensor and which read it (see graphIndex). */
type GraphIndex = ReturnType<typeof graphIndex>;

/** Which tensors of a graph are constant, and which nodes treat each position alone. */
interface TailTests {
  /** Constant tensors: initializers, Constant nodes, and what elementwise operators compute from them alone. */
  constant: (t: string) => boolean;
  /** Whether a node is position-wise (see {@link gatherBeforeTail}). */
  positionWise: (n: NodeProto) => boolean;
}

/** The constant and position-wise tests over `graph`, the constants' ranks remembered as they are found. */
function tailTests(graph: GraphProto, producer: Map<string, NodeProto>): TailTests {
  const initializers = new Map((graph.initializer ?? []).map((t) => [t.name!, t]));
  // Constant tensors (initializers, Constant nodes, and what elementwise operators compute from them alone) and their ranks.
  const ranks = new Map<string, number>();
  const constant = (t: string): boolean => {
    if (ranks.has(t)) return ranks.get(t)! >= 0;
    const init = initializers.get(t);
    const p = producer.get(t);
    ranks.set(t, -1); // not constant, unless shown below
    if (init) ranks.set(t, init.dims?.length ?? 0);
    else if (p?.opType === "Constant") ranks.set(t, constantRank(p));
    else if (
      p &&
      (!p.domain || p.domain === "ai.onnx") &&
      ELEMENTWISE.has(p.opType!) &&
      (p.input ?? []).every((i) => !i || constant(i))
    ) {
      ranks.set(t, Math.max(0, ...(p.input ?? []).filter(Boolean).map((i) => ranks.get(i)!)));
    }
    return ranks.get(t)! >= 0;
  };
  const rank = (t: string) => (constant(t) ? ranks.get(t)! : Infinity);
  const positionWise = (n: NodeProto): boolean => {
    const ins = (n.input ?? []).filter(Boolean);
    const attr = (name: string) => n.attribute?.find((a) => a.name === name);
    // 4-bit weight-only quantized MatMuls: the activation is the only non-constant input.
    if (n.domain === "com.microsoft" && QUANTIZED_MATMULS.has(n.opType!))
      return !constant(ins[0]!) && ins.slice(1).every(constant);
    if (n.domain && n.domain !== "ai.onnx") return false;
    if (n.opType === "MatMul")
      return ins.length === 2 && !constant(ins[0]!) && constant(ins[1]!) && rank(ins[1]!) === 2;
    if (ELEMENTWISE.has(n.opType!))
      return ins.every((t) => !constant(t) || rank(t) <= 1) && ins.some((t) => !constant(t));
    if (n.opType === "ReduceMean") {
      // Opset 18 moved the axes from an attribute to an input.
      const axes = ins.length === 2 ? int64Values(initializers.get(ins[1]!)) : attr("axes")?.ints?.map(num);
      return (
        !constant(ins[0]!) &&
        axes?.length === 1 &&
        (axes[0] === -1 || axes[0] === 2) &&
        num(attr("keepdims")?.i ?? 1) === 1
      );
    }
    if (n.opType === "SimplifiedLayerNormalization" || n.opType === "LayerNormalization") {
      return (
        num(attr("axis")?.i ?? -1) === -1 &&
        !constant(ins[0]!) &&
        ins.slice(1).every((t) => constant(t) && rank(t) <= 1)
      );
    }
    return false;
  };
  return { constant, positionWise };
}

/**
 * The position-wise tail ending in `last`'s producer, grown backwards while a
 * producer's outputs are read only inside it; undefined when `last` cannot start one.
 */
function positionWiseTail(
  graph: GraphProto,
  last: string,
  index: GraphIndex,
  tests: TailTests,
): Set<NodeProto> | undefined {
  const { producer, consumers } = index;
  const outputs = new Set((graph.output ?? []).map((o) => o.name!));
  const { positionWise } = tests;
  const tail = new Set<NodeProto>();
  const start = producer.get(last);
  const onlyProbes = (o: string) =>
    !outputs.has(o) && (consumers.get(o) ?? []).every((c) => o === last && c.name!.startsWith("/hsm/"));
  if (!start || !positionWise(start) || !(start.output ?? []).every(onlyProbes)) return undefined;
  tail.add(start);
  for (let grown = true; grown;) {
    grown = false;
    for (const n of tail) {
      for (const t of n.input ?? []) {
        const p = t ? producer.get(t) : undefined;
        if (!p || tail.has(p) || !positionWise(p)) continue;
        const readInside = (p.output ?? []).every(
          (o) => !outputs.has(o) && (consumers.get(o) ?? []).every((c) => tail.has(c)),
        );
        if (readInside) {
          tail.add(p);
          grown = true;
        }
      }
    }
  }
  return tail;
}

/**
 * Gathers each activation entering `tail` at the last position, right after
 * the node making it, rewires the tail to read the gathered tensors, and drops
 * the tail's declared shapes.
 */
function gatherEntering(
  graph: GraphProto,
  tail: Set<NodeProto>,
  index: GraphIndex,
  tests: TailTests,
  g: GraphBuilder,
): void {
  const nodes = graph.node ?? [];
  const { producer } = index;
  const entering = new Map<string, string>();
  for (const n of tail) {
    for (const t of n.input ?? []) {
      if (!t || tests.constant(t) || tail.has(producer.get(t)!) || entering.has(t)) continue;
      entering.set(t, "");
    }
  }
  const lastIndex = g.ints("/hsm/constants/last_position", [-1], []);
  const after = new Map<NodeProto | undefined, NodeProto[]>();
  for (const t of entering.keys()) {
    const scope = `/hsm/tail`;
    const before = g.nodes.length;
    const gathered = unsqueezed1(g, scope, g.op1(scope, "Gather", [t, lastIndex], { axis: 1 }));
    entering.set(t, gathered);
    const made = g.nodes.splice(before);
    const p = producer.get(t);
    after.set(p, [...(after.get(p) ?? []), ...made]);
  }
  for (const n of tail) n.input = (n.input ?? []).map((t) => entering.get(t) || t);
  // Kept in topological order: each Gather right after the node making its input (graph inputs: first).
  graph.node = [...(after.get(undefined) ?? []), ...nodes.flatMap((n) => [n, ...(after.get(n) ?? [])])];
  graph.initializer = [
    ...(graph.initializer ?? []),
    ...g.initializers.filter((t) => !(graph.initializer ?? []).includes(t)),
  ];
  // Declared shapes of the tail's tensors (their length is now 1) are dropped.
  const inside = new Set([...tail].flatMap((n) => n.output ?? []));
  graph.valueInfo = (graph.valueInfo ?? []).filter((v) => !inside.has(v.name!));
}

/**
 * Moves the last-position Gather of the last stored tensor up through the
 * position-wise tail that ends in it — in a decoder, the last block's
 * attention output projection, residual add, MLP, and the final norm — so
 * that tail runs on one position per row instead of every position (about a
 * twelfth of a 12-block model's work). Those nodes treat each position alone,
 * so the states are the same computation; only the MatMuls' row counts
 * change. The tail is grown backwards from the tensor: a node joins when it
 * is position-wise (a MatMul by a constant matrix, float or 4-bit, an elementwise operator
 * with constants of rank ≤ 1, a mean or norm over the last axis) and all its
 * outputs are read only inside the tail. The activations entering the tail
 * are gathered at the last position. Left padding only; where nothing
 * qualifies the graph is left as it was.
 */
function gatherBeforeTail(graph: GraphProto, last: string, g: GraphBuilder): void {
  const index = graphIndex(graph);
  const tests = tailTests(graph, index.producer);
  const tail = positionWiseTail(graph, last, index, tests);
  if (!tail) return;
  // Only worth it where a MatMul joined; the activations entering the tail are gathered where they are made.
  if (![...tail].some((n) => n.opType === "MatMul" || QUANTIZED_MATMULS.has(n.opType!))) return;
  // Gathered on axis 1, the entering activations must be [B, T, …]: one a reshape makes may be flattened.
  const entering = [...tail].flatMap((n) => (n.input ?? []).filter((t) => t && !tests.constant(t)));
  if (
    entering.some((t) => {
      const p = index.producer.get(t);
      return p !== undefined && !tail.has(p) && FLATTENING.has(p.opType ?? "") && !keepsRank3(p, graph, index);
    })
  )
    return;
  gatherEntering(graph, tail, index, tests, g);
}

/**
 * Whether a reshape surely leaves at least three axes: a Reshape to a constant shape of three or more entries,
 * or to a shape concatenated from three or more parts (torch's `view(B, T, -1)`).
 */
function keepsRank3(n: NodeProto, graph: GraphProto, index: GraphIndex): boolean {
  if (n.opType !== "Reshape") return false;
  const shape = n.input?.[1];
  if (!shape) return false;
  const init = (graph.initializer ?? []).find((t) => t.name === shape);
  if (init) return num(init.dims?.[0] ?? 0) >= 3;
  const p = index.producer.get(shape);
  if (p?.opType === "Constant") return constantRank(p) === 1 && num(p.attribute?.[0]?.t?.dims?.[0] ?? 0) >= 3;
  return p?.opType === "Concat" && (p.input ?? []).length >= 3;
}

/** The rank of a Constant node's value (a tensor, or a scalar/list form). */
function constantRank(n: NodeProto): number {
  const a = n.attribute?.[0];
  if (a?.t) return a.t.dims?.length ?? 0;
  if (a?.name === "value_float" || a?.name === "value_int" || a?.name === "value_string") return 0;
  return 1;
}

/** Points a model's large initializers at their bytes in the file it was decoded from (see rewriteForExtraction). */
export function rewriteWeightsInPlace(model: ModelProto, source: Uint8Array, name: string): void {
  externalizeInitializers(model.graph!, source, name);
}

/** Points initializers whose raw bytes lie inside `source` at those bytes, by offset. */
function externalizeInitializers(graph: NonNullable<ModelProto["graph"]>, source: Uint8Array, name: string): void {
  for (const t of graph.initializer ?? []) {
    const raw = t.rawData;
    if (!raw || raw.length < 4096 || raw.buffer !== source.buffer) continue;
    const offset = raw.byteOffset - source.byteOffset;
    if (offset < 0 || offset + raw.length > source.length) continue;
    pointToExternalData(t, name, offset, raw.length);
  }
}

/**
 * The naive alternative, kept for benchmarks: block outputs added as graph
 * outputs beside everything else (`logits` included), full `[B, T, d]` each.
 */
export function addHiddenOutputs(model: ModelProto, tensors: HiddenTensor[]): Uint8Array {
  const graph = model.graph!;
  graph.output = [
    ...(graph.output ?? []),
    ...tensors.map((t) => valueInfo(t.tensor, DataType.FLOAT, ["batch_size", "sequence_length", "d_model"])),
  ];
  return encodeModel(model);
}
