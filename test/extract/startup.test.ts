/**
 * What `hsm extract` does before its first batch, where the model folder is
 * broken: a tokenizer that cannot be loaded stops the run with its own error,
 * the one reported where the graph is broken too, and a broken graph with its
 * own; either way nothing is written, no staged model is left behind, and no
 * session thread keeps the command from ending.
 */
import { spawnSync } from "node:child_process";
import { cpSync, existsSync, mkdirSync, readdirSync, writeFileSync } from "node:fs";
import { join } from "node:path";

import { beforeAll, describe, expect, it } from "vitest";

import { tempDir } from "../helpers/tmp.js";

const BIN = join(import.meta.dirname, "..", "..", "bin", "hsm.js");
const dir = tempDir("hsm-startup-");
const model = join(dir, "model");
const bank = join(dir, "fx", "bank.jsonl");
/** The temporary folder the runs stage their rewritten models in (other tools may leave files of their own). */
const stageDir = join(dir, "tmp");
const staged = () => readdirSync(stageDir).filter((name) => name.startsWith(".hsm-model-"));

function hsm(args: string[]) {
  const r = spawnSync(process.execPath, [BIN, ...args], {
    encoding: "utf8",
    cwd: dir,
    timeout: 60_000,
    env: { ...process.env, TMPDIR: stageDir },
  });
  return { status: r.status, signal: r.signal, stderr: r.stderr };
}

/** A copy of the model with its tokenizer.json or model.onnx (or both) replaced by bytes that are not one. */
function broken(name: string, what: { tokenizer?: boolean; graph?: boolean }): string {
  const copy = join(dir, name);
  cpSync(model, copy, { recursive: true });
  if (what.tokenizer) writeFileSync(join(copy, "tokenizer.json"), "{ not json");
  if (what.graph) writeFileSync(join(copy, "model.onnx"), Buffer.from("not a model, only some bytes"));
  return copy;
}

beforeAll(() => {
  mkdirSync(stageDir);
  const args = ["--layers", "2", "--hidden", "32", "--heads", "4", "--tokenizer", "llama3.1-1k"];
  expect(hsm(["make-model", model, ...args]).status).toBe(0);
  expect(hsm(["fixture", join(dir, "fx"), "--facts", "4", "--d", "8", "--quiet"]).status).toBe(0);
});

/** `hsm extract` from `modelDir` into `out` under the test's folder. */
const extractFrom = (modelDir: string, out: string) =>
  hsm(["extract", "--model-dir", modelDir, "--bank", bank, "--out", join(dir, out), "--quiet"]);

describe("hsm extract, before its first batch", () => {
  it("stops on a tokenizer it cannot load, with that error, nothing written and nothing left running", () => {
    const r = extractFrom(broken("bad-tokenizer", { tokenizer: true }), "out-tokenizer");
    expect(r.signal).toBeNull();
    expect(r.status).toBe(1);
    expect(r.stderr).toMatch(/bad-tokenizer\/tokenizer\.json: cannot be read as JSON/);
    expect(existsSync(join(dir, "out-tokenizer"))).toBe(false);
    expect(staged()).toEqual([]);
  });

  it("reports the tokenizer's error where the graph is broken too, and the graph's where only it is", () => {
    const both = extractFrom(broken("bad-both", { tokenizer: true, graph: true }), "out-both");
    expect(both.status).toBe(1);
    expect(both.stderr).toMatch(/bad-both\/tokenizer\.json: cannot be read as JSON/);
    const graph = extractFrom(broken("bad-graph", { graph: true }), "out-graph");
    expect(graph.status).toBe(1);
    expect(graph.stderr).toMatch(/bad-graph\/model\.onnx/);
    expect(graph.stderr).not.toMatch(/tokenizer/);
    expect(staged()).toEqual([]);
  });

  it("still extracts from the sound model", () => {
    const r = extractFrom(model, "out-sound");
    expect(r.status).toBe(0);
    expect(existsSync(join(dir, "out-sound", "index.json"))).toBe(true);
    expect(staged()).toEqual([]);
  });
});
