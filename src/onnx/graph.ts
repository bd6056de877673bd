/**
 * ONNX protobuf in and out (through onnx-proto), and the few graph helpers the
 * runner needs: consumers and producers of tensors, a builder for new nodes,
 * and dead-node elimination.
 */

import onnxProto from "onnx-proto";

import { HsmError } from "../errors.js";
import { readInput } from "../util/fs.js";

export const { onnx } = onnxProto as unknown as { onnx: typeof import("onnx-proto").onnx };
export type ModelProto = import("onnx-proto").onnx.ModelProto;
export type GraphProto = import("onnx-proto").onnx.IGraphProto;
export type NodeProto = import("onnx-proto").onnx.INodeProto;
export type TensorProto = import("onnx-proto").onnx.ITensorProto;
export type ValueInfoProto = import("onnx-proto").onnx.IValueInfoProto;

export const DataType = { FLOAT: 1, INT32: 6, INT64: 7, BOOL: 9, FLOAT16: 10, DOUBLE: 11, BFLOAT16: 16 } as const;

/** protobufjs hands int64 fields back as Long objects; everything here wants numbers. */
export function num(x: unknown): number {
  if (typeof x === "number") return x;
  if (typeof x === "bigint") return Number(x);
  if (x && typeof (x as { toNumber?: () => number }).toNumber === "function")
    return (x as { toNumber: () => number }).toNumber();
  return Number(x);
}

export async function loadModel(path: string): Promise<ModelProto> {
  return decodeModel(await readInput(path, { follow: true }));
}

/** Decodes model bytes; tensor payloads stay views into `bytes`, not copies. */
export function decodeModel(bytes: Uint8Array): ModelProto {
  return onnx.ModelProto.decode(bytes);
}

export function encodeModel(model: import("onnx-proto").onnx.IModelProto): Uint8Array {
  return onnx.ModelProto.encode(model).finish();
}

/** The declared shape of a value: numbers for fixed dimensions, names (or "?") for symbolic ones. */
export function valueShape(v: ValueInfoProto): (number | string)[] | undefined {
  const dims = v.type?.tensorType?.shape?.dim;
  if (!dims) return undefined;
  return dims.map((d) =>
    d.dimValue !== undefined && d.dimValue !== null && num(d.dimValue) > 0 ? num(d.dimValue) : d.dimParam || "?",
  );
}

export function valueInfo(name: string, elemType: number, dims: (number | string)[]): ValueInfoProto {
  return {
    name,
    type: {
      tensorType: {
        elemType,
        shape: { dim: dims.map((d) => (typeof d === "number" ? { dimValue: d } : { dimParam: d })) },
      },
    },
  };
}

type AttrValue = number | number[] | string | { float: number } | { floats: number[] } | TensorProto;

function attribute(name: string, v: AttrValue): import("onnx-proto").onnx.IAttributeProto {
  const T = onnx.AttributeProto.AttributeType;
  if (typeof v === "number") return { name, type: T.INT, i: v };
  if (typeof v === "string") return { name, type: T.STRING, s: new TextEncoder().encode(v) };
  if (Array.isArray(v)) return { name, type: T.INTS, ints: v };
  if ("float" in v) return { name, type: T.FLOAT, f: v.float };
  if ("floats" in v) return { name, type: T.FLOATS, floats: v.floats };
  return { name, type: T.TENSOR, t: v };
}

export function int64Tensor(name: string, values: number[], dims: number[] = [values.length]): TensorProto {
  const data = new BigInt64Array(values.map((v) => BigInt(v)));
  return { name, dataType: DataType.INT64, dims, rawData: new Uint8Array(data.buffer) };
}

/** The values of an int64 tensor (an initializer, a Constant's value), undefined when it is not one. */
export function int64Values(t: TensorProto | undefined): number[] | undefined {
  if (!t || t.dataType !== DataType.INT64) return undefined;
  if (t.int64Data?.length) return t.int64Data.map(num);
  const raw = t.rawData;
  // A copy: decoded bytes may be a view into a larger buffer (a Node Buffer), at any offset.
  return raw && raw.length % 8 === 0 ? Array.from(new BigInt64Array(new Uint8Array(raw).buffer), Number) : undefined;
}

export function floatTensor(name: string, values: Float32Array, dims: number[]): TensorProto {
  return {
    name,
    dataType: DataType.FLOAT,
    dims,
    rawData: new Uint8Array(values.buffer, values.byteOffset, values.byteLength),
  };
}

/** The version of the default ONNX domain (`""`, also written `ai.onnx`) that `model` imports; 0 where none. */
export function defaultOpset(model: Pick<ModelProto, "opsetImport">): number {
  return num((model.opsetImport ?? []).find((o) => !o.domain || o.domain === "ai.onnx")?.version ?? 0);
}

/**
 * The first default-domain opset in which an operator the builder may add computes what hsm asks of it: where it
 * was introduced, where it began to take int64 (Min), or its bounds as inputs (Slice).
 */
const OPERATOR_SINCE: Readonly<Record<string, number>> = {
  Expand: 8,
  Slice: 10,
  Where: 9,
  GatherElements: 11,
  Range: 11,
  Min: 12,
  CastLike: 15,
};

/** The first default-domain opset in which `opType` takes its axes as an input instead of an `axes` attribute. */
function axesInputSince(opType: string): number {
  return opType.startsWith("Reduce") && opType !== "ReduceSum" ? 18 : 13;
}

/** An operator the graph's default-domain opset does not have in the form a rewrite needs; `file`, the graph's. */
export class OpsetError extends HsmError {
  constructor(
    readonly opset: number,
    readonly opType: string,
    readonly since: number,
    readonly file?: string,
  ) {
    super(
      `${file ? `${file}: ` : ""}the graph imports default-domain opset ${opset}, and hsm's rewrite needs ` +
        `${opType} of opset ${since} or later; export the model with opset ${since} or later`,
    );
  }

  /** The same error, naming the graph's file. */
  in(file: string): OpsetError {
    return new OpsetError(this.opset, this.opType, this.since, file);
  }
}

/**
 * Appends nodes to a graph with torch-export-style names: a node `scope/Op`
 * (numbered `Op_1`, `Op_2`… on repeats) whose outputs are `scope/Op_output_0`….
 * `opset` is the default-domain opset of the graph the nodes go into (see
 * {@link defaultOpset}; the synthetic writers' 17 where none is given): an
 * operator it lacks is an {@link OpsetError}, and {@link alongAxes} writes
 * the form it takes.
 */
export class GraphBuilder {
  readonly nodes: NodeProto[] = [];
  readonly initializers: TensorProto[] = [];
  private readonly used = new Map<string, number>();

  constructor(
    private readonly taken: Set<string> = new Set(),
    readonly opset = 17,
  ) {}

  private uniqueName(scope: string, op: string): string {
    const base = `${scope}/${op}`;
    for (;;) {
      const k = this.used.get(base) ?? 0;
      this.used.set(base, k + 1);
      const name = k === 0 ? base : `${base}_${k}`;
      if (!this.taken.has(name)) {
        this.taken.add(name);
        return name;
      }
    }
  }

  /** Adds a node and returns its output names. */
  op(scope: string, opType: string, inputs: string[], attrs: Record<string, AttrValue> = {}, outputs = 1): string[] {
    const since = OPERATOR_SINCE[opType] ?? 0;
    if (this.opset < since) throw new OpsetError(this.opset, opType, since);
    const name = this.uniqueName(scope, opType);
    const outs = Array.from({ length: outputs }, (_, i) => `${name}_output_${i}`);
    this.nodes.push({
      name,
      opType,
      input: inputs,
      output: outs,
      attribute: Object.entries(attrs).map(([k, v]) => attribute(k, v)),
    });
    return outs;
  }

  /** One-output shorthand. */
  op1(scope: string, opType: string, inputs: string[], attrs: Record<string, AttrValue> = {}): string {
    return this.op(scope, opType, inputs, attrs)[0]!;
  }

  /**
   * `opType` (Unsqueeze, Squeeze, a Reduce…) of `x` along `axes`, in the form the builder's opset takes: the axes
   * as an input, the int64 constant `name`, from the opset that made them one (13 for Unsqueeze, Squeeze and
   * ReduceSum, 18 for the other reductions), else as the attribute `axes`.
   */
  alongAxes(
    scope: string,
    opType: string,
    x: string,
    axes: number[],
    name: string,
    attrs: Record<string, AttrValue> = {},
  ): string {
    return this.opset >= axesInputSince(opType)
      ? this.op1(scope, opType, [x, this.ints(name, axes)], attrs)
      : this.op1(scope, opType, [x], { ...attrs, axes });
  }

  private readonly constants = new Set<string>();

  /** An int64 constant initializer; asking again for the same name reuses it. */
  ints(name: string, values: number[], dims?: number[]): string {
    if (!this.constants.has(name)) {
      this.constants.add(name);
      this.initializers.push(int64Tensor(name, values, dims ?? [values.length]));
    }
    return name;
  }

  /** A float32 initializer; asking again for the same name reuses it. */
  floats(name: string, values: Float32Array, dims: number[]): string {
    if (!this.constants.has(name)) {
      this.constants.add(name);
      this.initializers.push(floatTensor(name, values, dims));
    }
    return name;
  }
}

/** Which node produces each tensor, and which nodes consume it. */
export function graphIndex(graph: GraphProto): {
  producer: Map<string, NodeProto>;
  consumers: Map<string, NodeProto[]>;
} {
  const producer = new Map<string, NodeProto>();
  const consumers = new Map<string, NodeProto[]>();
  for (const node of graph.node ?? []) {
    for (const o of node.output ?? []) if (o) producer.set(o, node);
    for (const i of node.input ?? []) {
      if (!i) continue;
      let list = consumers.get(i);
      if (!list) consumers.set(i, (list = []));
      list.push(node);
    }
  }
  return { producer, consumers };
}

/**
 * Keeps only what the graph's outputs depend on: nodes, initializers, inputs
 * and value infos that nothing needed reads are removed.
 */
export function pruneGraph(graph: GraphProto): { removedNodes: number } {
  const { producer } = graphIndex(graph);
  const needed = new Set<string>();
  const keep = new Set<NodeProto>();
  const stack = (graph.output ?? []).map((o) => o.name!);
  while (stack.length) {
    const t = stack.pop()!;
    if (needed.has(t)) continue;
    needed.add(t);
    const p = producer.get(t);
    if (p && !keep.has(p)) {
      keep.add(p);
      for (const i of p.input ?? []) if (i) stack.push(i);
      // Subgraphs (If/Loop bodies) may read outer tensors by name.
      for (const a of p.attribute ?? []) {
        for (const g of [a.g, ...(a.graphs ?? [])])
          if (g) for (const n of g.node ?? []) for (const i of n.input ?? []) if (i) stack.push(i);
      }
    }
  }
  const before = graph.node?.length ?? 0;
  graph.node = (graph.node ?? []).filter((n) => keep.has(n));
  graph.initializer = (graph.initializer ?? []).filter((t) => needed.has(t.name!));
  graph.input = (graph.input ?? []).filter((v) => needed.has(v.name!));
  graph.valueInfo = (graph.valueInfo ?? []).filter((v) => needed.has(v.name!));
  return { removedNodes: before - graph.node.length };
}

/**
 * Drops every node's trailing empty inputs, in subgraphs too. ONNX reads an empty name as an optional input left
 * out, so the graph means the same; onnxruntime 1.30 crashes the process loading a `LayerNormalization` whose bias
 * is written as `""` (torch.onnx.export writes one for a layer norm without a bias). True where any was dropped.
 */
export function trimEmptyInputs(graph: GraphProto): boolean {
  let trimmed = false;
  for (const node of graph.node ?? []) {
    const inputs = node.input ?? [];
    let n = inputs.length;
    while (n > 0 && !inputs[n - 1]) n--;
    if (n < inputs.length) {
      node.input = inputs.slice(0, n);
      trimmed = true;
    }
    for (const a of node.attribute ?? [])
      for (const g of [a.g, ...(a.graphs ?? [])]) if (g && trimEmptyInputs(g)) trimmed = true;
  }
  return trimmed;
}

/** Initializer `t`'s external-data entry `key` (`location`, `offset`, `length`), or undefined. */
export function externalDataEntry(t: TensorProto, key: "location" | "offset" | "length"): string | undefined {
  return t.externalData?.find((e) => e.key === key)?.value ?? undefined;
}

/** Points initializer `t` at `length` bytes at `offset` of the external-data file `location` (its raw bytes dropped). */
export function pointToExternalData(t: TensorProto, location: string, offset: number, length: number): void {
  t.rawData = new Uint8Array(0);
  t.dataLocation = 1; // EXTERNAL
  t.externalData = [
    { key: "location", value: location },
    { key: "offset", value: String(offset) },
    { key: "length", value: String(length) },
  ];
}

/**
 * Whether a graph holds float16 tensors anywhere: weights, inputs, outputs, declared values, constants or casts to
 * float16, in subgraphs too. Such a graph needs a device with float16 arithmetic (WebGPU's `shader-f16`).
 */
export function usesFloat16(graph: GraphProto): boolean {
  const half = (t: number | null | undefined) => t === DataType.FLOAT16;
  const values = [...(graph.input ?? []), ...(graph.output ?? []), ...(graph.valueInfo ?? [])];
  return (
    (graph.initializer ?? []).some((t) => half(t.dataType)) ||
    values.some((v) => half(v.type?.tensorType?.elemType)) ||
    (graph.node ?? []).some((n) =>
      (n.attribute ?? []).some(
        (a) =>
          (a.name === "to" && half(num(a.i))) ||
          half(a.t?.dataType) ||
          (a.g ? usesFloat16(a.g) : false) ||
          (a.graphs ?? []).some(usesFloat16),
      ),
    )
  );
}
