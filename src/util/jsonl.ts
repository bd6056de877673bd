/**
 * Streams a JSONL file as parsed objects with their 1-based line numbers,
 * skipping blank lines. A line that is not a JSON object becomes the error
 * `fail(line, problem, cause)` makes, so every reader names file and line alike;
 * a file that is missing or unreadable becomes a {@link FileError} naming it.
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

/** The longest line a JSONL input may hold: far above any query or answer record. */
export const JSONL_LINE_MAX_BYTES = 1024 * 1024;

const NEWLINE = 0x0a;

/**
 * Bytes per read. Every read goes into the same buffer: a fresh buffer per chunk
 * would be fresh memory each time, and touching fresh memory page by page costs
 * more than reading the file (dearly so in a virtual machine).
 */
const CHUNK_BYTES = 1 << 20;

/** An open file's bytes in chunks, each read into one reused buffer: a chunk is valid until the next is asked for. */
async function* chunksOf(fh: FileHandle): AsyncGenerator<Buffer> {
  const buffer = Buffer.allocUnsafeSlow(CHUNK_BYTES);
  for (;;) {
    const { bytesRead } = await fh.read(buffer, 0, CHUNK_BYTES, null);
    if (bytesRead === 0) return;
    yield buffer.subarray(0, bytesRead);
  }
}

/**
 * The lines of an open file as bytes (without "\n"), each with the byte offset where it starts. A line is valid
 * until the next is asked for; one that spans chunks is copied out of them.
 */
async function* byteLines(
  chunks: AsyncIterable<Buffer>,
  tooLong: (offset: number) => Error,
): AsyncGenerator<{ bytes: Buffer; offset: number }> {
  let pending: Buffer[] = [];
  let pendingBytes = 0;
  let offset = 0;
  for await (const chunk of chunks) {
    let start = 0;
    for (let nl = chunk.indexOf(NEWLINE); nl !== -1; nl = chunk.indexOf(NEWLINE, start)) {
      if (pendingBytes + nl - start > JSONL_LINE_MAX_BYTES) throw tooLong(offset);
      const bytes = pending.length ? Buffer.concat([...pending, chunk.subarray(start, nl)]) : chunk.subarray(start, nl);
      yield { bytes, offset };
      offset += bytes.length + 1;
      pending = [];
      pendingBytes = 0;
      start = nl + 1;
    }
    if (start < chunk.length) {
      pendingBytes += chunk.length - start;
      if (pendingBytes > JSONL_LINE_MAX_BYTES) throw tooLong(offset);
      // The chunk's buffer is read into again: the piece is kept as a copy.
      pending.push(Buffer.from(chunk.subarray(start)));
    }
  }
  if (pendingBytes > 0) yield { bytes: Buffer.concat(pending), offset };
}

export async function* jsonLines(
  file: string,
  fail: (line: number, problem: string, cause?: unknown) => Error,
): AsyncGenerator<{ value: Record<string, unknown>; line: number }> {
  const { fh } = await openInput(file, { follow: true });
  let line = 0;
  const lines = byteLines(chunksOf(fh), () =>
    fail(line + 1, `is longer than ${JSONL_LINE_MAX_BYTES} bytes; a JSONL line holds one short record`),
  );
  try {
    for (;;) {
      let next: IteratorResult<{ bytes: Buffer; offset: number }>;
      try {
        next = await lines.next();
      } catch (err) {
        throw fileError(err, file);
      }
      if (next.done) return;
      const { bytes, offset } = next.value;
      line++;
      if (offset === 0 && hasUtf8Bom(bytes))
        throw fail(line, "the file starts with a UTF-8 byte-order mark (EF BB BF); save it as UTF-8 without one");
      if (!isUtf8(bytes)) {
        const bad = invalidUtf8Offset(bytes);
        const byte = bytes[bad]!.toString(16).padStart(2, "0");
        throw fail(line, `is not valid UTF-8: byte 0x${byte} at offset ${offset + bad} of the file`);
      }
      // "\r\n" line ends are read as "\n".
      const text = bytes.toString("utf8", 0, bytes.at(-1) === 0x0d ? bytes.length - 1 : bytes.length);
      if (!text.trim()) continue;
      let value: unknown;
      try {
        value = JSON.parse(text);
      } catch (err) {
        throw fail(line, `is not valid JSON (${(err as Error).message})`, err);
      }
      if (typeof value !== "object" || value === null || Array.isArray(value)) {
        throw fail(line, `expected a JSON object but received ${typeName(value)}`);
      }
      yield { value: value as Record<string, unknown>, line };
    }
  } finally {
    await lines.return(undefined);
    await fh.close();
  }
}
