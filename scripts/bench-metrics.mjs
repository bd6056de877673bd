#!/usr/bin/env node
// npm run bench:metrics — `hsm metrics` (ISS and KTS, each backend) against a
// careful NumPy + scikit-learn implementation of the same definitions
// (scripts/metrics_peer.py: one float32 GEMM per query block, vectorized
// statistics and bootstrap, BLAS on both cores), on the benchmark-scale
// fixture (39,260 rows, d = 1024, 8 layers), in the same run: wall time and
// peak memory of each process, medians of several runs, whether the two agree
// within metrics.md's tolerances, and the similarity kernel's GFLOP/s beside
// this machine's float32 matrix-multiply peak (NumPy's BLAS) measured here too.
//
// OPENBLAS_CORETYPE and OPENBLAS_L2_SIZE, where the environment sets them to
// work around old OpenBLAS bugs, pin a slower kernel; the peer and the GEMM
// peak run without them, and the BLAS kernel they use is printed.
//
// ISS is a GEMM at heart, so its lines show each side's useful GFLOP/s (every
// perturbed row against every anchor, per layer) as a share of that float32
// GEMM limit. KTS has no one kernel to hold it to (logistic fits, bootstrap
// AUROC); its limit is the least any implementation must do, reading every
// layer's rows once from the page cache on every core at the rate measured
// here too, and its lines show each side's share of that.
import { spawnSync } from "node:child_process";
import { existsSync, mkdirSync, readFileSync, writeFileSync } from "node:fs";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";

import { agreement, describeBlas, envWithout, issFlops, median, readLimit, share, timed } from "./bench-util.mjs";

const root = join(dirname(fileURLToPath(import.meta.url)), "..");
const benchDir = process.env.HSM_BENCH_DIR ?? join(root, ".bench");
const fixture = join(benchDir, "fixture");
const store = join(fixture, "store");
const scored = join(fixture, "scored.jsonl");
const runs = Number(process.env.HSM_BENCH_RUNS ?? 3);
const backends = (process.env.HSM_BENCH_BACKENDS ?? "native,wasm").split(",");
const metricNames = (process.env.HSM_BENCH_METRICS ?? "iss,kts").split(",");
// The wasm backend is single-threaded and slow at ISS's products; it runs once unless asked.
const slowRuns = Number(process.env.HSM_BENCH_SLOW_RUNS ?? 1);
const python = process.env.HSM_PYTHON ?? "/usr/bin/python3";
const bin = join(root, "bin", "hsm.js");
const peerEnv = envWithout("OPENBLAS_CORETYPE", "OPENBLAS_L2_SIZE");
mkdirSync(benchDir, { recursive: true });
if (!existsSync(join(store, "index.json"))) {
  const r = spawnSync(process.execPath, [bin, "fixture", fixture, "--bench"], { stdio: "inherit" });
  if (r.status !== 0) process.exit(1);
}

const manifest = JSON.parse(readFileSync(join(store, "index.json"), "utf8"));
const issWork = issFlops(manifest);

// KTS's limit: the store's layers read once from the page cache, every core at once.
const readLimitRate = readLimit(Object.keys(manifest.files).map((f) => join(store, f)));
const readSeconds = readLimitRate.bytes / 1e9 / readLimitRate.gb_per_s;

const results = {
  date: new Date().toISOString(),
  runs,
  rows: 39260,
  d: 1024,
  layers: 8,
  read_limit: { ...readLimitRate, seconds: readSeconds },
  metrics: {},
};
for (const metric of metricNames) {
  const entry = (results.metrics[metric] = {});
  const samples = Object.fromEntries([...backends, "peer"].map((b) => [b, []]));
  for (let i = 0; i < runs; i++) {
    // Interleave the contenders so that background load hits them alike.
    for (const b of backends) {
      if (b !== "native" && i >= slowRuns) continue;
      samples[b].push(
        timed(process.execPath, [
          bin,
          "metrics",
          store,
          "--scored",
          scored,
          "--metrics",
          metric,
          "--backend",
          b,
          "--out",
          join(benchDir, `metrics-${b}`),
          "--quiet",
        ]),
      );
    }
    samples.peer.push(
      timed(
        python,
        [
          join(root, "scripts", "metrics_peer.py"),
          store,
          "--scored",
          scored,
          "--metrics",
          metric,
          "--out",
          join(benchDir, `peer-${metric}.json`),
        ],
        peerEnv,
      ),
    );
    console.error(
      `${metric} run ${i + 1}/${runs}: ${Object.entries(samples)
        .filter(([, s]) => s.length > i)
        .map(([b, s]) => `${b} ${s.at(-1).secs.toFixed(1)} s`)
        .join(", ")}`,
    );
  }
  for (const [b, s] of Object.entries(samples))
    entry[b] = { seconds: median(s.map((x) => x.secs)), peak_mb: median(s.map((x) => x.mb)) };
  const peer = JSON.parse(readFileSync(join(benchDir, `peer-${metric}.json`), "utf8"));
  entry.peer.phases = peer.peer.phases;
  if (metric === "iss") entry.peer.gflops = issWork / entry.peer.seconds / 1e9;
  if (metric === "kts") entry.peer.read_limit_seconds_share = readSeconds / entry.peer.seconds;
  results.peer_blas = peer.peer.blas;
  for (const b of backends) {
    entry[b].agreement = agreement(
      JSON.parse(readFileSync(join(benchDir, `metrics-${b}`, `${metric}.json`), "utf8")).rows,
      peer[metric],
    );
    entry[b].time_vs_peer = entry[b].seconds / entry.peer.seconds;
    if (metric === "iss") entry[b].gflops = issWork / entry[b].seconds / 1e9;
    if (metric === "kts") entry[b].read_limit_seconds_share = readSeconds / entry[b].seconds;
    entry[b].memory_vs_peer = entry[b].peak_mb / entry.peer.peak_mb;
  }
}

// The similarity kernel alone, on one layer's shape, against NumPy's float32 GEMM on the same shape.
const kernel = spawnSync(
  process.execPath,
  [
    "-e",
    `
  const { nativeKernels } = await import(${JSON.stringify(join(root, "dist", "kernels", "native.js"))});
  const { kernelOptions } = await import(${JSON.stringify(join(root, "dist", "kernels", "default.js"))});
  const k = nativeKernels(kernelOptions());
  const { Rng } = await import(${JSON.stringify(join(root, "dist", "util", "random.js"))});
  const n = 32717, F = 6543, d = 1024, rng = new Rng(1);
  // Unit rows and anchors, as ISS gives the kernel.
  const unit = (m) => { const v = rng.fillNormal(new Float32Array(m * d)); for (let i = 0; i < m; i++) { let s = 0; for (let j = 0; j < d; j++) s += v[i*d+j] ** 2; s = Math.sqrt(s); for (let j = 0; j < d; j++) v[i*d+j] /= s; } return v; };
  const a = unit(F), x = unit(n);
  for (let i = 0; i < n; i++) for (let j = 0; j < d; j++) x[i*d+j] = 0.3 * a[(i % F)*d+j] + x[i*d+j];
  const own = Int32Array.from({ length: n }, (_, i) => i % F), s = new Float32Array(n), c = new Int32Array(n);
  const rows = Int32Array.from({ length: n }, (_, i) => i);
  const ts = [];
  for (let r = 0; r < 3; r++) { const t = performance.now(); k.rank(x, rows, a, F, d, own, s, c); ts.push((performance.now() - t) / 1000); }
  ts.sort((p, q) => p - q);
  console.log(JSON.stringify({ seconds: ts[1], gflops: 2 * n * F * d / ts[1] / 1e9 }));
`,
  ],
  { encoding: "utf8", input: "", env: process.env },
);
const peak = spawnSync(
  python,
  [
    "-c",
    `
import numpy as np, time, json
x = np.random.rand(32717, 1024).astype(np.float32); a = np.random.rand(6543, 1024).astype(np.float32)
ts = []
for _ in range(3):
    t = time.perf_counter(); x @ a.T; ts.append(time.perf_counter() - t)
ts.sort(); print(json.dumps({"seconds": ts[1], "gflops": 2 * 32717 * 6543 * 1024 / ts[1] / 1e9}))
`,
  ],
  { encoding: "utf8", env: peerEnv },
);
try {
  results.kernel = JSON.parse(kernel.stdout.trim().split("\n").at(-1));
} catch {
  results.kernel = { error: kernel.stderr.slice(0, 300) };
}
results.numpy_sgemm = JSON.parse(peak.stdout.trim());
writeFileSync(join(benchDir, "bench-metrics.json"), JSON.stringify(results, null, 2) + "\n");

const fmt = (x) => (x === 0 ? "0" : x.toExponential(1));
console.log(
  `hsm metrics vs NumPy + scikit-learn — 39,260 rows, d = 1024, 8 layers; medians of ${runs} runs (${slowRuns} for backends other than native)`,
);
console.log(`  peer BLAS: ${describeBlas(results.peer_blas)}`);
// ISS is a GEMM at heart: each side's useful GFLOP/s against NumPy's float32 GEMM on the same shape, measured above.
// KTS: the read limit's time as a share of each side's.
const limitShare = (e) =>
  e.gflops && results.numpy_sgemm?.gflops
    ? `; ${e.gflops.toFixed(0)} GFLOP/s of similarity work, ${share(e.gflops, results.numpy_sgemm.gflops)} of the float32 GEMM limit`
    : e.read_limit_seconds_share
      ? `; ${share(e.read_limit_seconds_share, 1)} of the read limit`
      : "";
for (const [metric, entry] of Object.entries(results.metrics)) {
  const phases = Object.entries(entry.peer.phases)
    .filter(([, s]) => s > 0)
    .map(([k, s]) => `${k} ${s.toFixed(1)} s`)
    .join(", ");
  console.log(
    `  ${metric.toUpperCase()}: peer ${entry.peer.seconds.toFixed(1)} s, ${entry.peer.peak_mb.toFixed(0)} MB (last run: ${phases})${limitShare(entry.peer)}`,
  );
  for (const b of backends) {
    const e = entry[b];
    console.log(
      `    ${b.padEnd(10)} ${e.seconds.toFixed(1)} s (${e.time_vs_peer.toFixed(2)}x the peer's time), ${e.peak_mb.toFixed(0)} MB (${e.memory_vs_peer.toFixed(2)}x its memory)${limitShare(e)}`,
    );
    const a = e.agreement;
    const devs = Object.entries(a.maxDev)
      .filter(([, v]) => v > 0)
      .map(([f, v]) => `${f} ${fmt(v)}`)
      .join(", ");
    if (a.failures.length) process.exitCode = 1;
    console.log(
      `               ${a.failures.length ? `DISAGREES with the peer on ${a.failures.length} fields: ${a.failures.slice(0, 3).join("; ")}` : `agrees with the peer on all ${a.rows} rows within metrics.md's tolerances`} (largest |Δ|: ${devs || "none"})`,
    );
  }
}
if (results.metrics.kts)
  console.log(
    `  read limit (KTS): the store's ${(readLimitRate.bytes / 1e9).toFixed(2)} GB read once from the page cache, ${readLimitRate.cores} cores at once, at ${readLimitRate.gb_per_s.toFixed(1)} GB/s: ${readSeconds.toFixed(3)} s`,
  );
if (results.kernel.gflops)
  console.log(
    `  similarity kernel ${results.kernel.gflops.toFixed(0)} GFLOP/s; NumPy float32 GEMM on the same shape ${results.numpy_sgemm.gflops.toFixed(0)} GFLOP/s`,
  );
