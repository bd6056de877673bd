#!/usr/bin/env node
// npm run bench:extract — `hsm extract` against the naive onnxruntime-node run
// of the same model (scripts/bench-extract-naive.mjs), in the same session:
// a 12-layer, d_model 512 Llama-style model with the Llama 3 vocabulary over a
// 2,000-row bank of realistic prompt lengths (most 10–80 tokens, a few past 192).
// Rows/s include tokenization and model load; peak memory is each process's max RSS.
import { spawnSync } from "node:child_process";
import { existsSync, mkdirSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";

import { median, timed } from "./bench-util.mjs";

const root = join(dirname(fileURLToPath(import.meta.url)), "..");
const benchDir = process.env.HSM_BENCH_DIR ?? join(root, ".bench");
const runs = Number(process.env.HSM_BENCH_RUNS ?? 3);
// The naive peer takes several minutes a run on two cores; one run is the default.
const naiveRuns = Number(process.env.HSM_BENCH_NAIVE_RUNS ?? 1);
const rowsWanted = Number(process.env.HSM_BENCH_ROWS ?? 2000);
const batch = process.env.HSM_BENCH_BATCH ?? "16";
const modelDir = join(benchDir, "model-12x512");
const bank = join(benchDir, `bank-${rowsWanted}.jsonl`);
const bin = join(root, "bin", "hsm.js");
mkdirSync(benchDir, { recursive: true });

if (!existsSync(join(modelDir, "model.onnx"))) {
  const r = spawnSync(process.execPath, [bin, "make-model", modelDir, "--layers", "12", "--hidden", "512", "--heads", "8", "--kv-heads", "4", "--intermediate", "1536"], { stdio: "inherit" });
  if (r.status !== 0) process.exit(1);
}

// A deterministic bank: lengths drawn so most prompts are 10–80 tokens and about 3% exceed 192.
if (!existsSync(bank)) {
  const words = "the of capital river city which year who wrote country largest first born name famous mountain island language currency president founded element discovered ocean border".split(" ");
  let s = 12345;
  const rand = () => ((s = (Math.imul(s, 1103515245) + 12345) >>> 0) / 4294967296);
  const families = ["anchor", "paraphrase", "typo", "distractor", "translation", "reorder"];
  const lines = [];
  for (let i = 0; i < rowsWanted; i++) {
    const u = rand();
    const n = u < 0.03 ? 160 + Math.floor(rand() * 140) : u < 0.7 ? 4 + Math.floor(rand() * 24) : 28 + Math.floor(rand() * 30);
    const q = Array.from({ length: n }, () => words[Math.floor(rand() * words.length)]).join(" ") + "?";
    lines.push(JSON.stringify({ query_id: `q${i}`, fact_id: `f${Math.floor(i / 6)}`, condition_family: families[i % 6], query: q, use_for_main_forward: true, answers: ["x"] }));
  }
  writeFileSync(bank, lines.join("\n") + "\n");
}


const hsm = [];
const naive = [];
for (let i = 0; i < runs; i++) {
  const out = join(benchDir, "extract-store");
  rmSync(out, { recursive: true, force: true });
  const h = timed(process.execPath, [bin, "extract", "--model-dir", modelDir, "--bank", bank, "--out", out, "--batch-size", batch, "--quiet"]);
  const check = JSON.parse(readFileSync(join(out, "index.json"), "utf8")).self_check;
  hsm.push({ rows_per_s: rowsWanted / h.secs, secs: h.secs, mb: h.mb, check_share: check.seconds / h.secs });
  console.error(`run ${i + 1}/${runs}: hsm ${h.secs.toFixed(1)} s, ${h.mb.toFixed(0)} MB`);
  if (i < naiveRuns) {
    const n = timed(process.execPath, [join(root, "scripts", "bench-extract-naive.mjs"), modelDir, bank, batch]);
    naive.push({ rows_per_s: rowsWanted / n.secs, secs: n.secs, mb: n.mb });
    console.error(`run ${i + 1}/${naiveRuns}: naive ${n.secs.toFixed(1)} s, ${n.mb.toFixed(0)} MB`);
  }
}
const res = {
  date: new Date().toISOString(),
  rows: rowsWanted,
  batch_size: Number(batch),
  runs,
  naive_runs: naive.length,
  hsm: { rows_per_s: median(hsm.map((x) => x.rows_per_s)), peak_mb: median(hsm.map((x) => x.mb)), self_check_share: median(hsm.map((x) => x.check_share)) },
  naive: { rows_per_s: median(naive.map((x) => x.rows_per_s)), peak_mb: median(naive.map((x) => x.mb)) },
};
res.speedup = res.hsm.rows_per_s / res.naive.rows_per_s;
res.memory_ratio = res.hsm.peak_mb / res.naive.peak_mb;
writeFileSync(join(benchDir, "bench-extract.json"), JSON.stringify(res, null, 2) + "\n");
console.log(`hsm extract vs naive onnxruntime-node — ${rowsWanted} rows, 12 layers × d 512, Llama 3 vocabulary, batch ${batch}; medians of ${runs} and ${naive.length} runs`);
console.log(`  hsm extract   ${res.hsm.rows_per_s.toFixed(1)} rows/s, peak ${res.hsm.peak_mb.toFixed(0)} MB`);
console.log(`  self-check    ${(100 * res.hsm.self_check_share).toFixed(1)}% of the hsm run (32 rows re-run alone at batch 1)`);
console.log(`  naive         ${res.naive.rows_per_s.toFixed(1)} rows/s, peak ${res.naive.peak_mb.toFixed(0)} MB`);
console.log(`  ratio         ${res.speedup.toFixed(2)}x the rows/s at ${(100 * res.memory_ratio).toFixed(0)}% of the peak memory`);
