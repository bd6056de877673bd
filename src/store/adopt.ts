/**
 * Adopting a store written by another tool: hash every `L###.npy`, join the
 * rows with the bank, and write the `index.json` hsm would have written, after
 * which every command treats the store as its own. A foreign `index.json` is
 * kept beside it as `index.orig.json`.
 */
import { readdir } from "node:fs/promises";
import { availableParallelism } from "node:os";
import { join } from "node:path";

import { mainForwardRows, readBank, type BankRow } from "../bank/bank.js";
import { defaultModelName, UNNAMED } from "../defaults.js";
import { ManifestError, StoreError } from "../errors.js";
import { TOOL_VERSION } from "../version.js";
import { fileError, openInput, osReason, readTextIfPresent, writeFileAtomic } from "../util/fs.js";
import { jsonSyntax } from "../util/jsonl.js";
import {
  foreignLayers,
  joinBank,
  normalizedManifest,
  parseForeignManifest,
  takenComplete,
  type ForeignManifest,
} from "./foreign.js";
import { hashFiles } from "./hash.js";
import { lockUnlessReadOnly } from "./lock-read-only.js";
import {
  checkedManifest,
  isNativeManifest,
  MANIFEST_NAME,
  parseManifestJson,
  writeManifestAtomic,
  type Manifest,
} from "./manifest.js";
import { layerFileName, layerOfFileName } from "./names.js";
import { LayerWidth, NPY_MAX_PRELUDE, parseNpyHeader, recordedShapeMismatch } from "./npy.js";

/** Where a foreign manifest is kept once adopted. */
const ORIGINAL_MANIFEST_NAME = "index.orig.json";

export interface AdoptOptions {
  /** The query bank the store was made from (a path, or its rows). */
  bank: string | readonly BankRow[];
  /** The model name to record; default: the foreign manifest's, else the store folder's name. */
  model?: string;
  /** Files hashed at once; default the core count. */
  concurrency?: number;
}

/**
 * Writes a conforming `index.json` for the folder of `L###.npy` files `dir`.
 * The row order is the foreign manifest's where there is one, else the bank's
 * main-forward rows; every file is hashed, and checksums a foreign manifest
 * records must match. A store that is already hsm's is returned unchanged.
 * @example await adoptStore("outputs/hidden/llama", { bank: "bank.jsonl" })
 */
export async function adoptStore(dir: string, o: AdoptOptions): Promise<Manifest> {
  const where = join(dir, MANIFEST_NAME);
  // On read-only media a store that is hsm's already and complete is returned as it is; nothing else can be done.
  const lock = await lockUnlessReadOnly(dir);
  try {
    const { original, native, foreign } = await readExisting(dir, where);
    if (native?.complete) return native;
    if (lock.readOnly) throw fileError(lock.readOnly.cause, dir, "write");
    if (native) {
      // Its layer files may be the zeros a new store starts from: they are the run's to finish, not data to adopt.
      throw new StoreError(
        dir,
        `is an unfinished hsm store (${native.rows_done} of ${native.query_ids.length} rows written); ` +
          "rerun the command that made it to finish it, or delete the folder",
      );
    }

    const bankName = typeof o.bank === "string" ? o.bank : "given";
    const bank = typeof o.bank === "string" ? await readBank(o.bank) : o.bank;
    const queryIds = foreign?.queryIds ?? mainForwardRows(bank).map((r) => r.query_id);
    const joined = joinBank(queryIds, bank, where, bankName);
    const layers = await layersToAdopt(dir, foreign);
    const { d, sizes, offsets } = await checkHeaders(dir, layers, queryIds.length, foreign);

    const outcomes = await hashFiles(
      layers.map((l, i) => ({ path: join(dir, layerFileName(l)), f16From: offsets[i]! })),
      o.concurrency ?? availableParallelism(),
    );
    const base: ForeignManifest = foreign ?? {
      queryIds,
      checksums: new Map(),
      otherFiles: [],
      nonfinite: new Map(),
      shapes: new Map(),
      sizes: new Map(),
    };
    const manifest = normalizedManifest(base, {
      layers,
      dModel: d!,
      sizes,
      factIds: joined.factIds,
      families: joined.families,
      model: defaultModelName(dir) || UNNAMED,
    });
    if (o.model !== undefined) manifest.model = o.model;
    outcomes.forEach((outcome, i) => {
      const name = layerFileName(layers[i]!);
      const path = join(dir, name);
      if (!outcome.ok) throw new StoreError(path, `cannot be read: ${osReason(outcome)}`);
      const recorded = foreign?.checksums.get(name);
      if (recorded !== undefined && recorded !== outcome.result.sha256) {
        throw new StoreError(
          path,
          `sha256 is ${outcome.result.sha256}, its manifest says ${recorded}: the file changed after it was written; not adopted`,
        );
      }
      const entry = manifest.files[name]!;
      entry.sha256 = outcome.result.sha256;
      entry.nonfinite = outcome.result.stats!.nonfinite;
      entry.max_abs = outcome.result.stats!.maxAbs;
    });
    manifest.created_at = new Date().toISOString();
    manifest.tool_version = TOOL_VERSION;

    // Keep the foreign manifest first, so that no moment lacks either.
    if (original) await keepOriginal(join(dir, ORIGINAL_MANIFEST_NAME), original);
    await writeManifestAtomic(dir, manifest);
    return manifest;
  } finally {
    await lock.release();
  }
}

/**
 * Saves the foreign manifest as `index.orig.json`. One already there from an earlier adoption is never replaced
 * by a different one: it may be the only copy of what another tool wrote.
 */
async function keepOriginal(path: string, original: string): Promise<void> {
  const kept = await readTextIfPresent(path);
  if (kept === original) return;
  if (kept !== null)
    throw new StoreError(
      path,
      "already keeps the manifest of an earlier adoption, which differs from this index.json; move it away first",
    );
  await writeFileAtomic(path, original);
}

/**
 * The store's `index.json` as found: none; hsm's own (`native`, parsed: nothing to adopt); or another tool's
 * (`foreign`), which must be usable and complete.
 */
async function readExisting(
  dir: string,
  where: string,
): Promise<{ original?: string; native?: Manifest; foreign?: ForeignManifest }> {
  const original = await readTextIfPresent(where);
  if (original === null) return {};
  let value: unknown;
  try {
    value = parseManifestJson(original);
  } catch (err) {
    throw new ManifestError(
      where,
      "",
      `is not valid JSON (${jsonSyntax(err)}); move it away to adopt the store from the bank alone`,
      { cause: err },
    );
  }
  if (isNativeManifest(value)) return { original, native: checkedManifest(value, where) };
  const parsed = parseForeignManifest(value);
  if (!parsed.manifest || parsed.problems.length > 0)
    throw new ManifestError(where, parsed.problems[0]!.key, parsed.problems[0]!.message);
  const foreign = parsed.manifest;
  if (!takenComplete(foreign))
    throw new StoreError(
      dir,
      `is incomplete by its own manifest (${foreign.complete === false ? "complete: false" : `rows_done: ${foreign.rowsDone} of ${foreign.queryIds.length} rows`}); finish writing it before adopting it`,
    );
  return { original, foreign };
}

/** The layers to adopt: the foreign manifest's, else every `L###.npy` in the folder, which must hold no others. */
async function layersToAdopt(dir: string, foreign: ForeignManifest | undefined): Promise<number[]> {
  let names: string[];
  try {
    names = (await readdir(dir)).filter((name) => layerOfFileName(name) !== undefined).sort();
  } catch (err) {
    throw fileError(err, dir);
  }
  const gone = foreign?.layers ? undefined : [...(foreign?.checksums.keys() ?? [])].find((n) => !names.includes(n));
  if (gone !== undefined)
    throw new StoreError(join(dir, gone), "has a checksum in the manifest but is not in the store folder");
  const { layers, outside } = foreign
    ? foreignLayers(foreign, names)
    : { layers: names.map((name) => layerOfFileName(name)!) };
  if (outside) throw new StoreError(dir, `the layer files: ${outside}`);
  if (layers.length === 0) throw new StoreError(dir, "holds no L###.npy files to adopt");
  const unlisted = names.filter((name) => !layers.includes(layerOfFileName(name)!));
  if (unlisted.length > 0)
    throw new StoreError(join(dir, unlisted[0]!), "is in the store folder but not among the layers its manifest lists");
  return layers;
}

/**
 * Every header must describe float16 rows of one width (a foreign manifest's `d_model`, else the first file's), one
 * per query, with the shape and size the foreign manifest records per file; returns that width and each file's
 * size and data offset.
 */
async function checkHeaders(dir: string, layers: number[], n: number, foreign: ForeignManifest | undefined) {
  const width = new LayerWidth(foreign?.dModel);
  const sizes = new Map<string, number>();
  const offsets: number[] = [];
  for (const layer of layers) {
    const name = layerFileName(layer);
    const path = join(dir, name);
    const prelude = await readPrelude(path);
    const header = parseNpyHeader(prelude.bytes, path);
    if (header.descr === "<f4") {
      throw new StoreError(
        path,
        "holds float32 ('<f4'); hsm's stores hold float16. Read it without adopting (verify and metrics with --bank), or convert it with numpy's astype(np.float16) first",
      );
    }
    // The recorded shape is checked here, not by width.mismatch, to be refused before the recorded size.
    const recorded = foreign?.shapes.get(name);
    const shape = recorded && recordedShapeMismatch(header, recorded);
    if (shape) throw new StoreError(path, shape);
    const size = foreign?.sizes.get(name);
    if (size !== undefined && size !== prelude.size)
      throw new StoreError(path, `is ${prelude.size} bytes but its manifest says ${size}; not adopted`);
    const problem = width.mismatch(header, name, n, prelude.size, ["<f2"]);
    // Where the width is the manifest's, its message names only the manifest; the rows are the row order's.
    const rowsFrom = header.shape[0] !== n && foreign?.dModel !== undefined ? ` (${n} rows in the row order)` : "";
    if (problem) throw new StoreError(path, `${problem.message}${rowsFrom}`);
    sizes.set(name, prelude.size);
    offsets.push(header.dataOffset);
  }
  return { d: width.d, sizes, offsets };
}

/** The first bytes of a layer file (enough for any header) and its size; only regular files are opened. */
async function readPrelude(path: string): Promise<{ bytes: Buffer; size: number }> {
  const { fh, size } = await openInput(path);
  try {
    const bytes = Buffer.alloc(Math.min(size, NPY_MAX_PRELUDE));
    await fh.read(bytes, 0, bytes.length, 0);
    return { bytes, size };
  } catch (err) {
    throw fileError(err, path);
  } finally {
    await fh.close();
  }
}
