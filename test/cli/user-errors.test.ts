/**
 * Plain user errors, as a suspicious user makes them on the command line:
 * each ends with exit status 1 (a problem with the data or a file) or 2 (with
 * the command line) and one line naming what is wrong; status 3 is left for
 * bugs in hsm. Nothing a user keeps is replaced or deleted on the way.
 */
import { execFileSync, spawnSync } from "node:child_process";
import { cpSync, existsSync, mkdirSync, readFileSync, readdirSync, rmSync, writeFileSync } from "node:fs";
import { join } from "node:path";

import { beforeAll, describe, expect, it } from "vitest";

import { EXIT } from "../../src/errors.js";
import { mergeShards, verifyStore } from "../../src/index.js";
import { StoreWriter, type StoreInit } from "../../src/store/writer.js";
import { tempDir } from "../helpers/tmp.js";

const BIN = join(import.meta.dirname, "..", "..", "bin", "hsm.js");
const dir = tempDir("hsm-user-errors-");
const model = join(dir, "model");
const fx = join(dir, "fx");
const bank = join(fx, "bank.jsonl");

function hsm(args: string[]) {
  const r = spawnSync(process.execPath, [BIN, ...args], { encoding: "utf8", cwd: dir, timeout: 60_000 });
  return { status: r.status, stdout: r.stdout, stderr: r.stderr };
}

/** A model-running command's arguments over the test model and bank, into `out`. */
const onModel = (command: string, out: string, ...more: string[]) => [
  command,
  "--model-dir",
  model,
  "--bank",
  bank,
  "--out",
  out,
  ...more,
];

/** Exit `status` and one line on stderr, starting "hsm: " and matching `says` (besides what the model run said it did). */
function expectOneLine(r: ReturnType<typeof hsm>, status: number, says: RegExp): void {
  expect(
    r.stderr
      .trimEnd()
      .split("\n")
      .filter((l) => !l.includes("graph rewritten") && !l.includes("batches at once")),
  ).toHaveLength(1);
  expect(r.stderr).toMatch(says);
  expect(r.stderr).not.toMatch(/unexpected error/);
  expect(r.status).toBe(status);
}

beforeAll(() => {
  const args = ["--layers", "2", "--hidden", "32", "--heads", "4", "--tokenizer", "llama3.1-1k"];
  expect(hsm(["make-model", model, ...args]).status).toBe(0);
  expect(hsm(["fixture", fx, "--facts", "4", "--d", "8", "--quiet"]).status).toBe(0);
});

describe("exit 1 or 2, never 3, for a user's mistakes", () => {
  it("an empty model.onnx is named as empty", () => {
    const empty = join(dir, "empty-model");
    cpSync(model, empty, { recursive: true });
    writeFileSync(join(empty, "model.onnx"), "");
    const r = hsm(["extract", "--model-dir", empty, "--bank", bank, "--out", join(dir, "s-empty")]);
    expectOneLine(r, EXIT.data, /model\.onnx: holds no ONNX graph \(0 bytes\)/);
  });

  it("a config.json whose hidden size is not the graph's is named, with both widths", () => {
    const other = join(dir, "other-config");
    cpSync(model, other, { recursive: true });
    const config = JSON.parse(readFileSync(join(other, "config.json"), "utf8"));
    writeFileSync(join(other, "config.json"), JSON.stringify({ ...config, hidden_size: 48 }));
    const r = hsm(["extract", "--model-dir", other, "--bank", bank, "--out", join(dir, "s-config")]);
    expectOneLine(
      r,
      EXIT.data,
      /config\.json: says the hidden size is 48, but the graph's token embedding .* is 32 wide/,
    );
  });

  it.each([
    ["config.json", "null", /config\.json: is not a JSON object but null/],
    ["config.json", "[1,2]", /config\.json: is not a JSON object but \[1,2\]/],
    ["tokenizer_config.json", "[]", /tokenizer_config\.json: is not a JSON object but \[\]/],
  ])("a %s holding %s is named as no JSON object", (file, text, says) => {
    const broken = join(dir, `broken-${file}-${text.length}`);
    cpSync(model, broken, { recursive: true });
    writeFileSync(join(broken, file), text);
    const out = join(dir, `s-broken-${file}-${text.length}`);
    expectOneLine(hsm(["extract", "--model-dir", broken, "--bank", bank, "--out", out]), EXIT.data, says);
    expect(existsSync(out)).toBe(false);
  });

  it("a config.json giving more decoder blocks than any decoder has is named, within memory", () => {
    const huge = join(dir, "huge-config");
    cpSync(model, huge, { recursive: true });
    const config = JSON.parse(readFileSync(join(huge, "config.json"), "utf8"));
    writeFileSync(join(huge, "config.json"), JSON.stringify({ ...config, num_hidden_layers: 1_000_000_000 }));
    expectOneLine(
      hsm(["inspect-model", huge]),
      EXIT.data,
      /config\.json: gives 1000000000 decoder blocks; no decoder has more than 100000/,
    );
  });

  it("thread and token counts no machine could hold are usage errors, with nothing written", () => {
    const gen = join(dir, "g-huge.jsonl");
    expectOneLine(
      hsm(onModel("generate", gen, "--max-new-tokens", "99999999999")),
      EXIT.usage,
      /Expected an integer of at most 65536 for --max-new-tokens/,
    );
    expect(existsSync(gen)).toBe(false);
    const out = join(dir, "s-threads");
    expectOneLine(
      hsm(onModel("extract", out, "--threads", "99999999999")),
      EXIT.usage,
      /Expected an integer of at most 4096 for --threads/,
    );
    expect(existsSync(out)).toBe(false);
  });

  it("--hidden-tensors naming a tensor of another width than d_model is refused before anything is written", () => {
    const out = join(dir, "s-logits");
    const args = onModel("extract", out, "--hidden-tensors", "0=logits,1=logits");
    expectOneLine(
      hsm(args),
      EXIT.data,
      /--hidden-tensors names "logits" for layer 0, which the graph declares \d+ wide; a stored state is d_model = 32 wide/,
    );
    expect(existsSync(out)).toBe(false);
  });

  it("a missing or cut external weight file is named by extract, before anything is written", () => {
    const external = join(dir, "external-model");
    const args = ["--layers", "2", "--hidden", "32", "--heads", "4", "--tokenizer", "llama3.1-1k", "--external-data"];
    expect(hsm(["make-model", external, ...args]).status).toBe(0);
    const data = join(external, "model.onnx_data");
    const extract = (out: string) => hsm(["extract", "--model-dir", external, "--bank", bank, "--out", out]);
    const whole = readFileSync(data);
    writeFileSync(data, whole.subarray(0, whole.length - 1));
    expectOneLine(
      extract(join(dir, "s-cut")),
      EXIT.data,
      /model\.onnx_data: ends before initializer .* bytes at offset \d+ \(the file holds \d+\)/,
    );
    expect(existsSync(join(dir, "s-cut"))).toBe(false);
    rmSync(data);
    expectOneLine(
      extract(join(dir, "s-gone")),
      EXIT.data,
      /model\.onnx_data: does not exist, but initializer .* keeps its values there/,
    );
    expect(existsSync(join(dir, "s-gone"))).toBe(false);
  });

  it("--commit-rows beyond the bank's rows extracts the bank in one block", () => {
    const out = join(dir, "s-commit");
    const args = ["extract", "--model-dir", model, "--bank", bank, "--out", out, "--quiet"];
    expect(hsm([...args, "--commit-rows", "99999999999"]).status).toBe(0);
    expect(hsm(["verify", out]).status).toBe(0);
  });

  it("a config.json whose vocabulary is not the graph's is named, with both counts", () => {
    const other = join(dir, "other-vocab");
    cpSync(model, other, { recursive: true });
    const config = JSON.parse(readFileSync(join(other, "config.json"), "utf8"));
    writeFileSync(join(other, "config.json"), JSON.stringify({ ...config, vocab_size: config.vocab_size + 20 }));
    expectOneLine(
      hsm(["inspect-model", other]),
      EXIT.data,
      new RegExp(
        `config\\.json: says the vocabulary has ${config.vocab_size + 20} tokens, but the graph's token embedding .* has ${config.vocab_size} rows`,
      ),
    );
  });

  it("a layer rule that keeps no block, and an absurd block count, are usage errors", () => {
    const r = hsm(["extract", "--model-dir", model, "--bank", bank, "--out", join(dir, "s-rule"), "--layers", "l > 9"]);
    expectOneLine(r, EXIT.usage, /The layer rule "l > 9" keeps no block of a model with 2/);
    expect(existsSync(join(dir, "s-rule"))).toBe(false);
    expectOneLine(hsm(["layers", "99999999"]), EXIT.usage, /at most 100000 decoder blocks/);
  });

  it("--out naming a file, or a folder where none can be made, is named without spinning", () => {
    const file = join(dir, "a-file");
    writeFileSync(file, "mine");
    const onFile = hsm(["extract", "--model-dir", model, "--bank", bank, "--out", file]);
    expectOneLine(onFile, EXIT.data, /a-file: is a file, not a folder/);
    expect(readFileSync(file, "utf8")).toBe("mine");
    const inProc = hsm(["extract", "--model-dir", model, "--bank", bank, "--out", "/proc/hsm-x"]);
    expectOneLine(inProc, EXIT.data, /\/proc\/hsm-x: cannot be made: \/proc does not take new folders/);
    const inSys = hsm(["extract", "--model-dir", model, "--bank", bank, "--out", "/sys/hsm-x"]);
    expectOneLine(inSys, EXIT.data, /\/sys\/hsm-x: cannot be written/);
  });

  it("a YAML alias bomb in a study file is refused as a bad file", () => {
    const lines = ['a: &a ["x","x","x","x","x","x","x","x","x"]'];
    for (let i = 1; i < 8; i++) {
      const prev = String.fromCharCode(96 + i);
      lines.push(`${String.fromCharCode(97 + i)}: &${String.fromCharCode(97 + i)} [${Array(9).fill(`*${prev}`)}]`);
    }
    lines.push("bank: x", "models: [*h]");
    const study = join(dir, "bomb.yaml");
    writeFileSync(study, lines.join("\n") + "\n");
    expectOneLine(hsm(["study", study]), EXIT.data, /bomb\.yaml: not a usable YAML document: Excessive alias count/);
  });

  it("a bank line of megabytes is refused by its line number, within memory", () => {
    const rows = readFileSync(bank, "utf8").trimEnd().split("\n");
    const row = JSON.parse(rows[2]!);
    rows[2] = JSON.stringify({ ...row, query: `What is ${"a".repeat(50 << 20)}?` });
    const big = join(dir, "big.jsonl");
    writeFileSync(big, rows.join("\n") + "\n");
    expectOneLine(hsm(["check-bank", big]), EXIT.data, /big\.jsonl:3: is longer than 1048576 bytes/);
  });
});

describe("a FIFO where a file should be hangs no command", () => {
  it("extract, generate and report refuse it by name at once", () => {
    const fifo = join(dir, "bank-fifo.jsonl");
    execFileSync("mkfifo", [fifo]);
    for (const cmd of ["extract", "generate"]) {
      const r = hsm([cmd, "--model-dir", model, "--bank", fifo, "--out", join(dir, `${cmd}-fifo-out`)]);
      expectOneLine(r, EXIT.data, /bank-fifo\.jsonl: cannot be read: it is a FIFO \(named pipe\), not a regular file/);
    }
    const outputs = join(dir, "outputs-fifo");
    mkdirSync(join(outputs, "evaluation"), { recursive: true });
    execFileSync("mkfifo", [join(outputs, "evaluation", "m.scored.jsonl")]);
    expectOneLine(hsm(["report", outputs]), EXIT.data, /m\.scored\.jsonl: cannot be read: it is a FIFO/);
  });
});

describe("nothing a user keeps is replaced", () => {
  it("make-model refuses a folder that holds anything, and leaves it as it was", () => {
    const kept = join(dir, "kept");
    mkdirSync(kept);
    writeFileSync(join(kept, "notes.txt"), "precious");
    const r = hsm(["make-model", kept, "--layers", "1", "--hidden", "8", "--heads", "2"]);
    expectOneLine(r, EXIT.usage, /kept already exists and is not empty; choose a new folder for the model/);
    expect(readdirSync(kept)).toEqual(["notes.txt"]);
    const asFile = join(kept, "notes.txt");
    expectOneLine(hsm(["make-model", asFile]), EXIT.usage, /notes\.txt already exists as a file/);
    expect(readFileSync(asFile, "utf8")).toBe("precious");
    // An empty folder is a new folder.
    const empty = join(dir, "empty-folder");
    mkdirSync(empty);
    expect(hsm(["make-model", empty, "--layers", "1", "--hidden", "8", "--heads", "2"]).status).toBe(0);
    expect(existsSync(join(empty, "model.onnx"))).toBe(true);
  });

  it("adopt keeps an earlier index.orig.json rather than replacing it with another", () => {
    const store = join(dir, "foreign");
    mkdirSync(store);
    for (const f of readdirSync(join(fx, "store")).filter((n) => n.endsWith(".npy")))
      cpSync(join(fx, "store", f), join(store, f));
    const manifest = JSON.parse(readFileSync(join(fx, "store", "index.json"), "utf8"));
    const checksums = Object.fromEntries(
      Object.entries(manifest.files as Record<string, { sha256: string }>).map(([name, e]) => [name, e.sha256]),
    );
    const foreign = (tool: string) => JSON.stringify({ query_ids: manifest.query_ids, checksums, written_by: tool });
    writeFileSync(join(store, "index.orig.json"), foreign("first-tool"));
    writeFileSync(join(store, "index.json"), foreign("second-tool"));
    const r = hsm(["adopt", store, "--bank", bank]);
    expectOneLine(r, EXIT.data, /index\.orig\.json: already keeps the manifest of an earlier adoption/);
    expect(readFileSync(join(store, "index.orig.json"), "utf8")).toBe(foreign("first-tool"));
    expect(readFileSync(join(store, "index.json"), "utf8")).toBe(foreign("second-tool"));
    // The same foreign manifest again (an adoption stopped between its two writes) is no conflict.
    writeFileSync(join(store, "index.orig.json"), foreign("second-tool"));
    expect(hsm(["adopt", store, "--bank", bank]).status).toBe(0);
    expect(hsm(["verify", store]).status).toBe(0);
  });
});

describe("merge writes only valid manifests", () => {
  it("shards that record no self-check merge into a store that verifies, and a rerun of the merge succeeds", async () => {
    const ids = Array.from({ length: 6 }, (_, i) => `q${i}`);
    const init = (rows: [number, number], index: number): StoreInit => ({
      model: "m",
      model_sha256: "a".repeat(64),
      num_layers: 3,
      d_model: 4,
      layers: [1, 2],
      layer_rule: "l/(L-1) >= 0.4",
      last_layer_final_norm: true,
      dtype: "float32",
      query_ids: ids.slice(...rows),
      fact_ids: ids.slice(...rows).map((q) => `f${q}`),
      condition_families: ids.slice(...rows).map(() => "anchor"),
      shard: { index, count: 2, row_start: rows[0], row_end: rows[1], rows_total: 6 },
    });
    const shards: string[] = [];
    for (const [index, rows] of (
      [
        [0, 3],
        [3, 6],
      ] as [number, number][]
    ).entries()) {
      const path = join(dir, `shard-${index}`);
      // Cut with the library's writer, as a script would: no self-check is recorded.
      const w = await StoreWriter.open(path, init(rows, index));
      for (const layer of [1, 2]) await w.writeRowsF32(layer, 0, new Float32Array(12).fill(index + layer));
      await w.finish(1);
      await w.close();
      expect(JSON.parse(readFileSync(join(path, "index.json"), "utf8")).self_check).toBeUndefined();
      shards.push(path);
    }
    const out = join(dir, "merged");
    await mergeShards(out, shards);
    const text = readFileSync(join(out, "index.json"), "utf8");
    expect(text).not.toContain("undefined");
    expect(JSON.parse(text).self_check).toBeUndefined();
    expect((await verifyStore(out)).ok).toBe(true);
    await mergeShards(out, shards);
    expect((await verifyStore(out)).ok).toBe(true);
    rmSync(out, { recursive: true });
  });
});
