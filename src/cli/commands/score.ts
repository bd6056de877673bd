import type { Command } from "commander";

import { scoreFile } from "../../index.js";
import { out } from "../print.js";

async function action(opts: { bank: string; generations: string; out: string; allowMissing?: boolean }): Promise<void> {
  const s = await scoreFile(opts);
  out(
    `${opts.out}: ${s.rows} rows — ${Object.entries(s.labels)
      .map(([l, n]) => `${l} ${n}`)
      .join(", ")}; ${s.needsReview} to review`,
  );
  if (s.missing || s.unknown)
    process.stderr.write(
      `hsm: warning: ${s.missing} bank queries without a generation, ${s.unknown} generations for unknown queries (skipped)\n`,
    );
}

export function scoreCommand(program: Command): void {
  program
    .command("score")
    .summary("label generations against the bank's answers")
    .description(
      "Score each generation against the bank's gold answer and aliases (rules in docs/scoring.md): label correct, " +
        "incorrect, ambiguous, abstain or unparseable, with the span, the alias matched, the rule that decided, flags and " +
        "whether a person should look. Writes one scored row per generation, in bank order.",
    )
    .requiredOption("--bank <file>", "query bank JSONL")
    .requiredOption("--generations <file>", "generations JSONL")
    .requiredOption("--out <file>", "scored JSONL, e.g. outputs/evaluation/<model>.scored.jsonl")
    .option("--allow-missing", "skip generations of unknown queries and queries without a generation, counting them")
    .action(action);
}
