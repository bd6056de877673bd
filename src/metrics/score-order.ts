/**
 * Rows ordered by (score, row), as KTS's sorted groups take them: scores
 * ascending, −0 equal to +0, equal scores in row order. The native core sorts
 * where it loaded (native/order.h, the same radix sort); the sort here is its
 * fallback and its reference.
 */
import { nativeOrderByScore } from "../kernels/native.js";

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
 * its score's run (found by binary search), in row order.
 */
export function orderByScoreComparing(rows: Int32Array, score: Float64Array): Int32Array {
  const n = rows.length;
  const sorted = new Float64Array(n);
  for (let i = 0; i < n; i++) sorted[i] = score[rows[i]!]!;
  sorted.sort();
  // Per run of equal scores (at its first place): rows placed so far.
  const placed = new Int32Array(n);
  const out = new Int32Array(n);
  for (let i = 0; i < n; i++) {
    const r = rows[i]!;
    const s = score[r]!;
    let lo = 0;
    let hi = n;
    while (lo < hi) {
      const mid = (lo + hi) >>> 1;
      if (sorted[mid]! < s) lo = mid + 1;
      else hi = mid;
    }
    out[lo + placed[lo]!++] = r;
  }
  return out;
}
