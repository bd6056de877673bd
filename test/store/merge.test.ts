/** Merging shard stores: the single run's bytes, and refusals that name the shard at fault. */
import { readFileSync } from "node:fs";
import { join } from "node:path";

import { describe, expect, it } from "vitest";

import { EXIT, StoreError, UsageError } from "../../src/errors.js";
import { mergeShards } from "../../src/store/merge.js";
import { StoreWriter, type StoreInit } from "../../src/store/writer.js";
import { Rng } from "../../src/util/random.js";
import { tempDir } from "../helpers/tmp.js";

const N = 29;
const D = 4;
const LAYERS = [1, 2];
const dir = tempDir("hsm-merge-");

const ids = Array.from({ length: N }, (_, i) => `q${i}`);
const data = new Map(LAYERS.map((l) => [l, new Rng(7, l).fillNormal(new Float32Array(N * D), 10)]));

function init(rows: [number, number], shard?: StoreInit["shard"]): StoreInit {
  const [a, b] = rows;
  return {
    model: "m",
    model_sha256: "c".repeat(64),
    num_layers: 3,
    d_model: D,
    layers: LAYERS,
    layer_rule: "l >= 1",
    last_layer_final_norm: true,
    dtype: "float32",
    query_ids: ids.slice(a, b),
    fact_ids: ids.slice(a, b).map((_, i) => `f${(a + i) % 4}`),
    condition_families: ids.slice(a, b).map((_, i) => ((a + i) % 3 ? "typo" : "anchor")),
    ...(shard ? { shard } : {}),
  };
}

async function write(path: string, rows: [number, number], shard?: StoreInit["shard"]): Promise<string> {
  const w = await StoreWriter.open(path, init(rows, shard));
  for (const l of LAYERS) await w.writeRowsF32(l, 0, data.get(l)!.subarray(rows[0] * D, rows[1] * D));
  await w.finish(1);
  await w.close();
  return path;
}

const BOUNDS: [number, number][] = [
  [0, 10],
  [10, 20],
  [20, N],
];
async function shards(name: string): Promise<string[]> {
  return Promise.all(
    BOUNDS.map((b, index) =>
      write(join(dir, name, `shard-${index}`), b, { index, count: 3, row_start: b[0], row_end: b[1], rows_total: N }),
    ),
  );
}

describe("mergeShards", () => {
  it("joins shards given in any order into the store a single run writes", async () => {
    const whole = await write(join(dir, "whole"), [0, N]);
    const [s0, s1, s2] = await shards("ok");
    const out = join(dir, "merged");
    const m = await mergeShards(out, [s2!, s0!, s1!]);
    expect(m.complete).toBe(true);
    expect(m.query_ids).toEqual(ids);
    for (const name of ["L001.npy", "L002.npy"])
      expect(readFileSync(join(out, name)).equals(readFileSync(join(whole, name)))).toBe(true);
    const single = JSON.parse(readFileSync(join(whole, "index.json"), "utf8"));
    expect(m.files).toEqual(single.files);
    expect(m.fact_ids).toEqual(single.fact_ids);
  });

  it("refuses no shards as a usage error", async () => {
    await expect(mergeShards(join(dir, "none"), [])).rejects.toMatchObject({
      constructor: UsageError,
      message: "Expected at least one shard store to merge but received none",
      exitCode: EXIT.usage,
    });
  });

  it("names a missing shard, a shard given twice and a store that is not a shard", async () => {
    const [s0, s1, s2] = await shards("bad");
    await expect(mergeShards(join(dir, "m1"), [s0!, s2!])).rejects.toMatchObject({
      constructor: StoreError,
      message: `${s2}: shard 1/3 is missing`,
      exitCode: EXIT.data,
    });
    await expect(mergeShards(join(dir, "m2"), [s0!, s0!, s1!, s2!])).rejects.toMatchObject({
      constructor: StoreError,
      message: `${s0}: shard 0/3 is given twice`,
    });
    await expect(mergeShards(join(dir, "m3"), [s0!, s1!])).rejects.toMatchObject({
      constructor: StoreError,
      message: `${join(dir, "m3")}: shard 2/3 is missing: 3 shards are needed, 2 given`,
    });
    const plain = await write(join(dir, "plain"), [0, N]);
    await expect(mergeShards(join(dir, "m4"), [plain])).rejects.toMatchObject({
      constructor: StoreError,
      message: `${plain}: is not a shard store (made without --shard)`,
    });
  });
});
