/**
 * Reads a hidden-state store in row blocks, one layer at a time, without ever
 * loading a whole file. Every header is checked against the manifest when the
 * store is opened.
 */
import { readBank, type BankRow } from "../bank/bank.js";
import { defaultModelName, UNNAMED } from "../defaults.js";
import { FileError, ManifestError, NpyHeaderError, StoreError } from "../errors.js";
import { storeKernels } from "../kernels/default.js";
import { utf8Text } from "../util/fs.js";
import { jsonSyntax } from "../util/jsonl.js";
import { directoryBackend, type StoreBackend } from "./backend.js";
import { foreignLayers, joinBank, normalizedManifest, parseForeignManifest, type ForeignManifest } from "./foreign.js";
import { layerFileName } from "./names.js";
import {
  checkedManifest,
  isNativeManifest,
  MANIFEST_NAME,
  manifestContentSha256,
  parseManifestJson,
  type Manifest,
} from "./manifest.js";
import { headerMismatch, LayerWidth, NPY_MAX_PRELUDE, parseNpyHeader, type NpyHeader } from "./npy.js";

export interface OpenOptions {
  /** Read a store whose `complete` is false (only its first `rows_done` rows). */
  allowIncomplete?: boolean;
  /**
   * The query bank (a path, or its rows) for a store written by another tool
   * whose manifest lacks fact ids and condition families: they are taken from
   * the bank, joined on `query_id`.
   */
  bank?: string | readonly BankRow[];
}

/**
 * Rows per block when a layer is streamed: few enough reads that the calls cost
 * nothing beside the bytes, at most 64 MiB in memory (d = 8192 in float16).
 */
export const STREAM_BLOCK_ROWS = 4096;

/** What a foreign store's manifest did not give, filled from its files and the bank. */
interface Layout {
  offsets: Map<number, number>;
  /** Layers stored as float32 (`<f4`), converted to float16 on read. */
  float32: Set<number>;
}

export class StoreReader {
  private constructor(
    readonly backend: StoreBackend,
    readonly manifest: Manifest,
    private readonly layout: Layout,
    /** Set for a store written by another tool: its manifest as read, before hsm filled the gaps. */
    readonly foreign?: ForeignManifest,
  ) {}

  /**
   * Opens a store folder (or any backend) and validates manifest and headers.
   * hsm's own stores must carry every field; a store written by another tool
   * needs only its row order, layers and checksums, with fact ids and
   * families from `options.bank` where it lacks them (see docs/store.md).
   */
  static async open(source: string | StoreBackend, options: OpenOptions = {}): Promise<StoreReader> {
    const backend = typeof source === "string" ? directoryBackend(source) : source;
    try {
      const where = `${backend.location}/${MANIFEST_NAME}`;
      let text: string;
      try {
        text = utf8Text(await backend.readAll(MANIFEST_NAME), where);
      } catch (err) {
        if (err instanceof FileError && err.problem === "missing") {
          throw new StoreError(backend.location, `has no ${MANIFEST_NAME}; is this a hidden-state store?`, {
            cause: err,
          });
        }
        throw err;
      }
      let value: unknown;
      try {
        value = parseManifestJson(text);
      } catch (err) {
        throw new ManifestError(where, "", `is not valid JSON (${jsonSyntax(err)})`, { cause: err });
      }
      const { manifest, layout, foreign } = isNativeManifest(value)
        ? await openNative(backend, checkedManifest(value, where))
        : await openForeign(backend, value, where, options);
      if (!manifest.complete && !options.allowIncomplete) {
        // compare and report read the store too, and take the setting from kts.json, which hsm metrics writes.
        const finish = "Finish the run, or read the rows so far with hsm metrics --allow-incomplete";
        const rows = `${manifest.rows_done} of ${manifest.query_ids.length} rows`;
        // Another tool's store may say so by its rows_done alone.
        throw foreign !== undefined && foreign.complete === undefined
          ? new ManifestError(where, "rows_done", `is ${rows}, and no "complete" flag is recorded. ${finish}`)
          : new ManifestError(where, "complete", `is false: ${rows} written. ${finish}`);
      }
      const sealed = manifest.manifest_sha256;
      if (!foreign && manifest.complete && sealed !== undefined && manifestContentSha256(manifest) !== sealed) {
        throw new ManifestError(
          where,
          "manifest_sha256",
          "does not match the manifest's content: its labels or settings changed after the store was completed; " +
            "run hsm verify on it",
        );
      }
      return new StoreReader(backend, manifest, layout, foreign);
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

  /**
   * Float16 bits of rows `[start, start + count)` of `layer`, row-major; into
   * `into` (at least count × d values) where given, so that a caller reading
   * layer after layer can reuse its buffers.
   */
  async readRows(layer: number, start: number, count: number, into?: Uint16Array): Promise<Uint16Array> {
    if (this.layout.float32.has(layer)) {
      const wide = await this.readRaw(layer, start, count, 4);
      const half = into ? into.subarray(0, wide.length) : new Uint16Array(wide.length);
      storeKernels().f32ToF16(wide, half);
      return half;
    }
    return this.readRaw(layer, start, count, 2, into && new Uint8Array(into.buffer, into.byteOffset, into.byteLength));
  }

  /** The same rows as float32: widened from float16, or as stored in a float32 store. */
  async readRowsF32(layer: number, start: number, count: number): Promise<Float32Array> {
    if (this.layout.float32.has(layer)) return this.readRaw(layer, start, count, 4);
    const half = await this.readRaw(layer, start, count, 2);
    const out = new Float32Array(half.length);
    storeKernels().f16ToF32(half, out);
    return out;
  }

  private async readRaw(layer: number, start: number, count: number, size: 2, into?: Uint8Array): Promise<Uint16Array>;
  private async readRaw(layer: number, start: number, count: number, size: 4): Promise<Float32Array>;
  private async readRaw(
    layer: number,
    start: number,
    count: number,
    size: 2 | 4,
    into?: Uint8Array,
  ): Promise<Uint16Array | Float32Array> {
    const offset = this.layout.offsets.get(layer);
    if (offset === undefined)
      throw new StoreError(
        this.backend.location,
        `holds no layer ${layer} (it has ${this.manifest.layers.join(", ")})`,
      );
    if (
      !Number.isSafeInteger(start) ||
      !Number.isSafeInteger(count) ||
      start < 0 ||
      count < 0 ||
      start + count > this.readableRows
    ) {
      throw new RangeError(`Expected rows within 0…${this.readableRows} but received ${start}…${start + count}`);
    }
    const d = this.dModel;
    const bytes = await this.backend.read(layerFileName(layer), offset + start * d * size, count * d * size, into);
    if (bytes.length !== count * d * size) {
      throw new StoreError(
        `${this.backend.location}/${layerFileName(layer)}`,
        "ended early while reading (was it truncated?)",
      );
    }
    // A typed view needs an aligned offset; copy the rare unaligned read.
    const aligned = bytes.byteOffset % size === 0 ? bytes : bytes.slice();
    return size === 2
      ? new Uint16Array(aligned.buffer, aligned.byteOffset, count * d)
      : new Float32Array(aligned.buffer, aligned.byteOffset, count * d);
  }

  /** Streams a layer in blocks of at most `blockRows` rows. */
  async *blocks(
    layer: number,
    blockRows = STREAM_BLOCK_ROWS,
  ): AsyncGenerator<{ start: number; count: number; data: Uint16Array }> {
    for (let start = 0; start < this.readableRows; start += blockRows) {
      const count = Math.min(blockRows, this.readableRows - start);
      yield { start, count, data: await this.readRows(layer, start, count) };
    }
  }

  async close(): Promise<void> {
    await this.backend.close();
  }
}

/** Reads the header of one layer file. */
async function readHeader(
  backend: StoreBackend,
  layer: number,
): Promise<{ header: NpyHeader; size: number; path: string }> {
  const name = layerFileName(layer);
  const path = `${backend.location}/${name}`;
  const size = await backend.size(name);
  const prelude = await backend.read(name, 0, Math.min(size, NPY_MAX_PRELUDE));
  return { header: parseNpyHeader(prelude, path), size, path };
}

async function openNative(
  backend: StoreBackend,
  manifest: Manifest,
): Promise<{ manifest: Manifest; layout: Layout; foreign?: undefined }> {
  const offsets = new Map<number, number>();
  for (const layer of manifest.layers) {
    const { header, size, path } = await readHeader(backend, layer);
    const problem = headerMismatch(header, manifest.query_ids.length, manifest.d_model, size);
    if (problem) throw new NpyHeaderError(path, problem.field, problem.message);
    offsets.set(layer, header.dataOffset);
  }
  return { manifest, layout: { offsets, float32: new Set() } };
}

async function openForeign(
  backend: StoreBackend,
  value: unknown,
  where: string,
  options: OpenOptions,
): Promise<{ manifest: Manifest; layout: Layout; foreign: ForeignManifest }> {
  const { manifest: f, problems } = parseForeignManifest(value);
  if (!f || problems.length > 0) throw new ManifestError(where, problems[0]!.key, problems[0]!.message);
  // A file checksummed and gone fails below, when its header is read.
  const { layers, outside } = foreignLayers(f, f.layers ? [] : await backend.list());
  if (outside) throw new StoreError(backend.location, `the layer files: ${outside}`);
  if (layers.length === 0)
    throw new StoreError(backend.location, "holds no L###.npy files and its manifest lists no layers");
  for (const l of layers) {
    if (!f.checksums.has(layerFileName(l)))
      throw new ManifestError(
        where,
        "",
        `records no checksum for ${layerFileName(l)}, so its content cannot be trusted`,
      );
  }
  const n = f.queryIds.length;
  const offsets = new Map<number, number>();
  const float32 = new Set<number>();
  const sizes = new Map<string, number>();
  const width = new LayerWidth(f.dModel);
  for (const layer of layers) {
    const { header, size, path } = await readHeader(backend, layer);
    const name = layerFileName(layer);
    const problem = width.mismatch(header, name, n, size, ["<f2", "<f4"], f.shapes.get(name));
    if (problem) throw new NpyHeaderError(path, problem.field, problem.message);
    offsets.set(layer, header.dataOffset);
    sizes.set(name, size);
    if (header.descr === "<f4") float32.add(layer);
  }
  let factIds = f.factIds;
  let families = f.families;
  if (!factIds || !families) {
    if (options.bank === undefined) {
      throw new ManifestError(
        where,
        "",
        "records no fact ids or condition families; pass the query bank (--bank BANK) to take them from it",
      );
    }
    const bank = typeof options.bank === "string" ? await readBank(options.bank) : options.bank;
    const joined = joinBank(f.queryIds, bank, where, typeof options.bank === "string" ? options.bank : "given");
    factIds ??= joined.factIds;
    families ??= joined.families;
  }
  // A store folder is named for its model (outputs/hidden/<model>/).
  const manifest = normalizedManifest(f, {
    layers,
    dModel: width.d!,
    sizes,
    factIds,
    families,
    model: defaultModelName(backend.location) || UNNAMED,
  });
  return { manifest, layout: { offsets, float32 }, foreign: f };
}
