/**
 * `hsm verify`: everything that must hold before a store is trusted. The
 * manifest is validated first; only plain `L###.npy` names inside the store are
 * ever opened (symbolic links are refused); each header is checked against the
 * manifest and the file size; and every file is re-hashed, in parallel, and its
 * statistics recounted in the same pass. The hashing starts first, on every
 * store file in the folder, and runs while the manifest and headers are
 * checked; only the files the manifest lists count. A store written by another
 * tool is held to what its manifest records; what it does not record is noted,
 * not failed.
 *
 * The folder, the headers and the manifest are read with synchronous calls:
 * they are small, and while the hashing threads hold every core, each round
 * trip through libuv's thread pool would wait for a core of its own.
 */
import {
  closeSync,
  constants,
  fstatSync,
  lstatSync,
  openSync,
  readdirSync,
  readSync,
  statSync,
  type Dirent,
} from "node:fs";
import { readdir } from "node:fs/promises";
import { availableParallelism } from "node:os";
import { join } from "node:path";

import type { BankRow } from "../bank/bank.js";
import { FileError, NpyHeaderError } from "../errors.js";
import { nativeJsonRowArrays } from "../kernels/native.js";
import { fileError, osReason, readUtf8Sync } from "../util/fs.js";
import { jsonSyntax, quoteValue } from "../util/jsonl.js";
import { hashFiles, type HashJob, type HashOutcome } from "./hash.js";
import { selectLayers } from "./layers.js";
import { layerFileName, layerOfFileName } from "./names.js";
import {
  isNativeManifest,
  MANIFEST_NAME,
  manifestContentSha256,
  manifestProblems,
  parseManifestJson,
  ROW_LISTS,
  rowCount,
  selfCheckFinding,
  selfCheckProblem,
  type Manifest,
  type RowListText,
  type RowListTexts,
  type SelfCheck,
  writtenByHsm,
} from "./manifest.js";
import { LayerWidth, NPY_MAX_PRELUDE, npyLayoutProblem, parseNpyHeader, type NpyHeader } from "./npy.js";

export interface VerifyProblem {
  /** The store file concerned, relative to the store ("index.json", "L018.npy"). */
  file: string;
  /** A stable code for machines: "sha256", "size", "npy-header", … */
  problem: string;
  message: string;
}

/** Something a store written by another tool does not record, so it was not checked. */
export interface VerifyNote {
  file: string;
  /** A stable code: "not-recorded", "not-a-store-file", "no-bank". */
  note: string;
  message: string;
}

export interface VerifiedFile {
  name: string;
  bytes: number | null;
  sha256: string | null;
  /** Counted while hashing: values that are ±inf or NaN, and the largest finite magnitude. */
  nonfinite: number | null;
  max_abs: number | null;
  ok: boolean;
}

export interface VerifyReport {
  store: string;
  ok: boolean;
  complete: boolean | null;
  rows: number | null;
  rows_done: number | null;
  files: VerifiedFile[];
  problems: VerifyProblem[];
  /** True for a store written by another tool (its manifest is not hsm's `hidden-states/1`). */
  foreign: boolean;
  /** What a foreign manifest does not record; empty for hsm's own stores. */
  notes: VerifyNote[];
  /** The manifest's batch self-check, summarized: the layer with the largest relative deviation (null: non-finite). */
  self_check?: { rows: number; worst_layer: number | null; worst_rel_dev: number | null; status: string };
}

export interface VerifyOptions {
  /** Files hashed at once; default the core count. */
  concurrency?: number;
  /** The query bank (a path, or its rows): a foreign store's rows are checked against it. */
  bank?: string | readonly BankRow[];
}

/** What a file must be, as far as the manifest says. */
interface Expected {
  name: string;
  bytes?: number;
  /** Undefined where the manifest records none. */
  sha256?: string;
  nonfinite?: number;
  maxAbs?: number | null;
  /** `[rows, d_model]`, where a foreign manifest records it per file (hsm's own records the store's). */
  shape?: readonly [number, number];
}

/**
 * Checks a store folder and reports every problem found (an empty list when
 * the store can be trusted). Throws a {@link FileError} only when `dir` itself
 * is missing or not a folder, since then there is nothing to check.
 */
export async function verifyStore(dir: string, options: VerifyOptions = {}): Promise<VerifyReport> {
  const report: VerifyReport = {
    store: dir,
    ok: false,
    complete: null,
    rows: null,
    rows_done: null,
    files: [],
    problems: [],
    foreign: false,
    notes: [],
  };
  const problem = (file: string, code: string, message: string) =>
    report.problems.push({ file, problem: code, message });

  expectFolder(dir);
  const concurrency = options.concurrency ?? availableParallelism();
  const ahead = hashAhead(dir, concurrency);
  const manifest = readManifestJson(dir, problem);
  const plan = manifest && (await planFor(manifest, problem, report, options, dir));
  if (!plan) {
    await ahead.outcomes; // no hashing left running behind the report
    return report;
  }
  const toHash = checkHeaders(dir, plan, ahead, report, problem);
  // Files in the folder that the manifest does not account for.
  const known = new Set(plan.listed.map((e) => e.name));
  for (const name of ahead.names) {
    if (layerOfFileName(name) !== undefined && !known.has(name))
      problem(name, "unlisted-file", "is in the store folder but not in the manifest");
  }
  const outcomes = await hashedAsPlanned(dir, toHash, ahead, concurrency);
  compareChecksums(toHash, outcomes, plan, report, problem);
  for (const f of report.files) f.ok = f.sha256 !== null && !report.problems.some((p) => p.file === f.name);
  report.ok = report.problems.length === 0;
  return report;
}

/** Throws a FileError unless `dir` is a folder: without one there is nothing to check. */
function expectFolder(dir: string): void {
  let folder;
  try {
    folder = statSync(dir);
  } catch (err) {
    throw fileError(err, dir);
  }
  if (!folder.isDirectory()) {
    throw new FileError(
      dir,
      "unreadable",
      "ENOTDIR",
      "is not a folder; a store is a folder holding index.json and L###.npy files",
    );
  }
}

/** A manifest as read: its parsed JSON, and its per-row lists where they were read as text instead. */
interface ManifestRead {
  value: unknown;
  lists?: RowListTexts;
}

/** The manifest as read, or null with the problem reported where it is missing, unreadable or not JSON. */
function readManifestJson(dir: string, problem: ProblemSink): ManifestRead | null {
  let bytes: Buffer;
  try {
    bytes = readUtf8Sync(join(dir, MANIFEST_NAME), { what: "a store's manifest" });
  } catch (err) {
    if (!(err instanceof FileError)) throw err;
    if (err.problem === "missing") problem(MANIFEST_NAME, "manifest-missing", "is missing");
    else problem(MANIFEST_NAME, "manifest-unreadable", err.message.slice(err.path.length + 2));
    return null;
  }
  const read = listsAsText(bytes);
  if (read) return read;
  try {
    return { value: parseManifestJson(bytes.toString("utf8")) };
  } catch (err) {
    problem(MANIFEST_NAME, "manifest-json", `is not valid JSON (${jsonSyntax(err)})`);
    return null;
  }
}

/**
 * hsm's own manifest with its per-row lists read as text (RowListText in manifest.ts): the rest is parsed, and the
 * lists, nearly all of a large manifest's bytes, are never built as strings. Only where the native scan vouches
 * for the whole document, and query_ids are distinct; undefined otherwise, for a full
 * parse, which every other manifest gets and which words every error.
 */
function listsAsText(bytes: Buffer): ManifestRead | undefined {
  const found = nativeJsonRowArrays?.(bytes, [...ROW_LISTS]);
  if (!found) return undefined;
  const spans = ROW_LISTS.flatMap((key, k) => {
    const [start = -1, end = -1, count = 0, distinct = 0] = found.subarray(4 * k, 4 * k + 4);
    if (start < 0) return [];
    return [{ key, start, end, list: { text: bytes.subarray(start, end), count, distinct: distinct === 1 } }];
  }).sort((a, b) => a.start - b.start);
  const lists = new Map<string, RowListText>(spans.map((s) => [s.key, s.list]));
  if (lists.get("query_ids")?.distinct === false) return undefined; // the full parse names the repeat
  // The document with each list emptied: `[]` where it stood.
  const rest: Uint8Array[] = [];
  let at = 0;
  for (const s of spans) {
    rest.push(bytes.subarray(at, s.start), EMPTY_LIST);
    at = s.end;
  }
  rest.push(bytes.subarray(at));
  let value: unknown;
  try {
    value = parseManifestJson(Buffer.concat(rest).toString("utf8"));
  } catch {
    return undefined; // the full parse words the error
  }
  return isNativeManifest(value) ? { value, lists } : undefined;
}

const EMPTY_LIST = Buffer.from("[]");

/** What to check, from hsm's own manifest or another tool's (undefined: nothing can be checked). */
async function planFor(
  { value, lists }: ManifestRead,
  problem: ProblemSink,
  report: VerifyReport,
  options: VerifyOptions,
  dir: string,
): Promise<Plan | undefined> {
  const native = isNativeManifest(value);
  report.foreign = !native;
  return native ? planNative(value, lists, problem, report) : await planForeign(value, problem, report, options, dir);
}

/**
 * Each listed file's size and header against the manifest, each file added to the report; returns the files
 * whose headers can be read, to hash.
 */
function checkHeaders(
  dir: string,
  plan: Plan,
  ahead: HashAhead,
  report: VerifyReport,
  problem: ProblemSink,
): HashPlan[] {
  const { listed, rows, dtypes } = plan;
  // A foreign manifest that does not record the width leaves it to the first file; the others must agree.
  const width = new LayerWidth(plan.d ?? undefined, report.foreign);
  const toHash: HashPlan[] = [];
  for (const entry of listed) {
    const { name } = entry;
    const file: VerifiedFile = { name, bytes: null, sha256: null, nonfinite: null, max_abs: null, ok: false };
    report.files.push(file);
    const seen = ahead.looks.get(name) ?? look(dir, name);
    if (seen.bytes !== undefined) {
      file.bytes = seen.bytes;
      if (entry.bytes !== undefined && seen.bytes !== entry.bytes) {
        problem(
          name,
          "size",
          `is ${seen.bytes} bytes but the manifest says ${entry.bytes}${seen.bytes < entry.bytes ? " (truncated)" : ""}`,
        );
      }
    }
    if ("problem" in seen) {
      problem(name, seen.problem, seen.message);
      continue;
    }
    const { header } = seen;
    const mismatch = width.mismatch(header, name, rows, seen.bytes, dtypes, entry.shape)?.message;
    if (mismatch) problem(name, "npy-header", mismatch);
    else if (plan.layout) {
      const layout = npyLayoutProblem(header);
      if (layout) problem(name, "npy-header", layout);
    }
    toHash.push(hashPlan(name, header));
  }
  return toHash;
}

/** Records each hashed file's checksum and statistics, and reports those that differ from the manifest. */
function compareChecksums(
  toHash: HashPlan[],
  outcomes: HashOutcome[],
  plan: Plan,
  report: VerifyReport,
  problem: ProblemSink,
): void {
  outcomes.forEach((o, i) => {
    const { name } = toHash[i]!;
    const entry = plan.listed.find((e) => e.name === name)!;
    const file = report.files.find((f) => f.name === name)!;
    if (!o.ok) {
      problem(name, "unreadable", `cannot be read: ${osReason(o)}`);
      return;
    }
    file.sha256 = o.result.sha256;
    file.nonfinite = o.result.stats?.nonfinite ?? null;
    file.max_abs = o.result.stats?.maxAbs ?? null;
    if (!plan.compare) return; // no checksums to compare yet
    // A file already reported as cut short or mislabelled cannot match its checksum; saying so adds nothing.
    if (report.problems.some((p) => p.file === name)) return;
    let good = true;
    if (entry.sha256 !== undefined && o.result.sha256 !== entry.sha256) {
      good = false;
      problem(
        name,
        "sha256",
        `sha256 is ${o.result.sha256}, the manifest says ${entry.sha256 || "(none)"}: the file changed after it was written`,
      );
    }
    const stats = o.result.stats;
    if (good && stats && entry.nonfinite !== undefined && stats.nonfinite !== entry.nonfinite) {
      problem(name, "nonfinite", `holds ${stats.nonfinite} non-finite values, the manifest says ${entry.nonfinite}`);
    }
    if (good && stats && entry.maxAbs !== undefined && entry.maxAbs !== stats.maxAbs) {
      problem(name, "max-abs", `largest finite magnitude is ${stats.maxAbs}, the manifest says ${entry.maxAbs}`);
    }
  });
}

type ProblemSink = (file: string, code: string, message: string) => void;

/** A file to hash: where its values start, and whether they are float32 (else float16). */
interface HashPlan {
  name: string;
  dataOffset: number;
  float32: boolean;
}

function hashJob(dir: string, f: HashPlan): HashJob {
  return { path: join(dir, f.name), ...(f.float32 ? { f32From: f.dataOffset } : { f16From: f.dataOffset }) };
}

/** A store file as found: its size and header, or what is wrong with it (and its size, where that much is known). */
type Look = { bytes: number; header: NpyHeader } | { bytes?: number; problem: string; message: string };

/**
 * Looks at one store file: never through a symbolic link, never opening
 * anything but a regular file (`O_NONBLOCK`, because a FIFO swapped in after
 * the `lstat` would block the open), and reads its header.
 */
function look(dir: string, name: string): Look {
  const path = join(dir, name);
  let st;
  try {
    st = lstatSync(path);
  } catch (err) {
    const e = err as NodeJS.ErrnoException;
    if (e.code === "ENOENT") return { problem: "file-missing", message: "is listed in the manifest but missing" };
    return { problem: "unreadable", message: `cannot be read: ${osReason(e)}` };
  }
  if (!st.isFile()) {
    return {
      problem: "not-regular-file",
      message: st.isSymbolicLink() ? "is a symbolic link; a store holds its own files" : "is not a regular file",
    };
  }
  let prelude: Buffer;
  try {
    const fd = openSync(path, constants.O_RDONLY | constants.O_NOFOLLOW | constants.O_NONBLOCK);
    try {
      const opened = fstatSync(fd);
      if (!opened.isFile()) return { problem: "not-regular-file", message: "is not a regular file" };
      prelude = Buffer.alloc(Math.min(opened.size, NPY_MAX_PRELUDE));
      prelude = prelude.subarray(0, readSync(fd, prelude, 0, prelude.length, 0));
    } finally {
      closeSync(fd);
    }
  } catch (err) {
    return {
      bytes: st.size,
      problem: "unreadable",
      message: `cannot be read: ${osReason(err as NodeJS.ErrnoException)}`,
    };
  }
  try {
    return { bytes: st.size, header: parseNpyHeader(prelude, name) };
  } catch (err) {
    if (!(err instanceof NpyHeaderError)) throw err;
    return { bytes: st.size, problem: "npy-header", message: `npy header ${err.field}: ${err.problem}` };
  }
}

function hashPlan(name: string, header: NpyHeader): HashPlan {
  return { name, dataOffset: header.dataOffset, float32: header.descr === "<f4" };
}

/** The folder as listed before the manifest is read, and the hashing started on it. */
interface HashAhead {
  /** Every name in the folder (none where it could not be listed). */
  names: string[];
  /** What was found in each regular `L###.npy` file of the folder. */
  looks: Map<string, Look>;
  /** The files being hashed, and their outcomes to come (in `plans` order). */
  plans: HashPlan[];
  outcomes: Promise<HashOutcome[]>;
}

/**
 * Starts hashing every regular `L###.npy` in the folder whose header parses,
 * before the manifest is parsed and checked: the hashing threads work while
 * this thread checks. Which files count is decided later, from the manifest
 * (see {@link hashedAsPlanned}). A folder without a manifest has nothing to
 * compare checksums with, so nothing is hashed.
 */
function hashAhead(dir: string, concurrency: number): HashAhead {
  let entries: Dirent[] = [];
  try {
    entries = readdirSync(dir, { withFileTypes: true });
  } catch {
    /* nothing hashed ahead; the checks below say what is wrong */
  }
  const looks = new Map<string, Look>();
  for (const e of entries)
    if (e.isFile() && layerOfFileName(e.name) !== undefined) looks.set(e.name, look(dir, e.name));
  const plans = entries.some((e) => e.name === MANIFEST_NAME)
    ? [...looks].flatMap(([name, l]) => ("header" in l ? [hashPlan(name, l.header)] : []))
    : [];
  const outcomes =
    plans.length > 0
      ? hashFiles(
          plans.map((f) => hashJob(dir, f)),
          concurrency,
        )
      : Promise.resolve([]);
  outcomes.catch(() => {}); // a failure surfaces where the outcomes are awaited, not as an unhandled rejection meanwhile
  return { names: entries.map((e) => e.name), looks, plans, outcomes };
}

/** The outcomes for `toHash`, in order: those hashed ahead as planned, the rest hashed now. */
async function hashedAsPlanned(
  dir: string,
  toHash: readonly HashPlan[],
  ahead: HashAhead,
  concurrency: number,
): Promise<HashOutcome[]> {
  const early = await ahead.outcomes;
  const byName = new Map(ahead.plans.map((p, i) => [p.name, { plan: p, outcome: early[i]! }]));
  const same = (a: HashPlan, b: HashPlan) => a.dataOffset === b.dataOffset && a.float32 === b.float32;
  const late = toHash.filter((f) => {
    const got = byName.get(f.name);
    return !got || !same(got.plan, f);
  });
  const lateOutcomes =
    late.length > 0
      ? await hashFiles(
          late.map((f) => hashJob(dir, f)),
          concurrency,
        )
      : [];
  const fromLate = new Map(late.map((f, i) => [f.name, lateOutcomes[i]!]));
  return toHash.map((f) => fromLate.get(f.name) ?? byName.get(f.name)!.outcome);
}

interface Plan {
  listed: Expected[];
  rows: number | null;
  d: number | null;
  dtypes: readonly string[];
  /** Whether checksums and statistics are compared (not while a store is incomplete). */
  compare: boolean;
  /**
   * Whether the files are held to the layout hsm writes (npyLayoutProblem): in hsm's own stores, but not in an
   * adopted one (no model_sha256: another tool's files, or vLLM's), which need only read as NumPy reads them.
   */
  layout: boolean;
}

function summarizeSelfCheck(c: SelfCheck): NonNullable<VerifyReport["self_check"]> {
  const key = (r: number | null) => (r === null ? Infinity : r);
  const worst = c.layers.reduce<SelfCheck["layers"][number] | undefined>(
    (w, l) => (!w || key(l.max_rel_dev) > key(w.max_rel_dev) ? l : w),
    undefined,
  );
  return {
    rows: c.rows,
    worst_layer: worst?.layer ?? null,
    worst_rel_dev: worst ? worst.max_rel_dev : 0,
    status: c.status,
  };
}

/**
 * What a complete manifest says of itself: its content (labels, settings) is what was sealed at completion, and
 * its layers are the blocks its rule keeps at its block count.
 */
function contentProblems(
  m: Partial<Manifest>,
  lists: RowListTexts | undefined,
  problem: ProblemSink,
  report: VerifyReport,
): void {
  const recorded = m.manifest_sha256;
  if (recorded === undefined && !writtenByHsm(m)) {
    // The seal is hsm's addition to the contract, optional when reading: a store another tool wrote to the
    // contract has none, and is noted rather than refused.
    report.notes.push({
      file: MANIFEST_NAME,
      note: "not-recorded",
      message: `records no manifest_sha256 (optional; written by ${quoteValue(m.tool_version)}, not hsm), so its labels and settings were not checked against a seal`,
    });
  } else if (recorded === undefined) {
    problem(
      MANIFEST_NAME,
      "manifest-checksum",
      "records no manifest_sha256, so its labels and settings cannot be checked; extract the store again",
    );
  } else if (typeof recorded === "string") {
    const actual = manifestContentSha256(m, lists);
    if (actual !== recorded) {
      problem(
        MANIFEST_NAME,
        "manifest-checksum",
        `its content (labels or settings) changed after the store was completed: sha256 ${actual}, ` +
          `manifest_sha256 says ${recorded}`,
      );
    }
  }
  if (typeof m.layer_rule !== "string" || !Number.isSafeInteger(m.num_layers) || !Array.isArray(m.layers)) return;
  let kept: number[];
  try {
    kept = selectLayers(m.num_layers!, m.layer_rule);
  } catch (err) {
    problem(MANIFEST_NAME, "manifest-field", `"layer_rule" ${(err as Error).message}`);
    return;
  }
  if (JSON.stringify(kept) !== JSON.stringify(m.layers)) {
    problem(
      MANIFEST_NAME,
      "manifest-field",
      `"layers" [${m.layers.join(", ")}] are not the blocks layer_rule ${quoteValue(m.layer_rule)} keeps at ` +
        `num_layers ${m.num_layers} ([${kept.join(", ")}])`,
    );
  }
}

/** hsm's own manifest: every field required, every file entry compared. */
function planNative(value: unknown, lists: RowListTexts | undefined, problem: ProblemSink, report: VerifyReport): Plan {
  const invalid = manifestProblems(value, lists);
  const malformed = new Set(invalid.map((p) => p.key));
  for (const p of invalid) problem(MANIFEST_NAME, p.code, p.key ? `"${p.key}" ${p.message}` : p.message);
  const m = value as Partial<Manifest>;
  if (typeof m.complete === "boolean") report.complete = m.complete;
  report.rows = rowCount(m, "query_ids", lists) ?? null;
  if (Number.isSafeInteger(m.rows_done)) report.rows_done = m.rows_done!;
  if (m.self_check !== undefined && selfCheckProblem(m.self_check) === undefined) {
    report.self_check = summarizeSelfCheck(m.self_check);
    const finding = selfCheckFinding(m.self_check);
    if (finding) problem(MANIFEST_NAME, "self-check", `the batch self-check failed: ${finding}`);
  }
  // A manifest already invalid field by field is not also weighed as a whole.
  if (m.complete === true && invalid.length === 0) contentProblems(m, lists, problem, report);
  if (m.complete === false) {
    problem(
      MANIFEST_NAME,
      "incomplete",
      `the store is incomplete: ${m.rows_done} of ${report.rows} rows written and no checksums yet`,
    );
  }
  // The files we may open: plain names, with the structure needed to check them.
  const listed =
    typeof m.files === "object" && m.files !== null
      ? Object.entries(m.files)
          .filter(([name, e]) => layerOfFileName(name) !== undefined && typeof e === "object" && e !== null)
          .map(([name, e]) => ({
            name,
            ...(Number.isSafeInteger(e.bytes) ? { bytes: e.bytes } : {}),
            // A field the checks above reported as malformed is not compared with the file as well.
            ...(!malformed.has(`files.${name}.sha256`) ? { sha256: e.sha256.toLowerCase() } : {}),
            ...(!malformed.has(`files.${name}.nonfinite`) ? { nonfinite: e.nonfinite } : {}),
            ...(!malformed.has(`files.${name}.max_abs`) ? { maxAbs: e.max_abs } : {}),
          }))
      : [];
  return {
    listed,
    rows: report.rows,
    d: Number.isSafeInteger(m.d_model) ? m.d_model! : null,
    dtypes: ["<f2"],
    compare: m.complete === true,
    // Files hsm extracted (adopted ones have no model checksum) are held to the layout it writes.
    layout: m.model_sha256 !== "" && writtenByHsm(m),
  };
}

/** A manifest written by another tool: row order, layers and checksums checked; the rest noted. */
async function planForeign(
  value: unknown,
  problem: ProblemSink,
  report: VerifyReport,
  options: VerifyOptions,
  dir: string,
): Promise<Plan | undefined> {
  // Loaded here, not with this module: hsm's own stores, the usual case, need none of it.
  const { bankMismatch, foreignLayers, parseForeignManifest, takenComplete, unrecorded } = await import("./foreign.js");
  const { manifest: f, problems } = parseForeignManifest(value);
  for (const p of problems) problem(MANIFEST_NAME, p.code, p.key ? `"${p.key}" ${p.message}` : p.message);
  if (!f) return undefined;
  const note = (file: string, code: string, message: string) => report.notes.push({ file, note: code, message });
  for (const message of unrecorded(f)) note(MANIFEST_NAME, "not-recorded", message);
  for (const name of f.otherFiles)
    note(name, "not-a-store-file", "has a checksum in the manifest but is not a store file; not opened");
  report.rows = f.queryIds.length;
  report.complete = f.complete ?? null;
  report.rows_done = f.rowsDone ?? null;
  if (f.complete === false)
    problem(MANIFEST_NAME, "incomplete", "the store is incomplete by its own manifest (complete: false)");
  else if (!takenComplete(f))
    problem(
      MANIFEST_NAME,
      "incomplete",
      `the store is incomplete by its own manifest (rows_done: ${f.rowsDone} of ${f.queryIds.length} rows, and no "complete" flag)`,
    );

  if (options.bank !== undefined) {
    const bank =
      typeof options.bank === "string" ? await (await import("../bank/bank.js")).readBank(options.bank) : options.bank;
    const mismatch = bankMismatch(f.queryIds, bank, typeof options.bank === "string" ? options.bank : "given");
    if (mismatch) problem(MANIFEST_NAME, "bank-join", `"query_ids" ${mismatch}`);
  } else if (!f.factIds || !f.families) {
    note(
      MANIFEST_NAME,
      "no-bank",
      "no bank given: the rows' query ids were not checked against one (the metrics need --bank BANK)",
    );
  }

  let names: string[] = [];
  if (!f.layers) {
    try {
      names = await readdir(dir);
    } catch (err) {
      throw fileError(err, dir);
    }
  }
  const { layers, outside } = foreignLayers(f, names);
  if (outside) problem(MANIFEST_NAME, "manifest-field", `the folder's layer files: ${outside}`);
  if (layers.length === 0)
    problem(MANIFEST_NAME, "no-layers", "lists no layers and the folder holds no L###.npy files");
  const listed = layers.map((l) => {
    const name = layerFileName(l);
    const sha256 = f.checksums.get(name);
    if (sha256 === undefined)
      problem(name, "sha256-missing", "has no checksum in the manifest, so its content cannot be trusted");
    return {
      name,
      ...(sha256 !== undefined ? { sha256 } : {}),
      ...(f.nonfinite.has(name) ? { nonfinite: f.nonfinite.get(name)! } : {}),
      ...(f.shapes.has(name) ? { shape: f.shapes.get(name)! } : {}),
      ...(f.sizes.has(name) ? { bytes: f.sizes.get(name)! } : {}),
    };
  });
  return {
    listed,
    rows: f.queryIds.length,
    d: f.dModel ?? null,
    dtypes: ["<f2", "<f4"],
    compare: takenComplete(f),
    layout: false,
  };
}
