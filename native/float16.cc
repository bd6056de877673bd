#include "float16.h"

#include "cpu.h"
#include "threads.h"

#include <algorithm>
#include <cstring>
#include <vector>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define HSM_X86 1
#endif

namespace hsm {
namespace {

inline uint32_t Bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}

inline float FromBits(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

// The scalar reference; f32BitsToF16Bits in src/kernels/typescript/float16.ts is its twin.
inline uint16_t F32BitsToF16Bits(uint32_t f) {
  const uint16_t sign = static_cast<uint16_t>((f >> 16) & 0x8000u);
  const uint32_t f_exp = f & 0x7f800000u;
  if (f_exp >= 0x47800000u) {
    if (f_exp == 0x7f800000u) {
      const uint32_t f_sig = f & 0x007fffffu;
      if (f_sig != 0) {
        // NaN: keep the payload's top bits but never let it become inf.
        uint16_t ret = static_cast<uint16_t>(0x7c00u + (f_sig >> 13));
        if (ret == 0x7c00u) ret++;
        return static_cast<uint16_t>(sign + ret);
      }
    }
    return static_cast<uint16_t>(sign + 0x7c00u);
  }
  if (f_exp <= 0x38000000u) {
    if (f_exp < 0x33000000u) return sign;
    const uint32_t e = f_exp >> 23;
    uint32_t f_sig = 0x00800000u + (f & 0x007fffffu);
    if ((f_sig & ((1u << (126 - e)) - 1)) != 0) f_sig |= 1;  // keep sticky bits
    f_sig >>= (113 - e);
    if ((f_sig & 0x3fffu) != 0x1000u || (f & 0x07ffu) != 0) f_sig += 0x1000u;
    return static_cast<uint16_t>(sign + (f_sig >> 13));
  }
  const uint16_t h_exp = static_cast<uint16_t>((f_exp - 0x38000000u) >> 13);
  uint32_t f_sig = f & 0x007fffffu;
  if ((f_sig & 0x3fffu) != 0x1000u) f_sig += 0x1000u;
  // A carry out of the significand bumps the exponent, up to inf.
  return static_cast<uint16_t>(sign + h_exp + (f_sig >> 13));
}

inline uint32_t F16BitsToF32Bits(uint16_t h) {
  const uint32_t h_exp = h & 0x7c00u;
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  if (h_exp == 0) {
    uint32_t h_sig = h & 0x03ffu;
    if (h_sig == 0) return sign;
    h_sig <<= 1;
    uint32_t e = 0;
    while ((h_sig & 0x0400u) == 0) {
      h_sig <<= 1;
      e++;
    }
    return sign + ((127 - 15 - e) << 23) + ((h_sig & 0x03ffu) << 13);
  }
  if (h_exp == 0x7c00u) return sign + 0x7f800000u + (static_cast<uint32_t>(h & 0x03ffu) << 13);
  return sign + ((static_cast<uint32_t>(h & 0x7fffu) + 0x1c000u) << 13);
}

void F32ToF16Portable(const float* src, uint16_t* dst, size_t n) {
  for (size_t i = 0; i < n; i++) dst[i] = F32BitsToF16Bits(Bits(src[i]));
}

void F16ToF32Portable(const uint16_t* src, float* dst, size_t n) {
  for (size_t i = 0; i < n; i++) dst[i] = FromBits(F16BitsToF32Bits(src[i]));
}

#ifdef HSM_X86
// F16C rounds like NumPy on every finite value and infinity, but quiets NaNs
// (NumPy keeps the payload as it is), so NaN lanes are redone by the scalar path.
// Destinations larger than about half the last-level cache are written with
// streaming stores, which skip reading each line before overwriting it; smaller
// ones stay in cache for whoever reads them next.
constexpr size_t kStreamBytes = size_t{16} << 20;

template <bool kStream>
__attribute__((target("avx2,f16c"))) void F32ToF16F16cLoop(const float* src, uint16_t* dst, size_t n) {
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256 x = _mm256_loadu_ps(src + i);
    const __m128i h = _mm256_cvtps_ph(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    if (kStream) _mm_stream_si128(reinterpret_cast<__m128i*>(dst + i), h);
    else _mm_storeu_si128(reinterpret_cast<__m128i*>(dst + i), h);
    const int nan = _mm256_movemask_ps(_mm256_cmp_ps(x, x, _CMP_UNORD_Q));
    if (__builtin_expect(nan != 0, 0)) {
      for (int k = 0; k < 8; k++) {
        if (nan & (1 << k)) dst[i + k] = F32BitsToF16Bits(Bits(src[i + k]));
      }
    }
  }
  F32ToF16Portable(src + i, dst + i, n - i);
}

__attribute__((target("avx2,f16c"))) void F32ToF16F16c(const float* src, uint16_t* dst, size_t n, bool stream) {
  if (!stream || reinterpret_cast<uintptr_t>(dst) % 2 != 0) return F32ToF16F16cLoop<false>(src, dst, n);
  // Align the destination to 16 bytes for the streaming stores.
  const size_t head = std::min(n, ((16 - reinterpret_cast<uintptr_t>(dst) % 16) % 16) / 2);
  F32ToF16Portable(src, dst, head);
  F32ToF16F16cLoop<true>(src + head, dst + head, n - head);
  _mm_sfence();
}

template <bool kStream>
__attribute__((target("avx2,f16c"))) void F16ToF32F16cLoop(const uint16_t* src, float* dst, size_t n) {
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + i));
    const __m256 x = _mm256_cvtph_ps(h);
    if (kStream) _mm256_stream_ps(dst + i, x);
    else _mm256_storeu_ps(dst + i, x);
    const int nan = _mm256_movemask_ps(_mm256_cmp_ps(x, x, _CMP_UNORD_Q));
    if (__builtin_expect(nan != 0, 0)) {
      for (int k = 0; k < 8; k++) {
        if (nan & (1 << k)) dst[i + k] = FromBits(F16BitsToF32Bits(src[i + k]));
      }
    }
  }
  F16ToF32Portable(src + i, dst + i, n - i);
}

__attribute__((target("avx2,f16c"))) void F16ToF32F16c(const uint16_t* src, float* dst, size_t n, bool stream) {
  if (!stream || reinterpret_cast<uintptr_t>(dst) % 4 != 0) return F16ToF32F16cLoop<false>(src, dst, n);
  const size_t head = std::min(n, ((32 - reinterpret_cast<uintptr_t>(dst) % 32) % 32) / 4);
  F16ToF32Portable(src, dst, head);
  F16ToF32F16cLoop<true>(src + head, dst + head, n - head);
  _mm_sfence();
}

// Non-finite count and largest finite magnitude, 16 halves a step. Lane counters
// are 16-bit, so they are folded into the total before they can wrap.
__attribute__((target("avx2"))) void F16StatsAvx2(const uint16_t* src, size_t n, uint64_t* nonfinite,
                                                  uint16_t* max_bits) {
  const __m256i mag_mask = _mm256_set1_epi16(0x7fff);
  const __m256i last_finite = _mm256_set1_epi16(0x7bff);
  __m256i best = _mm256_setzero_si256();
  uint64_t bad = 0;
  size_t i = 0;
  while (i + 16 <= n) {
    __m256i count = _mm256_setzero_si256();
    const size_t stop = (n - i) / 16 > 32767 ? i + 16 * 32767 : i + ((n - i) / 16) * 16;
    for (; i < stop; i += 16) {
      const __m256i m = _mm256_and_si256(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(src + i)), mag_mask);
      const __m256i nf = _mm256_cmpgt_epi16(m, last_finite);  // magnitudes fit in signed 16 bits
      count = _mm256_sub_epi16(count, nf);
      best = _mm256_max_epu16(best, _mm256_andnot_si256(nf, m));
    }
    alignas(32) uint16_t lanes[16];
    _mm256_store_si256(reinterpret_cast<__m256i*>(lanes), count);
    for (uint16_t c : lanes) bad += c;
  }
  alignas(32) uint16_t lanes[16];
  _mm256_store_si256(reinterpret_cast<__m256i*>(lanes), best);
  uint16_t top = 0;
  for (uint16_t v : lanes) top = v > top ? v : top;
  for (; i < n; i++) {
    const uint16_t m = src[i] & 0x7fffu;
    if (m >= 0x7c00u) bad++;
    else if (m > top) top = m;
  }
  *nonfinite = bad;
  *max_bits = top;
}

// The same with AVX-512BW, 32 halves a vector: the comparison yields a mask
// that both counts the finite values and keeps the others out of the maximum.
// Masked loads read the last partial vector as zeros, which change neither.
struct F16Acc {
  __m512i best;
  uint64_t finite;
};

__attribute__((target("avx512f,avx512bw,popcnt"), always_inline)) inline void F16StatsStep(F16Acc& acc,
                                                                                           const uint16_t* p,
                                                                                           __mmask32 load) {
  const __m512i m = _mm512_and_si512(_mm512_maskz_loadu_epi16(load, p), _mm512_set1_epi16(0x7fff));
  const __mmask32 finite = _mm512_mask_cmple_epu16_mask(load, m, _mm512_set1_epi16(0x7bff));
  acc.best = _mm512_mask_max_epu16(acc.best, finite, acc.best, m);
  acc.finite += static_cast<uint64_t>(__builtin_popcount(finite));
}

__attribute__((target("avx512f,avx512bw,popcnt"))) void F16StatsAvx512(const uint16_t* src, size_t n,
                                                                       uint64_t* nonfinite, uint16_t* max_bits) {
  constexpr __mmask32 kAll = ~__mmask32{0};
  // Two accumulators, so that consecutive maxima do not wait on each other.
  F16Acc a{_mm512_setzero_si512(), 0}, b{_mm512_setzero_si512(), 0};
  size_t i = 0;
  for (; i + 64 <= n; i += 64) F16StatsStep(a, src + i, kAll), F16StatsStep(b, src + i + 32, kAll);
  for (; i < n; i += 32)
    F16StatsStep(a, src + i, n - i >= 32 ? kAll : static_cast<__mmask32>((uint64_t{1} << (n - i)) - 1));
  alignas(64) uint16_t lanes[32];
  _mm512_store_si512(lanes, _mm512_max_epu16(a.best, b.best));
  uint16_t top = 0;
  for (uint16_t v : lanes) top = v > top ? v : top;
  *nonfinite = n - a.finite - b.finite;
  *max_bits = top;
}

#endif

// fn(share, begin, end) over [0, n) split across up to `max_threads` threads
// (at most kMaxShares) for buffers big enough to repay a thread start (tens of
// microseconds); conversion is bound by memory bandwidth, which one core alone
// does not saturate.
constexpr size_t kMaxShares = 8;
template <typename Fn>
void ParallelShares(size_t n, int max_threads, Fn fn) {
  constexpr size_t kMinPerThread = size_t{1} << 19;
  const size_t threads =
      std::min<size_t>({static_cast<size_t>(std::max(1, max_threads)), kMaxShares, n / kMinPerThread});
  if (threads <= 1) return fn(size_t{0}, size_t{0}, n);
  // Chunk boundaries on multiples of 64 elements keep every vector step whole.
  const size_t chunk = ((n + threads - 1) / threads + 63) & ~size_t{63};
  Parallel(std::min(threads, (n + chunk - 1) / chunk),
           [&](size_t t) { fn(t, t * chunk, std::min(n, (t + 1) * chunk)); });
}

// ParallelShares without the share's index.
template <typename Fn>
void ParallelFor(size_t n, int max_threads, Fn fn) {
  ParallelShares(n, max_threads, [&](size_t, size_t begin, size_t end) { fn(begin, end); });
}

}  // namespace

bool HasF16c() { return HasAvx2F16c(); }

void F32ToF16(const float* src, uint16_t* dst, size_t n, int threads) {
  ParallelFor(n, threads, [=](size_t begin, size_t end) {
#ifdef HSM_X86
    if (HasF16c()) return F32ToF16F16c(src + begin, dst + begin, end - begin, n * 2 >= kStreamBytes);
#endif
    F32ToF16Portable(src + begin, dst + begin, end - begin);
  });
}

void F16ToF32(const uint16_t* src, float* dst, size_t n, int threads) {
  ParallelFor(n, threads, [=](size_t begin, size_t end) {
#ifdef HSM_X86
    if (HasF16c()) return F16ToF32F16c(src + begin, dst + begin, end - begin, n * 4 >= kStreamBytes);
#endif
    F16ToF32Portable(src + begin, dst + begin, end - begin);
  });
}

void WidenF16(const uint16_t* src, float* dst, size_t n) {
#ifdef HSM_X86
  if (HasF16c()) return F16ToF32F16cLoop<false>(src, dst, n);
#endif
  F16ToF32Portable(src, dst, n);
}

namespace {

void F16StatsRange(const uint16_t* src, size_t n, uint64_t* nonfinite, uint16_t* max_bits) {
#ifdef HSM_X86
  if (HasAvx512Bw()) return F16StatsAvx512(src, n, nonfinite, max_bits);
  if (HasF16c()) return F16StatsAvx2(src, n, nonfinite, max_bits);
#endif
  // Branch-free so the compiler vectorizes it; magnitude bits order like values.
  uint64_t bad = 0;
  uint16_t best = 0;
  for (size_t i = 0; i < n; i++) {
    const uint16_t m = src[i] & 0x7fffu;
    const bool finite = m < 0x7c00u;
    bad += finite ? 0 : 1;
    const uint16_t v = finite ? m : 0;
    best = v > best ? v : best;
  }
  *nonfinite = bad;
  *max_bits = best;
}

}  // namespace

void F16Stats(const uint16_t* src, size_t n, uint64_t* nonfinite, uint16_t* max_bits, int threads) {
  // Per share, a count and a maximum: their sum and maximum are the buffer's.
  uint64_t bad[kMaxShares] = {};
  uint16_t top[kMaxShares] = {};
  ParallelShares(n, threads, [&](size_t t, size_t begin, size_t end) {
    F16StatsRange(src + begin, end - begin, &bad[t], &top[t]);
  });
  *nonfinite = 0;
  *max_bits = 0;
  for (size_t t = 0; t < kMaxShares; t++) {
    *nonfinite += bad[t];
    *max_bits = std::max(*max_bits, top[t]);
  }
}

}  // namespace hsm
