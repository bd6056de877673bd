/**
 * A metric is one registered unit: a toy third metric, added to a registry of
 * its own (the built-in one untouched), is selectable and listed by
 * `hsm metrics` (`--metrics`, `--help`), computed, written to JSON, CSV and
 * SVG, printed in the table and charted in the report — with no change
 * anywhere else. This is the metric docs/contributing.md walks through.
 */
import { cpSync, readFileSync } from "node:fs";
import { join } from "node:path";

import { Command } from "commander";
import { describe, expect, it, vi } from "vitest";

import { metricsCommand } from "../../src/cli/commands/metrics.js";
import { printMetrics } from "../../src/cli/print.js";
import { UsageError } from "../../src/errors.js";
import { writeFixture } from "../../src/synthetic/store.js";
import { computeMetrics } from "../../src/metrics/compute.js";
import { ISS } from "../../src/metrics/iss.js";
import { metricRows } from "../../src/metrics/metric.js";
import type { LayerData, Metric, MetricRow } from "../../src/metrics/metric.js";
import { METRICS, registerMetric } from "../../src/metrics/registry.js";
import { runMetrics } from "../../src/pipeline/metrics.js";
import { writeReport } from "../../src/report/build.js";
import { formatTables, writeResults } from "../../src/metrics/report.js";
import { typescriptKernels } from "../../src/kernels/typescript/index.js";
import { Rng } from "../../src/util/random.js";
import { tempDir } from "../helpers/tmp.js";
import { tinyStore, type TinyRow } from "../helpers/tiny-store.js";
import { importWalk } from "../helpers/walks.js";

interface NormRow extends MetricRow {
  mean_norm: number | null;
  norm_ci_low: number | null;
  norm_ci_high: number | null;
}

/** The toy metric as docs/contributing.md writes it: per family, the fact-macro mean Euclidean length of the finite rows. */
const { NORM } = await importWalk<{ NORM: Metric<NormRow> }>("src/metrics/norm.ts");

const ROWS: TinyRow[] = [
  { fact: "f1", family: "anchor", h: [1, 0] },
  { fact: "f2", family: "anchor", h: [0, 1] },
  { fact: "f1", family: "para", h: [3, 4] }, // length 5
  { fact: "f1", family: "para", h: [0, 1] }, // length 1: f1 averages 3
  { fact: "f2", family: "para", h: [6, 8] }, // length 10
  { fact: "f2", family: "typo", h: [0, 2] }, // length 2
  { fact: "f1", family: "broken", h: [Infinity, 0] }, // no finite row: no value
];

describe("a third metric in its own registry", () => {
  it("is computed, written to JSON, CSV and SVG, and printed, beside the built-in ones", async () => {
    const dir = tempDir("hsm-toy-metric-");
    const { store } = await tinyStore(join(dir, "tiny"), ROWS, [3, 4]);
    const registry = registerMetric(METRICS, NORM);
    const result = await computeMetrics(store, {
      registry,
      metrics: ["iss", "norm"],
      bootstrap: 20,
      backend: "typescript",
    });
    const rows = metricRows(result, NORM);
    const at = (layer: number, family: string) => rows.find((r) => r.layer === layer && r.family === family)!;
    // para: facts f1 (5 + 1)/2 = 3 and f2 10, mean 6.5; typo: f2 2; all: f1 3, f2 (10 + 2)/2 = 6, mean 4.5.
    for (const layer of [3, 4]) {
      expect(at(layer, "para")).toMatchObject({ n_queries: 3, mean_norm: 6.5 });
      expect(at(layer, "typo")).toMatchObject({ n_queries: 1, mean_norm: 2, norm_ci_low: 2, norm_ci_high: 2 });
      expect(at(layer, "all")).toMatchObject({ n_queries: 4, mean_norm: 4.5 });
      expect(at(layer, "broken")).toMatchObject({ mean_norm: null, norm_null_reason: "no rows in this family" });
      expect(at(layer, "para").norm_ci_low!).toBeGreaterThanOrEqual(3);
      expect(at(layer, "para").norm_ci_high!).toBeLessThanOrEqual(10);
    }
    expect(metricRows(result, ISS).length).toBe(8); // the built-in metric still runs beside it: 4 families × 2 layers

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
    expect(csv).toContain("4,broken,0,,,,no rows in this family");
    const svg = readFileSync(join(out, "norm.svg"), "utf8");
    expect(svg).toContain("NORM by layer — tiny");
    for (const family of ["para", "typo", "all"]) expect(svg).toContain(`>${family}</text>`);
    expect(svg).toMatch(/<polyline points="[\d.]+,[\d.]+ [\d.]+,[\d.]+"/); // para, typo and all have a value at both layers

    const table = formatTables(result, registry).split("\n");
    const start = table.indexOf("NORM (mean row length)");
    expect(start).toBeGreaterThan(0); // after the ISS table
    expect(table[start + 1]).toMatch(/^layer +broken +para +typo +all$/);
    expect(table[start + 2]).toMatch(/^3 +— +6\.500 +2\.000 +4\.500$/);
    expect(table).toContain("  — no rows in this family");
  });

  it("leaves the built-in registry as it was, and takes only new, lower-case names", () => {
    registerMetric(METRICS, NORM);
    expect(METRICS.map((m) => m.name)).toEqual(["iss", "kts"]);
    const taken = 'A metric named "iss" is already registered';
    expect(() => registerMetric(METRICS, { ...NORM, name: "iss" })).toThrow(taken);
    expect(() => registerMetric(METRICS, { ...NORM, name: "Norm" })).toThrow(/Expected a metric name of a-z/);
  });
});

describe("the same metric, through what hsm metrics and hsm report run", () => {
  const registry = registerMetric(METRICS, NORM);

  it("is a --metrics choice and in --help", () => {
    const program = new Command("hsm");
    metricsCommand(program, { metrics: registry, exportFormats: [] });
    const cmd = program.commands[0]!;
    const help = cmd.helpInformation().replace(/\s+/g, " ");
    expect(help).toContain("and NORM (how long are the rows of each family?) for every stored layer");
    expect(help).toContain("(iss.json, kts.json, norm.json, …)");
    expect(help).toContain("--metrics <list> iss, kts, norm, comma-separated");
    expect(help).toContain("(default: all with --scored, else iss,norm)");
    const parse = cmd.options.find((o) => o.long === "--metrics")!.parseArg!;
    expect(parse("iss,norm", undefined)).toEqual(["iss", "norm"]);
    const refused = 'Expected --metrics iss, kts, norm or iss,kts,norm but received "iss,nrom"';
    expect(() => parse("iss,nrom", undefined)).toThrow(new UsageError(refused));
  });

  it("is written, printed and charted in the report", async () => {
    const dir = tempDir("hsm-toy-walk-");
    const outputs = join(dir, "outputs");
    const fx = await writeFixture(join(dir, "fx"), { facts: 20, d: 8 });
    cpSync(fx.store, join(outputs, "hidden", "toy"), { recursive: true });
    cpSync(fx.scored, join(outputs, "evaluation", "toy.scored.jsonl"));
    const store = join(outputs, "hidden", "toy");
    const out = join(outputs, "metrics", "toy");
    // Without --scored, the metrics that need no labels: ISS and NORM.
    const { result, files } = await runMetrics(store, { registry, out, bootstrap: 20, backend: "typescript" });
    expect(Object.keys(result.rows)).toEqual(["iss", "norm"]);
    expect(files.json).toEqual([join(out, "iss.json"), join(out, "norm.json")]);
    expect(files.csv).toEqual([join(out, "iss.csv"), join(out, "norm.csv")]);
    expect(files.svg).toEqual([join(out, "iss.svg"), join(out, "norm.svg")]);

    const printed: string[] = [];
    const write = vi.spyOn(process.stdout, "write").mockImplementation((text) => (printed.push(String(text)), true));
    try {
      await printMetrics(result, files, 1, registry);
    } finally {
      write.mockRestore();
    }
    const lines = printed.join("").split("\n");
    expect(lines).toContain("NORM (mean row length)");
    expect(lines.indexOf("NORM (mean row length)")).toBeGreaterThan(lines.indexOf(ISS.tableTitle));
    expect(lines).toContain(`wrote ${[...files.json, ...files.csv].join(", ")}`);

    const html = readFileSync((await writeReport(outputs, { registry, verify: false, replicates: 20 })).path, "utf8");
    expect(html).toContain('<a href="#iss">ISS</a><a href="#kts">KTS</a><a href="#norm">NORM</a>');
    expect(html).toContain('<h2 id="norm">NORM by normalized depth');
    const section = html.slice(html.indexOf('<h2 id="norm">'), html.indexOf('<h2 id="compare">'));
    expect(section).toContain('<figure class="chart" data-family="paraphrase">');
    expect(section).toContain('<figure class="chart" data-family="all">');
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
