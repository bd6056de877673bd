/**
 * The command line: parse flags, call the library, print results and errors.
 * Every command is a thin shell over a library function.
 */
import { stat } from "node:fs/promises";
import { availableParallelism } from "node:os";
import { dirname, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";

import { Command, CommanderError } from "commander";

import { HsmError, UsageError } from "../errors.js";
import type { FixtureOptions } from "../fixtures/synthetic.js";
import type { VerifyReport } from "../store/verify.js";
import { createProgress } from "../util/progress.js";
import { VERSION } from "../version.js";
import { intOption } from "./options.js";

// Commands load what they need when they run: `hsm verify` should not pay for
// the expression parser that only the layer rule uses.
const lib = {
  bank: () => import("../bank/bank.js"),
  fixtures: () => import("../fixtures/synthetic.js"),
  layers: () => import("../store/layers.js"),
  kernels: () => import("../kernels/registry.js"),
  verify: () => import("../store/verify.js"),
  extract: () => import("../runner/extract.js"),
  merge: () => import("../store/merge.js"),
  models: () => import("../models/llama.js"),
  metrics: () => import("../metrics/compute.js"),
  generate: () => import("../runner/generate.js"),
  score: () => import("../score/score-file.js"),
  export: () => import("../export/export.js"),
  pipeline: () => import("../pipeline/run.js"),
  report: () => import("../metrics/report.js"),
};

/** Parses `18,20-24` into [18, 20, 21, 22, 23, 24]. */
export function parseLayerList(text: string): number[] {
  const out: number[] = [];
  for (const part of text.split(",").map((p) => p.trim()).filter(Boolean)) {
    const m = /^(\d+)(?:-(\d+))?$/.exec(part);
    if (!m) throw new UsageError(`Expected --layers like 18,20-24 but received "${text}"`);
    const a = Number(m[1]);
    const b = m[2] === undefined ? a : Number(m[2]);
    if (b < a) throw new UsageError(`Expected an ascending range in --layers but received "${part}"`);
    for (let l = a; l <= b; l++) out.push(l);
  }
  return [...new Set(out)].sort((x, y) => x - y);
}

/** The embedded default: a small Llama-style model with a KV cache, and the bundled bank. */
const DEMO_MODEL = { layers: 6, hidden: 64, heads: 4, kvHeads: 2, withPast: true, seed: 20260101 } as const;
const DEMO_BANK = join(dirname(fileURLToPath(import.meta.url)), "..", "..", "data", "demo-bank.jsonl");

/** The options of every command that runs a model over a bank. */
function modelRunOptions(cmd: Command, out: string): Command {
  return cmd
    .requiredOption("--model-dir <dir>", "model folder (model.onnx, config.json, tokenizer.json, tokenizer_config.json)")
    .requiredOption("--bank <file>", "query bank JSONL")
    .requiredOption("--out <path>", out)
    .option("--model <name>", "model name recorded in the outputs (default: the folder's name)")
    .option("--batch-size <n>", "prompts per forward pass", intOption("--batch-size", 1), 16)
    .option("--device <device>", "cpu or cuda", "cpu")
    .option("--threads <n>", "onnxruntime intra-op threads (default: all cores)", intOption("--threads", 1));
}

/** A progress callback per pipeline step, on stderr; each step's result is logged by the pipeline itself. */
function progressFor(quiet?: boolean): ((step: string, done: number, total: number) => void) | undefined {
  if (quiet) return undefined;
  const bars = new Map<string, ReturnType<typeof createProgress>>();
  return (step, done, total) => {
    let bar = bars.get(step);
    if (!bar) bars.set(step, (bar = createProgress(step, total, { unit: step === "generate" ? "queries" : "rows" })));
    bar.update(done, total);
    if (done < total) return;
    bar.end(null);
    bars.delete(step);
  };
}

/** Benchmark scale: the real bank's 44,416 rows, 39,258 main-forward, d = 1024, 8 stored layers. */
export const BENCH_FIXTURE: FixtureOptions = { facts: 6543, d: 1024, layersTotal: 14, extraRows: 5158 };

function out(text: string): void {
  process.stdout.write(text.endsWith("\n") ? text : `${text}\n`);
}

function mb(bytes: number): string {
  return `${(bytes / 1e6).toFixed(1)} MB`;
}

/** The ISS and KTS tables, null reasons, non-converged probes, backend and files written. */
function printMetrics(
  result: import("../metrics/compute.js").MetricsResult,
  files: import("../metrics/report.js").WrittenFiles,
  seconds: number,
  formatTable: typeof import("../metrics/report.js").formatTable,
): void {
  if (result.iss.length) out(formatTable("ISS (fact-macro margin; higher: perturbed questions stay near their anchor)", result.iss.map((r) => ({ layer: r.layer, family: r.family, value: r.iss }))) + "\n");
  if (result.kts.length) {
    out(formatTable("KTS (1: the anchor probe's signal transfers fully; 0: not at all)", result.kts.filter((r) => r.family !== "anchor").map((r) => ({ layer: r.layer, family: r.family, value: r.kts }))) + "\n");
    const nulls = [...new Set(result.kts.filter((r) => r.family !== "anchor" && r.kts === null).map((r) => r.kts_null_reason))];
    for (const reason of nulls) out(`  — ${reason}`);
    for (const r of result.kts.filter((x) => x.family === "anchor" && x.probes_not_converged > 0)) {
      out(`  layer ${r.layer}: ${r.probes_not_converged} probe(s) did not converge in 2,000 iterations`);
    }
  }
  out(`backend: ${result.backend.name} (tfjs ${result.backend.tfjs}, native ${result.backend.simd}); ${seconds.toFixed(1)} s`);
  out(`wrote ${[...files.json, ...files.csv].join(", ")}`);
  out(`plots: ${files.svg.join(", ")}`);
}

/** Prints a verify report the way a person reads it; returns the exit code. */
export function printVerifyReport(report: VerifyReport, seconds: number, json: boolean): number {
  if (json) {
    out(JSON.stringify({ ...report, seconds: Number(seconds.toFixed(3)) }, null, 2));
    return report.ok ? 0 : 1;
  }
  for (const p of report.problems) out(`${join(report.store, p.file)}: ${p.message}`);
  const bytes = report.files.reduce((s, f) => s + (f.bytes ?? 0), 0);
  if (report.ok) {
    out(`${report.store}: OK — ${report.files.length} files, ${report.rows} rows, complete; ${mb(bytes)} hashed in ${seconds.toFixed(2)} s`);
    return 0;
  }
  const n = report.problems.length;
  out(`${report.store}: ${n} problem${n === 1 ? "" : "s"}; do not trust this store`);
  return 1;
}

export function buildProgram(): Command {
  const program = new Command("hsm")
    .description(
      "Hidden-state metrics: run a decoder model (ONNX) over a bank of short factual questions — greedy answers, " +
        "scoring, and the last-token hidden states of its upper layers as float16 .npy stores with a checksummed " +
        "index.json — verify stores, measure ISS and KTS over them, and export to Every Eval Ever and Foundry.",
    )
    .addHelpText(
      "after",
      "\nStart with `hsm demo`. For a model: `hsm run --model-dir DIR --bank BANK` does every step;\n" +
        "generate, score, extract, verify, metrics and export run them one by one.",
    )
    .version(VERSION)
    .showHelpAfterError("(run with --help for usage)")
    .configureHelp({ sortSubcommands: false });

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
    .action(async (store: string, opts: { json?: boolean; jobs?: number }) => {
      const st = await stat(store).catch(() => undefined);
      if (!st?.isDirectory()) throw new UsageError(`${store}: no such store folder`);
      const [{ storeKernels }, { verifyStore }] = await Promise.all([lib.kernels(), lib.verify()]);
      storeKernels(); // says once, here, if the native core is missing
      const t0 = performance.now();
      const report = await verifyStore(store, { concurrency: opts.jobs ?? availableParallelism() });
      process.exitCode = printVerifyReport(report, (performance.now() - t0) / 1000, Boolean(opts.json));
    });

  program
    .command("inspect-model")
    .summary("show what hsm finds in a model folder: layers, width, and the tensor stored for each layer")
    .description(
      "Read a model folder (model.onnx, config.json, tokenizer.json, tokenizer_config.json) and print the number of " +
        "decoder blocks L, d_model, the tokenizer's special prefix, and for every stored layer the graph tensor chosen " +
        "and how it was found: graph outputs named hidden_states.N, torch/optimum node names (/model/layers.N/…), or " +
        "--hidden-tensors.",
    )
    .argument("<model-dir>", "model folder")
    .option("--layers <expr>", "layer rule in l and L", "l/(L-1) >= 0.4")
    .option("--hidden-tensors <map>", "LAYER=TENSOR pairs, comma-separated; 'final' names the last block's post-norm state")
    .option("--json", "print as JSON")
    .action(async (dir: string, opts: { layers: string; hiddenTensors?: string; json?: boolean }) => {
      const { inspectModel } = await lib.extract();
      const { inspection: i } = await inspectModel(dir, { layerRule: opts.layers, hiddenTensors: opts.hiddenTensors });
      if (opts.json) return out(JSON.stringify(i, null, 2));
      out(`${dir}: ${i.numLayers} decoder blocks, d_model ${i.dModel}, vocabulary ${i.vocabSize} (tokenizer ${i.tokenizerSize})`);
      out(`inputs: ${i.inputs.map((v) => `${v.name} [${(v.shape ?? []).join(", ")}]`).join(", ")}`);
      out(`outputs: ${i.outputs.length > 6 ? `${i.outputs.slice(0, 6).join(", ")}, … (${i.outputs.length})` : i.outputs.join(", ")}`);
      out(`special prefix tokens: ${i.addsPrefix.length ? i.addsPrefix.join(", ") : "none"}`);
      out(`hidden states found by ${i.plan.strategy}; stored layers (${opts.layers}): ${i.storedLayers.join(", ")}`);
      for (const l of i.storedLayers) {
        const t = i.plan.tensors.find((x) => x.layer === l)!;
        out(`  L${String(l).padStart(3, "0")}  ${t.tensor}  — ${t.how}`);
      }
    });

  const extractCommand = program
    .command("extract")
    .summary("store last-token hidden states of a model over a bank")
    .description(
      "Run the model over every main-forward query of the bank and store, for each decoder block l with the layer rule " +
        "true, the hidden state at the last prompt token as float16 L###.npy files with index.json. Progress is committed " +
        "in blocks of rows: a run that is stopped, even with kill -9, continues when started again with the same arguments " +
        "and produces the same bytes. A complete store is left alone. Shards (--shard K/N) extract contiguous row blocks " +
        "into stores of their own, joined with hsm merge.",
    );
  modelRunOptions(extractCommand, "store folder to write")
    .option("--layers <expr>", "layer rule in l and L", "l/(L-1) >= 0.4")
    .option("--shard <K/N>", "extract shard K (0-based) of N into --out")
    .option("--hidden-tensors <map>", "LAYER=TENSOR pairs for graphs hsm cannot read by itself")
    .option("--commit-rows <n>", "rows per durable commit and shard boundary; keep it equal across resumes and shards", intOption("--commit-rows", 1), 1024)
    .option("-q, --quiet", "no progress on stderr")
    .action(
      async (opts: {
        modelDir: string;
        bank: string;
        out: string;
        model?: string;
        batchSize: number;
        device: string;
        threads?: number;
        layers: string;
        shard?: string;
        hiddenTensors?: string;
        commitRows: number;
        quiet?: boolean;
      }) => {
        if (opts.device !== "cpu" && opts.device !== "cuda") throw new UsageError(`Expected --device cpu or cuda but received "${opts.device}"`);
        const { extract, parseShard } = await lib.extract();
        const progress = createProgress("extract", 0, { quiet: opts.quiet });
        const result = await extract({
          modelDir: opts.modelDir,
          bank: opts.bank,
          out: opts.out,
          model: opts.model,
          batchSize: opts.batchSize,
          device: opts.device,
          threads: opts.threads,
          layerRule: opts.layers,
          shard: opts.shard ? parseShard(opts.shard) : undefined,
          hiddenTensors: opts.hiddenTensors,
          commitRows: opts.commitRows,
          onProgress: (done, total) => progress.update(done, total),
          log: (m, level) => (level === "warn" || !opts.quiet) && process.stderr.write(`hsm: ${m}\n`),
        });
        const m = result.manifest;
        if (result.alreadyComplete) {
          out(`${opts.out}: already complete (${m.query_ids.length} rows, layers ${m.layers.join(", ")}); nothing to do`);
          return;
        }
        progress.end(`extract: ${result.rowsExtracted} rows in ${result.seconds.toFixed(1)} s (${(result.rowsExtracted / result.seconds).toFixed(1)} rows/s)`);
        out(`${opts.out}: ${m.query_ids.length} rows × ${m.d_model}, layers ${m.layers.join(", ")} of ${m.num_layers}, complete`);
      },
    );

  const generateCommand = program
    .command("generate")
    .summary("greedy answers of a model to every query of a bank")
    .description(
      "Greedy decoding (num_beams 1, max_new_tokens 24) of every bank query with the benchmark's prompts, left truncation " +
        "to 192 tokens and left padding, batched by length; with the KV cache when the model has past_key_values inputs. " +
        "Writes one JSON line per query (query_id, fact_id, condition_family, model, prompt, raw_response, " +
        "generated_tokens, finish_reason). A rerun skips the query_ids already written.",
    );
  modelRunOptions(generateCommand, "generations JSONL, e.g. outputs/evaluation/<model>.jsonl")
    .option("--max-new-tokens <n>", "tokens to generate at most", intOption("--max-new-tokens", 1), 24)
    .option("-q, --quiet", "no progress on stderr")
    .action(async (opts: { modelDir: string; bank: string; out: string; model?: string; batchSize: number; device: string; threads?: number; maxNewTokens: number; quiet?: boolean }) => {
      if (opts.device !== "cpu" && opts.device !== "cuda") throw new UsageError(`Expected --device cpu or cuda but received "${opts.device}"`);
      const { generate } = await lib.generate();
      const progress = createProgress("generate", 0, { quiet: opts.quiet });
      const r = await generate({ ...opts, device: opts.device, onProgress: (d, t) => progress.update(d, t) });
      progress.end(`generate: ${r.written} queries in ${r.seconds.toFixed(1)} s`);
      out(`${opts.out}: ${r.written} generated${r.skipped ? `, ${r.skipped} already there` : ""}`);
    });

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
    .action(async (opts: { bank: string; generations: string; out: string; allowMissing?: boolean }) => {
      const { scoreFile } = await lib.score();
      const s = await scoreFile(opts);
      out(`${opts.out}: ${s.rows} rows — ${Object.entries(s.labels).map(([l, n]) => `${l} ${n}`).join(", ")}; ${s.needsReview} to review`);
      if (s.missing || s.unknown) process.stderr.write(`hsm: warning: ${s.missing} bank queries without a generation, ${s.unknown} generations for unknown queries (skipped)\n`);
    });

  program
    .command("export")
    .summary("write scored rows as Every Eval Ever or Microsoft Foundry files")
    .description(
      "Every Eval Ever (--format eee): an aggregate record (accuracy per condition family, decoding settings, and a pointer " +
        "to the samples file with its sha256 and row count) beside instance-level samples (schema instance_level_eval_0.3.0, " +
        "every record validated), under OUT/data/<benchmark>/<developer>/<model>/. Foundry (--format foundry): JSONL with " +
        "query, response and ground_truth, or --messages for the messages form.",
    )
    .requiredOption("--format <format>", "eee or foundry")
    .requiredOption("--scored <file>", "scored JSONL")
    .requiredOption("--bank <file>", "query bank JSONL (prompts and gold answers)")
    .requiredOption("--out <path>", "folder (eee) or JSONL file (foundry)")
    .option("--model-id <id>", "model id in HuggingFace form, e.g. meta-llama/Llama-3.1-8B")
    .option("--developer <name>", "the model's developer")
    .option("--organization <name>", "who ran the evaluation")
    .option("--benchmark <name>", "benchmark name (default: the bank file's name)")
    .option("--messages", "foundry: messages form")
    .action(async (opts: { format: string; scored: string; bank: string; out: string; modelId?: string; developer?: string; organization?: string; benchmark?: string; messages?: boolean }) => {
      if (opts.format !== "eee" && opts.format !== "foundry") throw new UsageError(`Expected --format eee or foundry but received "${opts.format}"`);
      const { exportScored } = await lib.export();
      const r = await exportScored({ ...opts, format: opts.format });
      out(`${opts.format}: ${r.rows} rows → ${r.files.join(", ")}`);
    });

  program
    .command("merge")
    .summary("join shard stores into one store")
    .description(
      "Verify each shard store (made by hsm extract --shard K/N) and join them, in shard order, into one store whose " +
        "files and checksums equal a single-process run. Shards must come from one model, layer rule and bank, and cover " +
        "every row exactly once.",
    )
    .argument("<out>", "store folder to write")
    .argument("<shards...>", "shard store folders, in any order")
    .option("-q, --quiet", "no progress on stderr")
    .action(async (outDir: string, shards: string[], opts: { quiet?: boolean }) => {
      const { mergeShards } = await lib.merge();
      const progress = createProgress("merge", 0, { quiet: opts.quiet });
      const m = await mergeShards(outDir, shards, { onProgress: (d, t) => progress.update(d, t) });
      progress.end(`merge: ${shards.length} shards joined`);
      out(`${outDir}: ${m.query_ids.length} rows × ${m.d_model}, layers ${m.layers.join(", ")}, complete`);
    });

  program
    .command("metrics")
    .summary("compute ISS and KTS over a hidden-state store")
    .description(
      "Compute ISS (does a perturbed question stay near its fact's anchor question inside the model?) and, with --scored, " +
        "KTS (does a correctness probe trained on anchors transfer to perturbed questions?) for every stored layer and " +
        "condition family, as defined in docs/metrics.md. Writes iss.json, kts.json, their .csv twins and iss.svg, kts.svg " +
        "under --out, and prints a compact table.",
    )
    .argument("<store>", "hidden-state store folder")
    .option("--scored <file>", "scored JSONL (needed for KTS)")
    .option("--metrics <list>", "iss, kts or iss,kts (default: both with --scored, else iss)")
    .option("--out <dir>", "output folder (default: outputs/metrics/<model>)")
    .option("--backend <name>", "auto, native, tfjs-node, wasm or typescript", "auto")
    .option("--probe-c <c>", "inverse L2 strength of the KTS probe", (v: string) => {
      const c = Number(v);
      if (!(c > 0)) throw new UsageError(`Expected a positive number for --probe-c but received "${v}"`);
      return c;
    }, 0.01)
    .option("--folds <k>", "KTS folds", intOption("--folds", 2), 5)
    .option("--bootstrap <b>", "bootstrap replicates", intOption("--bootstrap", 1), 1000)
    .option("--seed <s>", "bootstrap seed", intOption("--seed", 0), 20260101)
    .option("--layers <list>", "stored layers to compute, e.g. 18,20-24 (default: all)")
    .option("--families <list>", "families to report, comma-separated (default: all)")
    .option("--allow-incomplete", "read a store whose extraction has not finished (its rows so far)")
    .option("--abstain-as-incorrect", "count abstentions as incorrect in KTS")
    .option("--allow-missing-labels", "leave out store rows without a scored row instead of stopping")
    .option("--verify", "hash every store file against its manifest first")
    .option("-q, --quiet", "no progress on stderr")
    .action(
      async (
        store: string,
        opts: {
          scored?: string;
          metrics?: string;
          out?: string;
          backend: string;
          probeC: number;
          folds: number;
          bootstrap: number;
          seed: number;
          layers?: string;
          families?: string;
          allowIncomplete?: boolean;
          abstainAsIncorrect?: boolean;
          allowMissingLabels?: boolean;
          verify?: boolean;
          quiet?: boolean;
        },
      ) => {
        const metrics = (opts.metrics ?? (opts.scored ? "iss,kts" : "iss")).split(",").map((m) => m.trim());
        for (const m of metrics) if (m !== "iss" && m !== "kts") throw new UsageError(`Expected --metrics iss, kts or iss,kts but received "${opts.metrics}"`);
        const st = await stat(store).catch(() => undefined);
        if (!st?.isDirectory()) throw new UsageError(`${store}: no such store folder`);
        if (opts.verify) {
          const { verifyStore } = await lib.verify();
          const report = await verifyStore(store);
          if (!report.ok) throw new HsmError(`${store} does not verify:\n${report.problems.map((p) => `  ${p.file}: ${p.message}`).join("\n")}`);
        }
        const [{ computeMetrics }, { writeResults, formatTable }] = await Promise.all([lib.metrics(), lib.report()]);
        const t0 = performance.now();
        const result = await computeMetrics(store, {
          metrics: metrics as ("iss" | "kts")[],
          scored: opts.scored,
          backend: opts.backend as "auto",
          probeC: opts.probeC,
          folds: opts.folds,
          bootstrap: opts.bootstrap,
          seed: opts.seed,
          layers: opts.layers ? parseLayerList(opts.layers) : undefined,
          families: opts.families?.split(",").map((f) => f.trim()),
          allowIncomplete: opts.allowIncomplete,
          abstainAsIncorrect: opts.abstainAsIncorrect,
          allowMissingLabels: opts.allowMissingLabels,
          onProgress: opts.quiet ? undefined : (layer, phase) => process.stderr.write(`metrics: layer ${layer}: ${phase}\n`),
        });
        const dir = opts.out ?? join("outputs", "metrics", result.manifest.model);
        const files = await writeResults(dir, result, store);
        printMetrics(result, files, (performance.now() - t0) / 1000, formatTable);
      },
    );

  program
    .command("make-model")
    .summary("write a small Llama-style ONNX model folder with seeded random weights")
    .description(
      "Write a Llama-style decoder (RMSNorm, rotary embeddings, grouped-query attention, SwiGLU, final norm) with seeded " +
        "random weights as an ONNX model folder shaped like an optimum export: model.onnx with torch-style node names and " +
        "only logits (and, with --with-past, the KV cache) as outputs, config.json, and a real HuggingFace tokenizer.",
    )
    .argument("<dir>", "model folder to write (replaced if present)")
    .option("--layers <n>", "decoder blocks", intOption("--layers", 1), 4)
    .option("--hidden <n>", "d_model", intOption("--hidden", 2), 64)
    .option("--heads <n>", "attention heads", intOption("--heads", 1), 4)
    .option("--kv-heads <n>", "key/value heads (divides --heads)", intOption("--kv-heads", 1))
    .option("--intermediate <n>", "MLP width (default 2 × hidden)", intOption("--intermediate", 1))
    .option("--tokenizer <name>", "llama3.1 (adds a BOS) or qwen3 (does not)", "llama3.1")
    .option("--seed <n>", "weight seed", intOption("--seed", 0), 1234)
    .option("--with-past", "add past_key_values.* inputs and present.* outputs")
    .action(async (dir: string, opts: { layers: number; hidden: number; heads: number; kvHeads?: number; intermediate?: number; tokenizer: string; seed: number; withPast?: boolean }) => {
      const { writeTinyModel, TOKENIZERS } = await lib.models();
      if (!(opts.tokenizer in TOKENIZERS)) throw new UsageError(`Expected --tokenizer ${Object.keys(TOKENIZERS).join(" or ")} but received "${opts.tokenizer}"`);
      if (opts.hidden % opts.heads !== 0 || (opts.hidden / opts.heads) % 2 !== 0) throw new UsageError(`Expected --hidden to be an even multiple of --heads per head, but ${opts.hidden} / ${opts.heads} is not`);
      const kv = opts.kvHeads ?? Math.max(1, opts.heads / 2);
      if (opts.heads % kv !== 0) throw new UsageError(`Expected --kv-heads to divide --heads (${opts.heads}) but received ${kv}`);
      const t0 = performance.now();
      const c = await writeTinyModel(dir, {
        layers: opts.layers,
        hidden: opts.hidden,
        heads: opts.heads,
        kvHeads: kv,
        intermediate: opts.intermediate,
        tokenizer: opts.tokenizer as "llama3.1" | "qwen3",
        seed: opts.seed,
        withPast: Boolean(opts.withPast),
      });
      out(`${dir}: ${c.num_hidden_layers} layers, d_model ${c.hidden_size}, ${c.num_attention_heads} heads (${c.num_key_value_heads} KV), vocabulary ${c.vocab_size}; written in ${((performance.now() - t0) / 1000).toFixed(1)} s`);
    });

  program
    .command("fixture")
    .summary("write a synthetic bank, store and scored file with planted structure")
    .description(
      "Write a synthetic fixture into a new folder: bank.jsonl, a complete store/ and scored.jsonl, with " +
        "planted structure (fact identity that strengthens with depth, perturbation families that weaken " +
        "it by different amounts, correctness planted along one direction). Small by default; --bench " +
        "writes the benchmark scale (44,416 bank rows, 39,258 stored rows, d = 1024, 8 layers, about 640 MB).",
    )
    .argument("<out>", "folder to create")
    .option("--facts <n>", "number of facts (6 stored rows each)", intOption("--facts", 2))
    .option("--d <n>", "hidden size", intOption("--d", 2))
    .option("--layers-total <n>", "decoder blocks L; layers with l/(L-1) >= 0.4 are stored", intOption("--layers-total", 1))
    .option("--seed <n>", "random seed", intOption("--seed", 0))
    .option("--extra-rows <n>", "bank rows outside the main forward pass", intOption("--extra-rows", 0))
    .option("--nonfinite-rows <n>", "rows of the last layer given an inf value", intOption("--nonfinite-rows", 0))
    .option("--bench", "benchmark scale (flags above still override)")
    .option("-q, --quiet", "no progress on stderr")
    .action(async (dir: string, opts: FixtureOptions & { bench?: boolean; quiet?: boolean; layersTotal?: number }) => {
      const base = opts.bench ? BENCH_FIXTURE : {};
      const options: FixtureOptions = { ...base };
      for (const key of ["facts", "d", "layersTotal", "seed", "extraRows", "nonfiniteRows"] as const) {
        if (opts[key] !== undefined) options[key] = opts[key];
      }
      const progress = createProgress("fixture", 0, { quiet: opts.quiet, unit: "layer rows" });
      let total = 0;
      options.onProgress = (_phase, done, all) => {
        total = all;
        progress.update(done, all);
      };
      const { writeFixture } = await lib.fixtures();
      const t0 = performance.now();
      const result = await writeFixture(dir, options);
      progress.end(`fixture: ${total} layer rows written in ${((performance.now() - t0) / 1000).toFixed(1)} s`);
      out(
        `${dir}: bank.jsonl (${result.rows} rows, ${result.mainForwardRows} main-forward), store/ (layers ${result.manifest.layers.join(", ")} ` +
          `of ${result.manifest.num_layers}, d = ${result.manifest.d_model}), scored.jsonl`,
      );
    });

  program
    .command("check-bank")
    .summary("validate a query bank and summarize it")
    .description("Validate a query bank (JSONL, one query per line) and summarize it. A bad line is reported with its file, line number and field.")
    .argument("<bank>", "bank JSONL file")
    .action(async (bank: string) => {
      const { readBank, summarizeBank } = await lib.bank();
      const rows = await readBank(bank);
      const s = summarizeBank(rows);
      out(`${bank}: ${s.rows} rows, ${s.mainForward} main-forward, ${s.facts} facts`);
      for (const [family, n] of Object.entries(s.families)) out(`  ${family.padEnd(16)} ${n}`);
    });

  program
    .command("layers")
    .summary("print the layers a store keeps for a model of L blocks")
    .description("Print the decoder blocks a store keeps for a model of L blocks. The rule is evaluated in exact rational arithmetic, so 0.4 means 2/5.")
    .argument("<L>", "number of decoder blocks", intOption("L", 1))
    .option("--rule <expr>", "rule in l and L", "l/(L-1) >= 0.4")
    .action(async (L: number, opts: { rule: string }) => {
      const { selectLayers } = await lib.layers();
      const layers = selectLayers(L, opts.rule);
      out(`${layers.length} of ${L} layers (${opts.rule}): ${layers.join(", ")}`);
    });

  program
    .command("run")
    .summary("the whole pipeline for one model: generate, score, extract, verify, metrics, exports")
    .description(
      "One command per model: greedy generations, scored rows, the hidden-state store, its verification, ISS and KTS, and " +
        "the Every Eval Ever and Foundry exports, under --outputs in the benchmark's layout (evaluation/, hidden/, metrics/, " +
        "eee/, foundry/). Finished steps are skipped, unfinished ones resumed.",
    )
    .requiredOption("--model-dir <dir>", "model folder")
    .requiredOption("--bank <file>", "query bank JSONL")
    .option("--outputs <dir>", "output root", "outputs")
    .option("--model <name>", "model name (default: the folder's name)")
    .option("--batch-size <n>", "prompts per batch", intOption("--batch-size", 1), 16)
    .option("--device <device>", "cpu or cuda", "cpu")
    .option("--threads <n>", "onnxruntime intra-op threads", intOption("--threads", 1))
    .option("-q, --quiet", "no progress on stderr")
    .action(async (opts: { modelDir: string; bank: string; outputs: string; model?: string; batchSize: number; device: string; threads?: number; quiet?: boolean }) => {
      if (opts.device !== "cpu" && opts.device !== "cuda") throw new UsageError(`Expected --device cpu or cuda but received "${opts.device}"`);
      const [{ runPipeline }, { formatTable }] = await Promise.all([lib.pipeline(), lib.report()]);
      const t0 = performance.now();
      const r = await runPipeline({ ...opts, device: opts.device, log: (step, m) => out(`${step}: ${m}`), onProgress: progressFor(opts.quiet) });
      out("");
      printMetrics(r.metrics, r.files, (performance.now() - t0) / 1000, formatTable);
    });

  program
    .command("demo")
    .summary("run the main job on the embedded default")
    .description(
      "Run the whole pipeline on the embedded default: a small Llama-style model generated here (seeded random weights, a " +
        "real Llama 3.1 tokenizer) and the bundled 125-query bank. Writes the model, generations, scored rows, store, " +
        "metrics, plots and both exports under --out, and ends with the ISS and KTS tables and the paths of the plots. " +
        "Steps already done are skipped.",
    )
    .option("--out <dir>", "where to write everything", "hsm-demo")
    .option("-q, --quiet", "no progress on stderr")
    .action(async (opts: { out: string; quiet?: boolean }) => {
      const [{ runPipeline }, { formatTable }, { writeTinyModel }] = await Promise.all([lib.pipeline(), lib.report(), lib.models()]);
      const dir = resolve(opts.out);
      const modelDir = join(dir, "model");
      const t0 = performance.now();
      if (await stat(join(modelDir, "model.onnx")).catch(() => undefined)) out(`model: ${modelDir} exists, skipped`);
      else {
        const c = await writeTinyModel(modelDir, DEMO_MODEL);
        out(`model: ${modelDir} — ${c.num_hidden_layers} layers, d_model ${c.hidden_size}, seeded random weights (its answers are noise; the pipeline is real)`);
      }
      const r = await runPipeline({ modelDir, bank: DEMO_BANK, outputs: dir, model: "tiny-llama", log: (step, m) => out(`${step}: ${m}`), onProgress: progressFor(opts.quiet) });
      out("");
      printMetrics(r.metrics, r.files, (performance.now() - t0) / 1000, formatTable);
    });

  return program;
}

/** Runs the CLI on `argv` (as process.argv); returns the exit status. */
export async function run(argv: string[]): Promise<number> {
  const program = buildProgram();
  program.exitOverride();
  for (const cmd of program.commands) cmd.exitOverride();
  try {
    await program.parseAsync(argv);
    return typeof process.exitCode === "number" ? process.exitCode : 0;
  } catch (err) {
    if (err instanceof CommanderError) {
      return err.code === "commander.helpDisplayed" || err.code === "commander.version" || err.code === "commander.help" ? 0 : 2;
    }
    if (err instanceof HsmError) {
      process.stderr.write(`hsm: ${err.message}\n`);
      return err.exitCode;
    }
    const e = err as Error;
    process.stderr.write(`hsm: unexpected error: ${e.message}\n`);
    if (process.env.HSM_DEBUG) process.stderr.write(`${e.stack}\n`);
    else process.stderr.write("(set HSM_DEBUG=1 for a stack trace)\n");
    return 1;
  }
}

