/** `hsm metrics` as a user runs it: files written, table printed, clear failures. */
import { spawnSync } from "node:child_process";
import { cpSync, existsSync, openSync, readFileSync, writeFileSync, writeSync, closeSync } from "node:fs";
import { createRequire } from "node:module";
import { join } from "node:path";

import { beforeAll, describe, expect, it } from "vitest";

import { writeFixture } from "../../src/synthetic/store.js";
import { kernelOptions } from "../../src/kernels/default.js";
import { KERNEL_NAMES } from "../../src/kernels/types.js";
import { nativeKernels } from "../../src/kernels/native.js";
import { agreeRows } from "../helpers/agree.js";
import { tempDir } from "../helpers/tmp.js";

const BIN = join(import.meta.dirname, "..", "..", "bin", "hsm.js");
const dir = tempDir("hsm-cli-metrics-");
const store = join(dir, "fx", "store");
const scored = join(dir, "fx", "scored.jsonl");

function hsm(args: string[], env: Record<string, string> = {}) {
  return spawnSync(process.execPath, [BIN, ...args], { encoding: "utf8", cwd: dir, env: { ...process.env, ...env } });
}

/** Whether @tensorflow/tfjs-node loads here (it is an optional dependency). */
const TFJS_NODE = await import("@tensorflow/tfjs-node" as string).then(
  () => true,
  () => false,
);

/** Whether the optional packages of the WebGPU backend are installed. */
const WEBGPU_PACKAGE = ["webgpu", "@tensorflow/tfjs-backend-webgpu"].every((p) => {
  try {
    createRequire(import.meta.url).resolve(p);
    return true;
  } catch {
    return false;
  }
});

/** Whether this checkout has the native core built (and not switched off). */
const NATIVE_BUILT = nativeKernels(kernelOptions()) !== undefined && process.env.HSM_NATIVE !== "0";

beforeAll(async () => {
  await writeFixture(join(dir, "fx"), { facts: 120, d: 16, layersTotal: 6, seed: 2 });
});

describe("hsm metrics", () => {
  it("writes iss/kts .json, .csv and .svg and prints the table", () => {
    const out = join(dir, "out");
    const r = hsm(["metrics", store, "--scored", scored, "--out", out, "--bootstrap", "200", "--layers", "2,4-5"]);
    expect(r.status).toBe(0);
    expect(r.stderr).toMatch(/metrics: layer 2: read\nmetrics: layer 2: iss\nmetrics: layer 2: kts\n/);
    expect(r.stdout).toMatch(
      /^ISS \(fact-macro margin.*\nlayer +distractor +paraphrase +reorder +translation +typo +all\n2 +-?\d\.\d{3}/m,
    );
    expect(r.stdout).toMatch(/^KTS \(1: the anchor probe's signal transfers fully; 0: not at all\)\n/m);
    expect(r.stdout).toMatch(/backend: \w+/);
    for (const metric of ["iss", "kts"]) {
      const json = JSON.parse(readFileSync(join(out, `${metric}.json`), "utf8"));
      expect(json.metric).toBe(metric.toUpperCase());
      expect(json.model).toBe("synthetic-fixture");
      expect(json.store.path).toBe(store);
      expect(Object.keys(json.store.files_sha256)).toEqual(["L002.npy", "L003.npy", "L004.npy", "L005.npy"]);
      expect(json.config).toMatchObject({ bootstrap: 200, seed: 20260101, probe_c: 0.01, folds: 5, layers: [2, 4, 5] });
      expect(new Set(json.rows.map((row: { layer: number }) => row.layer))).toEqual(new Set([2, 4, 5]));
      const csv = readFileSync(join(out, `${metric}.csv`), "utf8")
        .trim()
        .split("\n");
      expect(csv[0]!.split(",")).toEqual(Object.keys(json.rows[0]));
      expect(csv).toHaveLength(json.rows.length + 1);
      const svg = readFileSync(join(out, `${metric}.svg`), "utf8");
      expect(svg.startsWith("<svg")).toBe(true);
      expect(svg).toContain("paraphrase");
      expect(svg.trim().endsWith("</svg>")).toBe(true);
    }
  });

  it("computes ISS alone without a scored file, into outputs/metrics/<model> by default", () => {
    const r = hsm(["metrics", store, "--quiet", "--bootstrap", "50"]);
    expect(r.status).toBe(0);
    expect(existsSync(join(dir, "outputs", "metrics", "synthetic-fixture", "iss.json"))).toBe(true);
    expect(existsSync(join(dir, "outputs", "metrics", "synthetic-fixture", "kts.json"))).toBe(false);
  });

  it("refuses an incomplete store unless allowed", () => {
    const partial = join(dir, "partial");
    cpSync(store, partial, { recursive: true });
    const m = JSON.parse(readFileSync(join(partial, "index.json"), "utf8"));
    writeFileSync(join(partial, "index.json"), JSON.stringify({ ...m, complete: false, rows_done: 360 }));
    const r = hsm(["metrics", partial, "--quiet"]);
    expect(r.status).toBe(1);
    expect(r.stderr).toMatch(
      /"complete" is false: 360 of 720 rows written\. Finish the run, or read the rows so far with hsm metrics --allow-incomplete/,
    );
    expect(
      hsm(["metrics", partial, "--quiet", "--allow-incomplete", "--bootstrap", "20", "--out", join(dir, "p-out")])
        .status,
    ).toBe(0);
  });

  it("hashes the store first with --verify, and stops on a changed file", () => {
    const bad = join(dir, "bad");
    cpSync(store, bad, { recursive: true });
    const fd = openSync(join(bad, "L003.npy"), "r+");
    writeSync(fd, Buffer.from([7]), 0, 1, 500);
    closeSync(fd);
    const r = hsm(["metrics", bad, "--verify", "--quiet"]);
    expect(r.status).toBe(1);
    expect(r.stderr).toMatch(/does not verify:\n {2}L003\.npy: sha256 is/);
  });

  it("refuses a selection of nothing, a family the store lacks and counts that would only exhaust memory", () => {
    const family = hsm(["metrics", store, "--families", "typo,bogus", "--out", join(dir, "no-family")]);
    expect(family.status).toBe(1);
    expect(family.stderr).toMatch(/family "bogus" is not in the store \(families: all, /);
    expect(existsSync(join(dir, "no-family"))).toBe(false);
    for (const [flag, value, says] of [
      ["--layers", "", /Expected --layers like 18,20-24 but received ""/],
      ["--folds", "99999999999", /Expected an integer of at most 100000 for --folds/],
      ["--bootstrap", "99999999999", /Expected an integer of at most 1000000 for --bootstrap/],
      // The bootstrap's generator takes 32 bits: a larger seed would wrap to another one silently.
      ["--seed", "4294967296", /Expected an integer of at most 4294967295 for --seed/],
    ] as const) {
      const r = hsm(["metrics", store, flag, value, "--out", join(dir, "no-out")]);
      expect(r.status).toBe(2);
      expect(r.stderr).toMatch(says);
      expect(r.stderr).not.toMatch(/unexpected error/);
    }
  });

  it("explains what is missing or wrong", () => {
    const kts = hsm(["metrics", store, "--metrics", "kts", "--quiet"]);
    expect(kts.status).toBe(1);
    expect(kts.stderr).toBe("hsm: KTS needs the scored file: pass --scored SCORED.jsonl (or --metrics iss)\n");
    expect(hsm(["metrics", store, "--backend", "gpu"]).stderr).toMatch(
      /Expected --backend auto\|native\|tfjs-node\|tfjs-node-gpu\|webgpu\|wasm\|typescript but received "gpu"/,
    );
    expect(hsm(["metrics", store, "--layers", "7"]).stderr).toMatch(/layer 7 is not stored \(stored: 2, 3, 4, 5\)/);
    expect(hsm(["metrics", store, "--layers", "x"]).status).toBe(2);
    const tfnode = hsm([
      "metrics",
      store,
      "--backend",
      "tfjs-node",
      "--quiet",
      "--bootstrap",
      "20",
      "--out",
      join(dir, "tfnode"),
    ]);
    if (TFJS_NODE) {
      expect(tfnode.status).toBe(0);
      expect(JSON.parse(readFileSync(join(dir, "tfnode", "iss.json"), "utf8")).config.kernels.rank).toBe("tfjs-node");
    } else {
      expect(tfnode.status).toBe(1);
      expect(tfnode.stderr).toMatch(/--backend tfjs-node needs @tensorflow\/tfjs-node, which is not installed here/);
    }
  });
});

/**
 * The backends as a user selects them, in child processes: with the native
 * core absent, typescript and wasm give native's rows within docs/metrics.md#tolerances'
 * tolerances, record which implementation ran each kernel, and ISS's intervals
 * are identical (the same generator over the same per-fact margins).
 */
describe("hsm metrics --backend, the native core absent", () => {
  const run = (backend: string, env: Record<string, string> = {}) => {
    const out = join(dir, `backend-${backend}`);
    const r = spawnSync(
      process.execPath,
      [BIN, "metrics", store, "--scored", scored, "--out", out, "--backend", backend, "--bootstrap", "200", "--quiet"],
      {
        encoding: "utf8",
        cwd: dir,
        env: { ...process.env, ...env },
      },
    );
    expect(r.stderr).toBe("");
    expect(r.status).toBe(0);
    const read = (m: string) =>
      JSON.parse(readFileSync(join(out, `${m}.json`), "utf8")) as {
        config: { backend: string; kernels: Record<string, string> };
        rows: Record<string, unknown>[];
      };
    return { iss: read("iss"), kts: read("kts"), stdout: r.stdout };
  };
  const absent = { HSM_NATIVE_PATH: join(dir, "no-such-addon.node") };
  const reference = () => (NATIVE_BUILT ? run("native") : run("typescript"));

  it("typescript records typescript for every kernel and agrees with native", () => {
    const ts = run("typescript", absent);
    expect(ts.iss.config.backend).toBe("typescript");
    expect(Object.keys(ts.iss.config.kernels).sort()).toEqual([...KERNEL_NAMES].sort());
    expect(new Set(Object.values(ts.iss.config.kernels))).toEqual(new Set(["typescript"]));
    expect(ts.kts.config.kernels).toEqual(ts.iss.config.kernels);
    expect(ts.stdout).toMatch(/backend: typescript \(tfjs none, native typescript\)/);
    const ref = reference();
    agreeRows(ref.iss.rows, ts.iss.rows);
    agreeRows(ref.kts.rows, ts.kts.rows);
    for (const [i, row] of ref.iss.rows.entries())
      expect([ts.iss.rows[i]!.iss_ci_low, ts.iss.rows[i]!.iss_ci_high]).toEqual([row.iss_ci_low, row.iss_ci_high]);
  });

  it("wasm records wasm for its kernels and typescript, its named fallback, for the rest", () => {
    const wasm = run("wasm", absent);
    expect(wasm.iss.config.backend).toBe("wasm");
    const mine = Object.entries(wasm.iss.config.kernels)
      .filter(([, b]) => b === "wasm")
      .map(([k]) => k);
    expect(mine.sort()).toEqual(["products", "rank", "rowsTimes"]);
    for (const [k, b] of Object.entries(wasm.iss.config.kernels))
      if (b !== "wasm") expect([k, b]).toEqual([k, "typescript"]);
    const ref = reference();
    agreeRows(ref.iss.rows, wasm.iss.rows);
    agreeRows(ref.kts.rows, wasm.kts.rows);
    for (const [i, row] of ref.iss.rows.entries())
      expect([wasm.iss.rows[i]!.iss_ci_low, wasm.iss.rows[i]!.iss_ci_high]).toEqual([row.iss_ci_low, row.iss_ci_high]);
  });

  it.runIf(NATIVE_BUILT)("native records native for the kernels the core implements", () => {
    const native = run("native");
    expect(native.iss.config.kernels).toMatchObject({
      f16ToF32: "native",
      rank: "native",
      products: "native",
      rowsTimes: "native",
      bootstrapMean: "native",
      bootstrapAuroc: "native",
      centreRows: "native",
      standardizeRows: "native",
    });
  });

  it("native, asked for by name where the core is absent, says how to load it", () => {
    // HSM_NATIVE_PATH names a file that is not there: building the core would not load it.
    const r = hsm(["metrics", store, "--backend", "native", "--quiet"], absent);
    expect(r.status).toBe(1);
    expect(r.stderr).toMatch(
      /^hsm: --backend native needs the native core, which is not loaded here; to load it: point HSM_NATIVE_PATH at a built core, or unset it to load the one npm run build:native builds, or use --backend wasm\n {2}tried .*no-such-addon\.node/,
    );
  });

  it("native, asked for by name where HSM_NATIVE=0 turns the core off, says so in one line", () => {
    const r = hsm(["metrics", store, "--backend", "native", "--quiet"], { HSM_NATIVE: "0" });
    expect(r.status).toBe(1);
    // Building the core would not help: the variable is what stands in the way.
    expect(r.stderr).toBe(
      "hsm: --backend native needs the native core, which HSM_NATIVE=0 turns off; unset HSM_NATIVE, or use --backend wasm\n",
    );
  });

  it.skipIf(!WEBGPU_PACKAGE)(
    "auto passes over a WebGPU without an adapter in hsm's one line, with nothing from Dawn",
    () => {
      // No Vulkan driver to find: Dawn would print its own multi-line warnings while it looks.
      const r = hsm(["metrics", store, "--metrics", "iss", "--quiet", "--out", join(dir, "no-gpu")], {
        ...absent,
        VK_ICD_FILENAMES: join(dir, "no-such-icd.json"),
        LD_LIBRARY_PATH: "",
      });
      expect(r.status).toBe(0);
      const lines = r.stderr.split("\n").filter((l) => l && !l.startsWith("(Use `node --trace-warnings"));
      expect(lines).toEqual([
        expect.stringMatching(/\[HSM_BACKEND_SKIPPED\] Warning: --backend auto passed over native: /),
        expect.stringMatching(
          /\[HSM_BACKEND_SKIPPED\] Warning: --backend auto passed over webgpu: --backend webgpu found no GPU adapter \(Dawn needs a GPU with a Vulkan driver\); use --backend native or wasm$/,
        ),
      ]);
    },
  );
});
