#!/usr/bin/env node
// npm run bench — the store benchmarks, each against a peer measured in the same run:
//   1. `hsm verify` on the benchmark-scale fixture vs `sha256sum` over the same files,
//      beside Node's own start-up (`node -e 0`), which is part of every hsm command,
//      and beside the most a Node command could do here: a bare process that loads
//      the native core and hashes the same files on every core, and nothing else;
//   2. float32 <-> float16 conversion, native core vs the TypeScript fallback.
// Medians of several runs; the machine is shared, so ratios matter more than seconds.
//
// Where NODE_EXTRA_CA_CERTS is set, Node 20 parses that certificate bundle (and
// its own) before any script runs, tens of milliseconds on every start
// (nodejs/node#40524); hsm makes no TLS connection. The verify figure is then
// also taken without that variable, and both are printed.
import { spawnSync } from "node:child_process";
import { existsSync, mkdirSync, readdirSync, statSync, writeFileSync } from "node:fs";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";

import { envWithout, median, shaLimit, share } from "./bench-util.mjs";

const root = join(dirname(fileURLToPath(import.meta.url)), "..");
const benchDir = process.env.HSM_BENCH_DIR ?? join(root, ".bench");
const fixture = join(benchDir, "fixture");
const store = join(fixture, "store");
const runs = Number(process.env.HSM_BENCH_RUNS ?? 7);
const bin = join(root, "bin", "hsm.js");

function timeCommand(cmd, args, env = process.env) {
  const t0 = performance.now();
  const r = spawnSync(cmd, args, { stdio: ["ignore", "pipe", "pipe"], maxBuffer: 1 << 26, env });
  const secs = (performance.now() - t0) / 1000;
  if (r.status !== 0) throw new Error(`${cmd} ${args.join(" ")} failed: ${r.stderr}`);
  return secs;
}

mkdirSync(benchDir, { recursive: true });
if (!existsSync(join(store, "index.json"))) {
  console.error(`writing the benchmark-scale fixture to ${fixture} (once; reused by later runs)`);
  const r = spawnSync(process.execPath, [bin, "fixture", fixture, "--bench"], { stdio: "inherit" });
  if (r.status !== 0) process.exit(1);
}
const files = readdirSync(store)
  .filter((n) => n.endsWith(".npy"))
  .sort()
  .map((n) => join(store, n));
const sizes = files.map((f) => statSync(f).size);
const bytes = sizes.reduce((s, n) => s + n, 0);

// Warm the page cache so both tools read from memory, not disk. `cat` reads
// them, not this process: a parent holding the files' bytes would make every
// spawn below slower, which costs the faster command the larger share.
for (const f of files) spawnSync("cat", [f], { stdio: ["ignore", "ignore", "ignore"] });

// The ceiling for hsm verify on this store and machine: a bare Node process that
// loads the native core and hashes the same files on every core, counting their
// float16 values as verify does, and nothing more (no command line, manifest,
// headers or report). Its ratio to sha256sum is the most verify could reach here.
const { NPY_MAX_PRELUDE, parseNpyHeader } = await import(join(root, "dist", "store", "npy.js"));
const { readInputSync } = await import(join(root, "dist", "util", "fs.js"));
const {
  nativeAddonPath: addon,
  nativeKernels: loadNativeKernels,
  nativeShaPaths,
  nativeSimd,
} = await import(join(root, "dist", "kernels", "native.js"));
const dataFrom = files.map((f, i) => {
  const prelude = readInputSync(f, {}, { offset: 0, length: Math.min(sizes[i], NPY_MAX_PRELUDE) });
  return parseNpyHeader(prelude, f).dataOffset;
});
const hashOnly = [
  "-e",
  `const [addon, files, from] = process.argv.slice(1);
const paths = JSON.parse(files);
require(addon)
  .sha256Files(paths, Float64Array.from(JSON.parse(from)), new Uint8Array(paths.length).fill(2), require("node:os").availableParallelism())
  .then((r) => { if (r.some((x) => typeof x === "number")) process.exit(1); });`,
  addon ?? "",
  JSON.stringify(files),
  JSON.stringify(dataFrom),
];

const caBundle = process.env.NODE_EXTRA_CA_CERTS;
const withoutCa = envWithout("NODE_EXTRA_CA_CERTS");
const times = { verify: [], sha: [], node: [], floor: [], verifyWithoutCa: [], nodeWithoutCa: [], floorWithoutCa: [] };
for (let i = 0; i < runs; i++) {
  // Alternate so that background load hits all alike.
  times.verify.push(timeCommand(process.execPath, [bin, "verify", store]));
  times.sha.push(timeCommand("sha256sum", files));
  times.node.push(timeCommand(process.execPath, ["-e", "0"]));
  if (addon) times.floor.push(timeCommand(process.execPath, hashOnly));
  if (caBundle) {
    times.verifyWithoutCa.push(timeCommand(process.execPath, [bin, "verify", store], withoutCa));
    times.nodeWithoutCa.push(timeCommand(process.execPath, ["-e", "0"], withoutCa));
    if (addon) times.floorWithoutCa.push(timeCommand(process.execPath, hashOnly, withoutCa));
  }
}

// Two sizes: a row block that stays in cache (1M values, what the store reader
// and writer convert at a time) and a whole-layer buffer far larger than cache.
const { kernelOptions } = await import(join(root, "dist", "kernels", "default.js"));
const { typescriptKernels } = await import(join(root, "dist", "kernels", "typescript", "index.js"));
const nativeKernels = loadNativeKernels(kernelOptions());
const conv = {};
for (const n of [1 << 20, 1 << 24]) {
  const src = new Float32Array(n);
  for (let i = 0; i < n; i++) src[i] = Math.sin(i) * 1000 * (i % 7);
  const half = new Uint16Array(n);
  const wide = new Float32Array(n);
  const reps = Math.max(runs, Math.round((runs * (1 << 24)) / n / 4));
  const convMedian = (k, dir) => {
    const ts = [];
    for (let i = 0; i <= reps; i++) {
      const t0 = performance.now();
      if (dir === "f32->f16") k.f32ToF16(src, half);
      else k.f16ToF32(half, wide);
      if (i > 0) ts.push((performance.now() - t0) / 1000); // the first run pays the page faults
    }
    return median(ts);
  };
  for (const dir of ["f32->f16", "f16->f32"]) {
    // Alternate the implementations so that background load hits both alike.
    const t = { typescript: [], native: [] };
    for (let r = 0; r < 3; r++) {
      t.typescript.push(convMedian(typescriptKernels, dir));
      if (nativeKernels) t.native.push(convMedian(nativeKernels, dir));
    }
    conv[`${dir} ${n >= 1 << 24 ? "16M" : "1M"}`] = {
      n,
      typescript: median(t.typescript),
      native: nativeKernels ? median(t.native) : undefined,
    };
  }
}

// The machine's limit for hashing: every core's SHA-256 over memory at once, measured now.
const sha = await shaLimit();
const rate = (secs) => bytes / secs / 1e9;

const results = {
  date: new Date().toISOString(),
  runs,
  sha256_limit: sha,
  verify: {
    files: files.length,
    bytes,
    hsm_verify_s: median(times.verify),
    sha256sum_s: median(times.sha),
    speedup_vs_sha256sum: median(times.sha) / median(times.verify),
    node_start_s: median(times.node),
    hash_only_s: addon ? median(times.floor) : null,
    ...(caBundle
      ? {
          node_extra_ca_certs: caBundle,
          without_node_extra_ca_certs: {
            hsm_verify_s: median(times.verifyWithoutCa),
            speedup_vs_sha256sum: median(times.sha) / median(times.verifyWithoutCa),
            node_start_s: median(times.nodeWithoutCa),
            hash_only_s: addon ? median(times.floorWithoutCa) : null,
          },
        }
      : {}),
  },
  float16: Object.fromEntries(
    Object.entries(conv).map(([dir, t]) => [
      dir,
      {
        values: t.n,
        typescript_s: t.typescript,
        native_s: t.native ?? null,
        native_gvalues_per_s: t.native ? t.n / t.native / 1e9 : null,
        speedup_native_vs_typescript: t.native ? t.typescript / t.native : null,
      },
    ]),
  ),
  native: nativeSimd ?? "not built",
  sha256: nativeShaPaths() ?? "node:crypto",
};
writeFileSync(join(benchDir, "bench-store.json"), JSON.stringify(results, null, 2) + "\n");

const v = results.verify;
console.log(
  `hsm verify vs sha256sum — ${v.files} files, ${(v.bytes / 1e6).toFixed(1)} MB, median of ${runs} (whole commands, page cache warm; hsm's sha256: ${results.sha256})`,
);
console.log(
  `  hsm verify   ${v.hsm_verify_s.toFixed(3)} s (of which Node's own start-up, node -e 0: ${v.node_start_s.toFixed(3)} s)`,
);
console.log(`  sha256sum    ${v.sha256sum_s.toFixed(3)} s`);
console.log(
  `  share of the limit (one SHA-256 stream per core over memory, ${sha.cores} cores, ${sha.gb_per_s.toFixed(2)} GB/s): hsm verify ${share(rate(v.hsm_verify_s), sha.gb_per_s)}, sha256sum ${share(rate(v.sha256sum_s), sha.gb_per_s)}`,
);
console.log(`  ratio        ${v.speedup_vs_sha256sum.toFixed(2)}x faster`);
const ceiling = (hashOnly) =>
  hashOnly === null
    ? "  hashing alone: not measured (the native core is not built)"
    : `  hashing alone (a bare Node process: the native core on every core, no checks) ${hashOnly.toFixed(3)} s: ` +
      `the most verify could reach here is ${(v.sha256sum_s / hashOnly).toFixed(2)}x`;
console.log(ceiling(v.hash_only_s));
if (v.without_node_extra_ca_certs) {
  const w = v.without_node_extra_ca_certs;
  console.log(
    `  NODE_EXTRA_CA_CERTS is set here (${v.node_extra_ca_certs}): Node 20 parses it before any script runs, ${(v.node_start_s - w.node_start_s).toFixed(3)} s of every start (nodejs/node#40524). Without it, in the same run:`,
  );
  console.log(
    `  hsm verify   ${w.hsm_verify_s.toFixed(3)} s (Node's start-up: ${w.node_start_s.toFixed(3)} s), ${share(rate(w.hsm_verify_s), sha.gb_per_s)} of the limit`,
  );
  console.log(`  ratio        ${w.speedup_vs_sha256sum.toFixed(2)}x faster`);
  console.log(ceiling(w.hash_only_s));
}
console.log(`float16 conversion — native core: ${results.native}; medians`);
for (const [dir, r] of Object.entries(results.float16)) {
  const nat = r.native_s
    ? `native ${(r.native_s * 1000).toFixed(2)} ms (${r.native_gvalues_per_s.toFixed(2)} G values/s)`
    : "native n/a";
  const ratio = r.speedup_native_vs_typescript ? `${r.speedup_native_vs_typescript.toFixed(1)}x` : "n/a";
  console.log(`  ${dir.padEnd(13)} typescript ${(r.typescript_s * 1000).toFixed(2)} ms, ${nat}, ratio ${ratio}`);
}
console.log(`results: ${join(benchDir, "bench-store.json")}`);
