/** `hsm metrics` as a user runs it: files written, table printed, clear failures. */
import { spawnSync } from "node:child_process";
import { cpSync, existsSync, openSync, readFileSync, writeFileSync, writeSync, closeSync } from "node:fs";
import { join } from "node:path";

import { beforeAll, describe, expect, it } from "vitest";

import { writeFixture } from "../../src/fixtures/synthetic.js";
import { tempDir } from "../helpers/tmp.js";

const BIN = join(import.meta.dirname, "..", "..", "bin", "hsm.js");
const dir = tempDir("hsm-cli-metrics-");
const store = join(dir, "fx", "store");
const scored = join(dir, "fx", "scored.jsonl");

function hsm(args: string[]) {
  return spawnSync(process.execPath, [BIN, ...args], { encoding: "utf8", cwd: dir });
}

beforeAll(async () => {
  await writeFixture(join(dir, "fx"), { facts: 120, d: 16, layersTotal: 6, seed: 2 });
});

describe("hsm metrics", () => {
  it("writes iss/kts .json, .csv and .svg and prints the table", () => {
    const out = join(dir, "out");
    const r = hsm(["metrics", store, "--scored", scored, "--out", out, "--bootstrap", "200", "--layers", "2,4-5"]);
    expect(r.status).toBe(0);
    expect(r.stderr).toMatch(/metrics: layer 2: read\nmetrics: layer 2: iss\nmetrics: layer 2: kts\n/);
    expect(r.stdout).toMatch(/^ISS \(fact-macro margin.*\nlayer +distractor +paraphrase +reorder +translation +typo +all\n2 +-?\d\.\d{3}/m);
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
      const csv = readFileSync(join(out, `${metric}.csv`), "utf8").trim().split("\n");
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
    expect(r.stderr).toMatch(/"complete" is false: 360 of 720 rows written\. Finish the run, or pass --allow-incomplete/);
    expect(hsm(["metrics", partial, "--quiet", "--allow-incomplete", "--bootstrap", "20", "--out", join(dir, "p-out")]).status).toBe(0);
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

  it("explains what is missing or wrong", () => {
    const kts = hsm(["metrics", store, "--metrics", "kts", "--quiet"]);
    expect(kts.status).toBe(1);
    expect(kts.stderr).toBe("hsm: KTS needs the scored file: pass --scored SCORED.jsonl (or --metrics iss)\n");
    expect(hsm(["metrics", store, "--backend", "gpu"]).stderr).toMatch(/Expected --backend auto\|native\|tfjs-node\|tfjs-node-gpu\|webgpu\|wasm\|typescript but received "gpu"/);
    expect(hsm(["metrics", store, "--layers", "7"]).stderr).toMatch(/layer 7 is not stored \(stored: 2, 3, 4, 5\)/);
    expect(hsm(["metrics", store, "--layers", "x"]).status).toBe(2);
    const tfnode = hsm(["metrics", store, "--backend", "tfjs-node", "--quiet"]);
    if (tfnode.status !== 0) expect(tfnode.stderr).toMatch(/--backend tfjs-node needs @tensorflow\/tfjs-node, which is not installed here/);
  });
});
