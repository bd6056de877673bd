import type { Command } from "commander";

import { verifyStoreFolder } from "../../index.js";
import { intOption } from "../options.js";
import { printVerifyReport } from "../print.js";

export function verifyCommand(program: Command): void {
  program
    .command("verify")
    .summary("check a hidden-state store before trusting it")
    .description(
      "Check a hidden-state store before trusting it: the manifest's fields, that every listed file is a plain " +
        "L###.npy inside the store (nothing outside it is ever opened), each .npy header against the manifest " +
        "and the file size, and every file's sha256 (files hashed in parallel) with its non-finite count and " +
        "largest finite magnitude.",
    )
    .addHelpText("after", "\nExit status: 0 when everything holds, 1 with one line per problem, 2 on a usage error.")
    .argument("<store>", "store folder (holding index.json and L###.npy)")
    .option("--json", "print a machine-readable report")
    .option("-j, --jobs <n>", "files hashed at once (default: the core count)", intOption("--jobs", 1))
    .option("--bank <file>", "query bank: a store from another tool has its rows checked against it")
    .action(async (store: string, opts: { json?: boolean; jobs?: number; bank?: string }) => {
      const { report, seconds } = await verifyStoreFolder(store, { concurrency: opts.jobs, bank: opts.bank });
      process.exitCode = printVerifyReport(report, seconds, Boolean(opts.json));
    });
}
