import type { Command } from "commander";

import { DEFAULT_BACKEND, DEFAULT_BOOTSTRAP, DEFAULT_SEED, MAX_BOOTSTRAP, MAX_SEED } from "../../defaults.js";
import { writeReport, BACKENDS, type BackendName } from "../../index.js";
import { choiceOption, intOption, wordList } from "../options.js";
import { out } from "../print.js";

interface ReportFlags {
  out?: string;
  bootstrap: number;
  seed: number;
  backend: BackendName;
  verify: boolean;
  quiet?: boolean;
}

async function action(outputs: string, opts: ReportFlags): Promise<void> {
  const log = opts.quiet ? undefined : (message: string) => process.stderr.write(`report: ${message}\n`);
  const r = await writeReport(outputs, {
    out: opts.out,
    replicates: opts.bootstrap,
    seed: opts.seed,
    backend: opts.backend,
    verify: opts.verify,
    log,
    // Said even with --quiet: the report holds fewer models than the outputs root.
    warn: (message) => process.stderr.write(`report: ${message}\n`),
  });
  out(
    `${r.path}: ${r.models.length} models (${r.models.join(", ")}), ${(r.bytes / 1e6).toFixed(2)} MB (${(r.firstViewBytes / 1e6).toFixed(2)} MB read at first view)`,
  );
}

export function reportCommand(program: Command): void {
  program
    .command("report")
    .summary("one self-contained HTML report of every model of an outputs root")
    .description(
      "Writes one HTML file (inline styles, script and data; no network; opens from file://) for every model under OUTPUTS: " +
        "accuracy per family with Wilson intervals and the label mix, ISS and KTS by normalized depth with bootstrap bands, " +
        "the paired comparison of any two models, a per-fact drill-down of every model's answers, and provenance (checksums, " +
        "verify status, versions, settings). docs/report.md describes each part.",
    )
    .argument("<outputs>", "outputs root (as hsm run and hsm study write it)")
    .option("--out <file>", "the HTML file, not one of the files it reads (default: <outputs>/report.html)")
    .option(
      "--bootstrap <b>",
      "paired bootstrap replicates",
      intOption("--bootstrap", 1, MAX_BOOTSTRAP),
      DEFAULT_BOOTSTRAP,
    )
    .option("--seed <s>", "paired bootstrap seed", intOption("--seed", 0, MAX_SEED), DEFAULT_SEED)
    .option(
      "--backend <name>",
      `kernels for the per-row values: ${wordList(BACKENDS, "or")}`,
      choiceOption("--backend", BACKENDS),
      DEFAULT_BACKEND,
    )
    .option("--no-verify", "do not hash the stores for the provenance section")
    .option("-q, --quiet", "no progress on stderr")
    .action(action);
}
