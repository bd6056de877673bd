/**
 * `hsm score`: joins generations with the bank on query_id and writes one
 * scored row per generation, in bank order, with every field of the output
 * schema. Written atomically (see writeFileAtomic), so a failure leaves nothing.
 */
import { dirname } from "node:path";

import { readBank, type BankRow } from "../bank/bank.js";
import { UNNAMED } from "../defaults.js";
import { GenerationsError } from "../errors.js";
import { makeDir, refuseInputAsOutput, writeFileAtomic } from "../util/fs.js";
import { illFormedText, JSONL_LINE_MAX_BYTES, jsonLines } from "../util/jsonl.js";
import { checkName, nameProblem } from "../util/stem.js";
import { scoreResponse, type ScoreResult } from "./scorer.js";

export interface Generation {
  query_id: string;
  raw_response: string;
  model?: string;
  /** `hf:ORG/NAME@COMMIT` where the model was named by hub id. */
  model_source?: string;
  prompt?: string;
  fact_id?: string;
  condition_family?: string;
  generated_tokens?: number;
  finish_reason?: string;
  line: number;
}

/** The generation's strings that its scored row copies. */
const COPIED_STRINGS = ["query_id", "raw_response", "model", "model_source"] as const;

/**
 * Reads a generations JSONL file; `query_id` and `raw_response` are required, duplicates refused, and so is a
 * string the scored row copies that holds a lone surrogate.
 */
export async function readGenerations(file: string): Promise<Map<string, Generation>> {
  const out = new Map<string, Generation>();
  for await (const { value: g, line } of jsonLines(
    file,
    (l, problem, cause) => new GenerationsError(file, l, undefined, problem, { cause }),
  )) {
    if (typeof g.query_id !== "string" || !g.query_id)
      throw new GenerationsError(file, line, "query_id", "is missing or not a string");
    if (typeof g.error === "string" && typeof g.raw_response !== "string") {
      throw new GenerationsError(
        file,
        line,
        "error",
        `generation failed for this query (${g.error}); run hsm generate again with the same --out to retry it`,
      );
    }
    if (typeof g.raw_response !== "string")
      throw new GenerationsError(file, line, "raw_response", "is missing or not a string");
    // Copied onto the scored row, whose `model` is a string.
    if ("model" in g && typeof g.model !== "string")
      throw new GenerationsError(file, line, "model", `expected a string but received ${JSON.stringify(g.model)}`);
    // The strings a scored row copies: a lone surrogate there has no UTF-8 form, and would be repaired downstream.
    for (const key of COPIED_STRINGS) {
      const problem = typeof g[key] === "string" ? illFormedText(g[key]) : undefined;
      if (problem !== undefined) throw new GenerationsError(file, line, key, problem);
    }
    const badName = typeof g.model === "string" ? nameProblem(g.model) : undefined;
    if (badName) throw new GenerationsError(file, line, "model", badName);
    const first = out.get(g.query_id);
    if (first)
      throw new GenerationsError(file, line, "query_id", `duplicate "${g.query_id}" (first on line ${first.line})`);
    out.set(g.query_id, { ...g, line } as unknown as Generation);
  }
  return out;
}

/** The scored row of the output schema, field for field. */
function scoredRow(row: BankRow, g: Generation, model: string, s: ScoreResult): Record<string, unknown> {
  return {
    query_id: row.query_id,
    model: g.model ?? model,
    ...(typeof g.model_source === "string" ? { model_source: g.model_source } : {}),
    fact_id: row.fact_id,
    relation: row.relation ?? null,
    condition_family: row.condition_family,
    language: row.language ?? null,
    target_slot: row.target_slot ?? null,
    answer_type: row.answer_type ?? null,
    answer_granularity: row.answer_granularity ?? null,
    answer_in_subject_surface: row.answer_in_subject_surface ?? null,
    use_for_main_forward: row.use_for_main_forward,
    use_for_reverse_analysis: row.use_for_reverse_analysis ?? null,
    use_for_recognition_analysis: row.use_for_recognition_analysis ?? null,
    raw_response: g.raw_response,
    span: s.span,
    flags: s.flags,
    label: s.label,
    matched_alias: s.matched_alias,
    scorer: s.scorer,
    needs_manual_review: s.needs_manual_review,
  };
}

export interface ScoreOptions {
  bank: string;
  generations: string;
  out: string;
  /** Count generations for unknown queries and queries without generations as warnings instead of stopping. */
  allowMissing?: boolean;
  /** The model name for generations that do not record one (default: "unknown"). */
  model?: string;
}

export interface ScoreSummary {
  rows: number;
  labels: Record<string, number>;
  missing: number;
  unknown: number;
  needsReview: number;
}

export async function scoreFile(o: ScoreOptions): Promise<ScoreSummary> {
  if (o.model !== undefined) checkName(o.model);
  await refuseInputAsOutput({ name: "--out", path: o.out }, [
    { name: "--generations", path: o.generations },
    { name: "--bank", path: o.bank },
  ]);
  const bank = await readBank(o.bank);
  const gens = await readGenerations(o.generations);
  const known = new Set(bank.map((r) => r.query_id));
  const unknown = [...gens.values()].filter((g) => !known.has(g.query_id));
  const missing = bank.filter((r) => !gens.has(r.query_id));
  if (!o.allowMissing) {
    if (unknown.length) {
      throw new GenerationsError(
        o.generations,
        unknown[0]!.line,
        "query_id",
        `"${unknown[0]!.query_id}" is not in the bank ${o.bank} (${unknown.length} such generation(s)); pass --allow-missing to skip them`,
      );
    }
    if (missing.length) {
      throw new GenerationsError(
        o.generations,
        0,
        undefined,
        `has no generation for ${missing.length} of the bank's ${bank.length} queries (first: "${missing[0]!.query_id}", ${o.bank}:${missing[0]!.line}); pass --allow-missing to score the rest`,
      );
    }
  }
  const summary: ScoreSummary = {
    rows: 0,
    labels: {},
    missing: missing.length,
    unknown: unknown.length,
    needsReview: 0,
  };
  const lines: string[] = [];
  for (const row of bank) {
    const g = gens.get(row.query_id);
    if (!g) continue;
    const s = scoreResponse(g.raw_response, row.answers, { truncated: g.finish_reason === "length" });
    const line = JSON.stringify(scoredRow(row, g, o.model ?? UNNAMED, s));
    // A line no reader takes is refused here, before the file is written, by the generation that made it long.
    const bytes = Buffer.byteLength(line, "utf8");
    if (bytes > JSONL_LINE_MAX_BYTES) {
      const size = Buffer.byteLength(g.raw_response, "utf8");
      const problem =
        `is ${size} bytes long, which makes its scored line ${bytes} bytes (with the span), ` +
        `over the ${JSONL_LINE_MAX_BYTES} bytes (1 MiB) a JSONL line may hold`;
      throw new GenerationsError(o.generations, g.line, "raw_response", problem);
    }
    lines.push(line);
    summary.rows++;
    summary.labels[s.label] = (summary.labels[s.label] ?? 0) + 1;
    if (s.needs_manual_review) summary.needsReview++;
  }
  await makeDir(dirname(o.out));
  await writeFileAtomic(o.out, lines.join("\n") + (lines.length ? "\n" : ""));
  return summary;
}
