// Transposes of 32-bit words in vector registers, for the kernels that turn
// rows into lanes (SHA-256's message words, ISS's recomputed anchors): 16 x 16
// in AVX-512, 8 x 8 in AVX2. Words move; none is changed.
#pragma once

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>

namespace hsm {

// On return r[i] holds word i of every input row: lane j of r[i] is word i of the row r[j] held.
__attribute__((target("avx512f"), always_inline)) inline void Transpose16(__m512i r[16]) {
  __m512i t[16];
  for (int i = 0; i < 16; i += 2) {
    t[i] = _mm512_unpacklo_epi32(r[i], r[i + 1]);
    t[i + 1] = _mm512_unpackhi_epi32(r[i], r[i + 1]);
  }
  for (int i = 0; i < 16; i += 4) {
    r[i] = _mm512_unpacklo_epi64(t[i], t[i + 2]);
    r[i + 1] = _mm512_unpackhi_epi64(t[i], t[i + 2]);
    r[i + 2] = _mm512_unpacklo_epi64(t[i + 1], t[i + 3]);
    r[i + 3] = _mm512_unpackhi_epi64(t[i + 1], t[i + 3]);
  }
  // r[4q + k] now holds, in its 128-bit part c, words 4c + k of rows 4q…4q+3.
  for (int k = 0; k < 4; k++) {
    const __m512i ab0 = _mm512_shuffle_i32x4(r[k], r[4 + k], 0x88), ab1 = _mm512_shuffle_i32x4(r[k], r[4 + k], 0xdd);
    const __m512i cd0 = _mm512_shuffle_i32x4(r[8 + k], r[12 + k], 0x88);
    const __m512i cd1 = _mm512_shuffle_i32x4(r[8 + k], r[12 + k], 0xdd);
    t[k] = _mm512_shuffle_i32x4(ab0, cd0, 0x88);
    t[8 + k] = _mm512_shuffle_i32x4(ab0, cd0, 0xdd);
    t[4 + k] = _mm512_shuffle_i32x4(ab1, cd1, 0x88);
    t[12 + k] = _mm512_shuffle_i32x4(ab1, cd1, 0xdd);
  }
  for (int i = 0; i < 16; i++) r[i] = t[i];
}

// Eight rows of eight words to eight registers each holding one word of every row.
__attribute__((target("avx2"), always_inline)) inline void Transpose8(__m256i r[8]) {
  __m256i t[8];
  for (int i = 0; i < 8; i += 2) {
    t[i] = _mm256_unpacklo_epi32(r[i], r[i + 1]);
    t[i + 1] = _mm256_unpackhi_epi32(r[i], r[i + 1]);
  }
  for (int i = 0; i < 8; i += 4) {
    r[i] = _mm256_unpacklo_epi64(t[i], t[i + 2]);
    r[i + 1] = _mm256_unpackhi_epi64(t[i], t[i + 2]);
    r[i + 2] = _mm256_unpacklo_epi64(t[i + 1], t[i + 3]);
    r[i + 3] = _mm256_unpackhi_epi64(t[i + 1], t[i + 3]);
  }
  // r[4q + k] now holds, in its 128-bit half c, words 4c + k of rows 4q…4q+3.
  for (int k = 0; k < 4; k++) {
    t[k] = _mm256_permute2x128_si256(r[k], r[4 + k], 0x20);
    t[4 + k] = _mm256_permute2x128_si256(r[k], r[4 + k], 0x31);
  }
  for (int i = 0; i < 8; i++) r[i] = t[i];
}

}  // namespace hsm
#endif
