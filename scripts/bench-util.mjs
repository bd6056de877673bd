// Shared by the benchmark scripts: medians, a command's wall time and peak
// memory, and the tolerances two implementations of a metric must agree within.
import { spawn, spawnSync } from "node:child_process";
import { existsSync, mkdirSync, writeFileSync } from "node:fs";
import { availableParallelism } from "node:os";
import { join } from "node:path";

export const median = (xs) => {
  const v = [...xs].sort((a, b) => a - b);
  const m = v.length >> 1;
  return v.length % 2 ? v[m] : (v[m - 1] + v[m]) / 2;
};

/** Runs `cmd args` under /usr/bin/time: wall seconds, peak resident memory (MB) and stdout. `env` replaces the environment. */
export function timed(cmd, args, env = process.env) {
  const r = spawnSync("/usr/bin/time", ["-f", "%e %M", cmd, ...args], { encoding: "utf8", maxBuffer: 1 << 26, env });
  if (r.status !== 0) throw new Error(`${cmd} ${args.join(" ")} failed:\n${r.stderr}`);
  const [secs, kb] = r.stderr.trim().split("\n").at(-1).split(" ").map(Number);
  return { secs, mb: kb / 1024, stdout: r.stdout };
}

/** The environment without the given variables. */
export function envWithout(...names) {
  const env = { ...process.env };
  for (const n of names) delete env[n];
  return env;
}

// metrics.md's tolerances for agreement between implementations.
const POINT = { iss: 1e-4, own_cos: 1e-4, other_cos: 1e-4, auroc: 5e-3, kts: 2e-2 };
const EXACT = ["n_queries", "n_facts", "n_correct", "excluded_nonfinite", "skipped_no_anchor"];
// Exact except for rows whose own score is within 1e-6 of a competitor's, which neither side reports.
const RANKS = ["r_at_1", "mrr"];

/**
 * Compares two implementations' rows (matched on layer and family) field by
 * field: the largest deviation of each field, and the fields outside the
 * tolerance. Intervals are held to max(0.02, 0.15 × the first side's width).
 */
export function agreement(mine, peer) {
  const key = (r) => `${r.layer}/${r.family}`;
  const peerRows = new Map(peer.map((r) => [key(r), r]));
  const maxDev = {};
  const failures = [];
  const note = (field, dev, ok, row) => {
    maxDev[field] = Math.max(maxDev[field] ?? 0, dev);
    if (!ok) failures.push(`${key(row)} ${field}: ${row[field]} vs ${peerRows.get(key(row))[field]}`);
  };
  for (const m of mine) {
    const p = peerRows.get(key(m));
    if (!p) {
      failures.push(`${key(m)}: missing from the peer`);
      continue;
    }
    for (const field of Object.keys(m)) {
      if (!(field in p) || typeof m[field] === "string" || field === "layer") continue;
      const a = m[field];
      const b = p[field];
      if (a === null || b === null) {
        note(field, 0, a === b, m);
        continue;
      }
      const dev = Math.abs(a - b);
      const ci = /^(.*)_ci_(low|high)$/.exec(field);
      if (ci) note(field, dev, dev <= Math.max(0.02, 0.15 * (m[`${ci[1]}_ci_high`] - m[`${ci[1]}_ci_low`])), m);
      else if (field in POINT) note(field, dev, dev <= POINT[field], m);
      else if (EXACT.includes(field)) note(field, dev, dev === 0, m);
      else if (RANKS.includes(field)) note(field, dev, true, m);
    }
  }
  return { rows: mine.length, maxDev, failures };
}

/** ISS's useful work over a store (its index.json): every perturbed row against every anchor, once per layer, d multiply-adds each. */
export function issFlops(manifest) {
  const anchors = manifest.condition_families.filter((f) => f === "anchor").length;
  return 2 * (manifest.query_ids.length - anchors) * anchors * manifest.d_model * manifest.layers.length;
}

/** The BLAS libraries a Python peer ran on, as scripts/metrics_peer.py's `blas_info` lists them, in one line. */
export function describeBlas(blas) {
  return blas
    .map(
      (p) =>
        `${p.internal_api ?? "?"} ${p.version ?? ""} (${p.architecture ?? "?"} kernel, ${p.num_threads ?? "?"} threads)`,
    )
    .join("; ");
}

/**
 * Whether `python` can import torch and onnx (the PyTorch peers); installs
 * Debian's python3-torch and python3-onnx with apt-get when missing and root,
 * otherwise says how and returns false.
 */
export function ensureTorch(python) {
  const has = () => spawnSync(python, ["-c", "import torch, onnx"], { stdio: "ignore" }).status === 0;
  if (has()) return true;
  if (process.getuid?.() !== 0) {
    console.error(
      "The PyTorch peer needs Debian's python3-torch and python3-onnx: sudo apt-get install python3-torch python3-onnx",
    );
    return false;
  }
  console.error("installing python3-torch and python3-onnx for the PyTorch peer (apt-get)");
  const env = { ...process.env, DEBIAN_FRONTEND: "noninteractive" };
  spawnSync("apt-get", ["update", "-qq"], { stdio: "inherit", env });
  spawnSync("apt-get", ["install", "-y", "-qq", "python3-torch", "python3-onnx"], { stdio: "inherit", env });
  return has();
}

/**
 * Tokenizes the main-forward rows of `bank` with hsm's own prompt and
 * tokenizer (left truncation to 192 tokens, BOS kept) and writes their token
 * ids to `out` as JSON (`query_ids`, and `ids`: one list per row, in bank
 * order): the input of the PyTorch peers, since Debian ships no Python
 * tokenizers package.
 */
export async function writeTokenIds(root, modelDir, bank, out) {
  const dist = (...p) => import(join(root, "dist", ...p));
  const { mainForwardRows, readBank } = await dist("bank", "bank.js");
  const { buildPrompt } = await dist("bank", "prompt.js");
  const { PromptTokenizer } = await dist("model", "tokenizer.js");
  const tokenizer = await PromptTokenizer.load(modelDir);
  const rows = mainForwardRows(await readBank(bank));
  writeFileSync(
    out,
    JSON.stringify({ query_ids: rows.map((r) => r.query_id), ids: rows.map((r) => tokenizer.encode(buildPrompt(r))) }),
  );
}

// The benchmark model's geometry, as make-model flags (its seed is make-model's default).
const BENCH_MODEL_ARGS = [
  "--layers",
  "12",
  "--hidden",
  "512",
  "--heads",
  "8",
  "--kv-heads",
  "4",
  "--intermediate",
  "1536",
];

/**
 * The benchmark model written in another make-model `--style` (`q4`, `fp16`,
 * …) from the same seeded weights, made once under `benchDir`; returns its
 * folder.
 */
export function benchModelInStyle(root, benchDir, style) {
  const dir = join(benchDir, `model-12x512-${style}`);
  if (!existsSync(join(dir, "config.json"))) {
    mkdirSync(benchDir, { recursive: true });
    const r = spawnSync(
      process.execPath,
      [join(root, "bin", "hsm.js"), "make-model", dir, "--style", style, ...BENCH_MODEL_ARGS],
      { stdio: "inherit" },
    );
    if (r.status !== 0) process.exit(1);
  }
  return dir;
}

/**
 * The extraction and generation benchmarks' model and bank, made once under
 * `benchDir`: a 12-layer, d_model 512 Llama-style model with the Llama 3
 * vocabulary, and a deterministic bank of `rows` rows (see benchBank).
 */
export function benchModelAndBank(root, benchDir, rows) {
  const bin = join(root, "bin", "hsm.js");
  const modelDir = join(benchDir, "model-12x512");
  mkdirSync(benchDir, { recursive: true });
  if (!existsSync(join(modelDir, "model.onnx"))) {
    const r = spawnSync(process.execPath, [bin, "make-model", modelDir, ...BENCH_MODEL_ARGS], { stdio: "inherit" });
    if (r.status !== 0) process.exit(1);
  }
  return { modelDir, bank: benchBank(benchDir, rows) };
}

/**
 * The benchmarks' bank of `rows` rows, made once under `benchDir`: prompts
 * mostly 10–80 tokens, about 3% past 192; a shorter bank is a prefix of a
 * longer one.
 */
export function benchBank(benchDir, rows) {
  const bank = join(benchDir, `bank-${rows}.jsonl`);
  mkdirSync(benchDir, { recursive: true });
  if (!existsSync(bank)) {
    const words =
      "the of capital river city which year who wrote country largest first born name famous mountain island language currency president founded element discovered ocean border".split(
        " ",
      );
    let s = 12345;
    const rand = () => (s = (Math.imul(s, 1103515245) + 12345) >>> 0) / 4294967296;
    const families = ["anchor", "paraphrase", "typo", "distractor", "translation", "reorder"];
    const lines = [];
    for (let i = 0; i < rows; i++) {
      const u = rand();
      const n =
        u < 0.03
          ? 160 + Math.floor(rand() * 140)
          : u < 0.7
            ? 4 + Math.floor(rand() * 24)
            : 28 + Math.floor(rand() * 30);
      const q = Array.from({ length: n }, () => words[Math.floor(rand() * words.length)]).join(" ") + "?";
      lines.push(
        JSON.stringify({
          query_id: `q${i}`,
          fact_id: `f${Math.floor(i / 6)}`,
          condition_family: families[i % 6],
          query: q,
          use_for_main_forward: true,
          answers: ["x"],
        }),
      );
    }
    writeFileSync(bank, lines.join("\n") + "\n");
  }
  return bank;
}

/**
 * This machine's float32 matrix-multiply limit, measured in the same run as the contenders: NumPy's GEMM (its BLAS
 * on every core, OpenBLAS unpinned through `env`) on a 2048-square product, median of five. GFLOP/s and the BLAS.
 */
export function gemmLimit(python, env) {
  const r = spawnSync(
    python,
    [
      "-c",
      `
import json, time, numpy as np
n = 2048
a = np.random.rand(n, n).astype(np.float32); b = np.random.rand(n, n).astype(np.float32)
a @ b
ts = []
for _ in range(5):
    t = time.perf_counter(); a @ b; ts.append(time.perf_counter() - t)
ts.sort()
try:
    from threadpoolctl import threadpool_info
    blas = ", ".join(f"{p.get('internal_api')} {p.get('architecture')}" for p in threadpool_info() if p.get("user_api") == "blas")
except Exception:
    blas = "?"
print(json.dumps({"gflops": 2 * n ** 3 / ts[2] / 1e9, "blas": blas}))
`,
    ],
    { encoding: "utf8", env },
  );
  if (r.status !== 0) throw new Error(`the GEMM limit could not be measured:\n${r.stderr}`);
  return JSON.parse(r.stdout.trim());
}

/**
 * This machine's SHA-256 rate over memory, one stream per core: every core hashing at once (Node's crypto, OpenSSL's
 * SHA-NI code where the CPU has it), each for about a second over a 64 MiB buffer; the sum of their rates in GB/s.
 * Several streams per core (hsm's lanes) can exceed it.
 */
export async function shaLimit() {
  const script = `
const { createHash } = require("node:crypto");
const buf = Buffer.alloc(64 << 20, 7); let bytes = 0; const t = performance.now();
while (performance.now() - t < 1000) { createHash("sha256").update(buf).digest(); bytes += buf.length; }
process.stdout.write(String(bytes / ((performance.now() - t) / 1000)));`;
  const one = () =>
    new Promise((resolve, reject) => {
      const child = spawn(process.execPath, ["-e", script], { stdio: ["ignore", "pipe", "inherit"] });
      let out = "";
      child.stdout.on("data", (d) => (out += d));
      child.on("close", (code) => (code === 0 ? resolve(Number(out)) : reject(new Error("the SHA-256 limit failed"))));
    });
  const rates = await Promise.all(Array.from({ length: availableParallelism() }, one));
  return { gb_per_s: rates.reduce((s, x) => s + x, 0) / 1e9, cores: rates.length };
}

/**
 * This machine's rate for reading files from the page cache, every core at once: each file read whole into memory
 * in one read per core, side by side, after a first read has brought it into the cache; the median of five passes over
 * all the files, in GB/s. It runs in a process of its own whose I/O thread pool has a thread per core (Node's has 4
 * unless told otherwise).
 */
export function readLimit(paths) {
  const cores = availableParallelism();
  const script = `
const { open } = require("node:fs/promises");
(async () => {
  const paths = process.argv.slice(1), cores = ${cores};
  const handles = await Promise.all(paths.map((p) => open(p)));
  const sizes = await Promise.all(handles.map(async (h) => (await h.stat()).size));
  const buf = new Uint8Array(Math.max(...sizes));
  const pass = async () => {
    const t = performance.now();
    for (const [i, h] of handles.entries()) {
      const part = Math.ceil(sizes[i] / cores / 4096) * 4096;
      const reads = [];
      for (let at = 0; at < sizes[i]; at += part) reads.push(h.read(buf, at, Math.min(part, sizes[i] - at), at));
      await Promise.all(reads);
    }
    return (performance.now() - t) / 1000;
  };
  await pass();
  const secs = [];
  for (let r = 0; r < 5; r++) secs.push(await pass());
  secs.sort((a, b) => a - b);
  const bytes = sizes.reduce((s, x) => s + x, 0);
  process.stdout.write(JSON.stringify({ gb_per_s: bytes / secs[2] / 1e9, bytes, cores }));
  await Promise.all(handles.map((h) => h.close()));
})();`;
  const r = spawnSync(process.execPath, ["-e", script, ...paths], {
    encoding: "utf8",
    env: { ...process.env, UV_THREADPOOL_SIZE: String(Math.max(4, cores)) },
  });
  if (r.status !== 0) throw new Error(`the read limit could not be measured:\n${r.stderr}`);
  return JSON.parse(r.stdout);
}

/** `achieved` as a percentage of `limit`, for the benchmarks' "share of the machine's limit" (a tenth below 10%). */
export const share = (achieved, limit) => {
  const percent = (100 * achieved) / limit;
  return `${percent.toFixed(percent < 10 ? 1 : 0)}%`;
};

/**
 * The useful float32 work of running a Llama-shaped decoder's blocks (no LM head) over prompts of the given token
 * counts, from its config.json: each token's projections and gated MLP, and causal attention over the tokens before
 * it. Padding is not useful work and is not counted, so one figure serves every contender.
 */
export function llamaBlockFlops(config, tokenCounts) {
  const d = config.hidden_size;
  const heads = config.num_attention_heads;
  const kv = ((config.num_key_value_heads ?? heads) * d) / heads;
  const perToken = 2 * (2 * d * d + 2 * d * kv + 3 * d * config.intermediate_size);
  let flops = 0;
  for (const n of tokenCounts) flops += n * perToken + 2 * 2 * d * ((n * (n + 1)) / 2);
  return flops * config.num_hidden_layers;
}

/**
 * The useful float32 work of greedy decoding with a KV cache: each row's prompt through the blocks
 * ({@link llamaBlockFlops}), then every further token through the blocks attending over the context so far, and the
 * LM head once for each token produced. `rows` holds [prompt tokens, tokens produced] pairs.
 */
export function llamaGenerateFlops(config, rows) {
  const d = config.hidden_size;
  const heads = config.num_attention_heads;
  const kv = ((config.num_key_value_heads ?? heads) * d) / heads;
  const perToken = 2 * (2 * d * d + 2 * d * kv + 3 * d * config.intermediate_size);
  let flops = llamaBlockFlops(
    config,
    rows.map(([prompt]) => prompt),
  );
  for (const [prompt, produced] of rows) {
    for (let k = 1; k < produced; k++) flops += config.num_hidden_layers * (perToken + 2 * 2 * d * (prompt + k));
    flops += produced * 2 * d * config.vocab_size;
  }
  return flops;
}
