/** docs/metrics.md#tolerances: the agreement between implementations, field by field, as one assertion. */
import { expect } from "vitest";

import {
  FLOAT64_REORDER,
  METRICS_AUROC,
  METRICS_INTERVAL_ABSOLUTE,
  METRICS_INTERVAL_RELATIVE,
  METRICS_KTS,
  METRICS_POINT,
} from "../tolerances.js";

const TOLERANCE: Record<string, number> = {
  iss: METRICS_POINT,
  own_cos: METRICS_POINT,
  other_cos: METRICS_POINT,
  auroc: METRICS_AUROC,
  kts: METRICS_KTS,
};

/** Expects `a` and `b` (values of `field`) to agree; `width` is the interval's width for interval bounds. */
export function agree(field: string, a: number | null, b: number | null, width = 0): void {
  if (a === null || b === null) return void expect(a, field).toBe(b);
  if (field in TOLERANCE) return void expect(Math.abs(a - b), field).toBeLessThanOrEqual(TOLERANCE[field]!);
  if (field.endsWith("_ci_low") || field.endsWith("_ci_high")) {
    return void expect(Math.abs(a - b), field).toBeLessThanOrEqual(
      Math.max(METRICS_INTERVAL_ABSOLUTE, METRICS_INTERVAL_RELATIVE * width),
    );
  }
  // r_at_1 and mrr: exact up to summation order (the fixtures have no near-ties); counts exactly.
  if (Number.isInteger(a) && Number.isInteger(b)) return void expect(a, field).toBe(b);
  expect(Math.abs(a - b), field).toBeLessThanOrEqual(FLOAT64_REORDER);
}

/** Every numeric field of two row lists, in order, within `agree`. */
export function agreeRows(mine: object[], other: object[]): void {
  expect(other.length).toBe(mine.length);
  mine.forEach((row, i) => {
    const r = row as Record<string, unknown>;
    const o = other[i] as Record<string, unknown>;
    expect([o.layer, o.family]).toEqual([r.layer, r.family]);
    for (const [field, value] of Object.entries(r)) {
      // Reasons quote numbers to four decimals, which may round apart; the value they explain is compared.
      if (typeof value === "string" || field.endsWith("_reason") || (value !== null && typeof value !== "number"))
        continue;
      const base = field.replace(/_ci_(low|high)$/, "");
      const lo = r[`${base}_ci_low`];
      const hi = r[`${base}_ci_high`];
      agree(field, value, o[field] as number | null, typeof lo === "number" && typeof hi === "number" ? hi - lo : 0);
    }
  });
}
