/**
 * Start-up stays light: `hsm verify` and `hsm export` never load onnxruntime-node
 * or TensorFlow.js, and `hsm verify` and `hsm metrics` load no other command's module. A preload records every module the process resolves (ESM
 * resolve hook) and every CommonJS module in require.cache at exit; commands
 * that do need those libraries show that the recording sees them.
 */
import { spawnSync } from "node:child_process";
import { readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";

import { beforeAll, describe, expect, it } from "vitest";

import { tempDir } from "../helpers/tmp.js";

const BIN = join(import.meta.dirname, "..", "..", "bin", "hsm.js");
const dir = tempDir("hsm-startup-");
const fx = join(dir, "fx");
const PRELOAD = join(dir, "record-modules.mjs");

const HOOKS = `
import { appendFileSync } from "node:fs";
export async function resolve(specifier, context, next) {
  const result = await next(specifier, context);
  appendFileSync(process.env.HSM_MODULE_LOG, result.url + "\\n");
  return result;
}`;

writeFileSync(
  PRELOAD,
  `import { appendFileSync } from "node:fs";
import { createRequire, register } from "node:module";
register("data:text/javascript," + encodeURIComponent(${JSON.stringify(HOOKS)}));
const require = createRequire(import.meta.url);
process.on("exit", () => appendFileSync(process.env.HSM_MODULE_LOG, Object.keys(require.cache).join("\\n") + "\\n"));
`,
);

let runs = 0;
/** Runs hsm with the recording preload; returns the exit status and the modules loaded. */
function loaded(args: string[]): { status: number | null; stderr: string; modules: string[] } {
  const log = join(dir, `modules-${runs++}.txt`);
  writeFileSync(log, "");
  const r = spawnSync(process.execPath, ["--import", PRELOAD, BIN, ...args], {
    encoding: "utf8",
    cwd: dir,
    env: { ...process.env, HSM_MODULE_LOG: log },
  });
  return { status: r.status, stderr: r.stderr, modules: readFileSync(log, "utf8").split("\n").filter(Boolean) };
}

const ORT = /[\\/]node_modules[\\/]onnxruntime-node[\\/]/;
const TFJS = /[\\/]node_modules[\\/]@tensorflow[\\/]/;

beforeAll(() => {
  const r = spawnSync(process.execPath, [BIN, "fixture", fx, "--facts", "10", "--d", "8", "--quiet"], {
    encoding: "utf8",
  });
  expect(r.status).toBe(0);
});

describe("start-up", () => {
  it("the recording sees onnxruntime-node and TensorFlow.js where a command needs them", () => {
    const extract = loaded([
      "extract",
      "--model-dir",
      join(dir, "no-model"),
      "--bank",
      join(fx, "bank.jsonl"),
      "--out",
      join(dir, "store"),
    ]);
    expect(extract.status).toBe(1);
    expect(extract.modules.some((m) => ORT.test(m))).toBe(true);
    const metrics = loaded([
      "metrics",
      join(fx, "store"),
      "--backend",
      "wasm",
      "--bootstrap",
      "10",
      "--out",
      join(dir, "m"),
      "--quiet",
    ]);
    expect(metrics.stderr).toBe("");
    expect(metrics.status).toBe(0);
    expect(metrics.modules.some((m) => TFJS.test(m))).toBe(true);
    // Only its own command module, not the other commands'.
    expect(
      new Set(
        metrics.modules.filter((m) => /[\\/]dist[\\/]cli[\\/]commands[\\/]/.test(m)).map((m) => m.split(/[\\/]/).pop()),
      ),
    ).toEqual(new Set(["metrics.js"]));
  });

  it("hsm verify loads neither", () => {
    const r = loaded(["verify", join(fx, "store")]);
    expect(r.status).toBe(0);
    expect(r.modules.some((m) => m.includes("/dist/store/verify.js"))).toBe(true);
    expect(r.modules.filter((m) => ORT.test(m) || TFJS.test(m))).toEqual([]);
    // Only its own command module, not the other commands'.
    expect(
      new Set(
        r.modules.filter((m) => /[\\/]dist[\\/]cli[\\/]commands[\\/]/.test(m)).map((m) => m.split(/[\\/]/).pop()),
      ),
    ).toEqual(new Set(["verify.js"]));
    const help = spawnSync(process.execPath, [BIN, "verify", "--help"], { encoding: "utf8" });
    expect(help.status).toBe(0);
    expect(help.stdout).toMatch(/^Usage: hsm verify \[options\] <store>/);
    expect(help.stdout).toContain("--bank <file>");
  });

  it("hsm export loads neither", () => {
    const r = loaded([
      "export",
      "--format",
      "foundry",
      "--scored",
      join(fx, "scored.jsonl"),
      "--bank",
      join(fx, "bank.jsonl"),
      "--out",
      join(dir, "foundry.jsonl"),
    ]);
    expect(r.status).toBe(0);
    expect(r.modules.some((m) => m.includes("/dist/export/export.js"))).toBe(true);
    expect(r.modules.filter((m) => ORT.test(m) || TFJS.test(m))).toEqual([]);
  });
});
