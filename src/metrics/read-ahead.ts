/**
 * Reads a store's layers in order, one row block at a time, overlapping the
 * reads of the next layer with the computing of the current one where the
 * layer is small enough to hold twice.
 */
import { largeArrayBuffer } from "../kernels/native.js";

/**
 * The largest float16 layer read ahead while the layer before is computed: the
 * benchmark's (39,260 × 1024, 80 MB) is; a full-size one (d 4608, 362 MB) is not.
 */
const READ_AHEAD_BYTES = 128 * 2 ** 20;

/**
 * Rows per read. A large layer, read one block at a time, holds one block of
 * float16 in flight (36 MiB at d 4608); a small layer is requested as all its
 * blocks at once, so the reads run side by side on I/O threads.
 */
export const BLOCK_ROWS = 4096;

/** Rows `start` … `start + count` of one layer, as float16 bits. */
export interface RowBlock {
  start: number;
  count: number;
  data: Uint16Array;
}

/** What the pipeline reads from: a store (src/store/reader.ts's StoreReader). */
export interface RowSource {
  /** Rows `start` … `start + count` of a layer as float16 bits, into the start of `into`. */
  readRows(layer: number, start: number, count: number, into: Uint16Array): Promise<Uint16Array>;
}

/** Hands over the row blocks of each layer in turn (see {@link startLayerReads}). */
export interface LayerReads {
  /**
   * Passes every block of the next layer, in row order, to `take`. A block's
   * data is only valid during the call: read-ahead blocks are reused for the
   * layer after, whose reads start once this layer's blocks are all taken.
   */
  takeNext(take: (block: RowBlock) => void): Promise<void>;
}

/**
 * Starts reading `layers` (of `rows` × `width` float16 values each) from
 * `source`. A layer of at most `maxBytes` is requested whole, every block at
 * once, and the next layer's reads start as soon as this one is taken, so they
 * run while the caller computes. A larger layer is read when taken, one block
 * ahead of the block being taken: at full size (d 4608) a layer of float16 in
 * flight would be 362 MB more at peak. Either way every layer is read into the
 * same buffers: a fresh 38 MB block for each read cost more in page faults
 * than the read itself.
 */
export function startLayerReads(
  source: RowSource,
  layers: readonly number[],
  rows: number,
  width: number,
  maxBytes = READ_AHEAD_BYTES,
): LayerReads {
  const readAhead = rows * width * 2 <= maxBytes;
  // A read-ahead layer's blocks are read into the same buffers every time: the layer before was
  // taken out of them.
  const blockBuffers: Uint16Array[] = [];
  const requestLayer = (layer: number): Promise<RowBlock[]> => {
    const blocks: Promise<RowBlock>[] = [];
    for (let start = 0, b = 0; start < rows; start += BLOCK_ROWS, b++) {
      const count = Math.min(BLOCK_ROWS, rows - start);
      const into = (blockBuffers[b] ??= new Uint16Array(largeArrayBuffer(count * width * 2)));
      blocks.push(source.readRows(layer, start, count, into).then((data) => ({ start, count, data })));
    }
    const all = Promise.all(blocks);
    // Awaited later; a read that fails while the layer before is computed must not go unhandled first.
    all.catch(() => {});
    return all;
  };
  // A streamed layer's blocks take turns in two buffers: one taken while the next is read.
  const streamBuffers: Uint16Array[] = [];
  const streamLayer = async (layer: number, take: (block: RowBlock) => void): Promise<void> => {
    const read = (start: number, b: number): Promise<RowBlock> => {
      const count = Math.min(BLOCK_ROWS, rows - start);
      const into = (streamBuffers[b] ??= new Uint16Array(largeArrayBuffer(Math.min(BLOCK_ROWS, rows) * width * 2)));
      return source.readRows(layer, start, count, into).then((data) => ({ start, count, data }));
    };
    let pending = rows > 0 ? read(0, 0) : undefined;
    for (let start = 0, b = 0; pending; start += BLOCK_ROWS, b ^= 1) {
      const block = await pending;
      pending = start + BLOCK_ROWS < rows ? read(start + BLOCK_ROWS, b ^ 1) : undefined;
      // Awaited on the next turn; a read that fails while this block is taken must not go unhandled first.
      pending?.catch(() => {});
      take(block);
    }
  };
  let next = 0;
  let requested = readAhead && layers.length ? requestLayer(layers[0]!) : undefined;
  return {
    async takeNext(take) {
      const index = next++;
      if (requested) for (const block of await requested) take(block);
      else await streamLayer(layers[index]!, take);
      requested = readAhead && index + 1 < layers.length ? requestLayer(layers[index + 1]!) : undefined;
    },
  };
}
