/**
 * `hsm export`: scored rows, checked and joined with the bank, written in one of
 * the registered formats (src/export/formats/registry.ts: Every Eval Ever,
 * Microsoft Foundry).
 */
import { readBank } from "../bank/bank.js";
import { ScoredError, UsageError } from "../errors.js";
import { LABELS } from "../score/labels.js";
import { refuseInputAsOutput } from "../util/fs.js";
import { jsonLines } from "../util/jsonl.js";
import { nameProblem } from "../util/stem.js";
import type { ExportFormatRegistry, ExportSettings, ScoredRow } from "./formats/format.js";
import { EXPORT_FORMATS } from "./formats/registry.js";

export interface ExportOptions extends ExportSettings {
  /** The name of a registered format (built in: `eee`, `foundry`). */
  format: string;
}

const stringOrNull = (v: unknown) => v === null || typeof v === "string";
const booleanOrNull = (v: unknown) => v === null || typeof v === "boolean";

/**
 * Fields a scored row may leave out, each with what it must be where present:
 * the scorer's, then the bank's fields carried onto the row (formats.md#scored-fields),
 * which the Every Eval Ever metadata writes as strings.
 */
const OPTIONAL_FIELDS: [string, string, (v: unknown) => boolean][] = [
  ["model", "a string", (v) => typeof v === "string"],
  ["span", "a string", (v) => typeof v === "string"],
  ["flags", "an array of strings", (v) => Array.isArray(v) && v.every((f) => typeof f === "string")],
  ["matched_alias", "a string or null", stringOrNull],
  ["scorer", "a string", (v) => typeof v === "string"],
  ["needs_manual_review", "true or false", (v) => typeof v === "boolean"],
  ...["relation", "language", "target_slot", "answer_type", "answer_granularity"].map(
    (key): [string, string, (v: unknown) => boolean] => [key, "a string or null", stringOrNull],
  ),
  ["use_for_main_forward", "true or false", (v) => typeof v === "boolean"],
  ...["answer_in_subject_surface", "use_for_reverse_analysis", "use_for_recognition_analysis"].map(
    (key): [string, string, (v: unknown) => boolean] => [key, "true, false or null", booleanOrNull],
  ),
];

/**
 * The scored rows, each with its line in the file. A query scored twice is
 * refused, and so is a row naming another `model` than the rows before it: an
 * export is one model's answers (a row that names none is taken as that model's).
 */
async function readScored(file: string): Promise<{ rows: ScoredRow[]; lines: number[] }> {
  const rows: ScoredRow[] = [];
  const lines: number[] = [];
  const firstLine = new Map<string, number>();
  let model: { name: string; line: number } | undefined;
  for await (const { value: r, line } of jsonLines(
    file,
    (l, problem, cause) => new ScoredError(file, l, undefined, problem, { cause }),
  )) {
    const received = (key: string) => JSON.stringify(r[key]) ?? "nothing";
    for (const key of ["query_id", "raw_response", "label", "condition_family", "fact_id"]) {
      if (typeof r[key] !== "string")
        throw new ScoredError(file, line, key, `expected a string but received ${received(key)}`);
    }
    if (!(LABELS as readonly string[]).includes(r.label as string))
      throw new ScoredError(file, line, "label", `${JSON.stringify(r.label)} is not one of ${LABELS.join(", ")}`);
    for (const [key, what, ok] of OPTIONAL_FIELDS) {
      if (key in r && !ok(r[key]))
        throw new ScoredError(file, line, key, `expected ${what} but received ${received(key)}`);
    }
    const id = r.query_id as string;
    const first = firstLine.get(id);
    if (first !== undefined)
      throw new ScoredError(file, line, "query_id", `"${id}" is scored twice (first on line ${first})`);
    firstLine.set(id, line);
    if (typeof r.model === "string") {
      const badName = nameProblem(r.model);
      if (badName) throw new ScoredError(file, line, "model", badName);
      model ??= { name: r.model, line };
      if (r.model !== model.name) {
        const problem = `expected ${JSON.stringify(model.name)} (the model of line ${model.line}) but received ${received("model")}`;
        throw new ScoredError(file, line, "model", `${problem}: an export holds one model's answers`);
      }
    }
    rows.push({
      span: "",
      flags: [],
      matched_alias: null,
      scorer: "unknown",
      needs_manual_review: false,
      ...r,
    } as unknown as ScoredRow);
    lines.push(line);
  }
  return { rows, lines };
}

/**
 * Reads and checks the scored rows, joins them with the bank, and writes them in
 * the format asked for; `unchanged` is true when the files were already there
 * as they would be written (with `replace`), and absent otherwise.
 */
export async function exportScored(
  o: ExportOptions,
  registry: ExportFormatRegistry = EXPORT_FORMATS,
): Promise<{ files: string[]; rows: number; unchanged?: boolean }> {
  const format = registry.find((f) => f.name === o.format);
  if (!format) {
    const names = registry.map((f) => f.name);
    const expected = `${names.slice(0, -1).join(", ")} or ${names.at(-1)}`;
    throw new UsageError(`Expected --format ${expected} but received "${o.format}"`);
  }
  await refuseInputAsOutput({ name: "--out", path: o.out }, [
    { name: "--scored", path: o.scored },
    { name: "--bank", path: o.bank },
  ]);
  const { rows, lines } = await readScored(o.scored);
  const bankRows = await readBank(o.bank);
  const bank = new Map(bankRows.map((r) => [r.query_id, r]));
  for (const [i, row] of rows.entries()) {
    const b = bank.get(row.query_id);
    if (!b) throw new ScoredError(o.scored, lines[i]!, "query_id", `"${row.query_id}" is not in the bank ${o.bank}`);
    // Exports group and label by these: they are the bank row's, and a row that says otherwise was scored elsewhere.
    for (const key of ["condition_family", "fact_id"] as const) {
      if (row[key] !== b[key]) {
        const problem = `expected ${JSON.stringify(b[key])} (the bank's, ${o.bank}:${b.line}) but received ${JSON.stringify(row[key])}`;
        throw new ScoredError(o.scored, lines[i]!, key, problem);
      }
    }
  }
  const { format: _, ...settings } = o;
  const written = await format.write({ rows, bank, settings });
  if (Array.isArray(written)) return { files: written, rows: rows.length };
  // Said only when true: an export that wrote its files reads as it always has.
  return { files: written.files, rows: rows.length, ...(written.unchanged ? { unchanged: true } : {}) };
}
