/**
 * The row passes ISS and KTS make over a layer before their heavy products:
 * centring and normalizing, cosines against the anchors, standardizing, and
 * per-fold moments. Float64 sums in a fixed order.
 */
import type { LayerRows } from "../types.js";
import { rowReader } from "./float16.js";

export function centreRowsTs(h: LayerRows, n: number, d: number, valid: Uint8Array, out: Float32Array): number {
  // Centre on the mean of the usable rows (float64 sums), then normalize each row.
  const rowOf = rowReader(h, d);
  const mu = new Float64Array(d);
  let nValid = 0;
  for (let i = 0; i < n; i++) {
    if (!valid[i]) continue;
    nValid++;
    const src = rowOf(i);
    for (let j = 0; j < d; j++) mu[j]! += src[j]!;
  }
  for (let j = 0; j < d; j++) mu[j]! /= Math.max(nValid, 1);
  let excluded = 0;
  for (let i = 0; i < n; i++) {
    if (!valid[i]) {
      excluded++;
      continue;
    }
    const src = rowOf(i);
    const row = out.subarray(i * d, (i + 1) * d);
    let ss = 0;
    for (let j = 0; j < d; j++) {
      row[j] = src[j]! - mu[j]!;
      ss += row[j]! * row[j]!;
    }
    if (ss === 0) {
      valid[i] = 0;
      excluded++;
      continue;
    }
    const inv = 1 / Math.sqrt(ss);
    for (let j = 0; j < d; j++) row[j] = row[j]! * inv;
  }
  return excluded;
}

export function anchorCosinesTs(
  x: Float32Array,
  rows: Int32Array,
  a: Float32Array,
  nAnchors: number,
  d: number,
  own: Int32Array,
  ownCos: Float64Array,
  otherCos: Float64Array,
): void {
  const sum = new Float64Array(d);
  for (let g = 0; g < nAnchors; g++) for (let j = 0; j < d; j++) sum[j]! += a[g * d + j]!;
  for (let k = 0; k < rows.length; k++) {
    const xo = rows[k]! * d;
    const ao = own[k]! * d;
    let s = 0;
    let t = 0;
    for (let j = 0; j < d; j++) {
      s += x[xo + j]! * a[ao + j]!;
      t += x[xo + j]! * sum[j]!;
    }
    ownCos[k] = s;
    otherCos[k] = (t - s) / (nAnchors - 1);
  }
}

export function standardizeRowsTs(
  h: LayerRows,
  rows: Int32Array,
  d: number,
  into?: Float32Array,
): { rows: Float32Array; mean: Float64Array; scale: Float64Array } {
  const rowOf = rowReader(h, d);
  const n = rows.length;
  const mean = new Float64Array(d);
  const scale = new Float64Array(d);
  for (const r of rows) {
    const row = rowOf(r);
    for (let j = 0; j < d; j++) mean[j]! += row[j]! / n;
  }
  for (const r of rows) {
    const row = rowOf(r);
    for (let j = 0; j < d; j++) scale[j]! += (row[j]! - mean[j]!) ** 2 / n;
  }
  for (let j = 0; j < d; j++) scale[j] = Math.sqrt(scale[j]!) || 1;
  const out = into ? into.subarray(0, n * d) : new Float32Array(n * d);
  rows.forEach((r, i) => {
    const row = rowOf(r);
    for (let j = 0; j < d; j++) out[i * d + j] = (row[j]! - mean[j]!) / scale[j]!;
  });
  return { rows: out, mean, scale };
}

export function foldMomentsTs(
  h: Float32Array,
  d: number,
  folds: Int32Array[],
): { sum: Float64Array; sumSquares: Float64Array } {
  const sum = new Float64Array(folds.length * d);
  const sumSquares = new Float64Array(folds.length * d);
  folds.forEach((rows, k) => {
    const s = sum.subarray(k * d, (k + 1) * d);
    const ss = sumSquares.subarray(k * d, (k + 1) * d);
    for (const i of rows) {
      const row = h.subarray(i * d, (i + 1) * d);
      for (let c = 0; c < d; c++) {
        const v = row[c]!;
        s[c]! += v;
        ss[c]! += v * v;
      }
    }
  });
  return { sum, sumSquares };
}
