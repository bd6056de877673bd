/**
 * Streams a JSONL file as parsed objects with their 1-based line numbers,
 * skipping blank lines. A line that is not a JSON object becomes the error
 * `fail(line, problem, cause)` makes, so every reader names file and line alike;
 * a file that is missing or unreadable becomes a `FileError` (src/errors.ts) naming it.
 * The file is opened by the rule of fs.ts (a regular file; a link the user
 * gave is followed), its text is strict UTF-8 (a byte-order mark or an invalid
 * byte is named with its line and offset), and no line may exceed
 * {@link JSONL_LINE_MAX_BYTES}, so one enormous line cannot exhaust memory.
 */
import { isUtf8 } from "node:buffer";
import type { FileHandle } from "node:fs/promises";

import { fileError, hasUtf8Bom, invalidUtf8Offset, openInput } from "./fs.js";

function typeName(v: unknown): string {
  if (v === null) return "null";
  if (Array.isArray(v)) return "array";
  return typeof v;
}

/**
 * What is wrong with a string that a JSON escape made ill-formed (a lone surrogate, "\ud800", which no UTF-8 text
 * can hold and which would become U+FFFD once written or tokenized), or undefined where it is well formed.
 * @example illFormedText("a\ud800") // 'holds a lone surrogate U+D800 at position 1 (the JSON escape "\ud800" …'
 */
export function illFormedText(s: string): string | undefined {
  if (s.isWellFormed()) return undefined;
  const at = /\p{Surrogate}/u.exec(s)!;
  const unit = at[0].charCodeAt(0).toString(16);
  return (
    `holds a lone surrogate U+${unit.toUpperCase()} at position ${at.index} (the JSON escape "\\u${unit}" ` +
    "without its pair), which is not text and is never repaired; fix the escape"
  );
}

/** The longest line a JSONL input may hold: far above any query or answer record. */
export const JSONL_LINE_MAX_BYTES = 1024 * 1024;

const NEWLINE = 0x0a;
const CARRIAGE_RETURN = 0x0d;

/**
 * Bytes per read. Every read goes into the same buffer: a fresh buffer per chunk
 * would be fresh memory each time, and touching fresh memory page by page costs
 * more than reading the file (dearly so in a virtual machine).
 */
const CHUNK_BYTES = 1 << 20;

/**
 * An open file's lines, a run of whole lines at a time, each run with the file offset where it starts. Every run
 * is read into one buffer, which also holds a line that spans reads: a run is valid until the next is asked for.
 * All but the last run end with "\n". `tooLong` is thrown once an unfinished line is longer than any allowed
 * (its "\r" before a "\n" still to come not counted).
 */
async function* lineRuns(
  fh: FileHandle,
  file: string,
  tooLong: () => Error,
): AsyncGenerator<{ bytes: Buffer; offset: number }> {
  const buffer = Buffer.allocUnsafeSlow(JSONL_LINE_MAX_BYTES + 1 + CHUNK_BYTES);
  let held = 0; // an unfinished line's bytes, at the buffer's start
  let offset = 0; // the file offset of the buffer's start
  for (;;) {
    let bytesRead: number;
    try {
      ({ bytesRead } = await fh.read(buffer, held, CHUNK_BYTES, null));
    } catch (err) {
      throw fileError(err, file);
    }
    if (bytesRead === 0) {
      if (held > 0) yield { bytes: buffer.subarray(0, held), offset };
      return;
    }
    const end = held + bytesRead;
    const cut = buffer.lastIndexOf(NEWLINE, end - 1) + 1;
    if (cut > 0) yield { bytes: buffer.subarray(0, cut), offset };
    held = end - cut;
    if (lineLength(buffer, cut, end) > JSONL_LINE_MAX_BYTES) throw tooLong();
    buffer.copyWithin(0, cut, end);
    offset += cut;
  }
}

/** One line (`bytes`, at `offset` in the file, without "\n") as a record, or undefined where it is blank. */
function recordOf(
  bytes: Buffer,
  offset: number,
  line: number,
  fail: (line: number, problem: string, cause?: unknown) => Error,
): Record<string, unknown> | undefined {
  if (offset === 0 && hasUtf8Bom(bytes))
    throw fail(line, "the file starts with a UTF-8 byte-order mark (EF BB BF); save it as UTF-8 without one");
  if (!isUtf8(bytes)) {
    const bad = invalidUtf8Offset(bytes);
    const byte = bytes[bad]!.toString(16).padStart(2, "0");
    throw fail(line, `is not valid UTF-8: byte 0x${byte} at offset ${offset + bad} of the file`);
  }
  const text = bytes.toString("utf8", 0, lineLength(bytes, 0, bytes.length));
  if (!text.trim()) return undefined;
  let value: unknown;
  try {
    value = JSON.parse(text);
  } catch (err) {
    throw fail(line, `is not valid JSON (${jsonSyntax(err)})`, err);
  }
  if (typeof value !== "object" || value === null || Array.isArray(value)) {
    throw fail(line, `expected a JSON object but received ${typeName(value)}`);
  }
  return value as Record<string, unknown>;
}

const tooLongProblem = `is longer than ${JSONL_LINE_MAX_BYTES} bytes; a JSONL line holds one short record`;

/** The length of the line `run[start, stop)` without its end: "\r\n" line ends are read as "\n". */
function lineLength(run: Buffer, start: number, stop: number): number {
  return stop > start && run[stop - 1] === CARRIAGE_RETURN ? stop - start - 1 : stop - start;
}

/** Where the line of `run` that starts at `start` stops: its "\n", or the run's end. */
function lineStop(run: Buffer, start: number): number {
  const nl = run.indexOf(NEWLINE, start);
  return nl === -1 ? run.length : nl;
}

export async function* jsonLines(
  file: string,
  fail: (line: number, problem: string, cause?: unknown) => Error,
): AsyncGenerator<{ value: Record<string, unknown>; line: number }> {
  const { fh } = await openInput(file, { follow: true });
  let line = 0;
  try {
    for await (const run of lineRuns(fh, file, () => fail(line + 1, tooLongProblem))) {
      for (let start = 0, stop = 0; start < run.bytes.length; start = stop + 1) {
        stop = lineStop(run.bytes, start);
        line++;
        if (lineLength(run.bytes, start, stop) > JSONL_LINE_MAX_BYTES) throw fail(line, tooLongProblem);
        const value = recordOf(run.bytes.subarray(start, stop), run.offset + start, line, fail);
        if (value !== undefined) yield { value, line };
      }
    }
  } finally {
    await fh.close();
  }
}

/** A record's own members `keys` (undefined where absent: a name like "toString" is not looked up further). */
function membersOf(value: Record<string, unknown>, keys: readonly string[]): unknown[] {
  return keys.map((k) => (Object.hasOwn(value, k) ? value[k] : undefined));
}

/**
 * Finds the top-level string members `keys` in whole lines of JSON (native/json_scan.h): per line that is not blank,
 * [line index, start, end, verdict (0: plain, 1: parse it yourself), then per key its value's span or −1, −1].
 */
export type JsonlScan = (bytes: Uint8Array, keys: string[]) => Int32Array;

/**
 * A native scan's way through a JSONL file's lines (see {@link jsonlFields}): per line that is not blank,
 * `stride` values [line index in the run, start, end, verdict (0: plain, 1: parse it yourself), …], and what to
 * do with a plain line's entry `found[entry …]` (the run's bytes in `bytes`).
 */
export interface JsonlFastPath {
  stride: number;
  scan(bytes: Uint8Array): Int32Array;
  plain(found: Int32Array, entry: number, bytes: Buffer, line: number): void;
}

/**
 * Hands `take` the members `keys` of each record of a JSONL file (undefined where absent), with its line, in
 * order: the records, line numbers and errors of {@link jsonLines}, word for word (an error `take` throws stops
 * the reading). With `scan` (the native core's), a line whose wanted members are plain strings is not parsed into
 * a record at all: it was checked against JSON's grammar and the strings are cut out of its bytes. Everything
 * else — an error, a value of another type, an escape — is parsed by JSON.parse as {@link jsonLines} does. `take`
 * is called synchronously, line after line, with no promise between two lines: on the benchmark's 24 MB scored
 * file the reading takes a fraction of the time, and of the memory churn, of whole records.
 */
export async function jsonlFields(
  file: string,
  keys: string[],
  fail: (line: number, problem: string, cause?: unknown) => Error,
  take: (fields: unknown[], line: number) => void,
  scan?: JsonlScan,
): Promise<void> {
  if (!scan) {
    for await (const { value, line } of jsonLines(file, fail)) take(membersOf(value, keys), line);
    return;
  }
  await jsonlScanned(file, keys, fail, take, {
    stride: 4 + 2 * keys.length,
    scan: (bytes) => scan(bytes, keys),
    plain(found, entry, bytes, line) {
      const fields = new Array<string | undefined>(keys.length);
      for (let k = 0; k < keys.length; k++) {
        const from = found[entry + 4 + 2 * k]!;
        fields[k] = from < 0 ? undefined : bytes.toString("utf8", from, found[entry + 5 + 2 * k]);
      }
      take(fields, line);
    },
  });
}

/**
 * {@link jsonlFields} with a fast path of the caller's: its plain lines go to `fast.plain`, every other record's
 * members `keys` to `take`, in line order, with the line numbers and errors of {@link jsonLines}.
 */
export async function jsonlScanned(
  file: string,
  keys: string[],
  fail: (line: number, problem: string, cause?: unknown) => Error,
  take: (fields: unknown[], line: number) => void,
  fast: JsonlFastPath,
): Promise<void> {
  const { stride } = fast;
  const { fh } = await openInput(file, { follow: true });
  let line = 0;
  try {
    for await (const run of lineRuns(fh, file, () => fail(line + 1, tooLongProblem))) {
      const { bytes, offset } = run;
      // A run with a byte that is not UTF-8 is parsed line by line, so that the first such line is named.
      const found = isUtf8(bytes) ? fast.scan(bytes) : undefined;
      let at = 0; // the scan's entry for the next line it did not find blank
      let index = 0;
      // The lines one by one, in a plain loop: a generator's object per line cost more than the line's own work.
      for (let start = 0, stop = 0; start < bytes.length; start = stop + 1, index++) {
        stop = lineStop(bytes, start);
        line++;
        if (lineLength(bytes, start, stop) > JSONL_LINE_MAX_BYTES) throw fail(line, tooLongProblem);
        if (found !== undefined) {
          if (found[at] !== index) continue; // blank: the scan has no entry for it
          const entry = at;
          at += stride;
          if (found[entry + 3] === 0) {
            fast.plain(found, entry, bytes, line);
            continue;
          }
        }
        const value = recordOf(bytes.subarray(start, stop), offset + start, line, fail);
        if (value !== undefined) take(membersOf(value, keys), line);
      }
    }
  } finally {
    await fh.close();
  }
}

/**
 * Why JSON.parse refused a text, on one line: its message quotes the text around the error, and a pretty-printed
 * file's line breaks would split the one-line error that names the file.
 */
export function jsonSyntax(err: unknown): string {
  return String((err as Error).message).replace(/\r?\n/g, "\\n");
}

/** How much of a value read from a file an error message quotes. */
const QUOTED_CHARS = 80;

/** `text` as an error message shows it: cut to {@link QUOTED_CHARS} characters. */
export function cutText(text: string): string {
  return text.length > QUOTED_CHARS ? `${text.slice(0, QUOTED_CHARS)}…` : text;
}

/**
 * A value read from a file (an `index.json`, say), as an error message quotes it: its JSON, cut to {@link QUOTED_CHARS}
 * characters, or "nothing" where there is none. A file from another machine may hold a value of megabytes.
 */
export function quoteValue(value: unknown): string {
  const text = JSON.stringify(value) as string | undefined;
  return text === undefined ? "nothing" : cutText(text);
}
