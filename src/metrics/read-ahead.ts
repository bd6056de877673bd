/**
 * Reads a store's layers in order, each whole as float16 bits, overlapping the
 * reads of the next layer with the computing of the current one where the
 * layer is small enough to hold twice.
 */
import { largeArrayBuffer } from "../kernels/native.js";

/**
 * The largest float16 layer read ahead while the layer before is computed: the
 * benchmark's (39,260 × 1024, 80 MB) is; a full-size one (d 4608, 362 MB) is not.
 */
const READ_AHEAD_BYTES = 128 * 2 ** 20;

/** Rows per read: a layer is requested as all its blocks at once, so the reads run side by side on I/O threads. */
export const BLOCK_ROWS = 4096;

/** What the pipeline reads from: a store (src/store/reader.ts's StoreReader). */
export interface RowSource {
  /** Rows `start` … `start + count` of a layer as float16 bits, into the start of `into`. */
  readRows(layer: number, start: number, count: number, into: Uint16Array): Promise<Uint16Array>;
}

/** Hands over each layer in turn (see {@link startLayerReads}). */
export interface LayerReads {
  /**
   * The next layer's rows, rows × width float16 bits. Valid until the call
   * after: its buffer then takes a later layer's reads.
   */
  next(): Promise<Uint16Array>;
}

/**
 * Starts reading `layers` (of `rows` × `width` float16 values each) from
 * `source`. A layer of at most `maxBytes` is read ahead: the next layer's reads
 * start as soon as this one is handed over, into a second buffer, so they run
 * while the caller computes. A larger layer is read when asked for, into the
 * one buffer every layer takes turns in: at full size (d 4608) a second layer
 * would be 362 MB more at peak. Either way the layers reuse their buffers: a
 * fresh buffer for each layer cost more in page faults than the read itself.
 */
export function startLayerReads(
  source: RowSource,
  layers: readonly number[],
  rows: number,
  width: number,
  maxBytes = READ_AHEAD_BYTES,
): LayerReads {
  const readAhead = rows * width * 2 <= maxBytes;
  const buffers: Uint16Array[] = [];
  const request = (index: number): Promise<Uint16Array> => {
    const layer = (buffers[readAhead ? index % 2 : 0] ??= new Uint16Array(largeArrayBuffer(rows * width * 2)));
    const blocks: Promise<void>[] = [];
    for (let start = 0; start < rows; start += BLOCK_ROWS) {
      const into = layer.subarray(start * width, Math.min(rows, start + BLOCK_ROWS) * width);
      const read = source.readRows(layers[index]!, start, into.length / width, into);
      // A source may hand back its rows elsewhere (an unaligned read is copied): they belong in the layer.
      blocks.push(
        read.then((data) => {
          if (data.buffer !== into.buffer || data.byteOffset !== into.byteOffset) into.set(data);
        }),
      );
    }
    const all = Promise.all(blocks).then(() => layer);
    // Awaited later; a read that fails while the layer before is computed must not go unhandled first.
    all.catch(() => {});
    return all;
  };
  let next = 0;
  let requested = readAhead && layers.length ? request(0) : undefined;
  return {
    async next() {
      const index = next++;
      const layer = await (requested ?? request(index));
      requested = readAhead && index + 1 < layers.length ? request(index + 1) : undefined;
      return layer;
    },
  };
}
