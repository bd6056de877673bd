// The thread split the native kernels share.
#pragma once
#include <algorithm>
#include <cstddef>
#include <thread>
#include <vector>

namespace hsm {

// fn(begin, end) over [0, n) in up to `threads` contiguous shares, one thread each
// (the calling thread takes the first).
template <typename Fn>
void Shares(size_t n, int threads, Fn fn) {
  const size_t nt = std::max<size_t>(1, std::min<size_t>(static_cast<size_t>(std::max(1, threads)), n));
  std::vector<std::thread> pool;
  for (size_t t = 1; t < nt; t++) pool.emplace_back(fn, n * t / nt, n * (t + 1) / nt);
  fn(0, n / nt);
  for (auto& th : pool) th.join();
}

}  // namespace hsm
