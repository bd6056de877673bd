/**
 * Reads a store's layers in order, each whole as float16 bits into one buffer,
 * the next layer's reads overlapping the end of the current layer's computing.
 */
import { largeArrayBuffer } from "../kernels/native.js";

/**
 * The most float16 bytes one read asks for (a layer takes as few reads as fit). Each read is one request to the
 * I/O threads and back through the JavaScript thread, which may be busy computing: a layer read in 8 MB blocks
 * waited on that round trip ten times, and took two to three times as long as in one or two reads. A layer's
 * reads run one after another: side by side, they would contend for the kernel's page locks and take the cores
 * from the layer being computed.
 */
const READ_BYTES = 64 * 2 ** 20;

/** What the pipeline reads from: a store (src/store/reader.ts's StoreReader). */
export interface RowSource {
  /** Rows `start` … `start + count` of a layer as float16 bits, into the start of `into`. */
  readRows(layer: number, start: number, count: number, into: Uint16Array): Promise<Uint16Array>;
}

/** Hands over each layer in turn (see {@link startLayerReads}). */
export interface LayerReads {
  /** The next layer's rows, rows × width float16 bits, valid until {@link release} (or the next call). */
  next(): Promise<Uint16Array>;
  /** Done with the layer handed over: the next layer's reads start, into its buffer (once; later calls do nothing). */
  release(): void;
}

/**
 * Starts reading `layers` (of `rows` × `width` float16 values each) from
 * `source`, the first at once, in reads of at most `readBytes`. Every layer is
 * read into the same buffer, so the next layer's reads start when the caller
 * releases the one it holds: metrics release their rows once their passes
 * over them are done (ISS after centring them, KTS after scoring them), and
 * the read runs while they finish from their own buffers. One buffer, not two
 * taking turns: the fresh pages of a second (80 MB on the benchmark, 362 MB at
 * full size) cost more to fill in a virtual machine than the reads they would
 * overlap, measured on the benchmark (1.44 s against 1.57 s for KTS).
 */
export function startLayerReads(
  source: RowSource,
  layers: readonly number[],
  rows: number,
  width: number,
  readBytes = READ_BYTES,
): LayerReads {
  let buffer: Uint16Array | undefined;
  const blockRows = Math.max(1, Math.floor(readBytes / (width * 2)));
  const read = (index: number): Promise<Uint16Array> => {
    const layer = (buffer ??= new Uint16Array(largeArrayBuffer(rows * width * 2)));
    const readBlock = async (start: number): Promise<void> => {
      const into = layer.subarray(start * width, Math.min(rows, start + blockRows) * width);
      const data = await source.readRows(layers[index]!, start, into.length / width, into);
      // A source may hand back its rows elsewhere (an unaligned read is copied): they belong in the layer.
      if (data.buffer !== into.buffer || data.byteOffset !== into.byteOffset) into.set(data);
    };
    let blocks = Promise.resolve();
    for (let start = 0; start < rows; start += blockRows) blocks = blocks.then(() => readBlock(start));
    const done = blocks.then(() => layer);
    // Awaited later; a read that fails while the caller computes must not go unhandled first.
    done.catch(() => {});
    return done;
  };
  let index = 0;
  let pending = layers.length ? read(0) : undefined;
  let held = false;
  const reads: LayerReads = {
    async next() {
      reads.release();
      if (!pending) throw new RangeError(`Expected at most ${layers.length} layers to be asked for`);
      const layer = await pending;
      pending = undefined;
      held = true;
      return layer;
    },
    release() {
      if (!held) return;
      held = false;
      if (++index < layers.length) pending = read(index);
    },
  };
  return reads;
}
