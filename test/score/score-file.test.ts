import { writeFileSync } from "node:fs";
import { join } from "node:path";

import { describe, expect, it } from "vitest";

import { readGenerations } from "../../src/score/score-file.js";
import { tempDir } from "../helpers/tmp.js";

const dir = tempDir("hsm-gens-");

describe("generations file", () => {
  it.each([
    ["a duplicate query_id", ['{"query_id": "q1", "raw_response": " a"}', '{"query_id": "q1", "raw_response": " b"}'], /gens\.jsonl:2: field "query_id": duplicate "q1" \(first on line 1\)$/],
    ["a missing raw_response", ['{"query_id": "q1"}'], /gens\.jsonl:1: field "raw_response": is missing or not a string$/],
    ["a line that is not JSON", ['{"query_id": '], /gens\.jsonl:1: is not valid JSON/],
    ["an array line", ["[1]"], /gens\.jsonl:1: expected a JSON object but received array$/],
  ])("names the line of %s", async (_what, lines, message) => {
    const file = join(dir, "gens.jsonl");
    writeFileSync(file, lines.join("\n") + "\n");
    await expect(readGenerations(file)).rejects.toThrow(message);
  });

  it("reads good lines, blank lines skipped", async () => {
    const file = join(dir, "ok.jsonl");
    writeFileSync(file, '{"query_id": "q1", "raw_response": " a", "finish_reason": "eos"}\n\n{"query_id": "q2", "raw_response": ""}\n');
    const g = await readGenerations(file);
    expect([...g.keys()]).toEqual(["q1", "q2"]);
    expect(g.get("q2")!.line).toBe(3);
  });
});
