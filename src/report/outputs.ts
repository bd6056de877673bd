/**
 * The models of an outputs root, as `hsm run` and `hsm study` lay it out:
 * `evaluation/<stem>.scored.jsonl`, `hidden/<stem>/`, `metrics/<stem>/`, where
 * `<stem>` is the model's name as a path stem (src/util/stem.ts). A study's
 * `study.json` names its models (and where imported ones live); without one,
 * every scored file under `evaluation/` is a model, named as its rows record.
 */
import { readdir, stat } from "node:fs/promises";
import { join } from "node:path";

import { HsmError, JsonlError, UsageError } from "../errors.js";
import { modelPaths, stemPaths, STUDY_RECORD, type ModelPaths } from "../study/layout.js";
import { jsonLines } from "../util/jsonl.js";
import { readText } from "../util/fs.js";
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

/** The study record of an outputs root, or undefined without one. */
export async function readStudyRecord(outputs: string): Promise<Record<string, unknown> | undefined> {
  const file = join(outputs, STUDY_RECORD);
  if (!(await exists(file))) return undefined;
  try {
    return JSON.parse(await readText(file)) as Record<string, unknown>;
  } catch (err) {
    throw new HsmError(`${file}: not a study record (${(err as Error).message}); remove it or rerun hsm study`, {
      cause: err,
    });
  }
}

/**
 * The models of an outputs root with a finished scored file, in the study's
 * order (else by name). The models a study ran are read under `outputs`, so
 * that a study's folder moved or copied elsewhere reads its own files; only
 * imported models are read where the record says they live.
 */
export async function listModels(outputs: string): Promise<OutputsModel[]> {
  if (!(await exists(outputs))) throw new UsageError(`${outputs}: no such outputs folder`);
  const record = await readStudyRecord(outputs);
  const found: OutputsModel[] = [];
  if (record && Array.isArray(record.models)) {
    for (const m of record.models as { name: string; status?: string; paths?: ModelPaths }[]) {
      const paths = m.status === "imported" && m.paths ? m.paths : modelPaths(outputs, m.name);
      if (await exists(paths.scored)) found.push({ name: m.name, paths });
    }
    return found;
  }
  const files = await readdir(join(outputs, "evaluation")).catch(() => [] as string[]);
  for (const f of files.filter((x) => x.endsWith(".scored.jsonl")).sort()) {
    const stem = f.slice(0, -".scored.jsonl".length);
    const recorded = await recordedModel(join(outputs, "evaluation", f));
    const name = recorded !== undefined && stemOf(recorded) === stem ? recorded : stem;
    found.push({ name, paths: stemPaths(outputs, stem) });
  }
  return found;
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
  const models = await listModels(outputs);
  const m = models.find((x) => x.name === name) ?? models.find((x) => stemOf(x.name) === name);
  if (!m) {
    const known = models.length ? models.map((x) => x.name).join(", ") : "none (no evaluation/<model>.scored.jsonl)";
    throw new UsageError(`${outputs}: no model "${name}" with scored rows; models there: ${known}`);
  }
  return m;
}

/** Reads a scored file: one entry per query, keyed by query id. */
export async function readScored(file: string): Promise<Map<string, ScoredQuery>> {
  const out = new Map<string, ScoredQuery>();
  const fail = (line: number, problem: string, cause?: unknown) =>
    new JsonlError(file, line, undefined, problem, { cause });
  for await (const { value: v, line } of jsonLines(file, fail)) {
    for (const field of ["query_id", "fact_id", "condition_family", "label"]) {
      if (typeof v[field] !== "string")
        throw new JsonlError(file, line, field, `expected a string but received ${JSON.stringify(v[field])}`);
    }
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
