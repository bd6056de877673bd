/**
 * The token embedding taken out of generation's graph: the Gather of
 * `input_ids` (or a Cast of it) from a float32 table kept as external data
 * becomes an input, and rows read from the file in its place give the graph's
 * own output bit for bit; tables read otherwise stay in the graph.
 */
import { writeFileSync } from "node:fs";
import { join } from "node:path";

import * as ort from "onnxruntime-node";
import { describe, expect, it } from "vitest";

import { EmbeddingRows, INPUTS_EMBEDS, takeEmbeddingOut } from "../../src/generate/embedding.js";
import {
  DataType,
  encodeModel,
  valueInfo,
  type GraphProto,
  type NodeProto,
  type TensorProto,
} from "../../src/onnx/graph.js";
import { Rng } from "../../src/util/random.js";
import { tempDir } from "../helpers/tmp.js";

const V = 11;
const d = 6;
const table = new Rng(8).fillNormal(new Float32Array(V * d));
const dir = tempDir("hsm-embedding-");
// Eight bytes of something else first, so that the offset is honoured.
writeFileSync(join(dir, "weights.bin"), Buffer.concat([Buffer.alloc(8, 0xee), Buffer.from(table.buffer)]));

function embed(dataType: number = DataType.FLOAT): TensorProto {
  return {
    name: "embed",
    dataType,
    dims: [V, d],
    dataLocation: 1,
    externalData: [
      { key: "location", value: "weights.bin" },
      { key: "offset", value: "8" },
      { key: "length", value: String(V * d * 4) },
    ],
  };
}

/** input_ids → [Cast →] Gather(embed) → Tanh → out, plus `extra` nodes. */
function graph(o: { cast?: boolean; axis?: number; extra?: NodeProto[]; outputs?: string[] } = {}): GraphProto {
  const indices = o.cast ? "ids32" : "input_ids";
  return {
    name: "g",
    node: [
      ...(o.cast
        ? [{ opType: "Cast", input: ["input_ids"], output: ["ids32"], attribute: [{ name: "to", type: 2, i: 6 }] }]
        : []),
      {
        name: "gather",
        opType: "Gather",
        input: ["embed", indices],
        output: ["h"],
        attribute: o.axis === undefined ? [] : [{ name: "axis", type: 2, i: o.axis }],
      },
      { opType: "Tanh", input: ["h"], output: ["out"] },
      ...(o.extra ?? []),
    ],
    initializer: [embed()],
    input: [valueInfo("input_ids", DataType.INT64, ["batch_size", "sequence_length"])],
    output: [
      valueInfo("out", DataType.FLOAT, ["batch_size", "sequence_length", d]),
      ...(o.outputs ?? []).map((n) => valueInfo(n, DataType.FLOAT, [])),
    ],
  };
}

function model(g: GraphProto): Parameters<typeof encodeModel>[0] {
  return { irVersion: 8, opsetImport: [{ domain: "", version: 17 }], graph: g };
}

async function run(g: GraphProto, feeds: Record<string, ort.Tensor>): Promise<Float32Array> {
  const file = join(dir, "model.onnx");
  writeFileSync(file, encodeModel(model(g)));
  const session = await ort.InferenceSession.create(file);
  try {
    return (await session.run(feeds)).out!.data as Float32Array;
  } finally {
    await session.release();
  }
}

const ids = BigInt64Array.from([3n, 0n, 10n, 3n, 7n, 7n]);

describe("the token embedding outside the graph", () => {
  it.each([
    ["input_ids", false],
    ["a Cast of input_ids", true],
  ])("replaces the Gather at %s: rows read from the file give the graph's output bit for bit", async (_, cast) => {
    const want = await run(graph({ cast }), { input_ids: new ort.Tensor("int64", ids, [2, 3]) });
    const g = graph({ cast });
    const source = takeEmbeddingOut(g, dir, { name: "staged.onnx", path: join(dir, "unused") });
    expect(source).toEqual({ path: join(dir, "weights.bin"), offset: 8, vocab: V, d });
    expect(g.initializer).toEqual([]);
    expect(g.node!.some((n) => n.opType === "Gather")).toBe(false);
    expect(g.input!.map((v) => v.name)).toEqual(["input_ids", INPUTS_EMBEDS]);
    const rows = await EmbeddingRows.open(source!);
    try {
      const embeds = rows.rows(ids);
      expect(embeds.subarray(2 * d, 3 * d)).toEqual(table.subarray(10 * d, 11 * d));
      const got = await run(g, {
        input_ids: new ort.Tensor("int64", ids, [2, 3]),
        [INPUTS_EMBEDS]: new ort.Tensor("float32", embeds, [2, 3, d]),
      });
      expect(Buffer.from(got.buffer)).toEqual(Buffer.from(want.buffer));
    } finally {
      await rows.close();
    }
  });

  it("reads a table the staged name points at from the model file itself", () => {
    const g = graph();
    g.initializer![0]!.externalData![0]!.value = "staged.onnx";
    expect(takeEmbeddingOut(g, dir, { name: "staged.onnx", path: join(dir, "weights.bin") })?.path).toBe(
      join(dir, "weights.bin"),
    );
  });

  it.each([
    [
      "the table is read by another node too",
      graph({ extra: [{ opType: "ReduceSum", input: ["embed"], output: ["s"] }], outputs: ["s"] }),
    ],
    ["the Gather is along axis 1", graph({ axis: 1 })],
    ["the table is float16", { ...graph(), initializer: [embed(DataType.FLOAT16)] }],
    [
      "the table is inline",
      {
        ...graph(),
        initializer: [{ ...embed(), externalData: [], dataLocation: 0, rawData: new Uint8Array(table.buffer) }],
      },
    ],
    [
      "the Gather reads other indices",
      { ...graph(), node: graph().node!.map((n) => (n.opType === "Gather" ? { ...n, input: ["embed", "other"] } : n)) },
    ],
  ])("leaves the graph as it is where %s", (_, g) => {
    const before = JSON.stringify(g);
    expect(takeEmbeddingOut(g, dir, { name: "staged.onnx", path: join(dir, "unused") })).toBeUndefined();
    expect(JSON.stringify(g)).toBe(before);
  });

  it("counts a negative id from the end, as Gather does, and names an id outside the table", async () => {
    const rows = await EmbeddingRows.open({ path: join(dir, "weights.bin"), offset: 8, vocab: V, d });
    try {
      expect(rows.rows(BigInt64Array.of(-1n, 0n))).toEqual(
        Float32Array.from([...table.subarray((V - 1) * d), ...table.subarray(0, d)]),
      );
      expect(() => rows.rows(BigInt64Array.of(2n, 11n))).toThrow(
        "token id 11 is outside the model's embedding of 11 rows",
      );
      expect(() => rows.rows(BigInt64Array.of(-12n))).toThrow("token id -12 is outside");
    } finally {
      await rows.close();
    }
  });
});
