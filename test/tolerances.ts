/**
 * Every numeric tolerance the tests use, with the reason for each. A test that
 * compares floating-point results names one of these instead of a literal.
 */

/** Float64 sums of the same numbers in another order: a few ulps at the scales tested. */
export const FLOAT64_REORDER = 1e-9;
/** Results reported to six decimals (hand-computed ISS/KTS cases worked in float64). */
export const HAND_COMPUTED_DIGITS = 6;
/**
 * ISS own/other cosines from float32 products (native lanes, TensorFlow.js) against
 * float64 TypeScript loops: float32 accumulation over d ≤ 1024 terms of unit vectors.
 */
export const COSINE_F32 = 1e-5;
/** float16 storage of a float32 value: half an ulp of float16 relative, 2^-11. */
export const FLOAT16_RELATIVE = 2 ** -11;
/** Logits of the tiny generated models from onnxruntime (float32) against the float64 reference: float32 rounding over d ≤ 64 products. */
export const LOGITS_F32 = 1e-4;
/** One float32 rounding of a value of order one (kernels that store float64 results as float32). */
export const FLOAT32_ROUNDING = 2 ** -24;
/**
 * Row products (H·V, Hᵀ·G) of float32 rows with float64 right-hand sides, relative to the
 * largest entry: the native core and TensorFlow.js accumulate in float32 (d ≤ 1024 terms),
 * the TypeScript loops in float64.
 */
export const PRODUCTS_F32 = 1e-5;
/** docs/metrics.md#tolerances, agreement between implementations: point estimates (iss, own_cos, other_cos), absolute. */
export const METRICS_POINT = 1e-4;
/** docs/metrics.md#tolerances: auroc, absolute (probes fitted with float32 vs float64 products). */
export const METRICS_AUROC = 5e-3;
/** docs/metrics.md#tolerances: kts, absolute (a ratio of AUROC differences amplifies theirs). */
export const METRICS_KTS = 2e-2;
/** docs/metrics.md#tolerances: intervals from different generators agree within max(this, METRICS_INTERVAL_RELATIVE × width). */
export const METRICS_INTERVAL_ABSOLUTE = 0.02;
export const METRICS_INTERVAL_RELATIVE = 0.15;
/** Two implementations replaying the same bootstrap draws in float64: sums in another order, a few ulps of values ≤ 1. */
export const SAME_DRAWS_FLOAT64 = 1e-12;
/** McNemar p-values from ~n/2 logarithms summed in float64 against exact rational arithmetic: relative error. */
export const BINOMIAL_TAIL_RELATIVE = 1e-11;
/** Ratios of small integer counts (hand-counted AUROCs, percentiles of a few values) computed in float64. */
export const COUNTED_DIGITS = 12;
/**
 * The probe's weights against scikit-learn's lbfgs optimum, both stopped at max|∇| ≤ 1e-5·C·n, in toBeCloseTo
 * digits (|Δ| < 5e-4): weights of order one.
 */
export const PROBE_VS_SKLEARN_DIGITS = 3;
/** One fold trained beside others vs alone: the same problem, stopped at the same rule by different iterates. */
export const PROBE_FOLDS_TOGETHER_DIGITS = 4;
/** The stopping rule checked with an independently recomputed float64 gradient: relative slack for float32 products. */
export const GRADIENT_RECOMPUTED = 0.01;
/**
 * float16 graphs (every activation rounded to float16 after each operator): error of a stored
 * state per decoder block passed, relative to the row's RMS. Derivation in docs/extract.md
 * ("float16 graphs"): about 2^-11 per rounding, ~16 roundings on a block's path, so 16 · 2^-11 ≈ 0.008.
 */
export const FLOAT16_COMPUTE_PER_LAYER = 16 * 2 ** -11;
/**
 * int8 graphs with activations quantized per tensor (DynamicQuantizeLinear), against a float64
 * emulation of the same quantization: where an activation lies within float32 noise of a rounding
 * boundary the two pick neighbouring codes, moving a projection by one code step (the activation
 * range / 255 times a weight row), and later blocks carry that on: largest seen 0.045 of the row's
 * RMS (3 blocks, 18 rows up to 192 tokens), allowed twice that. A wrong tensor is off by the RMS itself.
 */
export const INT8_CODE_FLIPS = 0.1;
/**
 * A stored float16 state against the float64 reference forward pass, per element: |got − want| ≤ 2^-10·|want| + 2e-3 —
 * float16 rounding (half an ulp is 2^-11 relative; twice that covers the float32 graph's own rounding before the cast)
 * plus an absolute floor for elements near zero, where float32 sums over d ≤ 64 products differ from float64 by ~1e-6
 * and float16's subnormal spacing is 6e-8.
 */
export const STORED_VS_REFERENCE = { relative: 2 ** -10, absolute: 2e-3 } as const;
/**
 * A float16 graph widened to float32 (WebGPU without shader-f16) against the same graph run in float16 on the CPU:
 * the deviation of block `l`'s stored row relative to the row's largest magnitude (the self-check's measure) is at
 * most `storage + (l + 1) · perLayer`. The CPU's state is within (l + 1) · FLOAT16_COMPUTE_PER_LAYER of the row's
 * RMS from float32 arithmetic on the same float16 weights (docs/extract.md, "float16 graphs"), and the RMS is at
 * most the largest magnitude; the widened graph computes in float32, so besides that only both stores' float16
 * rounding (2^-11 of the largest magnitude each) and float32 noise of the two devices' reduction orders (2^-10, as
 * the self-check allows) separate them.
 */
export const WIDENED_VS_FLOAT16 = { storage: 2 ** -9, perLayer: FLOAT16_COMPUTE_PER_LAYER } as const;
