/**
 * The metrics on WebGPU (TensorFlow.js over the `webgpu` package), on the adapter this machine offers: SwiftShader's
 * software one in CI (test/helpers/software-gpu.ts). Its environment must be set before a process starts, so the
 * kernel suite runs in a child vitest narrowed to webgpu (HSM_TEST_BACKENDS), and `hsm metrics --backend webgpu` in
 * a child `hsm`, against the CPU's run of the same store.
 */
import { readFileSync } from "node:fs";
import { createRequire } from "node:module";
import { join } from "node:path";

import { beforeAll, describe, expect, it } from "vitest";

import { writeFixture } from "../../src/synthetic/store.js";
import { agreeRows } from "../helpers/agree.js";
import { runChild } from "../helpers/child.js";
import { gpuEnv, gpuSkipReason } from "../helpers/software-gpu.js";
import { tempDir } from "../helpers/tmp.js";

const ROOT = join(import.meta.dirname, "..", "..");
const BIN = join(ROOT, "bin", "hsm.js");
const VITEST = createRequire(import.meta.url).resolve("vitest/vitest.mjs");

/** The environment of a child that sees the adapter, without this vitest's own variables (the child is another run). */
function childEnv(extra: NodeJS.ProcessEnv = {}): NodeJS.ProcessEnv {
  const env = gpuEnv(extra);
  for (const key of Object.keys(env)) if (key.startsWith("VITEST") || key === "TEST") delete env[key];
  return env;
}

interface JsonReport {
  numFailedTests: number;
  testResults: { assertionResults: { fullName: string; status: string }[] }[];
}

describe.skipIf(gpuSkipReason !== undefined)(`metrics on WebGPU${gpuSkipReason ? ` (${gpuSkipReason})` : ""}`, () => {
  const dir = tempDir("hsm-webgpu-metrics-");

  beforeAll(async () => {
    await writeFixture(join(dir, "fx"), { facts: 60, d: 16, layersTotal: 3, seed: 5 });
  });

  it("passes the kernel suite", async () => {
    const report = join(dir, "suite.json");
    const r = await runChild(
      process.execPath,
      [VITEST, "run", "--config", "vitest.unit.config.ts", "test/kernels/kernels.test.ts", "--reporter=json"].concat(
        `--outputFile=${report}`,
      ),
      { cwd: ROOT, env: childEnv({ HSM_TEST_BACKENDS: "webgpu" }), timeout: 300_000 },
    );
    const json = JSON.parse(readFileSync(report, "utf8")) as JsonReport;
    const tests = json.testResults.flatMap((f) => f.assertionResults);
    const failed = tests.filter((t) => t.status !== "passed").map((t) => `${t.fullName}: ${t.status}`);
    expect(failed, r.stderr).toEqual([]);
    expect(tests.filter((t) => t.fullName.includes("kernels on webgpu")).length).toBeGreaterThanOrEqual(6);
    expect(r.status, r.stderr).toBe(0);
  });

  it("hsm metrics --backend webgpu gives the CPU's ISS exactly and its KTS within the tolerances", async () => {
    const run = async (backend: string) => {
      const out = join(dir, backend);
      const store = join(dir, "fx", "store");
      const args = ["metrics", store, "--scored", join(dir, "fx", "scored.jsonl"), "--out", out, "--quiet"];
      const r = await runChild(process.execPath, [BIN, ...args, "--bootstrap", "100", "--backend", backend], {
        cwd: dir,
        env: childEnv(),
        timeout: 300_000,
      });
      expect(r.status, r.stderr).toBe(0);
      const read = (m: string) => JSON.parse(readFileSync(join(out, `${m}.json`), "utf8"));
      return { iss: read("iss"), kts: read("kts") };
    };
    const gpu = await run("webgpu");
    const cpu = await run("auto");
    expect(gpu.iss.config.backend).toBe("webgpu");
    expect(gpu.iss.config.kernels.rank).toBe("webgpu");
    expect(cpu.iss.config.backend).not.toBe("webgpu");
    expect(gpu.iss.rows).toEqual(cpu.iss.rows);
    agreeRows(cpu.kts.rows, gpu.kts.rows);
  });
});
