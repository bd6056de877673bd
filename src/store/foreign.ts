/**
 * Stores written by other tools (docs/store.md): an
 * `index.json` that gives the row order, the layers and a sha256 per file, and
 * perhaps `complete`, but not hsm's other fields. This module reads such a
 * manifest into what hsm needs, saying what it does not record, and joins the
 * rows with a bank for the fact ids and condition families.
 */
import type { BankRow } from "../bank/bank.js";
import { ANCHOR_TEMPLATE, PERTURBED_TEMPLATE } from "../bank/prompt.js";
import { DEFAULT_LAYER_RULE, MAX_PROMPT_LEN } from "../defaults.js";
import { ManifestError } from "../errors.js";
import { quoteValue } from "../util/jsonl.js";
import { selectLayers } from "./layers.js";
import { layerFileName, layerOfFileName } from "./names.js";
import { STORE_FORMAT, type Manifest, type ManifestProblem } from "./manifest.js";

/** The keys, in the order tried, that may hold the row order. */
const ROW_ORDER_KEYS = ["query_ids", "query_order", "queries", "rows"] as const;
/** The keys, in the order tried, that may hold the checksums. */
const CHECKSUM_KEYS = ["files", "checksums", "sha256"] as const;

/** What a foreign manifest gives. Everything but the row order and the checksums may be absent. */
export interface ForeignManifest {
  queryIds: string[];
  /** Parallel to `queryIds` where the row entries carry them. */
  factIds?: string[];
  families?: string[];
  /** As listed; absent when the manifest lists none (then the `L###.npy` names in the folder say). */
  layers?: number[];
  /** sha256 hex per `L###.npy` name. */
  checksums: Map<string, string>;
  /** Plain names the checksums cover that are not store files (never opened). */
  otherFiles: string[];
  complete?: boolean;
  rowsDone?: number;
  model?: string;
  numLayers?: number;
  dModel?: number;
  dtype?: string;
  lastLayerFinalNorm?: boolean;
  /** Per-file non-finite counts, where the manifest records them. */
  nonfinite: Map<string, number>;
  /** Per-file `[rows, d_model]`, where the manifest records them. */
  shapes: Map<string, [number, number]>;
  /** Per-file sizes in bytes, where the manifest records them. */
  sizes: Map<string, number>;
}

const isInt = (v: unknown): v is number => typeof v === "number" && Number.isSafeInteger(v) && v >= 0;
const isHex = (v: unknown): v is string => typeof v === "string" && /^[0-9a-fA-F]{64}$/.test(v);
const isObject = (v: unknown): v is Record<string, unknown> => typeof v === "object" && v !== null && !Array.isArray(v);

/** A name that tries to leave the store folder. */
function unsafe(name: string): boolean {
  return name.includes("/") || name.includes("\\") || name === "." || name === ".." || name.includes("\0");
}

/** Reports one problem: the key concerned, what is wrong, and its code (default `manifest-field`). */
type Bad = (key: string, message: string, code?: ManifestProblem["code"]) => void;

/**
 * Reads a foreign manifest. Problems are what makes it unusable (no row order,
 * no checksums, a name outside the store); everything else it lacks is left
 * undefined for the caller to fill and to note.
 */
export function parseForeignManifest(value: unknown): { manifest?: ForeignManifest; problems: ManifestProblem[] } {
  const problems: ManifestProblem[] = [];
  const bad: Bad = (key, message, code = "manifest-field") => problems.push({ key, code, message });
  if (!isObject(value)) {
    bad("", "is not a JSON object");
    return { problems };
  }
  const m = value;
  const { queryIds, factIds, families } = readRowOrder(m, bad);
  const layers = readLayers(m, bad);
  const { checksums, nonfinite, shapes, sizes, otherFiles } = readChecksums(m, layers, bad);
  if (m.complete !== undefined && typeof m.complete !== "boolean")
    bad("complete", `expected true or false but found ${quoteValue(m.complete)}`);
  // Null, as Python tools write None, counts as absent.
  for (const key of ["rows_done", "num_layers", "d_model"]) {
    if (m[key] === undefined || m[key] === null) continue;
    if (!isInt(m[key])) bad(key, `expected a non-negative integer but found ${quoteValue(m[key])}`);
    else if (key !== "rows_done" && m[key] === 0) bad(key, "is 0: a model has blocks, and its states have width");
  }
  if (queryIds && isInt(m.rows_done)) {
    if (m.rows_done > queryIds.length)
      bad("rows_done", `is ${m.rows_done} but the row order has ${queryIds.length} rows`);
    else if (m.complete === true && m.rows_done !== queryIds.length)
      bad("rows_done", `is ${m.rows_done} but a complete store has all ${queryIds.length} rows written`);
  }
  const outside = layers && isInt(m.num_layers) ? outsideBlocks(layers, m.num_layers) : undefined;
  if (outside) bad("layers", outside);
  if (problems.length > 0 || !queryIds) return { problems };
  const text = (k: string) => (typeof m[k] === "string" && m[k] !== "" ? (m[k] as string) : undefined);
  const manifest: ForeignManifest = {
    queryIds,
    ...(factIds ? { factIds } : {}),
    ...(families ? { families } : {}),
    ...(layers ? { layers } : {}),
    checksums,
    otherFiles,
    nonfinite,
    shapes,
    sizes,
    ...(typeof m.complete === "boolean" ? { complete: m.complete } : {}),
    ...(isInt(m.rows_done) ? { rowsDone: m.rows_done } : {}),
    ...((text("model") ?? text("model_name")) ? { model: text("model") ?? text("model_name") } : {}),
    ...(isInt(m.num_layers) ? { numLayers: m.num_layers } : {}),
    ...(isInt(m.d_model) ? { dModel: m.d_model } : {}),
    ...(text("dtype") ? { dtype: text("dtype") } : {}),
    ...(typeof m.last_layer_final_norm === "boolean" ? { lastLayerFinalNorm: m.last_layer_final_norm } : {}),
  };
  return { manifest, problems };
}

/** Why `layers` cannot be blocks of a model of `numLayers` blocks (the first outside 0…L−1), or undefined. */
function outsideBlocks(layers: readonly number[], numLayers: number): string | undefined {
  const l = layers.find((x) => x >= numLayers);
  return l === undefined ? undefined : `holds layer ${l}, outside 0…${numLayers - 1} for num_layers ${numLayers}`;
}

/**
 * The layers of a foreign store: the manifest's list, else the `L###.npy` files among `folder` (the names in the
 * store's folder) and those the checksums name, so that a file checksummed and gone is looked for and found
 * missing. `outside` says why layers taken from the files cannot be blocks of the manifest's `num_layers`.
 */
export function foreignLayers(f: ForeignManifest, folder: readonly string[]): { layers: number[]; outside?: string } {
  if (f.layers) return { layers: f.layers };
  const layers = [...new Set([...folder, ...f.checksums.keys()].map(layerOfFileName))]
    .filter((l): l is number => l !== undefined)
    .sort((a, b) => a - b);
  const outside = f.numLayers === undefined ? undefined : outsideBlocks(layers, f.numLayers);
  return outside ? { layers, outside } : { layers };
}

/** The row order's ids, and the facts and families where it (or the manifest beside it) gives them. */
type RowOrder = Partial<Record<"queryIds" | "factIds" | "families", string[]>>;

/** Row order: a list of ids, or of objects with query_id (and perhaps fact_id, condition_family). */
function readRowOrder(m: Record<string, unknown>, bad: Bad): RowOrder {
  let queryIds: string[] | undefined;
  let factIds: string[] | undefined;
  let families: string[] | undefined;
  const orderKey = ROW_ORDER_KEYS.find((k) => Array.isArray(m[k]));
  if (orderKey === undefined) {
    bad(
      "",
      `gives no row order: expected a list of query ids (or of objects with "query_id") under one of ${ROW_ORDER_KEYS.join(", ")}`,
    );
  } else {
    const list = m[orderKey] as unknown[];
    if (list.every((v) => typeof v === "string")) queryIds = list as string[];
    else if (list.every((v) => isObject(v) && typeof v.query_id === "string")) {
      const rows = list as Record<string, unknown>[];
      queryIds = rows.map((r) => r.query_id as string);
      if (rows.every((r) => typeof r.fact_id === "string")) factIds = rows.map((r) => r.fact_id as string);
      if (rows.every((r) => typeof r.condition_family === "string"))
        families = rows.map((r) => r.condition_family as string);
    } else {
      const at = list.findIndex((v) => typeof v !== "string" && !(isObject(v) && typeof v.query_id === "string"));
      bad(
        orderKey,
        `expected a list of query ids or of objects with a string "query_id", but entry ${at} is ${quoteValue(list[at])}`,
      );
    }
  }
  if (queryIds) {
    const seen = new Set<string>();
    for (const id of queryIds) {
      if (seen.has(id)) {
        bad(orderKey!, `lists ${quoteValue(id)} twice`);
        break;
      }
      seen.add(id);
    }
  }
  // Labels recorded in a form hsm cannot take are refused, not replaced by the bank's (null counts as absent).
  for (const [key, field] of [
    ["fact_ids", "fact_id"],
    ["condition_families", "condition_family"],
  ] as const) {
    const list = m[key];
    const expected = "expected a list of strings, one per row, but";
    if (list !== undefined && list !== null && !Array.isArray(list)) bad(key, `${expected} found ${quoteValue(list)}`);
    const at = Array.isArray(list) ? list.findIndex((v) => typeof v !== "string") : -1;
    if (at >= 0) bad(key, `${expected} entry ${at} is ${quoteValue((list as unknown[])[at])}`);
    else if (Array.isArray(list) && key === "fact_ids") factIds ??= list as string[];
    else if (Array.isArray(list)) families ??= list as string[];
    if (orderKey !== undefined && Array.isArray(m[orderKey])) {
      const rows = m[orderKey] as unknown[];
      const at = rows.findIndex(
        (r) => isObject(r) && r[field] !== undefined && r[field] !== null && typeof r[field] !== "string",
      );
      if (at >= 0)
        bad(
          orderKey,
          `entry ${at} has ${field} ${quoteValue((rows[at] as Record<string, unknown>)[field])}, expected a string`,
        );
    }
  }
  for (const [key, list] of [
    ["fact_ids", factIds],
    ["condition_families", families],
  ] as const) {
    if (queryIds && list && list.length !== queryIds.length)
      bad(key, `has ${list.length} entries but the row order has ${queryIds.length}: one per row is required`);
  }

  return { queryIds, factIds, families };
}

/** Layers: a list of integers, if given. */
function readLayers(m: Record<string, unknown>, bad: Bad): number[] | undefined {
  let layers: number[] | undefined;
  if (m.layers !== undefined) {
    if (!Array.isArray(m.layers) || !m.layers.every(isInt)) bad("layers", "expected a list of non-negative integers");
    else if (m.layers.some((l, i) => i > 0 && l <= (m.layers as number[])[i - 1]!))
      bad("layers", "must be strictly ascending");
    else layers = m.layers as number[];
  }

  return layers;
}

/**
 * Checksums: a {file: hex} map, {file: {sha256}} entries, or a list of {file|name|path, sha256}; every layer
 * listed must have one.
 */
function readChecksums(m: Record<string, unknown>, layers: number[] | undefined, bad: Bad) {
  const checksums = new Map<string, string>();
  const nonfinite = new Map<string, number>();
  const shapes = new Map<string, [number, number]>();
  const sizes = new Map<string, number>();
  const otherFiles: string[] = [];
  const checksumKey = CHECKSUM_KEYS.find((k) => isObject(m[k]) || Array.isArray(m[k]));
  const add = (key: string, name: unknown, entry: unknown) => {
    if (typeof name !== "string") return bad(key, `holds an entry without a file name: ${quoteValue(entry)}`);
    if (unsafe(name))
      return bad(
        key,
        `names ${quoteValue(name)}, which is not a plain L###.npy file inside the store; it was not opened`,
        "unsafe-name",
      );
    const hex = isObject(entry) ? entry.sha256 : entry;
    if (layerOfFileName(name) === undefined) return void otherFiles.push(name);
    if (!isHex(hex)) return bad(`${key}.${name}`, `expected a sha256 of 64 hex digits but found ${quoteValue(hex)}`);
    const earlier = checksums.get(name);
    if (earlier !== undefined && earlier !== hex.toLowerCase())
      return bad(`${key}.${name}`, `records two different sha256 for ${name} (${earlier} and ${hex.toLowerCase()})`);
    checksums.set(name, hex.toLowerCase());
    if (!isObject(entry)) return;
    // What an entry records beside its checksum is held to what it says (null, as Python writes None, is absent).
    const { layer, shape, bytes } = entry;
    if (isInt(entry.nonfinite)) nonfinite.set(name, entry.nonfinite);
    else if (entry.nonfinite !== undefined && entry.nonfinite !== null)
      bad(`${key}.${name}.nonfinite`, `expected a non-negative integer but found ${quoteValue(entry.nonfinite)}`);
    if (layer !== undefined && layer !== null && layer !== layerOfFileName(name))
      bad(`${key}.${name}.layer`, `is ${quoteValue(layer)} but the name says ${layerOfFileName(name)}`);
    if (shape !== undefined && shape !== null) {
      if (Array.isArray(shape) && shape.length === 2 && shape.every(isInt)) shapes.set(name, shape as [number, number]);
      else bad(`${key}.${name}.shape`, `expected [rows, d_model] but found ${quoteValue(shape)}`);
    }
    if (bytes !== undefined && bytes !== null) {
      if (isInt(bytes)) sizes.set(name, bytes);
      else bad(`${key}.${name}.bytes`, `expected a non-negative integer but found ${quoteValue(bytes)}`);
    }
  };
  if (checksumKey === undefined) {
    bad(
      "",
      `records no checksums: expected a {file: sha256} map, or per-file entries with "sha256", under one of ${CHECKSUM_KEYS.join(", ")}`,
    );
  } else if (Array.isArray(m[checksumKey])) {
    for (const e of m[checksumKey] as unknown[])
      add(checksumKey, isObject(e) ? (e.file ?? e.name ?? e.path) : undefined, e);
  } else {
    for (const [name, e] of Object.entries(m[checksumKey] as Record<string, unknown>)) add(checksumKey, name, e);
  }
  if (layers) {
    for (const l of layers) {
      const name = layerFileName(l);
      if (checksumKey !== undefined && !checksums.has(name))
        bad(checksumKey, `has no checksum for layer ${l} (${name})`);
    }
    // As in hsm's own manifest, the list and the checksummed files name the same layers.
    for (const name of checksums.keys()) {
      const l = layerOfFileName(name)!;
      if (!layers.includes(l)) bad("layers", `does not list layer ${l}, which "${checksumKey}" names (${name})`);
    }
  }

  return { checksums, nonfinite, shapes, sizes, otherFiles };
}

/** Why the rows cannot be joined with the bank (their first query the bank lacks), or undefined when they can. */
export function bankMismatch(
  queryIds: readonly string[],
  bank: readonly BankRow[],
  bankName: string,
): string | undefined {
  const known = new Set(bank.map((r) => r.query_id));
  const missing = queryIds.map((q, i) => [q, i] as const).filter(([q]) => !known.has(q));
  if (missing.length === 0) return undefined;
  const [q, i] = missing[0]!;
  return `row ${i} is query ${quoteValue(q)}, which the bank ${bankName} lacks (${missing.length} of ${queryIds.length} rows are not in it); is this the bank the store was made from?`;
}

/**
 * The fact id and condition family of each row, from the bank, joined on
 * `query_id`. Every id must be in the bank.
 */
export function joinBank(
  queryIds: readonly string[],
  bank: readonly BankRow[],
  where: string,
  bankName: string,
): { factIds: string[]; families: string[] } {
  const mismatch = bankMismatch(queryIds, bank, bankName);
  if (mismatch) throw new ManifestError(where, "query_ids", mismatch);
  const byId = new Map(bank.map((r) => [r.query_id, r]));
  return {
    factIds: queryIds.map((q) => byId.get(q)!.fact_id),
    families: queryIds.map((q) => byId.get(q)!.condition_family),
  };
}

/**
 * The block count and layer rule that explain `layers`: hsm's rule where it
 * selects exactly these layers of `numLayers` (or of max + 1) blocks, else a
 * rule that lists them.
 */
export function explainLayers(layers: readonly number[], numLayers?: number): { numLayers: number; rule: string } {
  const L = numLayers ?? Math.max(...layers) + 1;
  const same = (a: readonly number[]) => a.length === layers.length && a.every((l, i) => l === layers[i]);
  if (same(selectLayers(L))) return { numLayers: L, rule: DEFAULT_LAYER_RULE };
  return { numLayers: L, rule: layers.map((l) => `l == ${l}`).join(" or ") };
}

/**
 * Whether a foreign store counts as complete: as its `complete` flag says where it records one; without one, unless
 * its `rows_done` says rows are still to be written.
 */
export function takenComplete(f: ForeignManifest): boolean {
  return f.complete ?? (f.rowsDone === undefined || f.rowsDone === f.queryIds.length);
}

/** Everything a foreign manifest does not record, in words for `verify`'s notes. */
export function unrecorded(f: ForeignManifest): string[] {
  const notes: string[] = [];
  if (!f.factIds || !f.families) notes.push("records no fact ids or condition families (they come from the bank)");
  if (!f.layers) notes.push("lists no layers (the L###.npy names in the folder give them)");
  if (f.complete === undefined && takenComplete(f))
    notes.push('records no "complete" flag (the store is taken as complete)');
  if (!f.model) notes.push("does not name the model");
  if (f.numLayers === undefined)
    notes.push("does not record the model's block count (taken as the highest stored layer + 1)");
  if (f.dModel === undefined) notes.push("does not record d_model (the .npy headers give it)");
  if (f.nonfinite.size === 0) notes.push("records no non-finite counts (counted here instead)");
  const sizes = f.sizes.size === 0 ? " byte sizes," : "";
  notes.push(`records no model checksum, prompt settings,${sizes} largest magnitudes or provenance`);
  return notes;
}

/**
 * The manifest hsm would have written for a foreign store, from what it
 * records, what its files' headers say, and the bank's fact ids and families.
 */
export function normalizedManifest(
  f: ForeignManifest,
  o: {
    layers: number[];
    dModel: number;
    sizes: ReadonlyMap<string, number>;
    factIds: string[];
    families: string[];
    model: string;
  },
): Manifest {
  const n = f.queryIds.length;
  const { numLayers, rule } = explainLayers(o.layers, f.numLayers);
  const complete = takenComplete(f);
  return {
    format: STORE_FORMAT,
    model: f.model ?? o.model,
    model_sha256: "",
    num_layers: numLayers,
    d_model: o.dModel,
    layers: o.layers,
    layer_rule: rule,
    // HuggingFace's hidden_states[L] carries the final norm; a store of the last block follows it.
    last_layer_final_norm: f.lastLayerFinalNorm ?? o.layers.at(-1) === numLayers - 1,
    probe_position: "last_valid_input_token",
    prompt: { anchor: ANCHOR_TEMPLATE, other: PERTURBED_TEMPLATE },
    max_prompt_len: MAX_PROMPT_LEN,
    padding_side: "left",
    truncation_side: "left",
    dtype: f.dtype ?? "unknown",
    query_ids: f.queryIds,
    fact_ids: o.factIds,
    condition_families: o.families,
    files: Object.fromEntries(
      o.layers.map((layer) => {
        const name = layerFileName(layer);
        return [
          name,
          {
            layer,
            shape: [n, o.dModel],
            bytes: o.sizes.get(name) ?? 0,
            sha256: f.checksums.get(name) ?? "",
            nonfinite: f.nonfinite.get(name) ?? 0,
            max_abs: null,
          },
        ];
      }),
    ),
    rows_done: complete ? n : Math.min(f.rowsDone ?? 0, n),
    complete,
    created_at: "",
    tool_version: "",
  };
}
