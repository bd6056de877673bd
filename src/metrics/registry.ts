/**
 * The metrics `hsm metrics` knows, in the order they are computed, written and
 * printed. A metric is one registered unit (src/metrics/metric.ts): adding one
 * touches its own file, this list, its docs and its tests
 * (docs/contributing.md walks through it).
 */
import { ISS } from "./iss.js";
import { KTS } from "./kts.js";
import type { Metric, MetricRow } from "./metric.js";

export type MetricRegistry = readonly Metric<MetricRow>[];

/** The built-in metrics. */
export const METRICS: MetricRegistry = [ISS, KTS];
