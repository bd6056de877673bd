/** hsm study --shards, hsm compare and hsm report as a user runs them (the built CLI), on synthetic models. */
import { spawnSync } from "node:child_process";
import { cpSync, existsSync, linkSync, readdirSync, readFileSync, symlinkSync, writeFileSync } from "node:fs";
import { join } from "node:path";

import { beforeAll, describe, expect, it } from "vitest";

import { BACKENDS } from "../../src/kernels/names.js";
import { compareModels } from "../../src/report/compare.js";
import { tempDir } from "../helpers/tmp.js";
import { syntheticModel } from "./synthetic.js";

const BIN = join(import.meta.dirname, "..", "..", "bin", "hsm.js");
const dir = tempDir("hsm-report-cli-");
const outputs = join(dir, "outputs");
const hsm = (args: string[]) => spawnSync(process.execPath, [BIN, ...args], { encoding: "utf8", cwd: dir });

beforeAll(async () => {
  await syntheticModel(outputs, dir, "six", 1, 6);
  await syntheticModel(outputs, dir, "ten", 2, 10);
});

describe("the study, compare and report commands", () => {
  it("study --shards prints each model's extraction shards and merge, and runs nothing", () => {
    const study = (run: string) =>
      writeFileSync(
        join(dir, "study.yaml"),
        `bank: ${join(dir, "fx-six", "bank.jsonl")}\noutputs: out\n${run}models:\n  - { name: m1, model_dir: models/m1 }\n  - { name: old, outputs: ${outputs} }\n`,
      );
    // In the default blocks of 1024 rows, the fixture's few hundred rows leave the first of two shards empty.
    study("");
    const empty = hsm(["study", "study.yaml", "--shards", "2"]);
    expect(empty.status).toBe(2);
    expect(empty.stdout).toBe("");
    expect(empty.stderr).toMatch(/^hsm: --shards 2: shard 0 would be empty \(\d+ rows in commit blocks of 1024\); /);
    study("run: { commit_rows: 8 }\n");
    const r = hsm(["study", "study.yaml", "--shards", "2"]);
    expect(r.status).toBe(0);
    expect(r.stdout.split("\n")).toEqual([
      "# m1: 2 extraction shards, then the merge",
      `hsm extract --model-dir ${join(dir, "models", "m1")} --bank ${join(dir, "fx-six", "bank.jsonl")} --out ${join(dir, "out", "shards", "m1", "0-of-2")} --model m1 --commit-rows 8 --shard 0/2`,
      `hsm extract --model-dir ${join(dir, "models", "m1")} --bank ${join(dir, "fx-six", "bank.jsonl")} --out ${join(dir, "out", "shards", "m1", "1-of-2")} --model m1 --commit-rows 8 --shard 1/2`,
      `hsm merge ${join(dir, "out", "hidden", "m1")} ${join(dir, "out", "shards", "m1", "0-of-2")} ${join(dir, "out", "shards", "m1", "1-of-2")}`,
      "",
      "then: hsm study study.yaml",
      "",
    ]);
    expect(hsm(["study", "study.yaml", "--shards", "0"]).stderr).toContain(
      'Expected an integer of at least 1 for --shards but received "0"',
    );
  });

  it("compare --json prints what compareModels returns; an unknown model is a usage error", async () => {
    const r = hsm(["compare", outputs, "six", "ten", "--json", "--bootstrap", "50", "-q"]);
    expect(r.stderr).toBe("");
    expect(r.status).toBe(0);
    expect(JSON.parse(r.stdout)).toEqual(
      JSON.parse(JSON.stringify(await compareModels(outputs, "six", "ten", { replicates: 50 }))),
    );
    const text = hsm(["compare", outputs, "ten", "six", "--bootstrap", "50", "-q"]);
    expect(text.stdout.split("\n")[0]).toBe(
      "ten (A) vs six (B): paired on the same queries and facts; differences are A − B",
    );
    const bad = hsm(["compare", outputs, "six", "seven"]);
    expect(bad.status).toBe(2);
    expect(bad.stderr).toContain(`no model "seven" with scored rows; models there: six, ten`);
  });

  it("report writes one HTML file and says where", () => {
    const out = join(dir, "r", "report.html");
    const r = hsm(["report", outputs, "--out", out, "--bootstrap", "50", "--no-verify", "-q"]);
    expect(r.status).toBe(0);
    expect(r.stdout).toMatch(
      new RegExp(
        `^${out.replace(/[.]/g, "\\.")}: 2 models \\(six, ten\\), \\d+\\.\\d\\d MB \\(\\d+\\.\\d\\d MB read at first view\\)\\n$`,
      ),
    );
    const html = readFileSync(out, "utf8");
    expect(html).toContain("not checked (--no-verify)");
    expect(html).not.toMatch(/(src|href)="(https?:)?\/\//);
  });

  it("report refuses an --out that is one of the files it reads, a link to one included", () => {
    const scored = join(outputs, "evaluation", "six.scored.jsonl");
    const kts = join(outputs, "metrics", "ten", "kts.json");
    const link = join(dir, "kts-link.json");
    symlinkSync(kts, link);
    const before = [readFileSync(scored), readFileSync(kts)];
    const report = (out: string) => hsm(["report", outputs, "--out", out, "--bootstrap", "5", "--no-verify", "-q"]);
    const reads = (out: string, what: string) =>
      `hsm: --out ${out}: is ${what}, which the report reads; choose another file\n`;
    expect(report(scored)).toMatchObject({ status: 2, stderr: reads(scored, `six's scored rows (${scored})`) });
    expect(report(link)).toMatchObject({ status: 2, stderr: reads(link, `ten's kts.json (${kts})`) });
    const hard = join(dir, "scored-hard-link.jsonl");
    linkSync(scored, hard);
    expect(report(hard)).toMatchObject({ status: 2, stderr: reads(hard, `six's scored rows (${scored})`) });
    const index = join(outputs, "hidden", "six", "index.json");
    expect(report(index)).toMatchObject({
      status: 2,
      stderr: reads(index, `in six's store (${join(outputs, "hidden", "six")})`),
    });
    // A new file inside a store, or in a new folder there, is inside it too; nothing is made.
    const store = join(outputs, "hidden", "ten");
    const files = readdirSync(store);
    for (const inside of [join(store, "report.html"), join(store, "new", "r.html")])
      expect(report(inside)).toMatchObject({ status: 2, stderr: reads(inside, `in ten's store (${store})`) });
    expect(readdirSync(store)).toEqual(files);
    // A hard link of a store's file is that file, though its path is elsewhere.
    const layer = join(
      store,
      files.find((f) => f.endsWith(".npy"))!,
    );
    const hardLayer = join(dir, "layer-hard-link.npy");
    linkSync(layer, hardLayer);
    expect(report(hardLayer)).toMatchObject({
      status: 2,
      stderr: reads(hardLayer, `a file of ten's store (${layer})`),
    });
    expect([readFileSync(scored), readFileSync(kts)]).toEqual(before);
  });

  it("compare and report name the file and field of a bad metric result or study record, exit 1", () => {
    let n = 0;
    /** A copy of the outputs root with `file` (relative to it) rewritten by `edit` (or written); the bad file's path. */
    const broken = (file: string, edit: (text: string) => string) => {
      const root = join(dir, `broken-${n++}`);
      cpSync(outputs, root, { recursive: true });
      const path = join(root, file);
      writeFileSync(path, edit(existsSync(path) ? readFileSync(path, "utf8") : ""));
      return { root, path };
    };
    const report = (root: string) => hsm(["report", root, "--bootstrap", "5", "--no-verify", "-q"]);
    const json = (change: (v: Record<string, unknown>) => unknown) => (text: string) =>
      JSON.stringify(change(JSON.parse(text)));
    const cases: [file: string, edit: (text: string) => string, message: (path: string) => string][] = [
      ["metrics/six/iss.json", (t) => t.slice(0, 100), (p) => `${p}: not valid JSON (`],
      ["metrics/ten/kts.json", () => "null", (p) => `${p}: expected a JSON object but received null`],
      [
        "metrics/ten/kts.json",
        json((v) => ({ ...v, config: { ...(v.config as object), probe_c: -1 } })),
        (p) => `${p}: field "config.probe_c": expected a positive number but received -1 (number)`,
      ],
      [
        "metrics/six/iss.json",
        json((v) => ({ ...v, rows: (v.rows as object[]).map((r, i) => (i === 3 ? { ...r, layer: 9 } : r)) })),
        (p) => `${p}: field "rows[3].layer": expected one of the store's layers (2, 3, 4, 5) but received 9 (number)`,
      ],
      [
        "metrics/six/kts.json",
        json((v) => ({ ...v, rows: (v.rows as object[]).map((r) => ({ ...r, layer: undefined })) })),
        (p) => `${p}: field "rows[0].layer": expected one of the store's layers (2, 3, 4, 5) but received nothing`,
      ],
    ];
    for (const [file, edit, message] of cases) {
      const { root, path } = broken(file, edit);
      const r = report(root);
      expect(r.stderr.startsWith(`hsm: ${message(path)}`), r.stderr).toBe(true);
      expect(r.stderr.split("\n")).toHaveLength(2);
      expect(r.status).toBe(1);
    }
    const study = broken("study.json", () => JSON.stringify({ models: [{ name: 5 }] }));
    for (const r of [report(study.root), hsm(["compare", study.root, "six", "ten", "-q"])])
      expect(r).toMatchObject({
        status: 1,
        stderr: `hsm: ${study.path}: field "models[0].name": expected a string but received 5 (number)\n`,
      });
    const twice = broken("study.json", () =>
      JSON.stringify({ models: ["six", "ten", "six"].map((name) => ({ name, status: "done" })) }),
    );
    expect(report(twice.root)).toMatchObject({
      status: 1,
      stderr: `hsm: ${twice.path}: field "models[2].name": "six" is already the name of models[0]\n`,
    });
    const c = broken(
      "metrics/ten/kts.json",
      json((v) => ({ ...v, config: { ...(v.config as object), probe_c: -1 } })),
    );
    expect(hsm(["compare", c.root, "six", "ten", "-q"])).toMatchObject({
      status: 1,
      stderr: `hsm: ${c.path}: field "config.probe_c": expected a positive number but received -1 (number)\n`,
    });
  });

  it("report leaves out a model the study record marks failed, and says so; compare names it", () => {
    const root = join(dir, "one-failed");
    cpSync(outputs, root, { recursive: true });
    const record = join(root, "study.json");
    const models = [
      { name: "six", status: "done", error: null },
      { name: "ten", status: "failed", error: "models/ten/model.onnx: is not a readable ONNX model" },
    ];
    writeFileSync(record, JSON.stringify({ format: "hsm-study/1", models }));
    const out = join(root, "report.html");
    const r = hsm(["report", root, "--bootstrap", "5", "--no-verify", "-q"]);
    expect(r.stderr).toBe(`report: left out ten, which failed in the study (see ${record})\n`);
    expect(r.status).toBe(0);
    expect(r.stdout).toMatch(new RegExp(`^${out.replace(/[.]/g, "\\.")}: 1 models \\(six\\), `));
    expect(readFileSync(out, "utf8")).toContain(
      '<p class="note">ten is left out: it failed in the study: models/ten/model.onnx: is not a readable ONNX model</p>',
    );
    expect(hsm(["compare", root, "six", "ten", "-q"])).toMatchObject({
      status: 2,
      stderr: `hsm: ${root}: model "ten" failed in the study (see ${record}); rerun hsm study to finish it\n`,
    });
  });

  it("compare and report refuse a seed beyond 32 bits, and list every backend they accept", () => {
    for (const command of [
      ["compare", outputs, "six", "ten"],
      ["report", outputs],
    ]) {
      expect(hsm([...command, "--seed", "4294967296", "-q"])).toMatchObject({
        status: 2,
        stderr: 'hsm: Expected an integer of at most 4294967295 for --seed but received "4294967296"\n',
      });
      const help = hsm([command[0]!, "--help"]).stdout.replace(/\s+/g, " ");
      expect(help).toContain(`kernels for the per-row values: ${BACKENDS.slice(0, -1).join(", ")} or typescript`);
      expect(hsm([...command, "--backend", "cuda", "-q"])).toMatchObject({
        status: 2,
        stderr: `hsm: Expected --backend ${BACKENDS.slice(0, -1).join(", ")} or typescript but received "cuda"\n`,
      });
    }
  });
});
