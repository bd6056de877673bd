/** The quantizers behind make-model's q4, int8 and nf4 styles, and the --style check. */
import { describe, expect, it } from "vitest";

import { NF4_BLOCK, NF4_CODES, Q4_BLOCK, quantizeNf4, quantizeQ4, quantizeQ8 } from "../../src/synthetic/quantize.js";
import { Rng } from "../../src/util/random.js";

const N = 5;
const K = 96;
const w = new Rng(3, 1).fillNormal(new Float32Array(N * K), 0.2);

describe("quantizers", () => {
  it("int4: packed codes, scales and zero points decode to the dequantized weights, within a step of the originals", () => {
    for (const symmetric of [false, true]) {
      const q = quantizeQ4(w, N, K, symmetric);
      const blocks = K / Q4_BLOCK;
      for (let n = 0; n < N; n++) {
        for (let k = 0; k < K; k++) {
          const b = Math.floor(k / Q4_BLOCK);
          const j = k % Q4_BLOCK;
          // Unpacked as MatMulNBits reads them: low nibble first along K; zero points two per byte, low first.
          const code = (q.packed[(n * blocks + b) * 16 + (j >> 1)]! >> ((j & 1) * 4)) & 15;
          const zp = symmetric ? 8 : (q.zeros![n * Math.ceil(blocks / 2) + (b >> 1)]! >> ((b & 1) * 4)) & 15;
          const scale = q.scales[n * blocks + b]!;
          expect(q.dequantized[n * K + k]).toBe(Math.fround((code - zp) * scale));
          // Half a step, or one where a code is clamped at 0 or 15 (symmetric: the extreme opposite the scale's sign).
          expect(Math.abs(q.dequantized[n * K + k]! - w[n * K + k]!)).toBeLessThanOrEqual(
            Math.abs(scale) * (code === 0 || code === 15 ? 1 : 0.5) + 1e-7,
          );
        }
      }
    }
  });

  it("int8: one symmetric scale, codes within ±127, stored [K, N]", () => {
    const q = quantizeQ8(w, N, K);
    const absMax = Math.max(...Array.from(w, Math.abs));
    expect(q.scale).toBe(Math.fround(absMax / 127));
    for (let n = 0; n < N; n++)
      for (let k = 0; k < K; k++)
        expect(q.dequantized[n * K + k]! === Math.fround(q.q[k * N + n]! * q.scale)).toBe(true);
    expect(Math.max(...Array.from(q.q, Math.abs))).toBe(127);
  });

  it("nf4: every value the nearest NF4 code times its block's absmax, high nibble first", () => {
    const q = quantizeNf4(w, N, K);
    for (let i = 0; i < N * K; i++) {
      const code = i % 2 === 0 ? q.packed[i >> 1]! >> 4 : q.packed[i >> 1]! & 15;
      const m = q.absmax[Math.floor(i / NF4_BLOCK)]!;
      expect(q.dequantized[i]).toBe(Math.fround(NF4_CODES[code]! * m));
      const x = w[i]! / m;
      for (const c of NF4_CODES) expect(Math.abs(NF4_CODES[code]! - x)).toBeLessThanOrEqual(Math.abs(c - x));
    }
  });
});
