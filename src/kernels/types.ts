/**
 * The numeric kernels: every heavy loop of `hsm`, behind one interface that
 * each backend (src/kernels/registry.ts) implements in part and completes from
 * a named fallback.
 *
 * What agrees across implementations, kernel by kernel:
 * - `f32ToF16`, `f16ToF32`, `f16Stats`: exact — the same bits everywhere
 *   (NumPy's conversion).
 * - `sha256Stats`: exact — the digest node:crypto gives, and `f16Stats`'
 *   (or the float32 equivalent's) counts.
 * - `bootstrapMean`, `bootstrapAuroc`: the same draws everywhere (one
 *   generator); the replicates are equal bit for bit, as every implementation
 *   sums the same terms in the same order.
 * - `rank`: own scores are float32 dot products (equal to the float32
 *   reference within float32 accumulation order); the counts above are exact
 *   except for anchors whose score lies within that rounding of the row's own.
 * - `products`, `rowsTimes`: the TypeScript loops accumulate in float64; the
 *   native core multiplies float32 rows in float32 lanes; TensorFlow.js in
 *   float32. They agree within float32 accumulation error, not bitwise.
 * - `centreRows`, `anchorCosines`, `standardizeRows`, `foldMoments`: float64
 *   sums in a fixed order, the same in TypeScript and the native core: equal
 *   bit for bit.
 * - `prepareHead`, `headArgmax`: exact — the same arrays bit for bit, and
 *   the argmax of the same float64 logits (the native core screens with
 *   bfloat16 under a rigorous error bound, native/head.cc, and computes only
 *   the survivors exactly; TypeScript computes every logit).
 */

/**
 * A layer's rows as the passes over a layer read them: float32 values, or the
 * float16 bits a store holds (a Uint16Array). Widening float16 is exact, so a
 * kernel gives the same bits either way; float16 spares the float32 copy.
 */
export type LayerRows = Float32Array | Uint16Array;

/** Maybe a promise: TensorFlow.js kernels read results back asynchronously. */
export type MaybePromise<T> = T | Promise<T>;

/** What a store records per file: how many values are not finite, and the largest finite magnitude. */
export interface F16Stats {
  nonfinite: number;
  maxAbs: number;
}

/** One pass over a stream of bytes: its sha256 and the statistics of the float values it carries. */
export interface Sha256Stream {
  /**
   * Hashes `chunk`; with a value width, also counts the values in
   * `chunk[statsFrom…]` (default 0: all of it), whole values only. Chunks
   * carrying values should start on a value boundary.
   */
  update(chunk: Uint8Array, statsFrom?: number): void;
  /**
   * `update(chunk, statsFrom)` here and `other.update(otherChunk,
   * otherFrom)` together; the native core interleaves the two on one core,
   * which hashes nearly twice as fast as one stream.
   */
  updateWith(
    chunk: Uint8Array,
    statsFrom: number,
    other: Sha256Stream,
    otherChunk: Uint8Array,
    otherFrom: number,
  ): void;
  /** The hex digest, and the statistics when a width was given. Once; the stream is finished after it. */
  digest(): { sha256: string; stats?: F16Stats };
}

/** A file for {@link Sha256Files}: its values, of `width` bytes (0: none counted), start at byte `statsFrom`. */
export interface FileHashJob {
  path: string;
  statsFrom: number;
  width: 0 | 2 | 4;
}

/** A whole file's sha256, its length, and the statistics when a width was given. */
export interface FileHash {
  sha256: string;
  bytes: number;
  stats?: F16Stats;
}

/**
 * Whole files through `sha256Stats`, read and hashed on up to `threads`
 * native threads without passing through JavaScript; one entry per job,
 * undefined for a file that could not be opened or read (the caller reads it
 * again to learn why). Not one of the kernels a backend must provide: only the
 * native core has it; without it the store spreads files over worker threads
 * (src/store/hash.ts).
 */
export type Sha256Files = (jobs: readonly FileHashJob[], threads: number) => Promise<(FileHash | undefined)[]>;

/** A group of scored rows sorted by score, as the AUROC kernels take them. */
export interface SortedArrays {
  /** Each row's fact, as an index below nFacts. */
  fact: Int32Array;
  /** Each row's 0/1 label. */
  label: Uint8Array;
  /** Start of each run of equal scores in sorted order, plus the row count. */
  ties: Int32Array;
  nFacts: number;
}

/** One group's bootstrap replicates for {@link Kernels.bootstrapAuroc}: its draws, its rows, where they go. */
export interface AurocJob {
  seed: number;
  stream: number;
  group: SortedArrays;
  b: number;
  out: Float64Array;
  paired?: SortedArrays;
  toPaired?: Int32Array;
  pairedOut?: Float64Array;
}

/** Matrix products on a fixed row matrix H (n × d, float32, row-major). */
export interface RowProducts {
  readonly n: number;
  readonly d: number;
  /** H · V for V (d × k, column j at V[j*d …]): returns n × k, row-major. */
  times(v: Float64Array, k: number): Promise<Float64Array>;
  /** Hᵀ · G for G (n × k, row-major): returns d × k as k columns (column j at [j*d …]). */
  transposeTimes(g: Float64Array, k: number): Promise<Float64Array>;
  /**
   * The logistic probe's objective and gradient for k folds in one pass over
   * H, where a backend has it (else the probe uses `times` and
   * `transposeTimes`): for fold j, over rows i with `train[j·n + i]` set,
   * s = ±1 by `y[i]` and m = s·(H_i·v_j + offset[j]): `loss[j]` = Σ log(1 + e^−m),
   * `gsum[j]` = Σ g_i, `grad` column j = Σ g_i H_i, with g_i = −s/(1 + e^m).
   */
  logistic?(v: Float64Array, offset: Float64Array, y: Uint8Array, train: Uint8Array, k: number): Promise<LogisticPass>;
  dispose(): void;
}

/** What {@link RowProducts.logistic} returns, per fold. */
export interface LogisticPass {
  loss: Float64Array;
  gsum: Float64Array;
  /** k columns of d: column j at [j·d …]. */
  grad: Float64Array;
}

/**
 * An LM head prepared once for {@link Kernels.headArgmax}, in arrays the caller
 * allocates (src/kernels/head.ts: `headSizes`, `allocateHead`), so that worker
 * threads can share them through SharedArrayBuffers.
 */
export interface PreparedHead {
  /**
   * Wᵀ (vocab rows of d values, each vocabulary row contiguous) as the top 16 bits of each float32 value: its
   * bfloat16 truncated toward zero, which the screen reads.
   */
  hi: Uint16Array;
  /** The bottom 16 bits of each value of Wᵀ: with `hi`, the float32 value exactly. */
  lo: Uint16Array;
  /** Per vocabulary row, its Euclidean norm: the float64 sum of its squares in order, the square root rounded to float32. */
  norms: Float32Array;
}

export interface Kernels {
  /** float32 → float16 bits, NumPy's rounding; `src` and `dst` of equal length. */
  f32ToF16(src: Float32Array, dst: Uint16Array): void;
  /** float16 bits → float32, exact. */
  f16ToF32(src: Uint16Array, dst: Float32Array): void;
  /** Non-finite count and largest finite magnitude of float16 bits. */
  f16Stats(src: Uint16Array): F16Stats;
  /**
   * A streamed sha256 that counts, in the same pass, the non-finite values and
   * largest finite magnitude of the float16 (`width` 2) or float32 (4) values
   * it is shown; 0 counts nothing.
   */
  sha256Stats(width: 0 | 2 | 4): Sha256Stream;
  /**
   * ISS's preparation: the rows of `h` (n × d) marked in `valid`, centred on
   * their float64 mean and scaled to unit length, written to `out` (n × d;
   * `h` is only read). Rows of zero length are unmarked in `valid`. Returns
   * how many rows are left unmarked.
   */
  centreRows(h: LayerRows, n: number, d: number, valid: Uint8Array, out: Float32Array): number;
  /**
   * ISS's rank kernel: for query i, row `rows[i]` of `x` against anchors `a`
   * (nAnchors × d): `ownScore[i]` = its float32 dot product with anchor
   * `own[i]`, `above[i]` = how many other anchors score strictly higher
   * (own[i] < 0: 0 and 0).
   */
  rank(
    x: Float32Array,
    rows: Int32Array,
    a: Float32Array,
    nAnchors: number,
    d: number,
    own: Int32Array,
    ownScore: Float32Array,
    above: Int32Array,
  ): MaybePromise<void>;
  /**
   * ISS's cosines in float64: for query i, `ownCos[i]` = x·a_own and
   * `otherCos[i]` = (x·Σa − x·a_own)/(nAnchors − 1), x = row `rows[i]` of `x`.
   */
  anchorCosines(
    x: Float32Array,
    rows: Int32Array,
    a: Float32Array,
    nAnchors: number,
    d: number,
    own: Int32Array,
    ownCos: Float64Array,
    otherCos: Float64Array,
  ): void;
  /**
   * KTS's prescale: rows `rows` of `h` gathered, centred and scaled by their
   * own float64 mean and population deviation (a zero deviation divides by 1).
   * The rows are written into `out` (at least rows × d values) where given.
   */
  standardizeRows(
    h: LayerRows,
    rows: Int32Array,
    d: number,
    out?: Float32Array,
  ): { rows: Float32Array; mean: Float64Array; scale: Float64Array };
  /** Per fold k, the float64 sums of the rows `folds[k]` of h (n × d) and of their squares: K × d each. */
  foldMoments(h: Float32Array, d: number, folds: Int32Array[]): { sum: Float64Array; sumSquares: Float64Array };
  /** Products on a fixed row matrix, for the probe's training steps. */
  products(h: Float32Array, n: number, d: number): MaybePromise<RowProducts>;
  /** out (n × k, row-major) = H · V, column j of V at v[j·d …]. */
  rowsTimes(h: LayerRows, n: number, d: number, v: Float64Array, k: number, out: Float64Array): MaybePromise<void>;
  /** Bootstrap replicates of the mean over facts of `values` (one per fact). */
  bootstrapMean(seed: number, stream: number, values: Float64Array, b: number, out: Float64Array): MaybePromise<void>;
  /**
   * For each job, bootstrap replicates of a group's fact-weighted AUROC (NaN
   * where a class has no weight); with `paired`, also the paired group's AUROC
   * under the same draw, each fact's count carried to `toPaired[f]` (−1: none).
   * The jobs' replicates are what each job alone would give. The native core
   * draws them off the JavaScript thread, one job after another, without
   * coming back to it between two: every `out` and `pairedOut` is written once
   * the promise it returns settles.
   */
  bootstrapAuroc(jobs: readonly AurocJob[]): MaybePromise<void>;
  /**
   * Prepares an LM head from its weight W as an ONNX graph stores it (float32,
   * row-major d × vocab) into `head` (arrays of `headSizes(d, vocab)`).
   */
  prepareHead(w: Float32Array, d: number, vocab: number, head: PreparedHead): void;
  /**
   * Greedy decoding's LM head: `out[b]` = argmax over v of Σᵢ h[b·d + i]·W[i, v]
   * for the `batch` rows of h (batch × d), each product exact and the sum taken
   * in float64 in order i = 0 … d−1; ties go to the lowest v, a NaN logit never
   * wins (every logit NaN: 0). `threads` splits the vocabulary (the answer is the
   * same for any count). Returns how many float64 dot products it took.
   */
  headArgmax(
    h: Float32Array,
    batch: number,
    d: number,
    head: PreparedHead,
    vocab: number,
    out: Int32Array,
    threads: number,
  ): number;
}

export type KernelName = keyof Kernels;

/** Every kernel, in the order results list them. */
export const KERNEL_NAMES: readonly KernelName[] = [
  "f32ToF16",
  "f16ToF32",
  "f16Stats",
  "sha256Stats",
  "centreRows",
  "rank",
  "anchorCosines",
  "standardizeRows",
  "foldMoments",
  "products",
  "rowsTimes",
  "bootstrapMean",
  "bootstrapAuroc",
  "prepareHead",
  "headArgmax",
];

/** Options every backend receives; decided in TypeScript, passed to each kernel. */
export interface KernelOptions {
  /** Threads a native kernel may use (default: os.availableParallelism()). */
  threads: number;
  /** Whether the native rank and LM-head kernels may screen with the bfloat16 instructions (HSM_NO_BF16 unset). */
  allowBf16: boolean;
}
