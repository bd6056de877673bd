/**
 * Generation's LM head outside onnxruntime. A float32 head read from the
 * model is prepared once (transposed, rounded to bfloat16 for screening:
 * src/kernels/types.ts `prepareHead`) into SharedArrayBuffers that every
 * decoding thread reads; each step's next tokens are then the exact argmax of
 * the float64 logits (`headArgmax`), for a fraction of a float32 product's
 * arithmetic and half its memory traffic.
 */
import { allocateHead } from "../kernels/head.js";
import type { HeadKernels } from "../kernels/default.js";
import type { PreparedHead } from "../kernels/types.js";
import { fileError, openInput } from "../util/fs.js";
import { ModelDirError } from "../model/model-dir.js";
import { externalFile } from "../model/external-data.js";
import { externalDataEntry, num, type TensorProto } from "../onnx/graph.js";

/** A prepared head as decoding threads receive it (plain data: its arrays live in SharedArrayBuffers). */
export interface HeadSetup {
  head: PreparedHead;
  d: number;
  vocab: number;
  /** Threads of each call. */
  threads: number;
}

/** Prepares the head whose weight `[d, vocab]` is `t`, an initializer of the model at `modelDir` (raw bytes, float_data, or external data). */
export async function prepareHead(
  kernels: HeadKernels,
  t: TensorProto,
  modelDir: string,
  threads: number,
): Promise<HeadSetup> {
  const d = num(t.dims![0]);
  const vocab = num(t.dims![1]);
  const w = await float32Values(t, d * vocab, modelDir);
  const head = allocateHead(d, vocab, true);
  kernels.prepareHead(w, d, vocab, head);
  return { head, d, vocab, threads };
}

/** The `count` values of float32 initializer `t`, wherever the model keeps them. */
async function float32Values(t: TensorProto, count: number, modelDir: string): Promise<Float32Array> {
  const raw = t.rawData;
  if (raw && raw.length > 0) {
    if (raw.length !== count * 4)
      throw new ModelDirError(
        modelDir,
        `initializer ${t.name} holds ${raw.length} bytes where its shape needs ${count * 4}`,
      );
    if (raw.byteOffset % 4 === 0) return new Float32Array(raw.buffer, raw.byteOffset, count);
    const out = new Float32Array(count);
    new Uint8Array(out.buffer).set(raw);
    return out;
  }
  if (t.floatData && t.floatData.length === count) return Float32Array.from(t.floatData);
  const { path, offset } = externalFile(t, modelDir, count * 4);
  const location = externalDataEntry(t, "location")!;
  const out = new Float32Array(count);
  let fh;
  try {
    fh = (await openInput(path, { follow: true })).fh;
  } catch (err) {
    throw fileError(err, path);
  }
  try {
    const bytes = new Uint8Array(out.buffer);
    for (let done = 0; done < bytes.length;) {
      const { bytesRead } = await fh.read(bytes, done, bytes.length - done, offset + done);
      if (bytesRead === 0)
        throw new ModelDirError(
          modelDir,
          `${location} ends before initializer ${t.name}'s ${count * 4} bytes at offset ${offset}`,
        );
      done += bytesRead;
    }
  } finally {
    await fh.close();
  }
  return out;
}
