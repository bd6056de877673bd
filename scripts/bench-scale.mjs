#!/usr/bin/env node
// npm run bench:scale — the store at the real size (39,260 rows × d = 4608 × 28
// of 46 layers, about 10 GB), written once with `hsm fixture --full`:
//   1. `hsm verify` vs `sha256sum` over the same files (medians, page cache warm when memory allows);
//   2. `hsm metrics` (ISS and KTS): time and peak RSS, against the NumPy + scikit-learn peer of bench:metrics
//      (scripts/metrics_peer.py) on the same store, one run each (the peer's takes about ten minutes on 2 cores),
//      and whether the two agree within metrics.md's tolerances;
//   3. `hsm merge` of 8 shards cut from the fixture: time and peak RSS, then a verify of the result.
// Free disk space is checked before anything is written; each figure is printed as it is measured.
// HSM_BENCH_SCALE_ONLY=verify runs only the first, =metrics the first two (no shards are cut, so only the fixture
// needs the space).
import { spawnSync } from "node:child_process";
import { existsSync, mkdirSync, readdirSync, readFileSync, rmSync, statfsSync, statSync, writeFileSync } from "node:fs";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";

import { agreement, describeBlas, envWithout, gemmLimit, issFlops, median, shaLimit, share } from "./bench-util.mjs";

const root = join(dirname(fileURLToPath(import.meta.url)), "..");
const benchDir = process.env.HSM_BENCH_DIR ?? join(root, ".bench");
const fixture = join(benchDir, "full");
const store = join(fixture, "store");
const runs = Number(process.env.HSM_BENCH_RUNS ?? 3);
const bin = join(root, "bin", "hsm.js");
const SHARDS = 8;
const GB = 1e9;
const python = process.env.HSM_PYTHON ?? "/usr/bin/python3";
const only = process.env.HSM_BENCH_SCALE_ONLY;
if (only !== undefined && only !== "verify" && only !== "metrics") {
  console.error(`HSM_BENCH_SCALE_ONLY takes "verify" or "metrics" (or is unset for every figure), not "${only}"`);
  process.exit(2);
}

/** Runs a command under /usr/bin/time: wall seconds and peak resident memory; `inherit` shows its output (progress) live. */
function timed(cmd, args, { inherit = false, env = process.env } = {}) {
  const report = join(benchDir, ".time");
  const t0 = performance.now();
  const r = spawnSync("/usr/bin/time", ["-f", "%M", "-o", report, cmd, ...args], {
    stdio: ["ignore", inherit ? "inherit" : "pipe", inherit ? "inherit" : "pipe"],
    maxBuffer: 1 << 28,
    env,
  });
  const secs = (performance.now() - t0) / 1000;
  if (r.status !== 0)
    throw new Error(
      `${cmd} ${args.join(" ")} failed (${r.status})${inherit ? "" : `: ${r.stderr.toString().slice(-2000)}`}`,
    );
  const rssKb = Number(readFileSync(report, "utf8").trim().split("\n").at(-1));
  rmSync(report, { force: true });
  return { secs, rssMb: rssKb / 1024 };
}

/** Writes what was measured and says where. */
function writeResults() {
  writeFileSync(join(benchDir, "bench-scale.json"), JSON.stringify(results, null, 2) + "\n");
  console.log(`results: ${join(benchDir, "bench-scale.json")}`);
}

function freeBytes(dir) {
  const s = statfsSync(dir);
  return s.bavail * s.bsize;
}

function memAvailable() {
  const m = /MemAvailable:\s+(\d+) kB/.exec(readFileSync("/proc/meminfo", "utf8"));
  return m ? Number(m[1]) * 1024 : 0;
}

mkdirSync(benchDir, { recursive: true });
const expected = 28 * (128 + 39260 * 4608 * 2);
const need = (existsSync(join(store, "index.json")) ? 0 : expected) + (only ? 0 : 2 * expected) + GB;
if (freeBytes(benchDir) < need) {
  console.error(
    `bench:scale needs about ${(need / GB).toFixed(1)} GB free in ${benchDir} (${only ? "the fixture" : "fixture, 8 shards, merged store"}); only ${(freeBytes(benchDir) / GB).toFixed(1)} GB are`,
  );
  process.exit(1);
}
const results = { date: new Date().toISOString(), runs };
if (!existsSync(join(store, "index.json"))) {
  console.error(`writing the full-size fixture to ${fixture} (once; reused by later runs)`);
  const t = timed(process.execPath, [bin, "fixture", fixture, "--full"], { inherit: true });
  results.fixture = { seconds: t.secs, peak_rss_mb: t.rssMb };
  console.log(`fixture written in ${t.secs.toFixed(1)} s, peak RSS ${t.rssMb.toFixed(0)} MB`);
}
const files = readdirSync(store)
  .filter((n) => n.endsWith(".npy"))
  .sort()
  .map((n) => join(store, n));
const bytes = files.reduce((s, f) => s + statSync(f).size, 0);

// 1. verify vs sha256sum.
const warm = memAvailable() > bytes * 1.2;
const warmUp = () => {
  if (warm) for (const f of files) spawnSync("cat", [f], { stdio: ["ignore", "ignore", "ignore"] });
};
warmUp();
const verifyRuns = [];
const shaRuns = [];
for (let i = 0; i < runs; i++) {
  // Alternate so that background load hits both alike.
  verifyRuns.push(timed(process.execPath, [bin, "verify", store]));
  shaRuns.push(timed("sha256sum", files));
}
results.verify = {
  files: files.length,
  bytes,
  page_cache_warm: warm,
  hsm_verify_s: median(verifyRuns.map((r) => r.secs)),
  hsm_verify_peak_rss_mb: Math.max(...verifyRuns.map((r) => r.rssMb)),
  sha256sum_s: median(shaRuns.map((r) => r.secs)),
};
results.verify.speedup_vs_sha256sum = results.verify.sha256sum_s / results.verify.hsm_verify_s;
// The machine's limit for hashing: every core's SHA-256 over memory at once, measured now.
results.sha256_limit = await shaLimit();
const v = results.verify;
console.log(
  `hsm verify vs sha256sum — ${v.files} files, ${(v.bytes / GB).toFixed(2)} GB, median of ${runs}, page cache ${warm ? "warm" : "cold (not enough memory to hold the store)"}`,
);
console.log(`  hsm verify   ${v.hsm_verify_s.toFixed(2)} s (peak RSS ${v.hsm_verify_peak_rss_mb.toFixed(0)} MB)`);
console.log(`  sha256sum    ${v.sha256sum_s.toFixed(2)} s`);
const sha = results.sha256_limit;
console.log(
  `  share of the limit (one SHA-256 stream per core over memory, ${sha.cores} cores, ${sha.gb_per_s.toFixed(2)} GB/s): hsm verify ${share(bytes / v.hsm_verify_s / GB, sha.gb_per_s)}, sha256sum ${share(bytes / v.sha256sum_s / GB, sha.gb_per_s)}`,
);
console.log(`  ratio        ${v.speedup_vs_sha256sum.toFixed(2)}x faster`);
if (only === "verify") {
  writeResults();
  process.exit(0);
}

// 2. metrics.
const metricsOut = join(benchDir, "full-metrics");
const m = timed(
  process.execPath,
  [bin, "metrics", store, "--scored", join(fixture, "scored.jsonl"), "--out", metricsOut],
  { inherit: true },
);
console.log(`hsm metrics (ISS and KTS, 28 layers) ${m.secs.toFixed(1)} s, peak RSS ${m.rssMb.toFixed(0)} MB`);
// The peer, and NumPy's float32 GEMM as the limit, without the variables that pin OpenBLAS to an older kernel
// (see bench:metrics).
const peerEnv = envWithout("OPENBLAS_CORETYPE", "OPENBLAS_L2_SIZE");
const peerOut = join(benchDir, "full-metrics-peer.json");
const p = timed(
  python,
  [join(root, "scripts", "metrics_peer.py"), store, "--scored", join(fixture, "scored.jsonl"), "--out", peerOut],
  { env: peerEnv },
);
const limit = gemmLimit(python, peerEnv);
const peer = JSON.parse(readFileSync(peerOut, "utf8"));
const agrees = Object.fromEntries(
  ["iss", "kts"].map((metric) => [
    metric,
    agreement(JSON.parse(readFileSync(join(metricsOut, `${metric}.json`), "utf8")).rows, peer[metric]),
  ]),
);
results.metrics = {
  seconds: m.secs,
  peak_rss_mb: m.rssMb,
  peer: { seconds: p.secs, peak_rss_mb: p.rssMb, phases: peer.peer.phases, blas: peer.peer.blas },
  time_vs_peer: m.secs / p.secs,
  agreement: agrees,
  gemm_limit: limit,
};
// ISS's similarity work over each side's whole run (KTS's time included, so a lower bound for both alike).
const issWork = issFlops(JSON.parse(readFileSync(join(store, "index.json"), "utf8")));
const gflops = (secs) => issWork / secs / 1e9;
console.log(
  `  NumPy + scikit-learn peer ${p.secs.toFixed(1)} s, peak RSS ${p.rssMb.toFixed(0)} MB (${describeBlas(peer.peer.blas)}); hsm at ${(m.secs / p.secs).toFixed(2)}x its time, ${(m.rssMb / p.rssMb).toFixed(2)}x its memory`,
);
console.log(
  `  share of the limit (NumPy float32 GEMM ${limit.gflops.toFixed(0)} GFLOP/s, ${limit.blas}; ISS's similarity work over the whole run): hsm ${gflops(m.secs).toFixed(0)} GFLOP/s, ${share(gflops(m.secs), limit.gflops)}; peer ${gflops(p.secs).toFixed(0)} GFLOP/s, ${share(gflops(p.secs), limit.gflops)}`,
);
for (const [metric, a] of Object.entries(agrees)) {
  const largest = Object.entries(a.maxDev)
    .map(([f, dev]) => `${f} ${dev.toExponential(1)}`)
    .join(", ");
  console.log(
    `  ${metric}: ${a.failures.length === 0 ? `agrees on all ${a.rows} rows` : `${a.failures.length} fields outside the tolerances (first: ${a.failures[0]})`} (largest |Δ|: ${largest})`,
  );
}
if (only === "metrics") {
  writeResults();
  process.exit(0);
}

// 3. merge of 8 shards cut from the fixture (made once).
const shardDir = join(benchDir, "full-shards");
const shards = Array.from({ length: SHARDS }, (_, k) => join(shardDir, `shard-${k}`));
if (
  !shards.every(
    (s) => existsSync(join(s, "index.json")) && JSON.parse(readFileSync(join(s, "index.json"), "utf8")).complete,
  )
) {
  console.error(`cutting ${SHARDS} shards from the fixture into ${shardDir} (once)`);
  const cut = spawnSync(
    process.execPath,
    [
      "-e",
      `
    const { StoreReader } = await import(${JSON.stringify(join(root, "dist", "store", "reader.js"))});
    const { StoreWriter } = await import(${JSON.stringify(join(root, "dist", "store", "writer.js"))});
    const r = await StoreReader.open(${JSON.stringify(store)});
    const m = r.manifest, n = m.query_ids.length, K = ${SHARDS};
    for (let k = 0; k < K; k++) {
      const a = Math.floor((k * n) / K), b = Math.floor(((k + 1) * n) / K);
      const w = await StoreWriter.open(${JSON.stringify(shardDir)} + "/shard-" + k, {
        model: m.model, model_sha256: m.model_sha256, num_layers: m.num_layers, d_model: m.d_model, layers: m.layers,
        layer_rule: m.layer_rule, last_layer_final_norm: m.last_layer_final_norm, dtype: m.dtype, max_prompt_len: m.max_prompt_len,
        query_ids: m.query_ids.slice(a, b), fact_ids: m.fact_ids.slice(a, b), condition_families: m.condition_families.slice(a, b),
        shard: { index: k, count: K, row_start: a, row_end: b, rows_total: n },
      });
      for (const layer of m.layers) {
        for await (const block of r.blocks(layer, 4096)) {
          const from = Math.max(block.start, a), to = Math.min(block.start + block.count, b);
          if (from < to) await w.writeRows(layer, from - a, block.data.subarray((from - block.start) * m.d_model, (to - block.start) * m.d_model));
        }
      }
      await w.finish();
      await w.close();
    }
    await r.close();
  `,
    ],
    { stdio: "inherit", input: "" },
  );
  if (cut.status !== 0) process.exit(1);
}
const merged = join(benchDir, "full-merged");
rmSync(merged, { recursive: true, force: true });
const mg = timed(process.execPath, [bin, "merge", merged, ...shards, "--quiet"]);
const check = timed(process.execPath, [bin, "verify", merged]);
const [mergedFiles, storeFiles] = [merged, store].map(
  (s) => JSON.parse(readFileSync(join(s, "index.json"), "utf8")).files,
);
const same = files.every((f) => {
  const name = f.slice(store.length + 1);
  return mergedFiles[name].sha256 === storeFiles[name].sha256;
});
results.merge = {
  shards: SHARDS,
  seconds: mg.secs,
  peak_rss_mb: mg.rssMb,
  verify_s: check.secs,
  files_equal_fixture: same,
};
console.log(
  `hsm merge of ${SHARDS} shards ${mg.secs.toFixed(1)} s, peak RSS ${mg.rssMb.toFixed(0)} MB; final verify ${check.secs.toFixed(1)} s: ok, files ${same ? "equal" : "DIFFER from"} the fixture's`,
);
rmSync(merged, { recursive: true, force: true });

writeResults();
