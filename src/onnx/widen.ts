/**
 * A float16 graph widened to float32, for devices that cannot run float16 arithmetic (a WebGPU adapter without
 * `shader-f16`): every float16 weight, constant, declared value, cast and type attribute becomes float32, in
 * subgraphs and model-local functions too. The widened graph computes the same operators on the same weights
 * (each float16 value is exactly a float32 one), only without rounding every activation to float16: it gives
 * what the float16 graph would give with float32 arithmetic. Its inputs and outputs that were float16 are
 * float32 too: the caller feeds and reads them as float32.
 */
import { storeKernels } from "../kernels/default.js";
import { DataType, num, type GraphProto, type NodeProto, type TensorProto } from "./graph.js";

type TypeProto = NonNullable<NonNullable<GraphProto["input"]>[number]["type"]>;
type AttributeProto = NonNullable<NodeProto["attribute"]>[number];

/** Reads the bytes of a float16 initializer kept in an external-data file. */
export type ExternalBytes = (t: TensorProto) => Uint8Array;

/** What {@link widenFloat16} changed: tensors widened, and the bytes they now hold inline. */
export interface Widened {
  tensors: number;
  bytes: number;
}

/** Attributes that name an element type: Cast's `to`, the `dtype` of EyeLike and the random generators. */
const TYPE_ATTRIBUTES = new Set(["to", "dtype"]);

/**
 * Rewrites every float16 of `model` to float32, in place (see the file's comment). Float16 initializers held in
 * external-data files are read with `external` and widened inline.
 */
export function widenFloat16(model: import("onnx-proto").onnx.IModelProto, external: ExternalBytes): Widened {
  const done: Widened = { tensors: 0, bytes: 0 };
  if (model.graph) widenGraph(model.graph, external, done);
  for (const f of model.functions ?? []) for (const n of f.node ?? []) widenNode(n, external, done);
  return done;
}

function widenGraph(graph: GraphProto, external: ExternalBytes, done: Widened): void {
  for (const t of graph.initializer ?? []) widenTensor(t, external, done);
  for (const s of graph.sparseInitializer ?? []) if (s.values) widenTensor(s.values, external, done);
  for (const v of [...(graph.input ?? []), ...(graph.output ?? []), ...(graph.valueInfo ?? [])])
    if (v.type) widenType(v.type);
  for (const n of graph.node ?? []) widenNode(n, external, done);
}

function widenNode(node: NodeProto, external: ExternalBytes, done: Widened): void {
  for (const a of node.attribute ?? []) widenAttribute(a, external, done);
}

function widenAttribute(a: AttributeProto, external: ExternalBytes, done: Widened): void {
  if (TYPE_ATTRIBUTES.has(a.name ?? "") && a.i !== undefined && a.i !== null && num(a.i) === DataType.FLOAT16)
    a.i = DataType.FLOAT;
  if (a.t) widenTensor(a.t, external, done);
  for (const t of a.tensors ?? []) widenTensor(t, external, done);
  if (a.sparseTensor?.values) widenTensor(a.sparseTensor.values, external, done);
  for (const s of a.sparseTensors ?? []) if (s.values) widenTensor(s.values, external, done);
  if (a.g) widenGraph(a.g, external, done);
  for (const g of a.graphs ?? []) widenGraph(g, external, done);
  if (a.tp) widenType(a.tp);
  for (const tp of a.typeProtos ?? []) widenType(tp);
}

function widenType(type: TypeProto): void {
  const tensor = type.tensorType ?? type.sparseTensorType;
  if (tensor && tensor.elemType === DataType.FLOAT16) tensor.elemType = DataType.FLOAT;
  if (type.sequenceType?.elemType) widenType(type.sequenceType.elemType);
  if (type.optionalType?.elemType) widenType(type.optionalType.elemType);
  if (type.mapType?.valueType) widenType(type.mapType.valueType);
}

/** A float16 tensor's bits, wherever it keeps them: raw bytes, `int32_data` (one value each), or an external file. */
function float16Bits(t: TensorProto, external: ExternalBytes): Uint16Array {
  if (t.dataLocation === 1) return bitsOf(external(t));
  if (t.rawData && t.rawData.length > 0) return bitsOf(t.rawData);
  return Uint16Array.from(t.int32Data ?? [], (v) => v & 0xffff);
}

/**
 * Little-endian float16 bits from bytes at any offset, copied: a Uint16Array view needs an even offset (and a
 * Buffer's `slice` would not copy).
 */
function bitsOf(bytes: Uint8Array): Uint16Array {
  const copy = new Uint8Array(bytes.length);
  copy.set(bytes);
  return new Uint16Array(copy.buffer, 0, bytes.length >> 1);
}

function widenTensor(t: TensorProto, external: ExternalBytes, done: Widened): void {
  if (t.dataType !== DataType.FLOAT16) return;
  const bits = float16Bits(t, external);
  const values = new Float32Array(bits.length);
  // Exact either way; the native core converts a large graph's weights in a fraction of the time.
  storeKernels().f16ToF32(bits, values);
  t.dataType = DataType.FLOAT;
  t.rawData = new Uint8Array(values.buffer);
  t.int32Data = [];
  t.dataLocation = 0;
  t.externalData = [];
  done.tensors++;
  done.bytes += values.byteLength;
}
