/**
 * hashFiles, the store's parallel hashing: the native core's whole-file path
 * and the TypeScript path (HSM_NATIVE=0) give the same outcomes, checked
 * against node:crypto, and a file that cannot be read gets Node's own error
 * either way.
 */
import { execFileSync } from "node:child_process";
import { createHash } from "node:crypto";
import { openSync, symlinkSync, writeFileSync } from "node:fs";
import { join } from "node:path";

import { afterEach, describe, expect, it } from "vitest";

import { storeKernels } from "../../src/kernels/default.js";
import { nativeShaPaths } from "../../src/kernels/native.js";
import { hashFiles, type HashJob, type HashOutcome } from "../../src/store/hash.js";
import { Rng } from "../../src/util/random.js";
import { tempDir } from "../helpers/tmp.js";

const dir = tempDir("hsm-hash-");
const rng = new Rng(23);

function file(name: string, n: number): { path: string; data: Uint8Array } {
  const data = new Uint8Array(n);
  for (let i = 0; i < n; i++) data[i] = rng.u32() & 0xff;
  writeFileSync(join(dir, name), data);
  return { path: join(dir, name), data };
}

/** What opening `path` throws in Node. */
function openError(path: string): { code?: string; message: string } {
  try {
    openSync(path, "r");
  } catch (err) {
    const e = err as NodeJS.ErrnoException;
    return { code: e.code, message: e.message };
  }
  throw new Error(`${path} opened`);
}

const saved = process.env.HSM_NATIVE;
afterEach(() => {
  if (saved === undefined) delete process.env.HSM_NATIVE;
  else process.env.HSM_NATIVE = saved;
});

describe("hashFiles", () => {
  const files = [
    file("a.npy", 300_001),
    file("b.npy", 128),
    file("c.npy", 70_000),
    file("d.npy", 0),
    file("e.npy", 1_000_000),
  ];
  const missing = join(dir, "missing.npy");
  const jobs: HashJob[] = [
    { path: files[0]!.path, f16From: 128 },
    { path: files[1]!.path, f16From: 128 },
    // A misaligned start counts nothing, as in the streamed path.
    { path: files[2]!.path, f16From: 127 },
    { path: missing },
    { path: files[3]!.path, f32From: 64 },
    { path: files[4]!.path },
  ];

  // TypeScript first: the store keeps the native kernels once it has loaded them.
  const typescriptOutcomes = new Map<number, HashOutcome[]>();
  it.each([
    ["typescript", "0"],
    ["native", undefined],
  ])("%s: digests, lengths and statistics in job order; a missing file's error is Node's", async (_name, env) => {
    if (env) process.env.HSM_NATIVE = env;
    else if (!nativeShaPaths()) return; // no native core built here
    expect(storeKernels({ quiet: true }).sha256Files === undefined).toBe(env === "0");
    for (const threads of [1, 2, 4]) {
      const got = await hashFiles(jobs, threads);
      expect(got.map((o) => (o.ok ? o.result.sha256 : o.code))).toEqual([
        ...files.slice(0, 3).map((f) => createHash("sha256").update(f.data).digest("hex")),
        "ENOENT",
        ...files.slice(3).map((f) => createHash("sha256").update(f.data).digest("hex")),
      ]);
      expect(got.map((o) => (o.ok ? o.result.bytes : -1))).toEqual([300_001, 128, 70_000, -1, 0, 1_000_000]);
      expect(got[3]).toEqual({ ok: false, ...openError(missing) });
      expect(got.map((o) => o.ok && o.result.stats !== undefined)).toEqual([true, true, false, false, true, false]);
      expect(got[1]).toMatchObject({ ok: true, result: { stats: { nonfinite: 0, maxAbs: 0 } } });
      // The native outcomes, statistics included, equal the TypeScript path's.
      if (env) typescriptOutcomes.set(threads, got);
      else expect(got).toEqual(typescriptOutcomes.get(threads));
    }
  });

  it.each([
    ["typescript", "0"],
    ["native", undefined],
  ])("%s: never follows a symbolic link or waits on a FIFO put in a file's place", async (_name, env) => {
    if (env) process.env.HSM_NATIVE = env;
    else if (!nativeShaPaths()) return;
    const link = join(dir, `link-${_name}.npy`);
    symlinkSync(files[1]!.path, link);
    const fifo = join(dir, `fifo-${_name}.npy`);
    execFileSync("mkfifo", [fifo]);
    const [viaLink, viaFifo] = await hashFiles([{ path: link, f16From: 128 }, { path: fifo }], 2);
    expect(viaLink).toMatchObject({ ok: false, code: "ELOOP" });
    // Nobody writes to the FIFO: it fails at once (positioned reads cannot seek in a pipe) instead of waiting for a writer.
    expect(viaFifo).toMatchObject({ ok: false, code: "ESPIPE" });
  });
});
