/**
 * Streams a JSONL file as parsed objects with their 1-based line numbers,
 * skipping blank lines. A line that is not a JSON object becomes the error
 * `fail(line, problem, cause)` makes, so every reader names file and line alike;
 * a file that is missing or unreadable becomes a {@link FileError} naming it.
 */
import { createReadStream } from "node:fs";
import { createInterface } from "node:readline";

import { fileError } from "./fs.js";

function typeName(v: unknown): string {
  if (v === null) return "null";
  if (Array.isArray(v)) return "array";
  return typeof v;
}

export async function* jsonLines(
  file: string,
  fail: (line: number, problem: string, cause?: unknown) => Error,
): AsyncGenerator<{ value: Record<string, unknown>; line: number }> {
  const input = createReadStream(file, { encoding: "utf8" });
  const lines = createInterface({ input, crlfDelay: Infinity });
  let line = 0;
  const iterator = lines[Symbol.asyncIterator]();
  try {
    for (;;) {
      let next: IteratorResult<string>;
      try {
        next = await iterator.next();
      } catch (err) {
        throw fileError(err, file);
      }
      if (next.done) return;
      const text = next.value;
      line++;
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
    lines.close();
    input.destroy();
  }
}
