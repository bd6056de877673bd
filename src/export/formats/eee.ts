/**
 * Every Eval Ever export: the instance-level samples (one record per scored
 * row, `instance_level_eval_0.3.0`) and an aggregate record (accuracy per
 * condition family, with the decoding settings and a pointer to the samples
 * file carrying its sha256 and row count), in the repository's layout
 * `data/<benchmark>/<developer>/<model>/`.
 *
 * `sample_hash` is sha256 over the UTF-8 bytes of `JSON.stringify([input.raw,
 * input.reference])` — the prompt and the gold answers, unambiguously joined.
 */
import { createHash } from "node:crypto";
import { existsSync, readFileSync, rmSync } from "node:fs";
import { readdir, rm } from "node:fs/promises";
import { basename, dirname, join } from "node:path";
import { fileURLToPath } from "node:url";

import type { BankRow } from "../../bank/bank.js";
import { ANCHOR_TEMPLATE, buildPrompt, PERTURBED_TEMPLATE } from "../../bank/prompt.js";
import { MAX_NEW_TOKENS, MAX_PROMPT_LEN, UNNAMED } from "../../defaults.js";
import { InternalError, UsageError } from "../../errors.js";
import { LABELS } from "../../score/labels.js";
import { fileError, makeDir, openInput, readText, writeFileExclusive } from "../../util/fs.js";
import { jsonSyntax } from "../../util/jsonl.js";
import { checkName, pathStem } from "../../util/stem.js";
import { onStopSignal } from "../../util/stop.js";
import { VERSION } from "../../version.js";
import { validate, type Schema } from "../validate.js";
import { holdsText, writeExportFile, type ExportFormat, type ExportInput, type ScoredRow } from "./format.js";

const INSTANCE_SCHEMA_VERSION = "instance_level_eval_0.3.0";
const AGGREGATE_SCHEMA_VERSION = "0.2.1";
const SCHEMA_FILE = `${INSTANCE_SCHEMA_VERSION}.json`;

/** Where the published schema lies: src/export/schemas/, seen from this folder in src/ or in dist/. */
function schemaPlaces(here: string): string[] {
  const fromBuild = join(here, "..", "..", "..", "src", "export", "schemas", SCHEMA_FILE);
  return [join(here, "..", "schemas", SCHEMA_FILE), fromBuild];
}

/**
 * The instance-level schema, as published (src/export/schemas/). Its absence or
 * a damaged copy is a broken installation, not a user's mistake.
 */
export function instanceSchema(places = schemaPlaces(dirname(fileURLToPath(import.meta.url)))): Schema {
  for (const p of places) {
    let text: string;
    try {
      text = readFileSync(p, "utf8");
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code === "ENOENT") continue;
      throw new InternalError(
        `the instance-level schema of this installation ${fileError(err, p).message}; reinstall hsm`,
        { cause: err },
      );
    }
    try {
      return JSON.parse(text) as Schema;
    } catch (err) {
      throw new InternalError(
        `the instance-level schema of this installation, ${p}, is not valid JSON (${jsonSyntax(err)}); reinstall hsm`,
        { cause: err },
      );
    }
  }
  throw new InternalError(
    `the instance-level schema file ${SCHEMA_FILE} is missing from this installation (looked in ${places.join(", ")}); reinstall hsm`,
  );
}

export interface ExportIdentity {
  benchmark: string;
  modelId: string;
  developer: string;
  organization: string;
  /** The integer that ends the evaluation id: unix seconds when the export ran, or a later second (see writeEee). */
  time: number;
}

/** The evaluation id `<benchmark>/<model id>/<time>`; earlierRecords reads it back. */
const evaluationIdOf = (id: ExportIdentity) => `${id.benchmark}/${id.modelId}/${id.time}`;

/** Both prompt templates on one line, each newline written as the two characters backslash and n. */
const PROMPT_TEMPLATES = `anchor: ${ANCHOR_TEMPLATE.replace(/\n/g, "\\n")} | other: ${PERTURBED_TEMPLATE.replace(/\n/g, "\\n")}`;

const sha256 = (text: string) => createHash("sha256").update(text).digest("hex");

export function sampleHash(raw: string, reference: string[]): string {
  return sha256(JSON.stringify([raw, reference]));
}

/** One instance record, valid against the instance-level schema. */
function instanceRecord(row: ScoredRow, bank: BankRow, id: ExportIdentity): Record<string, unknown> {
  const prompt = buildPrompt(bank);
  const evaluationName = `${id.benchmark}/${row.condition_family}`;
  const metadata: Record<string, string> = {
    fact_id: row.fact_id,
    condition_family: row.condition_family,
    label: row.label,
    scorer: row.scorer,
    matched_alias: row.matched_alias ?? "",
    needs_manual_review: String(row.needs_manual_review),
    flags: row.flags.join(","),
  };
  for (const key of [
    "relation",
    "language",
    "target_slot",
    "answer_type",
    "answer_granularity",
    "answer_in_subject_surface",
    "use_for_main_forward",
    "use_for_reverse_analysis",
    "use_for_recognition_analysis",
  ]) {
    const v = (row as Record<string, unknown>)[key] ?? (bank as unknown as Record<string, unknown>)[key];
    if (v !== undefined && v !== null) metadata[key] = String(v);
  }
  return {
    schema_version: INSTANCE_SCHEMA_VERSION,
    evaluation_id: evaluationIdOf(id),
    model_id: id.modelId,
    evaluation_name: evaluationName,
    evaluation_result_id: evaluationName,
    sample_id: row.query_id,
    sample_hash: sampleHash(prompt, bank.answers),
    interaction_type: "single_turn",
    input: { raw: prompt, formatted: prompt, reference: bank.answers, choices: null },
    output: { raw: [row.raw_response], reasoning_trace: null },
    answer_attribution: [
      {
        turn_idx: 0,
        source: "output.raw",
        extracted_value: row.span,
        extraction_method: row.scorer,
        is_terminal: true,
      },
    ],
    evaluation: { score: row.label === "correct" ? 1 : 0, is_correct: row.label === "correct", num_turns: 1 },
    metadata,
  };
}

/** The aggregate record: accuracy per condition family, decoding settings, the samples file. */
function aggregateRecord(
  rows: ScoredRow[],
  id: ExportIdentity,
  samples: { path: string; sha256: string; rows: number },
  now = new Date(),
): Record<string, unknown> {
  const families = [...new Set(rows.map((r) => r.condition_family))].sort();
  return {
    schema_version: AGGREGATE_SCHEMA_VERSION,
    evaluation_id: evaluationIdOf(id),
    evaluation_timestamp: now.toISOString(),
    retrieved_timestamp: String(Math.floor(now.getTime() / 1000)),
    source_metadata: {
      source_name: "hsm",
      source_type: "evaluation_run",
      source_organization_name: id.organization,
      evaluator_relationship: "third_party",
    },
    eval_library: { name: "hsm", version: VERSION },
    model_info: {
      name: id.modelId.split("/").at(-1),
      id: id.modelId,
      developer: id.developer,
      inference_platform: "onnxruntime",
      ...(typeof rows[0]?.model_source === "string"
        ? { additional_details: { model_source: rows[0].model_source } }
        : {}),
    },
    evaluation_results: families.map((family) => {
      const mine = rows.filter((r) => r.condition_family === family);
      const correct = mine.filter((r) => r.label === "correct").length;
      const name = `${id.benchmark}/${family}`;
      return {
        evaluation_name: name,
        evaluation_result_id: name,
        source_data: {
          dataset_name: id.benchmark,
          source_type: "other",
          additional_details: { condition_family: family },
        },
        metric_config: {
          evaluation_description: `accuracy on ${family} questions (label "correct" / all scored rows)`,
          lower_is_better: false,
          score_type: "continuous",
          min_score: 0,
          max_score: 1,
        },
        score_details: {
          score: mine.length ? correct / mine.length : 0,
          details: Object.fromEntries(LABELS.map((l) => [l, String(mine.filter((r) => r.label === l).length)])),
          uncertainty: { num_samples: mine.length },
        },
        generation_config: {
          generation_args: {
            temperature: 0,
            top_p: null,
            top_k: null,
            max_tokens: MAX_NEW_TOKENS,
            reasoning: false,
            prompt_template: PROMPT_TEMPLATES,
          },
          additional_details: {
            num_beams: "1",
            do_sample: "false",
            max_prompt_len: String(MAX_PROMPT_LEN),
            truncation_side: "left",
            padding_side: "left",
            chat_template: "none",
          },
        },
      };
    }),
    detailed_evaluation_results: {
      format: "jsonl",
      file_path: samples.path,
      hash_algorithm: "sha256",
      checksum: samples.sha256,
      total_rows: samples.rows,
    },
  };
}

/** Runs of characters outside `A–Z a–z 0–9 . _ -` replaced by `_`: the file stem of an evaluation id. */
const safe = (s: string) => s.replace(/[^A-Za-z0-9._-]+/g, "_");

/** The folder of a model's records: `data/<benchmark>/<developer>/<model>/`, each a path stem (src/util/stem.ts). */
function recordFolder(outDir: string, id: ExportIdentity): string {
  const model = id.modelId.split("/").at(-1)!;
  return join(
    outDir,
    "data",
    pathStem(id.benchmark, "benchmark"),
    pathStem(id.developer, "developer"),
    pathStem(model),
  );
}

/** An aggregate record and its samples, as text, for one evaluation id and time. */
function recordTexts(
  rows: ScoredRow[],
  bank: Map<string, BankRow>,
  id: ExportIdentity,
  now?: Date,
): { stem: string; samples: string; aggregate: string; records: Record<string, unknown>[] } {
  const stem = safe(evaluationIdOf(id));
  const records = rows.map((r) => instanceRecord(r, bank.get(r.query_id)!, id));
  // "\n" after each line: no rows, no lines, an empty file.
  const samples = records.map((r) => `${JSON.stringify(r)}\n`).join("");
  const pointer = { path: `${stem}_samples.jsonl`, sha256: sha256(samples), rows: records.length };
  return { stem, samples, aggregate: JSON.stringify(aggregateRecord(rows, id, pointer, now), null, 2) + "\n", records };
}

/** An earlier record of the same model and benchmark in its folder. */
interface EarlierRecord {
  aggregate: string;
  samples: string;
  /** The time its evaluation id ends in. */
  idTime: number;
  time: Date;
}

/** The fields of an aggregate record read back to tell whose it is (anything may be missing). */
interface AggregateFields {
  evaluation_id?: unknown;
  evaluation_timestamp?: unknown;
  eval_library?: { name?: unknown };
  detailed_evaluation_results?: { file_path?: unknown };
}

/** The first line of a file (up to 64 KiB of it), or "" when it cannot be read. */
async function firstLine(path: string): Promise<string> {
  const fh = await openInput(path)
    .then((input) => input.fh)
    .catch(() => undefined);
  if (!fh) return "";
  try {
    const buf = Buffer.alloc(1 << 16);
    const { bytesRead } = await fh.read(buf, 0, buf.length, 0);
    return buf.subarray(0, bytesRead).toString("utf8").split("\n")[0]!;
  } finally {
    await fh.close();
  }
}

/**
 * hsm's earlier records of this model and benchmark in `dir` (an evaluation id
 * `<benchmark>/<model id>/<time>`), and the samples files of this model that no
 * aggregate points at (left by an export that stopped between its two files).
 */
async function earlierRecords(
  dir: string,
  id: ExportIdentity,
): Promise<{ records: EarlierRecord[]; orphans: string[] }> {
  const names = await readdir(dir).catch(() => [] as string[]);
  const prefix = `${id.benchmark}/${id.modelId}/`;
  const ours = (evaluationId: unknown) =>
    typeof evaluationId === "string" &&
    evaluationId.startsWith(prefix) &&
    /^\d+$/.test(evaluationId.slice(prefix.length));
  const records: EarlierRecord[] = [];
  const pointed = new Set<string>();
  for (const name of names.filter((n) => n.endsWith(".json"))) {
    let record: AggregateFields | null;
    try {
      record = JSON.parse(await readText(join(dir, name))) as AggregateFields | null;
    } catch {
      continue; // not a record of ours
    }
    const samples = record?.detailed_evaluation_results?.file_path;
    if (typeof samples === "string") pointed.add(samples);
    const evaluationId = record?.evaluation_id;
    if (!ours(evaluationId) || record?.eval_library?.name !== "hsm" || typeof samples !== "string") continue;
    const time = new Date(String(record.evaluation_timestamp));
    if (Number.isNaN(time.getTime()) || samples.includes("/")) continue;
    records.push({
      aggregate: join(dir, name),
      samples: join(dir, samples),
      idTime: Number((evaluationId as string).slice(prefix.length)),
      time,
    });
  }
  const orphans: string[] = [];
  for (const name of names.filter((n) => n.endsWith("_samples.jsonl") && !pointed.has(n))) {
    try {
      if (ours(JSON.parse(await firstLine(join(dir, name))).evaluation_id)) orphans.push(join(dir, name));
    } catch {
      // not a samples file of ours
    }
  }
  return { records, orphans };
}

/** Removes files; one that cannot be removed is named. */
async function removeAll(paths: string[]): Promise<void> {
  for (const p of paths) {
    try {
      await rm(p, { force: true });
    } catch (err) {
      throw fileError(err, p, "write");
    }
  }
}

/**
 * Writes the aggregate record and its samples, every instance record checked
 * against the schema before anything is written; returns their paths. Without
 * `replace`, the record is a new one: its two file names are claimed without
 * replacing anything, and where another record (of an export in the same
 * second, or running beside this one) holds them, the id's time moves on a
 * second until free ones are found. With `replace`, the model's one record in
 * the folder is kept when writing it again (with its own id and time) would
 * give the same two files, and every other record of the model there is
 * removed once the new one is written.
 */
export async function writeEee(
  outDir: string,
  rows: ScoredRow[],
  bank: Map<string, BankRow>,
  id: ExportIdentity,
  replace = false,
): Promise<{ aggregate: string; samples: string; unchanged: boolean }> {
  const dir = recordFolder(outDir, id);
  const texts = recordTexts(rows, bank, id);
  const samplesPath = join(dir, `${texts.stem}_samples.jsonl`);
  // Checked before anything is written or removed: a record the schema refuses leaves the folder as it was.
  checkRecords(texts.records, samplesPath);
  if (!replace) return { ...(await writeNewRecord(dir, rows, bank, id, texts)), unchanged: false };
  const earlier = await earlierRecords(dir, id);
  for (const e of earlier.records) {
    const again = recordTexts(rows, bank, { ...id, time: e.idTime }, e.time);
    if (!(await holdsText(e.aggregate, again.aggregate)) || !(await holdsText(e.samples, again.samples))) continue;
    const others = earlier.records.filter((x) => x !== e).flatMap((x) => [x.aggregate, x.samples]);
    await removeAll([...others, ...earlier.orphans]);
    return { aggregate: e.aggregate, samples: e.samples, unchanged: true };
  }
  const aggregatePath = join(dir, `${texts.stem}.json`);
  // The samples first: an aggregate never points at a file not yet written.
  await writeExportFile(samplesPath, texts.samples);
  // A samples file an earlier record points at stays if the aggregate fails: that record is the one to keep then.
  const samplesOwn = !earlier.records.some((x) => x.samples === samplesPath);
  await withSamplesTakenBack(samplesPath, aggregatePath, samplesOwn, () =>
    writeExportFile(aggregatePath, texts.aggregate),
  );
  const mine = new Set([samplesPath, aggregatePath]);
  const replaced = earlier.records.flatMap((x) => [x.aggregate, x.samples]);
  await removeAll([...replaced, ...earlier.orphans].filter((p) => !mine.has(p)));
  return { aggregate: aggregatePath, samples: samplesPath, unchanged: false };
}

/**
 * Runs `writeAggregate` once the samples file is in place, and removes the samples file (where `own`) if it fails
 * (a full disk, a quota) or a signal stops the process before the aggregate is there: a failed export leaves no
 * half of a record, whose samples no aggregate points at.
 */
async function withSamplesTakenBack<T>(
  samples: string,
  aggregate: string,
  own: boolean,
  writeAggregate: () => Promise<T>,
): Promise<T> {
  if (!own) return writeAggregate();
  const forget = onStopSignal(() => {
    if (!existsSync(aggregate)) rmSync(samples, { force: true });
  });
  try {
    return await writeAggregate();
  } catch (err) {
    await rm(samples, { force: true }).catch(() => {});
    throw err;
  } finally {
    forget();
  }
}

/**
 * Writes a record under file names no other record holds: the samples are
 * linked into place first, which fails where the name is taken, so two
 * exports, even in two processes, never share or replace a record; then the
 * aggregate is claimed the same way. A taken name moves the id's time on by a
 * second and tries again, with the texts made again for it; `texts` are the
 * ones of `id`'s own time.
 */
async function writeNewRecord(
  dir: string,
  rows: ScoredRow[],
  bank: Map<string, BankRow>,
  id: ExportIdentity,
  texts: ReturnType<typeof recordTexts>,
): Promise<{ aggregate: string; samples: string }> {
  try {
    await makeDir(dir);
  } catch (err) {
    throw fileError(err, dir, "write");
  }
  for (let time = id.time; ; texts = recordTexts(rows, bank, { ...id, time: ++time })) {
    const samples = join(dir, `${texts.stem}_samples.jsonl`);
    const aggregate = join(dir, `${texts.stem}.json`);
    if (!(await writeFileExclusive(samples, texts.samples))) continue;
    const placed = await withSamplesTakenBack(samples, aggregate, true, () =>
      writeFileExclusive(aggregate, texts.aggregate),
    );
    if (placed) return { aggregate, samples };
    // An aggregate without its samples holds the name (another tool's, or one left behind): ours moves on.
    await removeAll([samples]);
  }
}

/** Checks every instance record against the published schema; `samples` names the file they would be written to. */
function checkRecords(records: Record<string, unknown>[], samples: string): void {
  const schema = instanceSchema();
  for (const [i, record] of records.entries()) {
    const errors = validate(record, schema);
    // The records are hsm's own making from checked rows: one that fails the schema is a bug in hsm.
    if (errors.length) {
      const problems = errors.map((e) => `${e.path} ${e.message}`).join("; ");
      throw new InternalError(`${samples}:${i + 1}: not valid against ${String(schema.version)}: ${problems}`);
    }
  }
}

/**
 * Refuses a `--model-id` the record's folder cannot be named by, naming the
 * option: the folder's rule would blame the developer or model name made from it.
 */
function checkModelId(modelId: string, developerGiven: boolean): void {
  const what = "model id (--model-id)";
  checkName(modelId, what);
  const parts = modelId.split("/");
  const received = JSON.stringify(modelId);
  if (parts.at(-1)!.trim() === "")
    throw new UsageError(`Expected a ${what} with a name after its last "/" but received ${received}`);
  if (!developerGiven && parts[0]!.trim() === "")
    throw new UsageError(`Expected a ${what} with a developer before its first "/" but received ${received}`);
}

/** Who and what was evaluated: from the settings, else the rows and the bank file; the id ends in the time. */
function identity(input: ExportInput): ExportIdentity {
  const o = input.settings;
  const model = input.rows.find((r) => r.model !== undefined)?.model ?? UNNAMED;
  if (o.modelId !== undefined) checkModelId(o.modelId, o.developer !== undefined);
  const modelId = o.modelId ?? (String(model).includes("/") ? String(model) : `${o.developer ?? UNNAMED}/${model}`);
  const benchmark = o.benchmark ?? basename(o.bank).replace(/\.jsonl?$/, "");
  return {
    benchmark,
    modelId,
    developer: o.developer ?? modelId.split("/")[0] ?? UNNAMED,
    organization: o.organization ?? UNNAMED,
    time: Math.floor(Date.now() / 1000),
  };
}

/** Every Eval Ever, each record checked against the published schema before anyone else reads it. */
export const EEE: ExportFormat = {
  name: "eee",
  title: "Every Eval Ever",
  description:
    "an aggregate record (accuracy per condition family, decoding settings, and a pointer to the samples file " +
    "with its sha256 and row count) beside instance-level samples (schema instance_level_eval_0.3.0, every " +
    "record validated), under OUT/data/<benchmark>/<developer>/<model>/.",
  out: "folder",
  async write(input) {
    const o = input.settings;
    const written = await writeEee(o.out, input.rows, input.bank, identity(input), o.replace);
    return { files: [written.aggregate, written.samples], unchanged: written.unchanged };
  },
};
