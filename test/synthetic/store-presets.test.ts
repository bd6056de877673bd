import { spawnSync } from "node:child_process";
import { readFileSync } from "node:fs";
import { join } from "node:path";

import { describe, expect, it } from "vitest";

import { BENCH_FIXTURE, FULL_FIXTURE, withPreset } from "../../src/synthetic/store-presets.js";
import { planFixtureBank } from "../../src/synthetic/store.js";
import { selectLayers } from "../../src/store/layers.js";
import { tempDir } from "../helpers/tmp.js";

const BIN = join(import.meta.dirname, "..", "..", "bin", "hsm.js");
const dir = tempDir("hsm-presets-");

/** Counts of a planned or written bank: rows, main-forward rows, facts with two paraphrases, reverse rows. */
function composition(rows: { fact: string | number; family: string; main: boolean }[]) {
  const paraphrases = new Map<string | number, number>();
  for (const r of rows) if (r.family === "paraphrase") paraphrases.set(r.fact, (paraphrases.get(r.fact) ?? 0) + 1);
  return {
    rows: rows.length,
    main: rows.filter((r) => r.main).length,
    anchors: rows.filter((r) => r.family === "anchor").length,
    twoParaphrases: [...paraphrases.values()].filter((n) => n === 2).length,
    reverse: rows.filter((r) => r.family === "reverse" && !r.main).length,
  };
}

/** The real bank's counts: 6,543 facts × 6 + 2 second paraphrases = 39,260 main-forward rows, + 5,156 reverse = 44,416. */
const REAL = { rows: 44_416, main: 39_260, anchors: 6543, twoParaphrases: 2, reverse: 5156 };

describe("withPreset", () => {
  it("the bench preset is the real bank's scale: 6,543 facts × 6 + 2 = 39,260 main-forward rows, + 5,156 = 44,416 rows, 8 of 14 layers at d = 1024", () => {
    expect(BENCH_FIXTURE).toEqual({ facts: 6543, d: 1024, layersTotal: 14, extraRows: 5156, extraMainRows: 2 });
    expect(6543 * 6 + 2).toBe(39_260);
    expect(6543 * 6 + 2 + 5156).toBe(44_416);
    expect(composition(planFixtureBank(6543, 2, 5156))).toEqual(REAL);
  });

  it("the full preset is the bench rows at the real stores' size: d = 4608, layers 18…45 of 46, about 10 GB", () => {
    expect(FULL_FIXTURE).toEqual({ facts: 6543, d: 4608, layersTotal: 46, extraRows: 5156, extraMainRows: 2 });
    const layers = selectLayers(46);
    expect(layers).toEqual(Array.from({ length: 28 }, (_, i) => 18 + i));
    // 28 files of a 128-byte header and 39,260 × 4608 float16 values.
    expect(layers.length * (128 + 39_260 * 4608 * 2)).toBe(10_130_968_064);
  });

  it("hsm fixture --full writes 39,260 stored rows of 44,416 bank rows (checked at d = 2 and one layer, not 10 GB)", () => {
    const out = join(dir, "full");
    const r = spawnSync(
      process.execPath,
      [BIN, "fixture", out, "--full", "--d", "2", "--layers-total", "1", "--quiet"],
      { encoding: "utf8" },
    );
    expect(r.stderr).toBe("");
    expect(r.status).toBe(0);
    expect(r.stdout).toBe(
      `${out}: bank.jsonl (44416 rows, 39260 main-forward), store/ (layers 0 of 1, d = 2), scored.jsonl\n`,
    );
    const bank = readFileSync(join(out, "bank.jsonl"), "utf8")
      .trim()
      .split("\n")
      .map((l) => JSON.parse(l));
    expect(
      composition(bank.map((b) => ({ fact: b.fact_id, family: b.condition_family, main: b.use_for_main_forward }))),
    ).toEqual(REAL);
    expect(new Set(bank.map((b) => b.query_id)).size).toBe(44_416);
    // The two second paraphrases have their own wording.
    expect(new Set(bank.filter((b) => b.condition_family === "paraphrase").map((b) => b.query)).size).toBe(6545);
    const manifest = JSON.parse(readFileSync(join(out, "store", "index.json"), "utf8"));
    expect(manifest.query_ids).toEqual(bank.filter((b) => b.use_for_main_forward).map((b) => b.query_id));
    expect(manifest.files["L000.npy"].shape).toEqual([39_260, 2]);
  });

  it("given options override the preset; undefined ones do not", () => {
    expect(withPreset({ preset: "bench", d: 16, seed: undefined })).toEqual({ ...BENCH_FIXTURE, d: 16 });
    expect(withPreset({ facts: 10, d: undefined })).toEqual({ facts: 10 });
    expect(withPreset({})).toEqual({});
  });
});
