#include "products.h"

#include "cpu.h"
#include "threads.h"

#include <algorithm>
#include <cmath>
#include <utility>
#include <vector>

#if defined(__x86_64__)
#include <immintrin.h>
#define HSM_X86 1
#endif

namespace hsm {
namespace {

// Threads worth starting for a pass over n rows (a thread start costs tens of microseconds).
size_t RowThreads(size_t n, int threads) { return std::max<size_t>(1, std::min<size_t>(threads, n / 256 + 1)); }

// Sum of a[i] * b[i] in float32 lanes, finished in double.
double DotPortable(const float* a, const float* b, size_t d) {
  float acc[16] = {0};
  size_t i = 0;
  for (; i + 16 <= d; i += 16) {
    for (int l = 0; l < 16; l++) acc[l] += a[i + l] * b[i + l];
  }
  double s = 0;
  for (int l = 0; l < 16; l++) s += acc[l];
  for (; i < d; i++) s += static_cast<double>(a[i]) * b[i];
  return s;
}

#ifdef HSM_X86
__attribute__((target("avx512f"))) double DotAvx512(const float* a, const float* b, size_t d) {
  __m512 acc0 = _mm512_setzero_ps(), acc1 = _mm512_setzero_ps();
  size_t i = 0;
  for (; i + 32 <= d; i += 32) {
    acc0 = _mm512_fmadd_ps(_mm512_loadu_ps(a + i), _mm512_loadu_ps(b + i), acc0);
    acc1 = _mm512_fmadd_ps(_mm512_loadu_ps(a + i + 16), _mm512_loadu_ps(b + i + 16), acc1);
  }
  for (; i + 16 <= d; i += 16) acc0 = _mm512_fmadd_ps(_mm512_loadu_ps(a + i), _mm512_loadu_ps(b + i), acc0);
  alignas(64) float lanes[16];
  _mm512_store_ps(lanes, _mm512_add_ps(acc0, acc1));
  double s = 0;
  for (float l : lanes) s += l;
  for (; i < d; i++) s += static_cast<double>(a[i]) * b[i];
  return s;
}

// DotPortable's sixteen float32 lanes, eight per vector: each lane's products and sums rounded
// as there, in the same order, then the same double sum; the same bits.
__attribute__((target("avx2"))) double DotAvx2(const float* a, const float* b, size_t d) {
  __m256 acc0 = _mm256_setzero_ps(), acc1 = _mm256_setzero_ps();
  size_t i = 0;
  for (; i + 16 <= d; i += 16) {
    acc0 = _mm256_add_ps(acc0, _mm256_mul_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i)));
    acc1 = _mm256_add_ps(acc1, _mm256_mul_ps(_mm256_loadu_ps(a + i + 8), _mm256_loadu_ps(b + i + 8)));
  }
  alignas(32) float lanes[16];
  _mm256_store_ps(lanes, acc0);
  _mm256_store_ps(lanes + 8, acc1);
  double s = 0;
  for (float l : lanes) s += l;
  for (; i < d; i++) s += static_cast<double>(a[i]) * b[i];
  return s;
}

// AxpyPortable eight elements at a time: a product, then a sum, each rounded as there.
__attribute__((target("avx2"))) void AxpyAvx2(float alpha, const float* x, float* y, size_t d) {
  const __m256 va = _mm256_set1_ps(alpha);
  size_t i = 0;
  for (; i + 8 <= d; i += 8)
    _mm256_storeu_ps(y + i, _mm256_add_ps(_mm256_loadu_ps(y + i), _mm256_mul_ps(va, _mm256_loadu_ps(x + i))));
  for (; i < d; i++) y[i] += alpha * x[i];
}

__attribute__((target("avx512f"))) void AxpyAvx512(float alpha, const float* x, float* y, size_t d) {
  const __m512 va = _mm512_set1_ps(alpha);
  size_t i = 0;
  for (; i + 16 <= d; i += 16)
    _mm512_storeu_ps(y + i, _mm512_fmadd_ps(va, _mm512_loadu_ps(x + i), _mm512_loadu_ps(y + i)));
  for (; i < d; i++) y[i] += alpha * x[i];
}
#endif

void AxpyPortable(float alpha, const float* x, float* y, size_t d) {
  for (size_t i = 0; i < d; i++) y[i] += alpha * x[i];
}

}  // namespace

void RowsTimes(const LayerRows& h, size_t n, size_t d, const double* v, size_t k, double* out, int threads) {
  std::vector<float> vf(v, v + k * d);
#ifdef HSM_X86
  const auto dot = HasAvx512() ? DotAvx512 : HasAvx2() ? DotAvx2 : DotPortable;
#else
  const auto dot = DotPortable;
#endif
  Split(n, RowThreads(n, threads), [&](size_t, size_t begin, size_t end) {
    std::vector<float> scratch = h.Scratch(d);
    for (size_t i = begin; i < end; i++) {
      const float* row = h.Span(i, 0, d, scratch.data());
      for (size_t j = 0; j < k; j++) out[i * k + j] = dot(row, vf.data() + j * d, d);
    }
  });
}

void RowsTransposeTimes(const float* h, size_t n, size_t d, const double* g, size_t k, double* out, int threads) {
#ifdef HSM_X86
  const auto axpy = HasAvx512() ? AxpyAvx512 : HasAvx2() ? AxpyAvx2 : AxpyPortable;
#else
  const auto axpy = AxpyPortable;
#endif
  const size_t nt = RowThreads(n, threads);
  std::vector<std::vector<float>> partial(nt, std::vector<float>(k * d, 0.0f));
  Split(n, nt, [&](size_t t, size_t begin, size_t end) {
    float* acc = partial[t].data();
    for (size_t i = begin; i < end; i++) {
      for (size_t j = 0; j < k; j++) {
        const double gij = g[i * k + j];
        if (gij != 0) axpy(static_cast<float>(gij), h + i * d, acc + j * d, d);
      }
    }
  });
  for (size_t c = 0; c < k * d; c++) {
    double s = 0;
    for (size_t t = 0; t < nt; t++) s += partial[t][c];
    out[c] = s;
  }
}

namespace {
// For a margin m: log(1 + e^-m) and 1 / (1 + e^m) without overflow, from one exponential e^-|m|.
struct LogisticTerms {
  double loss, sigma;
};
inline LogisticTerms Logistic(double m) {
  const double e = std::exp(-std::fabs(m));
  return m >= 0 ? LogisticTerms{std::log1p(e), e / (1 + e)} : LogisticTerms{-m + std::log1p(e), 1 / (1 + e)};
}

#ifdef HSM_X86
// The sixteen lanes summed in double, first to last.
__attribute__((target("avx512f"))) inline double LaneSum(__m512 acc) {
  alignas(64) float lanes[16];
  _mm512_store_ps(lanes, acc);
  double s = 0;
  for (float l : lanes) s += l;
  return s;
}

// Register tiles for the logistic pass. Margins: four rows against up to five
// weight columns, each 16-float step of a row feeding every column and each
// step of a column feeding the four rows. Tails of d are masked loads. The
// columns are a parameter pack, so that every accumulator has a constant
// index and stays in a register.
template <size_t... J>
__attribute__((target("avx512f"))) inline void MarginTile(const float* const* rows, const float* vf, size_t d,
                                                          double* out /* 4 x J */, std::index_sequence<J...>) {
  constexpr size_t kJ = sizeof...(J);
  __m512 a0[kJ] = {((void)J, _mm512_setzero_ps())...};
  __m512 a1[kJ] = {((void)J, _mm512_setzero_ps())...};
  __m512 a2[kJ] = {((void)J, _mm512_setzero_ps())...};
  __m512 a3[kJ] = {((void)J, _mm512_setzero_ps())...};
  for (size_t c = 0; c < d; c += 16) {
    const __mmask16 m = d - c >= 16 ? static_cast<__mmask16>(0xffff) : static_cast<__mmask16>((1u << (d - c)) - 1);
    const __m512 x0 = _mm512_maskz_loadu_ps(m, rows[0] + c), x1 = _mm512_maskz_loadu_ps(m, rows[1] + c);
    const __m512 x2 = _mm512_maskz_loadu_ps(m, rows[2] + c), x3 = _mm512_maskz_loadu_ps(m, rows[3] + c);
    const __m512 v[kJ] = {_mm512_maskz_loadu_ps(m, vf + J * d + c)...};
    ((a0[J] = _mm512_fmadd_ps(x0, v[J], a0[J])), ...);
    ((a1[J] = _mm512_fmadd_ps(x1, v[J], a1[J])), ...);
    ((a2[J] = _mm512_fmadd_ps(x2, v[J], a2[J])), ...);
    ((a3[J] = _mm512_fmadd_ps(x3, v[J], a3[J])), ...);
  }
  ((out[0 * kJ + J] = LaneSum(a0[J])), ...);
  ((out[1 * kJ + J] = LaneSum(a1[J])), ...);
  ((out[2 * kJ + J] = LaneSum(a2[J])), ...);
  ((out[3 * kJ + J] = LaneSum(a3[J])), ...);
}

// Gradient shares of R rows for all k columns, g[j * R + r] for row r and
// column j: each 16-float step of the rows is loaded once and feeds every
// column, whose partial sums take the rows in order (as one row at a time would).
template <int R>
__attribute__((target("avx512f"))) inline void GradientRows(const float* const* rows, const float* g, size_t d,
                                                            size_t k, float* grad) {
  for (size_t c = 0; c < d; c += 16) {
    const __mmask16 m = d - c >= 16 ? static_cast<__mmask16>(0xffff) : static_cast<__mmask16>((1u << (d - c)) - 1);
    __m512 x[R];
    for (int r = 0; r < R; r++) x[r] = _mm512_maskz_loadu_ps(m, rows[r] + c);
    for (size_t j = 0; j < k; j++) {
      float* out = grad + j * d + c;
      __m512 acc = _mm512_maskz_loadu_ps(m, out);
      for (int r = 0; r < R; r++) acc = _mm512_fmadd_ps(_mm512_set1_ps(g[j * R + r]), x[r], acc);
      _mm512_mask_storeu_ps(out, m, acc);
    }
  }
}

// Margins of four rows against all k columns, up to five columns at a time
// (one fold each; every margin is summed the same way whatever the tile's width).
__attribute__((target("avx512f"))) void Margins4(const float* const* rows, const float* vf, size_t d, size_t k,
                                                 double* out /* 4 x k */) {
  double tile[4 * 5];
  for (size_t j0 = 0; j0 < k;) {
    const size_t J = std::min<size_t>(5, k - j0);
    switch (J) {
      case 5:
        MarginTile(rows, vf + j0 * d, d, tile, std::make_index_sequence<5>());
        break;
      case 4:
        MarginTile(rows, vf + j0 * d, d, tile, std::make_index_sequence<4>());
        break;
      case 3:
        MarginTile(rows, vf + j0 * d, d, tile, std::make_index_sequence<3>());
        break;
      case 2:
        MarginTile(rows, vf + j0 * d, d, tile, std::make_index_sequence<2>());
        break;
      default:
        MarginTile(rows, vf + j0 * d, d, tile, std::make_index_sequence<1>());
        break;
    }
    for (size_t r = 0; r < 4; r++)
      for (size_t j = 0; j < J; j++) out[r * k + j0 + j] = tile[r * J + j];
    j0 += J;
  }
}
#endif

}  // namespace

void LogisticPass(const float* h, size_t n, size_t d, const double* v, const double* offset, const uint8_t* y,
                  const uint8_t* train, size_t k, double* loss, double* gsum, double* grad, int threads) {
#ifdef HSM_X86
  const bool tiles = HasAvx512();
  const auto dot = tiles ? DotAvx512 : HasAvx2() ? DotAvx2 : DotPortable;
  const auto axpy = tiles ? AxpyAvx512 : HasAvx2() ? AxpyAvx2 : AxpyPortable;
#else
  const bool tiles = false;
  const auto dot = DotPortable;
  const auto axpy = AxpyPortable;
#endif
  std::vector<float> vf(v, v + k * d);
  const size_t nt = RowThreads(n, threads);
  struct Partial {
    std::vector<float> grad;
    std::vector<double> loss, gsum;
  };
  std::vector<Partial> partial(nt);
  Split(n, nt, [&](size_t t, size_t begin, size_t end) {
    Partial& p = partial[t];
    p.grad.assign(k * d, 0.0f);
    p.loss.assign(k, 0.0);
    p.gsum.assign(k, 0.0);
    // Rows eight at a time, read from memory once: their margins (four-row register tiles), then their
    // gradient shares while they are in cache.
    constexpr size_t kTile = 8, kMarginTile = 4;
    std::vector<double> margin(kTile * k);
    std::vector<float> g(k * kTile);
    for (size_t i0 = begin; i0 < end; i0 += kTile) {
      const size_t nr = std::min(kTile, end - i0);
      const float* rows[kTile];
      for (size_t r = 0; r < nr; r++) rows[r] = h + (i0 + r) * d;
      for (size_t r0 = 0; r0 < nr; r0 += kMarginTile) {
#ifdef HSM_X86
        if (tiles && nr - r0 >= kMarginTile) {
          Margins4(rows + r0, vf.data(), d, k, margin.data() + r0 * k);
          continue;
        }
#endif
        for (size_t r = r0; r < nr; r++)
          for (size_t j = 0; j < k; j++) margin[r * k + j] = dot(rows[r], vf.data() + j * d, d);
      }
      for (size_t r = 0; r < nr; r++) {
        const size_t i = i0 + r;
        const double sign = y[i] ? 1.0 : -1.0;
        for (size_t j = 0; j < k; j++) {
          g[j * kTile + r] = 0;
          if (!train[j * n + i]) continue;
          const double m = sign * (margin[r * k + j] + offset[j]);
          const LogisticTerms l = Logistic(m);
          p.loss[j] += l.loss;
          const double gi = -sign * l.sigma;
          p.gsum[j] += gi;
          g[j * kTile + r] = static_cast<float>(gi);
        }
      }
#ifdef HSM_X86
      if (tiles && nr == kTile) {
        GradientRows<kTile>(rows, g.data(), d, k, p.grad.data());
        continue;
      }
#endif
      for (size_t j = 0; j < k; j++) {
        for (size_t r = 0; r < nr; r++) {
          if (g[j * kTile + r] != 0) axpy(g[j * kTile + r], rows[r], p.grad.data() + j * d, d);
        }
      }
    }
  });
  for (size_t j = 0; j < k; j++) {
    loss[j] = 0;
    gsum[j] = 0;
    for (size_t t = 0; t < nt; t++) {
      loss[j] += partial[t].loss[j];
      gsum[j] += partial[t].gsum[j];
    }
  }
  for (size_t c = 0; c < k * d; c++) {
    double s = 0;
    for (size_t t = 0; t < nt; t++) s += partial[t].grad[c];
    grad[c] = s;
  }
}

}  // namespace hsm
