/** The one JSONL reader: objects with their line numbers; bad lines and bad files named exactly. */
import { mkdirSync, writeFileSync } from "node:fs";
import { join } from "node:path";

import { describe, expect, it } from "vitest";

import { EXIT, FileError, JsonlError } from "../../src/errors.js";
import { jsonLines } from "../../src/util/jsonl.js";
import { tempDir } from "../helpers/tmp.js";

const dir = tempDir("hsm-jsonl-");

async function readAll(file: string): Promise<[number, Record<string, unknown>][]> {
  const out: [number, Record<string, unknown>][] = [];
  for await (const { value, line } of jsonLines(
    file,
    (l, problem, cause) => new JsonlError(file, l, undefined, problem, { cause }),
  ))
    out.push([line, value]);
  return out;
}

function file(name: string, text: string): string {
  const path = join(dir, name);
  writeFileSync(path, text);
  return path;
}

describe("jsonLines", () => {
  it("yields each object with its 1-based line, skipping blank lines and reading CRLF", async () => {
    const path = file("good.jsonl", '{"a": 1}\r\n\r\n  \n{"b": "x"}\n{"c": null}');
    expect(await readAll(path)).toEqual([
      [1, { a: 1 }],
      [4, { b: "x" }],
      [5, { c: null }],
    ]);
  });

  it("reads lines across the file's chunks whole, multi-byte characters split between chunks included", async () => {
    // Lines of many lengths (some near a chunk of 1 MiB, some of several chunks' worth of lines), with "é" (two
    // bytes) and "😀" (four) placed so that the boundaries fall inside them somewhere over 5 MiB.
    const rows = Array.from({ length: 600 }, (_, i) => ({
      i,
      text: `${"é".repeat((i * 7919) % 4001)}😀${"x".repeat((i * 104729) % 15013)}`,
    }));
    rows.splice(300, 0, { i: -1, text: "ü".repeat(400_000) }); // 800,000 bytes, so it straddles a boundary
    const path = file("chunks.jsonl", rows.map((r) => JSON.stringify(r)).join("\n"));
    expect(await readAll(path)).toEqual(rows.map((r, k) => [k + 1, r]));
  });

  it.each([
    ["a line that is not JSON", '{"a": 1}\n{"a": \n', 2, /^is not valid JSON \(.+\)$/],
    ["an array", "[1, 2]\n", 1, /^expected a JSON object but received array$/],
    ["a number", '{"a": 1}\n\n7\n', 3, /^expected a JSON object but received number$/],
    ["null", "null\n", 1, /^expected a JSON object but received null$/],
  ])("hands %s to the caller's error with its line", async (_what, text, line, problem) => {
    const path = file(`bad-${line}.jsonl`, text);
    const seen: [number, string][] = [];
    const run = async () => {
      for await (const _ of jsonLines(path, (l, p) => (seen.push([l, p]), new JsonlError(path, l, undefined, p))))
        void _;
    };
    await expect(run()).rejects.toBeInstanceOf(JsonlError);
    expect(seen).toHaveLength(1);
    expect(seen[0]![0]).toBe(line);
    expect(seen[0]![1]).toMatch(problem);
  });

  it("keeps the parser's error as the cause", async () => {
    const path = file("cause.jsonl", "{oops}\n");
    const err = (await readAll(path).catch((e: unknown) => e)) as JsonlError;
    expect(err.message).toMatch(new RegExp(`^${path}:1: is not valid JSON \\(`));
    expect(err.cause).toBeInstanceOf(SyntaxError);
  });

  it("reports a missing file as missing and a folder as unreadable", async () => {
    const missing = join(dir, "missing.jsonl");
    await expect(readAll(missing)).rejects.toMatchObject({
      constructor: FileError,
      message: `${missing}: does not exist`,
      exitCode: EXIT.data,
    });
    const folder = join(dir, "folder.jsonl");
    mkdirSync(folder);
    await expect(readAll(folder)).rejects.toMatchObject({
      constructor: FileError,
      message: `${folder}: cannot be read: it is a directory (EISDIR)`,
      exitCode: EXIT.data,
    });
  });
});
