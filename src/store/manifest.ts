/**
 * `index.json`, the store's manifest (docs/formats.md#manifest): its type, a validator
 * that lists every problem instead of stopping at the first, and an atomic
 * writer (temp file + fsync + rename + directory fsync).
 */
import { createHash } from "node:crypto";
import { join } from "node:path";

import { InternalError, ManifestError } from "../errors.js";
import { writeFileAtomic } from "../util/fs.js";
import { jsonSyntax, quoteValue } from "../util/jsonl.js";
import { TOOL_VERSION_PREFIX } from "../version.js";
import { layerFileName, layerOfFileName } from "./names.js";

export const MANIFEST_NAME = "index.json";
export const STORE_FORMAT = "hidden-states/1";

export interface FileEntry {
  layer: number;
  shape: [number, number];
  bytes: number;
  /** Hex sha256 of the whole file; empty until the store is complete. */
  sha256: string;
  /** Count of ±inf and NaN values. */
  nonfinite: number;
  /** Largest finite magnitude; null until the store is complete. */
  max_abs: number | null;
}

export interface PromptSpec {
  anchor: string;
  other: string;
}

export interface Manifest {
  format: typeof STORE_FORMAT;
  model: string;
  model_sha256: string;
  /** `hf:ORG/NAME@COMMIT` where the model was named by hub id: the commit its files came from. */
  model_source?: string;
  num_layers: number;
  d_model: number;
  layers: number[];
  layer_rule: string;
  last_layer_final_norm: boolean;
  probe_position: "last_valid_input_token";
  prompt: PromptSpec;
  max_prompt_len: number;
  /** "right" for graphs whose attention ignores a left-padding mask (GroupQueryAttention). */
  padding_side: "left" | "right";
  truncation_side: "left";
  /** The dtype the model ran in; the files are always float16. */
  dtype: string;
  /** The graph's weight format (`float32`, `float16`, `bfloat16`, `int4`, `int8`, `nf4`); absent in stores made before it was recorded. */
  weights?: string;
  query_ids: string[];
  fact_ids: string[];
  condition_families: string[];
  files: Record<string, FileEntry>;
  rows_done: number;
  complete: boolean;
  created_at: string;
  tool_version: string;
  /** Present in a shard's store: which rows of the whole run it holds. */
  shard?: ShardInfo;
  /** The export style recognized and how each stored tensor was found (written by hsm; absent in older stores). */
  style?: StyleRecord;
  /** What `hsm extract` made the rows from and how it batched them, so that a resume can refuse any change. */
  extraction?: ExtractionRecord;
  /** Rows re-run alone at batch 1 unpadded, compared with the stored rows (docs/extract.md). */
  self_check?: SelfCheck;
  /**
   * sha256 of the manifest's own content, recorded when the store is completed: every other field as canonical
   * JSON (keys sorted, no spaces). `verify` recomputes it, so labels and settings are as trusted as the layer files.
   */
  manifest_sha256?: string;
}

/** The `extraction` field: everything besides the model and the layers that decides a store's bytes. */
export interface ExtractionRecord {
  /** sha256 of the whole run's rows as they reach the model and the manifest: ids, facts, families, prompts. */
  rows_sha256: string;
  /** Rows per batch (1 for graphs that run one row at a time). */
  batch_size: number;
  /** Rows per commit block; batches are planned within blocks. */
  commit_rows: number;
  /** The onnxruntime device the rows ran on. */
  device: string;
}

/** The `style` field: the style (`optimum-merged+structural`), the names cross-check, and per stored layer the tensor and how it was found. */
export interface StyleRecord {
  name: string;
  cross_check?: string;
  layers: { layer: number; tensor: string; how: string }[];
}

/**
 * Which graph tensor each stored layer was read from, as text to compare (the `style` record's tensors, not how
 * they were found, which does not change a byte); undefined for a store whose manifest records no style.
 */
export function storedTensors(m: Pick<Manifest, "style">): string | undefined {
  return m.style ? JSON.stringify(m.style.layers.map(({ layer, tensor }) => [layer, tensor])) : undefined;
}

/** The batch self-check: per layer, the largest deviation of rows re-run alone from the stored rows. */
export interface SelfCheck {
  rows: number;
  query_ids: string[];
  /** `max_abs_dev`: largest absolute difference; `max_rel_dev`: that over the row's largest magnitude; null where a value is finite on one side only. */
  layers: { layer: number; max_abs_dev: number | null; max_rel_dev: number | null }[];
  /** The largest `max_rel_dev` that passes. */
  tolerance: number;
  /**
   * `fail`: some layer above the tolerance; the store is then left incomplete with no row kept. `warn`, the same
   * finding in stores written before a failed check stopped the run, is read and refused by verify.
   */
  status: "pass" | "fail" | "warn" | "off";
  seconds: number;
}

export interface ShardInfo {
  index: number;
  count: number;
  /** Rows `[row_start, row_end)` of the whole run's `rows_total`. */
  row_start: number;
  row_end: number;
  rows_total: number;
}

/**
 * Whether `value` claims to be hsm's own manifest, and is then held to every
 * field: its `format` names hsm's store format (any version), or it carries
 * `tool_version`, which hsm always writes. A damaged hsm manifest is thus
 * reported as damaged, not read leniently as another tool's.
 */
export function isNativeManifest(value: unknown): boolean {
  if (typeof value !== "object" || value === null || Array.isArray(value)) return false;
  const format = (value as { format?: unknown }).format;
  return (
    (typeof format === "string" && format.startsWith(STORE_FORMAT.split("/")[0]! + "/")) || "tool_version" in value
  );
}

/**
 * Whether hsm wrote a manifest in its format (its `tool_version` is `hsm/…`), and is held to what hsm writes beyond
 * what the contract asks of a reader: lowercase checksums, a seal, its files' layout where it extracted them.
 */
export function writtenByHsm(m: object): boolean {
  const v = (m as { tool_version?: unknown }).tool_version;
  return typeof v === "string" && v.startsWith(TOOL_VERSION_PREFIX);
}

/** The per-row lists of a manifest: one entry per row, in row order. */
export const ROW_LISTS = ["query_ids", "fact_ids", "condition_families"] as const;

/**
 * A per-row list read as its JSON text rather than as strings: an array of printable-ASCII strings written without
 * escapes or whitespace, which is therefore its own canonical JSON. `hsm verify` reads a large manifest this way
 * (src/store/verify.ts), without building tens of thousands of strings; the manifest's value then holds `[]` in the
 * list's place, and the checks below take the list's facts from here.
 */
export interface RowListText {
  /** The array's JSON text, from `[` to `]`. */
  text: Uint8Array;
  count: number;
  /** Whether no two entries are the same. */
  distinct: boolean;
}

/** Per-row lists read as text, by key (a `query_ids` list only where it is distinct). */
export type RowListTexts = ReadonlyMap<string, RowListText>;

/** One thing wrong with a manifest, in the words verify prints. */
export interface ManifestProblem {
  key: string;
  /** `unsafe-name`: a file name that is not a plain `L###.npy` inside the store (never opened); `manifest-field`: anything else. */
  code: "unsafe-name" | "manifest-field";
  message: string;
}

const isInt = (v: unknown): v is number => typeof v === "number" && Number.isSafeInteger(v);
const isStr = (v: unknown): v is string => typeof v === "string";

/** Reports one problem: the key concerned, what is wrong, and its code (default `manifest-field`). */
type Bad = (key: string, message: string, code?: ManifestProblem["code"]) => void;

/**
 * Every problem with a parsed manifest. An empty list means the object can be
 * used as a {@link Manifest}. File names are checked for being plain `L###.npy`
 * names, so a manifest pointing outside its store is reported, never followed.
 * `lists` are per-row lists read as text, in place of the value's own.
 */
export function manifestProblems(value: unknown, lists?: RowListTexts): ManifestProblem[] {
  const problems: ManifestProblem[] = [];
  const bad: Bad = (key, message, code = "manifest-field") => problems.push({ key, code, message });
  if (typeof value !== "object" || value === null || Array.isArray(value)) {
    bad("", "is not a JSON object");
    return problems;
  }
  const m = value as Record<string, unknown>;
  fieldProblems(m, bad, lists);
  const n = rowCount(m, "query_ids", lists);
  if (n !== undefined) rowProblems(m, n, bad, lists);
  const layers = m.layers;
  if (!Array.isArray(layers) || !layers.every(isInt)) bad("layers", "expected an array of integers");
  else {
    for (let i = 1; i < layers.length; i++) {
      if ((layers[i] as number) <= (layers[i - 1] as number)) {
        bad("layers", "must be strictly ascending");
        break;
      }
    }
    if (isInt(m.num_layers) && layers.some((l) => (l as number) < 0 || (l as number) >= (m.num_layers as number))) {
      bad("layers", `holds a layer outside 0…${(m.num_layers as number) - 1}`);
    }
  }
  if (m.self_check !== undefined) {
    const problem = selfCheckProblem(m.self_check);
    if (problem) bad("self_check", problem);
  }
  const files = m.files;
  if (typeof files !== "object" || files === null || Array.isArray(files)) {
    bad("files", "expected an object mapping L###.npy names to entries");
    return problems;
  }
  const named = fileEntryProblems(m, files as Record<string, unknown>, n, bad);
  if (Array.isArray(layers) && layers.every(isInt)) {
    for (const l of layers as number[])
      if (!named.has(l)) bad("files", `has no entry for layer ${l} (${layerFileName(l)})`);
    for (const l of named)
      if (!(layers as number[]).includes(l)) bad("layers", `does not list layer ${l}, which files names`);
  }
  return problems;
}

/** How many entries a per-row list has: read as text, or in the value (undefined where it is no array). */
export function rowCount(m: object, key: string, lists: RowListTexts | undefined): number | undefined {
  const a = (m as Record<string, unknown>)[key];
  return lists?.get(key)?.count ?? (Array.isArray(a) ? a.length : undefined);
}

/** The top-level fields' types, one by one. */
function fieldProblems(m: Record<string, unknown>, bad: Bad, lists: RowListTexts | undefined): void {
  if (m.format !== STORE_FORMAT) bad("format", `expected "${STORE_FORMAT}" but found ${quoteValue(m.format)}`);
  for (const key of ["model", "model_sha256", "layer_rule", "probe_position", "dtype", "created_at", "tool_version"]) {
    if (!isStr(m[key])) bad(key, `expected a string but found ${quoteValue(m[key])}`);
  }
  for (const key of ["max_prompt_len", "rows_done"]) {
    if (!isInt(m[key]) || (m[key] as number) < 0)
      bad(key, `expected a non-negative integer but found ${quoteValue(m[key])}`);
  }
  // A model has blocks, and its states have width.
  for (const key of ["num_layers", "d_model"]) {
    if (!isInt(m[key]) || (m[key] as number) < 1)
      bad(key, `expected a positive integer but found ${quoteValue(m[key])}`);
  }
  if (m.manifest_sha256 !== undefined && !(isStr(m.manifest_sha256) && /^[0-9a-f]{64}$/.test(m.manifest_sha256)))
    bad("manifest_sha256", `expected 64 lowercase hex digits but found ${quoteValue(m.manifest_sha256)}`);
  if (m.model_source !== undefined && !isStr(m.model_source))
    bad("model_source", `expected a string but found ${quoteValue(m.model_source)}`);
  if (m.weights !== undefined && !isStr(m.weights))
    bad("weights", `expected a string but found ${quoteValue(m.weights)}`);
  for (const key of ["last_layer_final_norm", "complete"]) {
    if (typeof m[key] !== "boolean") bad(key, `expected true or false but found ${quoteValue(m[key])}`);
  }
  const prompt = m.prompt as Record<string, unknown> | undefined;
  if (typeof prompt !== "object" || prompt === null || !isStr(prompt.anchor) || !isStr(prompt.other)) {
    bad("prompt", 'expected an object with string templates "anchor" and "other"');
  }
  for (const key of ROW_LISTS) {
    const a = m[key];
    if (!lists?.has(key) && (!Array.isArray(a) || !a.every(isStr))) bad(key, "expected an array of strings");
  }
}

/** What must agree with the row count `n` of query_ids: the per-row arrays, unique ids, rows_done and complete. */
function rowProblems(m: Record<string, unknown>, n: number, bad: Bad, lists: RowListTexts | undefined): void {
  for (const key of ["fact_ids", "condition_families"]) {
    const count = rowCount(m, key, lists);
    if (count !== undefined && count !== n)
      bad(key, `has ${count} entries but query_ids has ${n}: one per row is required`);
  }
  const listed = lists?.get("query_ids");
  if (listed && !listed.distinct) throw new InternalError("query_ids read as text must be distinct");
  const ids = m.query_ids as unknown[];
  // Ids in strictly ascending order are distinct without a set (as the rows of a bank numbered in order are). Else
  // one pass builds the set; a second finds the repeat only where there is one.
  if (!listed && !strictlyAscending(ids) && new Set(ids).size !== ids.length) {
    const seen = new Set<unknown>();
    const twice = ids.find((id) => {
      if (seen.has(id)) return true;
      seen.add(id);
      return false;
    });
    bad("query_ids", `lists ${quoteValue(twice)} twice`);
  }
  if (isInt(m.rows_done) && m.rows_done > n) bad("rows_done", `is ${m.rows_done} but the store has only ${n} rows`);
  if (m.complete === true && isInt(m.rows_done) && m.rows_done !== n) {
    bad("complete", `is true but rows_done is ${m.rows_done} of ${n}`);
  }
}

/** Whether `ids` are strings, each after the one before in code-unit order: then no two are the same. */
function strictlyAscending(ids: readonly unknown[]): boolean {
  for (let i = 1; i < ids.length; i++) {
    const a = ids[i - 1];
    const b = ids[i];
    if (typeof a !== "string" || typeof b !== "string" || !(a < b)) return false;
  }
  return true;
}

/** Each file entry against its name, the rows and d_model; returns the layers the files name. */
function fileEntryProblems(
  m: Record<string, unknown>,
  files: Record<string, unknown>,
  n: number | undefined,
  bad: Bad,
): Set<number> {
  const named = new Set<number>();
  // hsm writes its checksums in lowercase; another tool writing this format may use either case (formats.md).
  const [hex, digits] = writtenByHsm(m)
    ? [/^[0-9a-f]{64}$/, "64 lowercase hex digits"]
    : [/^[0-9a-fA-F]{64}$/, "64 hex digits"];
  for (const [name, entry] of Object.entries(files)) {
    const layer = layerOfFileName(name);
    if (layer === undefined) {
      bad(
        "files",
        `names ${quoteValue(name)}, which is not a plain L###.npy file inside the store; it was not opened`,
        "unsafe-name",
      );
      continue;
    }
    named.add(layer);
    const e = entry as Record<string, unknown>;
    const where = `files.${name}`;
    if (typeof e !== "object" || e === null) {
      bad(where, "expected an object");
      continue;
    }
    if (e.layer !== layer)
      bad(
        `${where}.layer`,
        `${e.layer === undefined ? "is missing" : `is ${quoteValue(e.layer)}`} but the name says ${layer}`,
      );
    const shape = e.shape;
    if (!Array.isArray(shape) || shape.length !== 2 || !shape.every(isInt))
      bad(`${where}.shape`, "expected [rows, d_model]");
    else {
      if (n !== undefined && shape[0] !== n) bad(`${where}.shape`, `has ${shape[0]} rows but query_ids has ${n}`);
      if (isInt(m.d_model) && shape[1] !== m.d_model)
        bad(`${where}.shape`, `has width ${shape[1]} but d_model is ${m.d_model}`);
    }
    if (!isInt(e.bytes) || e.bytes < 0) bad(`${where}.bytes`, "expected a non-negative integer");
    if (!isStr(e.sha256) || (e.sha256 !== "" && !hex.test(e.sha256))) bad(`${where}.sha256`, `expected ${digits}`);
    else if (m.complete === true && e.sha256 === "") bad(`${where}.sha256`, "is empty although the store is complete");
    if (!isInt(e.nonfinite) || e.nonfinite < 0) bad(`${where}.nonfinite`, "expected a non-negative integer");
    if (!(e.max_abs === null || (typeof e.max_abs === "number" && e.max_abs >= 0)))
      bad(`${where}.max_abs`, "expected a non-negative number or null");
  }
  return named;
}

/**
 * How deeply arrays and objects may nest in an `index.json`: hsm's own needs 4 (`files` → entry → `shape`), and
 * Python's json module gives up near 1,000. The checks, their messages and the seal walk values recursively, so a
 * hostile file nested deeper is refused before they run.
 */
const MAX_MANIFEST_DEPTH = 64;

/** Parses an `index.json`'s text as `JSON.parse` does, refusing (as a SyntaxError) values nested too deeply. */
export function parseManifestJson(text: string): unknown {
  const value: unknown = JSON.parse(text);
  const stack: [object, number][] = typeof value === "object" && value !== null ? [[value, 1]] : [];
  while (stack.length > 0) {
    const [v, depth] = stack.pop()!;
    if (depth > MAX_MANIFEST_DEPTH)
      throw new SyntaxError(`it nests arrays and objects more than ${MAX_MANIFEST_DEPTH} levels deep`);
    for (const child of Array.isArray(v) ? v : Object.values(v)) {
      if (typeof child === "object" && child !== null) stack.push([child, depth + 1]);
    }
  }
  return value;
}

/** Parses manifest text; throws a {@link ManifestError} for the first problem. */
export function parseManifest(text: string, path: string): Manifest {
  let value: unknown;
  try {
    value = parseManifestJson(text);
  } catch (err) {
    throw new ManifestError(path, "", `is not valid JSON (${jsonSyntax(err)})`, { cause: err });
  }
  return checkedManifest(value, path);
}

/** A parsed manifest, checked; throws a {@link ManifestError} for the first problem. */
export function checkedManifest(value: unknown, path: string): Manifest {
  const problems = manifestProblems(value);
  if (problems.length > 0) throw new ManifestError(path, problems[0]!.key, problems[0]!.message);
  return value as Manifest;
}

/**
 * Manifest text: one top-level key per line, long arrays kept on one line each. Only a manifest that passes the
 * same checks a reader applies is written (a key left undefined is absent, as in JSON); anything else is a bug in
 * what built it, refused before it reaches the disk.
 */
function formatManifest(m: Manifest): string {
  const defined = Object.entries(m).filter(([, value]) => value !== undefined);
  const problems = manifestProblems(Object.fromEntries(defined));
  if (problems.length > 0) {
    const p = problems[0]!;
    throw new InternalError(`the manifest to be written is invalid: "${p.key}" ${p.message}`);
  }
  const lines = defined.map(([key, value]) => {
    if (key === "files") {
      const entries = Object.entries(value as Record<string, FileEntry>).map(
        ([name, e]) => `    ${JSON.stringify(name)}: ${JSON.stringify(e)}`,
      );
      return `  "files": {\n${entries.join(",\n")}\n  }`;
    }
    return `  ${JSON.stringify(key)}: ${JSON.stringify(value)}`;
  });
  return `{\n${lines.join(",\n")}\n}\n`;
}

function isJsonPrimitive(v: unknown): boolean {
  return v === null || typeof v === "string" || typeof v === "number" || typeof v === "boolean";
}

/**
 * JSON with every object's keys sorted and no spaces, one text for one value whatever order built it, handed to
 * `out` piece by piece: the per-row arrays (tens of thousands of ids) go out as one flat string each, never joined
 * into a larger one. A top-level member in `verbatim` goes out as that text, which is its canonical JSON.
 */
function writeCanonicalJson(value: unknown, out: (text: string | Uint8Array) => void, verbatim?: RowListTexts): void {
  if (Array.isArray(value)) {
    // For strings, finite or not numbers, booleans and null, JSON.stringify writes each element as the recursion
    // below would.
    if (value.every(isJsonPrimitive)) return out(JSON.stringify(value));
    out("[");
    value.forEach((v, i) => {
      if (i > 0) out(",");
      writeCanonicalJson(v, out);
    });
    return out("]");
  }
  if (value !== null && typeof value === "object") {
    const entries = Object.entries(value as Record<string, unknown>)
      .filter(([, v]) => v !== undefined)
      .sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0));
    out("{");
    entries.forEach(([k, v], i) => {
      out(`${i > 0 ? "," : ""}${JSON.stringify(k)}:`);
      const text = verbatim?.get(k)?.text;
      if (text) out(text);
      else writeCanonicalJson(v, out);
    });
    return out("}");
  }
  out(JSON.stringify(value));
}

/**
 * The sha256 of a manifest's content: every field but `manifest_sha256` itself, as canonical JSON. `lists` are
 * per-row lists read as text, in place of the value's own.
 */
export function manifestContentSha256(m: object, lists?: RowListTexts): string {
  const { manifest_sha256: _, ...content } = m as Manifest;
  const hash = createHash("sha256");
  writeCanonicalJson(content, (text) => hash.update(text), lists);
  return hash.digest("hex");
}

/**
 * Writes `index.json` so that a reader sees the old or the new manifest, never a torn one. A complete manifest is
 * sealed with `manifest_sha256`.
 */
export async function writeManifestAtomic(dir: string, m: Manifest): Promise<void> {
  if (m.complete) m.manifest_sha256 = manifestContentSha256(m);
  else delete m.manifest_sha256;
  await writeFileAtomic(join(dir, MANIFEST_NAME), formatManifest(m));
}

/** What a failed self-check found, in one line naming the worst layer; undefined when it passed or was off. */
export function selfCheckFinding(check: SelfCheck): string | undefined {
  if (check.status !== "fail" && check.status !== "warn") return undefined;
  const worst = worstLayer(check);
  return (
    `${check.rows} rows re-run alone at batch 1 differ from the stored rows by up to ` +
    `${worst.max_rel_dev === null ? "a non-finite value" : `${worst.max_rel_dev.toExponential(2)} of the row's largest value`} ` +
    `in layer ${worst.layer} (tolerance ${check.tolerance.toExponential(2)}): the states depend on padding or batch size`
  );
}

/**
 * What is wrong with a manifest's `self_check`, or undefined where it holds what verify reads: `rows`, a `status`
 * of pass, fail, warn or off, and per layer its number and deviations (non-negative numbers, or null); a failed
 * or warned check also its `tolerance` and at least one layer.
 */
export function selfCheckProblem(value: unknown): string | undefined {
  if (typeof value !== "object" || value === null || Array.isArray(value))
    return "expected an object with rows, layers and status pass, fail, warn or off";
  const c = value as Record<string, unknown>;
  const deviation = (v: unknown) => v === null || (typeof v === "number" && Number.isFinite(v) && v >= 0);
  if (!isInt(c.rows)) return `"rows" expected a non-negative integer but found ${quoteValue(c.rows)}`;
  if (!["pass", "fail", "warn", "off"].includes(c.status as string))
    return `"status" expected pass, fail, warn or off but found ${quoteValue(c.status)}`;
  if (!Array.isArray(c.layers)) return `"layers" expected a list but found ${quoteValue(c.layers)}`;
  const at = c.layers.findIndex((l: unknown) => {
    const e = l as Record<string, unknown> | null;
    return (
      typeof e !== "object" || e === null || !isInt(e.layer) || !deviation(e.max_abs_dev) || !deviation(e.max_rel_dev)
    );
  });
  if (at >= 0) return `"layers" entry ${at} is ${quoteValue(c.layers[at])}, expected {layer, max_abs_dev, max_rel_dev}`;
  if (c.status === "fail" || c.status === "warn") {
    if (c.layers.length === 0) return `a ${c.status as string} status needs the layers it found`;
    if (!(typeof c.tolerance === "number" && Number.isFinite(c.tolerance) && c.tolerance >= 0))
      return `"tolerance" expected a non-negative number but found ${quoteValue(c.tolerance)}`;
  }
  return undefined;
}

/** The layer with the largest relative deviation (a non-finite one counts as the largest). */
function worstLayer(check: SelfCheck): SelfCheck["layers"][number] {
  const key = (r: number | null) => (r === null ? Infinity : r);
  return check.layers.reduce((w, l) => (key(l.max_rel_dev) > key(w.max_rel_dev) ? l : w), check.layers[0]!);
}
