import type { Command } from "commander";

import { exportScored, type ExportFormatRegistry, type ExportOptions } from "../../index.js";
import { choiceOption, wordList } from "../options.js";
import { out } from "../print.js";
import type { Registries } from "../options.js";

async function action(opts: ExportOptions, registry: ExportFormatRegistry): Promise<void> {
  const r = await exportScored(opts, registry);
  out(`${opts.format}: ${r.rows} rows → ${r.files.join(", ")}`);
}

export function exportCommand(program: Command, { exportFormats: registry }: Registries): void {
  const names = registry.map((f) => f.name);
  program
    .command("export")
    .summary(
      `write scored rows as ${wordList(
        registry.map((f) => f.title),
        "or",
      )} files`,
    )
    .description(registry.map((f) => `${f.title} (--format ${f.name}): ${f.description}`).join(" "))
    .requiredOption("--format <format>", wordList(names, "or"), choiceOption("--format", names))
    .requiredOption("--scored <file>", "scored JSONL")
    .requiredOption("--bank <file>", "query bank JSONL (prompts and gold answers)")
    .requiredOption(
      "--out <path>",
      wordList(
        registry.map((f) => `${f.out} (${f.name})`),
        "or",
      ),
    )
    .option("--model-id <id>", "model id in HuggingFace form, e.g. meta-llama/Llama-3.1-8B")
    .option("--developer <name>", "the model's developer")
    .option("--organization <name>", "who ran the evaluation")
    .option("--benchmark <name>", "benchmark name (default: the bank file's name)")
    .option("--messages", "foundry: messages form")
    .action((opts: ExportOptions) => action(opts, registry));
}
