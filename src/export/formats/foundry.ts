/** Microsoft Foundry evaluation JSONL: query, response and ground_truth per row, or messages and ground_truth. */
import type { BankRow } from "../../bank/bank.js";
import { buildPrompt } from "../../bank/prompt.js";
import { holdsText, writeExportFile, type ExportFormat, type ScoredRow } from "./format.js";

/** One line: the prompt and the model's response (as a query/response pair or as messages), the first gold answer. */
function foundryLine(row: ScoredRow, bank: BankRow, messages = false): Record<string, unknown> {
  const prompt = buildPrompt(bank);
  const truth = bank.answers[0] ?? "";
  const extra = { query_id: row.query_id, condition_family: row.condition_family, label: row.label };
  if (messages) {
    const turns = [
      { role: "user", content: prompt },
      { role: "assistant", content: row.raw_response },
    ];
    return { messages: turns, ground_truth: truth, ...extra };
  }
  return { query: prompt, response: row.raw_response, ground_truth: truth, ...extra };
}

/** The Foundry lines of every row, "\n" after each (no rows: an empty file). */
function foundryText(rows: ScoredRow[], bank: Map<string, BankRow>, messages = false): string {
  return rows.map((r) => `${JSON.stringify(foundryLine(r, bank.get(r.query_id)!, messages))}\n`).join("");
}

export const FOUNDRY: ExportFormat = {
  name: "foundry",
  title: "Microsoft Foundry",
  description: "JSONL with query, response and ground_truth, or --messages for the messages form.",
  out: "JSONL file",
  async write({ rows, bank, settings }) {
    const text = foundryText(rows, bank, settings.messages);
    const unchanged = Boolean(settings.replace) && (await holdsText(settings.out, text));
    if (!unchanged) await writeExportFile(settings.out, text);
    return { files: [settings.out], unchanged };
  },
};
