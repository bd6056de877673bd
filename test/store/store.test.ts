import { mkdirSync, readdirSync, readFileSync, renameSync, symlinkSync, writeFileSync } from "node:fs";
import { join } from "node:path";

import { describe, expect, it } from "vitest";

import { EXIT, FileError, StoreError } from "../../src/errors.js";
import { memoryBackend } from "../../src/store/backend.js";
import { f16ToF32, f32ToF16 } from "../../src/kernels/typescript/float16.js";
import { acquireLock } from "../../src/store/lock.js";
import { parseManifest } from "../../src/store/manifest.js";
import { StoreReader } from "../../src/store/reader.js";
import { StoreWriter, type StoreInit } from "../../src/store/writer.js";
import { Rng } from "../../src/util/random.js";
import { tempDir } from "../helpers/tmp.js";

const N = 37;
const D = 8;

function init(overrides: Partial<StoreInit> = {}): StoreInit {
  return {
    model: "tiny",
    model_sha256: "a".repeat(64),
    num_layers: 4,
    d_model: D,
    layers: [2, 3],
    layer_rule: "l/(L-1) >= 0.4",
    last_layer_final_norm: true,
    dtype: "float32",
    query_ids: Array.from({ length: N }, (_, i) => `q${i}`),
    fact_ids: Array.from({ length: N }, (_, i) => `f${i % 5}`),
    condition_families: Array.from({ length: N }, (_, i) => (i % 3 === 0 ? "anchor" : "typo")),
    ...overrides,
  };
}

/** Deterministic rows for a layer, some of them overflowing float16. */
function rows(layer: number): Float32Array {
  const rng = new Rng(99, layer);
  const x = rng.fillNormal(new Float32Array(N * D), 300);
  x[5] = 70000; // overflows to +inf
  x[6] = -1e6; // -inf
  x[7] = 65519; // rounds to 65504, the largest finite value
  return x;
}

async function writeAll(dir: string, blocks: number[][]): Promise<void> {
  // blocks: [start, count] pairs, committed one by one
  const w = await StoreWriter.open(dir, init());
  for (const [start, count] of blocks) {
    for (const layer of [2, 3])
      await w.writeRowsF32(layer, start!, rows(layer).subarray(start! * D, (start! + count!) * D));
    await w.commit(start! + count!);
  }
  await w.finish(2);
  await w.close();
}

/** A complete store of every row, written in two commits, in its own folder. */
async function wholeStore(name: string): Promise<string> {
  const store = join(dir, name);
  await writeAll(store, [
    [0, 20],
    [20, 17],
  ]);
  return store;
}

const dir = tempDir();

describe("store writer and reader", () => {
  it("writes a complete store that reads back as NumPy's astype(float16) of the input", async () => {
    const store = await wholeStore("whole");
    const m = parseManifest(readFileSync(join(store, "index.json"), "utf8"), "index.json");
    expect(m).toMatchObject({ complete: true, rows_done: N, layers: [2, 3], d_model: D });
    expect(m.files["L002.npy"]).toMatchObject({ layer: 2, shape: [N, D], nonfinite: 2, max_abs: 65504 });
    expect(m.files["L002.npy"]!.sha256).toMatch(/^[0-9a-f]{64}$/);
    expect(readdirSync(store).sort()).toEqual(["L002.npy", "L003.npy", "index.json"]); // no temp files left

    const reader = await StoreReader.open(store);
    const want = new Uint16Array(N * D);
    f32ToF16(rows(3), want);
    expect(Array.from(await reader.readRows(3, 0, N))).toEqual(Array.from(want));
    const blocks = [];
    for await (const b of reader.blocks(3, 10)) blocks.push([b.start, b.count, b.data.length]);
    expect(blocks).toEqual([
      [0, 10, 80],
      [10, 10, 80],
      [20, 10, 80],
      [30, 7, 56],
    ]);
    const wide = await reader.readRowsF32(3, 4, 2);
    const ref = new Float32Array(2 * D);
    f16ToF32(want.subarray(4 * D, 6 * D), ref);
    expect(Array.from(wide)).toEqual(Array.from(ref));
    await expect(reader.readRows(3, 30, 8)).rejects.toThrow(/within 0…37/);
    await expect(reader.readRows(9, 0, 1)).rejects.toThrow(/no layer 9/);
    await reader.close();
  });

  it("resumes from rows_done and ends byte-identical to an uninterrupted run", async () => {
    const whole = await wholeStore("whole-for-resume");
    const resumed = join(dir, "resumed");
    const w1 = await StoreWriter.open(resumed, init());
    for (const layer of [2, 3]) await w1.writeRowsF32(layer, 0, rows(layer).subarray(0, 15 * D));
    await w1.commit(15);
    // Rows written after the last commit are simply written again on resume.
    await w1.writeRowsF32(2, 15, rows(2).subarray(15 * D, 20 * D));
    await w1.close();

    const w2 = await StoreWriter.open(resumed, init());
    expect(w2.rowsDone).toBe(15);
    for (const layer of [2, 3]) await w2.writeRowsF32(layer, 15, rows(layer).subarray(15 * D));
    const m = await w2.finish(1);
    await w2.close();
    for (const name of ["L002.npy", "L003.npy"]) {
      expect(readFileSync(join(resumed, name)).equals(readFileSync(join(whole, name)))).toBe(true);
    }
    expect(m.files).toEqual(parseManifest(readFileSync(join(whole, "index.json"), "utf8"), "x").files);
  });

  it("refuses to continue a store made for another model or row set", async () => {
    const store = await wholeStore("whole-for-refusal");
    await expect(StoreWriter.open(store, init({ model_sha256: "b".repeat(64) }))).rejects.toThrow(
      /different model sha256; refusing to mix/,
    );
    await expect(StoreWriter.open(store, init({ layers: [3] }))).rejects.toThrow(/different layers/);
    await expect(StoreWriter.open(store, init({ query_ids: init().query_ids.map((q) => q + "x") }))).rejects.toThrow(
      /different query ids/,
    );
  });

  it("refuses to continue or reopen a store recorded under another model name, naming both names", async () => {
    const partial = join(dir, "named-alpha");
    const w = await StoreWriter.open(partial, init({ model: "alpha" }));
    for (const layer of [2, 3]) await w.writeRowsF32(layer, 0, rows(layer).subarray(0, 10 * D));
    await w.commit(10);
    await w.close();
    const complete = await wholeStore("named-tiny");
    for (const [store, was] of [
      [partial, "alpha"],
      [complete, "tiny"],
    ] as const) {
      await expect(StoreWriter.open(store, init({ model: "beta" }))).rejects.toMatchObject({
        constructor: StoreError,
        message:
          `${store}: already holds a store made with a different model name (model "${was}", now "beta"); ` +
          "refusing to mix them. Use another --out folder, the same --model, or delete this one",
      });
      expect(parseManifest(readFileSync(join(store, "index.json"), "utf8"), "index.json").model).toBe(was);
    }
  });

  it("removes the temporary manifests a run killed while replacing index.json left, and nothing else", async () => {
    const store = join(dir, "left-temps");
    const w1 = await StoreWriter.open(store, init());
    for (const layer of [2, 3]) await w1.writeRowsF32(layer, 0, rows(layer).subarray(0, 10 * D));
    await w1.commit(10);
    await w1.close();
    const left = [".index.json.4242.3.tmp", ".index.json.17.0.tmp"];
    const kept = ["notes.txt", ".index.json.tmp", ".L002.npy.4242.1.tmp"];
    for (const name of [...left, ...kept]) writeFileSync(join(store, name), "{");
    const w2 = await StoreWriter.open(store, init());
    expect(w2.rowsDone).toBe(10);
    await w2.close();
    expect(readdirSync(store).sort()).toEqual(["L002.npy", "L003.npy", "index.json", ...kept].sort());
  });

  it("refuses to continue a store whose layers were read from other graph tensors", async () => {
    const style = (tensor: string) => ({
      name: "structural",
      layers: [
        { layer: 2, tensor: "/model/layers.2/Add_1_output_0", how: "structure" },
        { layer: 3, tensor, how: "structure" },
      ],
    });
    const store = join(dir, "styled");
    const w1 = await StoreWriter.open(store, init({ style: style("/model/layers.3/Add_1_output_0") }));
    for (const layer of [2, 3]) await w1.writeRowsF32(layer, 0, rows(layer).subarray(0, 15 * D));
    await w1.commit(15);
    await w1.close();
    await expect(StoreWriter.open(store, init({ style: style("/model/layers.3/Add_output_0") }))).rejects.toThrow(
      /read from other graph tensors \(style\); refusing to mix them/,
    );
    // The same tensors found another way write the same bytes: resumed.
    const found = { ...style("/model/layers.3/Add_1_output_0"), name: "explicit" };
    const w2 = await StoreWriter.open(store, init({ style: found }));
    expect(w2.rowsDone).toBe(15);
    await w2.close();
  });

  it("reopens a complete store as complete, writing nothing", async () => {
    const store = await wholeStore("whole-for-reopen");
    const before = readFileSync(join(store, "index.json"));
    const w = await StoreWriter.open(store, init());
    expect(w.complete).toBe(true);
    await expect(w.writeRows(2, 0, new Uint16Array(D))).rejects.toThrow(/is complete/);
    await w.finish();
    await w.close();
    expect(readFileSync(join(store, "index.json")).equals(before)).toBe(true);
  });

  it("will not read an incomplete store unless asked", async () => {
    const store = join(dir, "partial");
    const w = await StoreWriter.open(store, init());
    for (const layer of [2, 3]) await w.writeRowsF32(layer, 0, rows(layer).subarray(0, 10 * D));
    await w.commit(10);
    await w.close();
    await expect(StoreReader.open(store)).rejects.toThrow(
      /"complete" is false: 10 of 37 rows written.*--allow-incomplete/,
    );
    const r = await StoreReader.open(store, { allowIncomplete: true });
    expect(r.readableRows).toBe(10);
    await expect(r.readRows(2, 5, 6)).rejects.toThrow(RangeError);
    await r.close();
  });

  it("reads from any byte source: the same store held in memory", async () => {
    const store = await wholeStore("whole-for-memory");
    const files = new Map(readdirSync(store).map((name) => [name, new Uint8Array(readFileSync(join(store, name)))]));
    const r = await StoreReader.open(memoryBackend(files, "mem"));
    const fromDisk = await StoreReader.open(store);
    expect(Array.from(await r.readRows(2, 3, 4))).toEqual(Array.from(await fromDisk.readRows(2, 3, 4)));
    await fromDisk.close();
    // A header that disagrees with the manifest is caught at open.
    const bad = new Map(files);
    const l2 = new Uint8Array(files.get("L002.npy")!);
    l2.set(Buffer.from("(36, 8)"), Buffer.from(l2).indexOf("(37, 8)"));
    bad.set("L002.npy", l2);
    await expect(StoreReader.open(memoryBackend(bad, "mem"))).rejects.toThrow(
      /mem\/L002\.npy: npy header shape: header shape is \(36, 8\), the manifest says \(37, 8\)/,
    );
    // Each mismatch names the header field it concerns.
    for (const [from, to, field] of [
      ["'<f2'", "'<f4'", "descr"],
      ["False", "True ", "fortran_order"],
    ]) {
      const header = new Uint8Array(files.get("L002.npy")!);
      header.set(Buffer.from(to!), Buffer.from(header).indexOf(from!));
      await expect(StoreReader.open(memoryBackend(new Map([...files, ["L002.npy", header]]), "mem"))).rejects.toThrow(
        new RegExp(`^mem/L002\\.npy: npy header ${field}: `),
      );
    }
  });

  it("rejects rows that do not fit", async () => {
    const store = join(dir, "fit");
    const w = await StoreWriter.open(store, init());
    await expect(w.writeRows(2, 36, new Uint16Array(2 * D))).rejects.toThrow(/inside the store/);
    await expect(w.writeRows(2, 0, new Uint16Array(D + 1))).rejects.toThrow(/whole rows of width 8/);
    await expect(w.commit(38)).rejects.toThrow(RangeError);
    await w.close();
  });
});

describe("store errors name the file and say what is wrong", () => {
  it("a folder without index.json is not a store", async () => {
    const store = join(dir, "empty-folder");
    mkdirSync(store);
    await expect(StoreReader.open(store)).rejects.toMatchObject({
      constructor: StoreError,
      message: `${store}: has no index.json; is this a hidden-state store?`,
      exitCode: EXIT.data,
    });
  });

  it("an index.json that cannot be read is unreadable, not missing", async () => {
    const store = join(dir, "manifest-folder");
    mkdirSync(join(store, "index.json"), { recursive: true });
    await expect(StoreReader.open(store)).rejects.toMatchObject({
      constructor: FileError,
      message: `${store}/index.json: cannot be read: it is a directory (EISDIR)`,
      exitCode: EXIT.data,
    });
  });

  it("a layer file that is gone, or a link, is named", async () => {
    const store = await wholeStore("whole-for-errors");
    renameSync(join(store, "L003.npy"), join(store, "moved.npy"));
    await expect(StoreReader.open(store)).rejects.toMatchObject({
      constructor: FileError,
      message: `${store}/L003.npy: does not exist`,
      exitCode: EXIT.data,
    });
    symlinkSync(join(store, "moved.npy"), join(store, "L003.npy"));
    await expect(StoreReader.open(store)).rejects.toMatchObject({
      constructor: FileError,
      message: `${store}/L003.npy: is a symbolic link, which hsm does not follow here`,
      exitCode: EXIT.data,
    });
  });

  it("only store file names are ever opened, and a missing file in memory is missing", async () => {
    const backend = memoryBackend(new Map(), "mem");
    await expect(backend.readAll("../secret")).rejects.toMatchObject({
      constructor: StoreError,
      message: 'mem: refusing to open "../secret", which is not a store file name (index.json or L###.npy)',
    });
    await expect(backend.readAll("index.json")).rejects.toMatchObject({
      constructor: FileError,
      message: "mem/index.json: does not exist",
      code: "ENOENT",
    });
    await expect(StoreReader.open(memoryBackend(new Map(), "mem"))).rejects.toMatchObject({
      constructor: StoreError,
      message: "mem: has no index.json; is this a hidden-state store?",
    });
  });

  it("a store that cannot be created names the path and the reason", async () => {
    const notAFolder = join(dir, "a-file");
    writeFileSync(notAFolder, "x");
    const store = join(notAFolder, "store");
    await expect(StoreWriter.open(store, init())).rejects.toMatchObject({
      constructor: FileError,
      message: `${store}: cannot be written: a component of the path is not a directory (ENOTDIR)`,
      problem: "unwritable",
      exitCode: EXIT.data,
    });
  });

  it("a store to resume whose manifest cannot be read is unreadable", async () => {
    const store = join(dir, "resume-unreadable");
    mkdirSync(join(store, "index.json"), { recursive: true });
    await expect(StoreWriter.open(store, init())).rejects.toMatchObject({
      constructor: FileError,
      message: `${store}/index.json: cannot be read: it is a directory (EISDIR)`,
      exitCode: EXIT.data,
    });
  });

  it("a lock in a folder that does not exist names the lock file", async () => {
    const store = join(dir, "never-made");
    await expect(acquireLock(store)).rejects.toMatchObject({
      constructor: FileError,
      message: `${store}/.hsm.lock: cannot be written: its folder does not exist (ENOENT)`,
      exitCode: EXIT.data,
    });
  });
});
