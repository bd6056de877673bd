/**
 * A graph file read for its structure (src/onnx/structure.ts): every byte of
 * the file but the raw payloads of large initializers lies at its own offset,
 * the skipped spans lie inside those payloads and nowhere else, the bytes
 * decode to the same graph with every payload a view at its true offset, and
 * `fill` makes them the whole file. Bytes the walk does not expect are read
 * whole. Where the payloads are is found independently, by decoding the whole
 * file and taking each payload view's offset.
 */
import { readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";

import { beforeAll, describe, expect, it } from "vitest";

import { DataType, decodeModel, encodeModel, valueInfo, type ModelProto } from "../../src/onnx/graph.js";
import { readModel, readModelStructure, type ModelStructure } from "../../src/onnx/structure.js";
import { writeModelInStyle } from "../../src/synthetic/export-styles.js";
import { tempDir } from "../helpers/tmp.js";

const dir = tempDir("hsm-structure-");
/** Payloads from this size up are skipped; those under it are read. */
const SKIPPED_FROM = 1 << 16;

/** [start, end) of every initializer's raw payload in the file, from decoding the whole file. */
function payloads(file: Buffer): { name: string; span: [number, number] }[] {
  const model = decodeModel(file);
  return (model.graph!.initializer ?? [])
    .filter((t) => t.rawData && t.rawData.length > 0)
    .map((t) => {
      const start = t.rawData!.byteOffset - file.byteOffset;
      return { name: t.name!, span: [start, start + t.rawData!.length] };
    });
}

/** Checks a structure read of `path` against the file, and returns the bytes it skipped. */
async function checked(path: string, s: ModelStructure): Promise<number> {
  const file = readFileSync(path);
  expect(s.bytes.length).toBe(file.length);
  const large = payloads(file).filter((p) => p.span[1] - p.span[0] >= SKIPPED_FROM);
  let skipped = 0;
  let at = 0;
  for (const [from, to] of [...s.unread].sort((a, b) => a[0] - b[0])) {
    // Each skipped span lies inside a large payload, after what came before it.
    expect(large.some((p) => p.span[0] <= from && to <= p.span[1])).toBe(true);
    expect(from).toBeGreaterThanOrEqual(at);
    expect(s.bytes.subarray(at, from).equals(file.subarray(at, from))).toBe(true);
    skipped += to - from;
    at = to;
  }
  expect(s.bytes.subarray(at).equals(file.subarray(at))).toBe(true);
  // The same graph, every payload a view at its own offset.
  const mine = decodeModel(s.bytes);
  const theirs = decodeModel(file);
  expect(mine.graph!.node).toEqual(theirs.graph!.node);
  const where = (m: ModelProto, bytes: Buffer) =>
    (m.graph!.initializer ?? []).map((t) => [
      t.name,
      t.dims?.map(Number),
      t.dataType,
      t.rawData!.byteOffset - bytes.byteOffset,
    ]);
  expect(where(mine, s.bytes)).toEqual(where(theirs, file));
  await s.fill();
  expect(s.unread).toHaveLength(0);
  expect(s.bytes.equals(file)).toBe(true);
  return skipped;
}

describe("a graph file read for its structure", () => {
  beforeAll(async () => {
    // A vocabulary of 128,256 rows: the embedding and the LM head are megabytes; the small projections are not.
    await writeModelInStyle(join(dir, "plain"), "plain", {
      layers: 2,
      hidden: 32,
      heads: 4,
      kvHeads: 2,
      intermediate: 48,
      seed: 5,
    });
  });

  it("skips the large payloads, and only them, of a model written as exporters write one", async () => {
    const path = join(dir, "plain", "model.onnx");
    const s = await readModelStructure(path);
    const large = payloads(readFileSync(path)).filter((p) => p.span[1] - p.span[0] >= SKIPPED_FROM);
    const largeBytes = large.reduce((sum, p) => sum + p.span[1] - p.span[0], 0);
    expect(large.length).toBeGreaterThan(0);
    const skipped = await checked(path, s);
    // At most a read window (64 KB) of each payload is read anyway.
    expect(skipped).toBeGreaterThan(largeBytes - large.length * (1 << 16));
  });

  it("reads payloads held other ways, and large ones wherever the walk does not go", async () => {
    const big = (n: number, seed: number) => Float32Array.from({ length: n }, (_, i) => Math.sin(i * seed));
    const bytesOf = (a: Float32Array) => new Uint8Array(a.buffer);
    const large = 40_000; // 160 KB of float32
    const model: Parameters<typeof encodeModel>[0] = {
      irVersion: 8,
      opsetImport: [{ domain: "", version: 17 }],
      graph: {
        name: "kinds",
        // An initializer before the nodes, one as float_data, one small, one after a Constant of the same size.
        initializer: [
          { name: "raw_first", dataType: DataType.FLOAT, dims: [large], rawData: bytesOf(big(large, 1)) },
          { name: "floats", dataType: DataType.FLOAT, dims: [large], floatData: Array.from(big(large, 2)) },
          { name: "small", dataType: DataType.FLOAT, dims: [8], rawData: bytesOf(big(8, 3)) },
        ],
        node: [
          {
            opType: "Constant",
            output: ["c"],
            attribute: [
              {
                name: "value",
                type: 4,
                t: { dataType: DataType.FLOAT, dims: [large], rawData: bytesOf(big(large, 4)) },
              },
            ],
          },
          { opType: "Add", input: ["raw_first", "c"], output: ["y"] },
        ],
        output: [valueInfo("y", DataType.FLOAT, [large])],
      },
    };
    const path = join(dir, "kinds.onnx");
    const bytes = encodeModel(model);
    // A second large raw initializer after the nodes, appended as one more GraphProto.initializer field would be.
    const decoded = decodeModel(bytes);
    decoded.graph!.initializer!.push({
      name: "raw_last",
      dataType: DataType.FLOAT,
      dims: [large],
      rawData: bytesOf(big(large, 5)),
    });
    writeFileSync(path, encodeModel(decoded));
    const s = await readModelStructure(path);
    // Only the two raw initializers are skipped: not the float_data, the small one, or the Constant's tensor.
    expect(s.unread.length).toBeGreaterThan(0);
    const skipped = await checked(path, s);
    expect(skipped).toBeGreaterThan(2 * large * 4 - 2 * (1 << 16));
    expect(skipped).toBeLessThanOrEqual(2 * large * 4);
  });

  it("reads a file whole where its bytes are not what the walk expects", async () => {
    const whole = readFileSync(join(dir, "plain", "model.onnx"));
    const cases = {
      // Cut inside a large payload: a length runs past the end.
      truncated: whole.subarray(0, Math.floor(whole.length * 0.6)),
      noise: Buffer.from(Array.from({ length: 300_000 }, (_, i) => (i * 2654435761) >>> 24)),
      empty: Buffer.alloc(0),
    };
    for (const [name, bytes] of Object.entries(cases)) {
      const path = join(dir, `${name}.onnx`);
      writeFileSync(path, bytes);
      const s = await readModelStructure(path);
      expect(s.unread, name).toHaveLength(0);
      expect(s.bytes.equals(bytes), name).toBe(true);
    }
  });

  it("reads the whole file with readModel", async () => {
    const path = join(dir, "plain", "model.onnx");
    const s = await readModel(path);
    expect(s.unread).toHaveLength(0);
    expect(s.bytes.equals(readFileSync(path))).toBe(true);
  });
});
