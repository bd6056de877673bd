/**
 * How many decoding sessions generation starts by default: each holds a copy
 * of the weights, so no more than fit in half the available memory. And the
 * threads that hold them are stopped only between batches, so that a run
 * stopped mid-way, or run to its end, never takes the process down; and
 * the rows they decode are written in the plan's order, whichever batch a
 * worker takes first.
 */
import { readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";

import { beforeAll, describe, expect, it } from "vitest";

import { generate } from "../../src/generate/generate.js";
import { affordableWorkers, weightBytes } from "../../src/generate/workers.js";
import { writeModelInStyle } from "../../src/synthetic/export-styles.js";
import { tempDir } from "../helpers/tmp.js";

const GB = 1e9;

describe("affordableWorkers", () => {
  it("keeps the wanted workers while their copies take at most half the available memory", () => {
    expect(affordableWorkers(2, 1 * GB, 16 * GB)).toEqual({ workers: 2 });
    expect(affordableWorkers(2, 4 * GB, 16 * GB)).toEqual({ workers: 2 });
    expect(affordableWorkers(4, 2 * GB, 16 * GB)).toEqual({ workers: 4 });
  });

  it("starts fewer, at least one, and says why", () => {
    expect(affordableWorkers(2, 4.1 * GB, 16 * GB)).toEqual({
      workers: 1,
      reason:
        "decoding with 1 session instead of 2: each holds its own copy of the model's 4.1 GB of weights and 16.0 GB of memory is available (--workers overrides)",
    });
    expect(affordableWorkers(4, 2.5 * GB, 16 * GB).workers).toBe(3);
    expect(affordableWorkers(2, 28 * GB, 24 * GB).workers).toBe(1);
    expect(affordableWorkers(2, 0, 0).workers).toBe(1);
  });
});

describe("weightBytes", () => {
  it("adds each external-data file the initializers name once to the graph file", () => {
    const dir = tempDir();
    writeFileSync(join(dir, "model.onnx"), Buffer.alloc(1000));
    writeFileSync(join(dir, "model.onnx_data"), Buffer.alloc(5000));
    writeFileSync(join(dir, "unused.bin"), Buffer.alloc(7000));
    const at = (location: string) => ({
      externalData: [
        { key: "location", value: location },
        { key: "offset", value: "0" },
      ],
    });
    const graph = {
      initializer: [at("model.onnx_data"), at("model.onnx_data"), { rawData: new Uint8Array(8) }, at("missing.bin")],
    };
    expect(weightBytes(join(dir, "model.onnx"), graph)).toBe(6000);
    expect(weightBytes(join(dir, "model.onnx"), { initializer: [] })).toBe(1000);
  });
});

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
