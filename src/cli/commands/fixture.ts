import type { Command } from "commander";

import { DEFAULT_LAYER_RULE } from "../../defaults.js";
import { createProgress, writeFixture, type FixtureOptions } from "../../index.js";
import { UsageError } from "../../errors.js";
import { intOption } from "../options.js";
import { out } from "../print.js";

async function action(
  dir: string,
  opts: FixtureOptions & { bench?: boolean; full?: boolean; quiet?: boolean },
): Promise<void> {
  const { bench, full, quiet, ...given } = opts;
  if (bench && full) throw new UsageError("Expected one of --bench and --full but received both");
  const progress = createProgress("fixture", 0, { quiet, unit: "layer rows" });
  let total = 0;
  const onProgress = (_phase: string, done: number, all: number) => {
    total = all;
    progress.update(done, all);
  };
  const t0 = performance.now();
  const result = await writeFixture(dir, { ...given, preset: full ? "full" : bench ? "bench" : undefined, onProgress });
  progress.end(`fixture: ${total} layer rows written in ${((performance.now() - t0) / 1000).toFixed(1)} s`);
  const m = result.manifest;
  out(
    `${dir}: bank.jsonl (${result.rows} rows, ${result.mainForwardRows} main-forward), store/ (layers ${m.layers.join(", ")} ` +
      `of ${m.num_layers}, d = ${m.d_model}), scored.jsonl`,
  );
}

export function fixtureCommand(program: Command): void {
  program
    .command("fixture")
    .summary("write a synthetic bank, store and scored file with planted structure")
    .description(
      "Write a synthetic fixture into a new folder: bank.jsonl, a complete store/ and scored.jsonl, with " +
        "planted structure (fact identity that strengthens with depth, perturbation families that weaken " +
        "it by different amounts, correctness planted along one direction). Small by default; --bench " +
        "writes the benchmark scale (44,416 bank rows, 39,260 stored rows, d = 1024, 8 layers, about 640 MB); " +
        "--full the same rows at the real stores' size (d = 4608, L = 46: 28 layers, about 10 GB).",
    )
    .argument("<out>", "folder to create")
    .option(
      "--facts <n>",
      "number of facts (6 stored rows each, 7 for those given a second paraphrase)",
      intOption("--facts", 2),
    )
    .option("--d <n>", "hidden size", intOption("--d", 2))
    .option(
      "--layers-total <n>",
      `decoder blocks L; layers with ${DEFAULT_LAYER_RULE} are stored`,
      intOption("--layers-total", 1),
    )
    .option("--seed <n>", "random seed", intOption("--seed", 0))
    .option("--extra-rows <n>", "bank rows outside the main forward pass", intOption("--extra-rows", 0))
    .option(
      "--extra-main-rows <n>",
      "stored rows beyond 6 per fact: a second paraphrase for this many facts",
      intOption("--extra-main-rows", 0),
    )
    .option("--nonfinite-rows <n>", "rows of the last layer given an inf value", intOption("--nonfinite-rows", 0))
    .option("--bench", "benchmark scale (flags above still override)")
    .option("--full", "full scale: d = 4608, 28 of 46 layers, about 10 GB (flags above still override)")
    .option("-q, --quiet", "no progress on stderr")
    .action(action);
}
