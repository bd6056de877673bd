#!/usr/bin/env node
// npm run bench:generate — `hsm generate` against a PyTorch peer of the same
// model in the same session (scripts/torch_peer.py generate: the model in
// plain PyTorch from the same weights, greedy decoding with a KV cache as
// HuggingFace's generate does it, inference mode, two threads, length-sorted
// batches of 16, left padding, at most 24 new tokens, stopping on config.json's
// eos_token_id): the benchmark's 12-layer, d_model 512 model with the Llama 3
// vocabulary over the same 2,000-row bank as bench:extract. Rows/s include
// model load; hsm's include tokenization and decoding too, the peer's do not
// (it reads token ids made by hsm's tokenizer, and its answers are decoded
// afterwards by the same tokenizer to compare the texts with hsm's). Beside
// it, the same weights exported by hand (torch_peer.py export: torch.onnx.export
// of a module returning logits, no KV cache), which hsm generates from with a
// cache added to the graph.
import { spawnSync } from "node:child_process";
import { existsSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";

import {
  benchModelAndBank,
  ensureTorch,
  envWithout,
  gemmLimit,
  llamaGenerateFlops,
  median,
  share,
  timed,
  writeTokenIds,
} from "./bench-util.mjs";

const root = join(dirname(fileURLToPath(import.meta.url)), "..");
const benchDir = process.env.HSM_BENCH_DIR ?? join(root, ".bench");
const runs = Number(process.env.HSM_BENCH_RUNS ?? 3);
const rowsWanted = Number(process.env.HSM_BENCH_ROWS ?? 2000);
const batch = process.env.HSM_BENCH_BATCH ?? "16";
const maxNew = "24";
const python = process.env.HSM_PYTHON ?? "/usr/bin/python3";
const bin = join(root, "bin", "hsm.js");
const peerScript = join(root, "scripts", "torch_peer.py");
const peerEnv = envWithout("OPENBLAS_CORETYPE", "OPENBLAS_L2_SIZE");

const { modelDir, bank } = benchModelAndBank(root, benchDir, rowsWanted);
const ids = join(benchDir, `bank-${rowsWanted}.ids.json`);
if (!existsSync(ids)) await writeTokenIds(root, modelDir, bank, ids);
if (!ensureTorch(python)) {
  console.log("no PyTorch peer: python3-torch is not installed");
  process.exit(1);
}
const weights = join(benchDir, "model-12x512-torch");
if (!existsSync(join(weights, "lm_head.weight.npy"))) {
  const r = spawnSync(python, [peerScript, "convert", modelDir, weights], { stdio: "inherit" });
  if (r.status !== 0) process.exit(1);
}

const exportedDir = join(benchDir, "model-12x512-torch-export");
if (!existsSync(join(exportedDir, "model.onnx"))) {
  const r = spawnSync(python, [peerScript, "export", modelDir, weights, exportedDir], { stdio: "inherit" });
  if (r.status !== 0) process.exit(1);
}

const hsmOut = join(benchDir, "generate-hsm.jsonl");
const exportedOut = join(benchDir, "generate-hsm-torch-export.jsonl");
const peerOut = join(benchDir, "generate-torch.json");
const samples = { hsm: [], exported: [], torch: [] };
const sample = (t) => ({ rows_per_s: rowsWanted / t.secs, secs: t.secs, mb: t.mb });
const hsmGenerate = (dir, out) => {
  rmSync(out, { force: true });
  const args = ["--model-dir", dir, "--bank", bank, "--out", out, "--batch-size", batch, "--max-new-tokens", maxNew];
  return sample(timed(process.execPath, [bin, "generate", ...args, "--quiet"]));
};
for (let i = 0; i < runs; i++) {
  samples.hsm.push(hsmGenerate(modelDir, hsmOut));
  samples.exported.push(hsmGenerate(exportedDir, exportedOut));
  samples.torch.push(
    sample(
      timed(python, [peerScript, "generate", modelDir, weights, ids, peerOut, "--max-new-tokens", maxNew], peerEnv),
    ),
  );
  console.error(
    `run ${i + 1}/${runs}: ${Object.entries(samples)
      .map(([k, s]) => `${k} ${s.at(-1).secs.toFixed(1)} s, ${s.at(-1).mb.toFixed(0)} MB`)
      .join("; ")}`,
  );
}

// The peer's answers, decoded by hsm's tokenizer, against hsm's rows.
const { PromptTokenizer } = await import(join(root, "dist", "model", "tokenizer.js"));
const tokenizer = await PromptTokenizer.load(modelDir);
const queryIds = JSON.parse(readFileSync(ids, "utf8")).query_ids;
const peerRows = JSON.parse(readFileSync(peerOut, "utf8"));
/** One hsm output's rows against the peer's: identical texts, the same token counts, the first differences. */
const texts = (out) => {
  const hsmRows = new Map(
    readFileSync(out, "utf8")
      .split("\n")
      .filter(Boolean)
      .map((l) => JSON.parse(l))
      .map((r) => [r.query_id, r]),
  );
  const differ = [];
  let sameTokens = 0;
  peerRows.forEach((p, i) => {
    const h = hsmRows.get(queryIds[i]);
    const text = tokenizer.decode(p.tokens);
    if (h?.generated_tokens === p.tokens.length + (p.eos ? 1 : 0)) sameTokens++;
    if (h?.raw_response !== text) differ.push({ query_id: queryIds[i], hsm: h?.raw_response ?? null, torch: text });
  });
  return {
    rows: peerRows.length,
    same_text: peerRows.length - differ.length,
    same_token_count: sameTokens,
    first_differences: differ.slice(0, 5),
  };
};

// The machine's limit, measured now: each contender's useful GFLOP/s (the peer's tokens: the same work as hsm's
// where the texts agree) against NumPy's float32 GEMM.
const limit = gemmLimit(python, peerEnv);
const promptIds = JSON.parse(readFileSync(ids, "utf8")).ids;
const flops = llamaGenerateFlops(
  JSON.parse(readFileSync(join(modelDir, "config.json"), "utf8")),
  peerRows.map((p, i) => [promptIds[i].length, p.tokens.length + (p.eos ? 1 : 0)]),
);

const summary = (s) => ({
  runs: s.length,
  rows_per_s: median(s.map((x) => x.rows_per_s)),
  seconds: median(s.map((x) => x.secs)),
  peak_mb: median(s.map((x) => x.mb)),
  gflops: flops / median(s.map((x) => x.secs)) / 1e9,
});
const res = {
  date: new Date().toISOString(),
  rows: rowsWanted,
  batch_size: Number(batch),
  max_new_tokens: Number(maxNew),
  gflop_per_row: flops / rowsWanted / 1e9,
  gemm_limit: limit,
  hsm: summary(samples.hsm),
  torch: summary(samples.torch),
  torch_export: { hsm: summary(samples.exported) },
};
const against = (r) => ({ speed: r.rows_per_s / res.torch.rows_per_s, memory: r.peak_mb / res.torch.peak_mb });
res.vs_torch = against(res.hsm);
res.texts = texts(hsmOut);
res.torch_export.vs_torch = against(res.torch_export.hsm);
res.torch_export.texts = texts(exportedOut);
writeFileSync(join(benchDir, "bench-generate.json"), JSON.stringify(res, null, 2) + "\n");

const line = (name, r) =>
  `  ${name}: ${r.rows_per_s.toFixed(1)} rows/s (${r.seconds.toFixed(1)} s), peak ${r.peak_mb.toFixed(0)} MB, median of ${r.runs}; ` +
  `${r.gflops.toFixed(0)} GFLOP/s, ${share(r.gflops, limit.gflops)} of the limit`;
console.log(
  `hsm generate vs PyTorch — ${rowsWanted} rows, 12 layers × d 512, Llama 3 vocabulary, batch ${batch}, at most ${maxNew} new tokens`,
);
console.log(
  `  limit: NumPy float32 GEMM ${limit.gflops.toFixed(0)} GFLOP/s (${limit.blas}) over ${res.gflop_per_row.toFixed(2)} GFLOP a row of useful work (prompt, cached steps, LM head) = ${(limit.gflops / res.gflop_per_row).toFixed(0)} rows/s`,
);
console.log(line("PyTorch peer", res.torch));
for (const [name, r, vs, t] of [
  ["hsm generate", res.hsm, res.vs_torch, res.texts],
  [
    "hsm generate on the torch.onnx.export graph without a KV cache",
    res.torch_export.hsm,
    res.torch_export.vs_torch,
    res.torch_export.texts,
  ],
]) {
  console.log(line(name, r));
  console.log(
    `    vs PyTorch: ${vs.speed.toFixed(2)}x the rows/s at ${(100 * vs.memory).toFixed(0)}% of the peak memory; ` +
      `texts: ${t.same_text} of ${t.rows} identical, ${t.same_token_count} with the same number of generated tokens`,
  );
  for (const d of t.first_differences)
    console.log(`    ${d.query_id}: hsm ${JSON.stringify(d.hsm)} vs PyTorch ${JSON.stringify(d.torch)}`);
}
if (res.texts.same_text < res.texts.rows) process.exitCode = 1;
