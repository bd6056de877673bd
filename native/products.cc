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
// log(1 + e^t) and 1 / (1 + e^-t) without overflow, as src/metrics/probe.ts writes them.
inline double Log1pExp(double t) { return t > 0 ? t + std::log1p(std::exp(-t)) : std::log1p(std::exp(t)); }
inline double Sigmoid(double t) { return t >= 0 ? 1 / (1 + std::exp(-t)) : std::exp(t) / (1 + std::exp(t)); }
}  // namespace

void LogisticPass(const float* h, size_t n, size_t d, const double* v, const double* offset, const uint8_t* y,
                  const uint8_t* train, size_t k, double* loss, double* gsum, double* grad, int threads) {
#ifdef HSM_X86
  const auto dot = HasAvx512() ? DotAvx512 : DotPortable;
  const auto axpy = HasAvx512() ? AxpyAvx512 : AxpyPortable;
#else
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
    for (size_t i = begin; i < end; i++) {
      // The row is read from memory once: its margins, then its share of the gradient, while it is in cache.
      const float* hi = h + i * d;
      const double sign = y[i] ? 1.0 : -1.0;
      for (size_t j = 0; j < k; j++) {
        if (!train[j * n + i]) continue;
        const double m = sign * (dot(hi, vf.data() + j * d, d) + offset[j]);
        p.loss[j] += Log1pExp(-m);
        const double g = -sign * Sigmoid(-m);
        p.gsum[j] += g;
        if (g != 0) axpy(static_cast<float>(g), hi, p.grad.data() + j * d, d);
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
