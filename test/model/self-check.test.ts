/**
 * The batch self-check of extraction: which rows it picks, how it measures a
 * deviation, that a correct extraction passes, and that a broken batching
 * (padding attended to) fails the run with the deviation a second, unbatched
 * extraction shows, keeps no row, and leaves a store verify refuses.
 */
import { readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";

import { afterEach, beforeAll, describe, expect, it } from "vitest";

import { writeTinyModel, type TinyModelOptions } from "../../src/synthetic/llama.js";
import { f16BitsToNumber, f32BitsToF16Bits } from "../../src/kernels/typescript/float16.js";
import { mergeShards } from "../../src/store/merge.js";
import { StoreReader } from "../../src/store/reader.js";
import { verifyStore } from "../../src/store/verify.js";
import { extract } from "../../src/extract/extract.js";
import { rowDeviation, SelfCheckError, selfCheckRows, selfCheckTolerance } from "../../src/model/self-check.js";
import type { SelfCheck } from "../../src/store/manifest.js";
import { layerFileName } from "../../src/store/names.js";
import { readNpyFile } from "../../src/store/npy-file.js";
import { tempDir } from "../helpers/tmp.js";

const dir = tempDir("hsm-selfcheck-");
const MODEL: TinyModelOptions = { layers: 3, hidden: 32, heads: 4, kvHeads: 2, seed: 11 };
const modelDir = join(dir, "model");
const bank = join(dir, "bank.jsonl");
const QUERIES = [
  "What is the capital of France?",
  "Ok?",
  "Which element has the chemical symbol Fe, and is it magnetic at room temperature, and who named it first?",
  "Who wrote Don Quixote?",
  "Name the largest planet.",
  `${"Setting the scene at some length, ".repeat(12)}what is the boiling point of water?`,
  "Why?",
];

beforeAll(async () => {
  await writeTinyModel(modelDir, MODEL);
  const lines = Array.from({ length: 21 }, (_, i) =>
    JSON.stringify({
      query_id: `q${i}`,
      fact_id: `f${i >> 1}`,
      condition_family: i % 2 ? "typo" : "anchor",
      query: `${QUERIES[i % QUERIES.length]} (${i})`,
      use_for_main_forward: true,
      answers: ["x"],
    }),
  );
  writeFileSync(bank, lines.join("\n") + "\n");
});

afterEach(() => {
  delete process.env.HSM_TEST_BREAK_BATCHING;
});

const half = (x: number) => f32BitsToF16Bits(new Uint32Array(Float32Array.of(x).buffer)[0]!);

describe("the rows checked", () => {
  it("are the longest prompt plus the rows most made of padding in their batches, within commit blocks", () => {
    // Block [0, 4): batches by length {1:2, 0:3} and {3:5, 2:9}: padding 0,1,0,4. Block [4, 6): {5:1, 4:7}: padding 0,6.
    // The longest prompt is row 2; then rows 5 (6 pads) and 3 (4 pads).
    const lengths = [3, 2, 9, 5, 7, 1];
    expect(selfCheckRows(lengths, 2, 4, 3)).toEqual([2, 3, 5]);
    expect(selfCheckRows(lengths, 2, 4, 4)).toEqual([1, 2, 3, 5]);
    expect(selfCheckRows(lengths, 2, 4, 1)).toEqual([2]);
    expect(selfCheckRows(lengths, 2, 4, 0)).toEqual([]);
    // Ranked by the share of the padded length: row 0 (8 of 10 padding) before row 2 (30 of 60).
    expect(selfCheckRows([2, 10, 30, 60], 2, 4, 2)).toEqual([0, 3]);
    expect(selfCheckRows([2, 10, 30, 60], 2, 4, 3)).toEqual([0, 2, 3]);
    // Only eligible rows are picked.
    expect(selfCheckRows([2, 10, 30, 60], 2, 4, 2, (i) => i !== 3)).toEqual([0, 2]);
    // More rows asked for than exist: every row, once.
    expect(selfCheckRows(lengths, 2, 4, 50)).toEqual([0, 1, 2, 3, 4, 5]);
  });
});

describe("a row's deviation", () => {
  it("is the largest absolute difference, and that over the row's largest magnitude", () => {
    const stored = Uint16Array.from([1, -2, 0.5, 4].map(half));
    const fresh = Uint16Array.from([1, -2.5, 0.5, -8].map(half));
    expect(rowDeviation(stored, fresh)).toEqual({ abs: 12, rel: 12 / 8 });
    expect(rowDeviation(fresh, fresh)).toEqual({ abs: 0, rel: 0 });
  });

  it("counts equal infinities and NaNs as equal, and a value finite on one side only as infinite", () => {
    const inf = 0x7c00;
    const nan = 0x7e00;
    expect(rowDeviation(Uint16Array.of(inf, nan, half(1)), Uint16Array.of(inf, nan, half(1)))).toEqual({
      abs: 0,
      rel: 0,
    });
    expect(rowDeviation(Uint16Array.of(inf, half(1)), Uint16Array.of(half(2), half(1))).abs).toBe(Infinity);
  });
});

describe("extraction's self-check", () => {
  it("passes on a correct extraction, records the rows and per-layer deviations, and verify shows it", async () => {
    const out = join(dir, "good");
    const result = await extract({ modelDir, bank, out, batchSize: 4, commitRows: 8, selfCheck: 5 });
    const check = result.manifest.self_check!;
    expect(check.status).toBe("pass");
    expect(check.rows).toBe(5);
    expect(check.query_ids).toHaveLength(5);
    // The longest prompt (one of the three rows built on the long query) is always among them.
    expect(check.query_ids.filter((id) => ["q5", "q12", "q19"].includes(id)).length).toBeGreaterThan(0);
    expect(check.layers.map((l) => l.layer)).toEqual(result.manifest.layers);
    expect(check.tolerance).toBe(selfCheckTolerance("float32"));
    for (const l of check.layers) expect(l.max_rel_dev!).toBeLessThanOrEqual(check.tolerance);
    const onDisk = JSON.parse(readFileSync(join(out, "index.json"), "utf8"));
    expect(onDisk.self_check).toEqual(check);
    const report = await verifyStore(out);
    expect(report.ok).toBe(true);
    expect(report.self_check).toEqual({
      rows: 5,
      worst_layer: expect.any(Number),
      worst_rel_dev: expect.any(Number),
      status: "pass",
    });
  });

  it("is off with 0 rows", async () => {
    const result = await extract({ modelDir, bank, out: join(dir, "off"), batchSize: 4, selfCheck: 0 });
    expect(result.manifest.self_check).toMatchObject({ rows: 0, query_ids: [], status: "off" });
  });

  it("fails the run when padded rows are computed wrongly, with the deviation an unbatched extraction shows", async () => {
    const unbatched = join(dir, "b1");
    await extract({ modelDir, bank, out: unbatched, batchSize: 1, selfCheck: 0 });
    process.env.HSM_TEST_BREAK_BATCHING = "mask";
    const broken = join(dir, "broken");
    const run = extract({ modelDir, bank, out: broken, batchSize: 4, commitRows: 8, selfCheck: 6 });
    await expect(run).rejects.toThrow(SelfCheckError);
    await expect(run).rejects.toThrow(/SELF-CHECK FAILED .* in layer \d+ .*--batch-size 1/);
    // No row is kept, the store is not complete, and the manifest says why.
    const manifest = JSON.parse(readFileSync(join(broken, "index.json"), "utf8"));
    expect(manifest).toMatchObject({ rows_done: 0, complete: false });
    const check = manifest.self_check as SelfCheck;
    expect(check.status).toBe("fail");
    // Independently: the largest difference between the broken rows and the batch-1 store over the rows checked.
    const b = await StoreReader.open(unbatched);
    const ids = b.manifest.query_ids;
    for (const { layer, max_abs_dev } of check.layers) {
      const a = await readNpyFile(join(broken, layerFileName(layer)));
      const d = b.manifest.d_model;
      let worst = 0;
      for (const id of check.query_ids) {
        const row = ids.indexOf(id);
        const y = await b.readRowsF32(layer, row, 1);
        y.forEach((v, j) => (worst = Math.max(worst, Math.abs(f16BitsToNumber(a.data[row * d + j]!) - v))));
      }
      expect(max_abs_dev).toBe(worst);
    }
    expect(Math.max(...check.layers.map((l) => l.max_rel_dev!))).toBeGreaterThan(check.tolerance);
    await b.close();
    const report = await verifyStore(broken);
    expect(report.ok).toBe(false);
    expect(report.problems.map((p) => p.problem)).toContain("self-check");
    expect(report.problems.find((p) => p.problem === "self-check")!.message).toMatch(/batch self-check failed/);
    // Run again at batch 1: every row is written again, and the store is the unbatched one.
    const again = await extract({ modelDir, bank, out: broken, batchSize: 1, commitRows: 8, selfCheck: 6 });
    expect(again.rowsExtracted).toBe(21);
    expect(again.manifest.self_check!.status).toBe("pass");
    for (const layer of again.manifest.layers)
      expect(readFileSync(join(broken, layerFileName(layer)))).toEqual(
        readFileSync(join(unbatched, layerFileName(layer))),
      );
    expect((await verifyStore(broken)).ok).toBe(true);
  });

  it("keeps batched states with --self-check 0, and says so in the manifest", async () => {
    process.env.HSM_TEST_BREAK_BATCHING = "mask";
    const out = join(dir, "unchecked");
    const result = await extract({ modelDir, bank, out, batchSize: 4, commitRows: 8, selfCheck: 0 });
    expect(result.manifest).toMatchObject({ complete: true, self_check: { rows: 0, status: "off" } });
    expect((await verifyStore(out)).ok).toBe(true);
  });

  it("is refused by verify in a store that completed with a warning before failed checks stopped the run", async () => {
    const out = join(dir, "older");
    await extract({ modelDir, bank, out, batchSize: 4, commitRows: 8, selfCheck: 4 });
    const manifest = JSON.parse(readFileSync(join(out, "index.json"), "utf8"));
    manifest.self_check.status = "warn";
    manifest.self_check.layers[0].max_rel_dev = 0.5;
    // Older stores carry no seal, which verify names too.
    delete manifest.manifest_sha256;
    writeFileSync(join(out, "index.json"), JSON.stringify(manifest, null, 2) + "\n");
    const report = await verifyStore(out);
    expect(report.problems.map((p) => p.problem)).toEqual(["self-check", "manifest-checksum"]);
    expect(report.problems[0]!.message).toContain(`5.00e-1 of the row's largest value in layer ${manifest.layers[0]}`);
  });

  it("runs once, when a resumed run completes, over rows stored by both runs; a complete store is not checked again", async () => {
    const out = join(dir, "resumed");
    const stop = new Error("stopped");
    const stopAfterFirstBlock = (done: number) => {
      if (done >= 8) throw stop;
    };
    const first = extract({
      modelDir,
      bank,
      out,
      batchSize: 4,
      commitRows: 8,
      selfCheck: 21,
      onProgress: stopAfterFirstBlock,
    });
    await expect(first).rejects.toBe(stop);
    expect(JSON.parse(readFileSync(join(out, "index.json"), "utf8"))).toMatchObject({ rows_done: 8, complete: false });
    expect(JSON.parse(readFileSync(join(out, "index.json"), "utf8")).self_check).toBeUndefined();
    const second = await extract({ modelDir, bank, out, batchSize: 4, commitRows: 8, selfCheck: 21 });
    const check = second.manifest.self_check!;
    // Every row, those of the first run read back from the files included.
    expect(check.rows).toBe(21);
    expect(check.status).toBe("pass");
    const third = await extract({ modelDir, bank, out, batchSize: 4, commitRows: 8, selfCheck: 21 });
    expect(third.alreadyComplete).toBe(true);
    expect(third.manifest.self_check).toEqual(check);
  });

  it("runs on a shard's own rows, and a merge joins the shards' checks", async () => {
    const shards = [0, 1].map((index) => join(dir, `shard${index}`));
    const results = [];
    for (const [index, out] of shards.entries()) {
      results.push(
        await extract({ modelDir, bank, out, batchSize: 4, commitRows: 8, shard: { index, count: 2 }, selfCheck: 3 }),
      );
    }
    for (const r of results) {
      const own = new Set(r.manifest.query_ids);
      expect(r.manifest.self_check!.query_ids.every((id) => own.has(id))).toBe(true);
      expect(r.manifest.self_check!.rows).toBe(3);
    }
    const merged = (await mergeShards(join(dir, "merged"), shards)).self_check!;
    const [a, b] = results.map((r) => r.manifest.self_check!);
    expect(merged.rows).toBe(6);
    expect(merged.query_ids).toEqual([...a!.query_ids, ...b!.query_ids]);
    merged.layers.forEach((l, k) =>
      expect(l.max_abs_dev).toBe(Math.max(a!.layers[k]!.max_abs_dev!, b!.layers[k]!.max_abs_dev!)),
    );
    expect(merged.status).toBe("pass");
  });
});
