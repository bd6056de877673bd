/**
 * A full disk loses nothing: a store that does not fit is refused before a
 * byte is written; files are allocated for real; a write that fails (ENOSPC
 * on a small tmpfs, an injected EIO elsewhere) names its file, leaves the last
 * committed row and the manifest intact, and a resume gives the bytes of an
 * uninterrupted run. The same for merge and adopt. The tmpfs cases mount a
 * file system of their own and so need root (CI runs as root); elsewhere they
 * are skipped and the injected-error cases still run.
 */
import { execFileSync } from "node:child_process";
import {
  copyFileSync,
  mkdirSync,
  mkdtempSync,
  readdirSync,
  readFileSync,
  rmSync,
  statSync,
  statfsSync,
  truncateSync,
  unlinkSync,
  writeFileSync,
} from "node:fs";
import type { FileHandle } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";

import { afterAll, beforeAll, describe, expect, it } from "vitest";

import { DiskSpaceError, FileError } from "../../src/errors.js";
import { writeFixture } from "../../src/synthetic/store.js";
import { computeMetrics } from "../../src/metrics/compute.js";
import { writeResults } from "../../src/metrics/report.js";
import { adoptStore } from "../../src/store/adopt.js";
import { mergeShards } from "../../src/store/merge.js";
import { StoreWriter, type StoreInit } from "../../src/store/writer.js";
import { Rng } from "../../src/util/random.js";
import { tempDir } from "../helpers/tmp.js";

const N = 2000;
const D = 256;
const LAYERS = [2, 3];
/** One layer file: a 128-byte header and N × D float16 values. */
const FILE_BYTES = 128 + N * D * 2;

const dir = tempDir("hsm-disk-");
const data = new Map(LAYERS.map((l) => [l, new Rng(5, l).fillNormal(new Float32Array(N * D), 30)]));

function init(rows: [number, number] = [0, N], shard?: StoreInit["shard"]): StoreInit {
  const ids = Array.from({ length: rows[1] - rows[0] }, (_, i) => `q${rows[0] + i}`);
  return {
    model: "m",
    model_sha256: "d".repeat(64),
    num_layers: 4,
    d_model: D,
    layers: LAYERS,
    layer_rule: "l/(L-1) >= 0.4",
    last_layer_final_norm: true,
    dtype: "float32",
    query_ids: ids,
    fact_ids: ids.map((_, i) => `f${(rows[0] + i) % 7}`),
    condition_families: ids.map((_, i) => ((rows[0] + i) % 3 ? "typo" : "anchor")),
    ...(shard ? { shard } : {}),
  };
}

async function writeRows(w: StoreWriter, from: number, to: number, offset = 0): Promise<void> {
  for (const l of LAYERS) await w.writeRowsF32(l, from - offset, data.get(l)!.subarray(from * D, to * D));
}

/** The store written in one uninterrupted run: the bytes every other run must end with. */
let reference: string;
beforeAll(async () => {
  reference = join(dir, "reference");
  const w = await StoreWriter.open(reference, init());
  await writeRows(w, 0, N);
  await w.finish(1);
  await w.close();
});

function expectSameFiles(store: string): void {
  for (const l of LAYERS) {
    const name = `L00${l}.npy`;
    expect(readFileSync(join(store, name)).equals(readFileSync(join(reference, name))), name).toBe(true);
  }
  const a = JSON.parse(readFileSync(join(store, "index.json"), "utf8"));
  const b = JSON.parse(readFileSync(join(reference, "index.json"), "utf8"));
  expect(a.files).toEqual(b.files);
  expect(a.complete).toBe(true);
}

function rowsDone(store: string): number {
  return JSON.parse(readFileSync(join(store, "index.json"), "utf8")).rows_done;
}

/** Nothing but what the test put there: no temporary files, no partial layer files. */
function entries(store: string): string[] {
  return readdirSync(store).sort();
}

describe("the store writer without a small file system", () => {
  it("allocates every file for real, not as a sparse file", async () => {
    const store = join(dir, "allocated");
    const w = await StoreWriter.open(store, init());
    for (const l of LAYERS) {
      const st = statSync(join(store, `L00${l}.npy`));
      expect(st.size).toBe(FILE_BYTES);
      expect(st.blocks * 512).toBeGreaterThanOrEqual(FILE_BYTES);
    }
    await w.close();
  });

  it("reports an injected write error (EIO) with the file's path, keeps the committed rows, and resumes to the same bytes", async () => {
    const store = join(dir, "eio");
    const w = await StoreWriter.open(store, init());
    await writeRows(w, 0, 800);
    await w.commit(800);
    const handle = (w as unknown as { handles: Map<number, FileHandle> }).handles.get(3)!;
    handle.write = (async () => {
      throw Object.assign(new Error("EIO: i/o error, write"), { code: "EIO" });
    }) as FileHandle["write"];
    const err = await writeRows(w, 800, 1600).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(FileError);
    expect((err as FileError).message).toBe(`${join(store, "L003.npy")}: cannot be written: input/output error (EIO)`);
    await w.close();
    expect(rowsDone(store)).toBe(800);

    const resumed = await StoreWriter.open(store, init());
    expect(resumed.rowsDone).toBe(800);
    await writeRows(resumed, 800, N);
    await resumed.finish(1);
    await resumed.close();
    expectSameFiles(store);
  });
});

/** A tmpfs of `bytes` (rounded up to pages) mounted for this file's tests, or undefined where mounting is impossible. */
function mountTmpfs(name: string, bytes: number): string | undefined {
  if (process.getuid?.() !== 0) return undefined;
  const mnt = mkdtempSync(join(tmpdir(), `hsm-${name}-`));
  try {
    execFileSync("mount", ["-t", "tmpfs", "-o", `size=${bytes}`, "tmpfs", mnt], { stdio: "ignore" });
  } catch {
    rmSync(mnt, { recursive: true, force: true });
    return undefined;
  }
  afterAll(() => {
    execFileSync("umount", ["--lazy", mnt]);
    rmSync(mnt, { recursive: true, force: true });
  });
  return mnt;
}

/** Fills the file system holding `folder` until a write fails with ENOSPC, then frees `leave` bytes; returns the filler's path. */
function fill(folder: string, leave = 0): string {
  const path = join(folder, "filler");
  const block = Buffer.alloc(64 << 10, 1);
  writeFileSync(path, "");
  let written = 0;
  for (;;) {
    try {
      writeFileSync(path, block, { flag: "a" });
      written += block.length;
    } catch (err) {
      expect((err as NodeJS.ErrnoException).code).toBe("ENOSPC");
      // Fill the last partial block too.
      for (let n = block.length >> 1; n >= 1; n >>= 1) {
        try {
          writeFileSync(path, block.subarray(0, n), { flag: "a" });
        } catch {
          /* smaller pieces next */
        }
      }
      if (leave > 0) truncateSync(path, statSync(path).size - leave);
      return path;
    }
    expect(written).toBeLessThan(1 << 30);
  }
}

const canMount = process.getuid?.() === 0;

describe.skipIf(!canMount)("on a small tmpfs (needs root to mount one)", () => {
  // Too small for the two layer files; large enough for a folder and a manifest.
  const small = mountTmpfs("small", 1 << 20);
  // The whole store and its manifest, with a little room to spare.
  const fits = mountTmpfs("fits", 2 * FILE_BYTES + (1 << 20));

  it("refuses a store that does not fit before writing a byte, saying how much is needed and free", async () => {
    const store = join(small!, "store");
    const free = statfsSync(small!).bavail * statfsSync(small!).bsize;
    const err = await StoreWriter.open(store, init()).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(DiskSpaceError);
    const e = err as DiskSpaceError;
    expect(e.available).toBe(free);
    expect(e.needed).toBeGreaterThan(2 * FILE_BYTES);
    expect(e.message).toBe(
      `${store}: needs ${e.needed.toLocaleString("en-US")} bytes (${(e.needed / 1e6).toFixed(2)} MB) of free space for the store, but its file system has ` +
        `${free.toLocaleString("en-US")} bytes (${(free / 1e6).toFixed(2)} MB) free; free ${(e.needed - free).toLocaleString("en-US")} bytes ` +
        `(${((e.needed - free) / 1e6).toFixed(2)} MB) more or write the store elsewhere`,
    );
    expect(entries(store)).toEqual([]);
  });

  it("loses nothing when the disk fills up in the middle of a run, and resumes to the same bytes once space is back", async () => {
    const store = join(fits!, "store");
    const w = await StoreWriter.open(store, init());
    await writeRows(w, 0, 900);
    await w.commit(900);
    const filler = fill(fits!);
    // The rows have their blocks already; the manifest that would record them does not fit.
    await writeRows(w, 900, 1700);
    const err = await w.commit(1700).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(FileError);
    expect((err as FileError).code).toBe("ENOSPC");
    expect((err as FileError).message).toBe(
      `${join(store, "index.json")}: cannot be written: no space left on device (ENOSPC)`,
    );
    await w.close();
    expect(rowsDone(store)).toBe(900);
    expect(entries(store)).toEqual(["L002.npy", "L003.npy", "index.json"]);

    unlinkSync(filler);
    const resumed = await StoreWriter.open(store, init());
    expect(resumed.rowsDone).toBe(900);
    await writeRows(resumed, 900, N);
    await resumed.finish(1);
    await resumed.close();
    expectSameFiles(store);
  });

  it("refuses a merge whose output does not fit, leaving no files", async () => {
    const bounds: [number, number][] = [
      [0, 700],
      [700, N],
    ];
    const shards = await Promise.all(
      bounds.map(async (b, index) => {
        const path = join(dir, "shards", `shard-${index}`);
        const w = await StoreWriter.open(
          path,
          init(b, { index, count: 2, row_start: b[0], row_end: b[1], rows_total: N }),
        );
        await writeRows(w, b[0], b[1], b[0]);
        await w.finish(1);
        await w.close();
        return path;
      }),
    );
    const out = join(small!, "merged");
    await expect(mergeShards(out, shards)).rejects.toBeInstanceOf(DiskSpaceError);
    expect(entries(out)).toEqual([]);
  });

  it("adopts nothing half-written when index.json does not fit, and adopts once space is back", async () => {
    const fx = join(dir, "fx");
    await writeFixture(fx, { facts: 9, d: 8, layersTotal: 6, seed: 3 });
    const store = join(fits!, "foreign");
    mkdirSync(store);
    const files = readdirSync(join(fx, "store")).filter((f) => f.endsWith(".npy"));
    for (const f of files) copyFileSync(join(fx, "store", f), join(store, f));
    // tmpfs gives each file whole pages: room for the lock file, none for index.json.
    const page = 4096;
    const filler = fill(fits!, page);
    const err = await adoptStore(store, { bank: join(fx, "bank.jsonl") }).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(FileError);
    expect((err as FileError).code).toBe("ENOSPC");
    expect((err as FileError).message).toBe(
      `${join(store, "index.json")}: cannot be written: no space left on device (ENOSPC)`,
    );
    expect(entries(store)).toEqual(files.sort());

    unlinkSync(filler);
    const m = await adoptStore(store, { bank: join(fx, "bank.jsonl") });
    expect(m.complete).toBe(true);
    expect(entries(store)).toEqual([...files, "index.json"].sort());
  });

  it("writes metrics all or none: a full disk names the file, leaves no temporary file and every old result", async () => {
    const fx = join(dir, "fx-metrics");
    await writeFixture(fx, { facts: 9, d: 8, layersTotal: 6, seed: 4 });
    const out = join(fits!, "metrics");
    const first = await computeMetrics(join(fx, "store"), { scored: join(fx, "scored.jsonl") });
    await writeResults(out, first, join(fx, "store"));
    const before = new Map(readdirSync(out).map((f) => [f, readFileSync(join(out, f))]));
    expect([...before.keys()].sort()).toEqual(["iss.csv", "iss.json", "iss.svg", "kts.csv", "kts.json", "kts.svg"]);
    // Other results (another bootstrap seed): room for the first new files, not for all of them.
    const second = await computeMetrics(join(fx, "store"), { scored: join(fx, "scored.jsonl"), seed: 99 });
    const filler = fill(fits!, 3 * 4096);
    const err = await writeResults(out, second, join(fx, "store")).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(FileError);
    expect((err as FileError).code).toBe("ENOSPC");
    expect((err as FileError).message).toMatch(
      new RegExp(`^${out}/(iss|kts)\\.(json|csv|svg): cannot be written: no space left on device \\(ENOSPC\\)$`),
    );
    expect(readdirSync(out).sort()).toEqual([...before.keys()].sort());
    for (const [f, bytes] of before) expect(readFileSync(join(out, f)).equals(bytes), f).toBe(true);
    unlinkSync(filler);
  });
});
