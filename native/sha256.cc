#include "sha256.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <memory>

#include "cpu.h"
#include "float16.h"
#include "transpose.h"

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define HSM_X86 1
#endif

namespace hsm {
namespace {

alignas(16) constexpr uint32_t kK[64] = {
    0x428a2f98, 0x71374491, 0xb5c0fbcf, 0xe9b5dba5, 0x3956c25b, 0x59f111f1, 0x923f82a4, 0xab1c5ed5,
    0xd807aa98, 0x12835b01, 0x243185be, 0x550c7dc3, 0x72be5d74, 0x80deb1fe, 0x9bdc06a7, 0xc19bf174,
    0xe49b69c1, 0xefbe4786, 0x0fc19dc6, 0x240ca1cc, 0x2de92c6f, 0x4a7484aa, 0x5cb0a9dc, 0x76f988da,
    0x983e5152, 0xa831c66d, 0xb00327c8, 0xbf597fc7, 0xc6e00bf3, 0xd5a79147, 0x06ca6351, 0x14292967,
    0x27b70a85, 0x2e1b2138, 0x4d2c6dfc, 0x53380d13, 0x650a7354, 0x766a0abb, 0x81c2c92e, 0x92722c85,
    0xa2bfe8a1, 0xa81a664b, 0xc24b8b70, 0xc76c51a3, 0xd192e819, 0xd6990624, 0xf40e3585, 0x106aa070,
    0x19a4c116, 0x1e376c08, 0x2748774c, 0x34b0bcb5, 0x391c0cb3, 0x4ed8aa4a, 0x5b9cca4f, 0x682e6ff3,
    0x748f82ee, 0x78a5636f, 0x84c87814, 0x8cc70208, 0x90befffa, 0xa4506ceb, 0xbef9a3f7, 0xc67178f2};

inline uint32_t Rotr(uint32_t x, int n) { return (x >> n) | (x << (32 - n)); }

inline uint32_t LoadBe32(const uint8_t* p) {
  return (uint32_t{p[0]} << 24) | (uint32_t{p[1]} << 16) | (uint32_t{p[2]} << 8) | uint32_t{p[3]};
}

// FIPS 180-4 as written: the reference, and the path on CPUs without SHA extensions.
void BlocksPortable(uint32_t h[8], const uint8_t* data, size_t blocks) {
  uint32_t w[64];
  for (; blocks > 0; blocks--, data += 64) {
    for (int t = 0; t < 16; t++) w[t] = LoadBe32(data + 4 * t);
    for (int t = 16; t < 64; t++) {
      const uint32_t s0 = Rotr(w[t - 15], 7) ^ Rotr(w[t - 15], 18) ^ (w[t - 15] >> 3);
      const uint32_t s1 = Rotr(w[t - 2], 17) ^ Rotr(w[t - 2], 19) ^ (w[t - 2] >> 10);
      w[t] = w[t - 16] + s0 + w[t - 7] + s1;
    }
    uint32_t a = h[0], b = h[1], c = h[2], d = h[3], e = h[4], f = h[5], g = h[6], k = h[7];
    for (int t = 0; t < 64; t++) {
      const uint32_t t1 = k + (Rotr(e, 6) ^ Rotr(e, 11) ^ Rotr(e, 25)) + ((e & f) ^ (~e & g)) + kK[t] + w[t];
      const uint32_t t2 = (Rotr(a, 2) ^ Rotr(a, 13) ^ Rotr(a, 22)) + ((a & b) ^ (a & c) ^ (b & c));
      k = g;
      g = f;
      f = e;
      e = d + t1;
      d = c;
      c = b;
      b = a;
      a = t1 + t2;
    }
    h[0] += a, h[1] += b, h[2] += c, h[3] += d, h[4] += e, h[5] += f, h[6] += g, h[7] += k;
  }
}

#ifdef HSM_X86
// The SHA extensions: four rounds per pair of sha256rnds2, the message
// schedule by sha256msg1/sha256msg2. The state is kept as ABEF/CDGH.
__attribute__((target("sha,sse4.1,ssse3"))) void BlocksShaNi(uint32_t h[8], const uint8_t* data, size_t blocks) {
  const __m128i swap = _mm_set_epi64x(0x0c0d0e0f08090a0bULL, 0x0405060700010203ULL);
  __m128i tmp = _mm_shuffle_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(h)), 0xB1);         // CDAB
  __m128i state1 = _mm_shuffle_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(h + 4)), 0x1B);  // EFGH
  __m128i state0 = _mm_alignr_epi8(tmp, state1, 8);                                                    // ABEF
  state1 = _mm_blend_epi16(state1, tmp, 0xF0);                                                         // CDGH
  for (; blocks > 0; blocks--, data += 64) {
    const __m128i abef = state0, cdgh = state1;
    __m128i w[4];
#pragma GCC unroll 16
    for (int r = 0; r < 16; r++) {
      if (r < 4) {
        w[r] = _mm_shuffle_epi8(_mm_loadu_si128(reinterpret_cast<const __m128i*>(data + 16 * r)), swap);
      } else {
        // W[t..t+3] from W[t-16..t-13], W[t-12..t-9], W[t-8..t-5] and W[t-4..t-1].
        const __m128i t7 = _mm_alignr_epi8(w[(r - 1) & 3], w[(r - 2) & 3], 4);
        w[r & 3] =
            _mm_sha256msg2_epu32(_mm_add_epi32(_mm_sha256msg1_epu32(w[r & 3], w[(r - 3) & 3]), t7), w[(r - 1) & 3]);
      }
      __m128i msg = _mm_add_epi32(w[r & 3], _mm_load_si128(reinterpret_cast<const __m128i*>(kK + 4 * r)));
      state1 = _mm_sha256rnds2_epu32(state1, state0, msg);
      msg = _mm_shuffle_epi32(msg, 0x0E);
      state0 = _mm_sha256rnds2_epu32(state0, state1, msg);
    }
    state0 = _mm_add_epi32(state0, abef);
    state1 = _mm_add_epi32(state1, cdgh);
  }
  tmp = _mm_shuffle_epi32(state0, 0x1B);        // FEBA
  state1 = _mm_shuffle_epi32(state1, 0xB1);     // DCHG
  state0 = _mm_blend_epi16(tmp, state1, 0xF0);  // DCBA
  state1 = _mm_alignr_epi8(state1, tmp, 8);     // HGFE
  _mm_storeu_si128(reinterpret_cast<__m128i*>(h), state0);
  _mm_storeu_si128(reinterpret_cast<__m128i*>(h + 4), state1);
}

// Up to four independent messages at once: each sha256rnds2 waits on the one
// before it, so a single message leaves the SHA unit idle between them;
// interleaving more messages fills those cycles (two hash about 1.45 times as
// fast as one on one core, four about 1.75 times).
template <int N>
__attribute__((target("sha,sse4.1,ssse3"))) void BlocksShaNiX(uint32_t* const h[], const uint8_t* const data[],
                                                              size_t blocks) {
  const __m128i swap = _mm_set_epi64x(0x0c0d0e0f08090a0bULL, 0x0405060700010203ULL);
  __m128i state0[N], state1[N];
  const uint8_t* p[N];
  for (int j = 0; j < N; j++) {
    const __m128i tmp = _mm_shuffle_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(h[j])), 0xB1);
    const __m128i efgh = _mm_shuffle_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(h[j] + 4)), 0x1B);
    state0[j] = _mm_alignr_epi8(tmp, efgh, 8);
    state1[j] = _mm_blend_epi16(efgh, tmp, 0xF0);
    p[j] = data[j];
  }
  for (; blocks > 0; blocks--) {
    __m128i abef[N], cdgh[N];
    for (int j = 0; j < N; j++) abef[j] = state0[j], cdgh[j] = state1[j];
    __m128i w[N][4];
#pragma GCC unroll 16
    for (int r = 0; r < 16; r++) {
      const __m128i k = _mm_load_si128(reinterpret_cast<const __m128i*>(kK + 4 * r));
#pragma GCC unroll 4
      for (int j = 0; j < N; j++) {
        if (r < 4) {
          w[j][r] = _mm_shuffle_epi8(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p[j] + 16 * r)), swap);
        } else {
          const __m128i t7 = _mm_alignr_epi8(w[j][(r - 1) & 3], w[j][(r - 2) & 3], 4);
          w[j][r & 3] = _mm_sha256msg2_epu32(_mm_add_epi32(_mm_sha256msg1_epu32(w[j][r & 3], w[j][(r - 3) & 3]), t7),
                                             w[j][(r - 1) & 3]);
        }
        __m128i msg = _mm_add_epi32(w[j][r & 3], k);
        state1[j] = _mm_sha256rnds2_epu32(state1[j], state0[j], msg);
        msg = _mm_shuffle_epi32(msg, 0x0E);
        state0[j] = _mm_sha256rnds2_epu32(state0[j], state1[j], msg);
      }
    }
    for (int j = 0; j < N; j++) {
      state0[j] = _mm_add_epi32(state0[j], abef[j]);
      state1[j] = _mm_add_epi32(state1[j], cdgh[j]);
      p[j] += 64;
    }
  }
  for (int j = 0; j < N; j++) {
    const __m128i tmp = _mm_shuffle_epi32(state0[j], 0x1B);
    const __m128i dchg = _mm_shuffle_epi32(state1[j], 0xB1);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(h[j]), _mm_blend_epi16(tmp, dchg, 0xF0));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(h[j] + 4), _mm_alignr_epi8(dchg, tmp, 8));
  }
}

// GCC 12's AVX-512 headers pass an undefined register as the unused merge source of unmasked intrinsics, which
// -Wuninitialized and -Wmaybe-uninitialized report once they are inlined; every lane here is written.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

// Sixteen messages at once, one per 32-bit lane of AVX-512 registers: FIPS
// 180-4's rounds as written, on sixteen states side by side. Where many files
// are hashed at once this outruns the SHA extensions (about 4.0 GB/s a core
// against 3.0 on AMD Zen 5), and it is the only fast path on CPUs with AVX-512
// but no SHA extensions. Each block's sixteen rows of sixteen words are
// transposed so that register t holds word t of every message.
__attribute__((target("avx512f,avx512bw"))) void BlocksX16(uint32_t* const h[], const uint8_t* const data[],
                                                           size_t blocks) {
  const __m512i swap = _mm512_broadcast_i32x4(_mm_set_epi64x(0x0c0d0e0f08090a0bULL, 0x0405060700010203ULL));
  __m512i s[8];
  for (int i = 0; i < 8; i++) {
    alignas(64) uint32_t v[16];
    for (int j = 0; j < 16; j++) v[j] = h[j][i];
    s[i] = _mm512_load_si512(v);
  }
  for (size_t b = 0; b < blocks; b++) {
    __m512i w[16];
    for (int j = 0; j < 16; j++) w[j] = _mm512_shuffle_epi8(_mm512_loadu_si512(data[j] + 64 * b), swap);
    Transpose16(w);
    __m512i a = s[0], bb = s[1], c = s[2], d = s[3], e = s[4], f = s[5], g = s[6], hh = s[7];
#pragma GCC unroll 64
    for (int t = 0; t < 64; t++) {
      if (t >= 16) {
        const __m512i w15 = w[(t - 15) & 15], w2 = w[(t - 2) & 15];
        const __m512i s0 = _mm512_ternarylogic_epi32(_mm512_ror_epi32(w15, 7), _mm512_ror_epi32(w15, 18),
                                                     _mm512_srli_epi32(w15, 3), 0x96);
        const __m512i s1 = _mm512_ternarylogic_epi32(_mm512_ror_epi32(w2, 17), _mm512_ror_epi32(w2, 19),
                                                     _mm512_srli_epi32(w2, 10), 0x96);
        w[t & 15] = _mm512_add_epi32(_mm512_add_epi32(w[t & 15], s0), _mm512_add_epi32(w[(t - 7) & 15], s1));
      }
      // The sums are grouped so that the new e and a wait on as few steps after e and a as possible:
      // h + K + W, and d added to it, do not depend on the round before.
      const __m512i hkw = _mm512_add_epi32(hh, _mm512_add_epi32(w[t & 15], _mm512_set1_epi32(kK[t])));
      const __m512i s1 =
          _mm512_ternarylogic_epi32(_mm512_ror_epi32(e, 6), _mm512_ror_epi32(e, 11), _mm512_ror_epi32(e, 25), 0x96);
      const __m512i x = _mm512_add_epi32(hkw, _mm512_ternarylogic_epi32(e, f, g, 0xCA));  // + Ch(e, f, g)
      const __m512i t1 = _mm512_add_epi32(x, s1);
      const __m512i dx = _mm512_add_epi32(d, x);
      const __m512i s0 =
          _mm512_ternarylogic_epi32(_mm512_ror_epi32(a, 2), _mm512_ror_epi32(a, 13), _mm512_ror_epi32(a, 22), 0x96);
      const __m512i maj = _mm512_ternarylogic_epi32(a, bb, c, 0xE8);
      hh = g, g = f, f = e, e = _mm512_add_epi32(dx, s1);
      d = c, c = bb, bb = a, a = _mm512_add_epi32(_mm512_add_epi32(t1, maj), s0);
    }
    s[0] = _mm512_add_epi32(s[0], a), s[1] = _mm512_add_epi32(s[1], bb);
    s[2] = _mm512_add_epi32(s[2], c), s[3] = _mm512_add_epi32(s[3], d);
    s[4] = _mm512_add_epi32(s[4], e), s[5] = _mm512_add_epi32(s[5], f);
    s[6] = _mm512_add_epi32(s[6], g), s[7] = _mm512_add_epi32(s[7], hh);
  }
  for (int i = 0; i < 8; i++) {
    alignas(64) uint32_t v[16];
    _mm512_store_si512(v, s[i]);
    for (int j = 0; j < 16; j++) h[j][i] = v[j];
  }
}

// The same on eight messages in the 32-bit lanes of AVX2 registers, for CPUs
// without AVX-512: AVX2 has no rotate, so each is two shifts and an or, and
// no three-input logic, so Ch and Maj take three steps each.
__attribute__((target("avx2"), always_inline)) inline __m256i Ror8(__m256i x, int n) {
  return _mm256_or_si256(_mm256_srli_epi32(x, n), _mm256_slli_epi32(x, 32 - n));
}

__attribute__((target("avx2"))) void BlocksX8(uint32_t* const h[], const uint8_t* const data[], size_t blocks) {
  const __m256i swap = _mm256_broadcastsi128_si256(_mm_set_epi64x(0x0c0d0e0f08090a0bULL, 0x0405060700010203ULL));
  __m256i s[8];
  for (int i = 0; i < 8; i++) {
    alignas(32) uint32_t v[8];
    for (int j = 0; j < 8; j++) v[j] = h[j][i];
    s[i] = _mm256_load_si256(reinterpret_cast<const __m256i*>(v));
  }
  for (size_t b = 0; b < blocks; b++) {
    __m256i w[16];
    for (int half = 0; half < 2; half++) {
      for (int j = 0; j < 8; j++) {
        w[8 * half + j] = _mm256_shuffle_epi8(
            _mm256_loadu_si256(reinterpret_cast<const __m256i*>(data[j] + 64 * b + 32 * half)), swap);
      }
      Transpose8(w + 8 * half);
    }
    __m256i a = s[0], bb = s[1], c = s[2], d = s[3], e = s[4], f = s[5], g = s[6], hh = s[7];
#pragma GCC unroll 64
    for (int t = 0; t < 64; t++) {
      if (t >= 16) {
        const __m256i w15 = w[(t - 15) & 15], w2 = w[(t - 2) & 15];
        const __m256i s0 = _mm256_xor_si256(_mm256_xor_si256(Ror8(w15, 7), Ror8(w15, 18)), _mm256_srli_epi32(w15, 3));
        const __m256i s1 = _mm256_xor_si256(_mm256_xor_si256(Ror8(w2, 17), Ror8(w2, 19)), _mm256_srli_epi32(w2, 10));
        w[t & 15] = _mm256_add_epi32(_mm256_add_epi32(w[t & 15], s0), _mm256_add_epi32(w[(t - 7) & 15], s1));
      }
      const __m256i hkw = _mm256_add_epi32(hh, _mm256_add_epi32(w[t & 15], _mm256_set1_epi32(kK[t])));
      const __m256i s1 = _mm256_xor_si256(_mm256_xor_si256(Ror8(e, 6), Ror8(e, 11)), Ror8(e, 25));
      const __m256i ch = _mm256_xor_si256(_mm256_and_si256(e, f), _mm256_andnot_si256(e, g));
      const __m256i x = _mm256_add_epi32(hkw, ch);
      const __m256i t1 = _mm256_add_epi32(x, s1);
      const __m256i dx = _mm256_add_epi32(d, x);
      const __m256i s0 = _mm256_xor_si256(_mm256_xor_si256(Ror8(a, 2), Ror8(a, 13)), Ror8(a, 22));
      const __m256i maj = _mm256_xor_si256(_mm256_and_si256(_mm256_xor_si256(a, bb), c), _mm256_and_si256(a, bb));
      hh = g, g = f, f = e, e = _mm256_add_epi32(dx, s1);
      d = c, c = bb, bb = a, a = _mm256_add_epi32(_mm256_add_epi32(t1, maj), s0);
    }
    s[0] = _mm256_add_epi32(s[0], a), s[1] = _mm256_add_epi32(s[1], bb);
    s[2] = _mm256_add_epi32(s[2], c), s[3] = _mm256_add_epi32(s[3], d);
    s[4] = _mm256_add_epi32(s[4], e), s[5] = _mm256_add_epi32(s[5], f);
    s[6] = _mm256_add_epi32(s[6], g), s[7] = _mm256_add_epi32(s[7], hh);
  }
  for (int i = 0; i < 8; i++) {
    alignas(32) uint32_t v[8];
    _mm256_store_si256(reinterpret_cast<__m256i*>(v), s[i]);
    for (int j = 0; j < 8; j++) h[j][i] = v[j];
  }
}

#pragma GCC diagnostic pop

__attribute__((target("avx2"))) void F32StatsAvx2(const uint32_t* src, size_t n, uint64_t* nonfinite,
                                                  uint32_t* max_bits) {
  const __m256i mag_mask = _mm256_set1_epi32(0x7fffffff);
  const __m256i last_finite = _mm256_set1_epi32(0x7f7fffff);
  __m256i best = _mm256_setzero_si256();
  __m256i count = _mm256_setzero_si256();
  size_t i = 0;
  // Lanes count up to 2^31 each; callers pass tiles far smaller.
  for (; i + 8 <= n; i += 8) {
    const __m256i m = _mm256_and_si256(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(src + i)), mag_mask);
    const __m256i nf = _mm256_cmpgt_epi32(m, last_finite);  // magnitudes fit in signed 32 bits
    count = _mm256_sub_epi32(count, nf);
    best = _mm256_max_epu32(best, _mm256_andnot_si256(nf, m));
  }
  alignas(32) uint32_t lanes[8], counts[8];
  _mm256_store_si256(reinterpret_cast<__m256i*>(lanes), best);
  _mm256_store_si256(reinterpret_cast<__m256i*>(counts), count);
  uint64_t bad = 0;
  uint32_t top = 0;
  for (int j = 0; j < 8; j++) bad += counts[j], top = std::max(top, lanes[j]);
  for (; i < n; i++) {
    const uint32_t m = src[i] & 0x7fffffffu;
    if (m > 0x7f7fffffu) bad++;
    else top = std::max(top, m);
  }
  *nonfinite = bad;
  *max_bits = top;
}
#endif

bool ShaNi() { return HasSha(); }

void Blocks(uint32_t h[8], const uint8_t* data, size_t blocks) {
#ifdef HSM_X86
  if (ShaNi()) return BlocksShaNi(h, data, blocks);
#endif
  BlocksPortable(h, data, blocks);
}

// Magnitude bits order like the values they denote, so the largest bits are the largest value.
void F32Stats(const uint32_t* src, size_t n, uint64_t* nonfinite, uint32_t* max_bits) {
#ifdef HSM_X86
  if (HasAvx2()) return F32StatsAvx2(src, n, nonfinite, max_bits);
#endif
  uint64_t bad = 0;
  uint32_t best = 0;
  for (size_t i = 0; i < n; i++) {
    const uint32_t m = src[i] & 0x7fffffffu;
    const bool finite = m <= 0x7f7fffffu;
    bad += finite ? 0 : 1;
    best = std::max(best, finite ? m : 0u);
  }
  *nonfinite = bad;
  *max_bits = best;
}

// Adds the bytes to the hashed total and completes a block held back from the
// previous call; returns how many bytes that took.
size_t TopUp(Sha256State* s, const uint8_t* p, size_t n) {
  s->total += n;
  if (s->pending_len == 0) return 0;
  const size_t take = std::min<size_t>(64 - s->pending_len, n);
  std::memcpy(s->pending + s->pending_len, p, take);
  s->pending_len += static_cast<uint32_t>(take);
  if (s->pending_len == 64) {
    Blocks(s->h, s->pending, 1);
    s->pending_len = 0;
  }
  return take;
}

// Holds back the bytes after the last whole block for the next call.
void Stash(Sha256State* s, const uint8_t* p, size_t n) {
  std::memcpy(s->pending + s->pending_len, p, n);
  s->pending_len += static_cast<uint32_t>(n);
}

#ifdef HSM_X86
// The streams among n[0, count) with whole blocks left, up to `most` of them
// into `lane`, and the blocks every one of those has.
int Ready(const size_t n[], int count, int most, int lane[], size_t* common) {
  int k = 0;
  *common = SIZE_MAX;
  for (int j = 0; j < count && k < most; j++) {
    if (n[j] >= 64) lane[k++] = j, *common = std::min(*common, n[j] / 64);
  }
  return k;
}

// A kernel hashing one message per vector lane, and how many lanes it has.
struct Wide {
  int lanes;
  void (*blocks)(uint32_t* const h[], const uint8_t* const data[], size_t blocks);
};

// The widest lanes the SIMD level in force allows; none below AVX2.
Wide WideLanes() {
  if (HasAvx512Bw()) return {16, BlocksX16};
  if (HasAvx2()) return {8, BlocksX8};
  return {0, nullptr};
}

// Times `wide` against the SHA extensions four at a time on blocks in cache
// (8 KiB a stream, about 0.1 ms): their speeds differ from CPU to CPU (on AMD
// Zen 5 sixteen AVX-512 lanes hash about 4.0 GB/s a core, the SHA extensions
// 3.0). Returns how many streams the lanes need before they hash more; one
// more than the lanes: never.
int TimedWideFrom(const Wide& wide) {
  constexpr size_t kBlocks = 128;
  std::unique_ptr<uint8_t[]> buf(new uint8_t[16 * 64 * kBlocks]());
  uint32_t states[16][8] = {};
  uint32_t* h[16];
  const uint8_t* q[16];
  for (int j = 0; j < 16; j++) h[j] = states[j], q[j] = buf.get() + j * 64 * kBlocks;
  const auto best = [&](auto&& run) {
    double least = 1e30;
    for (int rep = 0; rep < 4; rep++) {  // the first warms the caches and the vector units
      const auto t0 = std::chrono::steady_clock::now();
      run();
      const double t = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      if (rep > 0) least = std::min(least, t);
    }
    return least;
  };
  const double lanes = wide.lanes / best([&] { wide.blocks(h, q, kBlocks); });  // streams a second, per block
  const double sha = 4 / best([&] { BlocksShaNiX<4>(h, q, kBlocks); });         // the same for four
  return std::clamp(static_cast<int>(std::floor(wide.lanes * sha / lanes)) + 1, 2, wide.lanes + 1);
}

// Streams with whole blocks left from which `wide` is used: from two without
// the SHA extensions (the portable code hashes one stream at a time), else
// from where it outruns them, timed once per process for each kind of lanes.
int WideFrom(const Wide& wide) {
  const int set = testing::sha_wide_from.load(std::memory_order_relaxed);
  if (set > 0) return set;
  if (!ShaNi()) return 2;
  if (wide.lanes == 16) {
    static const int from16 = TimedWideFrom(wide);
    return from16;
  }
  static const int from8 = TimedWideFrom(wide);
  return from8;
}
#endif

// Hashes up to kMaxLanes streams at once: while enough have whole blocks
// left, their common blocks go through the vector lanes, then through the SHA
// extensions up to four at a time, and the rest one by one.
void HashBytesN(Sha256State* const s[], const uint8_t* p[], size_t n[], int count) {
  for (int j = 0; j < count; j++) {
    const size_t took = TopUp(s[j], p[j], n[j]);
    p[j] += took, n[j] -= took;
  }
#ifdef HSM_X86
  int lane[kMaxLanes];
  size_t common = 0;
  if (const Wide wide = WideLanes(); wide.blocks != nullptr) {
    for (int k; (k = Ready(n, count, wide.lanes, lane, &common)) >= WideFrom(wide);) {
      // Lanes without a stream of their own hash the first one's blocks again, into scratch.
      uint32_t spare[16][8] = {};
      uint32_t* h[16];
      const uint8_t* q[16];
      for (int i = 0; i < wide.lanes; i++) {
        h[i] = i < k ? s[lane[i]]->h : spare[i];
        q[i] = p[lane[i < k ? i : 0]];
      }
      wide.blocks(h, q, common);
      for (int i = 0; i < k; i++) p[lane[i]] += 64 * common, n[lane[i]] -= 64 * common;
    }
  }
  if (ShaNi()) {
    for (int k; (k = Ready(n, count, 4, lane, &common)) >= 2;) {
      uint32_t* h[4];
      const uint8_t* q[4];
      for (int i = 0; i < k; i++) h[i] = s[lane[i]]->h, q[i] = p[lane[i]];
      if (k == 2) BlocksShaNiX<2>(h, q, common);
      else if (k == 3) BlocksShaNiX<3>(h, q, common);
      else BlocksShaNiX<4>(h, q, common);
      for (int i = 0; i < k; i++) p[lane[i]] += 64 * common, n[lane[i]] -= 64 * common;
    }
  }
#endif
  for (int j = 0; j < count; j++) {
    Blocks(s[j]->h, p[j], n[j] / 64);
    Stash(s[j], p[j] + (n[j] & ~size_t{63}), n[j] & 63);
  }
}

void Count(Sha256State* s, const uint8_t* p, size_t bytes, int width) {
  uint64_t bad = 0;
  if (width == 2) {
    uint16_t top = 0;
    // The data may sit at any byte offset; F16Stats reads with unaligned loads.
    F16Stats(reinterpret_cast<const uint16_t*>(p), bytes / 2, &bad, &top);
    s->max_bits = std::max<uint32_t>(s->max_bits, top);
  } else {
    uint32_t top = 0;
    F32Stats(reinterpret_cast<const uint32_t*>(p), bytes / 4, &bad, &top);
    s->max_bits = std::max(s->max_bits, top);
  }
  s->nonfinite += bad;
}

// Bytes hashed and then counted at a time: small enough to stay in L1/L2 between the two.
constexpr size_t kTile = size_t{32} << 10;

}  // namespace

const char* Sha256Paths() {
#ifdef HSM_X86
  const int lanes = WideLanes().lanes;
  if (ShaNi()) return lanes == 16 ? "avx512-lanes+sha-ni" : lanes == 8 ? "avx2-lanes+sha-ni" : "sha-ni";
  return lanes == 16 ? "avx512-lanes" : lanes == 8 ? "avx2-lanes" : "portable";
#else
  return "portable";
#endif
}

void Sha256Init(Sha256State* s) {
  static constexpr uint32_t kInit[8] = {0x6a09e667, 0xbb67ae85, 0x3c6ef372, 0xa54ff53a,
                                        0x510e527f, 0x9b05688c, 0x1f83d9ab, 0x5be0cd19};
  std::memset(s, 0, sizeof *s);
  std::memcpy(s->h, kInit, sizeof kInit);
}

void Sha256UpdateN(Sha256State* const s[], const uint8_t* const data[], const size_t n[], const size_t stats_from[],
                   const int width[], int count) {
  size_t from[kMaxLanes];
  for (int j = 0; j < count; j++) from[j] = width[j] == 2 || width[j] == 4 ? std::min(stats_from[j], n[j]) : n[j];
  {
    const uint8_t* p[kMaxLanes];
    size_t len[kMaxLanes];
    for (int j = 0; j < count; j++) p[j] = data[j], len[j] = from[j];
    HashBytesN(s, p, len, count);
  }
  // Tile by tile, every stream's tile hashed together and then counted, as one stream alone would be.
  for (size_t t = 0;; t += kTile) {
    const uint8_t* p[kMaxLanes];
    const uint8_t* q[kMaxLanes];
    size_t len[kMaxLanes], hashed[kMaxLanes];
    bool any = false;
    for (int j = 0; j < count; j++) {
      const size_t at = from[j] + t;
      len[j] = at < n[j] ? std::min(kTile, n[j] - at) : 0;
      p[j] = q[j] = data[j] + std::min(at, n[j]);
      hashed[j] = len[j];
      any = any || len[j] > 0;
    }
    if (!any) break;
    HashBytesN(s, q, hashed, count);
    for (int j = 0; j < count; j++) {
      if (len[j] > 0) Count(s[j], p[j], len[j], width[j]);
    }
  }
}

void Sha256Update2(Sha256State* a, const uint8_t* data_a, size_t n_a, size_t from_a, Sha256State* b,
                   const uint8_t* data_b, size_t n_b, size_t from_b, int width) {
  Sha256State* const s[2] = {a, b};
  const uint8_t* const data[2] = {data_a, data_b};
  const size_t n[2] = {n_a, n_b}, from[2] = {from_a, from_b};
  const int widths[2] = {width, width};
  Sha256UpdateN(s, data, n, from, widths, 2);
}

void Sha256Final(Sha256State* s, uint8_t out[32]) {
  const uint64_t bits = s->total * 8;
  uint8_t tail[128] = {0};
  const size_t len = s->pending_len;
  std::memcpy(tail, s->pending, len);
  tail[len] = 0x80;
  const size_t blocks = len + 1 + 8 <= 64 ? 1 : 2;
  for (int i = 0; i < 8; i++) tail[blocks * 64 - 1 - i] = static_cast<uint8_t>(bits >> (8 * i));
  Blocks(s->h, tail, blocks);
  for (int i = 0; i < 8; i++) {
    out[4 * i] = static_cast<uint8_t>(s->h[i] >> 24);
    out[4 * i + 1] = static_cast<uint8_t>(s->h[i] >> 16);
    out[4 * i + 2] = static_cast<uint8_t>(s->h[i] >> 8);
    out[4 * i + 3] = static_cast<uint8_t>(s->h[i]);
  }
  s->pending_len = 0;
}

void Sha256Update(Sha256State* s, const uint8_t* data, size_t n, size_t stats_from, int width) {
  Sha256UpdateN(&s, &data, &n, &stats_from, &width, 1);
}

}  // namespace hsm
