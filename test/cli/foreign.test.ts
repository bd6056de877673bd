/**
 * Stores from other tools through the command line: `hsm metrics --bank`,
 * `hsm verify --bank` and `hsm adopt` give exactly the rows hsm computes on
 * its own store of the same data.
 */
import { spawnSync } from "node:child_process";
import { createHash } from "node:crypto";
import { copyFileSync, existsSync, mkdirSync, readFileSync, readdirSync, writeFileSync } from "node:fs";
import { join } from "node:path";

import { beforeAll, describe, expect, it } from "vitest";

import { tempDir } from "../helpers/tmp.js";

const BIN = join(import.meta.dirname, "..", "..", "bin", "hsm.js");
const dir = tempDir("hsm-cli-foreign-");
const fx = join(dir, "fx");
let native: { query_ids: string[]; files: Record<string, { sha256: string }> };
let layerFiles: string[];

function hsm(args: string[]) {
  const r = spawnSync(process.execPath, [BIN, ...args], { encoding: "utf8", cwd: dir });
  return { status: r.status, stdout: r.stdout, stderr: r.stderr };
}

/** The rows of iss.json and kts.json that `hsm metrics` writes for `store`. */
function metricRows(store: string, name: string, extra: string[] = []): { iss: unknown; kts: unknown } {
  const out = join(dir, "metrics", name);
  const r = hsm([
    "metrics",
    store,
    "--scored",
    join(fx, "scored.jsonl"),
    "--bootstrap",
    "50",
    "--out",
    out,
    "--quiet",
    ...extra,
  ]);
  expect(r.stderr).toBe("");
  expect(r.status).toBe(0);
  const rows = (f: string) => JSON.parse(readFileSync(join(out, f), "utf8")).rows;
  return { iss: rows("iss.json"), kts: rows("kts.json") };
}

function foreignStore(name: string, index?: unknown): string {
  const store = join(dir, name);
  mkdirSync(store, { recursive: true });
  for (const f of layerFiles) copyFileSync(join(fx, "store", f), join(store, f));
  if (index !== undefined) writeFileSync(join(store, "index.json"), JSON.stringify(index));
  return store;
}

const sha256 = (path: string) => createHash("sha256").update(readFileSync(path)).digest("hex");

beforeAll(() => {
  const r = hsm(["fixture", fx, "--facts", "40", "--d", "16", "--quiet"]);
  expect(r.status).toBe(0);
  native = JSON.parse(readFileSync(join(fx, "store", "index.json"), "utf8"));
  layerFiles = readdirSync(join(fx, "store"))
    .filter((f) => f.endsWith(".npy"))
    .sort();
});

describe("metrics on stores written by other tools, with --bank", () => {
  it("only row order, layers, checksums and complete; a {file: sha256} map; an adopted bare folder: the native store's rows", () => {
    const ours = metricRows(join(fx, "store"), "native");
    const bank = ["--bank", join(fx, "bank.jsonl")];
    const minimal = foreignStore("minimal", {
      query_order: native.query_ids,
      layers: layerFiles.map((f) => Number(f.slice(1, 4))),
      files: Object.fromEntries(layerFiles.map((f) => [f, { sha256: native.files[f]!.sha256 }])),
      complete: true,
    });
    expect(metricRows(minimal, "minimal", bank)).toEqual(ours);
    const map = foreignStore("map", {
      query_ids: native.query_ids,
      checksums: Object.fromEntries(layerFiles.map((f) => [f, sha256(join(fx, "store", f))])),
    });
    expect(metricRows(map, "map", bank)).toEqual(ours);
    const bare = foreignStore("bare");
    const adopted = hsm(["adopt", bare, ...bank, "--model", "synthetic-fixture"]);
    expect(adopted.stderr).toBe("");
    expect(adopted.stdout).toMatch(
      new RegExp(`^${bare}: adopted — ${native.query_ids.length} rows × 16, layers .*; index\\.json written\\n$`),
    );
    expect(metricRows(bare, "adopted")).toEqual(ours);
    // Adopted again, the store is hsm's already: nothing is written, and the line says so.
    const written = readFileSync(join(bare, "index.json"));
    const again = hsm(["adopt", bare, ...bank]);
    expect(again.stdout).toMatch(
      new RegExp(
        `^${bare}: already an hsm store — ${native.query_ids.length} rows × 16, layers .*; index\\.json left as it was\\n$`,
      ),
    );
    expect(readFileSync(join(bare, "index.json")).equals(written)).toBe(true);
  });

  it("records a store named . or .. by its folder's name, as with any other path", () => {
    const bank = ["--bank", join(fx, "bank.jsonl")];
    for (const [arg, folder] of [
      [".", "named-here"],
      ["..", "named-above"],
    ] as const) {
      const store = foreignStore(folder);
      const cwd = arg === "." ? store : join(store, "inside");
      mkdirSync(cwd, { recursive: true });
      const r = spawnSync(process.execPath, [BIN, "adopt", arg, ...bank], { encoding: "utf8", cwd });
      expect(r.stderr).toBe("");
      expect(JSON.parse(readFileSync(join(store, "index.json"), "utf8")).model).toBe(folder);
    }
  });

  it("refuses a foreign index.json that is not JSON in one line, though Python indented it", () => {
    // json.dump(..., indent=2) writes NaN, which JSON does not have; the parser quotes the text around it.
    const store = foreignStore("python-nan");
    writeFileSync(join(store, "index.json"), '{\n  "model": "x",\n  "max_abs": NaN,\n  "layers": [2, 3]\n}\n');
    const r = hsm(["adopt", store, "--bank", join(fx, "bank.jsonl")]);
    expect(r.status).toBe(1);
    expect(r.stderr).toMatch(
      new RegExp(
        `^hsm: ${join(store, "index.json")}: is not valid JSON \\([^\\n]*NaN[^\\n]*\\); move it away[^\\n]*\\n$`,
      ),
    );
  });

  it("says a folder to adopt that is missing or a file as verify says it", () => {
    const bank = ["--bank", join(fx, "bank.jsonl")];
    for (const path of [join(dir, "no-such-store"), join(fx, "bank.jsonl")]) {
      const adopt = hsm(["adopt", path, ...bank]);
      const verify = hsm(["verify", path]);
      expect(verify.stderr).toMatch(/^hsm: .*(no such store folder|is a file, not a store folder)\n$/);
      expect([adopt.status, adopt.stderr]).toEqual([verify.status, verify.stderr]);
    }
    expect(existsSync(join(dir, "no-such-store"))).toBe(false);
  });

  it("without --bank a foreign store without fact ids is refused, naming the flag", () => {
    const store = foreignStore("needs-bank", {
      query_ids: native.query_ids,
      checksums: Object.fromEntries(layerFiles.map((f) => [f, native.files[f]!.sha256])),
    });
    const r = hsm(["metrics", store, "--quiet", "--out", join(dir, "metrics", "needs-bank")]);
    expect(r.status).toBe(1);
    expect(r.stderr).toMatch(/bank/);
  });

  it("verify --bank checks what a foreign manifest records and prints what it does not as notes, exit 0", () => {
    const store = foreignStore("verify-notes", {
      query_ids: native.query_ids,
      checksums: Object.fromEntries(layerFiles.map((f) => [f, native.files[f]!.sha256])),
    });
    const r = hsm(["verify", store, "--bank", join(fx, "bank.jsonl")]);
    expect(r.status).toBe(0);
    expect(r.stdout).toMatch(/: note: /);
    expect(r.stdout.trim().split("\n").at(-1)).toMatch(
      new RegExp(`^${store}: OK — ${layerFiles.length} files, ${native.query_ids.length} rows`),
    );
    const bad = foreignStore("verify-bad", {
      query_ids: native.query_ids,
      checksums: Object.fromEntries(layerFiles.map((f) => [f, "0".repeat(64)])),
    });
    const b = hsm(["verify", bad, "--bank", join(fx, "bank.jsonl")]);
    expect(b.status).toBe(1);
    expect(b.stdout).toMatch(/sha256/);
  });
});
