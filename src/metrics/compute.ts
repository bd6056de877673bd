/**
 * Runs the requested metrics (src/metrics/registry.ts) over a hidden-state
 * store, exactly as docs/metrics.md defines them. One layer at a time: the
 * layer is read whole as the store's float16 bits (src/metrics/read-ahead.ts:
 * requested once the layer before releases its rows), read once, and handed
 * read-only to each metric in turn, whose kernels read the float16 rows
 * directly; a metric that asks for float32 rows gets them widened once. A
 * metric that splits its work (Metric.start) finishes a layer while the next
 * is computed. Every kernel comes from the one backend selected.
 */
import { ANCHOR_FAMILY } from "../bank/prompt.js";
import { DEFAULT_BACKEND, DEFAULT_BOOTSTRAP, DEFAULT_FOLDS, DEFAULT_PROBE_C, DEFAULT_SEED } from "../defaults.js";
import { largeArrayBuffer, nativeHeap } from "../kernels/native.js";
import { openKernels, type BackendName } from "../kernels/registry.js";
import type { Kernels } from "../kernels/types.js";
import type { Manifest } from "../store/manifest.js";
import { fileSha256 } from "../store/hash.js";
import { StoreReader } from "../store/reader.js";
import { readLabels } from "./labels.js";
import {
  ALL_FAMILIES,
  MetricsError,
  type LayerData,
  type Metric,
  type MetricName,
  type MetricRow,
  type MetricSettings,
} from "./metric.js";
import { PROBE_MAX_ITERATIONS } from "./probe.js";
import { startLayerReads } from "./read-ahead.js";
import { METRICS, type MetricRegistry } from "./registry.js";

/** The exponent bits of a float16: all set in an infinity or a NaN, and in nothing else. */
const F16_EXPONENT = 0x7c00;

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

/** The registry's metrics named in `names`, in registry order; an unknown name is an error. */
function selectMetrics(registry: MetricRegistry, names: readonly string[]): Metric[] {
  const metrics = registry.filter((m) => names.includes(m.name));
  for (const name of names) {
    if (!registry.some((m) => m.name === name)) {
      const known = registry.map((m) => m.name).join(", ");
      throw new MetricsError(`Expected --metrics from ${known} but received "${name}"`);
    }
  }
  return metrics;
}

/** The settings with their defaults filled in, checked. */
function resolveSettings(o: MetricsOptions): MetricSettings {
  const settings: MetricSettings = {
    probeC: o.probeC ?? DEFAULT_PROBE_C,
    folds: o.folds ?? DEFAULT_FOLDS,
    bootstrap: o.bootstrap ?? DEFAULT_BOOTSTRAP,
    seed: o.seed ?? DEFAULT_SEED,
  };
  const { probeC: C, folds: K, bootstrap: B } = settings;
  if (!(C > 0)) throw new MetricsError(`Expected a positive --probe-c but received ${C}`);
  if (!Number.isSafeInteger(K) || K < 2) throw new MetricsError(`Expected --folds of at least 2 but received ${K}`);
  if (!Number.isSafeInteger(B) || B < 1) throw new MetricsError(`Expected --bootstrap of at least 1 but received ${B}`);
  return settings;
}

/** Per row, the label of the scored file when a metric needs labels (undefined when none does). */
async function labelsFor(
  metrics: readonly Metric[],
  registry: MetricRegistry,
  queryIds: string[],
  o: MetricsOptions,
): Promise<Uint8Array | undefined> {
  const needLabels = metrics.filter((x) => x.needs.includes("labels"));
  if (!needLabels.length) return undefined;
  if (!o.scored) {
    const others = metrics.filter((x) => !needLabels.includes(x)).map((x) => x.name);
    const alone = others.length
      ? others.join(",")
      : registry
          .filter((x) => !x.needs.includes("labels"))
          .map((x) => x.name)
          .join(",");
    const titles = needLabels.map((x) => x.title).join(" and ");
    throw new MetricsError(`${titles} needs the scored file: pass --scored SCORED.jsonl (or --metrics ${alone})`);
  }
  return readLabels(o.scored, queryIds, o);
}

/**
 * The part of a result's `config` that decides its rows, beside the store's
 * files: the metrics, the scored file's sha256 (null without one), every knob
 * and rule. Two results over the same store files with equal settings have the
 * same rows; where the files were, and which kernels ran, do not count.
 */
export async function decidingSettings(
  layers: readonly number[],
  o: MetricsOptions = {},
  scoredSha256: Promise<string> | undefined = o.scored ? fileSha256(o.scored) : undefined,
): Promise<Record<string, unknown>> {
  const registry = o.registry ?? METRICS;
  const settings = resolveSettings(o);
  return {
    metrics: o.metrics ?? registry.map((m) => m.name),
    scored_sha256: (await scoredSha256) ?? null,
    probe_c: settings.probeC,
    folds: settings.folds,
    fold_rule: "fnv1a32(utf8(fact_id)) mod K",
    bootstrap: settings.bootstrap,
    seed: settings.seed,
    generator: "xoshiro128** seeded by (seed, fnv1a32(metric/layer/family))",
    layers: o.layers ?? layers,
    families: o.families ?? null,
    allow_incomplete: Boolean(o.allowIncomplete),
    abstain_as_incorrect: Boolean(o.abstainAsIncorrect),
    allow_missing_labels: Boolean(o.allowMissingLabels),
    probe_max_iterations: PROBE_MAX_ITERATIONS,
    probe_tolerance: "max |gradient| <= 1e-5 * C * n_train",
  };
}

/** What a result records of how it was computed (its `config`). */
async function describeRun(
  store: string,
  resolved: { backend: string; implementations: unknown },
  layers: readonly number[],
  shape: { rows: number; d: number },
  o: MetricsOptions,
  scoredSha256: Promise<string> | undefined,
): Promise<Record<string, unknown>> {
  const { metrics, scored_sha256, ...knobs } = await decidingSettings(layers, o, scoredSha256);
  return {
    metrics,
    store,
    scored: o.scored ?? null,
    scored_sha256,
    backend: resolved.backend,
    kernels: resolved.implementations,
    ...knobs,
    rows: shape.rows,
    d_model: shape.d,
  };
}

/** Per row of a layer (n × d float16 bits): 1 where no value is infinite or NaN. */
function finiteRows(k: Kernels, h16: Uint16Array, n: number, d: number): Uint8Array {
  const finite = new Uint8Array(n).fill(1);
  if (k.f16Stats(h16).nonfinite === 0) return finite; // the usual case: nothing to look for
  for (let i = 0; i < n; i++) {
    const row = h16.subarray(i * d, (i + 1) * d);
    for (let j = 0; j < d; j++) {
      if ((row[j]! & F16_EXPONENT) === F16_EXPONENT) {
        finite[i] = 0;
        break;
      }
    }
  }
  return finite;
}

/** Runs the requested metrics over a store, one layer at a time; see the file's comment. */
export async function computeMetrics(store: string, o: MetricsOptions = {}): Promise<MetricsResult> {
  const registry = o.registry ?? METRICS;
  const names = o.metrics ?? registry.map((m) => m.name);
  const metrics = selectMetrics(registry, names);
  const settings = resolveSettings(o);
  // The scored file is hashed (for the result's config) on the addon's threads while the store opens.
  const scoredSha256 = o.scored ? fileSha256(o.scored) : undefined;
  scoredSha256?.catch(() => {}); // awaited later, after the labels' own errors
  const reader = await StoreReader.open(store, { allowIncomplete: o.allowIncomplete, bank: o.bank });
  try {
    const m = reader.manifest;
    const N = reader.readableRows;
    const d = reader.dModel;
    const layers = o.layers ?? m.layers;
    for (const l of layers) {
      if (m.layers.includes(l)) continue;
      throw new MetricsError(`${store}: layer ${l} is not stored (stored: ${m.layers.join(", ")})`);
    }
    // The first layer is read while the labels are read and the kernels load.
    const reads = startLayerReads(reader, layers, N, d);
    const families = m.condition_families.slice(0, N);
    const facts = m.fact_ids.slice(0, N);
    const familyNames = [...new Set(families)].filter((f) => f !== ANCHOR_FAMILY).sort();
    if (familyNames.includes(ALL_FAMILIES)) {
      throw new MetricsError(
        `${store}: condition family "${ALL_FAMILIES}" names the rows that pool every family; rename that family in the bank`,
      );
    }
    const unknownFamily = o.families?.find((f) => f !== ALL_FAMILIES && !familyNames.includes(f));
    if (unknownFamily !== undefined)
      throw new MetricsError(
        `${store}: family "${unknownFamily}" is not in the store (families: ${[ALL_FAMILIES, ...familyNames].join(", ")})`,
      );
    const report = (f: string) => !o.families || o.families.includes(f);
    const labels = await labelsFor(metrics, registry, m.query_ids.slice(0, N), o);
    const skipped = (backend: string, reason: string) =>
      process.emitWarning(`--backend auto passed over ${backend}: ${reason}`, { code: "HSM_BACKEND_SKIPPED" });
    const resolved = await openKernels(o.backend ?? DEFAULT_BACKEND, {
      threads: o.threads,
      onSkip: o.onBackendSkipped ?? skipped,
    });
    const k = resolved.kernels;
    // The float32 rows, for a metric that reads `h`: one buffer, widened at most once a layer.
    let wide: Float32Array | undefined;
    const result: MetricsResult = {
      manifest: m,
      config: await describeRun(store, resolved, layers, { rows: N, d }, { ...o, metrics: names }, scoredSha256),
      backend: { name: resolved.backend, tfjs: resolved.detail.tfjs, simd: resolved.detail.simd },
      rows: Object.fromEntries(metrics.map((x) => [x.name, []])),
    };
    // One buffer per metric, reused across layers.
    const buffers = new Map<string, Float32Array>();
    const carried = new Map(metrics.map((x) => [x.name, new Map<string, unknown>()]));
    const buffer = (metric: Metric, length: number): Float32Array => {
      let b = buffers.get(metric.name);
      if (!b || b.length < length) buffers.set(metric.name, (b = new Float32Array(largeArrayBuffer(length * 4))));
      return b;
    };
    // Each layer's rows, per metric; a metric's finish (Metric.start) runs on while the next layer is computed.
    let behind: Promise<MetricRow[]>[] = [];
    const collect = async (layerRows: Promise<MetricRow[]>[]) => {
      for (const [i, rows] of layerRows.entries()) {
        result.rows[metrics[i]!.name]!.push(...(await rows).filter((r) => report(r.family)));
      }
    };
    for (const [done, layer] of layers.entries()) {
      o.onProgress?.(layer, "read", done, layers.length);
      const h16 = await reads.next();
      const finite = finiteRows(k, h16, N, d);
      let widened = false;
      let released = false;
      const widen = (): Float32Array => {
        if (released && !widened) throw new MetricsError(`layer ${layer}: its rows were read after they were released`);
        wide ??= new Float32Array(largeArrayBuffer(N * d * 4));
        if (!widened) k.f16ToF32(h16, wide);
        widened = true;
        return wide;
      };
      const ahead: Promise<MetricRow[]>[] = [];
      for (const metric of metrics) {
        // The rows are the last metric's to release: every metric before it has returned when it starts.
        const last = metric === metrics.at(-1);
        o.onProgress?.(layer, metric.name, done, layers.length);
        const data: LayerData = {
          layer,
          n: N,
          d,
          h16,
          get h() {
            return widen();
          },
          release() {
            if (!last) return;
            released = true;
            reads.release();
          },
          finite,
          facts,
          families,
          familyNames,
          labels,
          kernels: k,
          carry: carried.get(metric.name)!,
          buffer: (length) => buffer(metric, length),
        };
        if (metric.start) {
          const rows = (await metric.start(data, settings))();
          rows.catch(() => {}); // collected below, in order
          ahead.push(rows);
        } else ahead.push(Promise.resolve(await metric.compute(data, settings)));
      }
      released = true;
      reads.release();
      await collect(behind);
      behind = ahead;
    }
    await collect(behind);
    return result;
  } finally {
    await reader.close();
    nativeHeap?.trim(); // the kernels' buffers kept from layer to layer go back to the system
  }
}
