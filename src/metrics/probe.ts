/**
 * The KTS probe: L2-regularized logistic regression with an unpenalized
 * intercept, minimizing ½‖w‖² + C·Σ log(1 + exp(−s_i (w·z_i + b))) on
 * standardized features — scikit-learn's LogisticRegression(C) objective —
 * by L-BFGS, until the largest gradient component is at most 1e-5·C·n_train
 * or 2,000 iterations have passed.
 *
 * The K folds of a layer are trained together: every fold reads the same raw
 * anchor rows, so one matrix product per step serves all of them. Standardizing
 * is folded into the weights (w·z = (w/σ)·h − (w/σ)·μ), which lets the
 * products run on the raw rows.
 */

import type { Kernels, RowProducts } from "../kernels/types.js";
import { typescriptKernels } from "../kernels/typescript/index.js";

/** The L-BFGS iteration limit (docs/metrics.md#kts-definition). */
export const PROBE_MAX_ITERATIONS = 2000;

export interface FoldProblem {
  /** Rows of H this fold trains on. */
  train: Int32Array;
}

export interface ProbeOptions {
  c: number;
  maxIterations?: number;
  /** L-BFGS's memory: curvature pairs kept (default 20; on the benchmark's layers 20 takes a tenth fewer passes than 10). */
  history?: number;
  /**
   * How the rows given were prepared from the raw ones: h' = (h − mean) / scale.
   * Products on rows of order one keep float32 rounding far below the stopping
   * tolerance, which raw rows with large dimensions would not. Weights come
   * back for raw rows, and the 1e-8 deviation rule applies to raw deviations.
   */
  prescale?: { mean: Float64Array; scale: Float64Array };
  /**
   * Starting points per fold (standardized weights, then the intercept), such
   * as the folds' solutions on the layer before: the optimum is unique, so a
   * start near it changes how many iterations it takes, not where they end.
   * Missing or misshapen entries start from zero.
   */
  start?: Float64Array[];
  /** Where the per-fold moments are computed (default: TypeScript). */
  kernels?: Pick<Kernels, "foldMoments">;
}

export interface TrainedProbe {
  /** Effective weights on raw rows: score = v·h + offset. */
  v: Float64Array;
  offset: number;
  converged: boolean;
  iterations: number;
  /** Largest gradient component at the end, and the bound it had to meet. */
  gradMax: number;
  tolerance: number;
  /** Standardized-space weights and intercept, as scikit-learn reports them. */
  w: Float64Array;
  b: number;
}

const log1pExp = (t: number) => (t > 0 ? t + Math.log1p(Math.exp(-t)) : Math.log1p(Math.exp(t)));
const sigmoid = (t: number) => (t >= 0 ? 1 / (1 + Math.exp(-t)) : Math.exp(t) / (1 + Math.exp(t)));

/**
 * Trains one probe per fold. `y` holds 0/1 labels for the rows of H; each fold
 * standardizes with its own training rows' mean and population deviation (a
 * deviation below 1e-8 divides by 1).
 */
export async function trainProbes(h: Float32Array, products: RowProducts, y: Uint8Array, folds: FoldProblem[], o: ProbeOptions): Promise<TrainedProbe[]> {
  const { n, d } = products;
  const K = folds.length;
  const C = o.c;
  const maxIt = o.maxIterations ?? PROBE_MAX_ITERATIONS;
  const m = o.history ?? 20;

  // Per-fold standardization statistics and training masks.
  const { sum: mean, sumSquares } = (o.kernels ?? typescriptKernels).foldMoments(h, d, folds.map((f) => f.train));
  const scale = new Float64Array(K * d);
  const inTrain = new Uint8Array(K * n);
  folds.forEach((f, k) => {
    for (const i of f.train) inTrain[k * n + i] = 1;
    const mk = mean.subarray(k * d, (k + 1) * d);
    const ss = sumSquares.subarray(k * d, (k + 1) * d);
    const cnt = f.train.length;
    for (let c = 0; c < d; c++) {
      mk[c]! /= cnt;
      // Rows arrive centred and scaled (see prescale), so the one-pass variance loses nothing.
      const sd = Math.sqrt(Math.max(ss[c]! / cnt - mk[c]! * mk[c]!, 0));
      const raw = o.prescale ? o.prescale.scale[c]! : 1;
      scale[k * d + c] = sd * raw < 1e-8 ? 1 / raw : sd;
    }
  });
  const sgn = Float64Array.from(y, (v) => (v ? 1 : -1));

  // Loss and gradient sums from the two products, where the backend has no fused pass.
  const logisticPass = async (v: Float64Array, offset: Float64Array, train: Uint8Array, cols: number) => {
    const margins = await products.times(v, cols);
    const g = new Float64Array(n * cols);
    const loss = new Float64Array(cols);
    const gsum = new Float64Array(cols);
    for (let i = 0; i < n; i++) {
      for (let k = 0; k < cols; k++) {
        if (!train[k * n + i]) continue;
        const t = sgn[i]! * (margins[i * cols + k]! + offset[k]!);
        loss[k]! += log1pExp(-t);
        const gi = -sgn[i]! * sigmoid(-t);
        g[i * cols + k] = gi;
        gsum[k]! += gi;
      }
    }
    return { loss, gsum, grad: await products.transposeTimes(g, cols) };
  };

  // θ_k = (w_k ∈ R^d, b_k); objective and gradient of the folds in `active`, in one pass over the rows.
  const allFolds = folds.map((_, k) => k);
  const evaluate = async (theta: Float64Array[], active: number[] = allFolds) => {
    const A = active.length;
    const v = new Float64Array(A * d);
    const offset = new Float64Array(A);
    const train = A === K ? inTrain : new Uint8Array(A * n);
    active.forEach((k, a) => {
      let o2 = theta[k]![d]!;
      for (let c = 0; c < d; c++) {
        const vc = theta[k]![c]! / scale[k * d + c]!;
        v[a * d + c] = vc;
        o2 -= vc * mean[k * d + c]!;
      }
      offset[a] = o2;
      if (A !== K) train.set(inTrain.subarray(k * n, (k + 1) * n), a * n);
    });
    const { loss, gsum, grad: ht } = products.logistic ? await products.logistic(v, offset, y, train, A) : await logisticPass(v, offset, train, A);
    const values: number[] = [];
    const grads: Float64Array[] = [];
    active.forEach((k, a) => {
      const th = theta[k]!;
      let reg = 0;
      const grad = new Float64Array(d + 1);
      for (let c = 0; c < d; c++) {
        reg += th[c]! * th[c]!;
        grad[c] = th[c]! + (C * (ht[a * d + c]! - mean[k * d + c]! * gsum[a]!)) / scale[k * d + c]!;
      }
      grad[d] = C * gsum[a]!;
      values.push(0.5 * reg + C * loss[a]!);
      grads.push(grad);
    });
    return { values, grads, v, offset };
  };

  const dot = (a: Float64Array, b: Float64Array) => {
    let s = 0;
    for (let i = 0; i < a.length; i++) s += a[i]! * b[i]!;
    return s;
  };
  const maxAbs = (a: Float64Array) => a.reduce((x, v) => Math.max(x, Math.abs(v)), 0);

  const theta: Float64Array[] = folds.map((_, k) => (o.start?.[k]?.length === d + 1 ? Float64Array.from(o.start[k]!) : new Float64Array(d + 1)));
  let { values: f, grads: g, v: vAll, offset: offAll } = await evaluate(theta);
  const tol = folds.map((fold) => 1e-5 * C * fold.train.length);
  const done = folds.map((_, k) => maxAbs(g[k]!) <= tol[k]!);
  const iterations = new Array<number>(K).fill(0);
  const hist = folds.map(() => ({ s: [] as Float64Array[], y: [] as Float64Array[], rho: [] as number[] }));
  const finalV = folds.map((_, k) => vAll.slice(k * d, (k + 1) * d));
  const finalOffset = Array.from(offAll);

  for (let it = 0; it < maxIt && done.some((x) => !x); it++) {
    // Directions by the two-loop recursion.
    const dir: Float64Array[] = theta.map((_, k) => {
      if (done[k]) return new Float64Array(d + 1);
      const q = Float64Array.from(g[k]!);
      const H = hist[k]!;
      const alpha: number[] = [];
      for (let j = H.s.length - 1; j >= 0; j--) {
        const a = H.rho[j]! * dot(H.s[j]!, q);
        alpha[j] = a;
        for (let c = 0; c <= d; c++) q[c]! -= a * H.y[j]![c]!;
      }
      let gamma = 1;
      if (H.s.length) gamma = dot(H.s.at(-1)!, H.y.at(-1)!) / dot(H.y.at(-1)!, H.y.at(-1)!);
      for (let c = 0; c <= d; c++) q[c]! *= gamma;
      for (let j = 0; j < H.s.length; j++) {
        const b = H.rho[j]! * dot(H.y[j]!, q);
        for (let c = 0; c <= d; c++) q[c]! += H.s[j]! [c]! * (alpha[j]! - b);
      }
      for (let c = 0; c <= d; c++) q[c] = -q[c]!;
      return q;
    });
    // Backtracking line search (Armijo), the trial points of the folds still searching evaluated together.
    const step = theta.map((_, k) => (done[k] ? 0 : hist[k]!.s.length ? 1 : Math.min(1, 1 / Math.max(maxAbs(g[k]!), 1e-12))));
    const slope = theta.map((_, k) => dot(g[k]!, dir[k]!));
    const searching = theta.map((_, k) => !done[k]);
    const accepted: (Float64Array | undefined)[] = new Array(K);
    let newF = f.slice();
    let newG = g.slice();
    for (let tries = 0; tries < 40 && searching.some(Boolean); tries++) {
      const active = allFolds.filter((k) => searching[k]);
      const trial = theta.map((th, k) => {
        if (!searching[k]) return th;
        const t = Float64Array.from(th);
        for (let c = 0; c <= d; c++) t[c]! += step[k]! * dir[k]![c]!;
        return t;
      });
      const e = await evaluate(trial, active);
      active.forEach((k, a) => {
        // Armijo, or — where float32 products make the objective too noisy to see a decrease that
        // small — a step that shrinks the gradient without raising the objective beyond its noise.
        const value = e.values[a]!;
        const armijo = value <= f[k]! + 1e-4 * step[k]! * slope[k]!;
        const withinNoise = value <= f[k]! + 1e-6 * Math.abs(f[k]!) && maxAbs(e.grads[a]!) < maxAbs(g[k]!);
        if (armijo || withinNoise || tries === 39) {
          searching[k] = false;
          accepted[k] = trial[k]!;
          newF[k] = value;
          newG[k] = e.grads[a]!;
          finalV[k] = e.v.slice(a * d, (a + 1) * d);
          finalOffset[k] = e.offset[a]!;
        } else {
          // The minimum of the quadratic through f, the slope and the trial value, kept within [0.1, 0.5] of the step.
          const t = step[k]!;
          const quadratic = (-slope[k]! * t * t) / (2 * (value - f[k]! - slope[k]! * t));
          step[k] = Number.isFinite(quadratic) ? Math.min(0.5 * t, Math.max(0.1 * t, quadratic)) : 0.5 * t;
        }
      });
    }
    for (let k = 0; k < K; k++) {
      if (done[k]) continue;
      const s = new Float64Array(d + 1);
      const yv = new Float64Array(d + 1);
      for (let c = 0; c <= d; c++) {
        s[c] = accepted[k]![c]! - theta[k]![c]!;
        yv[c] = newG[k]![c]! - g[k]![c]!;
      }
      const sy = dot(s, yv);
      if (sy > 1e-12) {
        const H = hist[k]!;
        H.s.push(s);
        H.y.push(yv);
        H.rho.push(1 / sy);
        if (H.s.length > m) {
          H.s.shift();
          H.y.shift();
          H.rho.shift();
        }
      }
      theta[k] = accepted[k]!;
      iterations[k]!++;
      if (maxAbs(newG[k]!) <= tol[k]!) done[k] = true;
    }
    f = newF;
    g = newG;
    newF = [];
    newG = [];
  }
  // Back to raw rows: v·h' + o = (v/scale)·h + o − (v/scale)·mean.
  if (o.prescale) {
    for (let k = 0; k < K; k++) {
      const v = finalV[k]!;
      for (let c = 0; c < d; c++) {
        v[c] = v[c]! / o.prescale.scale[c]!;
        finalOffset[k] = finalOffset[k]! - v[c]! * o.prescale.mean[c]!;
      }
    }
  }
  return folds.map((_, k) => ({
    v: finalV[k]!,
    offset: finalOffset[k]!,
    converged: done[k]!,
    iterations: iterations[k]!,
    gradMax: maxAbs(g[k]!),
    tolerance: tol[k]!,
    w: theta[k]!.slice(0, d),
    b: theta[k]![d]!,
  }));
}
