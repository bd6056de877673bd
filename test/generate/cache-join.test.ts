/**
 * The KV cache joined outside the graph: a graph whose presents are Concats of
 * their own past inputs outputs the new positions instead, and the pasts joined
 * from them step after step equal the presents the unchanged graph computes
 * itself (onnxruntime's Concat), on the sequence axis of a rank-4 cache and on
 * the last axis of a rank-3 one (BLOOM's keys), over batches of two sizes that
 * share the buffer, with room to grow in place and with none. Presents made
 * otherwise leave the graph untouched.
 */
import * as ort from "onnxruntime-node";
import { describe, expect, it } from "vitest";

import { JoinedCache, outputNewPositions } from "../../src/generate/cache-join.js";
import { DataType, encodeModel, valueInfo, type GraphProto } from "../../src/onnx/graph.js";
import { Rng } from "../../src/util/random.js";

const H = 3;
const dh = 4;

/** present.0.key = Concat(past key, new key) on axis 2 of [B, H, T, dh]; present.0.value on axis -1 of [B·H, dh, T]. */
function cacheGraph(pastFirst = true): GraphProto {
  const F = DataType.FLOAT;
  const concat = (past: string, fresh: string, out: string, axis: number) => ({
    name: out,
    opType: "Concat",
    input: pastFirst ? [past, fresh] : [fresh, past],
    output: [out],
    attribute: [{ name: "axis", type: 2, i: axis }],
  });
  return {
    name: "cache",
    node: [
      concat("past_key_values.0.key", "key", "present.0.key", 2),
      concat("past_key_values.0.value", "value", "present.0.value", -1),
      { name: "sum", opType: "ReduceSum", input: ["present.0.key"], output: ["total"] },
    ],
    input: [
      valueInfo("past_key_values.0.key", F, ["b", H, "past", dh]),
      valueInfo("key", F, ["b", H, "new", dh]),
      valueInfo("past_key_values.0.value", F, ["bh", dh, "past"]),
      valueInfo("value", F, ["bh", dh, "new"]),
    ],
    output: [
      valueInfo("total", F, [1, 1, 1, 1]),
      valueInfo("present.0.key", F, ["b", H, "all", dh]),
      valueInfo("present.0.value", F, ["bh", dh, "all"]),
    ],
  };
}

const session = (graph: GraphProto) =>
  ort.InferenceSession.create(encodeModel({ irVersion: 8, opsetImport: [{ domain: "", version: 17 }], graph }));

describe("the KV cache joined outside the graph", () => {
  it("outputs the new positions, and the joined pasts equal the graph's own presents", async () => {
    const graph = cacheGraph();
    const joins = outputNewPositions(graph)!;
    expect(joins).toEqual([
      { past: "past_key_values.0.key", output: "hsm_new_present.0.key", axis: 2 },
      { past: "past_key_values.0.value", output: "hsm_new_present.0.value", axis: 2 },
    ]);
    expect(graph.output!.map((o) => o.name)).toEqual(["total", "hsm_new_present.0.key", "hsm_new_present.0.value"]);
    const [whole, sliced] = await Promise.all([session(cacheGraph()), session(graph)]);
    const shared = new JoinedCache(joins);
    const rng = new Rng(3);
    // Two batch sizes sharing one cache with room for every step (the past grows in place), then a cache with no
    // room (each step lays the buffer out anew).
    const runs = [
      { B: 2, room: 3, joined: shared },
      { B: 1, room: 3, joined: shared },
      { B: 2, room: 0, joined: new JoinedCache(joins) },
    ];
    for (const { B, room, joined } of runs) {
      // The prompt's positions, then one a step.
      let past: Record<string, ort.Tensor> = {
        "past_key_values.0.key": new ort.Tensor("float32", new Float32Array(0), [B, H, 0, dh]),
        "past_key_values.0.value": new ort.Tensor("float32", new Float32Array(0), [B * H, dh, 0]),
      };
      let expected = past;
      for (const n of [5, 1, 1, 1]) {
        const fresh = {
          key: new ort.Tensor("float32", rng.fillNormal(new Float32Array(B * H * n * dh)), [B, H, n, dh]),
          value: new ort.Tensor("float32", rng.fillNormal(new Float32Array(B * H * dh * n)), [B * H, dh, n]),
        };
        const [mine, theirs] = [await sliced.run({ ...past, ...fresh }), await whole.run({ ...expected, ...fresh })];
        expect(mine.total!.data).toEqual(theirs.total!.data);
        past = joined.next(past, [mine], room);
        expected = {
          "past_key_values.0.key": theirs["present.0.key"]!,
          "past_key_values.0.value": theirs["present.0.value"]!,
        };
        for (const name of Object.keys(expected)) {
          expect(past[name]!.dims).toEqual(expected[name]!.dims);
          expect(Array.from(past[name]!.data as Float32Array)).toEqual(
            Array.from(expected[name]!.data as Float32Array),
          );
        }
      }
    }
  });

  it("leaves a graph whose presents are not Concats of their pasts first as it was", () => {
    for (const graph of [cacheGraph(false), { ...cacheGraph(), node: cacheGraph().node!.slice(1) }]) {
      const before = structuredClone(graph);
      expect(outputNewPositions(graph)).toBeUndefined();
      expect(graph).toEqual(before);
    }
  });
});
