/**
 * `hsm adopt --from vllm` on folders an independent writer (NumPy) made in vLLM's layout: the adopted store holds
 * exactly the float16 states NumPy's conversion gives, and `hsm metrics` on it equals `hsm metrics` on the same
 * states written natively.
 */
import { spawnSync } from "node:child_process";
import { readFileSync } from "node:fs";
import { join } from "node:path";

import { beforeAll, describe, expect, it } from "vitest";

import { hasNumpy, numpyRequired } from "../helpers/numpy.js";
import { tempDir } from "../helpers/tmp.js";
import { writeVllmFolder } from "../helpers/vllm-files.js";

const BIN = join(import.meta.dirname, "..", "..", "bin", "hsm.js");
const dir = tempDir("hsm-cli-vllm-");
const fx = join(dir, "fx");
const bank = join(fx, "bank.jsonl");
const LAYERS = ["L002.npy", "L003.npy", "L004.npy", "L005.npy"];

function hsm(args: string[]) {
  const r = spawnSync(process.execPath, [BIN, ...args], { encoding: "utf8", cwd: dir });
  return { status: r.status, stdout: r.stdout, stderr: r.stderr };
}

/** The rows of iss.json and kts.json that `hsm metrics` writes for `store`. */
function metricRows(store: string): { iss: unknown; kts: unknown } {
  const out = join(dir, "metrics", store);
  const r = hsm(["metrics", store, "--scored", join(fx, "scored.jsonl"), "--bootstrap", "50", "--out", out, "--quiet"]);
  expect(r.stderr).toBe("");
  expect(r.status).toBe(0);
  const rows = (f: string) => JSON.parse(readFileSync(join(out, f), "utf8")).rows;
  return { iss: rows("iss.json"), kts: rows("kts.json") };
}

/** A vLLM folder of `dtype` adopted (layer ids in config order, the embeddings among them), and NumPy's rows. */
function adopted(name: string, dtype: "BF16" | "F16" | "F32", special = false) {
  const paths = {
    store: join(fx, "store"),
    out: join(dir, `${name}.vllm`),
    expected: join(dir, `${name}.numpy`),
    requests: join(dir, `${name}.requests.jsonl`),
  };
  writeVllmFolder(paths, dtype, special);
  const ids = ["6", "3", "0", "4", "5"].join(",");
  const r = hsm([
    "adopt",
    paths.out,
    "--from",
    "vllm",
    "--bank",
    bank,
    "--requests",
    paths.requests,
    "--layer-ids",
    ids,
    "--num-layers",
    "6",
    "--out",
    name,
  ]);
  expect(r.stderr).toBe("");
  expect(r.status).toBe(0);
  return { store: join(dir, name), expected: paths.expected, stdout: r.stdout };
}

const bytes = (store: string) => LAYERS.map((f) => readFileSync(join(store, f)));

beforeAll(() => {
  // 120 facts, so that KTS's probe learns something in every layer and its rows are numbers.
  expect(hsm(["fixture", fx, "--facts", "120", "--d", "16", "--quiet"]).status).toBe(0);
});

describe.skipIf(!hasNumpy && !numpyRequired)("hsm adopt --from vllm", () => {
  it("float16 files: the native store's bytes and metrics; id k is layer k-1, id L before the final norm", () => {
    const a = adopted("f16", "F16");
    expect(a.stdout).toBe(
      "f16: adopted from " +
        join(dir, "f16.vllm") +
        " — 720 rows × 16 (float16), layers 2, 3, 4, 5 of 6 (the last before the final norm)\n",
    );
    expect(bytes(a.store)).toEqual(bytes(join(fx, "store")));
    const m = JSON.parse(readFileSync(join(a.store, "index.json"), "utf8"));
    expect(m).toMatchObject({ num_layers: 6, layers: [2, 3, 4, 5], layer_rule: "l/(L-1) >= 0.4" });
    expect(m).toMatchObject({ last_layer_final_norm: false, dtype: "float16", model_sha256: "", complete: true });
    expect(m.style.layers.at(-1)).toEqual({
      layer: 5,
      tensor: "hidden_states[:, 4] (vLLM layer id 6)",
      how: "the residual stream after the last block, before the final norm",
    });
    expect(hsm(["verify", a.store]).status).toBe(0);
    const ours = metricRows(join(fx, "store"));
    const perturbed = (ours.kts as { family: string; kts: unknown }[]).filter((r) => r.family !== "anchor");
    expect(perturbed.every((r) => typeof r.kts === "number")).toBe(true);
    expect(metricRows(a.store)).toEqual(ours);
  });

  it("bfloat16 files: NumPy's float16 of the same states, adopted natively, gives the same bytes and metrics", () => {
    const a = adopted("bf16", "BF16");
    expect(hsm(["adopt", a.expected, "--bank", bank]).status).toBe(0);
    expect(bytes(a.store)).toEqual(bytes(a.expected));
    expect(metricRows(a.store)).toEqual(metricRows(a.expected));
  });

  it("float32 and bfloat16 past float16's range or subnormals, and NaN: NumPy's conversion, bit for bit", () => {
    for (const dtype of ["F32", "BF16"] as const) {
      const a = adopted(`${dtype}-special`, dtype, true);
      expect(bytes(a.store)).toEqual(bytes(a.expected));
      const m = JSON.parse(readFileSync(join(a.store, "index.json"), "utf8"));
      expect(m.files["L002.npy"].nonfinite).toBe(12);
    }
  });

  it("refuses the vLLM options without --from vllm, and --from vllm without its own (exit 2)", () => {
    const npy = hsm(["adopt", join(dir, "any"), "--bank", bank, "--num-layers", "6"]);
    expect([npy.status, npy.stderr.trim()]).toEqual([
      2,
      "hsm: --num-layers is for --from vllm; a folder of L###.npy files takes only --bank",
    ]);
    const vllm = hsm(["adopt", join(dir, "any"), "--from", "vllm", "--bank", bank, "--out", "x", "--num-layers", "6"]);
    expect([vllm.status, vllm.stderr.trim()]).toEqual([2, "hsm: --from vllm needs --layer-ids"]);
    const ids = hsm(["adopt", "a", "--from", "vllm", "--bank", bank, "--layer-ids", "3,x"]);
    expect(ids.status).toBe(2);
    expect(ids.stderr).toContain('Expected --layer-ids like 8,16,24-28 (vLLM\'s layer ids) but received "3,x"');
  });
});
