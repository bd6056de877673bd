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
  /** The layer's rows widened to float32, N × d row-major. Read only: a metric that transforms rows writes them to its own buffer. */
  h: Float32Array;
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

export interface Metric<Row extends MetricRow = MetricRow> {
  /** Lower-case name: `--metrics` value and output file stem (`<name>.json`, `.csv`, `.svg`). */
  name: string;
  /** Upper-case name, as written in the JSON's `metric` field and plot titles. */
  title: string;
  /** The heading of the printed table. */
  tableTitle: string;
  /** What the metric needs beyond the store. */
  needs: readonly "labels"[];
  compute(data: LayerData, settings: MetricSettings): Promise<Row[]>;
  /** The row fields shown: the value (table and plot), its interval (plot band), and why it is null. */
  columns: { value: string; low: string; high: string; nullReason?: string };
  /** Which rows appear in the table and the plot (default: all). */
  shown?(row: Row): boolean;
  /** Extra lines printed under the table (default: the distinct null reasons of shown rows). */
  notes?(rows: Row[]): string[];
}
