/**
 * hsm compare's parts: the matched-depth pairing on hand-worked cases, the
 * per-row ISS margins and ranks against iss.json's aggregates, the per-row
 * KTS scores against kts.json's AUROCs, and the comparison of two synthetic
 * models (different numbers of blocks) against counts and differences
 * computed here from the files.
 */
import { cpSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { join } from "node:path";

import { beforeAll, describe, expect, it } from "vitest";

import {
  compareLoaded,
  compareModels,
  issFactValues,
  loadModel,
  type Comparison,
  type LoadedModel,
} from "../../src/report/compare.js";
import { matchDepth, normalizedDepth } from "../../src/report/depth.js";
import { formatComparison } from "../../src/report/format.js";
import { listModels } from "../../src/report/outputs.js";
import { FLOAT64_REORDER } from "../tolerances.js";
import { tempDir } from "../helpers/tmp.js";
import { syntheticModel } from "./synthetic.js";

describe("matchDepth", () => {
  it("pairs equal depths of models with the same number of blocks", () => {
    expect(matchDepth([2, 3, 4, 5], 6, [2, 3, 4, 5], 6).map((p) => [p.layerA, p.layerB])).toEqual([
      [2, 2],
      [3, 3],
      [4, 4],
      [5, 5],
    ]);
  });

  it("picks B's nearest layer in l/(L−1), the shallower on an exact tie", () => {
    // A: L = 4, depths 2/3, 1. B: L = 8, depths 4/7, 5/7, 6/7, 1. |5/7 − 2/3| = 1/21 < |4/7 − 2/3| = 2/21.
    expect(matchDepth([3, 2], 4, [7, 6, 5, 4], 8).map((p) => [p.layerA, p.layerB])).toEqual([
      [2, 5],
      [3, 7],
    ]);
    // A: L = 3, depth 1/2. B: L = 5 stores 1 and 3 (depths 1/4 and 3/4): a tie, so 1.
    expect(matchDepth([1], 3, [3, 1], 5)[0]).toEqual({ layerA: 1, layerB: 1, depthA: 0.5, depthB: 0.25 });
    // A: L = 10, layer 6 (2/3). B: L = 4 stores 2 (2/3) and 3: exactly equal depth.
    expect(matchDepth([6], 10, [2, 3], 4).map((p) => p.layerB)).toEqual([2]);
  });

  it("puts a one-block model at depth 0 and pairs nothing with a model without layers", () => {
    expect(normalizedDepth(0, 1)).toBe(0);
    expect(matchDepth([0], 1, [1, 2, 3], 4).map((p) => p.layerB)).toEqual([1]);
    expect(matchDepth([1, 2], 3, [], 4)).toEqual([]);
  });
});

const dir = tempDir("hsm-compare-");
const outputs = join(dir, "outputs");

type Row = Record<string, number | string | null>;
const metricRows = (model: string, metric: string): Row[] =>
  JSON.parse(readFileSync(join(outputs, "metrics", model, `${metric}.json`), "utf8")).rows;
const scoredRows = (model: string): Row[] =>
  readFileSync(join(outputs, "evaluation", `${model}.scored.jsonl`), "utf8")
    .trim()
    .split("\n")
    .map((l) => JSON.parse(l));

/** The fact-macro mean: mean within each fact, then over facts. */
function factMacro(fact: readonly string[], value: ArrayLike<number>): number {
  const sums = new Map<string, [number, number]>();
  fact.forEach((f, i) => {
    const s = sums.get(f) ?? [0, 0];
    sums.set(f, [s[0] + value[i]!, s[1] + 1]);
  });
  return [...sums.values()].reduce((t, [s, n]) => t + s / n, 0) / sums.size;
}

/** Mann–Whitney AUROC by counting every pair (ties ½). */
function aurocByPairs(score: ArrayLike<number>, label: ArrayLike<number>): number {
  let wins = 0;
  let pairs = 0;
  for (let i = 0; i < score.length; i++) {
    if (label[i] !== 1) continue;
    for (let j = 0; j < score.length; j++) {
      if (label[j] !== 0) continue;
      pairs++;
      wins += score[i]! > score[j]! ? 1 : score[i] === score[j] ? 0.5 : 0;
    }
  }
  return wins / pairs;
}

describe("per-row values and the paired comparison", () => {
  let a: LoadedModel;
  let b: LoadedModel;
  let c: Comparison;

  beforeAll(async () => {
    await syntheticModel(outputs, dir, "six", 1, 6);
    // Three folds, not the default five: the per-row scores must follow what kts.json recorded.
    await syntheticModel(outputs, dir, "ten", 2, 10, { folds: 3 });
    const models = await listModels(outputs);
    expect(models.map((m) => m.name)).toEqual(["six", "ten"]);
    [a, b] = (await Promise.all(models.map((m) => loadModel(m)))) as [LoadedModel, LoadedModel];
    c = compareLoaded(a, b, { replicates: 200 });
  }, 120_000);

  it("per-row ISS margins and ranks give iss.json's iss, r_at_1 and mrr fact-macro", () => {
    for (const row of metricRows("six", "iss")) {
      const v = issFactValues(a, row.layer as number, row.family as string);
      expect(v.fact.length).toBe(row.n_queries);
      expect(Math.abs(factMacro(v.fact, v.value) - (row.iss as number))).toBeLessThanOrEqual(FLOAT64_REORDER);
      const it = a.values.iss.get(row.layer as number)!;
      const keep = Array.from(it.rows.keys()).filter(
        (i) => row.family === "all" || a.values.families[it.rows[i]!] === row.family,
      );
      const facts = keep.map((i) => a.values.facts[it.rows[i]!]!);
      expect(
        Math.abs(
          factMacro(
            facts,
            keep.map((i) => (it.rank[i] === 1 ? 1 : 0)),
          ) - (row.r_at_1 as number),
        ),
      ).toBeLessThanOrEqual(FLOAT64_REORDER);
      expect(
        Math.abs(
          factMacro(
            facts,
            keep.map((i) => 1 / it.rank[i]!),
          ) - (row.mrr as number),
        ),
      ).toBeLessThanOrEqual(FLOAT64_REORDER);
    }
  });

  /** Each kts.json row with an AUROC (more than ten of them) against the AUROC of `m`'s per-row scores. */
  function expectKtsAurocs(m: LoadedModel, rows: Row[]): void {
    const scored = rows.filter((r) => r.auroc !== null);
    expect(scored.length).toBeGreaterThan(10);
    for (const row of scored) {
      const v = m.values.kts.get(row.layer as number)!;
      const keep = Array.from(v.rows.keys()).filter((i) => {
        const f = m.values.families[v.rows[i]!];
        return row.family === "all" ? f !== "anchor" : f === row.family;
      });
      expect(keep.length).toBe(row.n_queries);
      const auroc = aurocByPairs(
        keep.map((i) => v.score[i]!),
        keep.map((i) => v.label[i]!),
      );
      expect(Math.abs(auroc - (row.auroc as number))).toBeLessThanOrEqual(FLOAT64_REORDER);
    }
  }

  it("per-row KTS scores give kts.json's AUROC per family, with the folds it records", () => {
    expectKtsAurocs(b, metricRows("ten", "kts"));
  });

  it("per-row KTS scores give kts.json's AUROC of a model whose abstentions counted as incorrect", async () => {
    const root = join(dir, "abstain");
    await syntheticModel(root, dir, "abst", 3, 6, { abstainAsIncorrect: true });
    const [model] = await listModels(root);
    const m = await loadModel(model!);
    expectKtsAurocs(m, JSON.parse(readFileSync(join(root, "metrics", "abst", "kts.json"), "utf8")).rows as Row[]);
  });

  it("compares correctness per family on the same queries, BH-adjusted across the table", () => {
    const [sa, sb] = [scoredRows("six"), scoredRows("ten")];
    const right = new Map(sb.map((r) => [r.query_id, r.label === "correct"]));
    expect(c.families.map((f) => f.family)).toEqual([
      "anchor",
      "distractor",
      "paraphrase",
      "reorder",
      "reverse",
      "translation",
      "typo",
      "all",
    ]);
    for (const f of c.families) {
      const rows = sa.filter((r) =>
        f.family === "all" ? r.condition_family !== "anchor" : r.condition_family === f.family,
      );
      expect(f.a.n).toBe(rows.length);
      expect(f.a.correct).toBe(rows.filter((r) => r.label === "correct").length);
      expect(f.paired.onlyA).toBe(rows.filter((r) => r.label === "correct" && !right.get(r.query_id as string)).length);
      expect(f.paired.onlyB).toBe(rows.filter((r) => r.label !== "correct" && right.get(r.query_id as string)).length);
      expect(f.pAdjusted).toBeGreaterThanOrEqual(f.paired.p!);
    }
    // BH by hand: m = 8 p-values, the i-th smallest times 8/i, then the running minimum from the top.
    const sorted = c.families.map((f) => f.paired.p!).sort((x, y) => x - y);
    const adjusted = sorted.map((_, i) => Math.min(1, ...sorted.slice(i).map((q, j) => (8 * q) / (i + j + 1))));
    expect(c.families.map((f) => f.pAdjusted!).sort((x, y) => x - y)).toEqual(adjusted);
  });

  it("leaves a family without shared queries untested and out of BH's m", () => {
    const noReverse = { ...b, scored: new Map([...b.scored].filter(([, q]) => q.family !== "reverse")) };
    const r = compareLoaded(a, noReverse, { replicates: 20 });
    const reverse = r.families.find((f) => f.family === "reverse")!;
    expect(reverse.paired).toMatchObject({ n: 0, p: null, difference: null });
    expect(reverse.pAdjusted).toBeNull();
    const tested = r.families.filter((f) => f !== reverse);
    const sorted = tested.map((f) => f.paired.p!).sort((x, y) => x - y);
    const adjusted = sorted.map((_, i) => Math.min(1, ...sorted.slice(i).map((q, j) => (7 * q) / (i + j + 1))));
    expect(tested.map((f) => f.pAdjusted!).sort((x, y) => x - y)).toEqual(adjusted);
    expect(
      formatComparison(r)
        .split("\n")
        .find((l) => l.startsWith("reverse")),
    ).toMatch(/\s—\s+—$/);
  });

  it("refuses scored rows that disagree on a query's family or fact, with its model's store or the other model", async () => {
    const [first] = b.scored.keys();
    const renamed = new Map(b.scored);
    renamed.set(first!, { ...b.scored.get(first!)!, family: "zzz" });
    expect(() => compareLoaded(a, { ...b, scored: renamed }, { replicates: 20 })).toThrow(
      `query "${first}" is ${a.scored.get(first!)!.family} of fact "${a.scored.get(first!)!.fact}" in ${a.scoredFile} but zzz of fact "${b.scored.get(first!)!.fact}" in ${b.scoredFile}: the two models answered different banks`,
    );
    // The same edit in the file: the model's own store holds the query's family.
    const root = join(dir, "disagree");
    cpSync(outputs, root, { recursive: true });
    const file = join(root, "evaluation", "ten.scored.jsonl");
    const lines = readFileSync(file, "utf8").trimEnd().split("\n");
    const row = JSON.parse(lines[0]!);
    const stored = row.condition_family;
    row.condition_family = "zzz";
    writeFileSync(file, [JSON.stringify(row), ...lines.slice(1)].join("\n") + "\n");
    const [, ten] = await listModels(root);
    await expect(loadModel(ten!)).rejects.toThrow(
      `${file}: query "${row.query_id}" is zzz of fact "${row.fact_id}", but ${stored} of fact "${row.fact_id}" in the store ${join(root, "hidden", "ten")}`,
    );
  });

  it("refuses two models that share no query", () => {
    const renamed = new Map([...b.scored].map(([id, q]) => [`other-${id}`, { ...q, queryId: `other-${id}` }]));
    expect(() => compareLoaded(a, { ...b, scored: renamed }, { replicates: 20 })).toThrow(
      `${a.scoredFile} and ${b.scoredFile} share no query_id: the two models answered different banks, and no row pairs`,
    );
  });

  it("refuses a query scored twice, though it is not in the store, naming both lines", async () => {
    const root = join(dir, "twice");
    cpSync(outputs, root, { recursive: true });
    const file = join(root, "evaluation", "ten.scored.jsonl");
    const lines = readFileSync(file, "utf8").trimEnd().split("\n");
    // A reverse query (not a main-forward row, so not in the store) again, with the other label.
    const first = lines.findIndex((l) => JSON.parse(l).condition_family === "reverse");
    const row = JSON.parse(lines[first]!);
    row.label = row.label === "correct" ? "incorrect" : "correct";
    writeFileSync(file, [...lines, JSON.stringify(row)].join("\n") + "\n");
    const [, ten] = await listModels(root);
    await expect(loadModel(ten!)).rejects.toThrow(
      `${file}:${lines.length + 1}: field "query_id": "${row.query_id}" is scored twice (first on line ${first + 1})`,
    );
  });

  it("refuses a kts.json that is not JSON in one line, though it is indented", async () => {
    const root = join(dir, "nan");
    cpSync(outputs, root, { recursive: true });
    const file = join(root, "metrics", "ten", "kts.json");
    writeFileSync(file, '{\n  "config": {\n    "folds": NaN,\n    "probe_c": 1\n  }\n}\n');
    const [, ten] = await listModels(root);
    const err = (await loadModel(ten!).catch((e: Error) => e)) as Error;
    expect(err.message).toMatch(new RegExp(`^${file}: not valid JSON \\(.*NaN.*\\)$`));
    expect(err.message).not.toContain("\n");
  });

  it("says which command leaves out store rows the scored file lacks: compare takes it from kts.json", async () => {
    const root = join(dir, "unscored");
    cpSync(outputs, root, { recursive: true });
    const file = join(root, "evaluation", "ten.scored.jsonl");
    const lines = readFileSync(file, "utf8").trimEnd().split("\n");
    writeFileSync(file, lines.slice(1).join("\n") + "\n");
    const [, ten] = await listModels(root);
    const err = (await loadModel(ten!).catch((e: Error) => e)) as Error;
    expect(err.message).toMatch(/rows have no scored row .*; hsm metrics --allow-missing-labels leaves them out$/);
    // What hsm metrics --allow-missing-labels records is what compare then reads.
    const kts = join(root, "metrics", "ten", "kts.json");
    const results = JSON.parse(readFileSync(kts, "utf8"));
    results.config.allow_missing_labels = true;
    writeFileSync(kts, JSON.stringify(results));
    expect((await loadModel(ten!)).values.kts.size).toBeGreaterThan(0);
  });

  it("compares ISS at matched depth: the point difference is iss(A) − iss(B) of the paired layers", () => {
    expect(c.pairs.map((p) => [p.layerA, p.layerB])).toEqual([
      [2, 4],
      [3, 5],
      [4, 7],
      [5, 9],
    ]);
    const issA = metricRows("six", "iss");
    const issB = metricRows("ten", "iss");
    const at = (rows: Row[], layer: number, family: string) =>
      rows.find((r) => r.layer === layer && r.family === family)!.iss as number;
    expect(c.depth.length).toBe(4 * 6);
    for (const d of c.depth) {
      expect(d.iss.nFacts).toBe(40);
      expect(
        Math.abs(d.iss.difference! - (at(issA, d.layerA, d.family) - at(issB, d.layerB, d.family))),
      ).toBeLessThanOrEqual(FLOAT64_REORDER);
      expect(d.iss.low!).toBeLessThanOrEqual(d.iss.high!);
    }
    expect(c.depth.filter((d) => d.kts !== null && d.kts.difference !== null).length).toBeGreaterThan(0);
  });

  it("a model against itself differs by exactly zero, and compareModels reads the same from the outputs root", async () => {
    const self = compareLoaded(a, a, { replicates: 50 });
    for (const d of self.depth) expect([d.iss.difference, d.iss.low, d.iss.high]).toEqual([0, 0, 0]);
    for (const f of self.families) expect([f.paired.onlyA, f.paired.onlyB, f.paired.p]).toEqual([0, 0, 1]);
    const again = await compareModels(outputs, "six", "ten", { replicates: 200 });
    expect(again).toEqual(c);
    const text = formatComparison(c).split("\n");
    expect(text[0]).toBe("six (A) vs ten (B): paired on the same queries and facts; differences are A − B");
    expect(text.some((l) => /^\s*2\s+4\s+0\.400\s+0\.444\s+all\s+[+-]\d\.\d{4} \[/.test(l))).toBe(true);
  }, 60_000);

  it("reads a moved study's models under the folder given, and imported models where they live", async () => {
    const ran = join(dir, "ran");
    cpSync(outputs, ran, { recursive: true });
    const entry = (name: string, status: string, root: string) => ({
      name,
      status,
      outputs: root,
      paths: {
        generations: join(root, "evaluation", `${name}.jsonl`),
        scored: join(root, "evaluation", `${name}.scored.jsonl`),
        store: join(root, "hidden", name),
        metrics: join(root, "metrics", name),
      },
    });
    const record = { format: "hsm-study/1", models: [entry("six", "done", ran), entry("ten", "imported", outputs)] };
    writeFileSync(join(ran, "study.json"), JSON.stringify(record));
    const moved = join(dir, "moved");
    cpSync(ran, moved, { recursive: true });
    rmSync(ran, { recursive: true });
    expect(await listModels(moved)).toEqual([
      { name: "six", paths: entry("six", "done", moved).paths },
      { name: "ten", paths: entry("ten", "imported", outputs).paths },
    ]);
    expect(await compareModels(moved, "six", "ten", { replicates: 200 })).toEqual(c);
  }, 60_000);

  it("names the models an outputs root has when asked for another", async () => {
    await expect(compareModels(outputs, "six", "seven")).rejects.toThrow(
      `${outputs}: no model "seven" with scored rows; models there: six, ten`,
    );
  });
});
