/** `hsm export`: scored rows to Every Eval Ever or Microsoft Foundry files. */
import { basename } from "node:path";

import { readBank } from "../bank/bank.js";
import { HsmError } from "../errors.js";
import { LABELS } from "../metrics/labels.js";
import { jsonLines } from "../util/jsonl.js";
import { instanceSchema, writeEee, writeFoundry, type ScoredRow } from "./eee.js";
import { validate } from "./validate.js";

export interface ExportOptions {
  format: "eee" | "foundry";
  scored: string;
  bank: string;
  out: string;
  /** HuggingFace-style model id (developer/name); default: the scored rows' model. */
  modelId?: string;
  developer?: string;
  organization?: string;
  benchmark?: string;
  /** Foundry: the messages form instead of query/response. */
  messages?: boolean;
}

async function readScored(file: string): Promise<ScoredRow[]> {
  const rows: ScoredRow[] = [];
  for await (const { value: r, line } of jsonLines(file, (l, problem) => new HsmError(`${file}${l ? `:${l}` : ""}: ${problem}`))) {
    for (const key of ["query_id", "raw_response", "label", "condition_family", "fact_id"]) {
      if (typeof r[key] !== "string") throw new HsmError(`${file}:${line}: field "${key}": expected a string`);
    }
    if (!(LABELS as readonly string[]).includes(r.label as string)) throw new HsmError(`${file}:${line}: field "label": ${JSON.stringify(r.label)} is not one of ${LABELS.join(", ")}`);
    rows.push({ span: "", flags: [], matched_alias: null, scorer: "unknown", needs_manual_review: false, ...r } as unknown as ScoredRow);
  }
  return rows;
}

export async function exportScored(o: ExportOptions): Promise<{ files: string[]; rows: number }> {
  const rows = await readScored(o.scored);
  const bankRows = await readBank(o.bank);
  const bank = new Map(bankRows.map((r) => [r.query_id, r]));
  const unknown = rows.find((r) => !bank.has(r.query_id));
  if (unknown) throw new HsmError(`${o.scored}: query_id "${unknown.query_id}" is not in the bank ${o.bank}`);
  if (o.format === "foundry") {
    await writeFoundry(o.out, rows, bank, o.messages);
    return { files: [o.out], rows: rows.length };
  }
  const model = rows[0]?.model ?? "unknown";
  const modelId = o.modelId ?? (String(model).includes("/") ? String(model) : `${o.developer ?? "unknown"}/${model}`);
  const benchmark = o.benchmark ?? basename(o.bank).replace(/\.jsonl?$/, "");
  const id = {
    benchmark,
    modelId,
    developer: o.developer ?? modelId.split("/")[0] ?? "unknown",
    organization: o.organization ?? "unknown",
    evaluationId: `${benchmark}/${modelId}/${Math.floor(Date.now() / 1000)}`,
  };
  const written = await writeEee(o.out, rows, bank, id);
  // Every record is checked against the published schema before anyone else reads it.
  const schema = instanceSchema();
  for (const [i, record] of written.records.entries()) {
    const errors = validate(record, schema);
    if (errors.length) throw new HsmError(`${written.samples}:${i + 1}: not valid against ${String(schema.version)}: ${errors.map((e) => `${e.path} ${e.message}`).join("; ")}`);
  }
  return { files: [written.aggregate, written.samples], rows: rows.length };
}
