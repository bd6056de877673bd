/**
 * Exports of a fixture: every EEE record valid against the published schema;
 * Foundry's columns; a third format added through the registry.
 */
import { createHash } from "node:crypto";
import { existsSync, linkSync, mkdirSync, readdirSync, readFileSync, writeFileSync } from "node:fs";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";

import { Command } from "commander";
import { beforeAll, describe, expect, it, vi } from "vitest";

import { readBank } from "../../src/bank/bank.js";
import { exportCommand } from "../../src/cli/commands/export.js";
import { EXIT, InternalError, ScoredError, UsageError } from "../../src/errors.js";
import { exportScored } from "../../src/export/export.js";
import { instanceSchema, sampleHash, writeEee } from "../../src/export/formats/eee.js";
import type { ExportFormat, ScoredRow } from "../../src/export/formats/format.js";
import { EXPORT_FORMATS, registerExportFormat } from "../../src/export/formats/registry.js";
import { validate } from "../../src/export/validate.js";
import { writeFixture } from "../../src/synthetic/store.js";
import { tempDir } from "../helpers/tmp.js";
import { importWalk } from "../helpers/walks.js";

const dir = tempDir("hsm-export-");
const fx = { bank: join(dir, "fx", "bank.jsonl"), scored: join(dir, "fx", "scored.jsonl") };
const schema = instanceSchema();

beforeAll(async () => {
  await writeFixture(join(dir, "fx"), { facts: 30, d: 8 });
});

describe("the schema validator", () => {
  const good = {
    schema_version: "instance_level_eval_0.3.0",
    evaluation_id: "e",
    model_id: "m/x",
    evaluation_name: "b/anchor",
    sample_id: "q1",
    interaction_type: "single_turn",
    input: { raw: "Q", reference: ["A"] },
    output: { raw: ["A"] },
    answer_attribution: [
      { turn_idx: 0, source: "output.raw", extracted_value: "A", extraction_method: "exact_alias", is_terminal: true },
    ],
    evaluation: { score: 1, is_correct: true },
  };

  it("accepts a minimal valid record", () => expect(validate(good, schema)).toEqual([]));

  it.each([
    ["a missing required field", { ...good, sample_id: undefined }, '$ is missing required property "sample_id"'],
    ["an unknown top-level field", { ...good, extra: 1 }, '$ has property "extra", which is not allowed'],
    [
      "a bad enum value",
      { ...good, interaction_type: "chat" },
      '$.interaction_type must be one of "single_turn", "multi_turn", "agentic", not "chat"',
    ],
    [
      "a wrong type",
      { ...good, evaluation: { score: "1", is_correct: true } },
      "$.evaluation.score must be of type number, not string",
    ],
    [
      "single_turn with messages",
      { ...good, messages: [{ turn_idx: 0, role: "user" }] },
      "$.messages must be of type null, not array",
    ],
    ["single_turn without output", { ...good, output: undefined }, '$ is missing required property "output"'],
    [
      "an attribution without turn_idx or event_id",
      {
        ...good,
        answer_attribution: [{ source: "s", extracted_value: "v", extraction_method: "m", is_terminal: true }],
      },
      "$.answer_attribution[0] matches none of the schemas in anyOf",
    ],
    [
      "a negative turn index",
      { ...good, answer_attribution: [{ ...good.answer_attribution[0], turn_idx: -1 }] },
      "$.answer_attribution[0].turn_idx must be at least 0",
    ],
    [
      "metadata that is not strings",
      { ...good, metadata: { n: 3 } },
      "$.metadata.n must be of type string, not integer",
    ],
  ])("rejects %s", (_what, record, message) => {
    const clean = JSON.parse(JSON.stringify(record));
    expect(validate(clean, schema).map((e) => `${e.path} ${e.message}`)).toContain(message);
  });
});

describe("hsm export", () => {
  it("writes Every Eval Ever samples that all validate, and an aggregate that points at them", async () => {
    const out = join(dir, "eee");
    const r = await exportScored({
      format: "eee",
      scored: fx.scored,
      bank: fx.bank,
      out,
      modelId: "hsm/synthetic-fixture",
      organization: "tests",
    });
    const folder = join(out, "data", "bank", "hsm", "synthetic-fixture");
    expect(r.files.every((f) => f.startsWith(folder))).toBe(true);
    const samplesFile = readdirSync(folder).find((f) => f.endsWith("_samples.jsonl"))!;
    const text = readFileSync(join(folder, samplesFile), "utf8");
    const records = text
      .trim()
      .split("\n")
      .map((l) => JSON.parse(l));
    expect(records).toHaveLength(r.rows);
    for (const rec of records) {
      expect(validate(rec, schema)).toEqual([]);
      expect(rec.sample_hash).toBe(sampleHash(rec.input.raw, rec.input.reference));
      expect(rec.evaluation.is_correct).toBe(rec.metadata.label === "correct");
      expect(Object.values(rec.metadata).every((v) => typeof v === "string")).toBe(true);
    }
    const aggregate = JSON.parse(readFileSync(join(folder, samplesFile.replace("_samples.jsonl", ".json")), "utf8"));
    expect(aggregate.detailed_evaluation_results).toEqual({
      format: "jsonl",
      file_path: samplesFile,
      hash_algorithm: "sha256",
      checksum: createHash("sha256").update(text).digest("hex"),
      total_rows: records.length,
    });
    const anchor = aggregate.evaluation_results.find(
      (e: { evaluation_name: string }) => e.evaluation_name === "bank/anchor",
    );
    const anchors = records.filter((x) => x.metadata.condition_family === "anchor");
    expect(anchor.score_details.score).toBeCloseTo(
      anchors.filter((x) => x.evaluation.is_correct).length / anchors.length,
      12,
    );
    expect(anchor.generation_config.generation_args).toMatchObject({ temperature: 0, max_tokens: 24 });
    // every instance's evaluation_result_id names an aggregate result
    const ids = new Set(
      aggregate.evaluation_results.map((e: { evaluation_result_id: string }) => e.evaluation_result_id),
    );
    expect(records.every((x) => ids.has(x.evaluation_result_id))).toBe(true);
  });

  it("writes Foundry JSONL with query, response and ground_truth, or messages", async () => {
    await exportScored({ format: "foundry", scored: fx.scored, bank: fx.bank, out: join(dir, "foundry.jsonl") });
    await exportScored({
      format: "foundry",
      scored: fx.scored,
      bank: fx.bank,
      out: join(dir, "foundry-m.jsonl"),
      messages: true,
    });
    const plain = readFileSync(join(dir, "foundry.jsonl"), "utf8")
      .trim()
      .split("\n")
      .map((l) => JSON.parse(l));
    const msgs = readFileSync(join(dir, "foundry-m.jsonl"), "utf8")
      .trim()
      .split("\n")
      .map((l) => JSON.parse(l));
    expect(plain[0]).toMatchObject({
      query: "Question: What is the capital of Land 0?\nAnswer with only the shortest correct answer.\nAnswer:",
      ground_truth: "City 0",
    });
    expect(typeof plain[0].response).toBe("string");
    expect(msgs[0].messages).toEqual([
      { role: "user", content: plain[0].query },
      { role: "assistant", content: plain[0].response },
    ]);
    expect(msgs[0].ground_truth).toBe("City 0");
  });
});

describe("export errors and settings", () => {
  it("refuses an --out that is its --scored or its --bank, a hard link to one included, leaving both as they were", async () => {
    const scored = join(dir, "same-scored.jsonl");
    const bank = join(dir, "same-bank.jsonl");
    writeFileSync(scored, readFileSync(fx.scored));
    writeFileSync(bank, readFileSync(fx.bank));
    const hard = join(dir, "same-bank-hard.jsonl");
    linkSync(bank, hard);
    for (const [format, out, name, path] of [
      ["foundry", scored, "--scored", scored],
      ["foundry", bank, "--bank", bank],
      ["foundry", hard, "--bank", bank],
      ["eee", scored, "--scored", scored],
    ]) {
      await expect(exportScored({ format: format!, scored, bank, out: out! })).rejects.toMatchObject({
        constructor: UsageError,
        message: `--out ${out}: is also ${name} (${path}), which this command reads; choose another file for --out`,
        exitCode: EXIT.usage,
      });
    }
    expect(readFileSync(scored).equals(readFileSync(fx.scored))).toBe(true);
    expect(readFileSync(bank).equals(readFileSync(fx.bank))).toBe(true);
  });

  it("records the prompt templates and every label in the aggregate", async () => {
    const out = join(dir, "eee-settings");
    const r = await exportScored({ format: "eee", scored: fx.scored, bank: fx.bank, out, modelId: "hsm/x" });
    const aggregate = JSON.parse(readFileSync(r.files[0]!, "utf8"));
    const result = aggregate.evaluation_results[0];
    // The text docs/formats.md#prompts gives, newlines written as backslash-n.
    expect(result.generation_config.generation_args.prompt_template).toBe(
      "anchor: Question: {query}\\nAnswer with only the shortest correct answer.\\nAnswer: | other: {query}\\nAnswer:",
    );
    expect(result.generation_config.additional_details.max_prompt_len).toBe("192");
    expect(Object.keys(result.score_details.details)).toEqual([
      "correct",
      "incorrect",
      "ambiguous",
      "abstain",
      "unparseable",
    ]);
  });

  it("adds a record each time, even for exports in the same second or side by side", async () => {
    const out = join(dir, "eee-same-second");
    const folder = join(out, "data", "bank", "hsm", "x");
    const lines = readFileSync(fx.scored, "utf8").trim().split("\n");
    const parts = [1, 2, 3].map((n) => {
      const scored = join(dir, `scored-first-${n}.jsonl`);
      writeFileSync(scored, lines.slice(0, n).join("\n") + "\n");
      return scored;
    });
    // Another tool's aggregate holds the name the second after.
    mkdirSync(folder, { recursive: true });
    writeFileSync(join(folder, "bank_hsm_x_1700000001.json"), "{}\n");
    const now = vi.spyOn(Date, "now").mockReturnValue(1_700_000_000_500);
    try {
      const settings = { format: "eee", bank: fx.bank, out, modelId: "hsm/x" };
      await exportScored({ ...settings, scored: parts[0]! });
      await Promise.all(parts.slice(1).map((scored) => exportScored({ ...settings, scored })));
    } finally {
      now.mockRestore();
    }
    expect(readFileSync(join(folder, "bank_hsm_x_1700000001.json"), "utf8")).toBe("{}\n");
    const aggregates = readdirSync(folder).filter((f) => f.endsWith(".json") && f !== "bank_hsm_x_1700000001.json");
    expect(aggregates.sort()).toEqual([
      "bank_hsm_x_1700000000.json",
      "bank_hsm_x_1700000002.json",
      "bank_hsm_x_1700000003.json",
    ]);
    expect(readdirSync(folder).filter((f) => f.endsWith("_samples.jsonl"))).toHaveLength(3);
    const sizes = aggregates.map((name) => {
      const aggregate = JSON.parse(readFileSync(join(folder, name), "utf8"));
      expect(aggregate.evaluation_id).toBe(`bank/hsm/x/${name.slice("bank_hsm_x_".length, -".json".length)}`);
      const pointer = aggregate.detailed_evaluation_results;
      expect(pointer.file_path).toBe(name.replace(".json", "_samples.jsonl"));
      const samples = readFileSync(join(folder, pointer.file_path), "utf8");
      expect(createHash("sha256").update(samples).digest("hex")).toBe(pointer.checksum);
      const records = samples
        .trim()
        .split("\n")
        .map((l) => JSON.parse(l));
      expect(records.every((r) => r.evaluation_id === aggregate.evaluation_id)).toBe(true);
      expect(records).toHaveLength(pointer.total_rows);
      return records.length;
    });
    expect(sizes.sort()).toEqual([1, 2, 3]);
    expect(readdirSync(folder).filter((f) => f.endsWith(".tmp"))).toEqual([]);
  });

  it("refuses a file of two models' answers even under --model-id, and names a model only one row records", async () => {
    const mixed = scoredWith("scored-two-models", (r) => (r.model = "other/model2"));
    const out = join(dir, "eee-two-models");
    await expect(exportScored({ format: "eee", scored: mixed, bank: fx.bank, out, modelId: "hsm/x" })).rejects.toThrow(
      new ScoredError(
        mixed,
        2,
        "model",
        'expected "synthetic-fixture" (the model of line 1) but received "other/model2": an export holds one model\'s answers',
      ),
    );
    expect(existsSync(out)).toBe(false);
    const lines = readFileSync(fx.scored, "utf8").trim().split("\n");
    const rows = lines.slice(0, 3).map((l, i) => {
      const { model: _, ...row } = JSON.parse(l) as Record<string, unknown>;
      return i === 1 ? { ...row, model: "org/named" } : row;
    });
    const scored = join(dir, "scored-one-named.jsonl");
    writeFileSync(scored, rows.map((r) => JSON.stringify(r) + "\n").join(""));
    const r = await exportScored({ format: "eee", scored, bank: fx.bank, out });
    expect(JSON.parse(readFileSync(r.files[0]!, "utf8")).model_info.id).toBe("org/named");
  });

  it("writes an empty samples file and an empty Foundry file for an empty scored file", async () => {
    const scored = join(dir, "scored-empty.jsonl");
    writeFileSync(scored, "");
    const eee = await exportScored({ format: "eee", scored, bank: fx.bank, out: join(dir, "eee-empty") });
    expect(eee.rows).toBe(0);
    const aggregate = JSON.parse(readFileSync(eee.files[0]!, "utf8"));
    expect(readFileSync(eee.files[1]!, "utf8")).toBe("");
    expect(aggregate.detailed_evaluation_results).toMatchObject({
      checksum: createHash("sha256").update("").digest("hex"),
      total_rows: 0,
    });
    for (const messages of [false, true]) {
      const out = join(dir, `foundry-empty-${messages}.jsonl`);
      await exportScored({ format: "foundry", scored, bank: fx.bank, out, messages });
      expect(readFileSync(out, "utf8")).toBe("");
    }
  });

  it.each([
    ["", 'Expected a model id (--model-id) with a visible character but received ""'],
    ["a\tb/c", 'Expected a model id (--model-id) without control characters but received "a\\tb/c"'],
    ["org/", 'Expected a model id (--model-id) with a name after its last "/" but received "org/"'],
    ["/m", 'Expected a model id (--model-id) with a developer before its first "/" but received "/m"'],
  ])("refuses --model-id %j, naming the option, and writes nothing", async (modelId, message) => {
    const out = join(dir, "eee-bad-model-id");
    await expect(exportScored({ format: "eee", scored: fx.scored, bank: fx.bank, out, modelId })).rejects.toThrow(
      new UsageError(message),
    );
    expect(existsSync(out)).toBe(false);
  });

  it("names the developer and organization unknown when nobody does", async () => {
    const out = join(dir, "eee-unnamed");
    const r = await exportScored({ format: "eee", scored: fx.scored, bank: fx.bank, out });
    const aggregate = JSON.parse(readFileSync(r.files[0]!, "utf8"));
    expect(aggregate.model_info).toMatchObject({ id: "unknown/synthetic-fixture", developer: "unknown" });
    expect(aggregate.source_metadata.source_organization_name).toBe("unknown");
  });

  it.each([
    [
      "a missing field",
      { query_id: "query_00000001", raw_response: "x", label: "correct", condition_family: "anchor" },
      ':1: field "fact_id": expected a string but received nothing',
    ],
    [
      "a label outside the list",
      { query_id: "query_00000001", raw_response: "x", label: "right", condition_family: "anchor", fact_id: "f" },
      ':1: field "label": "right" is not one of correct, incorrect, ambiguous, abstain, unparseable',
    ],
  ])("names the line and field of %s", async (_what, row, tail) => {
    const scored = join(dir, `scored-${tail.length}.jsonl`);
    writeFileSync(scored, JSON.stringify(row) + "\n");
    await expect(
      exportScored({ format: "foundry", scored, bank: fx.bank, out: join(dir, "never.jsonl") }),
    ).rejects.toMatchObject({
      constructor: ScoredError,
      message: scored + tail,
      exitCode: EXIT.data,
    });
  });

  /** The fixture's scored file with its second row changed by `edit`. */
  const scoredWith = (name: string, edit: (row: Record<string, unknown>) => void) => {
    const lines = readFileSync(fx.scored, "utf8").trim().split("\n");
    const row = JSON.parse(lines[1]!) as Record<string, unknown>;
    edit(row);
    lines[1] = JSON.stringify(row);
    const scored = join(dir, `${name}.jsonl`);
    writeFileSync(scored, lines.join("\n") + "\n");
    return scored;
  };

  it.each([
    [
      "a span that is not a string",
      (r: Record<string, unknown>) => (r.span = null),
      'field "span": expected a string but received null',
    ],
    [
      "flags that are not a list of strings",
      (r: Record<string, unknown>) => (r.flags = "hit_token_limit"),
      'field "flags": expected an array of strings but received "hit_token_limit"',
    ],
    [
      "a matched alias that is a number",
      (r: Record<string, unknown>) => (r.matched_alias = 7),
      'field "matched_alias": expected a string or null but received 7',
    ],
    [
      "a model that is not a string",
      (r: Record<string, unknown>) => (r.model = { name: "x" }),
      'field "model": expected a string but received {"name":"x"}',
    ],
    [
      "a review flag that is not true or false",
      (r: Record<string, unknown>) => (r.needs_manual_review = "no"),
      'field "needs_manual_review": expected true or false but received "no"',
    ],
    [
      "a relation that is an object",
      (r: Record<string, unknown>) => (r.relation = { a: 1 }),
      'field "relation": expected a string or null but received {"a":1}',
    ],
    [
      "a language that is a list",
      (r: Record<string, unknown>) => (r.language = [1, 2]),
      'field "language": expected a string or null but received [1,2]',
    ],
    [
      "a main-forward flag that is a word",
      (r: Record<string, unknown>) => (r.use_for_main_forward = "maybe"),
      'field "use_for_main_forward": expected true or false but received "maybe"',
    ],
    [
      "a main-forward flag that is null",
      (r: Record<string, unknown>) => (r.use_for_main_forward = null),
      'field "use_for_main_forward": expected true or false but received null',
    ],
    [
      "a reverse-analysis flag that is a number",
      (r: Record<string, unknown>) => (r.use_for_reverse_analysis = 1),
      'field "use_for_reverse_analysis": expected true, false or null but received 1',
    ],
    [
      "a model other than the rows before it",
      (r: Record<string, unknown>) => (r.model = "other/model2"),
      `field "model": expected "synthetic-fixture" (the model of line 1) but received "other/model2": an export holds one model's answers`,
    ],
    [
      "a model name of white space",
      (r: Record<string, unknown>) => (r.model = " "),
      'field "model": expected a model name with a visible character but received " "',
    ],
    [
      "a query scored twice",
      (r: Record<string, unknown>) => (r.query_id = "query_00000001"),
      'field "query_id": "query_00000001" is scored twice (first on line 1)',
    ],
  ])("refuses %s, naming its line and field, and writes nothing", async (what, edit, tail) => {
    const scored = scoredWith(`scored-${what.replace(/ /g, "-")}`, edit);
    for (const format of ["eee", "foundry"]) {
      const out = join(dir, `refused-${format}-${what.replace(/ /g, "-")}`);
      await expect(exportScored({ format, scored, bank: fx.bank, out })).rejects.toMatchObject({
        constructor: ScoredError,
        message: `${scored}:2: ${tail}`,
        exitCode: EXIT.data,
      });
      expect(existsSync(out)).toBe(false);
    }
  });

  it.each([
    ["condition_family", "paraphrase", "anchor"],
    ["fact_id", "fact_000000", "fact_999999"],
  ])("refuses a %s that contradicts the bank row, naming its line, and writes nothing", async (key, from, to) => {
    let id = "";
    const scored = scoredWith(`scored-other-${key}`, (r) => {
      id = r.query_id as string;
      expect(r[key]).toBe(from);
      r[key] = to;
    });
    const line = (await readBank(fx.bank)).find((b) => b.query_id === id)!.line;
    for (const format of ["eee", "foundry"]) {
      const out = join(dir, `refused-${format}-other-${key}`);
      await expect(exportScored({ format, scored, bank: fx.bank, out })).rejects.toMatchObject({
        constructor: ScoredError,
        message: `${scored}:2: field "${key}": expected "${from}" (the bank's, ${fx.bank}:${line}) but received "${to}"`,
        exitCode: EXIT.data,
      });
      expect(existsSync(out)).toBe(false);
    }
  });

  it("checks every Every Eval Ever record against the schema before writing either file", async () => {
    // Rows the reader would refuse, handed to the writer directly: the record it builds fails the schema.
    const bank = new Map((await readBank(fx.bank)).map((r) => [r.query_id, r]));
    const rows = readFileSync(fx.scored, "utf8")
      .trim()
      .split("\n")
      .map((l) => JSON.parse(l) as ScoredRow);
    rows[1]!.matched_alias = 7 as unknown as string;
    const out = join(dir, "eee-unchecked");
    const id = { benchmark: "b", modelId: "org/m", developer: "org", organization: "o", time: 1 };
    await expect(writeEee(out, rows, bank, id)).rejects.toThrow(InternalError);
    expect(existsSync(out)).toBe(false);
  });

  it("names the line of a scored row whose query the bank lacks", async () => {
    const scored = join(dir, "scored-unknown.jsonl");
    const row = {
      query_id: "query_99999999",
      raw_response: "x",
      label: "correct",
      condition_family: "anchor",
      fact_id: "f",
    };
    writeFileSync(scored, `${readFileSync(fx.scored, "utf8").split("\n")[0]}\n\n${JSON.stringify(row)}\n`);
    await expect(
      exportScored({ format: "foundry", scored, bank: fx.bank, out: join(dir, "never.jsonl") }),
    ).rejects.toMatchObject({
      constructor: ScoredError,
      message: `${scored}:3: field "query_id": "query_99999999" is not in the bank ${fx.bank}`,
    });
  });

  it("calls a schema missing from the installation an internal error", () => {
    const places = [join(dir, "nowhere", "a.json"), join(dir, "nowhere", "b.json")];
    let err: unknown;
    try {
      instanceSchema(places);
    } catch (e) {
      err = e;
    }
    expect(err).toBeInstanceOf(InternalError);
    expect((err as InternalError).message).toBe(
      `the instance-level schema file instance_level_eval_0.3.0.json is missing from this installation (looked in ${places.join(", ")}); reinstall hsm`,
    );
    expect((err as InternalError).exitCode).toBe(EXIT.internal);
    const broken = join(dir, "broken-schema.json");
    writeFileSync(broken, "{");
    expect(() => instanceSchema([broken])).toThrow(InternalError);
    expect(() => instanceSchema([broken])).toThrow(
      new RegExp(
        `^the instance-level schema of this installation, ${broken}, is not valid JSON \\(.+\\); reinstall hsm$`,
      ),
    );
  });

  it("does not load the model runner (and with it onnxruntime): its imports stay outside the model rooms", () => {
    const root = join(dirname(fileURLToPath(import.meta.url)), "..", "..");
    const seen = new Set<string>();
    const visit = (file: string) => {
      if (seen.has(file)) return;
      seen.add(file);
      const text = readFileSync(file, "utf8");
      for (const m of text.matchAll(/^(?:import|export)\s[^;]*?from\s+"([^"]+)"/gms)) {
        const spec = m[1]!;
        if (spec.startsWith(".")) visit(join(dirname(file), spec.replace(/\.js$/, ".ts")));
        else expect(spec, `${file} imports ${spec}`).not.toMatch(/onnxruntime/);
      }
    };
    visit(join(root, "src", "export", "export.ts"));
    expect(seen.size).toBeGreaterThan(5);
    const modelRooms = ["onnx", "model", "extract", "generate"].map((room) => `${join("src", room)}/`);
    expect([...seen].filter((f) => modelRooms.some((room) => f.includes(room)))).toEqual([]);
  });
});

/** A toy third format, as docs/contributing.md's walk writes it: a tab-separated line per scored row. */
const { TSV } = await importWalk<{ TSV: ExportFormat }>("src/export/formats/tsv.ts");

describe("a third export format in its own registry", () => {
  const registry = registerExportFormat(EXPORT_FORMATS, TSV);

  it("is a --format choice and in --help", () => {
    const program = new Command("hsm");
    exportCommand(program, { metrics: [], exportFormats: registry });
    const cmd = program.commands[0]!;
    expect(cmd.summary()).toBe("write scored rows as Every Eval Ever, Microsoft Foundry or Tab-separated labels files");
    const help = cmd.helpInformation().replace(/\s+/g, " ");
    expect(help).toContain("Tab-separated labels (--format tsv): one line per scored row");
    expect(help).toContain("--format <format> eee, foundry or tsv");
    expect(help).toContain("--out <path> folder (eee), JSONL file (foundry) or TSV file (tsv)");
    const parse = cmd.options.find((o) => o.long === "--format")!.parseArg!;
    expect(parse("tsv", undefined)).toBe("tsv");
    const refused = new UsageError('Expected --format eee, foundry or tsv but received "csv"');
    expect(() => parse("csv", undefined)).toThrow(refused);
  });

  it("is written from the checked rows, beside the built-in formats, which stay as they were", async () => {
    const out = join(dir, "labels.tsv");
    const r = await exportScored({ format: "tsv", scored: fx.scored, bank: fx.bank, out }, registry);
    const scored = readFileSync(fx.scored, "utf8")
      .trim()
      .split("\n")
      .map((l) => JSON.parse(l));
    expect(r).toEqual({ files: [out], rows: scored.length });
    const expected = scored.map((s) => `${s.query_id}\t${s.condition_family}\t${s.label}\n`);
    expect(readFileSync(out, "utf8")).toBe(expected.join(""));
    expect(EXPORT_FORMATS.map((f) => f.name)).toEqual(["eee", "foundry"]);
    await expect(exportScored({ format: "tsv", scored: fx.scored, bank: fx.bank, out })).rejects.toThrow(
      new UsageError('Expected --format eee or foundry but received "tsv"'),
    );
    expect(() => registerExportFormat(registry, TSV)).toThrow('An export format named "tsv" is already registered');
  });
});
