import type { Command } from "commander";

import { adoptStore } from "../../index.js";
import { intOption } from "../options.js";

export function adoptCommand(program: Command): void {
  program
    .command("adopt")
    .summary("give a store written by another tool a conforming index.json")
    .description(
      "Write a conforming index.json for a folder of L###.npy files written by another tool: the rows are the bank's " +
        "main-forward queries in bank order (or the row order of the folder's own index.json), every file is hashed, and " +
        "an existing index.json is kept as index.orig.json. Afterwards every command treats the store as its own.",
    )
    .argument("<store>", "folder of L###.npy files")
    .requiredOption("--bank <file>", "the query bank the store was made from")
    .option("--model <name>", "model name to record (default: the foreign manifest's, else the folder's name)")
    .option("-j, --jobs <n>", "files hashed at once (default: the core count)", intOption("--jobs", 1))
    .action(async (store: string, opts: { bank: string; model?: string; jobs?: number }) => {
      const m = await adoptStore(store, { bank: opts.bank, model: opts.model, concurrency: opts.jobs });
      process.stdout.write(
        `${store}: adopted — ${m.query_ids.length} rows × ${m.d_model}, layers ${m.layers.join(", ")}; index.json written\n`,
      );
    });
}
