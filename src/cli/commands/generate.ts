import type { Command } from "commander";

import { DEFAULT_GENERATE_CHECK_ROWS, MAX_NEW_TOKENS, MAX_NEW_TOKENS_LIMIT, MAX_PROMPT_LEN } from "../../defaults.js";
import { createProgress, generate } from "../../index.js";
import { intOption, modelRunOptions, type ModelRunFlags } from "../options.js";
import { out } from "../print.js";

async function action(opts: ModelRunFlags & { out: string; maxNewTokens: number; selfCheck: number }): Promise<void> {
  const { quiet, ...rest } = opts;
  const progress = createProgress("generate", 0, { quiet });
  const log = (m: string, level?: string) => (level === "warn" || !quiet) && process.stderr.write(`hsm: ${m}\n`);
  const r = await generate({ ...rest, log, onProgress: (d, t) => progress.update(d, t) });
  progress.end(`generate: ${r.written} queries in ${r.seconds.toFixed(1)} s`);
  out(`${opts.out}: ${r.written} generated${r.skipped ? `, ${r.skipped} already there` : ""}`);
  if (r.failed)
    process.stderr.write(
      `hsm: warning: ${r.failed} queries failed and carry an "error" field instead of an answer; run hsm generate again to retry them\n`,
    );
}

export function generateCommand(program: Command): void {
  const cmd = program
    .command("generate")
    .summary("greedy answers of a model to every query of a bank")
    .description(
      `Greedy decoding (num_beams 1, max_new_tokens ${MAX_NEW_TOKENS}) of every bank query with the benchmark's prompts, left truncation ` +
        `to ${MAX_PROMPT_LEN} tokens and left padding, batched by length; with the KV cache when the model has past_key_values inputs. ` +
        "Writes one JSON line per query (query_id, fact_id, condition_family, model, model_sha256, prompt, raw_response, " +
        "generated_tokens, finish_reason). A rerun skips the query_ids already written, and refuses a file another model, " +
        "--model name, bank or --max-new-tokens wrote.",
    );
  modelRunOptions(cmd, {
    flags: "--out <path>",
    description: "generations JSONL, e.g. outputs/evaluation/<model>.jsonl",
  })
    .option(
      "--max-new-tokens <n>",
      "tokens to generate at most",
      intOption("--max-new-tokens", 1, MAX_NEW_TOKENS_LIMIT),
      MAX_NEW_TOKENS,
    )
    .option(
      "--self-check <n>",
      "answers regenerated alone at batch 1 that must not change, reported in <out>.check.json (0: off)",
      intOption("--self-check", 0),
      DEFAULT_GENERATE_CHECK_ROWS,
    )
    .option("-q, --quiet", "no progress on stderr")
    .action(action);
}
