/**
 * What an export format is: a name for `--format`, the words `hsm export
 * --help` shows, and a function from the scored rows (joined with their bank
 * rows) to the files it writes. EEE and Foundry are two of them
 * (src/export/formats/eee.ts, foundry.ts); src/export/formats/registry.ts lists
 * them. This module imports nothing heavy, so that the public API can offer it.
 */
import { dirname } from "node:path";

import type { BankRow } from "../../bank/bank.js";
import { UsageError } from "../../errors.js";
import { fileError, makeDir, readTextIfPresent, writeFileAtomic } from "../../util/fs.js";

/** One scored row, as `hsm score` writes it (the fields every format may read). */
export interface ScoredRow {
  query_id: string;
  model?: string;
  fact_id: string;
  condition_family: string;
  raw_response: string;
  span: string;
  flags: string[];
  label: string;
  matched_alias: string | null;
  scorer: string;
  needs_manual_review: boolean;
  [key: string]: unknown;
}

/** What the user asked for beyond the rows: where to write, and how to name what was evaluated. */
export interface ExportSettings {
  /** The scored file and the bank file read (for names derived from them). */
  scored: string;
  bank: string;
  out: string;
  /** HuggingFace-style model id (developer/name); default: the scored rows' model. */
  modelId?: string;
  developer?: string;
  organization?: string;
  benchmark?: string;
  /** Foundry: the messages form instead of query/response. */
  messages?: boolean;
  /**
   * Keep one export of this model under `out` (what `hsm run` asks for): files
   * that would be written the same are left as they are, and a new Every Eval
   * Ever record replaces the model's earlier ones instead of joining them.
   */
  replace?: boolean;
}

/** What a format receives: every scored row (checked, in file order), its bank row by query id, and the settings. */
export interface ExportInput {
  rows: ScoredRow[];
  bank: Map<string, BankRow>;
  settings: ExportSettings;
}

export interface ExportFormat {
  /** Lower-case name: the `--format` value. */
  name: string;
  /** Its full name, as `hsm export --help` and messages write it. */
  title: string;
  /** What it writes, in a sentence or two, for `hsm export --help`. */
  description: string;
  /** What `--out` names for it, e.g. "folder" or "JSONL file". */
  out: string;
  /** Writes the files; returns their paths (and, optionally, whether they were already there as they would be). */
  write(input: ExportInput): Promise<string[] | ExportWritten>;
}

/** What a format wrote: its files, and `unchanged` when they were there already as they would be written. */
export interface ExportWritten {
  files: string[];
  unchanged: boolean;
}

/** Export formats, in the order `hsm export --help` lists them; formats/registry.ts holds the built-in ones. */
export type ExportFormatRegistry = readonly ExportFormat[];

/** A name that is safe as a `--format` value. */
const FORMAT_NAME = /^[a-z][a-z0-9_-]*$/;

/**
 * The registry with `format` added after the formats already there; `registry`
 * itself is left as it was. Names are lower-case (`a-z`, digits, `_`, `-`) and
 * unique.
 */
export function registerExportFormat(registry: ExportFormatRegistry, format: ExportFormat): ExportFormatRegistry {
  if (!FORMAT_NAME.test(format.name)) {
    const rule = "a-z, 0-9, _ and - (starting with a letter)";
    throw new UsageError(`Expected an export format name of ${rule} but received "${format.name}"`);
  }
  if (registry.some((f) => f.name === format.name)) {
    throw new UsageError(`An export format named "${format.name}" is already registered`);
  }
  return [...registry, format];
}

/** Writes `text` to `path` atomically, creating its folder; a failure names the path. */
export async function writeExportFile(path: string, text: string): Promise<void> {
  try {
    await makeDir(dirname(path));
  } catch (err) {
    throw fileError(err, dirname(path), "write");
  }
  await writeFileAtomic(path, text);
}

/** True when `path` holds exactly `text`; false when it holds something else or nothing. */
export async function holdsText(path: string, text: string): Promise<boolean> {
  try {
    return (await readTextIfPresent(path)) === text;
  } catch (err) {
    throw fileError(err, path);
  }
}
