/**
 * The metrics `hsm metrics` knows, in the order they are computed, written and
 * printed. A metric is one registered unit (src/metrics/metric.ts): adding one
 * touches its own file, the registration below, its docs and its tests
 * (docs/contributing.md walks through it). Everything else (the CLI's
 * `--metrics` choices and help, the printed tables, the files written, the
 * report's charts) is read from a registry.
 */
import { ISS } from "./iss.js";
import { KTS } from "./kts.js";
import { registerMetric, type MetricRegistry } from "./metric.js";

export { registerMetric, type MetricRegistry } from "./metric.js";

/** The built-in metrics. */
export const METRICS: MetricRegistry = registerMetric(registerMetric([], ISS), KTS);
