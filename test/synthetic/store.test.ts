/**
 * The fixture generator: deterministic, self-consistent, and carrying the
 * structure it claims to plant — checked here with plain arithmetic on the
 * stored rows, independent of the metrics code.
 */
import { existsSync, readdirSync, readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";

import { beforeAll, describe, expect, it } from "vitest";

import { readBank } from "../../src/bank/bank.js";
import { EXIT, FileError, UsageError } from "../../src/errors.js";
import { FIXTURE_FAMILIES, writeFixture, type FixtureResult } from "../../src/synthetic/store.js";
import { StoreReader } from "../../src/store/reader.js";
import { tempDir } from "../helpers/tmp.js";

const dir = tempDir();
let fx: FixtureResult;

beforeAll(async () => {
  fx = await writeFixture(join(dir, "a"), { facts: 300, d: 32, layersTotal: 6, seed: 5 });
});

describe("synthetic fixture", () => {
  it("writes a valid bank, a complete store of its main-forward rows and a scored row per bank row", async () => {
    const bank = await readBank(fx.bank);
    // round(300 × 5,156 / 6,543) = 236 reverse rows; round(300 × 2 / 6,543) = 0 second paraphrases, as in the real bank.
    expect(bank).toHaveLength(300 * 6 + 236);
    const main = bank.filter((r) => r.use_for_main_forward);
    expect(main).toHaveLength(1800);
    const reader = await StoreReader.open(fx.store);
    expect(reader.manifest.query_ids).toEqual(main.map((r) => r.query_id));
    expect(reader.manifest.fact_ids).toEqual(main.map((r) => r.fact_id));
    expect(reader.manifest.layers).toEqual([2, 3, 4, 5]);
    await reader.close();
    const scored = readFileSync(fx.scored, "utf8")
      .trim()
      .split("\n")
      .map((l) => JSON.parse(l));
    expect(scored.map((s) => s.query_id)).toEqual(bank.map((r) => r.query_id));
    expect(new Set(scored.map((s) => s.label))).toEqual(
      new Set(["correct", "incorrect", "abstain", "ambiguous", "unparseable"]),
    );
  });

  it("is deterministic for a seed and differs across seeds", async () => {
    const again = await writeFixture(join(dir, "b"), { facts: 300, d: 32, layersTotal: 6, seed: 5 });
    const other = await writeFixture(join(dir, "c"), { facts: 300, d: 32, layersTotal: 6, seed: 6 });
    const sums = (r: FixtureResult) => Object.values(r.manifest.files).map((f) => f.sha256);
    expect(sums(again)).toEqual(sums(fx));
    expect(readFileSync(again.scored).equals(readFileSync(fx.scored))).toBe(true);
    expect(sums(other)).not.toEqual(sums(fx));
  });

  it("plants fact identity that grows with depth and weakens with each family's strength", async () => {
    const reader = await StoreReader.open(fx.store);
    const m = reader.manifest;
    const own: Record<number, Record<string, number>> = {};
    for (const layer of m.layers) {
      const x = await reader.readRowsF32(layer, 0, reader.rows);
      const d = reader.dModel;
      // centre and normalize every row
      const mu = new Float64Array(d);
      for (let i = 0; i < reader.rows; i++) for (let j = 0; j < d; j++) mu[j]! += x[i * d + j]! / reader.rows;
      for (let i = 0; i < reader.rows; i++) {
        let s = 0;
        for (let j = 0; j < d; j++) s += (x[i * d + j]! - mu[j]!) ** 2;
        for (let j = 0; j < d; j++) x[i * d + j] = (x[i * d + j]! - mu[j]!) / Math.sqrt(s);
      }
      const anchorRow = new Map<string, number>();
      m.condition_families.forEach((c, i) => c === "anchor" && anchorRow.set(m.fact_ids[i]!, i));
      const sum: Record<string, [number, number]> = {};
      m.condition_families.forEach((c, i) => {
        if (c === "anchor") return;
        const a = anchorRow.get(m.fact_ids[i]!)!;
        let dot = 0;
        for (let j = 0; j < d; j++) dot += x[i * d + j]! * x[a * d + j]!;
        const t = (sum[c] ??= [0, 0]);
        t[0] += dot;
        t[1] += 1;
      });
      own[layer] = Object.fromEntries(Object.entries(sum).map(([c, [s, k]]) => [c, s / k]));
    }
    await reader.close();
    const byStrength = Object.entries(FIXTURE_FAMILIES)
      .sort((a, b) => a[1] - b[1])
      .map(([c]) => c);
    for (const c of byStrength) expect(own[5]![c]!).toBeGreaterThan(own[2]![c]! + 0.05);
    for (let k = 1; k < byStrength.length; k++)
      expect(own[5]![byStrength[k - 1]!]!).toBeGreaterThan(own[5]![byStrength[k]!]!);
  });

  it("plants correctness along a direction that anchors reveal and strong families blur", async () => {
    const reader = await StoreReader.open(fx.store);
    const m = reader.manifest;
    const labels = new Map<string, string>(
      readFileSync(fx.scored, "utf8")
        .trim()
        .split("\n")
        .map((l) => JSON.parse(l))
        .map((s) => [s.query_id, s.label]),
    );
    const x = await reader.readRowsF32(5, 0, reader.rows);
    const d = reader.dModel;
    await reader.close();
    // Direction: mean of correct minus mean of incorrect anchors of even facts.
    const dir = new Float64Array(d);
    const fact = (i: number) => Number(m.fact_ids[i]!.slice(5));
    m.query_ids.forEach((q, i) => {
      if (m.condition_families[i] !== "anchor" || fact(i) % 2) return;
      const sign = labels.get(q) === "correct" ? 1 : labels.get(q) === "incorrect" ? -1 : 0;
      for (let j = 0; j < d; j++) dir[j]! += sign * x[i * d + j]!;
    });
    // AUROC of that projection on the odd facts' rows of each family.
    const auroc = (family: string) => {
      const pos: number[] = [];
      const neg: number[] = [];
      m.query_ids.forEach((q, i) => {
        if (m.condition_families[i] !== family || fact(i) % 2 === 0) return;
        let p = 0;
        for (let j = 0; j < d; j++) p += dir[j]! * x[i * d + j]!;
        if (labels.get(q) === "correct") pos.push(p);
        else if (labels.get(q) === "incorrect") neg.push(p);
      });
      let wins = 0;
      for (const a of pos) for (const b of neg) wins += a > b ? 1 : a === b ? 0.5 : 0;
      return wins / (pos.length * neg.length);
    };
    expect(auroc("anchor")).toBeGreaterThan(0.75);
    expect(auroc("paraphrase")).toBeGreaterThan(0.7);
    expect(auroc("paraphrase") - 0.5).toBeGreaterThan(1.5 * (auroc("translation") - 0.5));
  });

  it("gives facts a second paraphrase, worded its own way and planted as a paraphrase", async () => {
    const two = await writeFixture(join(dir, "second"), {
      facts: 40,
      extraMainRows: 40,
      d: 32,
      layersTotal: 6,
      seed: 5,
    });
    const bank = await readBank(two.bank);
    // 40 facts × 7 main-forward rows, round(40 × 5,156 / 6,543) = 32 reverse rows.
    expect([bank.length, two.rows, two.mainForwardRows]).toEqual([312, 312, 280]);
    const second = new Set<string>();
    for (let f = 0; f < 40; f++) {
      const rows = bank.filter(
        (r) => r.fact_id === `fact_${String(f).padStart(6, "0")}` && r.condition_family === "paraphrase",
      );
      expect(rows.map((r) => r.use_for_main_forward)).toEqual([true, true]);
      expect(rows[0]!.query).not.toBe(rows[1]!.query);
      second.add(rows[1]!.query_id);
    }
    // Cosine of each row with its fact's anchor, rows centred and normalized per layer, averaged per family.
    const reader = await StoreReader.open(two.store);
    const m = reader.manifest;
    const d = reader.dModel;
    const own: Record<number, Record<string, number>> = {};
    for (const layer of [2, 5]) {
      const x = await reader.readRowsF32(layer, 0, reader.rows);
      const mu = new Float64Array(d);
      for (let i = 0; i < reader.rows; i++) for (let j = 0; j < d; j++) mu[j]! += x[i * d + j]! / reader.rows;
      const centred = (i: number) => {
        const v = Array.from({ length: d }, (_, j) => x[i * d + j]! - mu[j]!);
        const n = Math.hypot(...v);
        return v.map((e) => e / n);
      };
      const anchor = new Map(
        m.condition_families.flatMap((c, i) => (c === "anchor" ? [[m.fact_ids[i]!, centred(i)] as const] : [])),
      );
      const sum: Record<string, [number, number]> = {};
      m.condition_families.forEach((c, i) => {
        if (c === "anchor") return;
        const a = anchor.get(m.fact_ids[i]!)!;
        const t = (sum[second.has(m.query_ids[i]!) ? "second paraphrase" : c] ??= [0, 0]);
        t[0] += centred(i).reduce((s, e, j) => s + e * a[j]!, 0);
        t[1] += 1;
      });
      own[layer] = Object.fromEntries(Object.entries(sum).map(([c, [s, k]]) => [c, s / k]));
    }
    await reader.close();
    expect(own[5]!["second paraphrase"]).toBeGreaterThan(own[2]!["second paraphrase"]! + 0.05);
    for (const layer of [2, 5]) expect(own[layer]!["second paraphrase"]).toBeGreaterThan(own[layer]!.reorder!);
  });

  it("refuses more second paraphrases than facts", async () => {
    await expect(writeFixture(join(dir, "too-many"), { facts: 4, extraMainRows: 5 })).rejects.toMatchObject({
      constructor: UsageError,
      message:
        "Expected at most one second paraphrase per fact, so --extra-main-rows of at most --facts (4), but received 5",
    });
    await expect(writeFixture(join(dir, "negative"), { facts: 4, extraMainRows: -1 })).rejects.toThrow(
      "Expected an integer of at least 0 for --extra-main-rows but received -1",
    );
    expect(existsSync(join(dir, "too-many"))).toBe(false);
  });

  it("leaves nothing behind when it fails, and never overwrites", async () => {
    const out = join(dir, "failed");
    await expect(
      writeFixture(out, {
        facts: 20,
        onProgress: () => {
          throw new Error("disk full");
        },
      }),
    ).rejects.toThrow("disk full");
    expect(existsSync(out)).toBe(false);
    expect(readdirSync(dir).filter((n) => n.includes("partial"))).toEqual([]);
    await expect(writeFixture(fx.dir, {})).rejects.toMatchObject({
      constructor: UsageError,
      message: `${fx.dir} already exists; choose a new folder for the fixture`,
      exitCode: EXIT.usage,
    });
  });

  it("names the folder it cannot write", async () => {
    const file = join(dir, "plain-file");
    writeFileSync(file, "");
    await expect(writeFixture(join(file, "fx"), { facts: 2 })).rejects.toMatchObject({
      constructor: FileError,
      message: `${file}: is a file, not a folder; name a folder here`,
      exitCode: EXIT.data,
    });
  });
});
