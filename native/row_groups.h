// Rows taken a few at a time, so that as many independent sums are in flight while each row's
// own sum still runs in order.
#pragma once
#include <algorithm>
#include <cstddef>

namespace hsm {

// fn(first, n, xr, ar) for each group of n <= K rows [first, first + n) of [begin, end): xr[i] and
// ar[i] are row(r) and anchor(r, row(r)) of row r = first + i. A short last group repeats its last
// row in the slots past n, whose results are not to be used.
template <size_t K, typename Row, typename Anchor, typename Fn>
inline void RowGroups(size_t begin, size_t end, Row row, Anchor anchor, Fn fn) {
  for (size_t first = begin; first < end; first += K) {
    const size_t n = std::min(K, end - first);
    const float* xr[K];
    const float* ar[K];
    for (size_t i = 0; i < K; i++) {
      const size_t r = first + std::min(i, n - 1);
      xr[i] = row(r);
      ar[i] = anchor(r, xr[i]);
    }
    fn(first, n, xr, ar);
  }
}

}  // namespace hsm
