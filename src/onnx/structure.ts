/**
 * A graph file read for its structure: every byte but the payloads of its
 * large initializers. A model of hundreds of megabytes of inline weights is
 * then a few megabytes of reads, and no memory for the weights, where nothing
 * reads them: extraction hands them to onnxruntime by offset into the file
 * (rewrite.ts), and `inspect-model` never looks at them.
 *
 * The bytes read lie at their own offsets in a buffer the size of the file,
 * so the decoded tensors' payloads are views at their true offsets, which the
 * rewrite's references into the file are computed from. The skipped payloads
 * are left unread, which costs no memory until something writes them;
 * {@link ModelStructure.fill} reads them for a caller that needs the weights
 * after all.
 */
import { changedWhileRead, openSpans, readAll, readWhole, type FileSpans } from "../util/fs.js";

/** A payload at least this long is skipped (well above the 4 KB the rewrite leaves inline). */
const SKIP_BYTES = 1 << 16;
/** The least that is read at once: a window past the bytes wanted, so that small fields take one read. */
const WINDOW_BYTES = 1 << 16;

/** The fields the walk enters, by number: ModelProto.graph, GraphProto.initializer, TensorProto.raw_data. */
const MODEL_GRAPH = 7;
const GRAPH_INITIALIZER = 5;
const TENSOR_RAW_DATA = 9;

/** A graph file's bytes, but for the `unread` spans ([start, end) offsets into `bytes`). */
export interface ModelStructure {
  bytes: Buffer;
  unread: readonly (readonly [number, number])[];
  /** Reads the unread spans: `bytes` is then the whole file. */
  fill(): Promise<void>;
}

/** The graph file at `path` (a link followed), whole: a structure with nothing unread. */
export async function readModel(path: string): Promise<ModelStructure> {
  return { bytes: await readWhole(path), unread: [], fill: async () => {} };
}

/** The graph file at `path` (a link followed) without its initializers' large payloads. */
export async function readModelStructure(path: string): Promise<ModelStructure> {
  const file = openSpans(path);
  let bytes = file.bytes;
  let spans: [number, number][];
  try {
    const unread = await skippedPayloads(file);
    // Bytes the walk did not expect, or a file that shrank: read whole, the decoder says what is wrong.
    if (unread === undefined) bytes = await readAll(file);
    spans = unread ?? [];
  } finally {
    file.close();
  }
  let filling: Promise<void> | undefined;
  const fill = async () => {
    if (spans.length === 0) return;
    const again = openSpans(path, bytes);
    try {
      for (const [from, to] of spans) {
        if ((await again.read(from, to)) < to) throw changedWhileRead(path);
      }
      spans.length = 0;
    } finally {
      again.close();
    }
  };
  return { bytes, unread: spans, fill: () => (filling ??= fill()) };
}

/**
 * Reads a ModelProto's bytes into `file.bytes`, walking its fields, but for the raw payloads of large
 * initializers, and returns those ([start, end), without what a read window took of them anyway); undefined
 * where the bytes do not parse as the walk expects or the file ended early.
 */
async function skippedPayloads(file: FileSpans): Promise<[number, number][] | undefined> {
  const { bytes } = file;
  const size = bytes.length;
  const skipped: [number, number][] = [];
  let read = 0; // every byte before it that is not skipped has been read
  let at = 0;
  // Makes [from, from + n) readable, reading a window at least.
  const want = async (from: number, n: number): Promise<void> => {
    if (from + n <= read) return;
    const start = Math.max(from, read);
    const end = Math.min(size, Math.max(from + n, start + WINDOW_BYTES));
    if ((await file.read(start, end)) < end) throw new Unexpected();
    read = end;
  };
  const varint = async (): Promise<number> => {
    await want(at, 10);
    let value = 0;
    for (let shift = 0; shift < 64 && at < size; shift += 7) {
      const b = bytes[at++]!;
      value += (b & 0x7f) * 2 ** shift;
      if (b < 0x80) return value;
    }
    throw new Unexpected();
  };
  // The fields of a message that ends at `end`: a length-delimited one that `enter` takes is walked by it (its
  // payload ends at the given offset); every other field is read.
  const fields = async (end: number, enter?: (field: number, end: number) => Promise<boolean>): Promise<void> => {
    while (at < end) {
      const tag = await varint();
      const wire = tag % 8;
      if (wire === 0) {
        await varint();
        continue;
      }
      if (wire !== 1 && wire !== 2 && wire !== 5) throw new Unexpected();
      const length = wire === 1 ? 8 : wire === 5 ? 4 : await varint();
      const stop = at + length;
      if (stop > end) throw new Unexpected();
      if (wire === 2 && enter && (await enter(Math.floor(tag / 8), stop))) {
        if (at !== stop) throw new Unexpected();
        continue;
      }
      await want(at, stop - at);
      at = stop;
    }
    if (at !== end) throw new Unexpected();
  };
  const tensor = async (field: number, end: number): Promise<boolean> => {
    if (field !== TENSOR_RAW_DATA || end - at < SKIP_BYTES) return false;
    if (read < end) skipped.push([Math.max(at, read), end]);
    read = Math.max(read, end);
    at = end;
    return true;
  };
  // Only the walk's path is entered: the model's graph, the graph's initializers, their raw payloads.
  const entering =
    (wanted: number, inner: (field: number, end: number) => Promise<boolean>) =>
    async (field: number, end: number): Promise<boolean> => {
      if (field !== wanted) return false;
      await fields(end, inner);
      return true;
    };
  const model = entering(MODEL_GRAPH, entering(GRAPH_INITIALIZER, tensor));
  try {
    await fields(size, model);
    return skipped;
  } catch (err) {
    if (err instanceof Unexpected) return undefined;
    throw err;
  }
}

/** The walk met bytes it does not expect. */
class Unexpected extends Error {}
