import type { Command } from "commander";

import { checkBank } from "../../index.js";
import { out } from "../print.js";

export function checkBankCommand(program: Command): void {
  program
    .command("check-bank")
    .summary("validate a query bank and summarize it")
    .description(
      "Validate a query bank (JSONL, one query per line) and summarize it. A bad line is reported with its file, line number and field.",
    )
    .argument("<bank>", "bank JSONL file")
    .action(async (bank: string) => {
      const s = await checkBank(bank);
      out(`${bank}: ${s.rows} rows, ${s.mainForward} main-forward, ${s.facts} facts`);
      for (const [family, n] of Object.entries(s.families)) out(`  ${family.padEnd(16)} ${n}`);
    });
}
