/**
 * Stores written by other tools: the same data under the manifests other tools
 * write must read back exactly as hsm's own store of it, with fact ids and
 * families from the bank; what cannot be trusted is refused, naming why.
 */
import { createHash } from "node:crypto";
import { copyFileSync, existsSync, mkdirSync, readdirSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { join } from "node:path";

import { beforeAll, describe, expect, it } from "vitest";

import { readBank } from "../../src/bank/bank.js";
import { EXIT, ManifestError, StoreError } from "../../src/errors.js";
import { writeFixture } from "../../src/synthetic/store.js";
import { computeMetrics } from "../../src/metrics/compute.js";
import { adoptStore } from "../../src/store/adopt.js";
import { f16ToF32 } from "../../src/kernels/typescript/float16.js";
import { writeNpyFile } from "../../src/store/npy-file.js";
import { StoreReader } from "../../src/store/reader.js";
import { verifyStore } from "../../src/store/verify.js";
import { tempDir } from "../helpers/tmp.js";

const dir = tempDir("hsm-foreign-");
const fx = { bank: join(dir, "fx", "bank.jsonl"), store: join(dir, "fx", "store") };
const LAYER_FILES = ["L002.npy", "L003.npy", "L004.npy", "L005.npy"];
let native: { query_ids: string[]; fact_ids: string[]; condition_families: string[]; layers: number[] };

const sha256 = (path: string) => createHash("sha256").update(readFileSync(path)).digest("hex");

beforeAll(async () => {
  await writeFixture(join(dir, "fx"), { facts: 9, d: 8, layersTotal: 6, seed: 11, nonfiniteRows: 1 });
  native = JSON.parse(readFileSync(join(fx.store, "index.json"), "utf8"));
});

/** A folder holding copies of the native store's layer files and, if given, this index.json. */
function foreignStore(name: string, index?: unknown): string {
  const store = join(dir, name);
  mkdirSync(store, { recursive: true });
  for (const f of LAYER_FILES) copyFileSync(join(fx.store, f), join(store, f));
  if (index !== undefined) writeFileSync(join(store, "index.json"), JSON.stringify(index));
  return store;
}

/** Every row of every layer, as float16 bits, with the row metadata. */
async function contents(store: string, bank?: string): Promise<unknown> {
  const r = await StoreReader.open(store, bank ? { bank } : {});
  try {
    const layers: Record<number, number[]> = {};
    for (const l of r.manifest.layers) layers[l] = Array.from(await r.readRows(l, 0, r.rows));
    const m = r.manifest;
    return {
      query_ids: m.query_ids,
      fact_ids: m.fact_ids,
      condition_families: m.condition_families,
      layers: m.layers,
      d: m.d_model,
      rows: layers,
    };
  } finally {
    await r.close();
  }
}

describe("reading a store written by another tool", () => {
  it("with only row order, layers, checksums and complete: the same rows, facts and families as the native store", async () => {
    const store = foreignStore("python-pipeline", {
      query_order: native.query_ids,
      layers: native.layers,
      files: Object.fromEntries(LAYER_FILES.map((f) => [f, { sha256: sha256(join(fx.store, f)) }])),
      complete: true,
    });
    expect(await contents(store, fx.bank)).toEqual(await contents(fx.store));
  });

  it("with a {file: sha256} map and layers from the file names", async () => {
    const store = foreignStore("checksum-map", {
      query_ids: native.query_ids,
      checksums: Object.fromEntries(LAYER_FILES.map((f) => [f, sha256(join(fx.store, f))])),
    });
    expect(await contents(store, fx.bank)).toEqual(await contents(fx.store));
    const r = await StoreReader.open(store, { bank: await readBank(fx.bank) });
    expect(r.foreign?.complete).toBeUndefined();
    expect(r.manifest).toMatchObject({
      complete: true,
      num_layers: 6,
      layer_rule: "l/(L-1) >= 0.4",
      model: "checksum-map",
      last_layer_final_norm: true,
    });
    await r.close();
  });

  it("with rows that carry their own fact ids and families, ISS needs no bank and equals the native store's", async () => {
    const store = foreignStore("self-described", {
      rows: native.query_ids.map((q, i) => ({
        query_id: q,
        fact_id: native.fact_ids[i],
        condition_family: native.condition_families[i],
      })),
      sha256: LAYER_FILES.map((f) => ({ file: f, sha256: sha256(join(fx.store, f)) })),
    });
    const options = { metrics: ["iss" as const], bootstrap: 40, backend: "typescript" as const };
    const ours = await computeMetrics(fx.store, options);
    const theirs = await computeMetrics(store, options);
    expect(theirs.rows.iss).toEqual(ours.rows.iss);
  });

  it("in float32: converted to float16 on read, exactly as the native store holds it", async () => {
    const index = { query_ids: native.query_ids, checksums: {} as Record<string, string> };
    const store = join(dir, "float32");
    mkdirSync(store);
    const r = await StoreReader.open(fx.store);
    for (const l of r.manifest.layers) {
      const wide = new Float32Array(r.rows * r.dModel);
      f16ToF32(await r.readRows(l, 0, r.rows), wide);
      const path = join(store, `L00${l}.npy`);
      await writeNpyFile(path, [r.rows, r.dModel], wide);
      index.checksums[`L00${l}.npy`] = sha256(path);
    }
    await r.close();
    writeFileSync(join(store, "index.json"), JSON.stringify(index));
    expect(await contents(store, fx.bank)).toEqual(await contents(fx.store));
    const f = await StoreReader.open(store, { bank: fx.bank });
    const g = await StoreReader.open(fx.store);
    expect(Array.from(await f.readRowsF32(4, 3, 2))).toEqual(Array.from(await g.readRowsF32(4, 3, 2)));
    await Promise.all([f.close(), g.close()]);
  });

  it.each([
    [
      "a layer file in the folder without a checksum",
      { query_ids: ["a"], checksums: {} },
      undefined,
      "index.json: records no checksum for L002.npy, so its content cannot be trusted",
    ],
    [
      "no row order",
      { checksums: {} },
      undefined,
      'index.json: gives no row order: expected a list of query ids (or of objects with "query_id") under one of query_ids, query_order, queries, rows',
    ],
    [
      "no checksums",
      { query_ids: ["a"], layers: [2] },
      undefined,
      'index.json: records no checksums: expected a {file: sha256} map, or per-file entries with "sha256", under one of files, checksums, sha256',
    ],
    [
      "a checksum for a name outside the store",
      { query_ids: ["a"], checksums: { "../L002.npy": "0".repeat(64) } },
      undefined,
      'index.json: "checksums" names "../L002.npy", which is not a plain L###.npy file inside the store; it was not opened',
    ],
    [
      "a layer without a checksum",
      { query_ids: ["a"], layers: [2, 3], checksums: { "L002.npy": "0".repeat(64) } },
      undefined,
      'index.json: "checksums" has no checksum for layer 3 (L003.npy)',
    ],
    [
      "fact ids that are not strings",
      { query_ids: ["a", "b"], fact_ids: [602, 603], checksums: { "L002.npy": "0".repeat(64) } },
      fx.bank,
      'index.json: "fact_ids" expected a list of strings, one per row, but entry 0 is 602',
    ],
    [
      "a row whose family is not a string",
      { rows: [{ query_id: "a", fact_id: "f", condition_family: 1 }], checksums: { "L002.npy": "0".repeat(64) } },
      fx.bank,
      'index.json: "rows" entry 0 has condition_family 1, expected a string',
    ],
    [
      "a checksum for a layer its list leaves out",
      { query_ids: ["a"], layers: [2], checksums: { "L002.npy": "0".repeat(64), "L003.npy": "0".repeat(64) } },
      undefined,
      'index.json: "layers" does not list layer 3, which "checksums" names (L003.npy)',
    ],
  ])("refuses a manifest with %s", async (_what, index, bank, tail) => {
    const store = foreignStore(`refuse-${tail.length}`, index);
    await expect(StoreReader.open(store, bank ? { bank } : {})).rejects.toMatchObject({
      constructor: ManifestError,
      message: `${store}/${tail}`,
      exitCode: EXIT.data,
    });
  });

  it("refuses a row order nested deeper than any check walks, in one line", async () => {
    // Quoting the bad entry in the error would overflow the stack.
    const store = foreignStore("deep");
    writeFileSync(join(store, "index.json"), `{"query_ids": [${"[".repeat(100_000)}${"]".repeat(100_000)}]}`);
    const message = "index.json: is not valid JSON (it nests arrays and objects more than 64 levels deep)";
    await expect(StoreReader.open(store, { bank: fx.bank })).rejects.toThrow(`${store}/${message}`);
    expect((await verifyStore(store)).problems.map((p) => `${p.file}: ${p.message}`)).toEqual([message]);
  });

  it("asks for the bank when the manifest records no fact ids", async () => {
    const store = foreignStore("no-bank", {
      query_ids: native.query_ids,
      checksums: Object.fromEntries(LAYER_FILES.map((f) => [f, sha256(join(fx.store, f))])),
    });
    await expect(StoreReader.open(store)).rejects.toMatchObject({
      constructor: ManifestError,
      message: `${store}/index.json: records no fact ids or condition families; pass the query bank (--bank BANK) to take them from it`,
      exitCode: EXIT.data,
    });
  });

  it("names the file whose width the others are held to, where the manifest records none", async () => {
    const store = foreignStore("other-width");
    const n = native.query_ids.length;
    // The same bytes read as half the rows of twice the width: a file of another width, its size unchanged.
    const path = join(store, "L004.npy");
    const b = readFileSync(path);
    b.set(Buffer.from(`(${n / 2}, 16)`.padEnd(`(${n}, 8)`.length)), b.indexOf(`(${n}, 8)`));
    writeFileSync(path, b);
    writeFileSync(
      join(store, "index.json"),
      JSON.stringify({
        query_ids: native.query_ids,
        checksums: Object.fromEntries(LAYER_FILES.map((f) => [f, sha256(join(store, f))])),
      }),
    );
    await expect(StoreReader.open(store, { bank: fx.bank })).rejects.toThrow(
      `${path}: npy header shape: header shape is (${n / 2}, 16), expected (${n}, 8): one row per query of the row order, width 8 as L002.npy has`,
    );
  });

  it("names the first row whose query the bank lacks", async () => {
    const ids = [...native.query_ids];
    ids[3] = "query_from_elsewhere";
    const store = foreignStore("bank-mismatch", {
      query_ids: ids,
      checksums: Object.fromEntries(LAYER_FILES.map((f) => [f, sha256(join(fx.store, f))])),
    });
    await expect(StoreReader.open(store, { bank: fx.bank })).rejects.toMatchObject({
      constructor: ManifestError,
      message: `${store}/index.json: "query_ids" row 3 is query "query_from_elsewhere", which the bank ${fx.bank} lacks (1 of ${ids.length} rows are not in it); is this the bank the store was made from?`,
    });
  });
});

describe("adoptStore", () => {
  it("writes the manifest hsm would have written for a bare folder of L###.npy: verify passes and the rows equal the native store's", async () => {
    const store = foreignStore("bare");
    const m = await adoptStore(store, { bank: fx.bank, model: "synthetic-fixture" });
    const ours = JSON.parse(readFileSync(join(fx.store, "index.json"), "utf8"));
    expect(m.files).toEqual(ours.files);
    for (const key of [
      "query_ids",
      "fact_ids",
      "condition_families",
      "layers",
      "num_layers",
      "d_model",
      "layer_rule",
      "model",
      "complete",
      "rows_done",
    ]) {
      expect(m[key as keyof typeof m]).toEqual(ours[key]);
    }
    const report = await verifyStore(store);
    expect(report.problems).toEqual([]);
    expect(await contents(store)).toEqual(await contents(fx.store));
    expect(readdirSync(store).sort()).toEqual([...LAYER_FILES, "index.json"]);
  });

  it("keeps a foreign index.json as index.orig.json and takes its row order and checksums", async () => {
    const index = {
      query_order: native.query_ids,
      checksums: Object.fromEntries(LAYER_FILES.map((f) => [f, sha256(join(fx.store, f))])),
      complete: true,
    };
    const store = foreignStore("with-index", index);
    const before = readFileSync(join(store, "index.json"));
    const m = await adoptStore(store, { bank: fx.bank });
    expect(readFileSync(join(store, "index.orig.json")).equals(before)).toBe(true);
    expect(m.model).toBe("with-index");
    expect((await verifyStore(store)).ok).toBe(true);
    // A second adoption finds hsm's own manifest and changes nothing.
    const again = readFileSync(join(store, "index.json"));
    await adoptStore(store, { bank: fx.bank });
    expect(readFileSync(join(store, "index.json")).equals(again)).toBe(true);
  });

  it("refuses a file whose checksum disagrees with its manifest, writing nothing", async () => {
    const sums = Object.fromEntries(LAYER_FILES.map((f) => [f, sha256(join(fx.store, f))]));
    sums["L004.npy"] = "f".repeat(64);
    const store = foreignStore("bad-sum", { query_ids: native.query_ids, checksums: sums });
    await expect(adoptStore(store, { bank: fx.bank })).rejects.toMatchObject({
      constructor: StoreError,
      message: `${join(store, "L004.npy")}: sha256 is ${sha256(join(fx.store, "L004.npy"))}, its manifest says ${"f".repeat(64)}: the file changed after it was written; not adopted`,
      exitCode: EXIT.data,
    });
    expect(existsSync(join(store, "index.orig.json"))).toBe(false);
    expect(JSON.parse(readFileSync(join(store, "index.json"), "utf8")).checksums).toEqual(sums);
  });

  it("refuses a store whose manifest checksums a layer file the folder lacks, in adopting and in reading", async () => {
    const sums = Object.fromEntries(LAYER_FILES.map((f) => [f, sha256(join(fx.store, f))]));
    const store = foreignStore("gone-file", { query_ids: native.query_ids, checksums: sums });
    rmSync(join(store, "L005.npy"));
    await expect(adoptStore(store, { bank: fx.bank })).rejects.toMatchObject({
      constructor: StoreError,
      message: `${join(store, "L005.npy")}: has a checksum in the manifest but is not in the store folder`,
    });
    expect(existsSync(join(store, "index.orig.json"))).toBe(false);
    await expect(StoreReader.open(store, { bank: fx.bank })).rejects.toThrow(/L005\.npy/);
  });

  it("refuses files whose rows are not the bank's main-forward rows", async () => {
    const store = foreignStore("wrong-rows");
    const lines = readFileSync(fx.bank, "utf8").trim().split("\n");
    const bank = join(dir, "short-bank.jsonl");
    writeFileSync(bank, lines.filter((l) => !l.includes(native.query_ids[0]!)).join("\n") + "\n");
    const n = native.query_ids.length - 1;
    await expect(adoptStore(store, { bank })).rejects.toMatchObject({
      constructor: StoreError,
      // No manifest: the rows are the bank's, the width the first file's.
      message: `${join(store, "L002.npy")}: header shape is (${n + 1}, 8), expected (${n}, 8): one row per query of the row order, width 8 as L002.npy has`,
    });
  });
});

describe("verifying a store written by another tool", () => {
  const sums = () => Object.fromEntries(LAYER_FILES.map((f) => [f, sha256(join(fx.store, f))]));

  it("checks what it records and notes what it does not", async () => {
    const store = foreignStore("verify-good", {
      query_order: native.query_ids,
      layers: native.layers,
      checksums: sums(),
      complete: true,
    });
    const r = await verifyStore(store, { bank: fx.bank });
    expect(r.problems).toEqual([]);
    expect(r).toMatchObject({ ok: true, foreign: true, complete: true, rows: native.query_ids.length });
    expect(r.notes.map((n) => `${n.file}: [${n.note}] ${n.message}`)).toEqual([
      "index.json: [not-recorded] records no fact ids or condition families (they come from the bank)",
      "index.json: [not-recorded] does not name the model",
      "index.json: [not-recorded] does not record the model's block count (taken as the highest stored layer + 1)",
      "index.json: [not-recorded] does not record d_model (the .npy headers give it)",
      "index.json: [not-recorded] records no non-finite counts (counted here instead)",
      "index.json: [not-recorded] records no model checksum, prompt settings, byte sizes, largest magnitudes or provenance",
    ]);
    // The counts hsm would have recorded, recounted: the fixture plants one inf in the last layer.
    const ours = JSON.parse(readFileSync(join(fx.store, "index.json"), "utf8"));
    expect(r.files.map((f) => [f.name, f.nonfinite, f.max_abs])).toEqual(
      LAYER_FILES.map((f) => [f, ours.files[f].nonfinite, ours.files[f].max_abs]),
    );
    const bare = await verifyStore(store);
    expect(bare.ok).toBe(true);
    expect(bare.notes.at(-1)).toEqual({
      file: "index.json",
      note: "no-bank",
      message: "no bank given: the rows' query ids were not checked against one (the metrics need --bank BANK)",
    });
  });

  it("counts float32 files too", async () => {
    const store = join(dir, "verify-f32");
    mkdirSync(store);
    const values = Float32Array.from([1.5, -Infinity, 3e38, NaN, -7, 0]);
    await writeNpyFile(join(store, "L004.npy"), [3, 2], values);
    writeFileSync(
      join(store, "index.json"),
      JSON.stringify({ query_ids: ["a", "b", "c"], checksums: { "L004.npy": sha256(join(store, "L004.npy")) } }),
    );
    const r = await verifyStore(store, { concurrency: 1 });
    expect(r.problems).toEqual([]);
    expect(r.files).toEqual([
      {
        name: "L004.npy",
        bytes: 128 + 24,
        sha256: sha256(join(store, "L004.npy")),
        nonfinite: 2,
        max_abs: Math.fround(3e38),
        ok: true,
      },
    ]);
  });

  it.each([
    [
      "a changed file",
      (s: string) => {
        const b = readFileSync(join(s, "L003.npy"));
        b[b.length - 1]! ^= 0x01;
        writeFileSync(join(s, "L003.npy"), b);
      },
      (_s: string) => [
        /^L003\.npy: \[sha256\] sha256 is [0-9a-f]{64}, the manifest says [0-9a-f]{64}: the file changed after it was written$/,
      ],
    ],
    [
      "a truncated file",
      (s: string) => writeFileSync(join(s, "L002.npy"), readFileSync(join(s, "L002.npy")).subarray(0, 300)),
      (_s: string) => [
        `L002.npy: [npy-header] header shape (${native.query_ids.length}, 8) needs ${128 + native.query_ids.length * 16} bytes but the file holds 300 (truncated)`,
      ],
    ],
    [
      "a file of another width",
      (s: string) => {
        const b = readFileSync(join(s, "L004.npy"));
        b.set(
          Buffer.from(`(${native.query_ids.length / 2}, 16)`.padEnd(`(${native.query_ids.length}, 8)`.length)),
          b.indexOf(`(${native.query_ids.length}, 8)`),
        );
        writeFileSync(join(s, "L004.npy"), b);
      },
      (_s: string) => [
        // The manifest records no width: the first file's is expected, and named.
        `L004.npy: [npy-header] header shape is (${native.query_ids.length / 2}, 16), expected (${native.query_ids.length}, 8): one row per query of the row order, width 8 as L002.npy has`,
      ],
    ],
    [
      "a layer file without a checksum",
      (s: string) => copyFileSync(join(s, "L002.npy"), join(s, "L001.npy")),
      (_s: string) => ["L001.npy: [sha256-missing] has no checksum in the manifest, so its content cannot be trusted"],
    ],
  ])("reports %s", async (what, change, expected) => {
    const store = foreignStore(`verify-${what.replace(/ /g, "-")}`, { query_ids: native.query_ids, checksums: sums() });
    change(store);
    const r = await verifyStore(store, { bank: fx.bank });
    const lines = r.problems.map((p) => `${p.file}: [${p.problem}] ${p.message}`);
    const want = expected(store);
    expect(lines).toHaveLength(want.length);
    want.forEach((w, i) => (typeof w === "string" ? expect(lines[i]).toBe(w) : expect(lines[i]).toMatch(w)));
    expect(r.ok).toBe(false);
  });

  /** The foreign manifest of `store` rewritten by `edit`, its checksums those of the files as they are now. */
  const remanifest = (store: string, edit: (m: Record<string, unknown>) => void) => {
    const m = JSON.parse(readFileSync(join(store, "index.json"), "utf8")) as Record<string, unknown>;
    m.checksums = Object.fromEntries(
      LAYER_FILES.filter((f) => existsSync(join(store, f))).map((f) => [f, sha256(join(store, f))]),
    );
    edit(m);
    writeFileSync(join(store, "index.json"), JSON.stringify(m));
  };

  /** The manifest's checksums as per-file entries, with `extra` fields added to the files it names. */
  const entries = (m: Record<string, unknown>, extra: Record<string, Record<string, unknown>>) => {
    const sums = Object.entries(m.checksums as Record<string, string>);
    m.checksums = Object.fromEntries(sums.map(([f, sha256]) => [f, { sha256, ...extra[f] }]));
  };

  it.each([
    [
      "a layer file of one dimension",
      async (s: string) => {
        const file = readFileSync(join(s, "L002.npy"));
        const bits = new Uint16Array(file.buffer.slice(file.byteOffset + 128, file.byteOffset + file.length));
        await writeNpyFile(join(s, "L002.npy"), [bits.length], bits);
        remanifest(s, () => {});
      },
      (n: number) => [`L002.npy: [npy-header] header shape is (${8 * n}), expected two dimensions (rows, d_model)`],
    ],
    [
      "a first layer file of width 0, the others held to the next file's width",
      async (s: string) => {
        await writeNpyFile(join(s, "L002.npy"), [native.query_ids.length, 0], new Uint16Array(0));
        remanifest(s, () => {});
      },
      (n: number) => [`L002.npy: [npy-header] header shape is (${n}, 0): rows of width 0 hold no states`],
    ],
    [
      "a checksummed file that is gone",
      (s: string) => remanifest(s, () => rmSync(join(s, "L004.npy"))),
      () => ["L004.npy: [file-missing] is listed in the manifest but missing"],
    ],
    [
      "two different checksums for one file",
      (s: string) =>
        remanifest(s, (m) => {
          const sums = Object.entries(m.checksums as Record<string, string>);
          m.checksums = [
            { file: "L002.npy", sha256: "0".repeat(64) },
            ...sums.map(([file, h]) => ({ file, sha256: h })),
          ];
        }),
      () => [
        /^index\.json: \[manifest-field\] "checksums\.L002\.npy" records two different sha256 for L002\.npy \(0{64} and [0-9a-f]{64}\)$/,
      ],
    ],
    [
      "more rows done than rows",
      (s: string) => remanifest(s, (m) => (m.rows_done = 1000)),
      (n: number) => [`index.json: [manifest-field] "rows_done" is 1000 but the row order has ${n} rows`],
    ],
    [
      "a block count that is not a number",
      (s: string) => remanifest(s, (m) => Object.assign(m, { num_layers: "6", d_model: null })),
      () => ['index.json: [manifest-field] "num_layers" expected a non-negative integer but found "6"'],
    ],
    [
      "a width of 0",
      (s: string) => remanifest(s, (m) => Object.assign(m, { d_model: 0 })),
      () => ['index.json: [manifest-field] "d_model" is 0: a model has blocks, and its states have width'],
    ],
    [
      "a complete store with rows left",
      (s: string) => remanifest(s, (m) => Object.assign(m, { complete: true, rows_done: 50 })),
      (n: number) => [`index.json: [manifest-field] "rows_done" is 50 but a complete store has all ${n} rows written`],
    ],
    [
      "listed layers beyond the block count",
      (s: string) => remanifest(s, (m) => Object.assign(m, { layers: [2, 3, 4, 5], num_layers: 4 })),
      () => [`index.json: [manifest-field] "layers" holds layer 4, outside 0…3 for num_layers 4`],
    ],
    [
      "a file entry whose non-finite count is not a count",
      (s: string) => remanifest(s, (m) => entries(m, { "L005.npy": { nonfinite: "1" } })),
      () => [
        'index.json: [manifest-field] "checksums.L005.npy.nonfinite" expected a non-negative integer but found "1"',
      ],
    ],
    [
      "a megabyte where a count belongs, quoted in 80 characters",
      (s: string) => remanifest(s, (m) => (m.rows_done = "9".repeat(1 << 20))),
      () => [`index.json: [manifest-field] "rows_done" expected a non-negative integer but found "${"9".repeat(79)}…`],
    ],
    [
      "a megabyte query id listed twice, quoted in 80 characters",
      (s: string) => remanifest(s, (m) => (m.query_ids = ["q".repeat(1 << 20), "q".repeat(1 << 20)])),
      () => [`index.json: [manifest-field] "query_ids" lists "${"q".repeat(79)}… twice`],
    ],
    [
      "a checksummed layer file the layer list leaves out",
      (s: string) => remanifest(s, (m) => (m.layers = [2, 3, 4])),
      () => ['index.json: [manifest-field] "layers" does not list layer 5, which "checksums" names (L005.npy)'],
    ],
    [
      "a file entry whose shape is not its header's",
      (s: string) => remanifest(s, (m) => entries(m, { "L003.npy": { shape: [native.query_ids.length, 16] } })),
      (n: number) => [`L003.npy: [npy-header] header shape is (${n}, 8), the manifest says (${n}, 16)`],
    ],
    [
      "a file entry whose size is not the file's",
      (s: string) => remanifest(s, (m) => entries(m, { "L004.npy": { bytes: 100 } })),
      (n: number) => [`L004.npy: [size] is ${128 + n * 16} bytes but the manifest says 100`],
    ],
    [
      "a file entry whose layer is not its name's",
      (s: string) => remanifest(s, (m) => entries(m, { "L002.npy": { layer: 3 } })),
      () => ['index.json: [manifest-field] "checksums.L002.npy.layer" is 3 but the name says 2'],
    ],
    [
      "layer files beyond the block count",
      (s: string) => remanifest(s, (m) => (m.num_layers = 5)),
      () => ["index.json: [manifest-field] the folder's layer files: holds layer 5, outside 0…4 for num_layers 5"],
    ],
  ])("refuses %s", async (what, change, expectedFor) => {
    const expected: (string | RegExp)[] = expectedFor(native.query_ids.length);
    const store = foreignStore(`verify-${what.replace(/ /g, "-")}`, { query_ids: native.query_ids, checksums: sums() });
    await change(store);
    const r = await verifyStore(store, { bank: fx.bank });
    const lines = r.problems.map((p) => `${p.file}: [${p.problem}] ${p.message}`);
    expect(lines).toHaveLength(expected.length);
    expected.forEach((w, i) => (typeof w === "string" ? expect(lines[i]).toBe(w) : expect(lines[i]).toMatch(w)));
    expect(r.ok).toBe(false);
  });

  it("refuses, in reading and in adopting, a file whose header's shape is not the one its entry records", async () => {
    const n = native.query_ids.length;
    const store = foreignStore("entry-shape", { query_ids: native.query_ids, checksums: sums() });
    remanifest(store, (m) => entries(m, { "L003.npy": { shape: [n, 16] } }));
    const message = `header shape is (${n}, 8), the manifest says (${n}, 16)`;
    await expect(StoreReader.open(store, { bank: fx.bank })).rejects.toThrow(
      `${join(store, "L003.npy")}: npy header shape: ${message}`,
    );
    await expect(adoptStore(store, { bank: fx.bank })).rejects.toThrow(`${join(store, "L003.npy")}: ${message}`);
    expect(existsSync(join(store, "index.orig.json"))).toBe(false);
    // The shapes and sizes the files have are taken, and the notes no longer say sizes are missing.
    remanifest(store, (m) =>
      entries(m, Object.fromEntries(LAYER_FILES.map((f) => [f, { shape: [n, 8], bytes: 128 + n * 16, layer: null }]))),
    );
    const r = await verifyStore(store, { bank: fx.bank });
    expect(r.problems).toEqual([]);
    expect(r.notes.at(-1)?.message).toBe(
      "records no model checksum, prompt settings, largest magnitudes or provenance",
    );
    expect(await contents(store, fx.bank)).toEqual(await contents(fx.store));
  });

  it("refuses, in reading and in adopting, a first layer file of three dimensions where no width is recorded", async () => {
    const n = native.query_ids.length;
    // No manifest records d_model, and the first file has no width to take: two dimensions are expected, as verify says.
    const message = `header shape is (${n}, 4, 2), expected two dimensions (rows, d_model)`;
    const reshape = async (s: string) => {
      const file = readFileSync(join(s, "L002.npy"));
      const bits = new Uint16Array(file.buffer.slice(file.byteOffset + 128, file.byteOffset + file.length));
      await writeNpyFile(join(s, "L002.npy"), [n, 4, 2], bits);
    };
    const store = foreignStore("three-dimensions", { query_ids: native.query_ids, checksums: sums() });
    await reshape(store);
    remanifest(store, () => {});
    expect((await verifyStore(store, { bank: fx.bank })).problems.map((p) => p.message)).toEqual([message]);
    await expect(StoreReader.open(store, { bank: fx.bank })).rejects.toMatchObject({
      message: `${join(store, "L002.npy")}: npy header shape: ${message}`,
    });
    await expect(adoptStore(store, { bank: fx.bank })).rejects.toMatchObject({
      message: `${join(store, "L002.npy")}: ${message}`,
    });
    const bare = foreignStore("three-dimensions-bare");
    await reshape(bare);
    await expect(adoptStore(bare, { bank: fx.bank })).rejects.toMatchObject({
      message: `${join(bare, "L002.npy")}: ${message}`,
    });
    expect(existsSync(join(bare, "index.json"))).toBe(false);
  });

  it("reports rows the bank lacks and a store incomplete by its own manifest", async () => {
    const ids = [...native.query_ids];
    ids[0] = "query_elsewhere";
    const store = foreignStore("verify-bank", { query_ids: ids, checksums: sums(), complete: false });
    const r = await verifyStore(store, { bank: fx.bank });
    expect(r.problems.map((p) => `${p.file}: [${p.problem}] ${p.message}`)).toEqual([
      "index.json: [incomplete] the store is incomplete by its own manifest (complete: false)",
      `index.json: [bank-join] "query_ids" row 0 is query "query_elsewhere", which the bank ${fx.bank} lacks (1 of ${ids.length} rows are not in it); is this the bank the store was made from?`,
    ]);
  });

  it("checks the rows against a given bank when the manifest carries their fact ids and families too", async () => {
    const ids = native.query_ids.map((q, i) => (i === 2 ? "query_elsewhere" : q));
    const rows = ids.map((q, i) => ({
      query_id: q,
      fact_id: native.fact_ids[i],
      condition_family: native.condition_families[i],
    }));
    const store = foreignStore("verify-bank-rows", { rows, checksums: sums(), complete: true });
    // Without the bank the rows need none; with it, they are checked against it.
    expect((await verifyStore(store)).ok).toBe(true);
    const r = await verifyStore(store, { bank: fx.bank });
    expect(r.problems.map((p) => `${p.file}: [${p.problem}] ${p.message}`)).toEqual([
      `index.json: [bank-join] "query_ids" row 2 is query "query_elsewhere", which the bank ${fx.bank} lacks (1 of ${ids.length} rows are not in it); is this the bank the store was made from?`,
    ]);
  });

  it("takes a store whose rows_done falls short, with no complete flag, as incomplete", async () => {
    const n = native.query_ids.length;
    const store = foreignStore("rows-short", { query_ids: native.query_ids, checksums: sums(), rows_done: 5 });
    const r = await verifyStore(store, { bank: fx.bank });
    expect(r.problems.map((p) => `${p.file}: [${p.problem}] ${p.message}`)).toEqual([
      `index.json: [incomplete] the store is incomplete by its own manifest (rows_done: 5 of ${n} rows, and no "complete" flag)`,
    ]);
    await expect(StoreReader.open(store, { bank: fx.bank })).rejects.toThrow(
      `index.json: "rows_done" is 5 of ${n} rows, and no "complete" flag is recorded. Finish the run, or read the rows so far with hsm metrics --allow-incomplete`,
    );
    const reader = await StoreReader.open(store, { bank: fx.bank, allowIncomplete: true });
    try {
      expect(reader.manifest.complete).toBe(false);
      expect(reader.readableRows).toBe(5);
    } finally {
      await reader.close();
    }
    // Its checksums are not held against its files, as an unfinished store's are not: a byte changed past
    // rows_done adds nothing to the report.
    const path = join(store, "L002.npy");
    const bytes = readFileSync(path);
    bytes[bytes.length - 1]! ^= 0xff;
    writeFileSync(path, bytes);
    expect((await verifyStore(store, { bank: fx.bank })).problems.map((p) => p.problem)).toEqual(["incomplete"]);
    // Nor is it adopted.
    await expect(adoptStore(store, { bank: fx.bank })).rejects.toThrow(
      `is incomplete by its own manifest (rows_done: 5 of ${n} rows); finish writing it before adopting it`,
    );
    // All rows done without the flag: complete.
    const whole = foreignStore("rows-whole", { query_ids: native.query_ids, checksums: sums(), rows_done: n });
    expect((await verifyStore(whole, { bank: fx.bank })).ok).toBe(true);
  });
});
