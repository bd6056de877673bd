/**
 * `hsm study`: the pipeline for every model of a study file, one after the
 * other, into one output root. Finished steps are skipped and unfinished ones
 * resumed (the pipeline does both); a model that fails is reported with its
 * error and the others go on. Imported models (an outputs folder of an earlier
 * run) are verified where they are. The outcome is written to
 * `<outputs>/study.json` and summarized as a table. One study runs on an
 * outputs root at a time.
 */
import { stat } from "node:fs/promises";
import { join } from "node:path";

import { HsmError } from "../errors.js";
import { METRICS } from "../metrics/registry.js";
import { runPipeline } from "./run.js";
import { acquireLock } from "../store/lock.js";
import { verifyStore } from "../store/verify.js";
import { jsonLines } from "../util/jsonl.js";
import { shellWord } from "../util/shell.js";
import { TOOL_VERSION } from "../version.js";
import { modelPaths, STUDY_RECORD, type ModelPaths, type ModelSummary, type StudySummary } from "../study/layout.js";
import { wilsonInterval } from "../study/stats.js";
import { checkStudy } from "../study/check.js";
import { readStudyFile, type Study, type StudyModel } from "../study/study-file.js";
import { makeDir, readText, writeFileAtomic } from "../util/fs.js";

/** The lock file in the outputs root that one running `hsm study` holds. */
const STUDY_LOCK = ".hsm-study.lock";

export interface StudyOptions {
  /** What each model's steps did, for the user. */
  log?: (model: string, step: string, message: string) => void;
  onProgress?: (model: string, step: string, done: number, total: number) => void;
}

async function exists(path: string): Promise<boolean> {
  return (await stat(path).catch(() => undefined)) !== undefined;
}

/** Counts `correct` labels in a scored file. */
type Accuracy = Pick<ModelSummary, "correct" | "queries" | "accuracy" | "accuracyInterval">;
const NO_ACCURACY: Accuracy = { correct: null, queries: null, accuracy: null, accuracyInterval: null };

async function accuracyOf(scored: string): Promise<Accuracy> {
  if (!(await exists(scored))) return NO_ACCURACY;
  let correct = 0;
  let queries = 0;
  for await (const { value } of jsonLines(scored, (line, problem) => new HsmError(`${scored}:${line}: ${problem}`))) {
    queries++;
    if (value.label === "correct") correct++;
  }
  return {
    correct,
    queries,
    accuracy: queries ? correct / queries : null,
    accuracyInterval: queries ? wilsonInterval(correct, queries) : null,
  };
}

/**
 * Checks an imported model's files where they are: scored rows, a store that
 * verifies and matches the study's prompt length, and every metric's results.
 */
async function checkImport(study: Study, model: StudyModel, paths: ModelPaths): Promise<void> {
  const missing: string[] = [];
  if (!(await exists(paths.scored))) missing.push(paths.scored);
  for (const { name } of METRICS) {
    const results = join(paths.metrics, `${name}.json`);
    if (!(await exists(results))) missing.push(results);
  }
  if (!(await exists(join(paths.store, "index.json")))) missing.push(join(paths.store, "index.json"));
  if (missing.length) {
    throw new HsmError(
      `imported model "${model.name}" is not finished in ${model.outputs}: missing ${missing.join(", ")}; finish it with hsm run --outputs ${shellWord(model.outputs!)} --model ${shellWord(model.name)}`,
    );
  }
  const report = await verifyStore(paths.store);
  if (!report.ok)
    throw new HsmError(
      `${paths.store} does not verify: ${report.problems.map((p) => `${p.file}: ${p.message}`).join("; ")}`,
    );
  // Stores written by other tools may not record it; where recorded, it must be the study's.
  const recorded = JSON.parse(await readText(join(paths.store, "index.json"))).max_prompt_len;
  if (recorded !== undefined && recorded !== study.generation.max_prompt_len) {
    throw new HsmError(
      `${paths.store} was extracted with max_prompt_len = ${recorded} but the study's generation.max_prompt_len is ${study.generation.max_prompt_len}; compare models run with the same settings`,
    );
  }
}

async function runModel(study: Study, model: StudyModel, o: StudyOptions): Promise<ModelSummary> {
  const outputs = model.outputs ?? study.outputs;
  const paths = modelPaths(outputs, model.name);
  const t0 = performance.now();
  const base = { name: model.name, outputs, paths };
  try {
    if (model.modelDir === undefined) await checkImport(study, model, paths);
    else {
      await runPipeline({
        modelDir: model.modelDir,
        bank: study.bank,
        outputs,
        model: model.name,
        batchSize: study.run.batchSize,
        device: study.run.device,
        threads: study.run.threads,
        commitRows: study.run.commitRows,
        log: (step, message) => o.log?.(model.name, step, message),
        onProgress: (step, done, total) => o.onProgress?.(model.name, step, done, total),
      });
    }
    const seconds = (performance.now() - t0) / 1000;
    return {
      ...base,
      status: model.modelDir === undefined ? "imported" : "done",
      ...(await accuracyOf(paths.scored)),
      seconds,
    };
  } catch (error) {
    const seconds = (performance.now() - t0) / 1000;
    const text = error instanceof Error ? error.message : String(error);
    // Name the model's folder where the error does not, so the summary says where to look.
    const where = model.modelDir ?? model.outputs!;
    const message = text.includes(where) ? text : `${where}: ${text}`;
    o.log?.(model.name, "failed", message);
    return {
      ...base,
      status: "failed",
      ...(await accuracyOf(paths.scored).catch(() => NO_ACCURACY)),
      seconds,
      error,
      message,
    };
  }
}

/** Writes `<outputs>/study.json` atomically: what was run, with which settings, and what became of each model. */
async function writeRecord(study: Study, models: ModelSummary[]): Promise<string> {
  await makeDir(study.outputs);
  const record = join(study.outputs, STUDY_RECORD);
  const body = {
    format: "hsm-study/1",
    tool_version: TOOL_VERSION,
    study_file: study.file,
    bank: study.bank,
    generation: study.generation,
    written_at: new Date().toISOString(),
    models: models.map((m) => ({
      name: m.name,
      status: m.status,
      outputs: m.outputs,
      paths: m.paths,
      correct: m.correct,
      queries: m.queries,
      accuracy: m.accuracy,
      seconds: Number(m.seconds.toFixed(3)),
      error: m.message ?? null,
    })),
  };
  await writeFileAtomic(record, JSON.stringify(body, null, 2) + "\n");
  return record;
}

/**
 * Runs every model of a study (a study file's path, or one already read) in
 * order; never throws for one model's failure. Throws, before any model runs
 * and before study.json is written, for a study that cannot run at all: a
 * StudyFileError for a missing bank or decoding settings hsm does not run, the
 * bank's BankError for an invalid bank.
 */
export async function runStudy(file: string | Study, o: StudyOptions = {}): Promise<StudySummary> {
  const study = typeof file === "string" ? await readStudyFile(file) : file;
  await checkStudy(study);
  // One study per outputs root at a time: a second one beside it would find the first's steps locked, record
  // those models failed though the first finishes them, and replace the first's study.json with that.
  await makeDir(study.outputs);
  const release = await acquireLock(study.outputs, STUDY_LOCK);
  try {
    const models: ModelSummary[] = [];
    for (const model of study.models) models.push(await runModel(study, model, o));
    const record = await writeRecord(study, models);
    return { study, models, ok: models.every((m) => m.status !== "failed"), record };
  } finally {
    await release();
  }
}
