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
import { readFileSync } from "node:fs";
import { basename, dirname, join } from "node:path";
import { fileURLToPath } from "node:url";

import type { BankRow } from "../../bank/bank.js";
import { ANCHOR_TEMPLATE, buildPrompt, PERTURBED_TEMPLATE } from "../../bank/prompt.js";
import { MAX_NEW_TOKENS, MAX_PROMPT_LEN, UNNAMED } from "../../defaults.js";
import { InternalError } from "../../errors.js";
import { LABELS } from "../../score/labels.js";
import { fileError } from "../../util/fs.js";
import { pathStem } from "../../util/stem.js";
import { VERSION } from "../../version.js";
import { validate, type Schema } from "../validate.js";
import { writeExportFile, type ExportFormat, type ExportInput, type ScoredRow } from "./format.js";

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
        `the instance-level schema of this installation, ${p}, is not valid JSON (${(err as Error).message}); reinstall hsm`,
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
  evaluationId: string;
}

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
    evaluation_id: id.evaluationId,
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
    evaluation_id: id.evaluationId,
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

/** Writes the aggregate record and its samples; returns their paths. */
export async function writeEee(
  outDir: string,
  rows: ScoredRow[],
  bank: Map<string, BankRow>,
  id: ExportIdentity,
): Promise<{ aggregate: string; samples: string; records: Record<string, unknown>[] }> {
  const safe = (s: string) => s.replace(/[^A-Za-z0-9._-]+/g, "_");
  // Each folder a path stem: no name reaches outside outDir, and two names never share a folder.
  const model = id.modelId.split("/").at(-1)!;
  const dir = join(
    outDir,
    "data",
    pathStem(id.benchmark, "benchmark"),
    pathStem(id.developer, "developer"),
    pathStem(model),
  );
  const stem = safe(id.evaluationId);
  const records = rows.map((r) => instanceRecord(r, bank.get(r.query_id)!, id));
  const samplesText = records.map((r) => JSON.stringify(r)).join("\n") + "\n";
  const samplesPath = join(dir, `${stem}_samples.jsonl`);
  await writeExportFile(samplesPath, samplesText);
  const aggregate = aggregateRecord(rows, id, {
    path: `${stem}_samples.jsonl`,
    sha256: sha256(samplesText),
    rows: records.length,
  });
  const aggregatePath = join(dir, `${stem}.json`);
  await writeExportFile(aggregatePath, JSON.stringify(aggregate, null, 2) + "\n");
  return { aggregate: aggregatePath, samples: samplesPath, records };
}

/** Who and what was evaluated: from the settings, else the rows and the bank file; the id ends in the time. */
function identity(input: ExportInput): ExportIdentity {
  const o = input.settings;
  const model = input.rows[0]?.model ?? UNNAMED;
  const modelId = o.modelId ?? (String(model).includes("/") ? String(model) : `${o.developer ?? UNNAMED}/${model}`);
  const benchmark = o.benchmark ?? basename(o.bank).replace(/\.jsonl?$/, "");
  return {
    benchmark,
    modelId,
    developer: o.developer ?? modelId.split("/")[0] ?? UNNAMED,
    organization: o.organization ?? UNNAMED,
    evaluationId: `${benchmark}/${modelId}/${Math.floor(Date.now() / 1000)}`,
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
    const written = await writeEee(input.settings.out, input.rows, input.bank, identity(input));
    const schema = instanceSchema();
    for (const [i, record] of written.records.entries()) {
      const errors = validate(record, schema);
      // The records are hsm's own making: one that fails the schema is a bug in hsm.
      if (errors.length) {
        const problems = errors.map((e) => `${e.path} ${e.message}`).join("; ");
        const where = `${written.samples}:${i + 1}`;
        throw new InternalError(`${where}: not valid against ${String(schema.version)}: ${problems}`);
      }
    }
    return [written.aggregate, written.samples];
  },
};
