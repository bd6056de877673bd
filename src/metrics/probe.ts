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

/**
 * Curvature pairs L-BFGS keeps when `history` is not given: on the benchmark's layers 20 take a tenth fewer
 * passes than 10.
 */
const DEFAULT_HISTORY = 20;
/**
 * A feature whose population deviation on the fold (in raw units) is below this is constant there, and is
 * divided by 1 instead of by a deviation that is rounding noise (docs/metrics.md#kts-definition).
 */
const CONSTANT_FEATURE_DEVIATION = 1e-8;
/**
 * A one-pass variance (mean of squares less the squared mean) at most this fraction of the mean of squares has lost
 * all but its last dozen bits to cancellation; it is taken again in two passes.
 */
const CANCELLED_VARIANCE = 2 ** -40;
/**
 * The stopping rule (docs/metrics.md#kts-definition): the largest gradient component at most this times
 * C·n_train. The loss term's gradient grows with C and with the rows, so the bound scales with both;
 * off-the-shelf L-BFGS rules stop earlier.
 */
const GRADIENT_TOLERANCE = 1e-5;
/** Floor on the largest gradient component when a first step is sized 1/max|g|: a zero gradient must not divide. */
const FIRST_STEP_GRADIENT_FLOOR = 1e-12;
/**
 * Line-search trials per iteration, the last one accepted whatever its value. Each failed trial at least halves
 * the step (NEXT_STEP_MAX_FRACTION), so the 40th is at most 0.5^39 ≈ 2e-12 of the first: by then the direction
 * gives no decrease the objective can show, and searching on would only cost passes over the rows. Taking the
 * last trial leaves the fold where it was, give or take that step (its objective perhaps a rounding error
 * higher), and counts as an iteration. It does not mark the fold converged: that still takes the gradient rule,
 * so a fold whose searches keep failing spends its remaining iterations near that point and ends with
 * `converged: false` (counted in `probes_not_converged`) and the `gradMax` it reached.
 */
const MAX_LINE_SEARCH_TRIALS = 40;
/**
 * Trials evaluated ahead (lineSearch): where one fold is left searching and its last trial failed and cut its step
 * to NEXT_STEP_MIN_FRACTION of itself, the same pass also evaluates the steps that this many more such cuts would
 * give. Near the optimum of an ill-conditioned fold, trial after trial fails that way, a dozen an iteration for
 * hundreds of iterations; a pass for one point is bound by reading the rows, and a few more points cost it about a
 * half more. A trial evaluated ahead is used only where the search arrives at its very step, so only the passes
 * change. Only with a backend's fused pass (RowProducts.logistic), which computes each point as it would alone.
 */
const TRIALS_AHEAD = 3;
/** Armijo's sufficient-decrease fraction of the slope: the customary 1e-4, which accepts nearly any decrease. */
const ARMIJO_FRACTION = 1e-4;
/**
 * How far, relative to itself, the objective may rise on a step that shrinks the gradient: float32 products
 * make the objective this noisy near the optimum, where the decrease Armijo asks for is smaller still.
 */
const OBJECTIVE_NOISE = 1e-6;
/**
 * A failed trial's next step, as a fraction of its own: the minimum of the quadratic through the objective, its
 * slope and the trial's value, kept at most half the step (each failure makes real progress towards small steps)…
 */
const NEXT_STEP_MAX_FRACTION = 0.5;
/** …and at least a tenth of it, so that one poor interpolation cannot collapse the step. */
const NEXT_STEP_MIN_FRACTION = 0.1;
/**
 * A step stalls (see `stalled`) when it lowers the objective by less than this fraction of it (float64 rounding,
 * give or take)…
 */
const STALL_OBJECTIVE_FRACTION = 1e-14;
/** …and leaves the largest gradient component above this fraction of where it was. */
const STALL_GRADIENT_FRACTION = 0.999;
/**
 * Curvature pairs with s·y at or below this are not kept: the inverse-Hessian estimate stays positive definite
 * only with positive curvature, and 1/(s·y) of a pair near zero would swamp the others.
 */
const MIN_CURVATURE = 1e-12;

export interface FoldProblem {
  /** Rows of H this fold trains on. */
  train: Int32Array;
}

export interface ProbeOptions {
  c: number;
  maxIterations?: number;
  /** L-BFGS's memory: curvature pairs kept (default {@link DEFAULT_HISTORY}). */
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
  /**
   * Trials a lone fold's line search evaluates ahead (default {@link TRIALS_AHEAD} where `products` has a fused
   * pass, else 0): the same probes, in fewer passes.
   */
  trialsAhead?: number;
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

function dot(a: Float64Array, b: Float64Array): number {
  let s = 0;
  for (let i = 0; i < a.length; i++) s += a[i]! * b[i]!;
  return s;
}

function maxAbs(a: Float64Array): number {
  let m = 0;
  for (let i = 0; i < a.length; i++) m = Math.max(m, Math.abs(a[i]!));
  return m;
}

/**
 * Trains one probe per fold. `y` holds 0/1 labels for the rows of H; each fold
 * standardizes with its own training rows' mean and population deviation (a
 * deviation below 1e-8 divides by 1).
 */
export async function trainProbes(
  h: Float32Array,
  products: RowProducts,
  y: Uint8Array,
  folds: FoldProblem[],
  o: ProbeOptions,
): Promise<TrainedProbe[]> {
  const { d } = products;
  const K = folds.length;
  const C = o.c;
  const maxIt = o.maxIterations ?? PROBE_MAX_ITERATIONS;
  const m = o.history ?? DEFAULT_HISTORY;
  const std = standardize(h, products.n, d, folds, o);
  const evaluate = foldObjective(products, y, folds, std, C);

  // A dimension flat over a fold's training rows (deviation below 1e-8) keeps its weight at zero, as a start from
  // zero on exact arithmetic leaves it: its standardized values there are all but zero, so the data give it no
  // gradient, while float32 products on prescaled rows (whose scale the other folds' rows set) would give it rounding
  // noise times that scale, and a warm start a weight the stopping rule need not remove. Either would then weigh the
  // fold's own rows by their raw, unscaled values in that dimension.
  const theta: Float64Array[] = folds.map((_, k) => {
    const t = o.start?.[k]?.length === d + 1 ? Float64Array.from(o.start[k]!) : new Float64Array(d + 1);
    for (let c = 0; c < d; c++) if (std.flat[k * d + c]) t[c] = 0;
    return t;
  });
  const { values: f, grads: g, v: vAll, offset: offAll } = await evaluate(theta);
  const tol = folds.map((fold) => GRADIENT_TOLERANCE * C * fold.train.length);
  const done = folds.map((_, k) => maxAbs(g[k]!) <= tol[k]!);
  const iterations = new Array<number>(K).fill(0);
  const hist: CurvatureHistory[] = folds.map(() => ({ s: [], y: [], rho: [] }));
  const finalV: Float64Array[] = folds.map((_, k) => vAll.slice(k * d, (k + 1) * d));
  const finalOffset = Array.from(offAll);

  // Each pass is one L-BFGS iteration of every fold not yet done: direction, line search, curvature, stopping rule.
  for (let it = 0; it < maxIt && done.some((x) => !x); it++) {
    const dir = theta.map((_, k) => (done[k] ? new Float64Array(d + 1) : lbfgsDirection(g[k]!, hist[k]!)));
    const accepted = await lineSearch(
      evaluate,
      theta,
      f,
      g,
      dir,
      done,
      hist,
      o.trialsAhead ?? (products.logistic ? TRIALS_AHEAD : 0),
    );
    for (let k = 0; k < K; k++) {
      if (done[k]) continue;
      const a = accepted[k]!;
      finalV[k] = a.v;
      finalOffset[k] = a.offset;
      if (stalled(a, f[k]!, g[k]!)) forget(hist[k]!);
      else remember(hist[k]!, a.theta, theta[k]!, a.grad, g[k]!, m);
      theta[k] = a.theta;
      f[k] = a.value;
      g[k] = a.grad;
      iterations[k]!++;
      if (maxAbs(a.grad) <= tol[k]!) done[k] = true;
    }
  }
  if (o.prescale) toRawRows(finalV, finalOffset, o.prescale);
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

/** Per fold (K×d; K×n for the mask): what standardizing its rows subtracts and divides by, and which rows train it. */
interface Standardization {
  mean: Float64Array;
  scale: Float64Array;
  /** 1 where row i trains fold k, at k·n + i. */
  inTrain: Uint8Array;
  /** 1 where dimension c's deviation over fold k's training rows is below 1e-8 (divided by 1), at k·d + c. */
  flat: Uint8Array;
}

/** Each fold's mean and population deviation over its training rows, and its training mask. */
function standardize(h: Float32Array, n: number, d: number, folds: FoldProblem[], o: ProbeOptions): Standardization {
  const K = folds.length;
  const { sum: mean, sumSquares } = (o.kernels ?? typescriptKernels).foldMoments(
    h,
    d,
    folds.map((f) => f.train),
  );
  const scale = new Float64Array(K * d);
  const inTrain = new Uint8Array(K * n);
  const flat = new Uint8Array(K * d);
  folds.forEach((f, k) => {
    for (const i of f.train) inTrain[k * n + i] = 1;
    const mk = mean.subarray(k * d, (k + 1) * d);
    const ss = sumSquares.subarray(k * d, (k + 1) * d);
    const cnt = f.train.length;
    for (let c = 0; c < d; c++) {
      mk[c]! /= cnt;
      // Rows arrive centred and scaled (see prescale), so the one-pass variance loses nothing, unless a fold's rows
      // sit far from the rows' common centre in this dimension and vary little about their own: there the
      // subtraction cancels almost every digit (a constant column can leave 1e-18 where 0 is right), and the
      // variance is taken again about the fold's mean, in a second pass over its rows.
      let variance = ss[c]! / cnt - mk[c]! * mk[c]!;
      if (variance <= CANCELLED_VARIANCE * (ss[c]! / cnt)) {
        let sum = 0;
        let squares = 0;
        for (const i of f.train) {
          const dev = h[i * d + c]! - mk[c]!;
          sum += dev;
          squares += dev * dev;
        }
        variance = squares / cnt - (sum / cnt) * (sum / cnt);
      }
      const sd = Math.sqrt(Math.max(variance, 0));
      const raw = o.prescale ? o.prescale.scale[c]! : 1;
      flat[k * d + c] = sd * raw < CONSTANT_FEATURE_DEVIATION ? 1 : 0;
      scale[k * d + c] = flat[k * d + c] ? 1 / raw : sd;
    }
  });
  return { mean, scale, inTrain, flat };
}

/** Some folds' objective values and gradients, with their weights and offsets on the rows as given. */
interface Evaluation {
  values: number[];
  grads: Float64Array[];
  v: Float64Array;
  offset: Float64Array;
}

/**
 * Evaluates points θ = (w ∈ R^d, b), standardized weights then intercept: `points[a]` for fold `folds[a]` (by
 * default one point per fold, in fold order). A fold may come more than once. Each point's value and gradient
 * are the same, bit for bit, whatever the other points of the pass.
 */
type Evaluate = (points: Float64Array[], folds?: number[]) => Promise<Evaluation>;

/** The folds' objective and gradient, every fold asked for in one pass over the rows. */
function foldObjective(
  products: RowProducts,
  y: Uint8Array,
  folds: FoldProblem[],
  std: Standardization,
  C: number,
): Evaluate {
  const { n, d } = products;
  const K = folds.length;
  const { mean, scale, inTrain, flat } = std;
  const sgn = Float64Array.from(y, (v) => (v ? 1 : -1));
  const allFolds = folds.map((_, k) => k);
  return async (points, cols = allFolds) => {
    const A = cols.length;
    const v = new Float64Array(A * d);
    const offset = new Float64Array(A);
    const inOrder = A === K && cols.every((k, a) => k === a);
    const train = inOrder ? inTrain : new Uint8Array(A * n);
    cols.forEach((k, a) => {
      const th = points[a]!;
      let o2 = th[d]!;
      for (let c = 0; c < d; c++) {
        const vc = th[c]! / scale[k * d + c]!;
        v[a * d + c] = vc;
        o2 -= vc * mean[k * d + c]!;
      }
      offset[a] = o2;
      if (!inOrder) train.set(inTrain.subarray(k * n, (k + 1) * n), a * n);
    });
    const {
      loss,
      gsum,
      grad: ht,
    } = products.logistic
      ? await products.logistic(v, offset, y, train, A)
      : await logisticPass(products, sgn, v, offset, train, A);
    const values: number[] = [];
    const grads: Float64Array[] = [];
    cols.forEach((k, a) => {
      const th = points[a]!;
      let reg = 0;
      const grad = new Float64Array(d + 1);
      for (let c = 0; c < d; c++) {
        reg += th[c]! * th[c]!;
        // A flat dimension's weight is held at zero (see trainProbes).
        grad[c] = flat[k * d + c]
          ? 0
          : th[c]! + (C * (ht[a * d + c]! - mean[k * d + c]! * gsum[a]!)) / scale[k * d + c]!;
      }
      grad[d] = C * gsum[a]!;
      values.push(0.5 * reg + C * loss[a]!);
      grads.push(grad);
    });
    return { values, grads, v, offset };
  };
}

/** Loss and gradient sums from the two products, where the backend has no fused pass. */
async function logisticPass(
  products: RowProducts,
  sgn: Float64Array,
  v: Float64Array,
  offset: Float64Array,
  train: Uint8Array,
  cols: number,
) {
  const { n } = products;
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
}

/** L-BFGS's memory of one fold: the last steps s, their gradient changes y, and 1/(s·y). */
interface CurvatureHistory {
  s: Float64Array[];
  y: Float64Array[];
  rho: number[];
}

/**
 * The L-BFGS direction −H·g, by the two-loop recursion over the kept curvature pairs. Each pair's vectors are
 * taken once per loop and each update's coefficient once per pair (the same operations, in the same order, as the
 * recursion written out: `q[c] += s[c] * (alpha − rho · (y·q))`).
 */
function lbfgsDirection(grad: Float64Array, H: CurvatureHistory): Float64Array {
  const q = Float64Array.from(grad);
  const len = q.length;
  const m = H.s.length;
  const alpha = new Float64Array(m);
  for (let j = m - 1; j >= 0; j--) {
    const a = H.rho[j]! * dot(H.s[j]!, q);
    const yj = H.y[j]!;
    alpha[j] = a;
    for (let c = 0; c < len; c++) q[c]! -= a * yj[c]!;
  }
  let gamma = 1;
  if (m) gamma = dot(H.s[m - 1]!, H.y[m - 1]!) / dot(H.y[m - 1]!, H.y[m - 1]!);
  for (let c = 0; c < len; c++) q[c]! *= gamma;
  for (let j = 0; j < m; j++) {
    const step = alpha[j]! - H.rho[j]! * dot(H.y[j]!, q);
    const sj = H.s[j]!;
    for (let c = 0; c < len; c++) q[c]! += sj[c]! * step;
  }
  for (let c = 0; c < len; c++) q[c] = -q[c]!;
  return q;
}

/** Where a fold's line search stopped: the point taken and the objective there. */
interface Accepted {
  theta: Float64Array;
  value: number;
  grad: Float64Array;
  /** The point's weights and offset on the rows as given. */
  v: Float64Array;
  offset: number;
}

/**
 * Backtracking line search (Armijo) along each unfinished fold's direction, the trial points of the folds still
 * searching evaluated together. Every unfinished fold comes back with a point: its last trial is taken
 * unconditionally (see MAX_LINE_SEARCH_TRIALS). A fold searching alone whose last trial failed and cut its step to
 * the low bound has `ahead` more trials evaluated in the same pass (see TRIALS_AHEAD).
 */
async function lineSearch(
  evaluate: Evaluate,
  theta: Float64Array[],
  f: number[],
  g: Float64Array[],
  dir: Float64Array[],
  done: boolean[],
  hist: CurvatureHistory[],
  ahead: number,
): Promise<(Accepted | undefined)[]> {
  const d = theta[0]!.length - 1;
  const allFolds = theta.map((_, k) => k);
  // Without curvature pairs the direction is −g: a first step of 1/max|g| moves no component by more than 1.
  const step = theta.map((_, k) =>
    done[k] ? 0 : hist[k]!.s.length ? 1 : Math.min(1, 1 / Math.max(maxAbs(g[k]!), FIRST_STEP_GRADIENT_FLOOR)),
  );
  const slope = theta.map((_, k) => dot(g[k]!, dir[k]!));
  const searching = theta.map((_, k) => !done[k]);
  // Whether a fold's last failed trial cut its step by NEXT_STEP_MIN_FRACTION.
  const cutLow = theta.map(() => false);
  const accepted: (Accepted | undefined)[] = new Array(theta.length);
  const at = (k: number, s: number) => {
    const t = Float64Array.from(theta[k]!);
    for (let c = 0; c <= d; c++) t[c]! += s * dir[k]![c]!;
    return t;
  };
  // Trials evaluated ahead for the fold searching alone, each step a tenth of the one before.
  let early: Trial[] = [];
  for (let tries = 0; tries < MAX_LINE_SEARCH_TRIALS && searching.some(Boolean); tries++) {
    const active = allFolds.filter((k) => searching[k]);
    const alone = active.length === 1 ? active[0]! : -1;
    let trials: Trial[];
    if (alone >= 0 && early[0]?.fold === alone && early[0].step === step[alone]) {
      trials = early.splice(0, 1);
    } else {
      const cols = active.map((k) => ({ fold: k, step: step[k]! }));
      for (
        let j = 0, s = step[alone]!;
        alone >= 0 && cutLow[alone] && j < ahead && tries + j + 1 < MAX_LINE_SEARCH_TRIALS;
        j++
      ) {
        s = NEXT_STEP_MIN_FRACTION * s;
        cols.push({ fold: alone, step: s });
      }
      const points = cols.map((c) => at(c.fold, c.step));
      const e = await evaluate(
        points,
        cols.map((c) => c.fold),
      );
      const all = cols.map((c, a) => ({
        ...c,
        theta: points[a]!,
        value: e.values[a]!,
        grad: e.grads[a]!,
        v: e.v.slice(a * d, (a + 1) * d),
        offset: e.offset[a]!,
      }));
      trials = all.slice(0, active.length);
      early = all.slice(active.length);
    }
    const last = tries === MAX_LINE_SEARCH_TRIALS - 1;
    active.forEach((k, a) => {
      const t = trials[a]!;
      if (acceptable(t.value, t.grad, f[k]!, g[k]!, step[k]!, slope[k]!) || last) {
        searching[k] = false;
        accepted[k] = t;
      } else {
        const next = nextStep(step[k]!, t.value, f[k]!, slope[k]!);
        cutLow[k] = next === NEXT_STEP_MIN_FRACTION * step[k]!;
        step[k] = next;
      }
    });
  }
  return accepted;
}

/** A trial evaluated: the fold, its step along the fold's direction, and the point with its objective. */
interface Trial extends Accepted {
  fold: number;
  step: number;
}

/**
 * Armijo, or — where float32 products make the objective too noisy to see a decrease that small — a step that
 * shrinks the gradient without raising the objective beyond its noise.
 */
function acceptable(
  value: number,
  grad: Float64Array,
  f: number,
  g: Float64Array,
  step: number,
  slope: number,
): boolean {
  const armijo = value <= f + ARMIJO_FRACTION * step * slope;
  const withinNoise = value <= f + OBJECTIVE_NOISE * Math.abs(f) && maxAbs(grad) < maxAbs(g);
  return armijo || withinNoise;
}

/** The step after a failed trial: the minimum of the quadratic through f, the slope and the trial value, bounded. */
function nextStep(t: number, value: number, f: number, slope: number): number {
  const quadratic = (-slope * t * t) / (2 * (value - f - slope * t));
  if (!Number.isFinite(quadratic)) return NEXT_STEP_MAX_FRACTION * t;
  return Math.min(NEXT_STEP_MAX_FRACTION * t, Math.max(NEXT_STEP_MIN_FRACTION * t, quadratic));
}

/**
 * Whether an accepted step made no progress: the objective no lower than the float64 rounding of its value and
 * the largest gradient component within {@link STALL_GRADIENT_FRACTION} of where it was. Near the optimum of an
 * ill-conditioned fold (features that are a few directions repeated) L-BFGS's memory can steer every direction
 * along the flat valley, so that each line search ends on a step that changes nothing and the fold never meets the
 * stopping rule; scikit-learn's float64 L-BFGS converges there.
 */
function stalled(a: Accepted, f: number, g: Float64Array): boolean {
  return a.value >= f - STALL_OBJECTIVE_FRACTION * Math.abs(f) && maxAbs(a.grad) > STALL_GRADIENT_FRACTION * maxAbs(g);
}

/** Drops a fold's curvature pairs, so that its next direction is the steepest descent (see {@link stalled}). */
function forget(H: CurvatureHistory): void {
  H.s.length = 0;
  H.y.length = 0;
  H.rho.length = 0;
}

/** Keeps a step's curvature pair (s = θ' − θ, y = g' − g) when its curvature is positive; the oldest go beyond `m`. */
function remember(
  H: CurvatureHistory,
  next: Float64Array,
  prev: Float64Array,
  nextGrad: Float64Array,
  prevGrad: Float64Array,
  m: number,
): void {
  const s = new Float64Array(next.length);
  const yv = new Float64Array(next.length);
  for (let c = 0; c < next.length; c++) {
    s[c] = next[c]! - prev[c]!;
    yv[c] = nextGrad[c]! - prevGrad[c]!;
  }
  const sy = dot(s, yv);
  if (sy <= MIN_CURVATURE) return;
  H.s.push(s);
  H.y.push(yv);
  H.rho.push(1 / sy);
  if (H.s.length > m) {
    H.s.shift();
    H.y.shift();
    H.rho.shift();
  }
}

/** Weights on prescaled rows h' = (h − mean)/scale made raw: v·h' + o = (v/scale)·h + o − (v/scale)·mean. */
function toRawRows(v: Float64Array[], offset: number[], prescale: NonNullable<ProbeOptions["prescale"]>): void {
  for (let k = 0; k < v.length; k++) {
    const vk = v[k]!;
    for (let c = 0; c < vk.length; c++) {
      vk[c] = vk[c]! / prescale.scale[c]!;
      offset[k] = offset[k]! - vk[c]! * prescale.mean[c]!;
    }
  }
}
