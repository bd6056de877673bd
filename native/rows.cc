#include "rows.h"

#include "cpu.h"
#include "layer_rows.h"
#include "row_groups.h"
#include "threads.h"

#include <algorithm>
#include <cmath>
#include <vector>

namespace hsm {
namespace {

// fn(begin, end) over [0, n) in up to `threads` contiguous shares, for passes worth a thread start.
template <typename Fn>
void SplitRows(size_t n, size_t d, int threads, Fn fn) {
  const size_t nt = std::max<size_t>(
      1, std::min<size_t>({static_cast<size_t>(std::max(1, threads)), n * d / (size_t{1} << 16) + 1, 16}));
  Split(n, nt, [&](size_t, size_t begin, size_t end) { fn(begin, end); });
}

}  // namespace

void AnchorCosines(const float* x, const int32_t* rows, size_t n_rows, const float* a, size_t n_anchors, size_t d,
                   const int32_t* own, double* own_cos, double* other_cos, int threads) {
  std::vector<double> sum(d, 0.0);
  for (size_t g = 0; g < n_anchors; g++) {
    for (size_t j = 0; j < d; j++) sum[j] += a[g * d + j];
  }
  const double others = static_cast<double>(n_anchors) - 1;
  SplitRows(n_rows, d, threads, [&](size_t begin, size_t end) {
    // kCosRows rows at a time: as many independent pairs of sums in flight, each still in order.
    constexpr size_t kCosRows = 4;
    RowGroups<kCosRows>(
        begin, end, [&](size_t k) { return x + static_cast<size_t>(rows[k]) * d; },
        [&](size_t k, const float*) { return a + static_cast<size_t>(own[k]) * d; },
        [&](size_t k0, size_t nr, const float* const* xr, const float* const* ar) {
          double s[kCosRows] = {}, t[kCosRows] = {};
          for (size_t j = 0; j < d; j++) {
            for (size_t i = 0; i < kCosRows; i++) {
              s[i] += static_cast<double>(xr[i][j]) * ar[i][j];
              t[i] += static_cast<double>(xr[i][j]) * sum[j];
            }
          }
          for (size_t i = 0; i < nr; i++) {
            own_cos[k0 + i] = s[i];
            other_cos[k0 + i] = (t[i] - s[i]) / others;
          }
        });
  });
}

namespace {

// fn(begin, end) over the columns [0, d) in up to `threads` blocks of whole 16-column steps: each
// column's sums still run over the rows in order, on one thread.
template <typename Fn>
void SplitColumns(size_t n_rows, size_t d, int threads, Fn fn) {
  const size_t steps = (d + 15) / 16;
  const size_t nt = std::max<size_t>(
      1, std::min<size_t>({static_cast<size_t>(std::max(1, threads)), n_rows * d / (size_t{1} << 16) + 1, steps}));
  Split(steps, nt, [&](size_t, size_t s0, size_t s1) { fn(std::min(d, s0 * 16), std::min(d, s1 * 16)); });
}

// The column loops below, each element's operations as written (no contraction, no reassociation),
// so a wider vector only runs more columns at once: the AVX-512 copies give the portable ones' bits.
template <typename Body>
inline __attribute__((always_inline)) void RowSums(const LayerRows& h, const int32_t* rows, size_t n_rows, size_t d,
                                                   size_t begin, size_t end, Body body) {
  std::vector<float> scratch = h.Scratch(end - begin);
  for (size_t i = 0; i < n_rows; i++) {
    const float* row = h.Span(static_cast<size_t>(rows[i]), begin, end, scratch.data());
    for (size_t j = begin; j < end; j++) body(j, row[j - begin]);
  }
}

void SumsPortable(const LayerRows& h, const int32_t* rows, size_t n_rows, size_t d, size_t begin, size_t end,
                  double* sum) {
  RowSums(h, rows, n_rows, d, begin, end, [&](size_t j, float v) { sum[j] += v; });
}
void MeanPortable(const LayerRows& h, const int32_t* rows, size_t n_rows, size_t d, size_t begin, size_t end,
                  double* mean) {
  const double n = static_cast<double>(n_rows);
  RowSums(h, rows, n_rows, d, begin, end, [&](size_t j, float v) { mean[j] += v / n; });
}
void VariancePortable(const LayerRows& h, const int32_t* rows, size_t n_rows, size_t d, size_t begin, size_t end,
                      const double* mean, double* var) {
  const double n = static_cast<double>(n_rows);
  RowSums(h, rows, n_rows, d, begin, end, [&](size_t j, float v) {
    const double c = v - mean[j];
    var[j] += c * c / n;
  });
}
void MomentsPortable(const LayerRows& h, const int32_t* rows, size_t n_rows, size_t d, size_t begin, size_t end,
                     double* sum, double* sum_squares) {
  RowSums(h, rows, n_rows, d, begin, end, [&](size_t j, float f) {
    const double v = f;
    sum[j] += v;
    sum_squares[j] += v * v;
  });
}

#if defined(__x86_64__)
__attribute__((target("avx512f"))) void SumsAvx512(const LayerRows& h, const int32_t* rows, size_t n_rows, size_t d,
                                                   size_t begin, size_t end, double* sum) {
  RowSums(h, rows, n_rows, d, begin, end, [&](size_t j, float v) { sum[j] += v; });
}
__attribute__((target("avx512f"))) void MeanAvx512(const LayerRows& h, const int32_t* rows, size_t n_rows, size_t d,
                                                   size_t begin, size_t end, double* mean) {
  const double n = static_cast<double>(n_rows);
  RowSums(h, rows, n_rows, d, begin, end, [&](size_t j, float v) { mean[j] += v / n; });
}
__attribute__((target("avx512f"))) void VarianceAvx512(const LayerRows& h, const int32_t* rows, size_t n_rows, size_t d,
                                                       size_t begin, size_t end, const double* mean, double* var) {
  const double n = static_cast<double>(n_rows);
  RowSums(h, rows, n_rows, d, begin, end, [&](size_t j, float v) {
    const double c = v - mean[j];
    var[j] += c * c / n;
  });
}
__attribute__((target("avx512f"))) void MomentsAvx512(const LayerRows& h, const int32_t* rows, size_t n_rows, size_t d,
                                                      size_t begin, size_t end, double* sum, double* sum_squares) {
  RowSums(h, rows, n_rows, d, begin, end, [&](size_t j, float f) {
    const double v = f;
    sum[j] += v;
    sum_squares[j] += v * v;
  });
}
#endif

// The column loops for the SIMD level in force, chosen per call.
struct ColumnLoops {
  decltype(&SumsPortable) sums;
  decltype(&MeanPortable) mean;
  decltype(&VariancePortable) variance;
  decltype(&MomentsPortable) moments;
};
ColumnLoops Loops() {
#if defined(__x86_64__)
  if (HasAvx512()) return {SumsAvx512, MeanAvx512, VarianceAvx512, MomentsAvx512};
#endif
  return {SumsPortable, MeanPortable, VariancePortable, MomentsPortable};
}

}  // namespace

size_t CentreRows(const LayerRows& h, size_t n, size_t d, uint8_t* valid, float* out, int threads) {
  std::vector<int32_t> rows;
  for (size_t i = 0; i < n; i++) {
    if (valid[i]) rows.push_back(static_cast<int32_t>(i));
  }
  std::vector<double> mu(d, 0.0);
  const auto sums = Loops().sums;
  SplitColumns(rows.size(), d, threads,
               [&](size_t begin, size_t end) { sums(h, rows.data(), rows.size(), d, begin, end, mu.data()); });
  const double count = static_cast<double>(std::max<size_t>(rows.size(), 1));
  for (size_t j = 0; j < d; j++) mu[j] /= count;
  SplitRows(n, d, threads, [&](size_t begin, size_t end) {
    std::vector<float> scratch = h.Scratch(d);
    for (size_t i = begin; i < end; i++) {
      if (!valid[i]) continue;
      const float* src = h.Span(i, 0, d, scratch.data());
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

void StandardizeRows(const LayerRows& h, const int32_t* rows, size_t n_rows, size_t d, float* out, double* mean,
                     double* scale, int threads) {
  std::fill(mean, mean + d, 0.0);
  std::fill(scale, scale + d, 0.0);
  const ColumnLoops loops = Loops();
  SplitColumns(n_rows, d, threads, [&](size_t begin, size_t end) {
    loops.mean(h, rows, n_rows, d, begin, end, mean);
    loops.variance(h, rows, n_rows, d, begin, end, mean, scale);
  });
  for (size_t j = 0; j < d; j++) {
    scale[j] = std::sqrt(scale[j]);
    if (scale[j] == 0 || std::isnan(scale[j])) scale[j] = 1;  // JavaScript's `|| 1`
  }
  SplitRows(n_rows, d, threads, [&](size_t begin, size_t end) {
    std::vector<float> scratch = h.Scratch(d);
    for (size_t i = begin; i < end; i++) {
      const float* row = h.Span(static_cast<size_t>(rows[i]), 0, d, scratch.data());
      for (size_t j = 0; j < d; j++) out[i * d + j] = static_cast<float>((row[j] - mean[j]) / scale[j]);
    }
  });
}

bool FoldMoments(const float* h, size_t n_h, size_t d, const int32_t* rows, const int32_t* starts, size_t k,
                 double* sum, double* sum_squares, int threads) {
  constexpr size_t kMaxFolds = 64;
  if (k > kMaxFolds) return false;
  // Per row of h, the folds it trains (a bit each); each fold's own rows must ascend.
  std::vector<uint64_t> folds_of(n_h, 0);
  for (size_t f = 0; f < k; f++) {
    for (int32_t i = starts[f]; i < starts[f + 1]; i++) {
      if (i > starts[f] && rows[i] <= rows[i - 1]) return false;
      folds_of[static_cast<size_t>(rows[i])] |= uint64_t{1} << f;
    }
  }
  std::vector<std::pair<int32_t, uint64_t>> members;
  for (size_t r = 0; r < n_h; r++) {
    if (folds_of[r] != 0) members.push_back({static_cast<int32_t>(r), folds_of[r]});
  }
  const auto moments = Loops().moments;
  const LayerRows rows_of_h = LayerRows::Float32(h, d);
  // Columns a tile at a time, so that every fold's sums for the tile stay in the first-level cache while each
  // row passes (AddMoments' column loop, one row at a time): each (fold, column) sum still takes its fold's rows
  // in order.
  constexpr size_t kTile = 128;
  SplitColumns(members.size(), d, threads, [&](size_t begin, size_t end) {
    for (size_t t0 = begin; t0 < end; t0 += kTile) {
      const size_t t1 = std::min(end, t0 + kTile);
      for (const auto& [r, folds] : members) {
        for (uint64_t m = folds; m != 0; m &= m - 1) {
          const size_t f = static_cast<size_t>(__builtin_ctzll(m));
          moments(rows_of_h, &r, 1, d, t0, t1, sum + f * d, sum_squares + f * d);
        }
      }
    }
  });
  return true;
}

void AddMoments(const float* h, const int32_t* rows, size_t n_rows, size_t d, double* sum, double* sum_squares,
                int threads) {
  const auto moments = Loops().moments;
  SplitColumns(n_rows, d, threads, [&](size_t begin, size_t end) {
    moments(LayerRows::Float32(h, d), rows, n_rows, d, begin, end, sum, sum_squares);
  });
}

}  // namespace hsm
