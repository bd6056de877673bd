#include "rows.h"

#include <algorithm>
#include <cmath>
#include <thread>
#include <vector>

namespace hsm {
namespace {

// fn(begin, end) over [0, n) in up to `threads` contiguous shares, for passes worth a thread start.
template <typename Fn>
void SplitRows(size_t n, size_t d, int threads, Fn fn) {
  const size_t nt = std::max<size_t>(1, std::min<size_t>({static_cast<size_t>(std::max(1, threads)), n * d / (size_t{1} << 16) + 1, 16}));
  std::vector<std::thread> pool;
  for (size_t t = 1; t < nt; t++) pool.emplace_back(fn, n * t / nt, n * (t + 1) / nt);
  fn(0, n / nt);
  for (auto& th : pool) th.join();
}

}  // namespace

size_t CentreRows(const float* h, size_t n, size_t d, uint8_t* valid, float* out, int threads) {
  std::vector<double> mu(d, 0.0);
  size_t n_valid = 0;
  for (size_t i = 0; i < n; i++) {
    if (!valid[i]) continue;
    n_valid++;
    const float* row = h + i * d;
    for (size_t j = 0; j < d; j++) mu[j] += row[j];
  }
  const double count = static_cast<double>(std::max<size_t>(n_valid, 1));
  for (size_t j = 0; j < d; j++) mu[j] /= count;
  SplitRows(n, d, threads, [&](size_t begin, size_t end) {
    for (size_t i = begin; i < end; i++) {
      if (!valid[i]) continue;
      const float* src = h + i * d;
      float* row = out + i * d;
      double ss = 0;
      for (size_t j = 0; j < d; j++) {
        row[j] = static_cast<float>(static_cast<double>(src[j]) - mu[j]);
        ss += static_cast<double>(row[j]) * row[j];
      }
      if (ss == 0) {
        valid[i] = 0;
        continue;
      }
      const double inv = 1 / std::sqrt(ss);
      for (size_t j = 0; j < d; j++) row[j] = static_cast<float>(row[j] * inv);
    }
  });
  size_t excluded = 0;
  for (size_t i = 0; i < n; i++) excluded += valid[i] ? 0 : 1;
  return excluded;
}

void AnchorCosines(const float* x, const int32_t* rows, size_t n_rows, const float* a, size_t n_anchors, size_t d,
                   const int32_t* own, double* own_cos, double* other_cos, int threads) {
  std::vector<double> sum(d, 0.0);
  for (size_t g = 0; g < n_anchors; g++) {
    for (size_t j = 0; j < d; j++) sum[j] += a[g * d + j];
  }
  const double others = static_cast<double>(n_anchors) - 1;
  SplitRows(n_rows, d, threads, [&](size_t begin, size_t end) {
    for (size_t k = begin; k < end; k++) {
      const float* xr = x + static_cast<size_t>(rows[k]) * d;
      const float* ar = a + static_cast<size_t>(own[k]) * d;
      double s = 0, t = 0;
      for (size_t j = 0; j < d; j++) {
        s += static_cast<double>(xr[j]) * ar[j];
        t += static_cast<double>(xr[j]) * sum[j];
      }
      own_cos[k] = s;
      other_cos[k] = (t - s) / others;
    }
  });
}

void StandardizeRows(const float* h, const int32_t* rows, size_t n_rows, size_t d, float* out, double* mean, double* scale,
                     int threads) {
  const double n = static_cast<double>(n_rows);
  std::fill(mean, mean + d, 0.0);
  std::fill(scale, scale + d, 0.0);
  for (size_t i = 0; i < n_rows; i++) {
    const float* row = h + static_cast<size_t>(rows[i]) * d;
    for (size_t j = 0; j < d; j++) mean[j] += row[j] / n;
  }
  for (size_t i = 0; i < n_rows; i++) {
    const float* row = h + static_cast<size_t>(rows[i]) * d;
    for (size_t j = 0; j < d; j++) {
      const double c = row[j] - mean[j];
      scale[j] += c * c / n;
    }
  }
  for (size_t j = 0; j < d; j++) {
    scale[j] = std::sqrt(scale[j]);
    if (scale[j] == 0 || std::isnan(scale[j])) scale[j] = 1;  // JavaScript's `|| 1`
  }
  SplitRows(n_rows, d, threads, [&](size_t begin, size_t end) {
    for (size_t i = begin; i < end; i++) {
      const float* row = h + static_cast<size_t>(rows[i]) * d;
      for (size_t j = 0; j < d; j++) out[i * d + j] = static_cast<float>((row[j] - mean[j]) / scale[j]);
    }
  });
}

void AddMoments(const float* h, const int32_t* rows, size_t n_rows, size_t d, double* sum, double* sum_squares) {
  for (size_t i = 0; i < n_rows; i++) {
    const float* row = h + static_cast<size_t>(rows[i]) * d;
    for (size_t j = 0; j < d; j++) {
      const double v = row[j];
      sum[j] += v;
      sum_squares[j] += v * v;
    }
  }
}

}  // namespace hsm
