/**
 * The one JSONL reader: objects with their line numbers; bad lines and bad files named exactly. jsonlFields,
 * which takes a few members of each record (cut out by the native scan where it can), gives what jsonLines gives.
 */
import { mkdirSync, writeFileSync } from "node:fs";
import { join } from "node:path";

import { describe, expect, it } from "vitest";

import { EXIT, FileError, JsonlError } from "../../src/errors.js";
import { nativeJsonlScan } from "../../src/kernels/native.js";
import { JSONL_LINE_MAX_BYTES, jsonlFields, jsonLines, type JsonlScan } from "../../src/util/jsonl.js";
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

/** What jsonlFields hands over, or the error it stops with (message and the lines taken before it). */
async function fieldsOf(path: string, scan?: JsonlScan): Promise<{ taken: [number, unknown[]][]; error?: string }> {
  const taken: [number, unknown[]][] = [];
  try {
    await jsonlFields(
      path,
      ["query_id", "label", "toString"],
      (l, problem, cause) => new JsonlError(path, l, undefined, problem, { cause }),
      (fields, line) => taken.push([line, fields]),
      scan,
    );
  } catch (err) {
    return { taken, error: (err as Error).message };
  }
  return { taken };
}

/** The same from jsonLines, the reference: each record's own members, or the error and the records before it. */
async function recordsOf(path: string): Promise<{ taken: [number, unknown[]][]; error?: string }> {
  const taken: [number, unknown[]][] = [];
  try {
    for await (const { value: v, line } of jsonLines(
      path,
      (l, problem, cause) => new JsonlError(path, l, undefined, problem, { cause }),
    ))
      taken.push([line, ["query_id", "label", "toString"].map((k) => (Object.hasOwn(v, k) ? v[k] : undefined))]);
  } catch (err) {
    return { taken, error: (err as Error).message };
  }
  return { taken };
}

describe("jsonlFields", () => {
  const scans: [string, JsonlScan | undefined][] = [["without the native scan", undefined]];
  if (nativeJsonlScan) scans.push(["with the native scan", nativeJsonlScan]);

  const good = [
    '{"query_id":"q1","label":"correct","answer":{"label":"nested"}}',
    "",
    '  {"label" : "abstain", "query_id" : "é😀"}  \r',
    '{"query_id":"q\\u0033","label":"a\\"b"}', // escapes: parsed by JSON.parse
    '{"query\\u005fid":"spelled","label":7}', // an escaped key, a number
    '{"label":"first","label":"last"}',
    "\u00a0\u00a0", // blank to String.trim, not to JSON
    '{"toString":"own"}',
    '{"x":[1,2,{"query_id":"inner"}]}',
    '{"query_id":null,"label":["x"]}',
  ];

  describe.each(scans)("%s", (_name, scan) => {
    it("hands over each record's members as jsonLines reads them, across chunks", async () => {
      // Repeated past several 1 MiB reads, so that lines straddle them.
      const lines = Array.from({ length: 40_000 }, (_, i) => good[i % good.length]!);
      const path = file(`fields-${scan ? "scan" : "js"}.jsonl`, lines.join("\n"));
      const got = await fieldsOf(path, scan);
      expect(got.error).toBeUndefined();
      expect(got).toEqual(await recordsOf(path));
      expect(got.taken[0]).toEqual([1, ["q1", "correct", undefined]]);
      expect(got.taken.find(([, f]) => f[2] !== undefined)).toEqual([8, [undefined, undefined, "own"]]);
    });

    it.each([
      ["a line that is not JSON", `${good[0]}\n{"query_id": \n${good[0]}`],
      ["an array", `${good[0]}\n[1]`],
      ["a byte-order mark", `\uFEFF${good[0]}`],
      ["a blank line too long", `${good[0]}\n${" ".repeat(JSONL_LINE_MAX_BYTES + 1)}\n${good[0]}`],
      ["a record too long", `${good[0]}\n{"a":"${"x".repeat(JSONL_LINE_MAX_BYTES)}"}`],
    ])("stops at %s as jsonLines does, after the lines before it", async (what, text) => {
      const path = file(`bad-fields-${what.replace(/ /g, "-")}-${scan ? "scan" : "js"}.jsonl`, text);
      const got = await fieldsOf(path, scan);
      expect(got.error).toBeDefined();
      expect(got).toEqual(await recordsOf(path));
    });

    // The longest record, its "\r" the last byte of a read (the line before it ends one byte short of the first
    // read), then its "\n" in the next read: a "\r\n" line end is no longer a line than "\n".
    it.each(["\n", "\r\n"])("reads the longest record that ends in %j, and refuses one byte more", async (end) => {
      const record = (key: string, bytes: number) => `{"${key}":"${"x".repeat(bytes - key.length - 7)}"}`;
      const text = (longest: number) =>
        [record("label", JSONL_LINE_MAX_BYTES - 1 - end.length), record("query_id", longest), '{"label":"c"}'].join(
          end,
        );
      const name = `longest-${end.length}-${scan ? "scan" : "js"}`;
      const fits = await fieldsOf(file(`${name}.jsonl`, text(JSONL_LINE_MAX_BYTES)), scan);
      expect(fits.error).toBeUndefined();
      expect(fits.taken.map(([line, fields]) => [line, (fields[0] as string | undefined)?.length])).toEqual([
        [1, undefined],
        [2, JSONL_LINE_MAX_BYTES - 15],
        [3, undefined],
      ]);
      const over = await fieldsOf(file(`${name}-over.jsonl`, text(JSONL_LINE_MAX_BYTES + 1)), scan);
      expect(over.error).toMatch(/:2: is longer than 1048576 bytes/);
      expect(await recordsOf(join(dir, `${name}.jsonl`))).toEqual(fits);
    });

    it("stops at a byte that is not UTF-8 as jsonLines does", async () => {
      const path = join(dir, `bad-utf8-${scan ? "scan" : "js"}.jsonl`);
      writeFileSync(
        path,
        Buffer.concat([Buffer.from(`${good[0]}\n{"label":"`), Buffer.from([0xff]), Buffer.from('"}\n')]),
      );
      const got = await fieldsOf(path, scan);
      expect(got.error).toMatch(/:2: is not valid UTF-8: byte 0xff at offset \d+ of the file$/);
      expect(got).toEqual(await recordsOf(path));
    });
  });
});
