/** `hsm check-bank` as a library call. */
import { readBank, summarizeBank } from "../bank/bank.js";

export type BankSummary = ReturnType<typeof summarizeBank>;

/** Reads and validates a whole bank (a bad line throws a BankError naming file, line and field), then counts it. */
export async function checkBank(file: string): Promise<BankSummary> {
  return summarizeBank(await readBank(file));
}
