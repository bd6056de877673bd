/**
 * Rows ordered by (score, row), as KTS's sorted groups take them: scores
 * ascending, −0 equal to +0, equal scores in row order; and the groups taken
 * from them in that order. The native core does both where it loaded
 * (native/order.h, the same radix sort and the same placing); the code here is
 * its fallback and its reference.
 */
import { nativeOrderByScore, nativeSortedGroups } from "../kernels/native.js";
import { sortedAuroc } from "../kernels/typescript/bootstrap.js";
import type { SortedArrays } from "../kernels/types.js";

/** Whether this host stores a float64's low word first. */
const LITTLE_ENDIAN = new Uint8Array(Uint32Array.of(1).buffer)[0] === 1;
/** Digits of the 64-bit keys sorted one pass each, least significant first. */
const DIGIT_BITS = 16;
const DIGITS = 64 / DIGIT_BITS;

/** `rows` (ascending) ordered by (score, row): the native core's sort, else {@link orderByScoreRadix}. */
export function orderByScore(rows: Int32Array, score: Float64Array): Int32Array {
  if (!nativeOrderByScore) return orderByScoreRadix(rows, score);
  return nativeOrderByScore(rows, score) ?? orderByScoreComparing(rows, score);
}

/**
 * `rows` (ascending) ordered by (score, row): a stable radix sort of the
 * scores' bits, four passes of sixteen bits, which keeps equal scores in row
 * order. Where a score is NaN, {@link orderByScoreComparing} decides instead.
 */
export function orderByScoreRadix(rows: Int32Array, score: Float64Array): Int32Array {
  const n = rows.length;
  const value = new Float64Array(n);
  for (let i = 0; i < n; i++) {
    const s = score[rows[i]!]!;
    if (Number.isNaN(s)) return orderByScoreComparing(rows, score);
    value[i] = s + 0; // −0 + 0 is +0: the two zeros sort as one
  }
  // Each value's bits as an unsigned key that orders like the value: a negative value's bits all flipped, another's
  // sign bit set. Split into 16-bit digits, least significant first.
  const words = new Uint32Array(value.buffer);
  const [lo, hi] = LITTLE_ENDIAN ? [0, 1] : [1, 0];
  const digits = Array.from({ length: DIGITS }, () => new Uint16Array(n));
  for (let i = 0; i < n; i++) {
    let low = words[2 * i + lo]!;
    let high = words[2 * i + hi]!;
    if (high >>> 31) {
      low = ~low >>> 0;
      high = ~high >>> 0;
    } else high = (high | 0x80000000) >>> 0;
    digits[0]![i] = low & 0xffff;
    digits[1]![i] = low >>> 16;
    digits[2]![i] = high & 0xffff;
    digits[3]![i] = high >>> 16;
  }
  let order = Int32Array.from(rows.keys());
  let next = new Int32Array(n);
  const count = new Uint32Array(2 ** DIGIT_BITS + 1);
  for (const digit of digits) {
    count.fill(0);
    for (let i = 0; i < n; i++) count[digit[i]! + 1]!++;
    if (n === 0 || count[digit[0]! + 1] === n) continue; // one digit everywhere: the pass would change nothing
    for (let b = 1; b < count.length; b++) count[b]! += count[b - 1]!;
    for (let i = 0; i < n; i++) {
      const at = order[i]!;
      next[count[digit[at]!]!++] = at;
    }
    [order, next] = [next, order];
  }
  const out = new Int32Array(n);
  for (let i = 0; i < n; i++) out[i] = rows[order[i]!]!;
  return out;
}

/**
 * `rows` (ascending) ordered by (score, row) by comparison: the scores sorted
 * by the typed array's own sort, each row then taking the next free place in
 * its score's run (found by binary search), in row order. Rows whose score is
 * NaN come last, in row order.
 */
export function orderByScoreComparing(rows: Int32Array, score: Float64Array): Int32Array {
  const n = rows.length;
  const sorted = new Float64Array(n);
  for (let i = 0; i < n; i++) sorted[i] = score[rows[i]!]!;
  sorted.sort(); // NaN last
  let nan = n;
  while (nan > 0 && Number.isNaN(sorted[nan - 1]!)) nan--;
  // Per run of equal scores (at its first place): rows placed so far. NaN scores are one run, last.
  const placed = new Int32Array(n);
  const out = new Int32Array(n);
  for (let i = 0; i < n; i++) {
    const r = rows[i]!;
    const s = score[r]!;
    let lo = Number.isNaN(s) ? nan : 0;
    let hi = Number.isNaN(s) ? nan : n;
    while (lo < hi) {
      const mid = (lo + hi) >>> 1;
      if (sorted[mid]! < s) lo = mid + 1;
      else hi = mid;
    }
    out[lo + placed[lo]!++] = r;
  }
  return out;
}

/** Where each labelled row of a layer goes among KTS's reported groups (the pooled group last). */
export interface GroupPlaces {
  /** Per row of the store: its family's group (−1: none), and its fact there. */
  groupOf: Int32Array;
  factOf: Int32Array;
  /** Per row of the store: its fact in the pooled group, −1 where it is not pooled. */
  pooledFactOf: Int32Array;
  /** Per group: the rows it takes, and its facts. */
  rows: readonly number[];
  nFacts: readonly number[];
}

/**
 * The groups' rows in `order` (rows sorted by score): each row's fact and label, runs of equal scores marked; and
 * each group's AUROC with every row weighted 1 (null where a label is missing). The native core does it in one
 * call where it loaded (and `useNative` is left true); else the same placing here.
 */
export function sortedGroups(
  order: Int32Array,
  score: Float64Array,
  y: Uint8Array,
  places: GroupPlaces,
  useNative = true,
): { arrays: SortedArrays[]; auroc: (number | null)[] } {
  const { groupOf, factOf, pooledFactOf, rows, nFacts } = places;
  const native = useNative ? nativeSortedGroups : undefined;
  if (native) {
    const fact = rows.map((n) => new Int32Array(n));
    const label = rows.map((n) => new Uint8Array(n));
    const ties = rows.map((n) => new Int32Array(n + 1));
    const auroc = new Float64Array(rows.length);
    const lengths = native(order, score, y, groupOf, factOf, pooledFactOf, fact, label, ties, auroc);
    return {
      arrays: rows.map((_, g) => ({
        fact: fact[g]!,
        label: label[g]!,
        ties: ties[g]!.subarray(0, lengths[g]!),
        nFacts: nFacts[g]!,
      })),
      auroc: Array.from(auroc, (a) => (Number.isNaN(a) ? null : a)),
    };
  }
  const sorted = rows.map((n) => ({
    fact: new Int32Array(n),
    label: new Uint8Array(n),
    ties: new Int32Array(n + 1),
    nTies: 0,
    at: 0,
    last: NaN,
  }));
  const place = (o: (typeof sorted)[number], r: number, fact: number) => {
    if (o.at === 0 || score[r] !== o.last) o.ties[o.nTies++] = o.at;
    o.last = score[r]!;
    o.fact[o.at] = fact;
    o.label[o.at++] = y[r]!;
  };
  const pooled = sorted.at(-1)!;
  for (const r of order) {
    if (groupOf[r]! >= 0) place(sorted[groupOf[r]!]!, r, factOf[r]!);
    if (pooledFactOf[r]! >= 0) place(pooled, r, pooledFactOf[r]!);
  }
  const arrays = sorted.map((o, g) => {
    o.ties[o.nTies++] = o.at;
    return { fact: o.fact, label: o.label, ties: o.ties.subarray(0, o.nTies), nFacts: nFacts[g]! };
  });
  return { arrays, auroc: arrays.map((a) => sortedAuroc(a)) };
}
