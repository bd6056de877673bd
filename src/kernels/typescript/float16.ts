/**
 * Float32 ⇄ float16 conversion, bit for bit as NumPy's portable algorithm
 * (`npy_floatbits_to_halfbits` / `npy_halfbits_to_floatbits`): round to nearest
 * even, gradual underflow to subnormals, ±inf from magnitude 65520 up, NaN kept
 * with its payload's top bits (never turned into inf, never quieted).
 *
 * This is the pure-TypeScript reference. The native core implements the same
 * functions faster; the kernel tests hold every backend to these bits.
 */
import type { F16Stats, LayerRows } from "../types.js";

/** Converts the bits of one float32 to the bits of the nearest float16. */
export function f32BitsToF16Bits(f: number): number {
  const sign = (f >>> 16) & 0x8000;
  const fExp = f & 0x7f800000;
  if (fExp >= 0x47800000) {
    // Exponent overflow, inf or NaN.
    if (fExp === 0x7f800000) {
      const fSig = f & 0x007fffff;
      if (fSig !== 0) {
        // NaN: keep the top of the payload, but make sure it stays a NaN.
        let ret = 0x7c00 + (fSig >>> 13);
        if (ret === 0x7c00) ret++;
        return sign | ret;
      }
      return sign | 0x7c00;
    }
    return sign | 0x7c00;
  }
  if (fExp <= 0x38000000) {
    // Subnormal half or zero.
    if (fExp < 0x33000000) return sign;
    const e = fExp >>> 23;
    let fSig = 0x00800000 + (f & 0x007fffff);
    // If the bits that get shifted out are not exactly a half (round to even), we
    // must not let the sticky bits be lost: fold them into one.
    if ((fSig & ((1 << (126 - e)) - 1)) !== 0) fSig |= 1;
    fSig = fSig >>> (113 - e);
    // Round half to even.
    if ((fSig & 0x3fff) !== 0x1000 || (f & 0x07ff) !== 0) fSig += 0x1000;
    return sign | (fSig >>> 13);
  }
  // Normal range.
  const hExp = (fExp - 0x38000000) >>> 13;
  let fSig = f & 0x007fffff;
  if ((fSig & 0x3fff) !== 0x1000) fSig += 0x1000;
  // A carry out of the significand increments the exponent; at the top this
  // yields exactly 0x7c00 (inf), as NumPy does.
  return (sign | hExp) + (fSig >>> 13);
}

/** Converts the bits of one float16 to the bits of the float32 it denotes exactly. */
function f16BitsToF32Bits(h: number): number {
  const hExp = h & 0x7c00;
  const sign = (h & 0x8000) << 16;
  if (hExp === 0x0000) {
    let hSig = h & 0x03ff;
    if (hSig === 0) return sign >>> 0;
    // Subnormal: normalize.
    hSig <<= 1;
    let e = 0;
    while ((hSig & 0x0400) === 0) {
      hSig <<= 1;
      e++;
    }
    const fExp = (127 - 15 - e) << 23;
    const fSig = (hSig & 0x03ff) << 13;
    return (sign + fExp + fSig) >>> 0;
  }
  if (hExp === 0x7c00) {
    // inf or NaN, payload kept.
    return (sign + 0x7f800000 + ((h & 0x03ff) << 13)) >>> 0;
  }
  return (sign + (((h & 0x7fff) + 0x1c000) << 13)) >>> 0;
}

let f16ToF32Table: Uint32Array | undefined;

function table(): Uint32Array {
  if (!f16ToF32Table) {
    f16ToF32Table = new Uint32Array(65536);
    for (let h = 0; h < 65536; h++) f16ToF32Table[h] = f16BitsToF32Bits(h);
  }
  return f16ToF32Table;
}

function asU32(a: Float32Array): Uint32Array {
  return new Uint32Array(a.buffer, a.byteOffset, a.length);
}

/** Writes `src` converted to float16 bits into `dst` (same length). */
export function f32ToF16(src: Float32Array, dst: Uint16Array): void {
  checkLengths(src.length, dst.length);
  const bits = asU32(src);
  for (let i = 0; i < bits.length; i++) dst[i] = f32BitsToF16Bits(bits[i]!);
}

/** Writes float16 bits `src` widened to float32 into `dst` (same length). */
export function f16ToF32(src: Uint16Array, dst: Float32Array): void {
  checkLengths(src.length, dst.length);
  const t = table();
  const out = asU32(dst);
  for (let i = 0; i < src.length; i++) out[i] = t[src[i]!]!;
}

/**
 * Row i of `h` (d values a row) as float32: a view of float32 rows, or float16
 * bits widened into one buffer that every call reuses (so valid until the next).
 */
export function rowReader(h: LayerRows, d: number): (i: number) => Float32Array {
  if (h instanceof Float32Array) return (i) => h.subarray(i * d, (i + 1) * d);
  const row = new Float32Array(d);
  return (i) => {
    f16ToF32(h.subarray(i * d, (i + 1) * d), row);
    return row;
  };
}

/** Counts non-finite halves and finds the largest finite magnitude. */
export function f16Stats(src: Uint16Array): F16Stats {
  let nonfinite = 0;
  let maxMag = 0;
  for (let i = 0; i < src.length; i++) {
    const m = src[i]! & 0x7fff;
    if (m >= 0x7c00) nonfinite++;
    else if (m > maxMag) maxMag = m;
  }
  // Magnitude bits order like the values they denote, so the largest bits are the largest value.
  return { nonfinite, maxAbs: f16BitsToNumber(maxMag) };
}

/** The number a float16 bit pattern denotes. */
export function f16BitsToNumber(h: number): number {
  scratchU32[0] = f16BitsToF32Bits(h);
  return scratchF32[0]!;
}

const scratchF32 = new Float32Array(1);
const scratchU32 = new Uint32Array(scratchF32.buffer);

function checkLengths(a: number, b: number): void {
  if (a !== b) throw new RangeError(`Expected buffers of equal length but received ${a} and ${b}`);
}
