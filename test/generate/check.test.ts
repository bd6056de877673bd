/**
 * The self-check of generation: answers regenerated alone at batch 1 must be
 * the same text. A correct run passes; a run whose batches attend to padding
 * (test hook) warns, and its sidecar holds exactly the rows whose written text
 * differs from a separate batch-1 run's.
 */
import { existsSync, readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";

import { afterEach, beforeAll, describe, expect, it } from "vitest";

import { writeTinyModel } from "../../src/synthetic/llama.js";
import { generate } from "../../src/generate/generate.js";
import { checkGenerations, generationCheckPath } from "../../src/generate/check.js";
import { tempDir } from "../helpers/tmp.js";

const dir = tempDir("hsm-gencheck-");
const modelDir = join(dir, "model");
const bank = join(dir, "bank.jsonl");
const QUERIES = [
  "What is the capital of France?",
  "Ok?",
  "Which element has the chemical symbol Fe, and is it magnetic at room temperature?",
  "Who wrote Don Quixote?",
  "Name it.",
];

beforeAll(async () => {
  await writeTinyModel(modelDir, { layers: 2, hidden: 32, heads: 4, kvHeads: 2, withPast: true, seed: 9 });
  const lines = Array.from({ length: 20 }, (_, i) =>
    JSON.stringify({
      query_id: `q${i}`,
      fact_id: `f${i >> 1}`,
      condition_family: i % 2 ? "typo" : "anchor",
      query: `${QUERIES[i % 5]} ${"x ".repeat(i % 7)}`,
      use_for_main_forward: true,
      answers: ["x"],
    }),
  );
  writeFileSync(bank, lines.join("\n") + "\n");
});

afterEach(() => {
  delete process.env.HSM_TEST_BREAK_BATCHING;
});

const texts = (path: string) =>
  new Map(
    readFileSync(path, "utf8")
      .trim()
      .split("\n")
      .map((l) => JSON.parse(l))
      .map((r) => [r.query_id as string, r.raw_response as string]),
  );

describe("generation's self-check", () => {
  it("passes on a correct run and records the rows regenerated", async () => {
    const out = join(dir, "good.jsonl");
    await generate({ modelDir, bank, out, batchSize: 8, maxNewTokens: 6, selfCheck: 5 });
    const check = JSON.parse(readFileSync(generationCheckPath(out), "utf8"));
    expect(generationCheckPath(out)).toBe(`${out}.check.json`);
    expect(check).toMatchObject({ rows: 5, batch_size: 8, differences: [], status: "pass" });
    expect(check.query_ids).toHaveLength(5);
  });

  it("writes nothing when off", async () => {
    const out = join(dir, "off.jsonl");
    await generate({ modelDir, bank, out, batchSize: 8, maxNewTokens: 6, selfCheck: 0 });
    expect(existsSync(generationCheckPath(out))).toBe(false);
  });

  it("warns when padded rows are computed wrongly, listing the rows a batch-1 run answers differently", async () => {
    const alone = join(dir, "alone.jsonl");
    await generate({ modelDir, bank, out: alone, batchSize: 1, maxNewTokens: 6, selfCheck: 0 });
    process.env.HSM_TEST_BREAK_BATCHING = "mask";
    const out = join(dir, "broken.jsonl");
    const warnings: string[] = [];
    await generate({
      modelDir,
      bank,
      out,
      batchSize: 8,
      maxNewTokens: 6,
      selfCheck: 20,
      log: (m, level) => level === "warn" && warnings.push(m),
    });
    const check = JSON.parse(readFileSync(generationCheckPath(out), "utf8"));
    expect(check.status).toBe("warn");
    expect(check.rows).toBe(20);
    expect(warnings.some((w) => w.includes("SELF-CHECK FAILED") && w.includes(generationCheckPath(out)))).toBe(true);
    const batched = texts(out);
    const single = texts(alone);
    const differing = [...batched.keys()].filter((id) => batched.get(id) !== single.get(id)).sort();
    expect(differing.length).toBeGreaterThan(0);
    expect(check.differences.map((d: { query_id: string }) => d.query_id).sort()).toEqual(differing);
    for (const d of check.differences) {
      expect(d.batched).toBe(batched.get(d.query_id));
      expect(d.alone).toBe(single.get(d.query_id));
    }
  });

  it("regenerates as many rows at once as the run decodes batches, and writes the same sidecar", async () => {
    // Row i's prompt is i + 1 tokens; the "batched" text of rows 3 and 6 differs from what they give alone.
    const tokens = Array.from({ length: 12 }, (_, i) => Array.from({ length: i + 1 }, (_, j) => j));
    const alone = (t: number[]) => `row ${t.length - 1}`;
    const written = new Map(tokens.map((t, i) => [i, i === 3 || i === 6 ? "other" : alone(t)]));
    const sidecar = async (parallel: number) => {
      let running = 0;
      let most = 0;
      const out = join(dir, `lanes-${parallel}.jsonl`);
      await checkGenerations({
        generateAlone: async (t) => {
          most = Math.max(most, ++running);
          // Longer prompts take longer, so the lanes finish out of order.
          await new Promise((r) => setTimeout(r, 2 * t.length));
          running--;
          return alone(t);
        },
        tokens,
        queryIds: tokens.map((_, i) => `q${i}`),
        written,
        batchSize: 4,
        rule: { size: 4 },
        window: 12,
        count: 12,
        parallel,
        out,
      });
      const { seconds, ...rest } = JSON.parse(readFileSync(generationCheckPath(out), "utf8"));
      expect(seconds).toBeGreaterThan(0);
      return { most, rest };
    };
    const one = await sidecar(1);
    const two = await sidecar(2);
    expect([one.most, two.most]).toEqual([1, 2]);
    expect(two.rest).toEqual(one.rest);
    expect(one.rest.rows).toBe(12);
    expect(one.rest.differences).toEqual([
      { query_id: "q3", batched: "other", alone: "row 3" },
      { query_id: "q6", batched: "other", alone: "row 6" },
    ]);
  });
});
