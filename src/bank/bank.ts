/**
 * The query bank: JSONL, one query per line, in bank order.
 * Read as a stream and validated line by line; the first bad line stops the read
 * with a {@link BankError} naming the file, line and field.
 */
import { BankError } from "../errors.js";
import { illFormedText, jsonLines } from "../util/jsonl.js";

export interface BankRow {
  query_id: string;
  fact_id: string;
  condition_family: string;
  query: string;
  relation?: string;
  language?: string;
  target_slot?: string;
  answer_type?: string;
  answer_granularity?: string;
  answer_in_subject_surface?: boolean;
  use_for_main_forward: boolean;
  use_for_reverse_analysis?: boolean;
  use_for_recognition_analysis?: boolean;
  answers: string[];
  /** 1-based line in the bank file. */
  line: number;
}

const REQUIRED_STRINGS = ["query_id", "fact_id", "condition_family", "query"] as const;
const OPTIONAL_STRINGS = ["relation", "language", "target_slot", "answer_type", "answer_granularity"] as const;
const BOOLEANS = [
  "answer_in_subject_surface",
  "use_for_main_forward",
  "use_for_reverse_analysis",
  "use_for_recognition_analysis",
] as const;
const REQUIRED_BOOLEANS = ["use_for_main_forward"] as const;

function typeName(v: unknown): string {
  if (v === null) return "null";
  if (Array.isArray(v)) return "array";
  return typeof v;
}

/** Refuses a string that a JSON escape left ill-formed: the model would read U+FFFD in its place. */
function checkText(s: string, file: string, line: number, field: string): void {
  const problem = illFormedText(s);
  if (problem !== undefined) throw new BankError(file, line, field, problem);
}

/** Validates one parsed line; throws a {@link BankError} for the first problem. */
function validateBankRow(o: Record<string, unknown>, file: string, line: number): BankRow {
  for (const key of REQUIRED_STRINGS) {
    if (!(key in o)) throw new BankError(file, line, key, "is missing");
    if (typeof o[key] !== "string")
      throw new BankError(file, line, key, `expected a string but received ${typeName(o[key])}`);
    if ((o[key] as string).length === 0) throw new BankError(file, line, key, "is empty");
    checkText(o[key] as string, file, line, key);
  }
  for (const key of OPTIONAL_STRINGS) {
    if (!(key in o)) continue;
    if (typeof o[key] !== "string")
      throw new BankError(file, line, key, `expected a string but received ${typeName(o[key])}`);
    checkText(o[key] as string, file, line, key);
  }
  for (const key of BOOLEANS) {
    if (!(key in o)) {
      if ((REQUIRED_BOOLEANS as readonly string[]).includes(key)) throw new BankError(file, line, key, "is missing");
      continue;
    }
    if (typeof o[key] !== "boolean")
      throw new BankError(file, line, key, `expected true or false but received ${JSON.stringify(o[key])}`);
  }
  if ("answers" in o) {
    const a = o.answers;
    if (!Array.isArray(a))
      throw new BankError(file, line, "answers", `expected an array of strings but received ${typeName(a)}`);
    a.forEach((s, i) => {
      if (typeof s !== "string")
        throw new BankError(file, line, `answers[${i}]`, `expected a string but received ${typeName(s)}`);
      checkText(s, file, line, `answers[${i}]`);
    });
  }
  return { ...(o as object), answers: (o.answers as string[] | undefined) ?? [], line } as BankRow;
}

/**
 * Streams a bank, yielding validated rows in order. Throws on the first bad
 * line, including a duplicate `query_id` (naming the line that had it first).
 */
async function* streamBank(file: string): AsyncGenerator<BankRow> {
  const seen = new Map<string, number>();
  for await (const { value, line } of jsonLines(
    file,
    (l, problem, cause) => new BankError(file, l, undefined, problem, { cause }),
  )) {
    const row = validateBankRow(value, file, line);
    const first = seen.get(row.query_id);
    if (first !== undefined)
      throw new BankError(file, line, "query_id", `duplicate "${row.query_id}" (first on line ${first})`);
    seen.set(row.query_id, line);
    yield row;
  }
}

/** Reads and validates a whole bank; nothing downstream starts until every line is known good. */
export async function readBank(file: string): Promise<BankRow[]> {
  const rows: BankRow[] = [];
  for await (const row of streamBank(file)) rows.push(row);
  if (rows.length === 0) throw new BankError(file, 0, undefined, "holds no queries");
  return rows;
}

/** The rows that go through the model for hidden states, in bank order. */
export function mainForwardRows(rows: readonly BankRow[]): BankRow[] {
  return rows.filter((r) => r.use_for_main_forward);
}

/** Counts for a summary line. */
export function summarizeBank(rows: readonly BankRow[]): {
  rows: number;
  mainForward: number;
  facts: number;
  families: Record<string, number>;
} {
  const families: Record<string, number> = {};
  const facts = new Set<string>();
  let mainForward = 0;
  for (const r of rows) {
    facts.add(r.fact_id);
    if (r.use_for_main_forward) {
      mainForward++;
      families[r.condition_family] = (families[r.condition_family] ?? 0) + 1;
    }
  }
  return { rows: rows.length, mainForward, facts: facts.size, families };
}
