/**
 * Writes a hidden-state store: every `L###.npy` preallocated at full size, row
 * blocks written at their offsets, progress committed as `rows_done` (files
 * fsynced first, then the manifest replaced atomically), and checksums recorded
 * only when every row is in. A store can be reopened and resumed from `rows_done`.
 */
import { readdir, statfs, unlink, type FileHandle } from "node:fs/promises";
import { availableParallelism } from "node:os";
import { join } from "node:path";

import { ANCHOR_TEMPLATE, PERTURBED_TEMPLATE } from "../bank/prompt.js";
import { MAX_PROMPT_LEN } from "../defaults.js";
import { DiskSpaceError, StoreError } from "../errors.js";
import { storeKernels } from "../kernels/default.js";
import { fileError, isTempOf, makeDir, openOutput, osReason, readTextIfPresent } from "../util/fs.js";
import { TOOL_VERSION } from "../version.js";
import { hashFiles } from "./hash.js";
import { layerFileName } from "./names.js";
import {
  MANIFEST_NAME,
  parseManifest,
  STORE_FORMAT,
  storedTensors,
  writeManifestAtomic,
  type FileEntry,
  type Manifest,
} from "./manifest.js";
import { buildNpyHeader } from "./npy.js";

/** What the caller knows before the first row: everything but the data. */
export type StoreInit = Pick<
  Manifest,
  | "model"
  | "model_sha256"
  | "num_layers"
  | "d_model"
  | "layers"
  | "layer_rule"
  | "last_layer_final_norm"
  | "dtype"
  | "query_ids"
  | "fact_ids"
  | "condition_families"
> & {
  model_source?: string;
  max_prompt_len?: number;
  shard?: Manifest["shard"];
  style?: Manifest["style"];
  padding_side?: Manifest["padding_side"];
  weights?: string;
  extraction?: Manifest["extraction"];
};

/** The manifest fields that must agree for a run to continue an existing store. */
const IDENTITY = [
  "model",
  "model_sha256",
  "num_layers",
  "d_model",
  "layers",
  "layer_rule",
  "last_layer_final_norm",
  "query_ids",
  "shard",
] as const;

export class StoreWriter {
  private readonly scratch = new Map<number, Uint16Array>();

  private constructor(
    readonly dir: string,
    readonly manifest: Manifest,
    private readonly handles: Map<number, FileHandle>,
    private readonly dataOffset: Map<number, number>,
  ) {}

  /**
   * Creates a new store in `dir` (made if missing), or reopens the store
   * already there if it was made for the same model, rows and layers. A store
   * for anything else is refused rather than mixed.
   */
  static async open(dir: string, init: StoreInit): Promise<StoreWriter> {
    validateInit(init, dir);
    try {
      await makeDir(dir);
    } catch (err) {
      throw fileError(err, dir, "write");
    }
    const existing = await readExisting(dir);
    // A complete store is only reopened, not written; a store to write is this writer's alone (it holds the lock).
    if (!existing?.complete) await removeLeftTemps(dir);
    if (existing) return StoreWriter.resume(dir, existing, init);
    return StoreWriter.create(dir, init);
  }

  /**
   * A new store: checks that the whole store fits in the free space, then
   * allocates every file for real (zeros written, not a sparse file whose
   * space another program could take later), so that a full disk stops a run
   * before its first row rather than in its middle.
   */
  private static async create(dir: string, init: StoreInit): Promise<StoreWriter> {
    const n = init.query_ids.length;
    const files: Record<string, FileEntry> = {};
    const header = buildNpyHeader("<f2", [n, init.d_model]);
    for (const layer of init.layers) {
      const bytes = header.length + n * init.d_model * 2;
      files[layerFileName(layer)] = { layer, shape: [n, init.d_model], bytes, sha256: "", nonfinite: 0, max_abs: null };
    }
    const manifest: Manifest = {
      format: STORE_FORMAT,
      model: init.model,
      model_sha256: init.model_sha256,
      ...(init.model_source ? { model_source: init.model_source } : {}),
      num_layers: init.num_layers,
      d_model: init.d_model,
      layers: [...init.layers],
      layer_rule: init.layer_rule,
      last_layer_final_norm: init.last_layer_final_norm,
      probe_position: "last_valid_input_token",
      prompt: { anchor: ANCHOR_TEMPLATE, other: PERTURBED_TEMPLATE },
      max_prompt_len: init.max_prompt_len ?? MAX_PROMPT_LEN,
      padding_side: init.padding_side ?? "left",
      truncation_side: "left",
      dtype: init.dtype,
      ...(init.weights ? { weights: init.weights } : {}),
      query_ids: init.query_ids,
      fact_ids: init.fact_ids,
      condition_families: init.condition_families,
      files,
      rows_done: 0,
      complete: false,
      created_at: new Date().toISOString(),
      tool_version: TOOL_VERSION,
      ...(init.shard ? { shard: init.shard } : {}),
      ...(init.style ? { style: init.style } : {}),
      ...(init.extraction ? { extraction: init.extraction } : {}),
    };
    await ensureSpace(dir, Object.values(files).reduce((sum, f) => sum + f.bytes, 0) + manifestRoom(manifest));
    // The manifest (no row done) is written before any layer file, so a run killed at any moment leaves either
    // nothing or a store that says it is unfinished: never zero-filled layer files that adopt could take for data.
    await writeManifestAtomic(dir, manifest);
    const handles = new Map<number, FileHandle>();
    const offsets = new Map<number, number>();
    try {
      for (const layer of init.layers) {
        const path = join(dir, layerFileName(layer));
        const fh = await openOutput(path, "create");
        handles.set(layer, fh);
        try {
          await allocate(fh, header.length, files[layerFileName(layer)]!.bytes);
          await writeAll(fh, header, 0);
        } catch (err) {
          throw fileError(err, path, "write");
        }
        offsets.set(layer, header.length);
      }
    } catch (err) {
      // The files hold nothing yet: leave no partial store behind.
      await Promise.all([...handles.values()].map((h) => h.close()));
      await Promise.all(
        [...handles.keys()].map((layer) => unlink(join(dir, layerFileName(layer))).catch(() => undefined)),
      );
      await unlink(join(dir, MANIFEST_NAME)).catch(() => undefined);
      throw err;
    }
    const writer = new StoreWriter(dir, manifest, handles, offsets);
    await writer.commit(0);
    return writer;
  }

  private static async resume(dir: string, manifest: Manifest, init: StoreInit): Promise<StoreWriter> {
    for (const key of IDENTITY) {
      if (JSON.stringify(manifest[key]) === JSON.stringify(init[key])) continue;
      // The name is the user's word on the command line: say which name the store has.
      if (key === "model")
        throw new StoreError(
          dir,
          `already holds a store made with a different model name (model ${JSON.stringify(manifest.model)}, now ` +
            `${JSON.stringify(init.model)}); refusing to mix them. Use another --out folder, the same --model, or delete this one`,
        );
      throw new StoreError(
        dir,
        `already holds a store made with a different ${key.replace(/_/g, " ")}; refusing to mix them. Use another --out folder or delete this one`,
      );
    }
    madeFromSame(dir, manifest, init);
    const [was, now] = [storedTensors(manifest), storedTensors(init)];
    if (was !== undefined && now !== undefined && was !== now)
      throw new StoreError(
        dir,
        "already holds a store whose layers were read from other graph tensors (style); refusing to mix them. " +
          "Use another --out folder, the same --hidden-tensors, or delete this one",
      );
    const handles = new Map<number, FileHandle>();
    const offsets = new Map<number, number>();
    const writer = new StoreWriter(dir, manifest, handles, offsets);
    if (manifest.complete) return writer;
    // Nothing is committed yet (the run may have stopped before its layer files were all made): start afresh,
    // batched as this run says.
    if (manifest.rows_done === 0) return StoreWriter.create(dir, init);
    // A self-check is only ever recorded at completion or with every row taken back: this run makes a new one.
    delete manifest.self_check;
    try {
      // Files with holes (from a run whose allocation was cut short, or copied sparsely) are allocated again first.
      const holes = new Map<number, number>();
      for (const layer of manifest.layers) {
        const name = layerFileName(layer);
        const entry = manifest.files[name]!;
        const path = join(dir, name);
        // Opened without following a link: a resume writes only into this store's own files.
        const fh = await openOutput(path, "update");
        handles.set(layer, fh);
        let st;
        try {
          st = await fh.stat();
        } catch (err) {
          throw fileError(err, path);
        }
        if (st.size !== entry.bytes)
          throw new StoreError(path, `is ${st.size} bytes, the manifest says ${entry.bytes}; cannot resume`);
        if (st.blocks * STAT_BLOCK_BYTES < st.size) holes.set(layer, st.size - st.blocks * STAT_BLOCK_BYTES);
        offsets.set(layer, buildNpyHeader("<f2", entry.shape).length);
      }
      await ensureSpace(dir, [...holes.values()].reduce((a, b) => a + b, 0) + manifestRoom(manifest));
      for (const layer of holes.keys()) {
        const path = join(dir, layerFileName(layer));
        const entry = manifest.files[layerFileName(layer)]!;
        try {
          // Rows from rows_done on are not committed: zeros may replace them.
          await allocate(
            handles.get(layer)!,
            offsets.get(layer)! + manifest.rows_done * manifest.d_model * 2,
            entry.bytes,
          );
        } catch (err) {
          throw fileError(err, path, "write");
        }
      }
    } catch (err) {
      await writer.close();
      throw err;
    }
    return writer;
  }

  get rows(): number {
    return this.manifest.query_ids.length;
  }

  get rowsDone(): number {
    return this.manifest.rows_done;
  }

  get complete(): boolean {
    return this.manifest.complete;
  }

  /** Writes float16 rows `[rowStart, rowStart + count)` of one layer. */
  async writeRows(layer: number, rowStart: number, data: Uint16Array): Promise<void> {
    const fh = this.handles.get(layer);
    if (!fh)
      throw new StoreError(
        this.dir,
        this.complete ? "is complete; nothing more can be written" : `has no layer ${layer}`,
      );
    const d = this.manifest.d_model;
    if (data.length % d !== 0 || rowStart < 0 || rowStart * d + data.length > this.rows * d) {
      throw new RangeError(
        `Expected whole rows of width ${d} inside the store but received ${data.length} values at row ${rowStart}`,
      );
    }
    const bytes = new Uint8Array(data.buffer, data.byteOffset, data.byteLength);
    try {
      await writeAll(fh, bytes, this.dataOffset.get(layer)! + rowStart * d * 2);
    } catch (err) {
      throw fileError(err, join(this.dir, layerFileName(layer)), "write");
    }
  }

  /** Converts float32 rows to float16 exactly as NumPy does and writes them. */
  async writeRowsF32(layer: number, rowStart: number, data: Float32Array): Promise<void> {
    let half = this.scratch.get(layer);
    if (!half || half.length < data.length) {
      half = new Uint16Array(data.length);
      this.scratch.set(layer, half);
    }
    const view = half.subarray(0, data.length);
    storeKernels().f32ToF16(data, view);
    await this.writeRows(layer, rowStart, view);
  }

  /** Makes rows `[0, rowsDone)` durable: fsync every file, then record the count. */
  async commit(rowsDone: number): Promise<void> {
    if (!Number.isSafeInteger(rowsDone) || rowsDone < 0 || rowsDone > this.rows) {
      throw new RangeError(`Expected rows_done within 0…${this.rows} but received ${rowsDone}`);
    }
    await Promise.all(
      [...this.handles].map(([layer, h]) =>
        h.sync().catch((err: unknown) => {
          throw fileError(err, join(this.dir, layerFileName(layer)), "write");
        }),
      ),
    );
    this.manifest.rows_done = rowsDone;
    await writeManifestAtomic(this.dir, this.manifest);
  }

  /** Takes every row back (`rows_done: 0`), keeping what the manifest says of why; a resume writes them all again. */
  async abandonRows(): Promise<void> {
    await this.commit(0);
  }

  /**
   * Seals a store whose rows are all written: fsync, hash every file (in
   * parallel), record checksums and statistics, then `complete: true`.
   */
  async finish(concurrency = availableParallelism()): Promise<Manifest> {
    if (this.complete) return this.manifest;
    await this.commit(this.rows);
    await this.closeFiles();
    const names = this.manifest.layers.map(layerFileName);
    const outcomes = await hashFiles(
      names.map((name) => ({
        path: join(this.dir, name),
        f16From: buildNpyHeader("<f2", this.manifest.files[name]!.shape).length,
      })),
      concurrency,
    );
    outcomes.forEach((o, i) => {
      const name = names[i]!;
      if (!o.ok) throw new StoreError(join(this.dir, name), `could not be hashed: ${o.code ? osReason(o) : o.message}`);
      const entry = this.manifest.files[name]!;
      entry.sha256 = o.result.sha256;
      entry.nonfinite = o.result.stats!.nonfinite;
      entry.max_abs = o.result.stats!.maxAbs;
    });
    this.manifest.complete = true;
    await writeManifestAtomic(this.dir, this.manifest);
    return this.manifest;
  }

  private async closeFiles(): Promise<void> {
    const all = [...this.handles.values()];
    this.handles.clear();
    await Promise.all(all.map((h) => h.close()));
  }

  async close(): Promise<void> {
    await this.closeFiles();
  }
}

/** The `extraction` settings hsm records, in the order a difference between two stores is named. */
export const EXTRACTION_SETTINGS = ["rows_sha256", "batch_size", "commit_rows", "device"] as const;

/**
 * Refuses to continue a store made from other rows (`rows_sha256`), or, where rows are kept and more are to be
 * written, batched another way: batch size, commit block and device decide which rows share a batch and how the
 * sums are taken, so they change the stored bytes. Stores that do not record them are not checked.
 */
function madeFromSame(dir: string, manifest: Manifest, init: StoreInit): void {
  const was = manifest.extraction;
  const now = init.extraction;
  if (!was || !now) return;
  const writing = !manifest.complete && manifest.rows_done > 0;
  for (const key of EXTRACTION_SETTINGS) {
    if (key !== "rows_sha256" && !writing) continue;
    if (was[key] === now[key]) continue;
    const what =
      key === "rows_sha256"
        ? "rows: a query's id, fact, family or text differs in the bank (extraction.rows_sha256)"
        : `${key.replace(/_/g, " ")} (extraction.${key} ${JSON.stringify(was[key])}, now ${JSON.stringify(now[key])})`;
    throw new StoreError(
      dir,
      `already holds a store made with different ${what}; refusing to mix them. Use another --out folder, ` +
        (key === "rows_sha256" ? "or delete this one" : `the same --${key.replace(/_/g, "-")}, or delete this one`),
    );
  }
}

/** Bytes written at a time when a file is allocated. */
const ALLOCATE_BLOCK = 8 << 20;

let zeros: Uint8Array | undefined;

/** Writes zeros over `[from, to)` so that the file system gives those bytes real blocks. */
async function allocate(fh: FileHandle, from: number, to: number): Promise<void> {
  zeros ??= new Uint8Array(ALLOCATE_BLOCK);
  for (let pos = from; pos < to; pos += ALLOCATE_BLOCK)
    await writeAll(fh, zeros.subarray(0, Math.min(ALLOCATE_BLOCK, to - pos)), pos);
}

async function writeAll(fh: FileHandle, bytes: Uint8Array, position: number): Promise<void> {
  for (let done = 0; done < bytes.length;) {
    const { bytesWritten } = await fh.write(bytes, done, bytes.length - done, position + done);
    done += bytesWritten;
  }
}

/** stat's `blocks` counts 512-byte units whatever the file system's block size (POSIX `st_blocks`). */
const STAT_BLOCK_BYTES = 512;

/** Slack beyond two copies of index.json, for the new copy outgrowing the old (as checksums are added). */
const MANIFEST_SLACK_BYTES = 64 << 10;

/** Room for index.json while it is replaced: the old file and the new one side by side, with slack for growth. */
function manifestRoom(manifest: Manifest): number {
  return 2 * Buffer.byteLength(JSON.stringify(manifest, null, 2)) + MANIFEST_SLACK_BYTES;
}

/** Refuses, before anything is written, a store that needs more than the free space of `dir`'s file system. */
async function ensureSpace(dir: string, needed: number): Promise<void> {
  let available: number;
  try {
    const s = await statfs(dir);
    available = s.bavail * s.bsize;
  } catch (err) {
    throw fileError(err, dir);
  }
  if (available < needed) throw new DiskSpaceError(dir, needed, available);
}

/** Removes the temporary manifests that runs killed while replacing index.json left in `dir`. */
async function removeLeftTemps(dir: string): Promise<void> {
  let names: string[];
  try {
    names = await readdir(dir);
  } catch (err) {
    throw fileError(err, dir);
  }
  for (const name of names.filter((n) => isTempOf(n, MANIFEST_NAME))) {
    const path = join(dir, name);
    await unlink(path).catch((err: unknown) => {
      if ((err as NodeJS.ErrnoException).code !== "ENOENT") throw fileError(err, path, "write");
    });
  }
}

async function readExisting(dir: string): Promise<Manifest | undefined> {
  const path = join(dir, MANIFEST_NAME);
  const text = await readTextIfPresent(path);
  return text === null ? undefined : parseManifest(text, path);
}

function validateInit(init: StoreInit, dir: string): void {
  const n = init.query_ids.length;
  if (init.fact_ids.length !== n || init.condition_families.length !== n) {
    throw new StoreError(
      dir,
      `needs one fact id and family per row: ${n} query ids, ${init.fact_ids.length} fact ids, ${init.condition_families.length} families`,
    );
  }
  if (!Number.isSafeInteger(init.d_model) || init.d_model < 1)
    throw new StoreError(dir, `d_model must be a positive integer, not ${init.d_model}`);
  if (init.layers.length === 0) throw new StoreError(dir, "needs at least one layer to store");
}
