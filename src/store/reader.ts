/**
 * Reads a hidden-state store in row blocks, one layer at a time, without ever
 * loading a whole file. Every header is checked against the manifest when the
 * store is opened.
 */
import { ManifestError, NpyHeaderError, StoreError } from "../errors.js";
import { storeKernels } from "../kernels/registry.js";
import { directoryBackend, type StoreBackend } from "./backend.js";
import { layerFileName } from "./names.js";
import { MANIFEST_NAME, parseManifest, type Manifest } from "./manifest.js";
import { NPY_MAX_HEADER, parseNpyHeader, type NpyHeader } from "./npy.js";

export interface OpenOptions {
  /** Read a store whose `complete` is false (only its first `rows_done` rows). */
  allowIncomplete?: boolean;
}

/** Checks a parsed header against what the manifest promises for that file. */
export function headerMismatch(h: NpyHeader, rows: number, d: number, fileSize: number): string | undefined {
  if (h.descr !== "<f2") return `dtype is '${h.descr}', expected '<f2' (float16)`;
  if (h.fortranOrder) return "is Fortran-ordered, expected C order";
  if (h.shape.length !== 2 || h.shape[0] !== rows || h.shape[1] !== d) {
    return `header shape is (${h.shape.join(", ")}), the manifest says (${rows}, ${d})`;
  }
  if (h.dataOffset + h.dataBytes !== fileSize) {
    return `header shape (${h.shape.join(", ")}) needs ${h.dataOffset + h.dataBytes} bytes but the file holds ${fileSize}` +
      (fileSize < h.dataOffset + h.dataBytes ? " (truncated)" : "");
  }
  return undefined;
}

export class StoreReader {
  private constructor(
    readonly backend: StoreBackend,
    readonly manifest: Manifest,
    private readonly dataOffsets: Map<number, number>,
  ) {}

  /** Opens a store folder (or any backend) and validates manifest and headers. */
  static async open(source: string | StoreBackend, options: OpenOptions = {}): Promise<StoreReader> {
    const backend = typeof source === "string" ? directoryBackend(source) : source;
    try {
      const where = `${backend.location}/${MANIFEST_NAME}`;
      let text: string;
      try {
        text = Buffer.from(await backend.readAll(MANIFEST_NAME)).toString("utf8");
      } catch (err) {
        throw new StoreError(backend.location, `has no readable ${MANIFEST_NAME} (${(err as Error).message}); is this a hidden-state store?`);
      }
      const manifest = parseManifest(text, where);
      if (!manifest.complete && !options.allowIncomplete) {
        throw new ManifestError(
          where,
          "complete",
          `is false: ${manifest.rows_done} of ${manifest.query_ids.length} rows written. Finish the run, or pass --allow-incomplete to read the rows so far`,
        );
      }
      const offsets = new Map<number, number>();
      for (const layer of manifest.layers) {
        const name = layerFileName(layer);
        const path = `${backend.location}/${name}`;
        const size = await backend.size(name);
        const prelude = await backend.read(name, 0, Math.min(size, NPY_MAX_HEADER + 12));
        const header = parseNpyHeader(prelude, path);
        const problem = headerMismatch(header, manifest.query_ids.length, manifest.d_model, size);
        if (problem) throw new NpyHeaderError(path, "shape", problem);
        offsets.set(layer, header.dataOffset);
      }
      return new StoreReader(backend, manifest, offsets);
    } catch (err) {
      await backend.close();
      throw err;
    }
  }

  get rows(): number {
    return this.manifest.query_ids.length;
  }

  get dModel(): number {
    return this.manifest.d_model;
  }

  /** Rows that may be read: all of them in a complete store, `rows_done` otherwise. */
  get readableRows(): number {
    return this.manifest.complete ? this.rows : this.manifest.rows_done;
  }

  /** Float16 bits of rows `[start, start + count)` of `layer`, row-major. */
  async readRows(layer: number, start: number, count: number): Promise<Uint16Array> {
    const offset = this.dataOffsets.get(layer);
    if (offset === undefined) throw new StoreError(this.backend.location, `holds no layer ${layer} (it has ${this.manifest.layers.join(", ")})`);
    if (!Number.isSafeInteger(start) || !Number.isSafeInteger(count) || start < 0 || count < 0 || start + count > this.readableRows) {
      throw new RangeError(`Expected rows within 0…${this.readableRows} but received ${start}…${start + count}`);
    }
    const d = this.dModel;
    const bytes = await this.backend.read(layerFileName(layer), offset + start * d * 2, count * d * 2);
    if (bytes.length !== count * d * 2) {
      throw new StoreError(`${this.backend.location}/${layerFileName(layer)}`, "ended early while reading (was it truncated?)");
    }
    if (bytes.byteOffset % 2 === 0) return new Uint16Array(bytes.buffer, bytes.byteOffset, count * d);
    return new Uint16Array(bytes.slice().buffer);
  }

  /** The same rows widened to float32. */
  async readRowsF32(layer: number, start: number, count: number): Promise<Float32Array> {
    const half = await this.readRows(layer, start, count);
    const out = new Float32Array(half.length);
    storeKernels().f16ToF32(half, out);
    return out;
  }

  /** Streams a layer in blocks of at most `blockRows` rows. */
  async *blocks(layer: number, blockRows = 4096): AsyncGenerator<{ start: number; count: number; data: Uint16Array }> {
    for (let start = 0; start < this.readableRows; start += blockRows) {
      const count = Math.min(blockRows, this.readableRows - start);
      yield { start, count, data: await this.readRows(layer, start, count) };
    }
  }

  async close(): Promise<void> {
    await this.backend.close();
  }
}
