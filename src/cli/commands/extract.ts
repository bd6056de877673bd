import type { Command } from "commander";

import { DEFAULT_COMMIT_ROWS, DEFAULT_LAYER_RULE, DEFAULT_SELF_CHECK_ROWS } from "../../defaults.js";
import { createProgress, extract } from "../../index.js";
import { intOption, modelRunOptions, type ModelRunFlags } from "../options.js";
import { out } from "../print.js";

interface ExtractFlags extends ModelRunFlags {
  out: string;
  layers: string;
  shard?: string;
  hiddenTensors?: string;
  commitRows: number;
  selfCheck: number;
}

async function action(opts: ExtractFlags): Promise<void> {
  const { layers, quiet, ...rest } = opts;
  const progress = createProgress("extract", 0, { quiet });
  const result = await extract({
    ...rest,
    layerRule: layers,
    onProgress: (done, total) => progress.update(done, total),
    log: (m, level) => (level === "warn" || !quiet) && process.stderr.write(`hsm: ${m}\n`),
  });
  const m = result.manifest;
  if (result.alreadyComplete) {
    out(`${opts.out}: already complete (${m.query_ids.length} rows, layers ${m.layers.join(", ")}); nothing to do`);
    return;
  }
  progress.end(
    `extract: ${result.rowsExtracted} rows in ${result.seconds.toFixed(1)} s (${(result.rowsExtracted / result.seconds).toFixed(1)} rows/s)`,
  );
  out(
    `${opts.out}: ${m.query_ids.length} rows × ${m.d_model}, layers ${m.layers.join(", ")} of ${m.num_layers}, complete`,
  );
  const c = m.self_check;
  if (c && c.status !== "off") {
    const worst = Math.max(...c.layers.map((l) => l.max_rel_dev ?? Infinity));
    out(
      `self-check: ${c.status} (${c.rows} rows re-run alone at batch 1; worst deviation ${worst.toExponential(2)}, tolerance ${c.tolerance.toExponential(2)})`,
    );
  }
}

export function extractCommand(program: Command): void {
  const cmd = program
    .command("extract")
    .summary("store last-token hidden states of a model over a bank")
    .description(
      "Run the model over every main-forward query of the bank and store, for each decoder block l with the layer rule " +
        "true, the hidden state at the last prompt token as float16 L###.npy files with index.json. Progress is committed " +
        "in blocks of rows: a run that is stopped, even with kill -9, continues when started again with the same arguments " +
        "and produces the same bytes. A complete store is left alone. Shards (--shard K/N) extract contiguous row blocks " +
        "into stores of their own, joined with hsm merge.",
    );
  modelRunOptions(cmd, { flags: "--out <path>", description: "store folder to write" })
    .option("--layers <expr>", "layer rule in l and L", DEFAULT_LAYER_RULE)
    .option(
      "--shard <K/N>",
      "extract shard K (0-based) of N into --out; auto or auto/N: K (and N) from SLURM_ARRAY_TASK_ID/_COUNT or JOB_COMPLETION_INDEX",
    )
    .option("--hidden-tensors <map>", "LAYER=TENSOR pairs for graphs hsm cannot read by itself")
    .option(
      "--commit-rows <n>",
      "rows per durable commit and shard boundary; keep it equal across resumes and shards",
      intOption("--commit-rows", 1),
      DEFAULT_COMMIT_ROWS,
    )
    .option(
      "--self-check <n>",
      "rows re-run alone at batch 1 to check the batched states; a difference fails the run (0: off)",
      intOption("--self-check", 0),
      DEFAULT_SELF_CHECK_ROWS,
    )
    .option("-q, --quiet", "no progress on stderr")
    .action(action);
}
