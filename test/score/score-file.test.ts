import { existsSync, readdirSync, readFileSync, symlinkSync, writeFileSync } from "node:fs";
import { join } from "node:path";

import { describe, expect, it } from "vitest";

import { UNNAMED } from "../../src/defaults.js";
import { EXIT, FileError, GenerationsError, UsageError } from "../../src/errors.js";
import { readGenerations, scoreFile } from "../../src/score/score-file.js";
import { tempDir } from "../helpers/tmp.js";

const dir = tempDir("hsm-gens-");

describe("generations file", () => {
  it.each([
    [
      "a duplicate query_id",
      ['{"query_id": "q1", "raw_response": " a"}', '{"query_id": "q1", "raw_response": " b"}'],
      /gens\.jsonl:2: field "query_id": duplicate "q1" \(first on line 1\)$/,
    ],
    [
      "a missing raw_response",
      ['{"query_id": "q1"}'],
      /gens\.jsonl:1: field "raw_response": is missing or not a string$/,
    ],
    [
      "a model that is not a string",
      ['{"query_id": "q1", "raw_response": " a", "model": {"name": "x"}}'],
      /gens\.jsonl:1: field "model": expected a string but received \{"name":"x"\}$/,
    ],
    [
      "a model name of white space",
      ['{"query_id": "q1", "raw_response": " a", "model": " "}'],
      /gens\.jsonl:1: field "model": expected a model name with a visible character but received " "$/,
    ],
    [
      "a model name with a control character",
      ['{"query_id": "q1", "raw_response": " a", "model": "a\\u0007b"}'],
      /gens\.jsonl:1: field "model": expected a model name without control characters but received "a\\u0007b"$/,
    ],
    ["a line that is not JSON", ['{"query_id": '], /gens\.jsonl:1: is not valid JSON/],
    ["an array line", ["[1]"], /gens\.jsonl:1: expected a JSON object but received array$/],
    [
      "a query whose generation failed",
      ['{"query_id": "q1", "error": "onnxruntime: invalid dimensions"}'],
      /gens\.jsonl:1: field "error": generation failed for this query \(onnxruntime: invalid dimensions\); run hsm generate again with the same --out to retry it$/,
    ],
    [
      "a lone surrogate in raw_response",
      ['{"query_id": "q1", "raw_response": " a"}', '{"query_id": "q2", "raw_response": " Par\\ud800is"}'],
      /gens\.jsonl:2: field "raw_response": holds a lone surrogate U\+D800 at position 4 \(the JSON escape "\\ud800" without its pair\), which is not text and is never repaired; fix the escape$/,
    ],
    [
      "a lone surrogate in model",
      ['{"query_id": "q1", "raw_response": " a", "model": "m\\udfff"}'],
      /gens\.jsonl:1: field "model": holds a lone surrogate U\+DFFF at position 1 /,
    ],
  ])("names the line of %s", async (_what, lines, message) => {
    const file = join(dir, "gens.jsonl");
    writeFileSync(file, lines.join("\n") + "\n");
    await expect(readGenerations(file)).rejects.toThrow(message);
  });

  it("reads good lines, blank lines skipped", async () => {
    const file = join(dir, "ok.jsonl");
    writeFileSync(
      file,
      '{"query_id": "q1", "raw_response": " a", "finish_reason": "eos"}\n\n{"query_id": "q2", "raw_response": ""}\n',
    );
    const g = await readGenerations(file);
    expect([...g.keys()]).toEqual(["q1", "q2"]);
    expect(g.get("q2")!.line).toBe(3);
  });
});

describe("scoreFile", () => {
  const bankLines = [
    {
      query_id: "q1",
      fact_id: "f1",
      condition_family: "anchor",
      query: "Capital of France?",
      use_for_main_forward: true,
      answers: ["Paris"],
    },
    {
      query_id: "q2",
      fact_id: "f1",
      condition_family: "typo",
      query: "Captial of France?",
      use_for_main_forward: true,
      answers: ["Paris"],
    },
  ].map((r) => JSON.stringify(r));

  function setup(name: string, gens: object[]): { bank: string; generations: string; out: string } {
    const bank = join(dir, `${name}.bank.jsonl`);
    const generations = join(dir, `${name}.gens.jsonl`);
    writeFileSync(bank, bankLines.join("\n") + "\n");
    writeFileSync(generations, gens.map((g) => JSON.stringify(g)).join("\n") + "\n");
    return { bank, generations, out: join(dir, `${name}.scored.jsonl`) };
  }

  it("writes one row per generation in bank order, the model named by the generation, else by the caller, else unknown", async () => {
    const o = setup("order", [
      { query_id: "q2", raw_response: " Lyon" },
      { query_id: "q1", raw_response: " Paris", model: "m-gen" },
    ]);
    const s = await scoreFile(o);
    expect(s).toEqual({ rows: 2, labels: { correct: 1, incorrect: 1 }, missing: 0, unknown: 0, needsReview: 0 });
    const rows = readFileSync(o.out, "utf8")
      .trim()
      .split("\n")
      .map((l) => JSON.parse(l));
    expect(rows.map((r) => [r.query_id, r.model, r.label])).toEqual([
      ["q1", "m-gen", "correct"],
      ["q2", UNNAMED, "incorrect"],
    ]);
    expect(UNNAMED).toBe("unknown");
    await scoreFile({ ...o, model: "m-cli" });
    expect(
      readFileSync(o.out, "utf8")
        .trim()
        .split("\n")
        .map((l) => JSON.parse(l).model),
    ).toEqual(["m-gen", "m-cli"]);
    expect(readdirSync(dir).filter((n) => n.includes(".tmp"))).toEqual([]);
  });

  it("refuses an --out that is its --generations or its --bank, a link to one included, leaving both as they were", async () => {
    const o = setup("same-path", [
      { query_id: "q1", raw_response: " Paris" },
      { query_id: "q2", raw_response: " Lyon" },
    ]);
    const before = [readFileSync(o.bank), readFileSync(o.generations)];
    const link = join(dir, "same-path.link.jsonl");
    symlinkSync(o.bank, link);
    for (const [out, name, path] of [
      [o.generations, "--generations", o.generations],
      [o.bank, "--bank", o.bank],
      [link, "--bank", o.bank],
    ]) {
      await expect(scoreFile({ ...o, out: out! })).rejects.toMatchObject({
        constructor: UsageError,
        message: `--out ${out}: is also ${name} (${path}), which this command reads; choose another file for --out`,
        exitCode: EXIT.usage,
      });
    }
    expect([readFileSync(o.bank), readFileSync(o.generations)]).toEqual(before);
  });

  it("names a generation for a query the bank lacks, and a bank query without a generation", async () => {
    const extra = setup("extra", [
      { query_id: "q1", raw_response: "a" },
      { query_id: "q2", raw_response: "b" },
      { query_id: "q9", raw_response: "c" },
    ]);
    await expect(scoreFile(extra)).rejects.toMatchObject({
      constructor: GenerationsError,
      message: `${extra.generations}:3: field "query_id": "q9" is not in the bank ${extra.bank} (1 such generation(s)); pass --allow-missing to skip them`,
      exitCode: EXIT.data,
    });
    const short = setup("short", [{ query_id: "q2", raw_response: "b" }]);
    await expect(scoreFile(short)).rejects.toMatchObject({
      constructor: GenerationsError,
      message: `${short.generations}: has no generation for 1 of the bank's 2 queries (first: "q1", ${short.bank}:1); pass --allow-missing to score the rest`,
    });
    expect(existsSync(short.out)).toBe(false);
  });

  it("refuses a generation whose scored line would pass 1 MiB, naming its line, and writes nothing", async () => {
    // 700,000 bytes fit a generations line; with the span beside them the scored line does not.
    const raw = `Paris ${"y".repeat(700_000)}`;
    const o = setup("long", [
      { query_id: "q1", raw_response: " Paris" },
      { query_id: "q2", raw_response: raw },
    ]);
    const error = await scoreFile(o).catch((e: unknown) => e);
    expect(error).toBeInstanceOf(GenerationsError);
    expect((error as GenerationsError).message).toMatch(
      new RegExp(
        `^${o.generations.replace(/[.]/g, "\\.")}:2: field "raw_response": is 700006 bytes long, ` +
          "which makes its scored line \\d+ bytes \\(with the span\\), over the 1048576 bytes \\(1 MiB\\) a JSONL line may hold$",
      ),
    );
    expect(existsSync(o.out)).toBe(false);
  });

  it("refuses a model name for unnamed generations that no output can record, before writing", async () => {
    const o = setup("badname", [
      { query_id: "q1", raw_response: " Paris" },
      { query_id: "q2", raw_response: " Lyon" },
    ]);
    await expect(scoreFile({ ...o, model: "" })).rejects.toThrow(
      new UsageError('Expected a model name with a visible character but received ""'),
    );
    expect(existsSync(o.out)).toBe(false);
  });

  it("makes the output's folder, as mkdir -p does", async () => {
    const o = setup("nested", [
      { query_id: "q1", raw_response: " Paris" },
      { query_id: "q2", raw_response: " Lyon" },
    ]);
    const out = join(dir, "new", "deeper", "scored.jsonl");
    await scoreFile({ ...o, out });
    expect(readFileSync(out, "utf8").trim().split("\n")).toHaveLength(2);
  });

  it("reports a missing generations file as missing", async () => {
    const o = setup("nofile", []);
    const generations = join(dir, "absent.jsonl");
    await expect(scoreFile({ ...o, generations })).rejects.toMatchObject({
      constructor: FileError,
      message: `${generations}: does not exist`,
      exitCode: EXIT.data,
    });
  });
});
