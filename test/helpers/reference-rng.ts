/**
 * Independent twins of what the bootstrap is defined by (docs/metrics.md#bootstrap-definition): the
 * generator in BigInt arithmetic, FNV-1a over UTF-8 bytes, NumPy's linear
 * percentile. Written from the definitions, sharing no code with src/.
 */

/** The counts of `b` draws of `n` facts with replacement from xoshiro128** seeded by (seed, stream). */
export function referenceDraws(seed: number, stream: number, n: number, b: number): Int32Array[] {
  const M = 0xffffffffn;
  const mul = (x: bigint, y: bigint) => (x * y) & M;
  const rotl = (x: bigint, k: bigint) => ((x << k) | (x >> (32n - k))) & M;
  let s = (BigInt(seed >>> 0) ^ mul(BigInt(stream) + 1n, 0x9e3779b9n)) & M;
  const next = () => {
    s = (s + 0x9e3779b9n) & M;
    let z = s;
    z = mul(z ^ (z >> 16n), 0x85ebca6bn);
    z = mul(z ^ (z >> 13n), 0xc2b2ae35n);
    return z ^ (z >> 16n);
  };
  let [a, bb, c, d] = [next(), next(), next(), next()];
  if ((a | bb | c | d) === 0n) a = 1n;
  const u32 = () => {
    const result = mul(rotl(mul(bb, 5n), 7n), 9n);
    const t = (bb << 9n) & M;
    c ^= a;
    d ^= bb;
    bb ^= c;
    a ^= d;
    c ^= t;
    d = rotl(d, 11n);
    return result;
  };
  const out: Int32Array[] = [];
  for (let r = 0; r < b; r++) {
    const counts = new Int32Array(n);
    for (let i = 0; i < n; i++) counts[Math.floor((Number(u32()) / 2 ** 32) * n)]!++;
    out.push(counts);
  }
  return out;
}

/** FNV-1a, 32 bits, over the UTF-8 bytes of `text`, in BigInt arithmetic. */
export function referenceFnv1a(text: string): number {
  let h = 0x811c9dc5n;
  for (const byte of Buffer.from(text, "utf8")) h = ((h ^ BigInt(byte)) * 0x01000193n) & 0xffffffffn;
  return Number(h);
}

/** NumPy's default percentile: linear interpolation between order statistics. */
export function referencePercentile(values: number[], q: number): number {
  const v = [...values].sort((a, b) => a - b);
  const pos = ((v.length - 1) * q) / 100;
  const lo = Math.floor(pos);
  return v[lo]! + (v[Math.ceil(pos)]! - v[lo]!) * (pos - lo);
}
