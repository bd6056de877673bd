/**
 * The states leave the extraction graph as float16 (the graph casts them) or, on WebGPU, as float32 rounded on the
 * host. Both must give the same bits: the host's rounding is checked against onnxruntime's own Cast on edge values
 * (ties, subnormals, overflow, NaN), and a graph rewritten both ways against itself on the CPU. Which graphs need
 * float16 arithmetic (WebGPU's `shader-f16`) is read from every export style.
 */
import { join } from "node:path";

import * as ort from "onnxruntime-node";
import { beforeAll, describe, expect, it } from "vitest";

import { inspectModel } from "../../src/extract/extract.js";
import { leftPad, rightPad } from "../../src/model/batching.js";
import { promptFeeds } from "../../src/model/feeds.js";
import { openModelDir } from "../../src/model/model-dir.js";
import { hiddenBits, hiddenOutputType } from "../../src/model/hidden-output.js";
import { DataType, encodeModel, loadModel, usesFloat16, valueInfo } from "../../src/onnx/graph.js";
import { HIDDEN_OUTPUT, rewriteForExtraction } from "../../src/onnx/rewrite.js";
import { writeModelInStyle } from "../../src/synthetic/export-styles.js";
import { tempDir } from "../helpers/tmp.js";

const dir = tempDir("hsm-hidden-output-");
const GEOMETRY = { layers: 2, hidden: 32, heads: 4, kvHeads: 2, intermediate: 48, seed: 41 };
const STYLES = ["plain", "with-past", "merged", "genai", "genai-fp16", "q4", "int8", "fp16", "q4f16"] as const;

beforeAll(async () => {
  for (const style of STYLES) await writeModelInStyle(join(dir, style), style, GEOMETRY);
});

/** Float32 values where rounding to float16 is easy to get wrong. */
function edgeValues(): Float32Array {
  const v: number[] = [0, -0, 1, -1, Infinity, -Infinity, NaN, 65504, 65519.996, 65520, -65520, 1e-8, -1e-8];
  // Exact ties between neighbouring float16 values (even and odd lower neighbours) and their float32 neighbours.
  for (const base of [1, 1 + 2 ** -10, 2 ** -14, 2 ** -24, 3 * 2 ** -24, 1000, 2 ** -20]) {
    const spacing = base >= 2 ** -14 ? 2 ** (Math.floor(Math.log2(base)) - 10) : 2 ** -24;
    const tie = Math.fround(base + spacing / 2);
    v.push(tie, -tie, nextFloat32(tie, 1), nextFloat32(tie, -1));
  }
  // Every binade float16 covers, and below it, at random mantissas.
  let seed = 7;
  const random = () => (seed = (seed * 1103515245 + 12345) % 2 ** 31) / 2 ** 31;
  for (let e = -30; e <= 17; e++)
    for (let k = 0; k < 40; k++) v.push((random() < 0.5 ? -1 : 1) * 2 ** e * (1 + random()));
  return Float32Array.from(v);
}

/** The float32 next to `x` towards ±infinity (`direction` ±1). */
function nextFloat32(x: number, direction: 1 | -1): number {
  const f = Float32Array.of(x);
  const u = new Uint32Array(f.buffer);
  u[0]! += x >= 0 === direction > 0 ? 1 : -1;
  return f[0]!;
}

/** onnxruntime's CPU Cast of `values` to float16: the bits the graph writes on the CPU. */
async function ortCast(values: Float32Array): Promise<Uint16Array> {
  const n = values.length;
  const model = encodeModel({
    irVersion: 8,
    opsetImport: [{ domain: "", version: 17 }],
    graph: {
      name: "cast",
      node: [
        { opType: "Cast", input: ["x"], output: ["y"], attribute: [{ name: "to", type: 2, i: DataType.FLOAT16 }] },
      ],
      input: [valueInfo("x", DataType.FLOAT, [n])],
      output: [valueInfo("y", DataType.FLOAT16, [n])],
    },
  });
  const session = await ort.InferenceSession.create(model);
  const out = (await session.run({ x: new ort.Tensor("float32", values, [n]) })).y!;
  await session.release();
  return out.data as Uint16Array;
}

describe("float16 rounding on the host", () => {
  it("gives the bits onnxruntime's Cast gives, ties, subnormals, overflow and NaN included", async () => {
    const values = edgeValues();
    const host = hiddenBits(new ort.Tensor("float32", values, [values.length]));
    const graph = await ortCast(values);
    const differing = [...values.keys()].filter((i) => host[i] !== graph[i] && !Number.isNaN(values[i]));
    expect(differing.map((i) => [values[i], host[i], graph[i]])).toEqual([]);
    // NaN stays NaN (its payload may differ): exponent all ones, mantissa not zero.
    const nan = values.findIndex((x) => Number.isNaN(x));
    expect([host[nan]! & 0x7c00, host[nan]! & 0x3ff]).toEqual([0x7c00, expect.any(Number)]);
    expect(host[nan]! & 0x3ff).not.toBe(0);
  });

  it("passes float16 outputs through untouched", () => {
    const bits = Uint16Array.of(0x3c00, 0x7bff, 0x8001);
    expect(hiddenBits(new ort.Tensor("float16", bits, [3]))).toBe(bits);
  });

  it("is what WebGPU gets, the CPU and CUDA keeping the graph's own Cast", () => {
    expect([hiddenOutputType("webgpu"), hiddenOutputType("cpu"), hiddenOutputType("cuda")]).toEqual([
      DataType.FLOAT,
      DataType.FLOAT16,
      DataType.FLOAT16,
    ]);
  });

  it.each(["plain", "merged", "q4"] as const)(
    "%s: a graph rewritten to hand out float32 stores the bits of the one that casts in the graph",
    async (style) => {
      const bits = async (type: typeof DataType.FLOAT | typeof DataType.FLOAT16) => {
        const { inspection, model } = await inspectModel(join(dir, style), { layerRule: "l >= 0" });
        const tensors = inspection.plan.tensors;
        const mask = inspection.promptPadding === "right" ? "attention_mask" : undefined;
        const { bytes } = rewriteForExtraction(model, tensors, inspection.dModel, undefined, mask, type);
        const session = await ort.InferenceSession.create(bytes);
        const live = new Set(session.inputNames);
        const feeds = inspection.plan.inputs.feeds.filter((f) => live.has(f.name));
        const prompts = [
          [5, 17, 3, 99, 42, 7, 8, 1000, 12],
          [300, 301],
          [64, 65, 66, 67, 68],
        ];
        const padded = (mask ? rightPad : leftPad)(prompts, 0);
        const out = (await session.run(promptFeeds(feeds, padded), [HIDDEN_OUTPUT]))[HIDDEN_OUTPUT]!;
        await session.release();
        expect(out.type).toBe(type === DataType.FLOAT ? "float32" : "float16");
        return hiddenBits(out);
      };
      const host = await bits(DataType.FLOAT);
      expect(host.length).toBe(3 * 2 * 32);
      expect(host).toEqual(await bits(DataType.FLOAT16));
    },
  );
});

describe("graphs that need float16 arithmetic", () => {
  it.each(STYLES)("%s", async (style) => {
    const graph = (await loadModel((await openModelDir(join(dir, style))).onnxPath)).graph!;
    expect(usesFloat16(graph)).toBe(["genai-fp16", "fp16", "q4f16"].includes(style));
  });
});
