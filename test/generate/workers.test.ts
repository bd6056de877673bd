/**
 * Generation's decoding threads are stopped only between batches, so that a
 * run stopped mid-way, or run to its end, never takes the process down; and
 * the rows they decode are written in the plan's order, whichever batch a
 * worker takes first.
 */
import { readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";

import { beforeAll, describe, expect, it } from "vitest";

import { generate } from "../../src/generate/generate.js";
import { writeModelInStyle } from "../../src/synthetic/export-styles.js";
import { tempDir } from "../helpers/tmp.js";

describe("decoding threads", () => {
  const dir = tempDir("hsm-workers-");
  const modelDir = join(dir, "model");
  const bank = join(dir, "bank.jsonl");

  beforeAll(async () => {
    // GPT-2's legacy decoder: no KV cache of its own (generation adds one to the graph).
    await writeModelInStyle(modelDir, "plain", {
      family: "gpt2",
      layers: 2,
      hidden: 32,
      heads: 4,
      tokenizer: "llama3.1-1k",
      seed: 3,
      positionIds: false,
    });
    const queries = ["What is the capital of France?", "Ok?", "Who wrote Don Quixote?", "Name the largest planet."];
    const lines = Array.from({ length: 48 }, (_, i) =>
      JSON.stringify({
        query_id: `q${i}`,
        fact_id: `f${i}`,
        condition_family: "anchor",
        query: `${queries[i % queries.length]} ${"and more ".repeat(i % 7)}`,
        use_for_main_forward: true,
        answers: ["x"],
      }),
    );
    writeFileSync(bank, lines.join("\n") + "\n");
  });

  it("are stopped between batches: a run stopped while both decode, 25 times over, fails with its error", async () => {
    const stop = new Error("stopped by the test");
    for (let run = 0; run < 25; run++) {
      const out = join(dir, `stopped-${run}.jsonl`);
      const stopped = generate({
        modelDir,
        bank,
        out,
        batchSize: 4,
        workers: 2,
        maxNewTokens: 12,
        selfCheck: 0,
        onProgress: (done) => {
          if (done > 0) throw stop;
        },
      });
      await expect(stopped).rejects.toBe(stop);
    }
  });

  it("run the no-cache path to the end, 10 times over, with the same file each time", async () => {
    const files = [];
    for (let run = 0; run < 10; run++) {
      const out = join(dir, `whole-${run}.jsonl`);
      expect(
        await generate({ modelDir, bank, out, batchSize: 4, workers: 2, maxNewTokens: 6, selfCheck: 0 }),
      ).toMatchObject({ written: 48, failed: 0 });
      files.push(readFileSync(out, "utf8"));
    }
    expect(new Set(files).size).toBe(1);
  });

  it("write the rows in the plan's order though the longest batch waiting is decoded first", async () => {
    const run = async (workers: number) => {
      const out = join(dir, `order-${workers}.jsonl`);
      await generate({ modelDir, bank, out, batchSize: 4, workers, maxNewTokens: 6, selfCheck: 0 });
      return readFileSync(out, "utf8");
    };
    const alone = await run(1);
    expect(alone.trim().split("\n")).toHaveLength(48);
    expect(await run(2)).toBe(alone);
  });
});
