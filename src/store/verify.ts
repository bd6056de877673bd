/**
 * `hsm verify`: everything that must hold before a store is trusted. The
 * manifest is validated first; only plain `L###.npy` names inside the store are
 * ever opened (symbolic links are refused); each header is checked against the
 * manifest and the file size; then every file is re-hashed, in parallel, and its
 * float16 statistics recounted in the same pass.
 */
import { lstat, open, readdir, readFile, stat } from "node:fs/promises";
import { availableParallelism } from "node:os";
import { join } from "node:path";

import { FileError, NpyHeaderError } from "../errors.js";
import { fileError, osReason } from "../util/fs.js";

import { hashFiles } from "./hash.js";
import { layerOfFileName } from "./names.js";
import { MANIFEST_NAME, manifestProblems, type Manifest } from "./manifest.js";
import { NPY_MAX_HEADER, parseNpyHeader } from "./npy.js";
import { headerMismatch } from "./reader.js";

export interface VerifyProblem {
  /** The store file concerned, relative to the store ("index.json", "L018.npy"). */
  file: string;
  /** A stable code for machines: "sha256", "size", "npy-header", … */
  problem: string;
  message: string;
}

export interface VerifiedFile {
  name: string;
  bytes: number | null;
  sha256: string | null;
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
}

export interface VerifyOptions {
  /** Files hashed at once; default the core count. */
  concurrency?: number;
}

/**
 * Checks a store folder and reports every problem found (an empty list when
 * the store can be trusted). Throws a {@link FileError} only when `dir` itself
 * is missing or not a folder, since then there is nothing to check.
 */
export async function verifyStore(dir: string, options: VerifyOptions = {}): Promise<VerifyReport> {
  const report: VerifyReport = { store: dir, ok: false, complete: null, rows: null, rows_done: null, files: [], problems: [] };
  const problem = (file: string, code: string, message: string) => report.problems.push({ file, problem: code, message });

  let folder;
  try {
    folder = await stat(dir);
  } catch (err) {
    throw fileError(err, dir);
  }
  if (!folder.isDirectory()) {
    throw new FileError(dir, "unreadable", "ENOTDIR", "is not a folder; a store is a folder holding index.json and L###.npy files");
  }

  let text: string;
  try {
    text = await readFile(join(dir, MANIFEST_NAME), "utf8");
  } catch (err) {
    const e = err as NodeJS.ErrnoException;
    if (e.code === "ENOENT") problem(MANIFEST_NAME, "manifest-missing", "is missing");
    else problem(MANIFEST_NAME, "manifest-unreadable", `cannot be read: ${osReason(e)}`);
    return report;
  }
  let value: unknown;
  try {
    value = JSON.parse(text);
  } catch (err) {
    problem(MANIFEST_NAME, "manifest-json", `is not valid JSON (${(err as Error).message})`);
    return report;
  }
  for (const p of manifestProblems(value)) problem(MANIFEST_NAME, p.code, p.key ? `"${p.key}" ${p.message}` : p.message);
  const m = value as Partial<Manifest>;
  if (typeof m.complete === "boolean") report.complete = m.complete;
  if (Array.isArray(m.query_ids)) report.rows = m.query_ids.length;
  if (Number.isSafeInteger(m.rows_done)) report.rows_done = m.rows_done!;
  if (m.complete === false) {
    problem(MANIFEST_NAME, "incomplete", `the store is incomplete: ${m.rows_done} of ${report.rows} rows written and no checksums yet`);
  }

  // The files we may open: plain names, with the structure needed to check them.
  const listed =
    typeof m.files === "object" && m.files !== null
      ? Object.entries(m.files).filter(([name, e]) => layerOfFileName(name) !== undefined && typeof e === "object" && e !== null)
      : [];
  const rows = report.rows;
  const d = Number.isSafeInteger(m.d_model) ? m.d_model! : null;
  const toHash: { name: string; dataOffset: number }[] = [];
  for (const [name, entry] of listed) {
    const path = join(dir, name);
    const file: VerifiedFile = { name, bytes: null, sha256: null, ok: false };
    report.files.push(file);
    let st;
    try {
      st = await lstat(path);
    } catch (err) {
      const e = err as NodeJS.ErrnoException;
      if (e.code === "ENOENT") problem(name, "file-missing", "is listed in the manifest but missing");
      else problem(name, "unreadable", `cannot be read: ${osReason(e)}`);
      continue;
    }
    if (!st.isFile()) {
      problem(name, "not-regular-file", st.isSymbolicLink() ? "is a symbolic link; a store holds its own files" : "is not a regular file");
      continue;
    }
    file.bytes = st.size;
    if (Number.isSafeInteger(entry.bytes) && st.size !== entry.bytes) {
      problem(name, "size", `is ${st.size} bytes but the manifest says ${entry.bytes}${st.size < entry.bytes ? " (truncated)" : ""}`);
    }
    const prelude = Buffer.alloc(Math.min(st.size, NPY_MAX_HEADER + 12));
    try {
      const fh = await open(path, "r");
      try {
        await fh.read(prelude, 0, prelude.length, 0);
      } finally {
        await fh.close();
      }
    } catch (err) {
      problem(name, "unreadable", `cannot be read: ${osReason(err as NodeJS.ErrnoException)}`);
      continue;
    }
    let dataOffset: number;
    try {
      const header = parseNpyHeader(prelude, name);
      dataOffset = header.dataOffset;
      if (rows !== null && d !== null) {
        const mismatch = headerMismatch(header, rows, d, st.size);
        if (mismatch) problem(name, "npy-header", mismatch);
      }
    } catch (err) {
      if (!(err instanceof NpyHeaderError)) throw err;
      problem(name, "npy-header", `npy header ${err.field}: ${err.problem}`);
      continue;
    }
    toHash.push({ name, dataOffset });
  }

  // Files in the folder that the manifest does not account for.
  try {
    const present = await readdir(dir);
    const known = new Set(listed.map(([name]) => name));
    for (const name of present) {
      if (layerOfFileName(name) !== undefined && !known.has(name)) problem(name, "unlisted-file", "is in the store folder but not in the manifest");
    }
  } catch {
    /* the folder itself was readable a moment ago; nothing more to add */
  }

  const outcomes = await hashFiles(
    toHash.map((f) => ({ path: join(dir, f.name), f16From: f.dataOffset })),
    options.concurrency ?? availableParallelism(),
  );
  outcomes.forEach((o, i) => {
    const { name } = toHash[i]!;
    const entry = m.files![name]!;
    const file = report.files.find((f) => f.name === name)!;
    if (!o.ok) {
      problem(name, "unreadable", `cannot be read: ${osReason(o)}`);
      return;
    }
    file.sha256 = o.result.sha256;
    if (m.complete !== true) return; // no checksums to compare yet
    // A file already reported as cut short or mislabelled cannot match its checksum; saying so adds nothing.
    if (report.problems.some((p) => p.file === name)) return;
    let good = true;
    if (o.result.sha256 !== entry.sha256) {
      good = false;
      problem(name, "sha256", `sha256 is ${o.result.sha256}, the manifest says ${entry.sha256 || "(none)"}: the file changed after it was written`);
    }
    const stats = o.result.stats;
    if (good && stats && stats.nonfinite !== entry.nonfinite) {
      problem(name, "nonfinite", `holds ${stats.nonfinite} non-finite values, the manifest says ${entry.nonfinite}`);
    }
    if (good && stats && entry.max_abs !== stats.maxAbs) {
      problem(name, "max-abs", `largest finite magnitude is ${stats.maxAbs}, the manifest says ${entry.max_abs}`);
    }
  });
  for (const f of report.files) f.ok = f.sha256 !== null && !report.problems.some((p) => p.file === f.name);
  report.ok = report.problems.length === 0;
  return report;
}
