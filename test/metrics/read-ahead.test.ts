/**
 * The layer read pipeline on a store held in memory: both ways of reading (a
 * small layer read ahead whole, a large one block by block) hand over the same
 * rows in the same order, and a layer's reads start only once the layer
 * before has been taken.
 */
import { describe, expect, it } from "vitest";

import { BLOCK_ROWS, startLayerReads, type RowBlock, type RowSource } from "../../src/metrics/read-ahead.js";

const ROWS = BLOCK_ROWS * 2 + 5;
const WIDTH = 3;

/** Row r, column j of layer l holds (l * 1000 + r * 7 + j) mod 65536; every read is logged. */
function memorySource(log: string[]): RowSource {
  const rows = (layer: number, start: number, count: number, into: Uint16Array = new Uint16Array(count * WIDTH)) => {
    for (let i = 0; i < count * WIDTH; i++) {
      into[i] = (layer * 1000 + (start + Math.floor(i / WIDTH)) * 7 + (i % WIDTH)) % 65536;
    }
    return into;
  };
  return {
    async readRows(layer, start, count, into) {
      log.push(`read ${layer}:${start}`);
      return rows(layer, start, count, into);
    },
    async *blocks(layer, blockRows = BLOCK_ROWS) {
      for (let start = 0; start < ROWS; start += blockRows) {
        log.push(`block ${layer}:${start}`);
        const count = Math.min(blockRows, ROWS - start);
        yield { start, count, data: rows(layer, start, count) };
      }
    },
  };
}

/** Every layer's blocks as taken, copied (a taken block's data is reused), with the log. */
async function takeAll(maxBytes: number): Promise<{ taken: string[]; log: string[] }> {
  const log: string[] = [];
  const layers = [2, 5, 9];
  const reads = startLayerReads(memorySource(log), layers, ROWS, WIDTH, maxBytes);
  const taken: string[] = [];
  for (const layer of layers) {
    log.push(`take ${layer}`);
    await reads.takeNext((b: RowBlock) => taken.push(`${layer}:${b.start}+${b.count}:${[...b.data].join(",")}`));
  }
  return { taken, log };
}

describe("startLayerReads", () => {
  it("hands over the same blocks read ahead or block by block", async () => {
    const ahead = await takeAll(Number.MAX_SAFE_INTEGER);
    const streamed = await takeAll(0);
    expect(ahead.taken).toHaveLength(9);
    expect(ahead.taken).toEqual(streamed.taken);
    expect(streamed.log.filter((l) => l.startsWith("read"))).toEqual([]);
  });

  it("requests the next layer whole once the one before is taken", async () => {
    const { log } = await takeAll(Number.MAX_SAFE_INTEGER);
    const reads = (layer: number) => [0, BLOCK_ROWS, 2 * BLOCK_ROWS].map((s) => `read ${layer}:${s}`);
    expect(log).toEqual([...reads(2), "take 2", ...reads(5), "take 5", ...reads(9), "take 9"]);
  });
});
