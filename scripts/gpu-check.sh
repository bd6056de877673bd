#!/usr/bin/env bash
# scripts/gpu-check.sh — does every GPU path of hsm work on this machine, and how fast?
#
# Prints `hsm doctor`, then on the benchmark model (scripts/bench-util.mjs: 12 layers, d_model 512, Llama 3
# vocabulary) runs `hsm extract` and `hsm generate` with --device webgpu (and --device cuda where onnxruntime's CUDA
# provider is installed) against --device cpu, and `hsm metrics --backend webgpu` against the CPU backend on the
# benchmark fixture; for each, exactness beside the CPU's result and rows/s beside the CPU's. A device that is
# absent is reported and skipped; a step that fails or hangs is reported and the script goes on. Exit status 0 when
# every step that ran agreed with the CPU, 1 otherwise.
#
# Knobs: HSM_GPU_CHECK_ROWS (bank rows extracted, default 2000), HSM_GPU_CHECK_GEN_ROWS (rows answered, default
# 256), HSM_GPU_CHECK_FACTS (a fixture of this many facts, d 64, for metrics instead of the benchmark scale),
# HSM_GPU_CHECK_TIMEOUT (seconds a step may take, default 150), HSM_GPU_CHECK_MODEL (another model folder, e.g. a
# small make-model one where the GPU is a software one), HSM_GPU_CHECK_DIR (work folder, default .bench/gpu-check;
# the model is made once under .bench/ as the benchmarks make it).
set -uo pipefail
cd "$(dirname "$0")/.."

ROWS=${HSM_GPU_CHECK_ROWS:-2000}
GEN_ROWS=${HSM_GPU_CHECK_GEN_ROWS:-256}
LIMIT=${HSM_GPU_CHECK_TIMEOUT:-150}
BENCH=${HSM_BENCH_DIR:-.bench}
DIR=${HSM_GPU_CHECK_DIR:-$BENCH/gpu-check}
HSM=(node bin/hsm.js)
failures=0

say() { printf '\n== %s\n' "$*"; }
now() { date +%s.%N; }
since() { awk -v a="$1" -v b="$(now)" 'BEGIN { printf "%.1f", b - a }'; }
per_s() { awk -v n="$1" -v s="$2" 'BEGIN { printf "%.1f", (s > 0 ? n / s : 0) }'; }

# Runs "$@" under the step time limit, output in $DIR/$name.log; says how it ended. Sets $secs.
step() {
  local name=$1
  shift
  local start rc
  start=$(now)
  timeout --kill-after=10 "$LIMIT" "$@" >"$DIR/$name.log" 2>&1
  rc=$?
  secs=$(since "$start")
  if [ "$rc" -eq 0 ]; then return 0; fi
  if [ "$rc" -eq 124 ] || [ "$rc" -eq 137 ]; then
    echo "  $name: FAILED: did not finish within $LIMIT s (see $DIR/$name.log)"
  else
    echo "  $name: FAILED (exit status $rc): $(grep -v -e '^\s*$' -e HSM_DEBUG "$DIR/$name.log" | tail -n 1 | cut -c1-300)"
  fi
  failures=$((failures + 1))
  return 1
}

# A node script from stdin, run with this checkout's dist/ and scripts/ importable.
js() { node --input-type=module - "$@"; }

if [ ! -f dist/index.js ] || [ -n "$(find src -newer dist/index.js -name '*.ts' | head -n 1)" ]; then
  say "building (npm run build)"
  npm run build >/dev/null || { echo "gpu-check: npm run build failed"; exit 1; }
fi
mkdir -p "$DIR"

say "hsm doctor"
"${HSM[@]}" doctor
"${HSM[@]}" doctor --json >"$DIR/doctor.json"
available() {
  js "$DIR/doctor.json" "$1" <<'EOF'
import { readFileSync } from "node:fs";
const [file, name] = process.argv.slice(2);
const f = JSON.parse(readFileSync(file, "utf8")).findings.find((x) => x.name === name);
process.exit(f?.available ? 0 : 1);
EOF
}
devices=(cpu)
if available "onnxruntime webgpu"; then devices+=(webgpu); else echo "gpu-check: no WebGPU adapter for onnxruntime: extract and generate on webgpu skipped"; fi
if available "onnxruntime cuda"; then devices+=(cuda); else echo "gpu-check: onnxruntime's CUDA provider is not installed: --device cuda skipped"; fi

say "the model and banks ($ROWS rows to extract, $GEN_ROWS to answer)"
js "$BENCH" "$ROWS" "$GEN_ROWS" "${HSM_GPU_CHECK_MODEL:-}" <<'EOF' || exit 1
import { benchBank, benchModelAndBank } from "./scripts/bench-util.mjs";
const [dir, rows, genRows, own] = process.argv.slice(2);
const model = own || benchModelAndBank(process.cwd(), dir, Number(rows)).modelDir;
console.log(`model ${model}; banks ${benchBank(dir, Number(rows))}, ${benchBank(dir, Number(genRows))}`);
EOF
MODEL=${HSM_GPU_CHECK_MODEL:-$BENCH/model-12x512}

say "hsm extract --batch-size 16, each device against cpu (largest |Δ| over the row's largest magnitude)"
for dev in "${devices[@]}"; do
  rm -rf "$DIR/extract-$dev"
  step "extract-$dev" "${HSM[@]}" extract --model-dir "$MODEL" --bank "$BENCH/bank-$ROWS.jsonl" \
    --out "$DIR/extract-$dev" --batch-size 16 --device "$dev" --quiet || continue
  line="  $dev: $(per_s "$ROWS" "$secs") rows/s ($secs s)"
  if [ "$dev" = cpu ]; then echo "$line"; continue; fi
  js "$DIR/extract-cpu" "$DIR/extract-$dev" "$line" <<'EOF' || failures=$((failures + 1))
import { existsSync, readFileSync } from "node:fs";
import { join } from "node:path";
const [cpu, other, line] = process.argv.slice(2);
if (!existsSync(join(cpu, "index.json"))) { console.log(`${line}; no CPU store to compare with`); process.exit(1); }
const manifest = (dir) => JSON.parse(readFileSync(join(dir, "index.json"), "utf8"));
const a = manifest(cpu), b = manifest(other);
const f16 = (h) => { const e = (h >> 10) & 31, m = h & 1023, s = h >> 15 ? -1 : 1;
  return e === 31 ? (m ? NaN : s * Infinity) : e ? s * 2 ** (e - 15) * (1 + m / 1024) : s * 2 ** -14 * (m / 1024); };
const rows = (file) => { const buf = readFileSync(file); const len = buf[6] === 1 ? buf.readUInt16LE(8) : buf.readUInt32LE(8);
  const start = (buf[6] === 1 ? 10 : 12) + len; return new Uint16Array(buf.buffer.slice(buf.byteOffset + start, buf.byteOffset + buf.length)); };
const d = a.d_model, at = new Map(b.query_ids.map((q, i) => [q, i]));
let worst = 0, worstAbs = 0;
for (const name of Object.keys(a.files)) {
  const x = rows(join(cpu, name)), y = rows(join(other, name));
  a.query_ids.forEach((q, i) => {
    const j = at.get(q); let top = 0, dev = 0;
    for (let c = 0; c < d; c++) { const u = f16(x[i * d + c]), v = f16(y[j * d + c]);
      top = Math.max(top, Math.abs(u)); dev = Math.max(dev, Number.isNaN(u - v) ? Infinity : Math.abs(u - v)); }
    worstAbs = Math.max(worstAbs, dev); worst = Math.max(worst, top ? dev / top : dev);
  });
}
const tol = a.self_check?.tolerance;
const ok = b.rows_done === a.rows_done && tol !== undefined && worst <= tol;
console.log(`${line}; ${b.rows_done}/${a.rows_done} rows, largest |Δ| ${worstAbs.toExponential(2)}, relative ${worst.toExponential(2)}` +
  ` (${ok ? "within" : "OUTSIDE"} the self-check's tolerance ${tol?.toExponential(2)})`);
process.exit(ok ? 0 : 1);
EOF
done

say "hsm generate --batch-size 8 --max-new-tokens 24, each device against cpu"
for dev in "${devices[@]}"; do
  rm -f "$DIR/generate-$dev.jsonl" "$DIR/generate-$dev.jsonl".*
  step "generate-$dev" "${HSM[@]}" generate --model-dir "$MODEL" --bank "$BENCH/bank-$GEN_ROWS.jsonl" \
    --out "$DIR/generate-$dev.jsonl" --batch-size 8 --max-new-tokens 24 --device "$dev" --quiet || continue
  line="  $dev: $(per_s "$GEN_ROWS" "$secs") rows/s ($secs s)"
  if [ "$dev" = cpu ]; then echo "$line"; continue; fi
  js "$DIR/generate-cpu.jsonl" "$DIR/generate-$dev.jsonl" "$line" <<'EOF' || failures=$((failures + 1))
import { existsSync, readFileSync } from "node:fs";
const [cpu, other, line] = process.argv.slice(2);
if (!existsSync(cpu)) { console.log(`${line}; no CPU answers to compare with`); process.exit(1); }
const read = (f) => new Map(readFileSync(f, "utf8").trim().split("\n").map(JSON.parse).map((r) => [r.query_id, r.raw_response]));
const a = read(cpu), b = read(other);
const same = [...a].filter(([q, text]) => b.get(q) === text).length;
const bytes = readFileSync(cpu).equals(readFileSync(other));
console.log(`${line}; ${same} of ${a.size} answers identical, file ${bytes ? "byte for byte the CPU's" : "NOT byte-identical"}`);
process.exit(same === a.size && b.size === a.size ? 0 : 1);
EOF
done

if [ -n "${HSM_GPU_CHECK_FACTS:-}" ]; then scale=(--facts "$HSM_GPU_CHECK_FACTS" --d 64); else scale=(--bench); fi
say "hsm metrics, ISS and KTS: --backend webgpu against the CPU's (fixture ${scale[*]})"
FIXTURE=$DIR/fixture-${HSM_GPU_CHECK_FACTS:-bench}
if [ ! -f "$FIXTURE/store/index.json" ]; then
  rm -rf "$FIXTURE"
  step fixture "${HSM[@]}" fixture "$FIXTURE" "${scale[@]}" --quiet || FIXTURE=
fi
cpu_backend=native
available "native core" || cpu_backend=wasm
backends=("$cpu_backend")
if available "metrics webgpu"; then backends+=(webgpu); else echo "gpu-check: TensorFlow.js WebGPU cannot run here: metrics on webgpu skipped"; fi
for backend in "${backends[@]}"; do
  [ -n "$FIXTURE" ] || break
  rm -rf "$DIR/metrics-$backend"
  step "metrics-$backend" "${HSM[@]}" metrics "$FIXTURE/store" --scored "$FIXTURE/scored.jsonl" \
    --out "$DIR/metrics-$backend" --backend "$backend" --quiet || continue
  js "$FIXTURE/store" "$DIR/metrics-$cpu_backend" "$DIR/metrics-$backend" "$secs" <<'EOF' || failures=$((failures + 1))
import { existsSync, readFileSync } from "node:fs";
import { join } from "node:path";
import { agreement } from "./scripts/bench-util.mjs";
const [store, cpu, mine, secs] = process.argv.slice(2);
const m = JSON.parse(readFileSync(join(store, "index.json"), "utf8"));
const read = (dir, metric) => JSON.parse(readFileSync(join(dir, `${metric}.json`), "utf8"));
const iss = read(mine, "iss");
const speed = `${((m.rows_done * m.layers.length) / Number(secs)).toFixed(0)} rows/s over ${m.layers.length} layers (${secs} s)`;
let line = `  ${iss.config.backend} (rank on ${iss.config.kernels.rank}): ${speed}`;
if (cpu === mine) { console.log(line); process.exit(0); }
if (!existsSync(join(cpu, "iss.json"))) { console.log(`${line}; no CPU result to compare with`); process.exit(1); }
const same = iss.rows.filter((r, i) => JSON.stringify(r) === JSON.stringify(read(cpu, "iss").rows[i])).length;
const kts = agreement(read(mine, "kts").rows, read(cpu, "kts").rows);
console.log(`${line}; ISS ${same} of ${iss.rows.length} rows identical; KTS ${kts.failures.length ? "OUTSIDE" : "within"} ` +
  `the documented tolerances (largest |Δ| kts ${(kts.maxDev.kts ?? 0).toExponential(2)}, auroc ${(kts.maxDev.auroc ?? 0).toExponential(2)})`);
for (const f of kts.failures.slice(0, 5)) console.log(`    ${f}`);
process.exit(same === iss.rows.length && !kts.failures.length ? 0 : 1);
EOF
done

say "gpu-check: $([ "$failures" -eq 0 ] && echo "every step that ran agreed with the CPU" || echo "$failures step(s) failed or disagreed (above)")"
[ "$failures" -eq 0 ]
