/**
 * Quantized and float16 variants of the tiny Llama writer, laid out as
 * transformers.js / onnx-community files are:
 *
 * - `q4`: every projection a com.microsoft `MatMulNBits` (4 bits, blocks of 32
 *   along the input dimension, with zero points, or symmetric);
 * - `int8`: `DynamicQuantizeLinear` on the activation → `MatMulInteger` with
 *   int8 weights (one scale per tensor, symmetric) → `Cast` → `Mul` by the two
 *   scales, as onnxruntime's dynamic quantizer writes them;
 * - `nf4`: com.microsoft `MatMulBnb4` (NF4 codes, absmax per block of 64);
 * - `fp16`: every float tensor float16, with `Cast`s at float32 inputs and
 *   outputs (onnxconverter's `keep_io_types`);
 * - `q4f16`: both.
 *
 * Each starts from the same seeded weights as the float32 model; the
 * quantization is deterministic, and {@link dequantizedWeights} returns the
 * weights the graph really multiplies by, for an exact reference.
 */
import { f16ToF32, f32ToF16 } from "../kernels/typescript/float16.js";
import {
  DataType,
  decodeModel,
  encodeModel,
  type GraphProto,
  type ModelProto,
  type TensorProto,
} from "../onnx/graph.js";
import {
  buildLlamaOnnx,
  externalizeWeights,
  float32Linear,
  hfConfigJson,
  type LinearWriter,
  type LlamaConfig,
  type LlamaWeights,
  type ModelFiles,
} from "./llama.js";

/** How the projections are stored. */
export type LinearFormat = "float32" | "int4" | "int4-symmetric" | "int8" | "nf4";

export const Q4_BLOCK = 32;
export const NF4_BLOCK = 64;

/** The 16 NF4 code values (bitsandbytes' table). */
export const NF4_CODES = [
  -1.0, -0.6961928009986877, -0.5250730514526367, -0.39491748809814453, -0.28444138169288635, -0.18477343022823334,
  -0.09105003625154495, 0.0, 0.07958029955625534, 0.16093020141124725, 0.24611230194568634, 0.33791524545097351,
  0.44070982933044434, 0.5626170039176941, 0.7229568362236023, 1.0,
].map(Math.fround);

/** Round half to even, as onnxruntime's quantizers and NumPy round. */
function roundEven(x: number): number {
  const r = Math.round(x);
  return Math.abs(x - Math.trunc(x)) === 0.5 && r % 2 !== 0 ? r - 1 : r;
}

interface Q4 {
  packed: Uint8Array; // [N, blocks, 16]
  scales: Float32Array; // [N * blocks]
  zeros?: Uint8Array; // [N, ceil(blocks / 2)]
  dequantized: Float32Array; // [N, K]
}

/** Blockwise 4-bit quantization of an [N, K] weight along K. */
export function quantizeQ4(w: Float32Array, N: number, K: number, symmetric: boolean): Q4 {
  const blocks = Math.ceil(K / Q4_BLOCK);
  const packed = new Uint8Array(N * blocks * (Q4_BLOCK / 2));
  const scales = new Float32Array(N * blocks);
  const zeros = symmetric ? undefined : new Uint8Array(N * Math.ceil(blocks / 2));
  const dequantized = new Float32Array(N * K);
  for (let n = 0; n < N; n++) {
    for (let b = 0; b < blocks; b++) {
      const k0 = b * Q4_BLOCK;
      const k1 = Math.min(K, k0 + Q4_BLOCK);
      let lo = 0;
      let hi = 0;
      let absMax = 0;
      for (let k = k0; k < k1; k++) {
        const v = w[n * K + k]!;
        lo = Math.min(lo, v);
        hi = Math.max(hi, v);
        if (Math.abs(v) > Math.abs(absMax)) absMax = v;
      }
      let scale: number;
      let zp: number;
      if (symmetric) {
        scale = Math.fround(absMax / -8);
        zp = 8;
      } else {
        scale = Math.fround((hi - lo) / 15);
        zp = scale === 0 ? 8 : Math.min(15, Math.max(0, roundEven(-lo / scale)));
      }
      scales[n * blocks + b] = scale;
      if (zeros) zeros[n * Math.ceil(blocks / 2) + (b >> 1)]! |= zp << ((b & 1) * 4);
      for (let k = k0; k < k1; k++) {
        const q = scale === 0 ? zp : Math.min(15, Math.max(0, roundEven(w[n * K + k]! / scale) + zp));
        const j = k - k0;
        packed[(n * blocks + b) * (Q4_BLOCK / 2) + (j >> 1)]! |= q << ((j & 1) * 4);
        dequantized[n * K + k] = Math.fround((q - zp) * scale);
      }
    }
  }
  return { packed, scales, zeros, dequantized };
}

interface Q8 {
  q: Int8Array; // [K, N], MatMul orientation
  scale: number;
  dequantized: Float32Array; // [N, K]
}

/** Per-tensor symmetric int8 quantization of an [N, K] weight, stored [K, N]. */
export function quantizeQ8(w: Float32Array, N: number, K: number): Q8 {
  let absMax = 0;
  for (const v of w) absMax = Math.max(absMax, Math.abs(v));
  const scale = Math.fround(absMax / 127);
  const q = new Int8Array(N * K);
  const dequantized = new Float32Array(N * K);
  for (let n = 0; n < N; n++) {
    for (let k = 0; k < K; k++) {
      const v = Math.min(127, Math.max(-127, roundEven(w[n * K + k]! / scale)));
      q[k * N + n] = v;
      dequantized[n * K + k] = Math.fround(v * scale);
    }
  }
  return { q, scale, dequantized };
}

interface Nf4 {
  packed: Uint8Array; // [(N*K + 1) / 2], the [N, K] weight flattened, first of a pair in the high nibble
  absmax: Float32Array; // [ceil(N*K / block)]
  dequantized: Float32Array; // [N, K]
}

/** NF4 quantization of an [N, K] weight, flattened in blocks of {@link NF4_BLOCK}. */
export function quantizeNf4(w: Float32Array, N: number, K: number): Nf4 {
  const total = N * K;
  const blocks = Math.ceil(total / NF4_BLOCK);
  const packed = new Uint8Array(Math.ceil(total / 2));
  const absmax = new Float32Array(blocks);
  const dequantized = new Float32Array(total);
  for (let b = 0; b < blocks; b++) {
    const i0 = b * NF4_BLOCK;
    const i1 = Math.min(total, i0 + NF4_BLOCK);
    let m = 0;
    for (let i = i0; i < i1; i++) m = Math.max(m, Math.abs(w[i]!));
    absmax[b] = m;
    for (let i = i0; i < i1; i++) {
      const x = m === 0 ? 0 : w[i]! / m;
      let best = 0;
      for (let c = 1; c < 16; c++) if (Math.abs(NF4_CODES[c]! - x) < Math.abs(NF4_CODES[best]! - x)) best = c;
      packed[i >> 1]! |= (i & 1) === 0 ? best << 4 : best;
      dequantized[i] = Math.fround(NF4_CODES[best]! * absmax[b]!);
    }
  }
  return { packed, absmax, dequantized };
}

function uint8Tensor(name: string, data: Uint8Array, dims: number[]): TensorProto {
  return { name, dataType: 2 /* UINT8 */, dims, rawData: data };
}

function int8Tensor(name: string, data: Int8Array, dims: number[]): TensorProto {
  return { name, dataType: 3 /* INT8 */, dims, rawData: new Uint8Array(data.buffer, data.byteOffset, data.byteLength) };
}

/** The writer of one linear layer in `format`. */
export function linearWriter(format: LinearFormat): LinearWriter {
  if (format === "float32") return float32Linear;
  if (format === "int4" || format === "int4-symmetric") {
    return (g, scope, x, name, weight, out, inp) => {
      const q = quantizeQ4(weight, out, inp, format === "int4-symmetric");
      const blocks = Math.ceil(inp / Q4_BLOCK);
      g.initializers.push(uint8Tensor(`${name}_Q4`, q.packed, [out, blocks, Q4_BLOCK / 2]));
      const inputs = [x, `${name}_Q4`, g.floats(`${name}_scales`, q.scales, [out * blocks])];
      if (q.zeros) {
        g.initializers.push(uint8Tensor(`${name}_zp`, q.zeros, [out * Math.ceil(blocks / 2)]));
        inputs.push(`${name}_zp`);
      }
      const [y] = g.op(scope, "MatMulNBits", inputs, { K: inp, N: out, bits: 4, block_size: Q4_BLOCK });
      g.nodes.at(-1)!.domain = "com.microsoft";
      return y!;
    };
  }
  if (format === "nf4") {
    return (g, scope, x, name, weight, out, inp) => {
      const q = quantizeNf4(weight, out, inp);
      g.initializers.push(uint8Tensor(`${name}_Bnb4`, q.packed, [q.packed.length]));
      const [y] = g.op(
        scope,
        "MatMulBnb4",
        [x, `${name}_Bnb4`, g.floats(`${name}_absmax`, q.absmax, [q.absmax.length])],
        {
          K: inp,
          N: out,
          block_size: NF4_BLOCK,
          quant_type: 1,
        },
      );
      g.nodes.at(-1)!.domain = "com.microsoft";
      return y!;
    };
  }
  // int8: onnxruntime's quantize_dynamic layout.
  return (g, scope, x, name, weight, out, inp) => {
    const q = quantizeQ8(weight, out, inp);
    const [xq, xScale, xZero] = g.op(scope, "DynamicQuantizeLinear", [x], {}, 3);
    g.initializers.push(int8Tensor(`${name}_quantized`, q.q, [inp, out]));
    g.initializers.push(int8Tensor(`${name}_zero_point`, Int8Array.of(0), []));
    const acc = g.op1(scope, "MatMulInteger", [xq!, `${name}_quantized`, xZero!, `${name}_zero_point`]);
    const scale = g.op1(scope, "Mul", [xScale!, g.floats(`${name}_scale`, Float32Array.of(q.scale), [])]);
    return g.op1(scope, "Mul", [g.op1(scope, "Cast", [acc], { to: DataType.FLOAT }), scale]);
  };
}

/** The weights a graph written with `format` multiplies by, in HuggingFace orientation (the LM head stays float32). */
function dequantizedWeights(w: LlamaWeights, format: LinearFormat): LlamaWeights {
  const dq = (m: Float32Array, out: number, inp: number): Float32Array => {
    if (format === "float32") return m;
    if (format === "int8") return quantizeQ8(m, out, inp).dequantized;
    if (format === "nf4") return quantizeNf4(m, out, inp).dequantized;
    return quantizeQ4(m, out, inp, format === "int4-symmetric").dequantized;
  };
  const d = w.norm.length;
  return {
    ...w,
    layers: w.layers.map((l) => {
      const qOut = l.q.length / d;
      const kvOut = l.k.length / d;
      const I = l.gate.length / d;
      return {
        ...l,
        q: dq(l.q, qOut, d),
        k: dq(l.k, kvOut, d),
        v: dq(l.v, kvOut, d),
        o: dq(l.o, d, qOut),
        gate: dq(l.gate, I, d),
        up: dq(l.up, I, d),
        down: dq(l.down, d, I),
      };
    }),
  };
}

const F16_MAX = 65504;

/** A float32 initializer as float16 (values beyond float16's range clamped to ±65504, as onnxconverter does). */
function tensorToFloat16(t: TensorProto): void {
  const raw = t.rawData!;
  const copy = new Uint8Array(raw); // aligned
  const f = new Float32Array(copy.buffer, 0, copy.byteLength / 4).map((v) => Math.max(-F16_MAX, Math.min(F16_MAX, v)));
  const h = new Uint16Array(f.length);
  f32ToF16(f, h);
  t.dataType = DataType.FLOAT16;
  t.rawData = new Uint8Array(h.buffer);
}

/**
 * Converts a float32 graph to float16 in place: float initializers, `Cast`s
 * to float and float value types become float16; float inputs and outputs keep
 * float32 behind `Cast`s, as onnxconverter's `keep_io_types` writes them, or,
 * with `keepIoTypes` false, become float16 too (as CUDA genai builds have them).
 */
export function convertToFloat16(model: ModelProto, keepIoTypes = true): void {
  const graph: GraphProto = model.graph!;
  if (!keepIoTypes) {
    for (const v of [...(graph.input ?? []), ...(graph.output ?? [])])
      if (v.type?.tensorType?.elemType === DataType.FLOAT) v.type.tensorType.elemType = DataType.FLOAT16;
  }
  for (const t of graph.initializer ?? []) if (t.dataType === DataType.FLOAT && t.rawData) tensorToFloat16(t);
  for (const n of graph.node ?? []) {
    for (const a of n.attribute ?? [])
      if (n.opType === "Cast" && a.name === "to" && Number(a.i) === DataType.FLOAT) a.i = DataType.FLOAT16;
    for (const a of n.attribute ?? []) if (a.g) subgraphToFloat16(a.g);
  }
  const casts: NonNullable<GraphProto["node"]> = [];
  for (const v of graph.input ?? []) {
    if (v.type?.tensorType?.elemType !== DataType.FLOAT) continue;
    const inner = `${v.name}_fp16`;
    for (const n of graph.node ?? []) n.input = (n.input ?? []).map((i) => (i === v.name ? inner : i));
    casts.push({
      name: `graph_input_cast_${v.name}`,
      opType: "Cast",
      input: [v.name!],
      output: [inner],
      attribute: [{ name: "to", type: 2, i: DataType.FLOAT16 }],
    });
  }
  const tail: NonNullable<GraphProto["node"]> = [];
  for (const v of graph.output ?? []) {
    if (v.type?.tensorType?.elemType !== DataType.FLOAT) continue;
    const inner = `${v.name}_fp16`;
    for (const n of graph.node ?? []) {
      n.output = (n.output ?? []).map((o) => (o === v.name ? inner : o));
      n.input = (n.input ?? []).map((i) => (i === v.name ? inner : i));
    }
    tail.push({
      name: `graph_output_cast_${v.name}`,
      opType: "Cast",
      input: [inner],
      output: [v.name!],
      attribute: [{ name: "to", type: 2, i: DataType.FLOAT }],
    });
  }
  graph.node = [...casts, ...(graph.node ?? []), ...tail];
  graph.valueInfo = [];
}

/** A subgraph's float32 constants and outputs as float16 (an If choosing constant tables, as LongRoPE's). */
function subgraphToFloat16(graph: GraphProto): void {
  for (const t of graph.initializer ?? []) if (t.dataType === DataType.FLOAT && t.rawData) tensorToFloat16(t);
  for (const n of graph.node ?? []) {
    for (const a of n.attribute ?? []) {
      if (n.opType === "Constant" && a.t?.dataType === DataType.FLOAT && a.t.rawData) tensorToFloat16(a.t);
      if (a.g) subgraphToFloat16(a.g);
    }
  }
  for (const v of graph.output ?? [])
    if (v.type?.tensorType?.elemType === DataType.FLOAT) v.type.tensorType.elemType = DataType.FLOAT16;
}

/** The ONNX bytes of the tiny model in a quantized or float16 style. */
function buildQuantizedOnnx(
  c: LlamaConfig,
  w: LlamaWeights,
  withPast: boolean,
  linear: LinearFormat,
  float16: boolean,
): Uint8Array {
  const model = decodeModel(buildLlamaOnnx(c, w, withPast, { linear: linearWriter(linear) }));
  if (linear !== "float32") model.opsetImport = [...(model.opsetImport ?? []), { domain: "com.microsoft", version: 1 }];
  if (float16) convertToFloat16(model);
  return encodeModel(model);
}

/** The quantized and float16 styles of `hsm make-model`, and the file transformers.js names each. */
export const QUANTIZED_STYLES = {
  q4: { file: "onnx/model_q4.onnx", linear: "int4", float16: false },
  int8: { file: "onnx/model_quantized.onnx", linear: "int8", float16: false },
  nf4: { file: "onnx/model_bnb4.onnx", linear: "nf4", float16: false },
  fp16: { file: "onnx/model_fp16.onnx", linear: "float32", float16: true },
  q4f16: { file: "onnx/model_q4f16.onnx", linear: "int4", float16: true },
} as const satisfies Record<string, { file: string; linear: LinearFormat; float16: boolean }>;
export type QuantizedStyle = keyof typeof QUANTIZED_STYLES;

/**
 * A transformers.js-style folder: `config.json` and the style's graph under
 * `onnx/`; with `chunkBytes`, its weights in `<file>_data`, `<file>_data_1`, ….
 */
export function quantizedFiles(style: QuantizedStyle, withPast: boolean, chunkBytes?: number): ModelFiles {
  const s = QUANTIZED_STYLES[style];
  return (config, weights) => {
    const bytes = buildQuantizedOnnx(config, weights, withPast, s.linear, s.float16);
    if (chunkBytes === undefined)
      return { [s.file]: bytes, "config.json": hfConfigJson(config, withPast, weights.family) };
    const model = decodeModel(bytes);
    const data = externalizeWeights(model, `${s.file}_data`, chunkBytes);
    return { [s.file]: encodeModel(model), ...data, "config.json": hfConfigJson(config, withPast, weights.family) };
  };
}

/**
 * The weights the reference forward pass should use for a style: the
 * dequantized projections, and for float16 graphs every weight rounded to
 * float16 (the graph's own rounding of activations is bounded separately).
 */
export function styleWeights(style: QuantizedStyle, w: LlamaWeights): LlamaWeights {
  const s = QUANTIZED_STYLES[style];
  const dq = dequantizedWeights(w, s.linear);
  return s.float16 ? roundWeightsToFloat16(dq) : dq;
}

function roundToFloat16(a: Float32Array): Float32Array {
  const h = new Uint16Array(a.length);
  f32ToF16(
    a.map((v) => Math.max(-F16_MAX, Math.min(F16_MAX, v))),
    h,
  );
  const out = new Float32Array(a.length);
  f16ToF32(h, out);
  return out;
}

/** Every weight rounded to float16, as a float16 graph holds it. */
export function roundWeightsToFloat16(w: LlamaWeights): LlamaWeights {
  return {
    ...w,
    embed: roundToFloat16(w.embed),
    norm: roundToFloat16(w.norm),
    lmHead: roundToFloat16(w.lmHead),
    layers: w.layers.map(
      (l) =>
        Object.fromEntries(Object.entries(l).map(([k, v]) => [k, roundToFloat16(v)])) as LlamaWeights["layers"][number],
    ),
  };
}
