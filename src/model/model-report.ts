/**
 * What `hsm inspect-model` reports about a graph beyond its hidden states: the
 * dtype it computes in, the format of its weights, and how each stored tensor
 * was found (structure, names, graph outputs, or given).
 *
 * The compute dtype is the type the matrix products run in: the element type
 * of the float weights MatMul/Gemm read, or, for quantized products, of their
 * scales (MatMulNBits, MatMulBnb4); failing both, the graph's float outputs.
 * The weight format is read from the operators: MatMulNBits (int4, or int8
 * with bits 8), DynamicQuantizeLinear → MatMulInteger (int8), MatMulBnb4 (nf4,
 * or fp4 with quant_type 0), and otherwise the float type of the weights.
 */
import type { GraphProto, NodeProto } from "../onnx/graph.js";
import type { HiddenTensor } from "./styles/style.js";

/** The names hsm uses for ONNX element types. */
const ELEMENT_TYPES: Record<number, string> = {
  1: "float32",
  2: "uint8",
  3: "int8",
  6: "int32",
  7: "int64",
  9: "bool",
  10: "float16",
  11: "float64",
  16: "bfloat16",
};
const FLOATS = new Set(["float32", "float16", "bfloat16", "float64"]);

export interface GraphFormat {
  /** The dtype the matrix products compute in. */
  dtype: string;
  /** The weight format: float32, float16, bfloat16, int4, int8, nf4 (fp4 for MatMulBnb4 in FP4 mode). */
  weights: string;
  /**
   * True when the graph quantizes activations with one scale per tensor
   * (`DynamicQuantizeLinear`): a row's result then depends on the other rows
   * of its batch and on padding, so such graphs run one row at a time.
   */
  batchDependent: boolean;
}

/** How a stored tensor was found. */
export type TensorMethod = "structure" | "names" | "graph outputs" | "given";

const METHOD_OF_STYLE: Record<string, TensorMethod> = {
  explicit: "given",
  "graph-outputs": "graph outputs",
  "torch-names": "names",
  genai: "names",
};

/** The method behind a located tensor: its own `method` where the style records one, else the style's. */
export function tensorMethod(strategy: string, tensor: HiddenTensor): TensorMethod | string {
  return (tensor as HiddenTensor & { method?: string }).method ?? METHOD_OF_STYLE[strategy] ?? "structure";
}

function mostCommon(values: string[]): string | undefined {
  const counts = new Map<string, number>();
  for (const v of values) counts.set(v, (counts.get(v) ?? 0) + 1);
  return [...counts].sort((a, b) => b[1] - a[1])[0]?.[0];
}

function intAttribute(node: NodeProto, name: string): number | undefined {
  const a = (node.attribute ?? []).find((x) => x.name === name);
  return a?.i === undefined || a.i === null ? undefined : Number(a.i);
}

/** The compute dtype and weight format of a graph. */
export function graphFormat(graph: GraphProto): GraphFormat {
  const initType = new Map(
    (graph.initializer ?? []).map((t) => [t.name!, ELEMENT_TYPES[t.dataType ?? 0] ?? `type ${t.dataType}`]),
  );
  const nodes = graph.node ?? [];
  const ops = (...types: string[]) => nodes.filter((n) => types.includes(n.opType ?? ""));
  const typeOf = (name: string | undefined) => (name ? initType.get(name) : undefined);

  const floatWeights = ops("MatMul", "Gemm").flatMap((n) =>
    (n.input ?? [])
      .slice(0, 2)
      .map(typeOf)
      .filter((t): t is string => !!t && FLOATS.has(t)),
  );
  const nbits = ops("MatMulNBits");
  const bnb4 = ops("MatMulBnb4");
  const scales = [...nbits, ...bnb4].map((n) => typeOf(n.input?.[2])).filter((t): t is string => !!t && FLOATS.has(t));
  const outputs = (graph.output ?? [])
    .map((v) => ELEMENT_TYPES[v.type?.tensorType?.elemType ?? 0])
    .filter((t): t is string => !!t && FLOATS.has(t));
  const dtype = mostCommon(floatWeights) ?? mostCommon(scales) ?? mostCommon(outputs) ?? "float32";

  let weights: string;
  if (nbits.length > 0) weights = (intAttribute(nbits[0]!, "bits") ?? 4) === 8 ? "int8" : "int4";
  else if (bnb4.length > 0) weights = intAttribute(bnb4[0]!, "quant_type") === 0 ? "fp4" : "nf4";
  else if (ops("MatMulInteger", "DynamicQuantizeLinear", "QLinearMatMul").length > 0) weights = "int8";
  else weights = mostCommon(floatWeights) ?? dtype;
  return { dtype, weights, batchDependent: ops("DynamicQuantizeLinear").length > 0 };
}
