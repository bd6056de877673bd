/**
 * The probe's matrix products in plain TypeScript, accumulated in float64
 * (the native core accumulates float32 lanes, TensorFlow.js float32: they agree
 * within float32 accumulation error, not bit for bit).
 */
import type { LayerRows, LogisticPass, RowProducts } from "../types.js";
import { rowReader } from "./float16.js";

/** out (n × k) = H · V, column j of V at v[j·d …]. */
export function rowsTimesTs(h: LayerRows, n: number, d: number, v: Float64Array, k: number, out: Float64Array): void {
  const rowOf = rowReader(h, d);
  for (let i = 0; i < n; i++) {
    const row = rowOf(i);
    for (let j = 0; j < k; j++) {
      let s = 0;
      for (let c = 0; c < d; c++) s += row[c]! * v[j * d + c]!;
      out[i * k + j] = s;
    }
  }
}

/** out (k columns of d) = Hᵀ · G for G (n × k, row-major). */
export function rowsTransposeTimesTs(
  h: Float32Array,
  n: number,
  d: number,
  g: Float64Array,
  k: number,
  out: Float64Array,
): void {
  out.fill(0, 0, k * d);
  for (let i = 0; i < n; i++) {
    for (let j = 0; j < k; j++) {
      const gij = g[i * k + j]!;
      if (gij === 0) continue;
      for (let c = 0; c < d; c++) out[j * d + c]! += gij * h[i * d + c]!;
    }
  }
}

/** Row products from synchronous functions (the TypeScript loops, or the native core's, with its fused logistic pass). */
export function syncProducts(
  h: Float32Array,
  n: number,
  d: number,
  times: (h: Float32Array, n: number, d: number, v: Float64Array, k: number, out: Float64Array) => void,
  transposeTimes: (h: Float32Array, n: number, d: number, g: Float64Array, k: number, out: Float64Array) => void,
  logistic?: (
    h: Float32Array,
    n: number,
    d: number,
    v: Float64Array,
    offset: Float64Array,
    y: Uint8Array,
    train: Uint8Array,
    k: number,
    out: LogisticPass,
  ) => void,
): RowProducts {
  return {
    n,
    d,
    async times(v, cols) {
      const out = new Float64Array(n * cols);
      times(h, n, d, v, cols, out);
      return out;
    },
    async transposeTimes(g, cols) {
      const out = new Float64Array(d * cols);
      transposeTimes(h, n, d, g, cols, out);
      return out;
    },
    ...(logistic && {
      async logistic(v: Float64Array, offset: Float64Array, y: Uint8Array, train: Uint8Array, cols: number) {
        const out = { loss: new Float64Array(cols), gsum: new Float64Array(cols), grad: new Float64Array(cols * d) };
        logistic(h, n, d, v, offset, y, train, cols, out);
        return out;
      },
    }),
    dispose() {},
  };
}
