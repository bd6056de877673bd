/**
 * The element type the extraction graph hands its states out in, and their float16 bits. On the CPU and CUDA the
 * graph casts them to float16 itself; on WebGPU it hands out float32 and the host rounds them (the native core's
 * conversion, round to nearest even as onnxruntime's Cast does): an adapter without `shader-f16` cannot run a
 * float16 Cast, and the output is a few kilobytes a batch, so the round trip costs nothing measurable.
 */
import type * as ort from "onnxruntime-node";

import { InternalError } from "../errors.js";
import { storeKernels } from "../kernels/default.js";
import { DataType } from "../onnx/graph.js";
import type { Device } from "./session.js";

/** The element type of the extraction graph's output on `device`. */
export function hiddenOutputType(device: Device): typeof DataType.FLOAT16 | typeof DataType.FLOAT {
  return device === "webgpu" ? DataType.FLOAT : DataType.FLOAT16;
}

/** The float16 bits of the extraction graph's output: as they came, or rounded here from float32. */
export function hiddenBits(out: ort.Tensor): Uint16Array {
  if (out.type === "float16") return out.data as Uint16Array;
  if (out.type !== "float32") throw new InternalError(`the rewritten model returned ${out.type} states`);
  const data = out.data as Float32Array;
  const bits = new Uint16Array(data.length);
  storeKernels().f32ToF16(data, bits);
  return bits;
}
