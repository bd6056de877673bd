/**
 * A metric that splits its work (Metric.start): `hsm metrics` runs the part
 * returned by `start` while the next layer is computed, still hands over the
 * rows in layer order, gives what `compute` gives, and fails as a whole when a
 * finishing part fails or reads the layer's rows after they were released.
 */
import { join } from "node:path";

import { describe, expect, it } from "vitest";

import { nativeKernels } from "../../src/kernels/native.js";
import { kernelOptions } from "../../src/kernels/default.js";
import { computeMetrics } from "../../src/metrics/compute.js";
import { KTS } from "../../src/metrics/kts.js";
import { metricRows, registerMetric, type Metric, type MetricRow } from "../../src/metrics/metric.js";
import { Rng } from "../../src/util/random.js";
import { tempDir } from "../helpers/tmp.js";
import { tinyStore, type TinyRow } from "../helpers/tiny-store.js";

const LAYERS = [3, 4, 5];
const NATIVE_BUILT = nativeKernels(kernelOptions()) !== undefined && process.env.HSM_NATIVE !== "0";
const ROWS: TinyRow[] = [
  { fact: "f1", family: "anchor", h: [1, 0] },
  { fact: "f2", family: "anchor", h: [0, 3] },
  { fact: "f1", family: "para", h: [3, 4] },
];

interface SumRow extends MetricRow {
  sum: number;
}

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

/**
 * Per layer one row: the sum of the layer's first column. `start` reads it (and logs), the finish waits a while
 * before it logs again and hands the row over; `finish` may instead fail, or read the rows too late.
 */
function summing(log: string[], finish: "ok" | "fail" | "late" = "ok"): Metric<SumRow> {
  const start: NonNullable<Metric<SumRow>["start"]> = async (data) => {
    const { n, d, layer } = data;
    let sum = 0;
    if (finish !== "late") for (let i = 0; i < n; i++) sum += data.h[i * d]!;
    log.push(`start ${layer}`);
    return async () => {
      await sleep(30);
      log.push(`finished ${layer}`);
      if (finish === "fail") throw new Error(`layer ${layer} failed`);
      if (finish === "late") sum = data.h[0]!;
      return [{ layer, family: "all", sum }];
    };
  };
  return {
    name: "sum",
    title: "SUM",
    description: "the first column's sum",
    tableTitle: "SUM",
    needs: [],
    start,
    compute: async (data, s) => (await start(data, s))(),
    columns: { value: "sum", low: "sum", high: "sum" },
  };
}

async function store(): Promise<{ store: string; scored: string }> {
  return tinyStore(join(tempDir("hsm-overlap-"), "tiny"), ROWS, LAYERS);
}

describe("a metric that finishes while the next layer is computed", () => {
  it("overlaps each layer's finish with the next layer's start, and hands the rows over in layer order", async () => {
    const { store: path } = await store();
    const log: string[] = [];
    const registry = registerMetric([], summing(log));
    const result = await computeMetrics(path, { registry, backend: "typescript" });
    expect(result.rows.sum).toEqual(LAYERS.map((layer) => ({ layer, family: "all", sum: 4 })));
    for (const [i, layer] of LAYERS.slice(0, -1).entries()) {
      expect(log.indexOf(`start ${LAYERS[i + 1]}`)).toBeLessThan(log.indexOf(`finished ${layer}`));
    }
  });

  it.each(NATIVE_BUILT ? (["typescript", "native"] as const) : (["typescript"] as const))(
    "gives KTS's rows as computing each layer whole does (%s)",
    async (backend) => {
      // 40 facts, an anchor and two perturbed questions each; correct where the first value (plus noise) is high.
      const rng = new Rng(3);
      const rows: TinyRow[] = [];
      for (let f = 0; f < 40; f++) {
        for (const family of ["anchor", "para", "typo"]) {
          const h = [rng.normal() * 2, rng.normal(), rng.normal() + f / 40];
          rows.push({ fact: `f${f}`, family, h, label: h[0]! + rng.normal() > 0 ? "correct" : "incorrect" });
        }
      }
      const { store: path, scored } = await tinyStore(join(tempDir("hsm-overlap-"), "kts"), rows, LAYERS);
      const split = await computeMetrics(path, { scored, metrics: ["kts"], bootstrap: 50, backend });
      const whole: Metric<MetricRow> = { ...(KTS as unknown as Metric<MetricRow>), start: undefined };
      const unsplit = await computeMetrics(path, {
        scored,
        registry: registerMetric([], whole),
        bootstrap: 50,
        backend,
      });
      expect(split.rows.kts).toEqual(unsplit.rows.kts);
      expect(metricRows(split, KTS).filter((r) => r.auroc !== null)).toHaveLength(
        LAYERS.length * 4, // anchor, para, typo, all
      );
    },
  );

  it("fails when a finishing part fails, or reads the rows after they were released", async () => {
    const { store: path } = await store();
    const run = (finish: "fail" | "late") =>
      computeMetrics(path, { registry: registerMetric([], summing([], finish)), backend: "typescript" });
    await expect(run("fail")).rejects.toThrow("layer 3 failed");
    await expect(run("late")).rejects.toThrow(/layer 3: its rows were read after they were released/);
  });
});
