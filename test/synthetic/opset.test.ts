/**
 * The tiny model moved to opset 11 and 12 (as torch.onnx.export writes the same graph there): the moved graph
 * declares the opset, holds no operator in a form of a later one, and computes bit for bit the logits of the
 * graph it was moved from.
 */
import { readFileSync } from "node:fs";
import { join } from "node:path";

import * as ort from "onnxruntime-node";
import { describe, expect, it } from "vitest";

import { writeTinyModel } from "../../src/synthetic/llama.js";
import { writeAtOpset } from "../../src/synthetic/opset.js";
import { decodeModel, defaultOpset } from "../../src/onnx/graph.js";
import { tempDir } from "../helpers/tmp.js";

const dir = tempDir("hsm-opset-");
const SMALL = { layers: 2, hidden: 32, heads: 4, kvHeads: 2, tokenizer: "llama3.1-1k", seed: 5 } as const;

/** The logits of the graph in `file` over three rows of four tokens, the last row left-padded by one. */
async function logits(file: string): Promise<Float32Array> {
  const session = await ort.InferenceSession.create(file);
  const ints = (v: number[]) => new ort.Tensor("int64", BigInt64Array.from(v, BigInt), [3, 4]);
  const feeds: Record<string, ort.Tensor> = {
    input_ids: ints([5, 17, 3, 99, 42, 7, 8, 100, 0, 300, 301, 302]),
    attention_mask: ints([1, 1, 1, 1, 1, 1, 1, 1, 0, 1, 1, 1]),
    position_ids: ints([0, 1, 2, 3, 0, 1, 2, 3, 0, 0, 1, 2]),
  };
  const out = await session.run(Object.fromEntries(session.inputNames.map((n) => [n, feeds[n]!])));
  await session.release();
  return out.logits!.data as Float32Array;
}

describe("writeAtOpset", () => {
  for (const opset of [11, 12] as const) {
    for (const positionIds of [true, false]) {
      it(`opset ${opset}${positionIds ? "" : ", no position_ids"}: the same logits, in the opset's forms`, async () => {
        const [original, moved] = ["original", "moved"].map((k) => join(dir, `${k}-${opset}-${positionIds}`));
        for (const d of [original!, moved!]) await writeTinyModel(d, { ...SMALL, positionIds });
        await writeAtOpset(moved!, opset);
        const model = decodeModel(readFileSync(join(moved!, "model.onnx")));
        expect(defaultOpset(model)).toBe(opset);
        const nodes = model.graph!.node!;
        for (const n of nodes.filter((n) => ["Unsqueeze", "Squeeze", "ReduceSum", "Split"].includes(n.opType!)))
          expect(n.input, n.name!).toHaveLength(1);
        if (opset < 12) expect(nodes.some((n) => n.opType === "LessOrEqual")).toBe(false);
        expect(await logits(join(moved!, "model.onnx"))).toEqual(await logits(join(original!, "model.onnx")));
      });
    }
  }
});
