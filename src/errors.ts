/**
 * Tagged error classes. Each carries the fields a caller needs to point the user
 * at the problem, and a message that says what to change.
 */

/** Exit statuses of the `hsm` command: a problem with the data, with the command line, or inside hsm. */
export const EXIT = { ok: 0, data: 1, usage: 2, internal: 3 } as const;

/** Base class: the CLI prints `message` without a stack and exits with `exitCode`. */
export class HsmError extends Error {
  exitCode: number = EXIT.data;
  constructor(message: string, options?: { cause?: unknown }) {
    super(message, options);
    this.name = new.target.name;
  }
}

/** A bad command line: exit code 2. */
export class UsageError extends HsmError {
  override exitCode: number = EXIT.usage;
}

/** A broken promise inside hsm itself (a bug, or an installation missing its own files): exit code 3. */
export class InternalError extends HsmError {
  override exitCode: number = EXIT.internal;
}

/**
 * A problem with one line of a JSONL input (or with the whole file, `line` 0):
 * `FILE:LINE: field "F": problem`.
 */
export class JsonlError extends HsmError {
  constructor(
    readonly file: string,
    readonly line: number,
    readonly field: string | undefined,
    problem: string,
    options?: { cause?: unknown },
  ) {
    super(`${file}${line > 0 ? `:${line}` : ""}: ${field ? `field "${field}": ` : ""}${problem}`, options);
  }
}

/**
 * A JSON file that hsm wrote and reads back (a study record, a metric's
 * results) that is not valid JSON or does not hold what it should:
 * `FILE: field "F": problem`.
 */
export class JsonFileError extends HsmError {
  constructor(
    readonly file: string,
    readonly field: string | undefined,
    problem: string,
    options?: { cause?: unknown },
  ) {
    super(`${file}: ${field ? `field "${field}": ` : ""}${problem}`, options);
  }
}

/** A query-bank line that is not a valid query (a field missing, of the wrong type, or a duplicate id). */
export class BankError extends JsonlError {}

/** A generations line without `query_id` or `raw_response`, or generations that do not match the bank. */
export class GenerationsError extends JsonlError {}

/** A scored line without a required field or with an unknown label, or scored rows that do not match the bank or the store. */
export class ScoredError extends JsonlError {}

/** Why a file named by the user could not be used. */
export type FileProblem = "missing" | "unreadable" | "unwritable";

/**
 * A file or folder that is missing, cannot be read or cannot be written, with
 * the operating system's reason (`code`: ENOENT, EACCES, EISDIR, EIO, ENOSPC …).
 */
export class FileError extends HsmError {
  constructor(
    readonly path: string,
    readonly problem: FileProblem,
    readonly code: string | undefined,
    description: string,
    options?: { cause?: unknown },
  ) {
    super(`${path}: ${description}`, options);
  }
}

/** An `.npy` file whose header cannot be trusted. */
export class NpyHeaderError extends HsmError {
  constructor(
    readonly path: string,
    readonly field: string,
    readonly problem: string,
    options?: { cause?: unknown },
  ) {
    super(`${path}: npy header ${field}: ${problem}`, options);
  }
}

/** A `.safetensors` file whose header cannot be trusted: `PATH: safetensors header FIELD: problem`. */
export class SafetensorsError extends HsmError {
  constructor(
    readonly path: string,
    readonly field: string,
    readonly problem: string,
    options?: { cause?: unknown },
  ) {
    super(`${path}: safetensors header ${field}: ${problem}`, options);
  }
}

/** An `index.json` that does not describe a readable store (docs/formats.md#manifest). */
export class ManifestError extends HsmError {
  constructor(
    readonly path: string,
    readonly key: string,
    problem: string,
    options?: { cause?: unknown },
  ) {
    super(`${path}: ${key ? `"${key}" ` : ""}${problem}`, options);
  }
}

/** A store that cannot be written or resumed as asked. */
export class StoreError extends HsmError {
  constructor(
    readonly path: string,
    problem: string,
    options?: { cause?: unknown },
  ) {
    super(`${path}: ${problem}`, options);
  }
}

/** A store that does not fit in the free space of its file system; refused before anything is written. */
export class DiskSpaceError extends StoreError {
  constructor(
    path: string,
    /** Bytes the store still needs. */
    readonly needed: number,
    /** Bytes free for this user on the file system. */
    readonly available: number,
  ) {
    super(
      path,
      `needs ${bytesText(needed)} of free space for the store, but its file system has ${bytesText(available)} free; free ${bytesText(needed - available)} more or write the store elsewhere`,
    );
  }
}

function bytesText(n: number): string {
  return `${n.toLocaleString("en-US")} bytes (${n >= 1e9 ? `${(n / 1e9).toFixed(2)} GB` : `${(n / 1e6).toFixed(2)} MB`})`;
}
