/**
 * A float16 graph widened to float32 (src/onnx/widen.ts), run on the CPU: a small graph with float16 weights held
 * every way ONNX holds them (raw bytes at an odd offset, `int32_data`, an external file), a float16 input and
 * output, a Cast to float16, and an If whose branches hold a float16 constant and declare float16 outputs. Widened,
 * no float16 is left anywhere, and onnxruntime computes what float32 arithmetic on the same float16 weights gives,
 * within float32 rounding; the graph as it was rounds to float16 and does not.
 */
import * as ort from "onnxruntime-node";
import { describe, expect, it } from "vitest";

import { f16ToF32, f32ToF16 } from "../../src/kernels/typescript/float16.js";
import { DataType, encodeModel, usesFloat16, valueInfo, type TensorProto } from "../../src/onnx/graph.js";
import { widenFloat16 } from "../../src/onnx/widen.js";
import { FLOAT32_ROUNDING } from "../tolerances.js";

const ROWS = 2;
const K = 4;
const N = 3;
const F16 = DataType.FLOAT16;
type Model = Parameters<typeof encodeModel>[0];

/** `n` values in [-1, 1] rounded to float16: their bits, and the numbers they denote. */
function halves(n: number, seed: number): { bits: Uint16Array; values: Float32Array } {
  const raw = Float32Array.from({ length: n }, (_, i) => Math.sin(seed * 12.9898 + i * 78.233) * 0.999);
  const bits = new Uint16Array(n);
  f32ToF16(raw, bits);
  const values = new Float32Array(n);
  f16ToF32(bits, values);
  return { bits, values };
}

const W = halves(K * N, 1);
const B = halves(N, 2);
const E = halves(N, 3);
const X = halves(ROWS * K, 4);
const Z = Float32Array.from({ length: ROWS * N }, (_, i) => 0.1 + 0.37 * i);
const TWO = 2;

/** Little-endian bytes of float16 bits. */
const bytesOf = (bits: Uint16Array) =>
  new Uint8Array(bits.buffer.slice(bits.byteOffset, bits.byteOffset + bits.byteLength));

/**
 * The float16 graph: y = If(cond, 2·s, s) with s = x·W + B + E + float16(z), each float16 held in a way of its
 * own; E in an external file, or inline where onnxruntime is to load the graph as it is.
 */
function float16Model(external = true): Model {
  // W's bytes at an odd offset of a larger buffer, as a decoded file's initializers sit.
  const padded = new Uint8Array(1 + K * N * 2);
  padded.set(bytesOf(W.bits), 1);
  const w: TensorProto = { name: "W", dataType: F16, dims: [K, N], rawData: padded.subarray(1) };
  const b: TensorProto = { name: "B", dataType: F16, dims: [N], int32Data: Array.from(B.bits) };
  const inline: TensorProto = { name: "E", dataType: F16, dims: [N], rawData: bytesOf(E.bits) };
  const e: TensorProto = !external
    ? inline
    : {
        name: "E",
        dataType: F16,
        dims: [N],
        dataLocation: 1,
        externalData: [
          { key: "location", value: "weights.bin" },
          { key: "offset", value: "0" },
          { key: "length", value: String(N * 2) },
        ],
      };
  const two = new Uint16Array(1);
  f32ToF16(Float32Array.of(TWO), two);
  const branch = (name: string, doubled: boolean) => ({
    name,
    node: doubled
      ? [
          {
            opType: "Constant",
            output: ["two"],
            attribute: [{ name: "value", type: 4, t: { dataType: F16, dims: [], rawData: bytesOf(two) } }],
          },
          { opType: "Mul", input: ["s", "two"], output: [`${name}_out`] },
        ]
      : [{ opType: "Identity", input: ["s"], output: [`${name}_out`] }],
    output: [valueInfo(`${name}_out`, F16, [ROWS, N])],
  });
  return {
    irVersion: 8,
    opsetImport: [{ domain: "", version: 17 }],
    graph: {
      name: "float16",
      node: [
        { opType: "MatMul", input: ["x", "W"], output: ["xw"] },
        { opType: "Add", input: ["xw", "B"], output: ["xwb"] },
        { opType: "Add", input: ["xwb", "E"], output: ["xwbe"] },
        { opType: "Cast", input: ["z"], output: ["z16"], attribute: [{ name: "to", type: 2, i: F16 }] },
        { opType: "Add", input: ["xwbe", "z16"], output: ["s"] },
        {
          opType: "If",
          input: ["cond"],
          output: ["y"],
          attribute: [
            { name: "then_branch", type: 5, g: branch("then", true) },
            { name: "else_branch", type: 5, g: branch("else", false) },
          ],
        },
      ],
      initializer: [w, b, e, { name: "cond", dataType: DataType.BOOL, dims: [], rawData: Uint8Array.of(1) }],
      input: [valueInfo("x", F16, [ROWS, K]), valueInfo("z", DataType.FLOAT, [ROWS, N])],
      output: [valueInfo("y", F16, [ROWS, N])],
      valueInfo: [valueInfo("s", F16, [ROWS, N])],
    },
  };
}

/** Every float16 left in a model: element and data types, and type attributes, wherever they sit. */
function float16Left(value: unknown, path = "model"): string[] {
  if (typeof value !== "object" || value === null || ArrayBuffer.isView(value)) return [];
  const found: string[] = [];
  const v = value as Record<string, unknown>;
  for (const key of ["elemType", "dataType"]) if (v[key] === F16) found.push(`${path}.${key}`);
  if ((v.name === "to" || v.name === "dtype") && Number(v.i) === F16) found.push(`${path}.i`);
  for (const [k, child] of Object.entries(v)) found.push(...float16Left(child, `${path}.${k}`));
  return found;
}

/** Runs a model on the CPU with x (as float16 bits or float32) and z; y as float32. */
async function run(model: Model, xAsFloat16: boolean): Promise<Float32Array> {
  const session = await ort.InferenceSession.create(encodeModel(model));
  try {
    const x = xAsFloat16
      ? new ort.Tensor("float16", X.bits, [ROWS, K])
      : new ort.Tensor("float32", X.values, [ROWS, K]);
    const y = (await session.run({ x, z: new ort.Tensor("float32", Z, [ROWS, N]) })).y!;
    if (y.type === "float32") return y.data as Float32Array;
    const out = new Float32Array(y.size);
    f16ToF32(y.data as Uint16Array, out);
    return out;
  } finally {
    await session.release();
  }
}

/**
 * y in float64 from the float16 values, and a bound on float32 arithmetic's error in each element: a product and
 * each of the K + 2 additions (and the doubling, which is exact) round once, each by at most 2^-24 of a partial
 * sum no larger than the sum of the magnitudes; twice that for the inputs z rounded to float32 and slack.
 */
function expected(): { want: Float64Array; bound: Float64Array } {
  const want = new Float64Array(ROWS * N);
  const bound = new Float64Array(ROWS * N);
  for (let r = 0; r < ROWS; r++) {
    for (let j = 0; j < N; j++) {
      let s = B.values[j]! + E.values[j]! + Z[r * N + j]!;
      let magnitude = Math.abs(B.values[j]!) + Math.abs(E.values[j]!) + Math.abs(Z[r * N + j]!);
      for (let k = 0; k < K; k++) {
        s += X.values[r * K + k]! * W.values[k * N + j]!;
        magnitude += Math.abs(X.values[r * K + k]! * W.values[k * N + j]!);
      }
      want[r * N + j] = TWO * s;
      bound[r * N + j] = TWO * 2 * (2 * K + 3) * FLOAT32_ROUNDING * magnitude;
    }
  }
  return { want, bound };
}

describe("widenFloat16", () => {
  it("leaves no float16 anywhere, subgraphs included, and reads external weights through its callback", () => {
    const model = float16Model();
    expect(usesFloat16(model.graph!)).toBe(true);
    const asked: string[] = [];
    const widened = widenFloat16(model, (t) => {
      asked.push(t.name!);
      return bytesOf(E.bits);
    });
    expect(asked).toEqual(["E"]);
    // W, B, E and the then-branch's constant: 4·(12 + 3 + 3 + 1) bytes.
    expect(widened).toEqual({ tensors: 4, bytes: 4 * (K * N + N + N + 1) });
    expect(float16Left(model)).toEqual([]);
    expect(usesFloat16(model.graph!)).toBe(false);
    const e = model.graph!.initializer!.find((t) => t.name === "E")!;
    expect([e.dataLocation, e.externalData]).toEqual([0, []]);
  });

  it("computes on the CPU what float32 arithmetic on the float16 weights gives, which the float16 graph does not", async () => {
    const { want, bound } = expected();
    const model = float16Model();
    widenFloat16(model, () => bytesOf(E.bits));
    const widened = await run(model, false);
    widened.forEach((got, i) => expect(Math.abs(got - want[i]!), `y[${i}]`).toBeLessThanOrEqual(bound[i]!));
    // The graph as it was rounds every value to float16: well beyond float32's bound on some element.
    const original = await run(float16Model(false), true);
    expect(Math.max(...Array.from(original, (got, i) => Math.abs(got - want[i]!) / bound[i]!))).toBeGreaterThan(10);
  });
});
