/**
 * The layer read pipeline on a store held in memory: every layer handed over
 * whole and as stored, its blocks read one at a time into the one buffer every
 * layer shares, and the next layer's reads started when the caller releases
 * the layer it holds (or asks for the next without releasing it).
 */
import { describe, expect, it } from "vitest";

import { startLayerReads, type RowSource } from "../../src/metrics/read-ahead.js";

const WIDTH = 3;
/** Rows per read, with reads of at most READ_BYTES: three to a layer, the last short. */
const BLOCK_ROWS = 4096;
const READ_BYTES = BLOCK_ROWS * WIDTH * 2 + 5;
const ROWS = BLOCK_ROWS * 2 + 5;
const LAYERS = [2, 5, 9];
const STARTS = [0, BLOCK_ROWS, 2 * BLOCK_ROWS];

/** Row r, column j of layer l holds (l * 1000 + r * 7 + j) mod 65536. */
const value = (l: number, r: number, j: number) => (l * 1000 + r * 7 + j) % 65536;
const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

interface Log {
  events: string[];
  buffers: Set<ArrayBufferLike>;
  /** The most reads in flight at once. */
  widest: number;
}

/**
 * Every read is logged, and finishes on a later turn of the event loop. With `elsewhere`, the last block comes
 * back in an array of its own, as a source's unaligned read does.
 */
function memorySource(log: Log, elsewhere = false): RowSource {
  let inFlight = 0;
  return {
    async readRows(layer, start, count, into) {
      log.events.push(`read ${layer}:${start}`);
      log.buffers.add(into.buffer);
      log.widest = Math.max(log.widest, ++inFlight);
      await sleep(1);
      inFlight--;
      const out = elsewhere && start + count === ROWS ? new Uint16Array(count * WIDTH) : into;
      for (let i = 0; i < count * WIDTH; i++) out[i] = value(layer, start + Math.floor(i / WIDTH), i % WIDTH);
      return out.subarray(0, count * WIDTH);
    },
  };
}

/**
 * Every layer as handed over, checked against its values, with the log. With `releaseAfter`, each layer is
 * released and then worked on for that many ms before the next is asked for; without, the next is asked for
 * at once.
 */
async function takeAll(o: { elsewhere?: boolean; releaseAfter?: number } = {}): Promise<Log> {
  const log: Log = { events: [], buffers: new Set(), widest: 0 };
  const reads = startLayerReads(memorySource(log, o.elsewhere), LAYERS, ROWS, WIDTH, READ_BYTES);
  for (const layer of LAYERS) {
    log.events.push(`take ${layer}`);
    const h16 = await reads.next();
    log.events.push(`got ${layer}`);
    const want = Uint16Array.from({ length: ROWS * WIDTH }, (_, i) => value(layer, Math.floor(i / WIDTH), i % WIDTH));
    expect(h16).toEqual(want);
    if (o.releaseAfter === undefined) continue;
    reads.release();
    log.events.push(`released ${layer}`);
    reads.release(); // a second release of the same layer does nothing
    await sleep(o.releaseAfter);
  }
  await expect(reads.next()).rejects.toThrow(RangeError);
  return log;
}

describe("startLayerReads", () => {
  it("hands over every layer whole and as stored, rows handed back elsewhere included", async () => {
    await takeAll();
    await takeAll({ elsewhere: true });
    await takeAll({ releaseAfter: 0, elsewhere: true });
  });

  it("reads the next layer when asked for, where the one held is not released, one block at a time into one buffer", async () => {
    const log = await takeAll();
    const layer = (l: number) => [`take ${l}`, ...STARTS.map((s) => `read ${l}:${s}`), `got ${l}`];
    expect(log.events).toEqual(LAYERS.flatMap(layer));
    expect(log.widest).toBe(1);
    expect(log.buffers.size).toBe(1);
  });

  it("reads the next layer once the one held is released, while the caller works on", async () => {
    const log = await takeAll({ releaseAfter: 50 });
    const at = (event: string) => log.events.indexOf(event);
    expect(log.events.filter((e) => e.startsWith("read"))).toEqual(
      LAYERS.flatMap((l) => STARTS.map((s) => `read ${l}:${s}`)),
    );
    for (const [i, l] of LAYERS.entries()) {
      if (i === 0) continue;
      expect(at(`read ${l}:0`)).toBeGreaterThan(at(`released ${LAYERS[i - 1]}`));
      expect(at(`read ${l}:${2 * BLOCK_ROWS}`)).toBeLessThan(at(`take ${l}`));
    }
    expect(log.widest).toBe(1);
    expect(log.buffers.size).toBe(1);
  });
});
