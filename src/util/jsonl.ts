/**
 * Streams a JSONL file as parsed values with their 1-based line numbers,
 * skipping blank lines. A line that is not JSON, or a missing file, becomes the
 * error `fail(line, problem)` makes, so every reader names file and line alike.
 */
import { createReadStream } from "node:fs";
import { createInterface } from "node:readline";

export async function* jsonLines(file: string, fail: (line: number, problem: string) => Error): AsyncGenerator<{ value: Record<string, unknown>; line: number }> {
  let line = 0;
  try {
    for await (const text of createInterface({ input: createReadStream(file, { encoding: "utf8" }), crlfDelay: Infinity })) {
      line++;
      if (!text.trim()) continue;
      let value: unknown;
      try {
        value = JSON.parse(text);
      } catch (err) {
        throw fail(line, `is not valid JSON (${(err as Error).message})`);
      }
      if (typeof value !== "object" || value === null || Array.isArray(value)) throw fail(line, "expected a JSON object");
      yield { value: value as Record<string, unknown>, line };
    }
  } catch (err) {
    const code = (err as NodeJS.ErrnoException).code;
    if (code === "ENOENT") throw fail(0, "no such file");
    if (code === "EISDIR") throw fail(0, "is a directory, not a JSONL file");
    throw err;
  }
}
