/**
 * KTS on hand-computed cases. One feature carries the label (+1 correct, −1
 * incorrect) and the others are constant, so every probe orders rows by that
 * feature alone and every AUROC can be counted on paper:
 *   same (feature = label)  AUROC 1   KTS 1
 *   flip (feature = −label) AUROC 0   KTS −1
 *   flat (feature = 0)      AUROC ½   KTS 0 (all ties, each counted ½)
 *   all  (pooled)           AUROC 152/240 (see the count below)
 */
import { writeFileSync } from "node:fs";
import { join } from "node:path";

import { describe, expect, it } from "vitest";

import { computeMetrics, type KtsRow } from "../../src/metrics/compute.js";
import { fnv1a32 } from "../../src/metrics/stats.js";
import { tempDir } from "../helpers/tmp.js";
import { tinyStore, type TinyRow } from "../helpers/tiny-store.js";
import { COUNTED_DIGITS } from "../tolerances.js";

const dir = tempDir("hsm-kts-");

/** Fact names that land in fold 0 and fold 1 of 2, four each. */
function factsByFold(): string[][] {
  const folds: string[][] = [[], []];
  for (let i = 0; folds.some((f) => f.length < 4); i++) {
    const name = `fact_${i}`;
    const k = fnv1a32(name) % 2;
    if (folds[k]!.length < 4) folds[k]!.push(name);
  }
  return folds;
}

function rowsFor(
  anchorSignal: (correct: boolean, j: number) => number,
  anchorLabel: (correct: boolean) => string = (c) => (c ? "correct" : "incorrect"),
): TinyRow[] {
  const rows: TinyRow[] = [];
  for (const fold of factsByFold()) {
    fold.forEach((fact, j) => {
      const correct = j % 2 === 0;
      const label = correct ? "correct" : "incorrect";
      const s = correct ? 1 : -1;
      rows.push({ fact, family: "anchor", h: [anchorSignal(correct, j), 5, -3], label: anchorLabel(correct) });
      rows.push({ fact, family: "same", h: [s, 5, -3], label });
      rows.push({ fact, family: "flip", h: [-s, 5, -3], label });
      rows.push({ fact, family: "flat", h: [0, 5, -3], label });
    });
  }
  return rows;
}

let n = 0;
async function kts(rows: TinyRow[], extra: Parameters<typeof computeMetrics>[1] = {}) {
  const { store, scored } = await tinyStore(join(dir, `case-${n++}`), rows);
  return (
    await computeMetrics(store, { metrics: ["kts"], scored, folds: 2, bootstrap: 200, backend: "typescript", ...extra })
  ).rows.kts as KtsRow[];
}

const by = (rows: KtsRow[]) => Object.fromEntries(rows.map((r) => [r.family, r]));

describe("KTS, hand-computed", () => {
  it("every field of a case whose AUROCs can be counted", async () => {
    const extra: TinyRow[] = [
      { fact: "fact_0", family: "same", h: [1, 5, -3], label: "ambiguous" },
      { fact: "fact_0", family: "same", h: [1, 5, -3], label: "abstain" },
      { fact: "fact_0", family: "same", h: [1, 5, -3], label: "unparseable" },
    ];
    const rows = by(await kts([...rowsFor((c) => (c ? 1 : -1)), ...extra]));
    expect(Object.keys(rows)).toEqual(["anchor", "flat", "flip", "same", "all"]);
    expect(rows.anchor).toMatchObject({
      n_queries: 8,
      n_facts: 8,
      n_correct: 4,
      accuracy: 0.5,
      auroc: 1,
      auroc_ci_low: 1,
      auroc_ci_high: 1,
      kts: null,
      kts_null_reason: "anchor is the reference family",
      probes_not_converged: 0,
      excluded_nonfinite: 0,
      layer: 3,
    });
    expect(rows.same).toMatchObject({
      n_queries: 8,
      n_correct: 4,
      auroc: 1,
      kts: 1,
      kts_ci_low: 1,
      kts_ci_high: 1,
      kts_null_reason: null,
    });
    expect(rows.flip).toMatchObject({ auroc: 0, kts: -1, kts_ci_low: -1, kts_ci_high: -1 });
    expect(rows.flat).toMatchObject({ auroc: 0.5, kts: 0, kts_ci_low: 0, kts_ci_high: 0 });
    // Pooled: positives 4 at s+, 4 at s0, 4 at s−; negatives 4 at s−, 4 at s0, 4 at s+.
    // Wins: 4·(8 + 2) + 4·(4 + 2) + 4·(0 + 2) = 72 of 12·12 = 144.
    expect(rows.all!.n_queries).toBe(24);
    expect(rows.all!.auroc!).toBeCloseTo(72 / 144, COUNTED_DIGITS);
    expect(rows.all!.kts!).toBeCloseTo(0, COUNTED_DIGITS);
  });

  it("counts abstentions as incorrect when asked", async () => {
    const extra: TinyRow[] = [{ fact: "fact_0", family: "same", h: [1, 5, -3], label: "abstain" }];
    const rows = by(await kts([...rowsFor((c) => (c ? 1 : -1)), ...extra], { abstainAsIncorrect: true }));
    expect(rows.same).toMatchObject({ n_queries: 9, n_correct: 4 });
    // One negative now ties with the four positives at s+: each wins 4 + ½ of 5 negatives.
    expect(rows.same!.auroc!).toBeCloseTo((4 * 4.5) / (4 * 5), COUNTED_DIGITS);
  });

  it("is null with its reason when the anchors teach nothing (auroc_anchor ≤ 0.55)", async () => {
    const rows = by(await kts(rowsFor((_c, j) => (j < 2 ? 1 : -1))));
    expect(rows.anchor!.auroc!).toBeLessThanOrEqual(0.55);
    expect(rows.same!.kts).toBeNull();
    expect(rows.same!.kts_null_reason).toMatch(/auroc_anchor .* ≤ 0\.55: the probe learned nothing to transfer/);
  });

  it("is null with its reason when a family has a single label class", async () => {
    const rows = await kts([
      ...rowsFor((c) => (c ? 1 : -1)),
      { fact: "fact_0", family: "solo", h: [1, 5, -3], label: "correct" },
    ]);
    const solo = by(rows).solo!;
    expect(solo).toMatchObject({
      n_queries: 1,
      auroc: null,
      kts: null,
      kts_null_reason: "auroc undefined: only one label class among this family's rows",
    });
  });

  it("nulls the layer, without stopping, when a training fold has one class", async () => {
    const rows = await kts(
      rowsFor(
        (c) => (c ? 1 : -1),
        () => "correct",
      ),
    );
    for (const r of rows)
      expect(r.kts_null_reason).toMatch(/^the probe cannot be trained: training fold \d has only "correct" anchors$/);
  });

  it("leaves non-finite rows out and counts them", async () => {
    const rows = by(
      await kts([
        ...rowsFor((c) => (c ? 1 : -1)),
        { fact: "fact_0", family: "same", h: [Infinity, 5, -3], label: "incorrect" },
      ]),
    );
    expect(rows.same).toMatchObject({ n_queries: 8, auroc: 1, excluded_nonfinite: 1 });
  });

  it("refuses a family named like the pooled rows", async () => {
    const rows = rowsFor((c) => (c ? 1 : -1)).map((r) => (r.family === "flat" ? { ...r, family: "all" } : r));
    const { store, scored } = await tinyStore(join(dir, "family-all"), rows);
    for (const metrics of [["kts"], ["iss"]]) {
      await expect(computeMetrics(store, { metrics, scored, folds: 2 })).rejects.toThrow(
        `${store}: condition family "all" names the rows that pool every family; rename that family in the bank`,
      );
    }
  });

  it("stops on a scored file with a label outside the five, or missing rows", async () => {
    const { store, scored } = await tinyStore(
      join(dir, "bad-labels"),
      rowsFor((c) => (c ? 1 : -1)),
    );
    writeFileSync(scored, '{"query_id": "q0", "label": "maybe"}\n');
    await expect(computeMetrics(store, { metrics: ["kts"], scored, folds: 2 })).rejects.toThrow(
      `${scored}:1: field "label": "maybe" is not one of correct, incorrect, ambiguous, abstain, unparseable`,
    );
    writeFileSync(scored, '{"query_id": "q0", "label": "correct"}\n');
    await expect(computeMetrics(store, { metrics: ["kts"], scored, folds: 2 })).rejects.toThrow(
      /31 of the store's 32 rows have no scored row \(first: "q1"\); hsm metrics --allow-missing-labels leaves them out/,
    );
    const ok = await computeMetrics(store, {
      metrics: ["kts"],
      scored,
      folds: 2,
      allowMissingLabels: true,
      backend: "typescript",
    });
    expect((ok.rows.kts as KtsRow[])[0]!.kts_null_reason).toMatch(/cannot be trained/);
  });
});

describe("folds", () => {
  it("use FNV-1a over UTF-8 bytes", () => {
    expect(fnv1a32("")).toBe(0x811c9dc5);
    expect(fnv1a32("a")).toBe(0xe40c292c);
    expect(fnv1a32("foobar")).toBe(0xbf9cf968);
    // Over UTF-8 bytes, not UTF-16 code units, and without Unicode normalization:
    // NFC é (C3 A9) and NFD e + U+0301 (65 CC 81) are different fact ids. Values from Python.
    expect(fnv1a32("\u00e9")).toBe(0x1e9de8c1);
    expect(fnv1a32("e\u0301")).toBe(0xfa9bc71f);
    expect(fnv1a32("事実")).toBe(0x36638374);
  });
});
