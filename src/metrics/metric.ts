/**
 * What a metric is: a function from one layer's data to rows, and how its rows
 * are shown (table, CSV, plot). ISS and KTS are two of them
 * (src/metrics/iss.ts, src/metrics/kts.ts); src/metrics/registry.ts lists them.
 */
import { HsmError } from "../errors.js";
import type { Kernels } from "../kernels/types.js";

/** The family that pools every non-anchor family. */
export const ALL_FAMILIES = "all";

export class MetricsError extends HsmError {}

/** One layer, as every metric receives it. Nothing here is written by a metric. */
export interface LayerData {
  layer: number;
  /** Rows read (N) and the width of each (d). */
  n: number;
  d: number;
  /**
   * The layer's rows widened to float32, N × d row-major. `hsm metrics` widens
   * them on first read (once a layer, into one buffer reused across layers).
   * Read only: a metric that transforms rows writes them to its own buffer.
   */
  readonly h: Float32Array;
  /**
   * The same rows as the store holds them, float16 bits, where the caller has
   * them (`hsm metrics` always does): the row kernels read these in place of
   * `h` with the same results (src/kernels/types.ts's LayerRows), and no
   * float32 copy of the layer is made. Read only.
   */
  h16?: Uint16Array;
  /**
   * Says the metric will not read `h16` again, nor `h` for the first time, in
   * this layer (optional; where given, call it at most once). `hsm metrics`
   * then reads the next layer into the rows' buffer while the metric finishes
   * from buffers of its own; without the call, the next layer is read once the
   * metric returns.
   */
  release?(): void;
  /** 1 where a row has no non-finite value. */
  finite: Uint8Array;
  /** Per row: fact id and condition family. */
  facts: readonly string[];
  families: readonly string[];
  /** The non-anchor families, sorted. */
  familyNames: readonly string[];
  /** Per row: 1 correct, 0 incorrect, NO_LABEL otherwise; present when the metric needs labels. */
  labels?: Uint8Array;
  kernels: Kernels;
  /** A float32 buffer of at least `length` values owned by this metric, reused across layers. */
  buffer(length: number): Float32Array;
  /**
   * What this metric kept from the layers computed before this one (in the
   * order computed), for starting points and for work that does not depend on
   * the layer's values: results must not depend on it.
   */
  carry?: Map<string, unknown>;
}

/** The knobs every metric may read (resolved defaults). */
export interface MetricSettings {
  probeC: number;
  folds: number;
  bootstrap: number;
  seed: number;
}

/** Every metric row starts with its layer and family. */
export interface MetricRow {
  layer: number;
  family: string;
}

/** A registered metric's name: its `--metrics` value, output file stem and key in a result's rows. */
export type MetricName = string;

export interface Metric<Row extends MetricRow = MetricRow> {
  /** Lower-case name: `--metrics` value and output file stem (`<name>.json`, `.csv`, `.svg`). */
  name: MetricName;
  /** Upper-case name, as written in the JSON's `metric` field and plot titles. */
  title: string;
  /** What the metric asks, in one clause: `hsm metrics --help` lists it after the title. */
  description: string;
  /** The heading of the printed table. */
  tableTitle: string;
  /** What the metric needs beyond the store. */
  needs: readonly "labels"[];
  compute(data: LayerData, settings: MetricSettings): Promise<Row[]>;
  /**
   * Optional, for a metric whose work ends without the layer: where given,
   * `hsm metrics` calls it in place of `compute`. It does the part that reads
   * the layer (its rows, `h`, the metric's buffer) and returns the rest, which
   * reads none of it, nor what the next layer's `start` writes: that part runs
   * while the next layer is computed (overlapping where its kernels run off
   * the JavaScript thread). Start, then finish, gives the rows `compute` gives.
   */
  start?(data: LayerData, settings: MetricSettings): Promise<() => Promise<Row[]>>;
  /** The row fields shown: the value (table and plot), its interval (plot band), and why it is null. */
  columns: { value: string; low: string; high: string; nullReason?: string };
  /** Which rows appear in the table and the plot (default: all). */
  shown?(row: Row): boolean;
  /** Extra lines printed under the table (default: the distinct null reasons of shown rows). */
  notes?(rows: Row[]): string[];
}

/** The rows of `metric` in a result keyed by metric name, typed as the metric's rows (empty when not computed). */
export function metricRows<Row extends MetricRow>(
  result: { rows: Record<MetricName, MetricRow[]> },
  metric: Metric<Row>,
): Row[] {
  return (result.rows[metric.name] ?? []) as Row[];
}
/**
 * Metrics in the order they are computed, written and printed; src/metrics/registry.ts holds
 * the built-in ones. Here, with nothing heavy to import, so that the public API offers it cheaply.
 */
export type MetricRegistry = readonly Metric<MetricRow>[];

/** A name that is safe as a `--metrics` list item and as a file stem. */
const METRIC_NAME = /^[a-z][a-z0-9_-]*$/;

/**
 * The ids `hsm report`'s page gives its own elements: its sections, the fact
 * explorer's and the comparison's controls, the page's data (`hsm-data`,
 * `chunk-N`). A metric's section is `#<name>`, so a metric named like one of
 * them would break the page. test/report/page-ids.test.ts checks the list
 * against a written page.
 */
const REPORT_IDS = new Set([
  "accuracy",
  "compare",
  "facts",
  "provenance",
  "fact",
  "fact-list",
  "fact-search",
  "hsm-data",
  "model-a",
  "model-b",
  "cmp-depth",
  "cmp-families",
  "cmp-note",
]);

/** Whether the report page uses `id` for an element of its own. */
export function isReportId(id: string): boolean {
  return REPORT_IDS.has(id) || /^chunk-\d+$/.test(id);
}

/**
 * The registry with `metric` added after the metrics already there; `registry`
 * itself is left as it was. Names are lower-case (`a-z`, digits, `_`, `-`),
 * unique, and none of the report page's own ids ({@link isReportId}).
 */
export function registerMetric<Row extends MetricRow>(registry: MetricRegistry, metric: Metric<Row>): MetricRegistry {
  if (!METRIC_NAME.test(metric.name)) {
    const rule = "a-z, 0-9, _ and - (starting with a letter)";
    throw new MetricsError(`Expected a metric name of ${rule} but received "${metric.name}"`);
  }
  if (isReportId(metric.name)) {
    throw new MetricsError(`A metric cannot be named "${metric.name}": hsm report's page uses that id for its own`);
  }
  if (registry.some((m) => m.name === metric.name)) {
    throw new MetricsError(`A metric named "${metric.name}" is already registered`);
  }
  return [...registry, metric as unknown as Metric<MetricRow>];
}
