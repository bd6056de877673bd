/**
 * The LM head's weight as generation reads it from the model: stored in the
 * graph or in an external-data file, which must lie inside the model folder,
 * as onnxruntime also requires.
 */
import { mkdirSync, writeFileSync } from "node:fs";
import { join } from "node:path";

import { describe, expect, it } from "vitest";

import { FileError } from "../../src/errors.js";
import { typescriptKernels } from "../../src/kernels/typescript/index.js";
import { ModelDirError } from "../../src/model/model-dir.js";
import { prepareHead } from "../../src/generate/lm-head.js";
import { floatTensor, type TensorProto } from "../../src/onnx/graph.js";
import { Rng } from "../../src/util/random.js";
import { tempDir } from "../helpers/tmp.js";

const d = 8;
const vocab = 5;
const values = new Rng(3).fillNormal(new Float32Array(d * vocab));

/** The head's weight as an external-data reference. */
function external(location: string, offset = 0, length: number | undefined = values.byteLength): TensorProto {
  return {
    name: "lm_head.weight",
    dataType: 1,
    dims: [d, vocab],
    dataLocation: 1,
    externalData: [
      { key: "location", value: location },
      { key: "offset", value: String(offset) },
      ...(length === undefined ? [] : [{ key: "length", value: String(length) }]),
    ],
  };
}

describe("the LM head's weight", () => {
  const dir = tempDir();
  const model = join(dir, "model");
  mkdirSync(join(model, "data"), { recursive: true });
  // Eight bytes of something else first, so that the offset is honoured.
  writeFileSync(join(model, "data", "weights.bin"), Buffer.concat([Buffer.alloc(8, 0xee), Buffer.from(values.buffer)]));
  writeFileSync(join(dir, "outside.bin"), Buffer.from(values.buffer));

  it("is read from an external-data file inside the model folder, at its offset, the same as from the graph", async () => {
    const inGraph = await prepareHead(typescriptKernels, floatTensor("lm_head.weight", values, [d, vocab]), model, 1);
    const fromFile = await prepareHead(typescriptKernels, external("data/weights.bin", 8), model, 1);
    expect(fromFile.d).toBe(d);
    expect(fromFile.vocab).toBe(vocab);
    expect(Array.from(fromFile.head.hi)).toEqual(Array.from(inGraph.head.hi));
    expect(Array.from(fromFile.head.lo)).toEqual(Array.from(inGraph.head.lo));
    expect(Array.from(fromFile.head.norms)).toEqual(Array.from(inGraph.head.norms));
  });

  it.each([["../outside.bin"], [join(dir, "outside.bin")], ["data/../../outside.bin"]])(
    "refuses external data at %s, outside the model folder",
    async (location) => {
      await expect(prepareHead(typescriptKernels, external(location), model, 1)).rejects.toThrow(ModelDirError);
      await expect(prepareHead(typescriptKernels, external(location), model, 1)).rejects.toThrow(
        /outside the model folder/,
      );
    },
  );

  it("names a missing external-data file", async () => {
    const err = await prepareHead(typescriptKernels, external("data/missing.bin"), model, 1).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(FileError);
    expect((err as Error).message).toBe(`${join(model, "data", "missing.bin")}: does not exist`);
  });

  it("refuses a recorded length that disagrees with the shape, and a file that ends too soon", async () => {
    await expect(prepareHead(typescriptKernels, external("data/weights.bin", 8, 12), model, 1)).rejects.toThrow(
      /12 bytes of external data where its shape needs 160/,
    );
    await expect(prepareHead(typescriptKernels, external("data/weights.bin", 16, undefined), model, 1)).rejects.toThrow(
      /ends before initializer lm_head\.weight's 160 bytes at offset 16/,
    );
  });
});
