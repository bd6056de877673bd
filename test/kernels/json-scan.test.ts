/**
 * The native JSON scans (native/json_scan.h) against JSON.parse, the parser
 * they stand in for.
 *
 * - JSON lines: a line the scan calls plain must be a JSON object that
 *   JSON.parse reads, with exactly the wanted members it cut out; a valid line
 *   whose wanted members are strings without escapes must be called plain (else
 *   the scan would be correct but useless).
 * - One document's per-row arrays: where the scan vouches for a document, it is
 *   an object JSON.parse reads, and each array found is the member's value,
 *   written as JSON.stringify writes it, with its count and order; a document
 *   written plainly must be vouched for.
 *
 * Checked on hand-picked texts and on seeded random ones, most of them broken
 * one byte at a time.
 */
import { describe, expect, it } from "vitest";

import {
  nativeJsonlScan,
  nativeJsonRowArrays,
  nativeSimdLevel,
  nativeSimdLevels,
  setNativeSimd,
} from "../../src/kernels/native.js";

const KEYS = ["query_id", "label"];
const STRIDE = 4 + 2 * KEYS.length;

interface Verdict {
  plain: boolean;
  fields?: (string | undefined)[];
}

/**
 * The scan's verdict on each line of `lines` (undefined for a blank line), from one call over all of them; the
 * scan's entries the same at every SIMD level of this CPU (strings are skipped 32 bytes at a time from avx2 up).
 */
function scanLines(lines: string[]): (Verdict | undefined)[] {
  const bytes = Buffer.from(lines.join("\n"));
  const found = nativeJsonlScan!(bytes, KEYS);
  const before = nativeSimdLevel()!;
  try {
    for (const level of nativeSimdLevels) {
      setNativeSimd(level);
      expect(nativeJsonlScan!(bytes, KEYS), level).toEqual(found);
    }
  } finally {
    setNativeSimd(before);
  }
  const out: (Verdict | undefined)[] = lines.map(() => undefined);
  for (let at = 0; at < found.length; at += STRIDE) {
    const plain = found[at + 3] === 0;
    out[found[at]!] = {
      plain,
      fields: plain
        ? KEYS.map((_, k) =>
            found[at + 4 + 2 * k]! < 0
              ? undefined
              : bytes.toString("utf8", found[at + 4 + 2 * k], found[at + 5 + 2 * k]),
          )
        : undefined,
    };
  }
  return out;
}

/** What JSON.parse makes of a line: the wanted members of an object, or why the scan must not call it plain. */
function reference(line: string): { object: boolean; fields?: unknown[] } {
  let value: unknown;
  try {
    value = JSON.parse(line);
  } catch {
    return { object: false };
  }
  if (typeof value !== "object" || value === null || Array.isArray(value)) return { object: false };
  const v = value as Record<string, unknown>;
  return { object: true, fields: KEYS.map((k) => (Object.hasOwn(v, k) ? v[k] : undefined)) };
}

/** Whether the scan must call a line plain: an object whose wanted members are escape-free strings (or absent). */
function mustBePlain(line: string): boolean {
  const r = reference(line);
  return r.object && !line.includes("\\") && r.fields!.every((f) => f === undefined || typeof f === "string");
}

function expectAgrees(line: string, verdict: Verdict | undefined): void {
  const blank = /^[ \t\r]*$/.test(line);
  expect(verdict === undefined, JSON.stringify(line)).toBe(blank);
  if (blank) return;
  const r = reference(line);
  if (verdict!.plain) {
    expect(r.object, JSON.stringify(line)).toBe(true);
    expect(verdict!.fields, JSON.stringify(line)).toEqual(r.fields);
  } else {
    expect(mustBePlain(line), JSON.stringify(line)).toBe(false);
  }
}

describe.skipIf(!nativeJsonlScan)("the native JSON lines scan", () => {
  it.each([
    ['{"query_id":"q1","label":"correct"}', true, ["q1", "correct"]],
    ['  {"x": [1, {"label": "inner"}], "label" : "abstain" }\r', true, [undefined, "abstain"]],
    ['{"label":"a","label":"b"}', true, [undefined, "b"]], // the last member wins, as in JSON.parse
    ['{"query_id":"é😀 \\u0041"}', false, undefined], // an escape: left to JSON.parse
    ['{"query\\u005fid":"q"}', false, undefined], // a key that spells query_id with an escape
    ['{"query_id":7}', false, undefined], // not a string: the caller names the problem
    ['{"a":-0.5e+10,"b":[true,false,null,{}],"c":{"d":[]}}', true, [undefined, undefined]],
    ["{}", true, [undefined, undefined]],
    ['{"a":01}', false, undefined],
    ['{"a":1.}', false, undefined],
    ['{"a":.5}', false, undefined],
    ['{"a":-}', false, undefined],
    ['{"a":1,}', false, undefined],
    ['{"a" 1}', false, undefined],
    ['{"a":"tab\there"}', false, undefined], // a raw control character in a string
    ['{"a":tru}', false, undefined],
    ['{"a":"\\/\\b\\f\\n\\r\\t\\"\\\\ \\u00e9"}', true, [undefined, undefined]], // every escape, elsewhere
    ['{"a":"\\x41"}', false, undefined],
    ['{"a":"\\u12G4"}', false, undefined],
    ['{"a":"\\"}', false, undefined],
    ['{"a":1}x', false, undefined],
    ['{"a":[1 2]}', false, undefined],
    ["[1]", false, undefined],
    ['"text"', false, undefined],
    ["\uFEFF{}", false, undefined], // a byte-order mark: the caller names it
    ["\u00A0{}", false, undefined], // no-break space is not JSON's whitespace
  ])("%j: plain %s", (line, plain, fields) => {
    const [verdict] = scanLines([line]);
    expect(verdict?.plain).toBe(plain);
    if (plain) expect(verdict!.fields).toEqual(fields);
    expectAgrees(line, verdict);
  });

  it("skips blank lines but counts them, and reports where each line starts and ends", () => {
    const lines = ["", " \t\r", '{"label":"x"}', "", '{"query_id":"y"}'];
    const bytes = Buffer.from(lines.join("\n"));
    const found = Array.from(nativeJsonlScan!(bytes, KEYS));
    expect(found).toEqual([2, 5, 18, 0, -1, -1, 15, 16, 4, 20, 36, 0, 33, 34, -1, -1]);
  });

  it("scans a line nested a hundred thousand deep without recursion", () => {
    const deep = `{"label":"x","n":${"[".repeat(100_000)}${"]".repeat(100_000)}}`;
    const [verdict] = scanLines([deep]);
    expect(verdict).toEqual({ plain: true, fields: [undefined, "x"] });
    expect(scanLines([deep.slice(0, -2) + "}"])[0]!.plain).toBe(false);
  });

  it("agrees with JSON.parse on 60,000 random lines, most of them broken", () => {
    let seed = 20261205;
    const random = () => (seed = (Math.imul(seed, 1103515245) + 12345) >>> 0) / 2 ** 32;
    const pick = <T>(a: readonly T[]): T => a[Math.floor(random() * a.length)]!;
    const long = "a long answer that runs on past one block of 32 bytes, ".repeat(3);
    const strings = ["", "a", "query_1", "é😀", "tab\there", 'q"uote', "back\\slash", "\u0001", "\ud800", "/", long];
    const value = (depth: number): unknown => {
      const r = random();
      if (depth > 3 || r < 0.5) return pick([0, -3, 12.25, 1.5e300, 1e-7, true, false, null, ...strings]);
      if (r < 0.75) return Array.from({ length: Math.floor(random() * 4) }, () => value(depth + 1));
      const o: Record<string, unknown> = {};
      for (let i = Math.floor(random() * 4); i--;) o[pick(["query_id", "label", "x", "é"])] = value(depth + 1);
      return o;
    };
    const line = (): string => {
      const o: Record<string, unknown> = {};
      for (let i = Math.floor(random() * 6); i--;)
        o[pick(["query_id", "label", "x", "answer"])] = random() < 0.7 ? pick(strings) : value(0);
      let t = JSON.stringify(o, null, random() < 0.2 ? "\t" : undefined).replace(/\n/g, pick([" ", "\r", ""]));
      if (random() < 0.2) t = t.replace(/:/g, " : ");
      if (random() < 0.1) t = t.replace(/"query_id"/, '"query\\u005fid"');
      const edit = random();
      const c = pick([
        "{",
        "}",
        "[",
        "]",
        ",",
        ":",
        '"',
        "\\",
        "0",
        "-",
        ".",
        "e",
        "t",
        " ",
        "\r",
        "\u0001",
        "\u001f",
        "u",
      ]);
      const i = Math.floor(random() * (t.length + 1));
      if (edit < 0.3) t = t.slice(0, i) + c + t.slice(i);
      else if (edit < 0.5) t = t.slice(0, i) + t.slice(i + 1);
      else if (edit < 0.6) t = t.slice(0, i) + c + t.slice(i + 1);
      // As read from a file: a surrogate the edits split in two is stored as U+FFFD.
      return Buffer.from(t).toString();
    };
    let plain = 0;
    for (let round = 0; round < 60; round++) {
      const lines = Array.from({ length: 1000 }, line);
      scanLines(lines).forEach((verdict, i) => {
        expectAgrees(lines[i]!, verdict);
        if (verdict?.plain) plain++;
      });
    }
    // Both kinds were met in numbers.
    expect(plain).toBeGreaterThan(10_000);
    expect(plain).toBeLessThan(50_000);
  });
});

const LISTS = ["ids", "facts"];

/** What the document scan found of each wanted array: [text, count, distinct], or null (absent); null: deferred. */
function scanDocument(text: string): ([string, number, boolean] | null)[] | null {
  const bytes = Buffer.from(text);
  const found = nativeJsonRowArrays!(bytes, LISTS);
  if (!found) return null;
  return LISTS.map((_, k) =>
    found[4 * k]! < 0
      ? null
      : [bytes.toString("utf8", found[4 * k], found[4 * k + 1]), found[4 * k + 2]!, found[4 * k + 3] === 1],
  );
}

/** Checks what the scan vouched for against JSON.parse. */
function expectDocumentAgrees(text: string, got: ([string, number, boolean] | null)[]): void {
  const value = JSON.parse(text) as Record<string, unknown>;
  expect(typeof value === "object" && value !== null && !Array.isArray(value), text).toBe(true);
  LISTS.forEach((key, k) => {
    if (got[k] === null) return expect(Object.hasOwn(value, key), text).toBe(false);
    const list = value[key] as unknown[];
    expect(Array.isArray(list) && list.every((s) => typeof s === "string"), text).toBe(true);
    expect(got[k], text).toEqual([JSON.stringify(list), list.length, new Set(list).size === list.length]);
  });
}

describe.skipIf(!nativeJsonRowArrays)("the native scan of a document's per-row arrays", () => {
  it.each([
    [
      '{"ids":["a","b"],\n "facts": [],\n "x":{"ids":1}}',
      [
        ['["a","b"]', 2, true],
        ["[]", 0, true],
      ],
    ],
    ['{\n  "ids":["b","a"]\n}\n', [['["b","a"]', 2, true], null]],
    ['{"ids":["a","a"]}', [['["a","a"]', 2, false], null]],
    ['{"ids":["b","c","a","c"]}', [['["b","c","a","c"]', 4, false], null]], // a repeat out of order
    ['{"ids":["b","a","ba","ab"]}', [['["b","a","ba","ab"]', 4, true], null]],
    ['{"ids":["a","ab","b"]}', [['["a","ab","b"]', 3, true], null]],
    ['{"x":[{"ids":["a"]}]}', [null, null]], // only the document's own members count
    ['{"ids":["a", "b"]}', null], // whitespace inside: not the array's canonical text
    ['{"ids":[ "a"]}', null],
    ['{"ids":["a"\n]}', null],
    ['{"ids":["a\\"b"]}', null], // an escape
    ['{"ids":["é"]}', null], // beyond ASCII
    ['{"ids":["\\u0041"]}', null],
    ['{"ids":["a",1]}', null], // not all strings
    ['{"ids":"a"}', null],
    ['{"ids":["a"],"ids":["b"]}', null], // twice: JSON.parse keeps the last
    ['{"i\\u0064s":["a"]}', null], // a key that spells ids with an escape
    ['{"ids":["a"]', null],
    ['{"ids":["a"],}', null],
    ['{"ids":["a",]}', null],
    ['["a"]', null],
    ["\uFEFF{}", null],
  ])("%j", (text, want) => {
    const got = scanDocument(text);
    expect(got).toEqual(want);
    if (got) expectDocumentAgrees(text, got);
  });

  it("agrees with JSON.parse on 20,000 random documents, most of them broken", () => {
    let seed = 20261206;
    const random = () => (seed = (Math.imul(seed, 1103515245) + 12345) >>> 0) / 2 ** 32;
    const pick = <T>(a: readonly T[]): T => a[Math.floor(random() * a.length)]!;
    const ids = ["q1", "q2", "q10", "a", "", "Z~ !", "é", 'q"', "q\\", "\u0001"];
    let vouched = 0;
    for (let round = 0; round < 20_000; round++) {
      const doc: Record<string, unknown> = {};
      for (let i = Math.floor(random() * 5); i--;) {
        const key = pick([...LISTS, "x", "rows"]);
        doc[key] =
          random() < 0.8
            ? Array.from({ length: Math.floor(random() * 5) }, () => pick(ids))
            : pick([7, "ids", null, { ids: ["q1"] }, ["q1", 2]]);
      }
      const lists = LISTS.filter((k) => Object.hasOwn(doc, k)).map((k) => doc[k]);
      const plainLists = lists.every(
        (l) =>
          Array.isArray(l) && l.every((s) => typeof s === "string" && /^[\x20-\x7e]*$/.test(s) && !/["\\]/.test(s)),
      );
      // One member per line, as hsm writes a manifest, or other whitespace.
      let text =
        random() < 0.5
          ? `{\n${Object.entries(doc)
              .map(([k, v]) => `  ${JSON.stringify(k)}: ${JSON.stringify(v)}`)
              .join(",\n")}\n}\n`
          : JSON.stringify(doc, null, pick([undefined, "\t", 1]));
      const indented = !text.startsWith("{\n  ") && /\n/.test(text) && lists.some((l) => Array.isArray(l) && l.length);
      const edit = random();
      const c = pick(["{", "}", "[", "]", ",", ":", '"', "\\", " ", "\n", "0", "u"]);
      const i = Math.floor(random() * (text.length + 1));
      if (edit < 0.25) text = text.slice(0, i) + c + text.slice(i);
      else if (edit < 0.4) text = text.slice(0, i) + text.slice(i + 1);
      else if (edit < 0.5) text = text.slice(0, i) + c + text.slice(i + 1);
      text = Buffer.from(text).toString(); // as read from a file
      const got = scanDocument(text);
      if (got) {
        vouched++;
        expectDocumentAgrees(text, got);
      } else if (edit >= 0.5 && plainLists && !indented) {
        throw new Error(`a plain document was not vouched for: ${JSON.stringify(text)}`);
      }
    }
    expect(vouched).toBeGreaterThan(5_000);
    expect(vouched).toBeLessThan(18_000);
  });

  it("finds hsm's own per-row lists in a manifest as the writer lays it out, in order or not", () => {
    const ids = Array.from({ length: 1000 }, (_, i) => `query_${i + 1}`); // not zero-padded: out of byte order
    const facts = ids.map((_, i) => `fact_${Math.floor(i / 4)}`); // four rows a fact
    const layout = (a: string[], b: string[]) =>
      `{\n  "format": "hidden-states/1",\n  "ids": ${JSON.stringify(a)},\n  "facts": ${JSON.stringify(b)}\n}\n`;
    expect(scanDocument(layout(ids, facts))).toEqual([
      [JSON.stringify(ids), 1000, true],
      [JSON.stringify(facts), 1000, false],
    ]);
    const repeated = ids.map((id, i) => (i === 700 ? ids[3]! : id));
    expect(scanDocument(layout(repeated, [...ids].sort()))).toEqual([
      [JSON.stringify(repeated), 1000, false],
      [JSON.stringify([...ids].sort()), 1000, true],
    ]);
  });
});
