/**
 * Runs the requested metrics (src/metrics/registry.ts) over a hidden-state
 * store, exactly as docs/metrics.md defines them. One layer at a time: the
 * layer is read in row blocks (requested while the layer before is computed)
 * into one float32 matrix, read once, and handed read-only to each metric in
 * turn; every kernel comes from the one backend selected.
 */
import { ANCHOR_FAMILY } from "../bank/prompt.js";
import { DEFAULT_BACKEND, DEFAULT_BOOTSTRAP, DEFAULT_FOLDS, DEFAULT_PROBE_C, DEFAULT_SEED } from "../defaults.js";
import { openKernels, type BackendName } from "../kernels/registry.js";
import type { Manifest } from "../store/manifest.js";
import { StoreReader } from "../store/reader.js";
import { readLabels } from "./labels.js";
import { MetricsError, type LayerData, type MetricName, type MetricRow, type MetricSettings } from "./metric.js";
import { PROBE_MAX_ITERATIONS } from "./probe.js";
import { METRICS, type MetricRegistry } from "./registry.js";

/** The largest float16 layer read ahead while the layer before is computed (the benchmark's 39,260 × 1024 is 80 MB). */
const READ_AHEAD_BYTES = 128 * 2 ** 20;

export { ALL_FAMILIES, MetricsError } from "./metric.js";
export type { IssRow } from "./iss.js";
export type { KtsRow } from "./kts.js";

export interface MetricsOptions {
  /** The query bank, for stores written by other tools whose manifest lacks fact ids and families. */
  bank?: string;
  /** Metric names from the registry (default: every metric of the registry). */
  metrics?: string[];
  /** The metrics available (default: the built-in ones). */
  registry?: MetricRegistry;
  /** Scored JSONL; needed by metrics that need labels (KTS). */
  scored?: string;
  backend?: BackendName;
  /** Threads for the native kernels (default: os.availableParallelism()). */
  threads?: number;
  probeC?: number;
  folds?: number;
  bootstrap?: number;
  seed?: number;
  /** Stored layers to compute (default: all). */
  layers?: number[];
  /** Families to report (default: all); "all" pools every non-anchor family regardless. */
  families?: string[];
  allowIncomplete?: boolean;
  abstainAsIncorrect?: boolean;
  allowMissingLabels?: boolean;
  /** Told as each layer's phase starts; `done` of `total` layers are finished (for a rate and ETA). */
  onProgress?: (layer: number, phase: string, done: number, total: number) => void;
  /** Told why `--backend auto` passed over a backend (default: a process warning). */
  onBackendSkipped?: (backend: string, reason: string) => void;
}

export interface MetricsResult {
  /** The manifest of the store the metrics were computed over (for the output files). */
  manifest: Manifest;
  config: Record<string, unknown>;
  backend: { name: string; tfjs: string; simd: string };
  /** Rows per metric name, for every metric computed (typed by `metricRows(result, metric)`). */
  rows: Record<MetricName, MetricRow[]>;
}

export async function computeMetrics(store: string, o: MetricsOptions = {}): Promise<MetricsResult> {
  const registry = o.registry ?? METRICS;
  const names = o.metrics ?? registry.map((m) => m.name);
  const metrics = registry.filter((m) => names.includes(m.name));
  for (const name of names) if (!registry.some((m) => m.name === name)) throw new MetricsError(`Expected --metrics from ${registry.map((m) => m.name).join(", ")} but received "${name}"`);
  const settings: MetricSettings = {
    probeC: o.probeC ?? DEFAULT_PROBE_C,
    folds: o.folds ?? DEFAULT_FOLDS,
    bootstrap: o.bootstrap ?? DEFAULT_BOOTSTRAP,
    seed: o.seed ?? DEFAULT_SEED,
  };
  const { probeC: C, folds: K, bootstrap: B, seed } = settings;
  if (!(C > 0)) throw new MetricsError(`Expected a positive --probe-c but received ${C}`);
  if (!Number.isSafeInteger(K) || K < 2) throw new MetricsError(`Expected --folds of at least 2 but received ${K}`);
  if (!Number.isSafeInteger(B) || B < 1) throw new MetricsError(`Expected --bootstrap of at least 1 but received ${B}`);
  const reader = await StoreReader.open(store, { allowIncomplete: o.allowIncomplete, bank: o.bank });
  try {
    const m = reader.manifest;
    const N = reader.readableRows;
    const d = reader.dModel;
    const layers = o.layers ?? m.layers;
    for (const l of layers) if (!m.layers.includes(l)) throw new MetricsError(`${store}: layer ${l} is not stored (stored: ${m.layers.join(", ")})`);
    const families = m.condition_families.slice(0, N);
    const facts = m.fact_ids.slice(0, N);
    const familyNames = [...new Set(families)].filter((f) => f !== ANCHOR_FAMILY).sort();
    const report = (f: string) => !o.families || o.families.includes(f);
    let labels: Uint8Array | undefined;
    const needLabels = metrics.filter((x) => x.needs.includes("labels"));
    if (needLabels.length) {
      if (!o.scored) {
        const others = metrics.filter((x) => !needLabels.includes(x)).map((x) => x.name);
        const alone = others.length ? others.join(",") : registry.filter((x) => !x.needs.includes("labels")).map((x) => x.name).join(",");
        throw new MetricsError(`${needLabels.map((x) => x.title).join(" and ")} needs the scored file: pass --scored SCORED.jsonl (or --metrics ${alone})`);
      }
      labels = await readLabels(o.scored, m.query_ids.slice(0, N), o);
    }
    const resolved = await openKernels(o.backend ?? DEFAULT_BACKEND, {
      threads: o.threads,
      onSkip: o.onBackendSkipped ?? ((backend, reason) => process.emitWarning(`--backend auto passed over ${backend}: ${reason}`, { code: "HSM_BACKEND_SKIPPED" })),
    });
    const k = resolved.kernels;
    const h = new Float32Array(N * d);
    const result: MetricsResult = {
      manifest: m,
      config: {
        metrics: names,
        store,
        scored: o.scored ?? null,
        backend: resolved.backend,
        kernels: resolved.implementations,
        probe_c: C,
        folds: K,
        fold_rule: "fnv1a32(utf8(fact_id)) mod K",
        bootstrap: B,
        seed,
        generator: "xoshiro128** seeded by (seed, fnv1a32(metric/layer/family))",
        layers,
        families: o.families ?? null,
        allow_incomplete: Boolean(o.allowIncomplete),
        abstain_as_incorrect: Boolean(o.abstainAsIncorrect),
        allow_missing_labels: Boolean(o.allowMissingLabels),
        probe_max_iterations: PROBE_MAX_ITERATIONS,
        probe_tolerance: "max |gradient| <= 1e-5 * C * n_train",
        rows: N,
        d_model: d,
      },
      backend: { name: resolved.backend, tfjs: resolved.detail.tfjs, simd: resolved.detail.simd },
      rows: Object.fromEntries(metrics.map((x) => [x.name, []])),
    };
    // One buffer per metric, reused across layers.
    const buffers = new Map<string, Float32Array>();
    const carried = new Map(metrics.map((x) => [x.name, new Map<string, unknown>()]));
    // Small layers (READ_AHEAD_BYTES) are read whole, every block requested at once, so the reads
    // run on I/O threads while the metrics compute the layer before: the next layer's are requested
    // once this one is widened. A large layer is read and widened one block at a time, after the
    // layer before is done: at full size (d 4608) a layer of float16 in flight is 362 MB more at peak.
    const BLOCK_ROWS = 4096;
    const readAhead = N * d * 2 <= READ_AHEAD_BYTES;
    type Block = { start: number; count: number; data: Uint16Array };
    // A read-ahead layer's blocks are read into the same buffers every time: the layer before was widened out of them.
    const blockBuffers: Uint16Array[] = [];
    const requestLayer = (layer: number) => {
      const blocks: Promise<Block>[] = [];
      for (let start = 0, b = 0; start < N; start += BLOCK_ROWS, b++) {
        const count = Math.min(BLOCK_ROWS, N - start);
        const into = (blockBuffers[b] ??= new Uint16Array(count * d));
        blocks.push(reader.readRows(layer, start, count, into).then((data) => ({ start, count, data })));
      }
      const all = Promise.all(blocks);
      all.catch(() => {}); // awaited below; a read that fails while the layer before is computed must not go unhandled first
      return all;
    };
    // Widens a block into the float32 matrix; notes non-finite rows.
    const widen = (block: Block, finite: Uint8Array) => {
      k.f16ToF32(block.data, h.subarray(block.start * d, (block.start + block.count) * d));
      if (k.f16Stats(block.data).nonfinite === 0) return; // the usual case: nothing to look for
      for (let i = 0; i < block.count; i++) {
        const row = block.data.subarray(i * d, (i + 1) * d);
        for (let j = 0; j < d; j++) {
          if ((row[j]! & 0x7c00) === 0x7c00) {
            finite[block.start + i] = 0;
            break;
          }
        }
      }
    };
    let requested = readAhead && layers.length ? requestLayer(layers[0]!) : undefined;
    for (const [done, layer] of layers.entries()) {
      o.onProgress?.(layer, "read", done, layers.length);
      const finite = new Uint8Array(N).fill(1);
      if (requested) for (const block of await requested) widen(block, finite);
      else for await (const block of reader.blocks(layer, BLOCK_ROWS)) widen(block, finite);
      requested = readAhead && done + 1 < layers.length ? requestLayer(layers[done + 1]!) : undefined;
      for (const metric of metrics) {
        o.onProgress?.(layer, metric.name, done, layers.length);
        const data: LayerData = {
          layer,
          n: N,
          d,
          h,
          finite,
          facts,
          families,
          familyNames,
          labels,
          kernels: k,
          carry: carried.get(metric.name)!,
          buffer(length) {
            let b = buffers.get(metric.name);
            if (!b || b.length < length) buffers.set(metric.name, (b = new Float32Array(length)));
            return b;
          },
        };
        result.rows[metric.name]!.push(...(await metric.compute(data, settings)).filter((r) => report(r.family)));
      }
    }
    return result;
  } finally {
    await reader.close();
  }
}
