/**
 * The layer read pipeline on a store held in memory: both ways of reading (a
 * small layer read ahead, a large one when asked for) hand over the same rows,
 * a read-ahead layer's reads start as soon as the layer before is handed over,
 * and the layers take turns in two buffers (read ahead) or share one.
 */
import { describe, expect, it } from "vitest";

import { BLOCK_ROWS, startLayerReads, type RowSource } from "../../src/metrics/read-ahead.js";

const ROWS = BLOCK_ROWS * 2 + 5;
const WIDTH = 3;
const LAYERS = [2, 5, 9];

/** Row r, column j of layer l holds (l * 1000 + r * 7 + j) mod 65536. */
const value = (l: number, r: number, j: number) => (l * 1000 + r * 7 + j) % 65536;

/**
 * Every read is logged. With `elsewhere`, the last block comes back in an array of its own, as a source's
 * unaligned read does.
 */
function memorySource(log: string[], buffers: Set<ArrayBufferLike>, elsewhere = false): RowSource {
  return {
    async readRows(layer, start, count, into) {
      log.push(`read ${layer}:${start}`);
      buffers.add(into.buffer);
      const out = elsewhere && start + count === ROWS ? new Uint16Array(count * WIDTH) : into;
      for (let i = 0; i < count * WIDTH; i++) out[i] = value(layer, start + Math.floor(i / WIDTH), i % WIDTH);
      return out.subarray(0, count * WIDTH);
    },
  };
}

/** Every layer as handed over, checked against its values, with the log and the buffers read into. */
async function takeAll(maxBytes: number, elsewhere = false): Promise<{ log: string[]; buffers: number }> {
  const log: string[] = [];
  const buffers = new Set<ArrayBufferLike>();
  const reads = startLayerReads(memorySource(log, buffers, elsewhere), LAYERS, ROWS, WIDTH, maxBytes);
  for (const layer of LAYERS) {
    log.push(`take ${layer}`);
    const h16 = await reads.next();
    log.push(`got ${layer}`);
    expect(h16).toHaveLength(ROWS * WIDTH);
    const want = Uint16Array.from({ length: ROWS * WIDTH }, (_, i) => value(layer, Math.floor(i / WIDTH), i % WIDTH));
    expect(h16).toEqual(want);
  }
  return { log, buffers: buffers.size };
}

describe("startLayerReads", () => {
  it("hands over every layer whole, read ahead or not, rows handed back elsewhere included", async () => {
    for (const maxBytes of [Number.MAX_SAFE_INTEGER, 0]) {
      await takeAll(maxBytes);
      await takeAll(maxBytes, true);
    }
  });

  it("reads a large layer when asked for, every layer into the same buffer", async () => {
    const { log, buffers } = await takeAll(0);
    const layer = (l: number) => [
      `take ${l}`,
      ...[0, BLOCK_ROWS, 2 * BLOCK_ROWS].map((s) => `read ${l}:${s}`),
      `got ${l}`,
    ];
    expect(log).toEqual(LAYERS.flatMap(layer));
    expect(buffers).toBe(1);
  });

  it("requests the next layer whole once the one before is handed over, into two buffers in turn", async () => {
    const { log, buffers } = await takeAll(Number.MAX_SAFE_INTEGER);
    const reads = (layer: number) => [0, BLOCK_ROWS, 2 * BLOCK_ROWS].map((s) => `read ${layer}:${s}`);
    expect(log).toEqual([
      ...reads(2),
      "take 2",
      ...reads(5),
      "got 2",
      "take 5",
      ...reads(9),
      "got 5",
      "take 9",
      "got 9",
    ]);
    expect(buffers).toBe(2);
  });
});
