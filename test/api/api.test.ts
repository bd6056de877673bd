/**
 * The library as a user imports it: by package name, through package.json's
 * `exports`, from the build the test run made (test/global-setup.ts).
 */
import { existsSync, readFileSync, symlinkSync, writeFileSync } from "node:fs";
import { join } from "node:path";

import * as hsm from "hsm";
import { beforeAll, describe, expect, it } from "vitest";

import * as built from "../../dist/index.js";
import { tempDir } from "../helpers/tmp.js";

const dir = tempDir("hsm-api-");
const fx = join(dir, "fx");
const lines = (file: string) => readFileSync(file, "utf8").split("\n").filter(Boolean).length;

beforeAll(async () => {
  await hsm.writeFixture(fx, { facts: 10, d: 8 });
});

describe('import … from "hsm"', () => {
  it("resolves to this checkout's fresh build", () => {
    expect(hsm.HsmError).toBe(built.HsmError);
    const pkg = JSON.parse(readFileSync(join(import.meta.dirname, "..", "..", "package.json"), "utf8"));
    expect(pkg.exports["."]).toEqual({ types: "./dist/index.d.ts", import: "./dist/index.js" });
    expect(hsm.VERSION).toBe(pkg.version);
  });

  it("docs/api.md shows every exported function", () => {
    const doc = readFileSync(join(import.meta.dirname, "..", "..", "docs", "api.md"), "utf8");
    const functions = Object.entries(hsm).filter(([name, value]) => typeof value === "function" && /^[a-z]/.test(name));
    expect(functions.length).toBeGreaterThan(20);
    expect(
      functions.map(([name]) => name).filter((name) => !doc.includes(`\`${name}(`) && !doc.includes(`\`${name}\``)),
    ).toEqual([]);
    expect(
      functions
        .map(([name]) => name)
        .filter((name) => !new RegExp(`\\b${name}\\(`).test(doc.split("```ts").slice(1).join(""))),
    ).toEqual(["defaultModelName"]);
  });

  it("selectLayers applies the layer rule: l/(L-1) >= 0.4", async () => {
    expect(await hsm.selectLayers(46)).toEqual(Array.from({ length: 28 }, (_, i) => i + 18));
    expect(await hsm.selectLayers(14)).toEqual([6, 7, 8, 9, 10, 11, 12, 13]);
    expect(await hsm.selectLayers(10, "l >= L - 2")).toEqual([8, 9]);
  });

  it("writeFixture, checkBank, verifyStore and exportScored agree on the fixture's counts", async () => {
    // 10 facts × 6 main-forward rows, plus round(10 × 5156 / 6543) = 8 reverse rows; L = 6 stores l = 2…5.
    expect(await hsm.checkBank(join(fx, "bank.jsonl"))).toMatchObject({ rows: 68, mainForward: 60, facts: 10 });
    const report = await hsm.verifyStore(join(fx, "store"));
    expect(report).toMatchObject({ ok: true, complete: true, rows: 60, problems: [] });
    expect(report.files.map((f) => f.name)).toEqual(["L002.npy", "L003.npy", "L004.npy", "L005.npy"]);
    const foundry = join(dir, "foundry.jsonl");
    const r = await hsm.exportScored({
      format: "foundry",
      scored: join(fx, "scored.jsonl"),
      bank: join(fx, "bank.jsonl"),
      out: foundry,
    });
    expect(r).toEqual({ files: [foundry], rows: lines(join(fx, "scored.jsonl")) });
    expect(lines(foundry)).toBe(68);
  });

  it("runMetrics computes KTS only with a scored file, and writes what computeMetrics returns", async () => {
    const store = join(fx, "store");
    const issOnly = await hsm.runMetrics(store, { bootstrap: 20, out: join(dir, "m1") });
    expect(issOnly.result.rows.kts).toBeUndefined();
    expect(issOnly.files.json).toEqual([join(dir, "m1", "iss.json")]);
    expect(existsSync(join(dir, "m1", "kts.json"))).toBe(false);
    const both = await hsm.runMetrics(store, { bootstrap: 20, out: join(dir, "m2"), scored: join(fx, "scored.jsonl") });
    expect(new Set(both.result.rows.kts!.map((row) => row.layer))).toEqual(new Set([2, 3, 4, 5]));
    const direct = await hsm.computeMetrics(store, { metrics: ["iss"], bootstrap: 20 });
    expect(JSON.parse(readFileSync(join(dir, "m1", "iss.json"), "utf8")).rows).toEqual(
      JSON.parse(JSON.stringify(direct.rows.iss)),
    );
  });

  it("verifyStoreFolder tells a missing folder, a file and an unreadable path apart", async () => {
    const missing = join(dir, "nowhere");
    await expect(hsm.verifyStoreFolder(missing)).rejects.toThrow(
      new hsm.UsageError(`${missing}: no such store folder`),
    );
    const file = join(dir, "a-file");
    writeFileSync(file, "x");
    await expect(hsm.verifyStoreFolder(file)).rejects.toThrow(`${file}: is a file, not a store folder`);
    const loop = join(dir, "loop");
    symlinkSync(loop, loop);
    const err = await hsm.verifyStoreFolder(loop).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(hsm.HsmError);
    expect(err).not.toBeInstanceOf(hsm.UsageError);
    expect((err as hsm.HsmError).exitCode).toBe(hsm.EXIT.data);
    expect((err as Error).message).toBe(
      `${loop}: the store folder cannot be read (ELOOP: too many symbolic links encountered)`,
    );
    const ok = await hsm.verifyStoreFolder(join(fx, "store"), { concurrency: 2 });
    expect(ok.report.ok).toBe(true);
    expect(ok.seconds).toBeGreaterThanOrEqual(0);
  });

  it("writeTinyModel checks the geometry first; inspectModel and extract (shard as K/N) read what it wrote", async () => {
    const bad = join(dir, "bad-model");
    await expect(hsm.writeTinyModel(bad, { hidden: 12, heads: 4 })).rejects.toThrow(hsm.UsageError);
    expect(existsSync(bad)).toBe(false);
    const modelDir = join(dir, "model");
    const c = await hsm.writeTinyModel(modelDir, { layers: 2, hidden: 16 });
    // heads default 4, key/value heads half of them, MLP twice the width, Llama 3.1's vocabulary.
    expect(c).toMatchObject({
      num_hidden_layers: 2,
      hidden_size: 16,
      num_attention_heads: 4,
      num_key_value_heads: 2,
      intermediate_size: 32,
      vocab_size: 128256,
    });
    const i = await hsm.inspectModel(modelDir);
    expect(i).toMatchObject({ numLayers: 2, dModel: 16, storedLayers: [1] });
    const bank = join(fx, "bank.jsonl");
    await expect(hsm.extract({ modelDir, bank, out: join(dir, "s2"), shard: "2/2" })).rejects.toThrow(
      'Expected --shard K/N with 0 ≤ K < N, auto or auto/N but received "2/2"',
    );
    // 60 main-forward rows, 2 shards cut on 16-row blocks: shard 0 holds floor(30 / 16) × 16 = 16 rows.
    const e = await hsm.extract({ modelDir, bank, out: join(dir, "s0"), shard: "0/2", commitRows: 16 });
    expect(e.rowsExtracted).toBe(16);
    expect(e.manifest).toMatchObject({ layers: [1], d_model: 16, complete: true });
    expect(e.manifest.query_ids).toHaveLength(16);
  });
});
