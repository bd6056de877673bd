/**
 * A metric is one registered unit: a toy third metric, added to a registry of
 * its own (the built-in one untouched), is computed, written to JSON, CSV and
 * SVG, and printed in the table — with no change anywhere else. This is the
 * metric docs/contributing.md walks through.
 */
import { readFileSync } from "node:fs";
import { join } from "node:path";

import { describe, expect, it } from "vitest";

import { ANCHOR_FAMILY } from "../../src/bank/prompt.js";
import { computeMetrics } from "../../src/metrics/compute.js";
import { ALL_FAMILIES, type LayerData, type Metric, type MetricSettings } from "../../src/metrics/metric.js";
import { METRICS } from "../../src/metrics/registry.js";
import { formatTables, writeResults } from "../../src/metrics/report.js";
import { typescriptKernels } from "../../src/kernels/typescript/index.js";
import { Rng } from "../../src/util/random.js";
import { tempDir } from "../helpers/tmp.js";
import { tinyStore, type TinyRow } from "../helpers/tiny-store.js";

interface NormRow {
  layer: number;
  family: string;
  n_queries: number;
  mean_norm: number | null;
  norm_ci_low: number | null;
  norm_ci_high: number | null;
  norm_null_reason: string | null;
}

/** The toy metric: per family, the mean over facts of the mean Euclidean length of the family's finite rows. */
const NORM: Metric<NormRow> = {
  name: "norm",
  title: "NORM",
  tableTitle: "NORM (mean row length)",
  needs: [],
  columns: { value: "mean_norm", low: "norm_ci_low", high: "norm_ci_high", nullReason: "norm_null_reason" },
  async compute(data: LayerData, s: MetricSettings): Promise<NormRow[]> {
    const { n, d, h, finite, facts, families, kernels } = data;
    const out: NormRow[] = [];
    for (const family of [...data.familyNames, ALL_FAMILIES, "missing"]) {
      const byFact = new Map<string, number[]>();
      for (let i = 0; i < n; i++) {
        if (!finite[i] || families[i] === ANCHOR_FAMILY || (family !== ALL_FAMILIES && families[i] !== family)) continue;
        const len = Math.hypot(...h.subarray(i * d, (i + 1) * d));
        byFact.set(facts[i]!, [...(byFact.get(facts[i]!) ?? []), len]);
      }
      const row: NormRow = { layer: data.layer, family, n_queries: 0, mean_norm: null, norm_ci_low: null, norm_ci_high: null, norm_null_reason: null };
      if (byFact.size === 0) {
        out.push({ ...row, norm_null_reason: "no rows in this family" });
        continue;
      }
      const means = Float64Array.from(byFact.values(), (v) => v.reduce((a, b) => a + b, 0) / v.length);
      const reps = new Float64Array(s.bootstrap);
      await kernels.bootstrapMean(s.seed, 1, means, s.bootstrap, reps);
      const sorted = [...reps].sort((a, b) => a - b);
      out.push({
        ...row,
        n_queries: [...byFact.values()].reduce((a, v) => a + v.length, 0),
        mean_norm: means.reduce((a, b) => a + b, 0) / means.length,
        norm_ci_low: sorted[0]!,
        norm_ci_high: sorted.at(-1)!,
      });
    }
    return out;
  },
};

const ROWS: TinyRow[] = [
  { fact: "f1", family: "anchor", h: [1, 0] },
  { fact: "f2", family: "anchor", h: [0, 1] },
  { fact: "f1", family: "para", h: [3, 4] }, // length 5
  { fact: "f1", family: "para", h: [0, 1] }, // length 1: f1 averages 3
  { fact: "f2", family: "para", h: [6, 8] }, // length 10
  { fact: "f2", family: "typo", h: [0, 2] }, // length 2
];

describe("a third metric in its own registry", () => {
  it("is computed, written to JSON, CSV and SVG, and printed, beside the built-in ones", async () => {
    const dir = tempDir("hsm-toy-metric-");
    const { store } = await tinyStore(join(dir, "tiny"), ROWS, [3, 4]);
    const registry = [...METRICS, NORM];
    const result = await computeMetrics(store, { registry, metrics: ["iss", "norm"], bootstrap: 20, backend: "typescript" });
    const rows = result.rows.norm as unknown as NormRow[];
    const at = (layer: number, family: string) => rows.find((r) => r.layer === layer && r.family === family)!;
    // para: facts f1 (5 + 1)/2 = 3 and f2 10, mean 6.5; typo: f2 2; all: f1 3, f2 (10 + 2)/2 = 6, mean 4.5.
    for (const layer of [3, 4]) {
      expect(at(layer, "para")).toMatchObject({ n_queries: 3, mean_norm: 6.5 });
      expect(at(layer, "typo")).toMatchObject({ n_queries: 1, mean_norm: 2, norm_ci_low: 2, norm_ci_high: 2 });
      expect(at(layer, "all")).toMatchObject({ n_queries: 4, mean_norm: 4.5 });
      expect(at(layer, "missing")).toMatchObject({ mean_norm: null, norm_null_reason: "no rows in this family" });
      expect(at(layer, "para").norm_ci_low!).toBeGreaterThanOrEqual(3);
      expect(at(layer, "para").norm_ci_high!).toBeLessThanOrEqual(10);
    }
    expect(result.iss.length).toBe(6); // the built-in metric still runs beside it

    const out = join(dir, "out");
    const files = await writeResults(out, result, store, registry);
    expect(files.json).toEqual([join(out, "iss.json"), join(out, "norm.json")]);
    const json = JSON.parse(readFileSync(join(out, "norm.json"), "utf8"));
    expect(json.metric).toBe("NORM");
    expect(json.model).toBe("tiny");
    expect(json.config.metrics).toEqual(["iss", "norm"]);
    expect(json.rows).toEqual(rows);
    const csv = readFileSync(join(out, "norm.csv"), "utf8").trim().split("\n");
    expect(csv[0]).toBe("layer,family,n_queries,mean_norm,norm_ci_low,norm_ci_high,norm_null_reason");
    expect(csv).toContain("3,typo,1,2,2,2,");
    expect(csv).toContain("4,missing,0,,,,no rows in this family");
    const svg = readFileSync(join(out, "norm.svg"), "utf8");
    expect(svg).toContain("NORM by layer — tiny");
    for (const family of ["para", "typo", "all"]) expect(svg).toContain(`>${family}</text>`);
    expect(svg).toMatch(/<polyline points="[\d.]+,[\d.]+ [\d.]+,[\d.]+"/); // para, typo and all have a value at both layers

    const table = formatTables(result, registry).split("\n");
    const start = table.indexOf("NORM (mean row length)");
    expect(start).toBeGreaterThan(0); // after the ISS table
    expect(table[start + 1]).toMatch(/^layer +para +typo +all +missing$/);
    expect(table[start + 2]).toMatch(/^3 +6\.500 +2\.000 +4\.500 +—$/);
    expect(table).toContain("  — no rows in this family");
  });

  it("leaves the built-in registry as it was", () => {
    expect(METRICS.map((m) => m.name)).toEqual(["iss", "kts"]);
  });
});

describe("the built-in metrics", () => {
  it("leave the layer's rows as read, so their order does not matter", async () => {
    const rng = new Rng(17);
    const facts: string[] = [];
    const families: string[] = [];
    for (let f = 0; f < 40; f++) {
      for (const family of ["anchor", "para", "typo"]) {
        facts.push(`f${f}`);
        families.push(family);
      }
    }
    const n = facts.length;
    const d = 8;
    const h = Float32Array.from({ length: n * d }, () => rng.normal() * 3 + 1);
    const labels = Uint8Array.from({ length: n }, (_, i) => (h[i * d]! + rng.normal() > 1 ? 1 : 0));
    const data = (): LayerData => {
      let own: Float32Array | undefined;
      return {
        layer: 1,
        n,
        d,
        h,
        finite: new Uint8Array(n).fill(1),
        facts,
        families,
        familyNames: ["para", "typo"],
        labels,
        kernels: typescriptKernels,
        buffer: (length) => (own ??= new Float32Array(length)),
      };
    };
    const settings = { probeC: 0.01, folds: 3, bootstrap: 50, seed: 1 };
    const before = h.slice();
    const alone = await Promise.all(METRICS.map((m) => m.compute(data(), settings)));
    expect(h).toEqual(before);
    const reversed = [];
    for (const m of [...METRICS].reverse()) reversed.unshift(await m.compute(data(), settings));
    expect(reversed).toEqual(alone);
    expect(h).toEqual(before);
  });
});
