/**
 * Where a study puts things and how its outcome reads: the benchmark's layout
 * of each model under the output root, the summary table, and the extraction
 * commands for a cluster. Light: nothing here runs a model.
 */
import { join } from "node:path";

import { DEFAULT_COMMIT_ROWS } from "../defaults.js";
import { UsageError } from "../errors.js";
import { shardRange } from "../extract/shard.js";
import { shellWord } from "../util/shell.js";
import { pathStem } from "../util/stem.js";
import type { Study } from "./study-file.js";

/** The study's record of its models, written beside them. */
export const STUDY_RECORD = "study.json";
/** Where the shard stores of a model's extraction go before they are merged, under the output root. */
export const SHARDS_FOLDER = "shards";

/** Where a model's files sit under an outputs root (the benchmark's layout, as `hsm run` writes it). */
export interface ModelPaths {
  generations: string;
  scored: string;
  store: string;
  metrics: string;
}

/**
 * The benchmark's layout of one model under `outputs`, each file and folder
 * named by the model's path stem (src/util/stem.ts): the name itself when it
 * is plain, so that no name reaches outside `outputs` or nests folders.
 */
export function modelPaths(outputs: string, model: string): ModelPaths {
  return stemPaths(outputs, pathStem(model));
}

/** The layout of the files named `stem` under `outputs` (a stem as it is, e.g. read back from a file name). */
export function stemPaths(outputs: string, stem: string): ModelPaths {
  return {
    generations: join(outputs, "evaluation", `${stem}.jsonl`),
    scored: join(outputs, "evaluation", `${stem}.scored.jsonl`),
    store: join(outputs, "hidden", stem),
    metrics: join(outputs, "metrics", stem),
  };
}

/** What became of one model: `done` (run to the end, finished steps skipped), `imported` (verified in place) or `failed`. */
export interface ModelSummary {
  name: string;
  status: "done" | "imported" | "failed";
  /** The outputs root holding the model's files: the study's, or the imported folder. */
  outputs: string;
  paths: ModelPaths;
  /** Scored rows labelled `correct`, of all scored rows; null where there is no scored file. */
  correct: number | null;
  queries: number | null;
  accuracy: number | null;
  /** Wilson 95% interval of the accuracy. */
  accuracyInterval: [number, number] | null;
  seconds: number;
  /** Why the model failed: its error kept as thrown, and its message naming the model's folder. */
  error?: unknown;
  message?: string;
}

export interface StudySummary {
  study: Study;
  models: ModelSummary[];
  /** True when no model failed. */
  ok: boolean;
  /** The record written under the output root. */
  record: string;
}

/** A fixed-width table of the study's outcome, one model a line, then each failure's message. */
export function formatStudySummary(s: StudySummary): string {
  const header = ["model", "status", "accuracy", "95% interval", "queries", "seconds", "outputs"];
  const rows = s.models.map((m) => [
    m.name,
    m.status,
    m.accuracy === null ? "—" : m.accuracy.toFixed(4),
    m.accuracyInterval ? `[${m.accuracyInterval[0].toFixed(4)}, ${m.accuracyInterval[1].toFixed(4)}]` : "—",
    m.queries === null ? "—" : String(m.queries),
    m.seconds.toFixed(1),
    m.outputs,
  ]);
  const widths = header.map((h, i) => Math.max(h.length, ...rows.map((r) => r[i]!.length)));
  const line = (cells: string[]) => cells.map((c, i) => (i === cells.length - 1 ? c : c.padEnd(widths[i]!))).join("  ");
  const out = [line(header), line(widths.map((w) => "─".repeat(w))), ...rows.map(line)];
  const failed = s.models.filter((m) => m.status === "failed");
  if (failed.length)
    out.push(
      "",
      `${failed.length} of ${s.models.length} models failed:`,
      ...failed.map((m) => `  ${m.name}: ${m.message}`),
    );
  return out.join("\n");
}

/** The commands that extract one model of a study on a cluster: one per shard, then the merge. */
export interface ShardCommands {
  model: string;
  extract: string[];
  merge: string;
}

/**
 * Refuses `n` shards of a bank with `mainRows` main-forward rows where one
 * would hold no row: shards are cut on the study's commit blocks
 * (`run.commit_rows`), and `hsm extract` refuses an empty shard.
 */
export function checkShardsFilled(study: Study, n: number, mainRows: number): void {
  const commitRows = study.run.commitRows ?? DEFAULT_COMMIT_ROWS;
  for (let k = 0; k < n; k++) {
    const [a, b] = shardRange(mainRows, k, n, commitRows);
    if (a === b)
      throw new UsageError(
        `--shards ${n}: shard ${k} would be empty (${mainRows} rows in commit blocks of ${commitRows}); use fewer shards or a smaller run.commit_rows in ${study.file}`,
      );
  }
}

/**
 * The `hsm extract --shard K/N` command of every shard of every model the
 * study runs (imported models need none), and the `hsm merge` that joins them
 * into the store `hsm study` then finds complete. Given the bank's count of
 * main-forward rows, a count of shards that would leave one empty is refused
 * ({@link checkShardsFilled}).
 * @example studyShardCommands(study, 4)[0].extract[1] // "hsm extract --model-dir … --shard 1/4"
 */
export function studyShardCommands(study: Study, n: number, mainRows?: number): ShardCommands[] {
  if (!Number.isInteger(n) || n < 1)
    throw new RangeError(`Expected a positive integer for the shard count but received ${n}`);
  if (mainRows !== undefined) checkShardsFilled(study, n, mainRows);
  return study.models
    .filter((m) => m.modelDir !== undefined)
    .map((m) => {
      const shardDir = (k: number) => join(study.outputs, SHARDS_FOLDER, pathStem(m.name), `${k}-of-${n}`);
      const options = [
        ...(study.run.batchSize ? ["--batch-size", String(study.run.batchSize)] : []),
        ...(study.run.device ? ["--device", study.run.device] : []),
        ...(study.run.threads ? ["--threads", String(study.run.threads)] : []),
        // The store records its commit block, and the study's own run resumes only a store cut in its blocks.
        ...(study.run.commitRows ? ["--commit-rows", String(study.run.commitRows)] : []),
      ];
      const extract = Array.from({ length: n }, (_, k) =>
        [
          "hsm",
          "extract",
          "--model-dir",
          m.modelDir!,
          "--bank",
          study.bank,
          "--out",
          shardDir(k),
          "--model",
          m.name,
          ...options,
          "--shard",
          `${k}/${n}`,
        ]
          .map(shellWord)
          .join(" "),
      );
      const merge = [
        "hsm",
        "merge",
        modelPaths(study.outputs, m.name).store,
        ...Array.from({ length: n }, (_, k) => shardDir(k)),
      ]
        .map(shellWord)
        .join(" ");
      return { model: m.name, extract, merge };
    });
}
