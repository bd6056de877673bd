import type { Command } from "commander";

import { exportScored, type ExportOptions } from "../../index.js";
import { choiceOption } from "../options.js";
import { out } from "../print.js";

async function action(opts: ExportOptions): Promise<void> {
  const r = await exportScored(opts);
  out(`${opts.format}: ${r.rows} rows → ${r.files.join(", ")}`);
}

export function exportCommand(program: Command): void {
  program
    .command("export")
    .summary("write scored rows as Every Eval Ever or Microsoft Foundry files")
    .description(
      "Every Eval Ever (--format eee): an aggregate record (accuracy per condition family, decoding settings, and a pointer " +
        "to the samples file with its sha256 and row count) beside instance-level samples (schema instance_level_eval_0.3.0, " +
        "every record validated), under OUT/data/<benchmark>/<developer>/<model>/. Foundry (--format foundry): JSONL with " +
        "query, response and ground_truth, or --messages for the messages form.",
    )
    .requiredOption("--format <format>", "eee or foundry", choiceOption("--format", ["eee", "foundry"] as const))
    .requiredOption("--scored <file>", "scored JSONL")
    .requiredOption("--bank <file>", "query bank JSONL (prompts and gold answers)")
    .requiredOption("--out <path>", "folder (eee) or JSONL file (foundry)")
    .option("--model-id <id>", "model id in HuggingFace form, e.g. meta-llama/Llama-3.1-8B")
    .option("--developer <name>", "the model's developer")
    .option("--organization <name>", "who ran the evaluation")
    .option("--benchmark <name>", "benchmark name (default: the bank file's name)")
    .option("--messages", "foundry: messages form")
    .action(action);
}
