import { mkdirSync, writeFileSync } from "node:fs";
import { join } from "node:path";

import { describe, expect, it } from "vitest";

import { mainForwardRows, readBank, summarizeBank } from "../../src/bank/bank.js";
import { ANCHOR_TEMPLATE, buildPrompt, PERTURBED_TEMPLATE } from "../../src/bank/prompt.js";
import { BankError, EXIT, FileError } from "../../src/errors.js";
import { tempDir } from "../helpers/tmp.js";

const dir = tempDir();

function row(over: Record<string, unknown> = {}): Record<string, unknown> {
  return {
    query_id: "query_00000001",
    fact_id: "fact_000602",
    condition_family: "anchor",
    query: "Which jurisdiction does Agriculture and Agri-Food Canada have legal force in?",
    relation: "applies_to_jurisdiction",
    language: "en",
    target_slot: "object",
    answer_type: "place",
    answer_granularity: "entity",
    answer_in_subject_surface: true,
    use_for_main_forward: true,
    use_for_reverse_analysis: false,
    use_for_recognition_analysis: false,
    answers: ["Canada"],
    ...over,
  };
}

function bank(name: string, lines: string[]): string {
  const path = join(dir, name);
  writeFileSync(path, lines.join("\n") + "\n");
  return path;
}

async function bankError(path: string): Promise<BankError> {
  try {
    await readBank(path);
  } catch (err) {
    expect(err).toBeInstanceOf(BankError);
    return err as BankError;
  }
  throw new Error("expected a BankError");
}

describe("query bank", () => {
  it("reads valid rows in order, with line numbers, skipping blank lines", async () => {
    const path = bank("good.jsonl", [
      JSON.stringify(row()),
      "",
      JSON.stringify(row({ query_id: "query_00000002", condition_family: "typo", use_for_main_forward: false })),
      JSON.stringify(row({ query_id: "query_00000003", condition_family: "typo", answers: undefined })),
    ]);
    const rows = await readBank(path);
    expect(rows.map((r) => [r.query_id, r.line])).toEqual([
      ["query_00000001", 1],
      ["query_00000002", 3],
      ["query_00000003", 4],
    ]);
    expect(rows[2]!.answers).toEqual([]);
    expect(mainForwardRows(rows).map((r) => r.query_id)).toEqual(["query_00000001", "query_00000003"]);
    expect(summarizeBank(rows)).toEqual({ rows: 3, mainForward: 2, facts: 1, families: { anchor: 1, typo: 1 } });
  });

  it.each([
    ["not JSON", ['{"query_id": '], 1, undefined, /^.+:1: is not valid JSON \(/],
    ["an array instead of an object", ["[1, 2]"], 1, undefined, /:1: expected a JSON object but received array$/],
    [
      "a missing query_id",
      [JSON.stringify(row({ query_id: undefined }))],
      1,
      "query_id",
      /:1: field "query_id": is missing$/,
    ],
    [
      "a numeric query_id",
      [JSON.stringify(row({ query_id: 7 }))],
      1,
      "query_id",
      /:1: field "query_id": expected a string but received number$/,
    ],
    ["an empty fact_id", [JSON.stringify(row({ fact_id: "" }))], 1, "fact_id", /field "fact_id": is empty$/],
    [
      "a duplicate query_id",
      [JSON.stringify(row()), JSON.stringify(row({ query_id: "query_00000002" })), JSON.stringify(row())],
      3,
      "query_id",
      /:3: field "query_id": duplicate "query_00000001" \(first on line 1\)$/,
    ],
    [
      "a string where a flag belongs",
      [JSON.stringify(row({ use_for_main_forward: "true" }))],
      1,
      "use_for_main_forward",
      /expected true or false but received "true"$/,
    ],
    [
      "a missing use_for_main_forward",
      [JSON.stringify(row({ use_for_main_forward: undefined }))],
      1,
      "use_for_main_forward",
      /is missing$/,
    ],
    [
      "a non-string alias",
      [JSON.stringify(row({ answers: ["Canada", 3] }))],
      1,
      "answers[1]",
      /field "answers\[1\]": expected a string but received number$/,
    ],
    [
      "answers that are not a list",
      [JSON.stringify(row({ answers: "Canada" }))],
      1,
      "answers",
      /expected an array of strings but received string$/,
    ],
    [
      "a null relation",
      [JSON.stringify(row({ relation: null }))],
      1,
      "relation",
      /expected a string but received null$/,
    ],
    // JSON.stringify writes a lone surrogate as its escape, as in a bank written by hand: "\ud800"
    [
      "a lone surrogate in the query",
      [JSON.stringify(row({ query: "Lone \ud800 surrogate" }))],
      1,
      "query",
      /:1: field "query": holds a lone surrogate U\+D800 at position 5 \(the JSON escape "\\ud800" without its pair\), which is not text and is never repaired; fix the escape$/,
    ],
    [
      "a lone low surrogate in an alias",
      [JSON.stringify(row()), JSON.stringify(row({ query_id: "q2", answers: ["Canada", "Can\udc00"] }))],
      2,
      "answers[1]",
      /:2: field "answers\[1\]": holds a lone surrogate U\+DC00 at position 3 /,
    ],
    [
      "a lone surrogate in an optional field",
      [JSON.stringify(row({ relation: "\ud83d" }))],
      1,
      "relation",
      /field "relation": holds a lone surrogate U\+D83D at position 0 /,
    ],
    [
      "a reversed surrogate pair in the query_id",
      [JSON.stringify(row({ query_id: "q\ude00\ud83d" }))],
      1,
      "query_id",
      /field "query_id": holds a lone surrogate U\+DE00 at position 1 /,
    ],
  ])("names the file, line and field for %s", async (_what, lines, line, field, message) => {
    const path = bank(`bad-${line}-${String(field)}-${Math.random().toString(36).slice(2)}.jsonl`, lines as string[]);
    const e = await bankError(path);
    expect(e.file).toBe(path);
    expect(e.line).toBe(line);
    expect(e.field).toBe(field);
    expect(e.message.startsWith(`${path}:${line}: `)).toBe(true);
    expect(e.message).toMatch(message as RegExp);
  });

  it("reads a surrogate pair written as JSON escapes as the character it encodes", async () => {
    const path = bank("pair.jsonl", [
      '{"query_id":"q","fact_id":"f","condition_family":"anchor","query":"Emoji \\ud83d\\ude00?","use_for_main_forward":true,"answers":["\\ud83d\\ude00"]}',
    ]);
    const [r] = await readBank(path);
    expect([r!.query, r!.answers]).toEqual(["Emoji 😀?", ["😀"]]);
  });

  it("reports an empty bank naming the file", async () => {
    const path = bank("empty.jsonl", [""]);
    const e = await bankError(path);
    expect([e.message, e.line, e.field, e.exitCode]).toEqual([`${path}: holds no queries`, 0, undefined, EXIT.data]);
  });

  it("reports a missing bank as missing and an unreadable one as unreadable, with the reason", async () => {
    const missing = join(dir, "nope.jsonl");
    await expect(readBank(missing)).rejects.toMatchObject({
      constructor: FileError,
      message: `${missing}: does not exist`,
      problem: "missing",
      code: "ENOENT",
      exitCode: EXIT.data,
    });
    const folder = join(dir, "a-folder.jsonl");
    mkdirSync(folder);
    await expect(readBank(folder)).rejects.toMatchObject({
      constructor: FileError,
      message: `${folder}: cannot be read: it is a directory (EISDIR)`,
      problem: "unreadable",
      code: "EISDIR",
      exitCode: EXIT.data,
    });
  });
});

describe("prompts", () => {
  it("wraps anchors in the instruction and cues every other family, exactly as build_prompt", () => {
    expect(
      buildPrompt({
        condition_family: "anchor",
        query: "Which jurisdiction does Agriculture and Agri-Food Canada have legal force in?",
      }),
    ).toBe(
      "Question: Which jurisdiction does Agriculture and Agri-Food Canada have legal force in?\nAnswer with only the shortest correct answer.\nAnswer:",
    );
    expect(
      buildPrompt({ condition_family: "paraphrase", query: "In which jurisdiction is AAFC legally in force?" }),
    ).toBe("In which jurisdiction is AAFC legally in force?\nAnswer:");
  });

  it("builds every prompt from the two published templates", () => {
    expect(ANCHOR_TEMPLATE).toBe("Question: {query}\nAnswer with only the shortest correct answer.\nAnswer:");
    expect(PERTURBED_TEMPLATE).toBe("{query}\nAnswer:");
    for (const [family, template] of [
      ["anchor", ANCHOR_TEMPLATE],
      ["distractor", PERTURBED_TEMPLATE],
    ] as const) {
      expect(buildPrompt({ condition_family: family, query: "Q?" })).toBe(template.split("{query}").join("Q?"));
    }
  });

  it("keeps the query verbatim: no template syntax inside it is interpreted", () => {
    const q = "What does $& or {q} or {query} mean?  ";
    expect(buildPrompt({ condition_family: "anchor", query: q })).toBe(
      `Question: ${q}\nAnswer with only the shortest correct answer.\nAnswer:`,
    );
    expect(buildPrompt({ condition_family: "typo", query: q })).toBe(`${q}\nAnswer:`);
  });
});
