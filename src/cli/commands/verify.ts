/**
 * `hsm verify`. Light on purpose: the command line (src/cli/main.ts) loads
 * only this command module for it, without the library's entry point, and the
 * store code is imported when the command runs, so start-up adds as little as
 * possible to the hashing.
 */
import { join } from "node:path";

import type { Command } from "commander";

import type { VerifyReport } from "../../index.js";
import { intOption } from "../options.js";

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
      const { verifyStoreFolder } = await import("../../pipeline/verify.js");
      const { report, seconds } = await verifyStoreFolder(store, { concurrency: opts.jobs, bank: opts.bank });
      process.exitCode = printVerifyReport(report, seconds, Boolean(opts.json));
    });
}

function out(text: string): void {
  process.stdout.write(text.endsWith("\n") ? text : `${text}\n`);
}

function mb(bytes: number): string {
  return `${(bytes / 1e6).toFixed(1)} MB`;
}

/** Prints a verify report the way a person reads it (or as JSON); returns the exit code. */
function printVerifyReport(report: VerifyReport, seconds: number, json: boolean): number {
  if (json) {
    out(JSON.stringify({ ...report, seconds: Number(seconds.toFixed(3)) }, null, 2));
    return report.ok ? 0 : 1;
  }
  for (const p of report.problems) out(`${join(report.store, p.file)}: ${p.message}`);
  for (const n of report.notes) out(`${join(report.store, n.file)}: note: ${n.message}`);
  const bytes = report.files.reduce((s, f) => s + (f.bytes ?? 0), 0);
  const c = report.self_check;
  if (c) {
    const worst =
      c.status === "off"
        ? ""
        : `, worst deviation ${c.worst_rel_dev === null ? "non-finite" : c.worst_rel_dev.toExponential(2)} of the row's largest value (layer ${c.worst_layer})`;
    out(
      `${report.store}: self-check ${c.status === "warn" || c.status === "fail" ? "FAILED" : c.status}: ${c.rows} rows re-run alone at batch 1${worst}`,
    );
  }
  if (report.ok) {
    out(
      `${report.store}: OK — ${report.files.length} files, ${report.rows} rows, complete; ${mb(bytes)} hashed in ${seconds.toFixed(2)} s`,
    );
    return 0;
  }
  const n = report.problems.length;
  out(`${report.store}: ${n} problem${n === 1 ? "" : "s"}; do not trust this store`);
  return 1;
}
