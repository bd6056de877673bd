/**
 * The layer read pipeline on a store held in memory: both ways of reading (a
 * small layer read ahead whole, a large one block by block) hand over the same
 * rows in the same order, a layer's reads start only once the layer before has
 * been taken, and a streamed layer is read one block ahead into two buffers
 * that every layer reuses.
 */
import { describe, expect, it } from "vitest";

import { BLOCK_ROWS, startLayerReads, type RowBlock, type RowSource } from "../../src/metrics/read-ahead.js";

const ROWS = BLOCK_ROWS * 2 + 5;
const WIDTH = 3;

/** Row r, column j of layer l holds (l * 1000 + r * 7 + j) mod 65536; every read is logged. */
function memorySource(log: string[], buffers: Set<ArrayBufferLike> = new Set()): RowSource {
  return {
    async readRows(layer, start, count, into) {
      log.push(`read ${layer}:${start}`);
      buffers.add(into.buffer);
      for (let i = 0; i < count * WIDTH; i++) {
        into[i] = (layer * 1000 + (start + Math.floor(i / WIDTH)) * 7 + (i % WIDTH)) % 65536;
      }
      return into.subarray(0, count * WIDTH);
    },
  };
}

/** Every layer's blocks as taken, copied (a taken block's data is reused), with the log. */
async function takeAll(maxBytes: number): Promise<{ taken: string[]; log: string[]; buffers: number }> {
  const log: string[] = [];
  const buffers = new Set<ArrayBufferLike>();
  const layers = [2, 5, 9];
  const reads = startLayerReads(memorySource(log, buffers), layers, ROWS, WIDTH, maxBytes);
  const taken: string[] = [];
  for (const layer of layers) {
    log.push(`take ${layer}`);
    await reads.takeNext((b: RowBlock) => {
      log.push(`got ${layer}:${b.start}`);
      taken.push(`${layer}:${b.start}+${b.count}:${[...b.data].join(",")}`);
    });
  }
  return { taken, log, buffers: buffers.size };
}

describe("startLayerReads", () => {
  it("hands over the same blocks read ahead or block by block", async () => {
    const ahead = await takeAll(Number.MAX_SAFE_INTEGER);
    const streamed = await takeAll(0);
    expect(ahead.taken).toHaveLength(9);
    expect(ahead.taken).toEqual(streamed.taken);
  });

  it("reads a large layer one block ahead of the block taken, into the same two buffers every layer", async () => {
    const { log, buffers } = await takeAll(0);
    const layer = (l: number) => [
      `take ${l}`,
      `read ${l}:0`,
      `read ${l}:${BLOCK_ROWS}`,
      `got ${l}:0`,
      `read ${l}:${2 * BLOCK_ROWS}`,
      `got ${l}:${BLOCK_ROWS}`,
      `got ${l}:${2 * BLOCK_ROWS}`,
    ];
    expect(log).toEqual([...layer(2), ...layer(5), ...layer(9)]);
    expect(buffers).toBe(2);
  });

  it("requests the next layer whole once the one before is taken", async () => {
    const { log } = await takeAll(Number.MAX_SAFE_INTEGER);
    const reads = (layer: number) => [0, BLOCK_ROWS, 2 * BLOCK_ROWS].map((s) => `read ${layer}:${s}`);
    const got = (layer: number) => [0, BLOCK_ROWS, 2 * BLOCK_ROWS].map((s) => `got ${layer}:${s}`);
    expect(log).toEqual([
      ...reads(2),
      "take 2",
      ...got(2),
      ...reads(5),
      "take 5",
      ...got(5),
      ...reads(9),
      "take 9",
      ...got(9),
    ]);
  });
});
