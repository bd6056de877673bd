#include "products.h"

#include "cpu.h"

#include <algorithm>
#include <cmath>
#include <thread>
#include <vector>

#if defined(__x86_64__)
#include <immintrin.h>
#define HSM_X86 1
#endif

namespace hsm {
namespace {

template <typename Fn>
void SplitRows(size_t n, int threads, Fn fn) {
  const size_t nt = std::max<size_t>(1, std::min<size_t>(threads, n / 256 + 1));
  std::vector<std::thread> pool;
  for (size_t t = 1; t < nt; t++) pool.emplace_back(fn, t, n * t / nt, n * (t + 1) / nt);
  fn(0, 0, n / nt);
  for (auto& th : pool) th.join();
}

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

__attribute__((target("avx512f"))) void AxpyAvx512(float alpha, const float* x, float* y, size_t d) {
  const __m512 va = _mm512_set1_ps(alpha);
  size_t i = 0;
  for (; i + 16 <= d; i += 16) _mm512_storeu_ps(y + i, _mm512_fmadd_ps(va, _mm512_loadu_ps(x + i), _mm512_loadu_ps(y + i)));
  for (; i < d; i++) y[i] += alpha * x[i];
}
#endif

void AxpyPortable(float alpha, const float* x, float* y, size_t d) {
  for (size_t i = 0; i < d; i++) y[i] += alpha * x[i];
}

}  // namespace

void RowsTimes(const float* h, size_t n, size_t d, const double* v, size_t k, double* out, int threads) {
  std::vector<float> vf(v, v + k * d);
#ifdef HSM_X86
  const auto dot = HasAvx512() ? DotAvx512 : DotPortable;
#else
  const auto dot = DotPortable;
#endif
  SplitRows(n, threads, [&](size_t, size_t begin, size_t end) {
    for (size_t i = begin; i < end; i++) {
      for (size_t j = 0; j < k; j++) out[i * k + j] = dot(h + i * d, vf.data() + j * d, d);
    }
  });
}

void RowsTransposeTimes(const float* h, size_t n, size_t d, const double* g, size_t k, double* out, int threads) {
#ifdef HSM_X86
  const auto axpy = HasAvx512() ? AxpyAvx512 : AxpyPortable;
#else
  const auto axpy = AxpyPortable;
#endif
  const size_t nt = std::max<size_t>(1, std::min<size_t>(threads, n / 256 + 1));
  std::vector<std::vector<float>> partial(nt, std::vector<float>(k * d, 0.0f));
  SplitRows(n, static_cast<int>(nt), [&](size_t t, size_t begin, size_t end) {
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
// Register tiles for the logistic pass: R rows against J weight columns.
// Margins: each 16-float step of a row feeds J accumulators; each step of a
// column feeds R. Gradient: each step of a gradient column takes R rows'
// shares at once. Tails of d are masked loads and stores.
template <int R, int J>
__attribute__((target("avx512f"))) inline void MarginTile(const float* const* rows, const float* vf, size_t d, double* out /* R x J */) {
  __m512 acc[R][J];
  for (int r = 0; r < R; r++)
    for (int j = 0; j < J; j++) acc[r][j] = _mm512_setzero_ps();
  for (size_t c = 0; c < d; c += 16) {
    const __mmask16 m = d - c >= 16 ? static_cast<__mmask16>(0xffff) : static_cast<__mmask16>((1u << (d - c)) - 1);
    __m512 x[R];
    for (int r = 0; r < R; r++) x[r] = _mm512_maskz_loadu_ps(m, rows[r] + c);
    for (int j = 0; j < J; j++) {
      const __m512 v = _mm512_maskz_loadu_ps(m, vf + j * d + c);
      for (int r = 0; r < R; r++) acc[r][j] = _mm512_fmadd_ps(x[r], v, acc[r][j]);
    }
  }
  alignas(64) float lanes[16];
  for (int r = 0; r < R; r++) {
    for (int j = 0; j < J; j++) {
      _mm512_store_ps(lanes, acc[r][j]);
      double s = 0;
      for (float l : lanes) s += l;
      out[r * J + j] = s;
    }
  }
}

template <int R>
__attribute__((target("avx512f"))) inline void GradientTile(const float* const* rows, const float* g /* R */, size_t d, float* grad) {
  __m512 gr[R];
  for (int r = 0; r < R; r++) gr[r] = _mm512_set1_ps(g[r]);
  for (size_t c = 0; c < d; c += 16) {
    const __mmask16 m = d - c >= 16 ? static_cast<__mmask16>(0xffff) : static_cast<__mmask16>((1u << (d - c)) - 1);
    __m512 acc = _mm512_maskz_loadu_ps(m, grad + c);
    for (int r = 0; r < R; r++) acc = _mm512_fmadd_ps(gr[r], _mm512_maskz_loadu_ps(m, rows[r] + c), acc);
    _mm512_mask_storeu_ps(grad + c, m, acc);
  }
}

// Margins of R rows against all k columns, J columns at a time.
template <int R>
__attribute__((target("avx512f"))) void Margins(const float* const* rows, const float* vf, size_t d, size_t k, double* out /* R x k */) {
  double tile[R * 4];
  for (size_t j0 = 0; j0 < k;) {
    const size_t left = k - j0;
    const int J = left >= 4 ? 4 : static_cast<int>(left);
    switch (J) {
      case 4: MarginTile<R, 4>(rows, vf + j0 * d, d, tile); break;
      case 3: MarginTile<R, 3>(rows, vf + j0 * d, d, tile); break;
      case 2: MarginTile<R, 2>(rows, vf + j0 * d, d, tile); break;
      default: MarginTile<R, 1>(rows, vf + j0 * d, d, tile); break;
    }
    for (int r = 0; r < R; r++)
      for (int j = 0; j < J; j++) out[r * k + j0 + j] = tile[r * J + j];
    j0 += J;
  }
}
#endif

}  // namespace

void LogisticPass(const float* h, size_t n, size_t d, const double* v, const double* offset, const uint8_t* y,
                  const uint8_t* train, size_t k, double* loss, double* gsum, double* grad, int threads) {
#ifdef HSM_X86
  const bool tiles = HasAvx512();
  const auto dot = tiles ? DotAvx512 : DotPortable;
  const auto axpy = tiles ? AxpyAvx512 : AxpyPortable;
#else
  const bool tiles = false;
  const auto dot = DotPortable;
  const auto axpy = AxpyPortable;
#endif
  std::vector<float> vf(v, v + k * d);
  const size_t nt = std::max<size_t>(1, std::min<size_t>(threads, n / 256 + 1));
  struct Partial {
    std::vector<float> grad;
    std::vector<double> loss, gsum;
  };
  std::vector<Partial> partial(nt);
  SplitRows(n, static_cast<int>(nt), [&](size_t t, size_t begin, size_t end) {
    Partial& p = partial[t];
    p.grad.assign(k * d, 0.0f);
    p.loss.assign(k, 0.0);
    p.gsum.assign(k, 0.0);
    constexpr size_t kTile = 4;
    std::vector<double> margin(kTile * k);
    std::vector<float> g(k * kTile);
    // Rows a tile at a time, read from memory once: their margins, then their gradient shares while they are in cache.
    for (size_t i0 = begin; i0 < end; i0 += kTile) {
      const size_t nr = std::min(kTile, end - i0);
      const float* rows[kTile];
      for (size_t r = 0; r < nr; r++) rows[r] = h + (i0 + r) * d;
#ifdef HSM_X86
      if (tiles && nr == kTile) Margins<kTile>(rows, vf.data(), d, k, margin.data());
      else
#endif
        for (size_t r = 0; r < nr; r++)
          for (size_t j = 0; j < k; j++) margin[r * k + j] = dot(rows[r], vf.data() + j * d, d);
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
      for (size_t j = 0; j < k; j++) {
#ifdef HSM_X86
        if (tiles && nr == kTile) {
          GradientTile<kTile>(rows, g.data() + j * kTile, d, p.grad.data() + j * d);
          continue;
        }
#endif
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
