/**
 * The models of an outputs root, as `hsm run` and `hsm study` lay it out:
 * `evaluation/<stem>.scored.jsonl`, `hidden/<stem>/`, `metrics/<stem>/`, where
 * `<stem>` is the model's name as a path stem (src/util/stem.ts). A study's
 * `study.json` names its models (and where imported ones live); without one,
 * every scored file under `evaluation/` is a model, named as its rows record.
 */
import { readdir, stat } from "node:fs/promises";
import { join } from "node:path";

import { JsonFileError, JsonlError, ScoredError, UsageError } from "../errors.js";
import { modelPaths, stemPaths, STUDY_RECORD, type ModelPaths } from "../study/layout.js";
import { jsonLines, jsonSyntax } from "../util/jsonl.js";
import { readTextIfPresent } from "../util/fs.js";
import { pathStem } from "../util/stem.js";

/** One scored query of one model. */
export interface ScoredQuery {
  queryId: string;
  fact: string;
  family: string;
  label: string;
  matchedAlias: string | null;
  answer: string;
}

/** A model of an outputs root and where its files are. */
export interface OutputsModel {
  name: string;
  paths: ModelPaths;
}

async function exists(path: string): Promise<boolean> {
  return (await stat(path).catch(() => undefined)) !== undefined;
}

/** A value as an error message shows it: `5 (number)`, `null`. */
export function describeValue(v: unknown): string {
  if (v === undefined) return "nothing";
  if (v === null) return "null";
  if (Array.isArray(v)) return "an array";
  if (typeof v === "object") return "an object";
  return `${JSON.stringify(v) ?? String(v)} (${typeof v})`;
}

/** A JSON file hsm wrote, read back: null when absent; a JsonFileError naming it when it is not a JSON object. */
export async function readJsonObject(file: string): Promise<Record<string, unknown> | null> {
  const text = await readTextIfPresent(file);
  if (text === null) return null;
  let value: unknown;
  try {
    value = JSON.parse(text);
  } catch (err) {
    throw new JsonFileError(file, undefined, `not valid JSON (${jsonSyntax(err)})`, { cause: err });
  }
  if (value === null || typeof value !== "object" || Array.isArray(value))
    throw new JsonFileError(file, undefined, `expected a JSON object but received ${describeValue(value)}`);
  return value as Record<string, unknown>;
}

/** One model of a study record: its name, what became of it, where an imported one lives, why a failed one failed. */
export interface RecordedModel {
  name: string;
  status: "done" | "imported" | "failed";
  paths?: ModelPaths;
  error: string | null;
}

/** What the report and compare read of a study record (`study.json`). */
export interface StudyRecord {
  bank: unknown;
  generation: unknown;
  /** Absent in a record without a `models` list. */
  models?: RecordedModel[];
}

const STATUSES = ["done", "imported", "failed"] as const;
const PATH_KEYS = ["generations", "scored", "store", "metrics"] as const;

/** A record's `models[i]`, checked: a JsonFileError names the file and field of anything else. */
function checkRecordedModel(file: string, v: unknown, i: number): RecordedModel {
  const at = `models[${i}]`;
  const fail = (field: string, problem: string): never => {
    throw new JsonFileError(file, field, problem);
  };
  if (v === null || typeof v !== "object" || Array.isArray(v))
    fail(at, `expected an object but received ${describeValue(v)}`);
  const m = v as Record<string, unknown>;
  if (typeof m.name !== "string") return fail(`${at}.name`, `expected a string but received ${describeValue(m.name)}`);
  try {
    pathStem(m.name);
  } catch (err) {
    fail(`${at}.name`, (err as Error).message);
  }
  if (!(STATUSES as readonly unknown[]).includes(m.status))
    fail(`${at}.status`, `expected done, imported or failed but received ${describeValue(m.status)}`);
  const status = m.status as RecordedModel["status"];
  let paths: ModelPaths | undefined;
  if (status === "imported") {
    const p = m.paths as Record<string, unknown> | undefined;
    if (p === null || typeof p !== "object" || Array.isArray(p))
      fail(`${at}.paths`, `expected an object but received ${describeValue(p)}`);
    for (const key of PATH_KEYS)
      if (typeof p![key] !== "string")
        fail(`${at}.paths.${key}`, `expected a string but received ${describeValue(p![key])}`);
    paths = p as unknown as ModelPaths;
  }
  return { name: m.name, status, ...(paths ? { paths } : {}), error: typeof m.error === "string" ? m.error : null };
}

/** The study record of an outputs root, checked, or undefined without one. */
async function readStudyRecord(outputs: string): Promise<StudyRecord | undefined> {
  const file = join(outputs, STUDY_RECORD);
  const record = await readJsonObject(file);
  if (record === null) return undefined;
  const models = record.models;
  if (models !== undefined && !Array.isArray(models))
    throw new JsonFileError(file, "models", `expected an array but received ${describeValue(models)}`);
  const checked = models?.map((m, i) => checkRecordedModel(file, m, i));
  // Each model once: two entries of one name would be read, charted and compared as two models.
  const first = new Map<string, number>();
  for (const [i, m] of (checked ?? []).entries()) {
    const at = first.get(m.name);
    if (at !== undefined)
      throw new JsonFileError(file, `models[${i}].name`, `"${m.name}" is already the name of models[${at}]`);
    first.set(m.name, i);
  }
  return {
    bank: record.bank ?? null,
    generation: record.generation ?? null,
    ...(checked ? { models: checked } : {}),
  };
}

/** The models of an outputs root, those its study record says failed (left out of `models`), and the record. */
export interface OutputsModels {
  models: OutputsModel[];
  failed: RecordedModel[];
  record: StudyRecord | undefined;
}

/**
 * The models of an outputs root with a finished scored file, in the study's
 * order (else by name). The models a study ran are read under `outputs`, so
 * that a study's folder moved or copied elsewhere reads its own files; only
 * imported models are read where the record says they live. Models the record
 * marks `failed` are not among them but listed apart.
 */
export async function readModels(outputs: string): Promise<OutputsModels> {
  if (!(await exists(outputs))) throw new UsageError(`${outputs}: no such outputs folder`);
  const record = await readStudyRecord(outputs);
  const found: OutputsModel[] = [];
  if (record?.models) {
    for (const m of record.models) {
      if (m.status === "failed") continue;
      const paths = m.paths ?? modelPaths(outputs, m.name);
      if (await exists(paths.scored)) found.push({ name: m.name, paths });
    }
    return { models: found, failed: record.models.filter((m) => m.status === "failed"), record };
  }
  const files = await readdir(join(outputs, "evaluation")).catch(() => [] as string[]);
  for (const f of files.filter((x) => x.endsWith(".scored.jsonl")).sort()) {
    const stem = f.slice(0, -".scored.jsonl".length);
    const recorded = await recordedModel(join(outputs, "evaluation", f));
    const name = recorded !== undefined && stemOf(recorded) === stem ? recorded : stem;
    found.push({ name, paths: stemPaths(outputs, stem) });
  }
  return { models: found, failed: [], record };
}

/** The models of an outputs root with a finished scored file, failed models left out: see {@link readModels}. */
export async function listModels(outputs: string): Promise<OutputsModel[]> {
  return (await readModels(outputs)).models;
}

/** The path stem of a name, or undefined for a name that has none (empty, control characters). */
function stemOf(name: string): string | undefined {
  try {
    return pathStem(name);
  } catch {
    return undefined;
  }
}

/** The `model` its first row records, when a scored file's first line is an object that records one. */
async function recordedModel(scored: string): Promise<string | undefined> {
  const fail = (line: number, problem: string) => new JsonlError(scored, line, undefined, problem);
  const lines = jsonLines(scored, fail);
  try {
    const first = await lines.next();
    const model = first.done ? undefined : first.value.value.model;
    return typeof model === "string" ? model : undefined;
  } finally {
    await lines.return(undefined); // closes the file
  }
}

/**
 * The named model of an outputs root (by its name, or by the path stem its
 * files are named by); a UsageError listing the models there when it is not
 * one of them.
 */
export async function findModel(outputs: string, name: string): Promise<OutputsModel> {
  const { models, failed } = await readModels(outputs);
  const m = models.find((x) => x.name === name) ?? models.find((x) => stemOf(x.name) === name);
  const lost = failed.find((x) => x.name === name) ?? failed.find((x) => stemOf(x.name) === name);
  if (!m && lost) {
    throw new UsageError(
      `${outputs}: model "${lost.name}" failed in the study (see ${join(outputs, STUDY_RECORD)}); rerun hsm study to finish it`,
    );
  }
  if (!m) {
    const known = models.length ? models.map((x) => x.name).join(", ") : "none (no evaluation/<model>.scored.jsonl)";
    throw new UsageError(`${outputs}: no model "${name}" with scored rows; models there: ${known}`);
  }
  return m;
}

/** Reads a scored file: one entry per query, keyed by query id; a query scored twice is refused, naming both lines. */
export async function readScored(file: string): Promise<Map<string, ScoredQuery>> {
  const out = new Map<string, ScoredQuery>();
  const lines = new Map<string, number>();
  const fail = (line: number, problem: string, cause?: unknown) =>
    new JsonlError(file, line, undefined, problem, { cause });
  for await (const { value: v, line } of jsonLines(file, fail)) {
    for (const field of ["query_id", "fact_id", "condition_family", "label"]) {
      if (typeof v[field] !== "string")
        throw new JsonlError(file, line, field, `expected a string but received ${JSON.stringify(v[field])}`);
    }
    const first = lines.get(v.query_id as string);
    if (first !== undefined)
      throw new ScoredError(
        file,
        line,
        "query_id",
        `"${v.query_id as string}" is scored twice (first on line ${first})`,
      );
    lines.set(v.query_id as string, line);
    const answer = typeof v.span === "string" ? v.span : typeof v.raw_response === "string" ? v.raw_response : "";
    out.set(v.query_id as string, {
      queryId: v.query_id as string,
      fact: v.fact_id as string,
      family: v.condition_family as string,
      label: v.label as string,
      matchedAlias: typeof v.matched_alias === "string" ? v.matched_alias : null,
      answer,
    });
  }
  return out;
}
