/** Merging shard stores: the single run's bytes, and refusals that name the shard at fault. */
import { readFileSync } from "node:fs";
import { join } from "node:path";

import { describe, expect, it } from "vitest";

import { EXIT, StoreError, UsageError } from "../../src/errors.js";
import type { SelfCheck } from "../../src/store/manifest.js";
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

async function write(
  path: string,
  rows: [number, number],
  shard?: StoreInit["shard"],
  made: Pick<StoreInit, "style" | "extraction"> & { self_check?: SelfCheck } = {},
): Promise<string> {
  const { self_check, ...rest } = made;
  const w = await StoreWriter.open(path, { ...init(rows, shard), ...rest });
  for (const l of LAYERS) await w.writeRowsF32(l, 0, data.get(l)!.subarray(rows[0] * D, rows[1] * D));
  if (self_check) w.manifest.self_check = self_check;
  await w.finish(1);
  await w.close();
  return path;
}

const BOUNDS: [number, number][] = [
  [0, 10],
  [10, 20],
  [20, N],
];
async function shards(
  name: string,
  made: (index: number) => Pick<StoreInit, "style" | "extraction"> & { self_check?: SelfCheck } = () => ({}),
): Promise<string[]> {
  return Promise.all(
    BOUNDS.map((b, index) =>
      write(
        join(dir, name, `shard-${index}`),
        b,
        { index, count: 3, row_start: b[0], row_end: b[1], rows_total: N },
        made(index),
      ),
    ),
  );
}

/** The style record of a store whose layer 2 was read from `tensor`. */
const styleReading = (tensor: string): NonNullable<StoreInit["style"]> => ({
  name: "structural",
  layers: [
    { layer: 1, tensor: "/model/layers.1/Add_1_output_0", how: "structure" },
    { layer: 2, tensor, how: tensor.startsWith("/model") ? "structure" : "given" },
  ],
});

/** A passing (or, with `status`, another) self-check of `rows` rows. */
const check = (rows: number, status: SelfCheck["status"] = "pass"): SelfCheck => ({
  rows,
  query_ids: ids.slice(0, rows),
  layers: LAYERS.map((layer) => ({ layer, max_abs_dev: 0, max_rel_dev: 0 })),
  tolerance: 1e-3,
  status,
  seconds: 0.5,
});

describe("mergeShards", () => {
  it("refuses shards whose layers were read from other graph tensors", async () => {
    const [s0, s1, s2] = await shards("tensors", (i) => ({
      style: styleReading(i === 1 ? "/model/layers.2/Add_output_0" : "/model/layers.2/Add_1_output_0"),
    }));
    await expect(mergeShards(join(dir, "tensors-merged"), [s0!, s1!, s2!])).rejects.toMatchObject({
      constructor: StoreError,
      message: `${s1}: its layers were read from other graph tensors than ${s0}'s (style); these shards are not of one run`,
    });
  });

  it("names the field and both values where shards were made differently: another device", async () => {
    const made = (device: string) => ({ rows_sha256: "a".repeat(64), batch_size: 4, commit_rows: 10, device });
    const [s0, s1, s2] = await shards("devices", (i) => ({ extraction: made(i === 2 ? "cpu" : "webgpu") }));
    await expect(mergeShards(join(dir, "devices-merged"), [s0!, s1!, s2!])).rejects.toMatchObject({
      constructor: StoreError,
      message: `${s2}: extraction.device "cpu" differs from ${s0}'s "webgpu"; these shards are not of one run`,
    });
  });

  it("takes extraction settings recorded in another key order as the same, and names a setting one adds", async () => {
    const made = { rows_sha256: "a".repeat(64), batch_size: 4, commit_rows: 10, device: "cpu" };
    // As Python's json.dump(..., sort_keys=True) rewrites it: the seal, over sorted keys, still holds.
    const sorted = { batch_size: 4, commit_rows: 10, device: "cpu", rows_sha256: "a".repeat(64) };
    const order = await shards("key-order", (i) => ({ extraction: i === 2 ? sorted : made }));
    expect((await mergeShards(join(dir, "key-order-merged"), order)).extraction).toEqual(made);
    const [s0, s1, s2] = await shards("extra-key", (i) => ({ extraction: i === 1 ? { ...made, threads: 2 } : made }));
    await expect(mergeShards(join(dir, "extra-key-merged"), [s0!, s1!, s2!])).rejects.toMatchObject({
      constructor: StoreError,
      message: `${s1}: extraction.threads 2 differs from ${s0}'s absent; these shards are not of one run`,
    });
  });

  it("records the joined self-check as off where any shard's was off, failed where any failed", async () => {
    const off = await shards("check-off", (i) => ({ self_check: check(4, i === 1 ? "off" : "pass") }));
    expect((await mergeShards(join(dir, "check-off-merged"), off)).self_check).toMatchObject({
      rows: 12,
      status: "off",
    });
    const on = await shards("check-on", () => ({ self_check: check(4) }));
    expect((await mergeShards(join(dir, "check-on-merged"), on)).self_check).toMatchObject({
      rows: 12,
      status: "pass",
    });
  });

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

  it("refuses an OUT holding a complete store batched otherwise, and keeps one batched as the shards were", async () => {
    const made = (batch_size: number) => ({
      extraction: { rows_sha256: "e".repeat(64), batch_size, commit_rows: 10, device: "cpu" },
    });
    const sharded = await shards("batched", () => made(8));
    const other = await write(join(dir, "batched-other"), [0, N], undefined, made(1));
    const before = readFileSync(join(other, "index.json"), "utf8");
    await expect(mergeShards(other, sharded)).rejects.toMatchObject({
      constructor: StoreError,
      message:
        `${other}: already holds a complete store made with a different batch size (extraction.batch_size 1, ` +
        "the shards' 8); merging would keep it, not the store the shards' run makes. Use another OUT folder or delete this one",
      exitCode: EXIT.data,
    });
    expect(readFileSync(join(other, "index.json"), "utf8")).toBe(before);
    const same = await write(join(dir, "batched-same"), [0, N], undefined, made(8));
    expect((await mergeShards(same, sharded)).complete).toBe(true);
  });

  it("refuses an <out> that is one of its shards, leaving the shard as it was", async () => {
    const [s0, s1, s2] = await shards("out-is-shard");
    const before = readFileSync(join(s1!, "index.json"));
    await expect(mergeShards(s1!, [s0!, s1!, s2!])).rejects.toMatchObject({
      constructor: UsageError,
      message: `<out> ${s1}: is also a <shards> folder (${s1}), which this command reads; choose another folder for <out>`,
      exitCode: EXIT.usage,
    });
    expect(readFileSync(join(s1!, "index.json")).equals(before)).toBe(true);
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
