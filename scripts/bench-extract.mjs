#!/usr/bin/env node
// npm run bench:extract — `hsm extract` against a PyTorch peer of the same
// model in the same session (scripts/torch_peer.py: the model in plain
// PyTorch as HuggingFace's LlamaModel computes it, from the same weights,
// inference mode, two threads, length-sorted batches of 16, left padding with
// explicit position ids): a 12-layer, d_model 512 Llama-style model with the
// Llama 3 vocabulary over a 2,000-row bank of realistic prompt lengths (most
// 10–80 tokens, a few past 192). Rows/s include model load; hsm's include
// tokenization too, the peer's do not (Debian ships no Python tokenizers
// package, so the peer reads token ids made by hsm's tokenizer beforehand).
// Peak memory is each process's max RSS. The peer's states are compared with
// hsm's store, so that both are shown to do the same work.
//
// The same model is also extracted in the q4 and fp16 styles make-model
// writes from the same seeded weights (transformers.js files: 4-bit
// MatMulNBits projections; float16 throughout behind float32 inputs and
// outputs), made once under .bench/; HSM_BENCH_STYLES picks them
// (comma-separated, "" for none). Every hsm line shows the self-check's share
// of the run's wall time (the manifest's self_check.seconds).
//
// HSM_BENCH_RUNS (default 3) and HSM_BENCH_ROWS (default 2000) shorten a run;
// figures are medians over the runs, taken in turn so that background load
// hits every contender alike.
//
// HSM_BENCH_NAIVE=1 adds the naive onnxruntime-node run of the same model
// (scripts/bench-extract-naive.mjs), several minutes a run on two cores.
import { spawnSync } from "node:child_process";
import { existsSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { loadavg } from "node:os";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";

import {
  benchModelAndBank,
  benchModelInStyle,
  ensureTorch,
  envWithout,
  gemmLimit,
  llamaBlockFlops,
  median,
  share,
  timed,
  writeTokenIds,
} from "./bench-util.mjs";

const root = join(dirname(fileURLToPath(import.meta.url)), "..");
const benchDir = process.env.HSM_BENCH_DIR ?? join(root, ".bench");
const runs = Number(process.env.HSM_BENCH_RUNS ?? 3);
const naiveRuns = process.env.HSM_BENCH_NAIVE === "1" ? Number(process.env.HSM_BENCH_NAIVE_RUNS ?? 1) : 0;
const rowsWanted = Number(process.env.HSM_BENCH_ROWS ?? 2000);
const batch = process.env.HSM_BENCH_BATCH ?? "16";
const python = process.env.HSM_PYTHON ?? "/usr/bin/python3";
const bin = join(root, "bin", "hsm.js");
const peerScript = join(root, "scripts", "torch_peer.py");
// OPENBLAS_CORETYPE / OPENBLAS_L2_SIZE, where set for old OpenBLAS bugs, pin a slower kernel for PyTorch's BLAS.
const peerEnv = envWithout("OPENBLAS_CORETYPE", "OPENBLAS_L2_SIZE");

const styles = (process.env.HSM_BENCH_STYLES ?? "q4,fp16")
  .split(",")
  .map((x) => x.trim())
  .filter(Boolean);
const { modelDir, bank } = benchModelAndBank(root, benchDir, rowsWanted);
const styleDirs = Object.fromEntries(styles.map((style) => [style, benchModelInStyle(root, benchDir, style)]));
const ids = join(benchDir, `bank-${rowsWanted}.ids.json`);
if (!existsSync(ids)) await writeTokenIds(root, modelDir, bank, ids);
const withTorch = ensureTorch(python);
const weights = join(benchDir, "model-12x512-torch");
if (withTorch && !existsSync(join(weights, "lm_head.weight.npy"))) {
  const r = spawnSync(python, [peerScript, "convert", modelDir, weights], { stdio: "inherit" });
  if (r.status !== 0) process.exit(1);
}

const store = join(benchDir, "extract-store");
const peerOut = join(benchDir, "extract-torch");
const samples = { hsm: [], torch: [], naive: [], ...Object.fromEntries(styles.map((style) => [style, []])) };
const sample = (t) => ({ rows_per_s: rowsWanted / t.secs, secs: t.secs, mb: t.mb });
/** One timed `hsm extract` into a fresh `out`, with the self-check's share of its wall time. */
const hsmRun = (dir, out) => {
  rmSync(out, { recursive: true, force: true });
  const s = sample(
    timed(process.execPath, [
      bin,
      "extract",
      "--model-dir",
      dir,
      "--bank",
      bank,
      "--out",
      out,
      "--batch-size",
      batch,
      "--quiet",
    ]),
  );
  const check = JSON.parse(readFileSync(join(out, "index.json"), "utf8")).self_check;
  return { ...s, self_check: check.seconds / s.secs, self_check_status: check.status };
};
for (let i = 0; i < runs; i++) {
  // Interleaved, so that background load hits the contenders alike.
  samples.hsm.push(hsmRun(modelDir, store));
  if (withTorch)
    samples.torch.push(sample(timed(python, [peerScript, "extract", modelDir, weights, ids, peerOut], peerEnv)));
  for (const style of styles) samples[style].push(hsmRun(styleDirs[style], `${store}-${style}`));
  if (i < naiveRuns)
    samples.naive.push(
      sample(timed(process.execPath, [join(root, "scripts", "bench-extract-naive.mjs"), modelDir, bank, batch])),
    );
  console.error(
    `run ${i + 1}/${runs}: ${Object.entries(samples)
      .filter(([, s]) => s.length > i)
      .map(([k, s]) => `${k} ${s.at(-1).secs.toFixed(1)} s, ${s.at(-1).mb.toFixed(0)} MB`)
      .join("; ")}`,
  );
}

// The machine's limit, measured now: useful GFLOP/s of each contender against NumPy's float32 GEMM.
const limit = withTorch ? gemmLimit(python, peerEnv) : null;
const flops = llamaBlockFlops(
  JSON.parse(readFileSync(join(modelDir, "config.json"), "utf8")),
  JSON.parse(readFileSync(ids, "utf8")).ids.map((row) => row.length),
);

const summary = (s) =>
  s.length
    ? {
        runs: s.length,
        rows_per_s: median(s.map((x) => x.rows_per_s)),
        seconds: median(s.map((x) => x.secs)),
        gflops: flops / median(s.map((x) => x.secs)) / 1e9,
        peak_mb: median(s.map((x) => x.mb)),
        ...(s[0].self_check === undefined
          ? {}
          : {
              self_check_share: median(s.map((x) => x.self_check)),
              self_check_status: [...new Set(s.map((x) => x.self_check_status))].join("/"),
            }),
      }
    : null;
const res = {
  date: new Date().toISOString(),
  rows: rowsWanted,
  batch_size: Number(batch),
  load_average: loadavg(),
  gflop_per_row: flops / rowsWanted / 1e9,
  gemm_limit: limit,
  hsm: summary(samples.hsm),
  torch: summary(samples.torch),
  naive: summary(samples.naive),
  styles: Object.fromEntries(styles.map((style) => [style, summary(samples[style])])),
};
if (withTorch) {
  const cmp = spawnSync(python, [peerScript, "compare", store, peerOut], { encoding: "utf8" });
  res.states = cmp.status === 0 ? JSON.parse(cmp.stdout) : { error: cmp.stderr.slice(-500) };
}
for (const peer of ["torch", "naive"]) {
  if (res[peer])
    res[`vs_${peer}`] = {
      speed: res.hsm.rows_per_s / res[peer].rows_per_s,
      memory: res.hsm.peak_mb / res[peer].peak_mb,
    };
}
writeFileSync(join(benchDir, "bench-extract.json"), JSON.stringify(res, null, 2) + "\n");

const line = (name, r) =>
  `  ${name.padEnd(18)}${r.rows_per_s.toFixed(1).padStart(6)} rows/s (${r.seconds.toFixed(1)} s), peak ${r.peak_mb.toFixed(0)} MB` +
  (r.self_check_share === undefined
    ? ""
    : `, self-check ${(100 * r.self_check_share).toFixed(1)}% (${r.self_check_status})`) +
  `, median of ${r.runs}` +
  (limit ? `; ${r.gflops.toFixed(0)} GFLOP/s, ${share(r.gflops, limit.gflops)} of the limit` : "");
console.log(
  `hsm extract vs peers — ${rowsWanted} rows, 12 layers × d 512, Llama 3 vocabulary, batch ${batch}; load average ${res.load_average.map((x) => x.toFixed(2)).join(" ")}`,
);
if (limit)
  console.log(
    `  limit: NumPy float32 GEMM ${limit.gflops.toFixed(0)} GFLOP/s (${limit.blas}) over ${res.gflop_per_row.toFixed(2)} GFLOP a row of useful block work = ${(limit.gflops / res.gflop_per_row).toFixed(0)} rows/s`,
  );
console.log(line("hsm extract fp32", res.hsm));
for (const style of styles) {
  const r = res.styles[style];
  console.log(line(`hsm extract ${style}`, r) + ` — ${(r.rows_per_s / res.hsm.rows_per_s).toFixed(2)}x fp32`);
}
if (res.torch) console.log(line("PyTorch peer fp32", res.torch));
if (res.naive) console.log(line("naive ORT", res.naive));
for (const peer of ["torch", "naive"]) {
  const v = res[`vs_${peer}`];
  if (v)
    console.log(
      `  vs ${peer === "torch" ? "PyTorch" : "naive ORT"}: ${v.speed.toFixed(2)}x the rows/s at ${(100 * v.memory).toFixed(0)}% of the peak memory`,
    );
}
if (res.states?.layers) {
  const layers = Object.values(res.states.layers);
  const worst = (k) => Math.max(...layers.map((l) => l[k])).toExponential(2);
  console.log(
    `  states: the peer's ${res.states.within ? "match" : "DO NOT match"} hsm's store within float16 rounding in all ${layers.length} layers`,
  );
  console.log(
    `          largest |Δ| ${worst("max_abs")}; relative to the row's RMS ${worst("max_abs_over_row_scale")}; relative to the value ${worst("max_rel")} (values ≥ 2^-14)`,
  );
  if (!res.states.within) process.exitCode = 1;
} else if (res.states) console.log(`  states: comparison failed: ${res.states.error}`);
if (!withTorch) console.log("  (no PyTorch peer: python3-torch is not installed)");
