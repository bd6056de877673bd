/**
 * KTS's labels from a scored file (src/metrics/labels.ts) against a reference
 * that parses every line with JSON.parse: the same labels on seeded random
 * files (ids in and out of the store, every label, escaped and non-ASCII ids,
 * blank lines, CRLF, members in any order), and the same errors, word for word,
 * on the same lines. The native core joins plain lines to rows itself
 * (native/json_scan.h's ScanJsonlJoin); the join is also held to JSON.parse line
 * by line.
 */
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";

import { afterAll, describe, expect, it } from "vitest";

import { nativeJsonlJoin } from "../../src/kernels/native.js";
import { NO_LABEL, readLabels } from "../../src/metrics/labels.js";
import { LABELS } from "../../src/score/labels.js";
import { Rng } from "../../src/util/random.js";

const dir = mkdtempSync(join(tmpdir(), "hsm-labels-"));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

let files = 0;
function scoredFile(lines: string[]): string {
  const file = join(dir, `scored-${files++}.jsonl`);
  writeFileSync(file, lines.join("\n"));
  return file;
}

/** What readLabels must give: every non-blank line parsed whole, the labels joined on query_id. */
function reference(lines: string[], ids: readonly string[], abstainAsIncorrect: boolean): Uint8Array {
  const row = new Map(ids.map((q, i) => [q, i]));
  const y = new Uint8Array(ids.length).fill(NO_LABEL);
  for (const text of lines) {
    if (!text.trim()) continue;
    const { query_id: q, label } = JSON.parse(text) as { query_id: string; label: string };
    const i = row.get(q);
    if (i === undefined) continue;
    y[i] =
      label === "correct" ? 1 : label === "incorrect" || (label === "abstain" && abstainAsIncorrect) ? 0 : NO_LABEL;
  }
  return y;
}

/** A store's ids and a scored file over them (seeded): every id once, in shuffled order, with other rows between. */
function randomCase(seed: number, ids: string[]): string[] {
  const rng = new Rng(seed);
  const order = ids.map((q) => ({ q, at: rng.uniform() })).sort((a, b) => a.at - b.at);
  const lines: string[] = [];
  for (const { q } of order) {
    const label = LABELS[rng.int(LABELS.length)]!;
    const extra = { model: "m", raw_response: rng.int(3) ? " Paris\nmore" : 'a "quoted" answer', flags: [] };
    const record = rng.int(2) ? { query_id: q, ...extra, label } : { label, ...extra, query_id: q };
    let text = JSON.stringify(record);
    if (rng.int(10) === 0) text = text.replace('"query_id":', '"query_id" : '); // still plain
    if (rng.int(10) === 0) text = text.replace(/"query_id":"q/, '"query_id":"\\u0071'); // an escape: parsed whole
    if (rng.int(8) === 0) text += "\r";
    lines.push(text);
    if (rng.int(6) === 0) lines.push(JSON.stringify({ query_id: `outside-${rng.int(1000)}`, label: "correct" }));
    if (rng.int(12) === 0) lines.push(rng.int(2) ? "" : "  \t");
  }
  return lines;
}

describe("readLabels", () => {
  it.each([
    ["ASCII ids", (i: number) => `q${String(i).padStart(6, "0")}`],
    ["non-ASCII ids", (i: number) => `q-é-${i}-事実`],
  ])("joins labels as JSON.parse reads them (%s)", async (_name, id) => {
    const ids = Array.from({ length: 3000 }, (_, i) => id(i));
    for (const seed of [1, 2]) {
      const lines = randomCase(seed, ids);
      const file = scoredFile(lines);
      for (const abstainAsIncorrect of [false, true]) {
        expect(await readLabels(file, ids, { abstainAsIncorrect })).toEqual(reference(lines, ids, abstainAsIncorrect));
      }
    }
  });

  it.each([
    [[""], ['{"query_id":"","label":"correct"}'], [1]],
    [[], ['{"query_id":"","label":"correct"}'], []],
    [
      ["", "q1"],
      ['{"query_id":"q1","label":"incorrect"}', '{"query_id":"","label":"correct"}'],
      [1, 0],
    ],
  ])("joins an empty id as any other (store ids %j)", async (ids, lines, want) => {
    expect([...(await readLabels(scoredFile(lines), ids))]).toEqual(want);
  });

  it("reads ids the native join cannot take (a line break, a lone surrogate) as JSON.parse does", async () => {
    const ids = ["q0", "line\nbreak", "lone\ud800", "q3"];
    const lines = [
      JSON.stringify({ query_id: "line\nbreak", label: "correct" }),
      JSON.stringify({ query_id: "lone\ufffd", label: "correct" }), // not the store's lone surrogate
      JSON.stringify({ query_id: "q3", label: "incorrect" }),
      JSON.stringify({ query_id: "q0", label: "abstain" }),
    ];
    const y = await readLabels(scoredFile(lines), ids, { allowMissingLabels: true });
    expect([...y]).toEqual([NO_LABEL, 1, NO_LABEL, 0]);
  });

  it.each([
    [
      "a query scored twice, plain both times",
      ['{"query_id":"q1","label":"correct"}', "", '{"label":"incorrect","query_id":"q1"}'],
      ':3: field "query_id": "q1" is scored twice',
    ],
    [
      "a query scored twice, escaped the second time",
      ['{"query_id":"q1","label":"correct"}', '{"query_id":"\\u00711","label":"correct"}'],
      ':2: field "query_id": "q1" is scored twice',
    ],
    [
      "a label outside the five",
      ['{"query_id":"q0","label":"correct"}', '{"query_id":"q1","label":"maybe"}'],
      ':2: field "label": "maybe" is not one of correct, incorrect, ambiguous, abstain, unparseable',
    ],
    ["no label", ['{"query_id":"q1"}'], ':1: field "label": undefined is not one of'],
    ["a query id that is no string", ['{"query_id":7,"label":"correct"}'], ':1: field "query_id": expected a string'],
    ["a line that is not JSON", ['{"query_id":"q1","label":"correct"}', '{"query_id":'], ":2: is not valid JSON"],
  ])("stops on %s, naming the line", async (_name, lines, message) => {
    const file = scoredFile(lines);
    await expect(readLabels(file, ["q0", "q1"], { allowMissingLabels: true })).rejects.toThrow(`${file}${message}`);
  });
});

describe.skipIf(!nativeJsonlJoin)("the native join of JSON lines", () => {
  it("joins a plain line's id and value, and leaves every other line to the caller", () => {
    const ids = ["a", "b", "é", "b"]; // "b" twice: its last row
    const lines = [
      '{"query_id":"b","label":"incorrect"}',
      "",
      '{"label":"correct","x":[1,{"query_id":"a"}],"query_id":"é"}',
      '{"query_id":"zz","label":"correct"}',
      '{"query_id":"a","label":"maybe"}',
      '{"query_id":"\\u0061","label":"correct"}',
      '{"query_id":"a"}',
      '{"query_id":"a","label":"correct"',
    ];
    const bytes = Buffer.from(lines.join("\n"));
    const found = nativeJsonlJoin!.join(bytes, ["query_id", "label"], nativeJsonlJoin!.rows(ids), LABELS);
    const entries = Array.from({ length: found.length / 8 }, (_, e) => [...found.subarray(e * 8, e * 8 + 8)]);
    // [line, verdict, row, value] of each line that is not blank; the id's span where plain.
    expect(entries.map(([line, , , verdict, row, value]) => [line, verdict, row, value])).toEqual([
      [0, 0, 3, 1],
      [2, 0, 2, 0],
      [3, 0, -1, 0],
      [4, 1, -1, -1],
      [5, 1, -1, -1],
      [6, 1, -1, -1],
      [7, 1, -1, -1],
    ]);
    const [, , , , , , idStart, idEnd] = entries[1]!;
    expect(bytes.toString("utf8", idStart, idEnd)).toBe("é");
  });
});
