/**
 * Metrics on a planted fixture: the numbers behave as planted, every backend
 * agrees within docs/metrics.md#tolerances, and so does an independent NumPy +
 * scikit-learn implementation (scripts/metrics_peer.py).
 */
import { join } from "node:path";

import { beforeAll, describe, expect, it } from "vitest";

import { computeMetrics, type MetricsResult } from "../../src/metrics/compute.js";
import { ISS } from "../../src/metrics/iss.js";
import { KTS } from "../../src/metrics/kts.js";
import { metricRows } from "../../src/metrics/metric.js";
import { FIXTURE_FAMILIES, writeFixture } from "../../src/synthetic/store.js";
import { agree, agreeRows } from "../helpers/agree.js";
import { hasSklearn, numpyRequired, python } from "../helpers/numpy.js";
import { BACKENDS } from "../helpers/backends.js";
import { tempDir } from "../helpers/tmp.js";

const dir = tempDir("hsm-metrics-fx-");
const fx = { store: join(dir, "fx", "store"), scored: join(dir, "fx", "scored.jsonl") };
const results: Record<string, MetricsResult> = {};
const MILD_TO_STRONG = Object.entries(FIXTURE_FAMILIES)
  .sort((a, b) => a[1] - b[1])
  .map(([f]) => f);

beforeAll(async () => {
  await writeFixture(join(dir, "fx"), { facts: 400, d: 32, layersTotal: 6, seed: 11 });
  for (const backend of BACKENDS) results[backend] = await computeMetrics(fx.store, { scored: fx.scored, backend });
});

describe("metrics on a planted fixture", () => {
  it("ISS and r_at_1 rise with depth; mild families sit above strong ones", () => {
    const iss = metricRows(results.typescript!, ISS);
    const at = (layer: number, family: string) => iss.find((r) => r.layer === layer && r.family === family)!;
    for (const f of [...MILD_TO_STRONG, "all"]) {
      expect(at(5, f).iss!).toBeGreaterThan(at(2, f).iss!);
      expect(at(5, f).r_at_1!).toBeGreaterThanOrEqual(at(2, f).r_at_1!);
    }
    expect(at(2, "translation").r_at_1!).toBeLessThan(at(5, "translation").r_at_1!);
    for (const layer of [2, 3, 4, 5]) {
      for (let k = 1; k < MILD_TO_STRONG.length; k++)
        expect(at(layer, MILD_TO_STRONG[k - 1]!).iss!).toBeGreaterThan(at(layer, MILD_TO_STRONG[k]!).iss!);
    }
  });

  it("KTS is near 1 for mild families and lower for strong ones", () => {
    const kts = metricRows(results.typescript!, KTS);
    for (const layer of [4, 5]) {
      const at = (family: string) => kts.find((r) => r.layer === layer && r.family === family)!;
      expect(at("anchor").auroc!).toBeGreaterThan(0.7);
      expect(Math.abs(at("paraphrase").kts! - 1)).toBeLessThan(0.2);
      expect(at("translation").kts!).toBeLessThan(at("paraphrase").kts! - 0.2);
      expect(at("anchor").probes_not_converged).toBe(0);
    }
  });

  it("every backend agrees within the tolerances", () => {
    const ref = results.typescript!;
    for (const backend of BACKENDS.filter((b) => b !== "typescript")) {
      agreeRows(metricRows(ref, ISS), metricRows(results[backend]!, ISS));
      agreeRows(metricRows(ref, KTS), metricRows(results[backend]!, KTS));
    }
  });

  it.skipIf(!hasSklearn && !numpyRequired)(
    "agrees with a NumPy + scikit-learn implementation of the same definitions",
    () => {
      const peer = JSON.parse(
        python(
          `import runpy, sys; sys.argv = ["metrics_peer.py", sys.argv[1], "--scored", sys.argv[2]]; runpy.run_path(sys.argv[0] if False else "${join(import.meta.dirname, "..", "..", "scripts", "metrics_peer.py")}", run_name="__main__")`,
          fx.store,
          fx.scored,
        ),
      );
      const mine = results[BACKENDS.at(-1)!]!;
      for (const p of peer.iss) {
        const m = metricRows(mine, ISS).find((r) => r.layer === p.layer && r.family === p.family)!;
        for (const f of ["iss", "own_cos", "other_cos", "r_at_1", "mrr", "n_queries", "n_facts"])
          agree(f, m[f as keyof typeof m] as number, p[f]);
        agree("iss_ci_low", m.iss_ci_low, p.iss_ci_low, m.iss_ci_high! - m.iss_ci_low!);
        agree("iss_ci_high", m.iss_ci_high, p.iss_ci_high, m.iss_ci_high! - m.iss_ci_low!);
      }
      for (const p of peer.kts) {
        const m = metricRows(mine, KTS).find((r) => r.layer === p.layer && r.family === p.family)!;
        for (const f of ["auroc", "kts", "n_queries", "n_correct"]) agree(f, m[f as keyof typeof m] as number, p[f]);
      }
    },
  );
});
