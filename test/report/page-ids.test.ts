/**
 * A metric's section of the report is `#<name>`, so no metric may take an id
 * the page gives its own elements: with a metric named `hsm-data` the page's
 * script read the section's heading as its data and stopped. registerMetric
 * refuses those names, and a written page shows that its list is whole.
 */
import { readFileSync } from "node:fs";
import { join } from "node:path";

import { describe, expect, it } from "vitest";

import { ISS } from "../../src/metrics/iss.js";
import { isReportId, MetricsError, registerMetric } from "../../src/metrics/metric.js";
import { METRICS } from "../../src/metrics/registry.js";
import { writeReport } from "../../src/report/build.js";
import { tempDir } from "../helpers/tmp.js";
import { syntheticModel } from "./synthetic.js";

describe("the report page's own ids", () => {
  it("are names registerMetric refuses, saying why", () => {
    for (const name of ["hsm-data", "fact", "facts", "model-a", "chunk-0", "chunk-12"]) {
      expect(() => registerMetric(METRICS, { ...ISS, name }), name).toThrow(MetricsError);
      expect(() => registerMetric(METRICS, { ...ISS, name }), name).toThrow(
        `A metric cannot be named "${name}": hsm report's page uses that id for its own`,
      );
    }
    expect(registerMetric(METRICS, { ...ISS, name: "chunk" }).map((m) => m.name)).toEqual(["iss", "kts", "chunk"]);
  });

  it("are every id of a written page but the metrics' sections", async () => {
    const dir = tempDir("hsm-page-ids-");
    const outputs = join(dir, "outputs");
    await syntheticModel(outputs, dir, "a", 1, 6);
    await syntheticModel(outputs, dir, "b", 2, 6);
    const out = join(dir, "report.html");
    await writeReport(outputs, { out, replicates: 20 });
    const ids = [...readFileSync(out, "utf8").matchAll(/\bid="([^"]*)"/g)].map((m) => m.at(1)!);
    expect(ids).toEqual(expect.arrayContaining(["iss", "kts", "hsm-data", "chunk-0"]));
    expect(ids.filter((id) => !METRICS.some((m) => m.name === id) && !isReportId(id))).toEqual([]);
  });
});
