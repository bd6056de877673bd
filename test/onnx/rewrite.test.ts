/**
 * The extraction rewrite's position-wise tail: the last stored tensor's
 * last-position Gather moves up before the last block's output projection,
 * MLP and final norm, so they run on one position per row. Checked by the
 * graph it writes, and by its states against the unrewritten graph's full
 * [B, T, d] block outputs read at the last position.
 */
import { join } from "node:path";

import * as ort from "onnxruntime-node";
import { beforeAll, describe, expect, it } from "vitest";

import { f16BitsToNumber, f32ToF16 } from "../../src/kernels/typescript/float16.js";
import { writeModelInStyle } from "../../src/synthetic/export-styles.js";
import { leftPad } from "../../src/model/batching.js";
import { inspectModel } from "../../src/extract/extract.js";
import { promptFeeds } from "../../src/model/feeds.js";
import { decodeModel, loadModel, type ModelProto } from "../../src/onnx/graph.js";
import { addHiddenOutputs, HIDDEN_OUTPUT, rewriteForExtraction } from "../../src/onnx/rewrite.js";
import { FLOAT16_RELATIVE } from "../tolerances.js";
import { tempDir } from "../helpers/tmp.js";

const dir = tempDir("hsm-rewrite-");
const GEOMETRY = { layers: 3, hidden: 32, heads: 4, kvHeads: 2, intermediate: 48, seed: 31 };
const MODELS = {
  llama: { style: "plain", family: "llama" },
  gemma: { style: "plain", family: "gemma" },
  neox: { style: "plain", family: "neox" },
  q4: { style: "q4", family: "llama" },
  fp16: { style: "fp16", family: "llama" },
} as const;
/** Three prompts of different lengths, left padded into one batch. */
const PROMPTS = [
  [5, 17, 3, 99, 42, 7, 8, 1000, 12],
  [300, 301],
  [64, 65, 66, 67, 68],
];

beforeAll(async () => {
  for (const [name, m] of Object.entries(MODELS))
    await writeModelInStyle(join(dir, name), m.style, { ...GEOMETRY, family: m.family });
});

async function rewritten(name: keyof typeof MODELS, layerRule?: string) {
  const { inspection, model } = await inspectModel(join(dir, name), { layerRule });
  const tensors = inspection.storedLayers.map((l) => inspection.plan.tensors.find((t) => t.layer === l)!);
  const bytes = rewriteForExtraction(model, tensors, inspection.dModel).bytes;
  return { inspection, tensors, bytes, plain: await loadModel(inspection.onnxPath) };
}

async function run(bytes: Uint8Array, feedsPlan: Parameters<typeof promptFeeds>[0], outputs: string[]) {
  const session = await ort.InferenceSession.create(bytes);
  const live = new Set(session.inputNames);
  const out = await session.run(
    promptFeeds(
      feedsPlan.filter((f) => live.has(f.name)),
      leftPad(PROMPTS, 0),
    ),
    outputs,
  );
  await session.release();
  return out;
}

describe("the extraction rewrite's position-wise tail", () => {
  it("gathers the last position of the second-to-last block's output and the last attention's output, before the last block's projections", async () => {
    const { inspection, bytes } = await rewritten("llama");
    const graph = decodeModel(bytes).graph!;
    const gathers = graph
      .node!.filter((n) => n.name!.startsWith("/hsm/tail") && n.opType === "Gather")
      .map((n) => n.input![0]!);
    const previous = inspection.plan.tensors.find((t) => t.layer === 1)!.tensor;
    expect(gathers).toHaveLength(2);
    expect(gathers).toContain(previous);
    expect(gathers.find((t) => t !== previous)).toMatch(/layers\.2\/self_attn\//);
    // The last block's MLP reads only what descends from those gathers: no MatMul of it sees a full-length tensor.
    const producer = new Map(graph.node!.flatMap((n) => n.output!.map((o) => [o, n] as const)));
    const fromTail = (t: string, seen = new Set<string>()): boolean => {
      if (seen.has(t)) return false;
      seen.add(t);
      const p = producer.get(t);
      if (!p) return false;
      if (p.name!.startsWith("/hsm/tail")) return true;
      return p.input!.some((i) => fromTail(i, seen));
    };
    const mlp = graph.node!.filter((n) => n.opType === "MatMul" && /layers\.2\/mlp\//.test(n.name!));
    expect(mlp.length).toBeGreaterThan(0);
    for (const n of mlp) expect(fromTail(n.input![0]!), n.name!).toBe(true);
  });

  it("applies to float16 graphs too", async () => {
    const { bytes } = await rewritten("fp16");
    expect(
      decodeModel(bytes).graph!.node!.filter((n) => n.name!.startsWith("/hsm/tail") && n.opType === "Gather"),
    ).toHaveLength(2);
  });

  // float16 graphs' states are checked against the float64 reference in quantized.test.ts; the naive outputs here are float32.
  for (const name of ["llama", "gemma", "neox", "q4"] as const) {
    for (const layerRule of [undefined, "l == 1"]) {
      it(`${name}${layerRule ? ` (${layerRule})` : ""}: stores what the unrewritten graph computes at the last position, within float16 rounding`, async () => {
        const { inspection, tensors, bytes, plain } = await rewritten(name, layerRule);
        expect(decodeModel(bytes).graph!.node!.some((n) => n.name!.startsWith("/hsm/tail"))).toBe(true);
        const got = (await run(bytes, inspection.plan.inputs.feeds, [HIDDEN_OUTPUT]))[HIDDEN_OUTPUT]!;
        const full = await run(
          addHiddenOutputs(plain as ModelProto, tensors),
          inspection.plan.inputs.feeds,
          tensors.map((t) => t.tensor),
        );
        const B = PROMPTS.length;
        const d = inspection.dModel;
        const T = Math.max(...PROMPTS.map((p) => p.length));
        let worst = 0;
        tensors.forEach((t, k) => {
          const data = full[t.tensor]!.data as Float32Array;
          const rounded = new Uint16Array(data.length);
          f32ToF16(data, rounded);
          for (let b = 0; b < B; b++) {
            for (let j = 0; j < d; j++) {
              // The same float32 computation over fewer rows, rounded to float16: one float16 spacing apart at most.
              const want = f16BitsToNumber(rounded[(b * T + T - 1) * d + j]!);
              const have = f16BitsToNumber((got.data as Uint16Array)[(b * tensors.length + k) * d + j]!);
              worst = Math.max(worst, Math.abs(have - want) / Math.max(Math.abs(want), 2 ** -14));
            }
          }
        });
        expect(worst).toBeLessThanOrEqual(2 * FLOAT16_RELATIVE);
      });
    }
  }
});
