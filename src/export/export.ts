/** `hsm export`: scored rows to Every Eval Ever or Microsoft Foundry files. */
import { basename } from "node:path";

import { readBank } from "../bank/bank.js";
import { UNNAMED } from "../defaults.js";
import { InternalError, ScoredError } from "../errors.js";
import { LABELS } from "../score/labels.js";
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

/** The scored rows, each with its line in the file. */
async function readScored(file: string): Promise<{ rows: ScoredRow[]; lines: number[] }> {
  const rows: ScoredRow[] = [];
  const lines: number[] = [];
  for await (const { value: r, line } of jsonLines(file, (l, problem, cause) => new ScoredError(file, l, undefined, problem, { cause }))) {
    for (const key of ["query_id", "raw_response", "label", "condition_family", "fact_id"]) {
      if (typeof r[key] !== "string") throw new ScoredError(file, line, key, `expected a string but received ${JSON.stringify(r[key]) ?? "nothing"}`);
    }
    if (!(LABELS as readonly string[]).includes(r.label as string)) throw new ScoredError(file, line, "label", `${JSON.stringify(r.label)} is not one of ${LABELS.join(", ")}`);
    rows.push({ span: "", flags: [], matched_alias: null, scorer: "unknown", needs_manual_review: false, ...r } as unknown as ScoredRow);
    lines.push(line);
  }
  return { rows, lines };
}

export async function exportScored(o: ExportOptions): Promise<{ files: string[]; rows: number }> {
  const { rows, lines } = await readScored(o.scored);
  const bankRows = await readBank(o.bank);
  const bank = new Map(bankRows.map((r) => [r.query_id, r]));
  const unknown = rows.findIndex((r) => !bank.has(r.query_id));
  if (unknown >= 0) throw new ScoredError(o.scored, lines[unknown]!, "query_id", `"${rows[unknown]!.query_id}" is not in the bank ${o.bank}`);
  if (o.format === "foundry") {
    await writeFoundry(o.out, rows, bank, o.messages);
    return { files: [o.out], rows: rows.length };
  }
  const model = rows[0]?.model ?? UNNAMED;
  const modelId = o.modelId ?? (String(model).includes("/") ? String(model) : `${o.developer ?? UNNAMED}/${model}`);
  const benchmark = o.benchmark ?? basename(o.bank).replace(/\.jsonl?$/, "");
  const id = {
    benchmark,
    modelId,
    developer: o.developer ?? modelId.split("/")[0] ?? UNNAMED,
    organization: o.organization ?? UNNAMED,
    evaluationId: `${benchmark}/${modelId}/${Math.floor(Date.now() / 1000)}`,
  };
  const written = await writeEee(o.out, rows, bank, id);
  // Every record is checked against the published schema before anyone else reads it.
  const schema = instanceSchema();
  for (const [i, record] of written.records.entries()) {
    const errors = validate(record, schema);
    // The records are hsm's own making: one that fails the schema is a bug in hsm.
    if (errors.length) throw new InternalError(`${written.samples}:${i + 1}: not valid against ${String(schema.version)}: ${errors.map((e) => `${e.path} ${e.message}`).join("; ")}`);
  }
  return { files: [written.aggregate, written.samples], rows: rows.length };
}
