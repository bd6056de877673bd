#include "bootstrap.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <thread>
#include <vector>

namespace hsm {
namespace {

inline uint32_t Rotl(uint32_t x, int k) { return (x << k) | (x >> (32 - k)); }

// Twin of class Rng in src/util/random.ts.
class Rng {
 public:
  Rng(uint32_t seed, uint32_t stream) {
    uint32_t s = seed ^ ((stream + 1u) * 0x9e3779b9u);
    auto next = [&s]() {
      s += 0x9e3779b9u;
      uint32_t z = s;
      z = (z ^ (z >> 16)) * 0x85ebca6bu;
      z = (z ^ (z >> 13)) * 0xc2b2ae35u;
      return z ^ (z >> 16);
    };
    a_ = next();
    b_ = next();
    c_ = next();
    d_ = next();
    if ((a_ | b_ | c_ | d_) == 0) a_ = 1;
  }
  uint32_t U32() {
    const uint32_t result = Rotl(b_ * 5u, 7) * 9u;
    const uint32_t t = b_ << 9;
    c_ ^= a_;
    d_ ^= b_;
    b_ ^= c_;
    a_ ^= d_;
    c_ ^= t;
    d_ = Rotl(d_, 11);
    return result;
  }
  // Math.floor((u32 / 2^32) * n) as TypeScript computes it. Below 2^21 items the
  // product u32 * n fits a double's 53 bits, so the double result is exact and
  // equals the integer multiply-shift; above, the double arithmetic is repeated.
  size_t Int(size_t n) {
    const uint32_t u = U32();
    if (n < (size_t{1} << 21)) return static_cast<size_t>((static_cast<uint64_t>(u) * n) >> 32);
    return static_cast<size_t>(static_cast<int64_t>(static_cast<double>(u) * 0x1p-32 * static_cast<double>(n)));
  }

 private:
  uint32_t a_, b_, c_, d_;
};

void Draw(Rng& rng, std::vector<int32_t>& counts) {
  // A local copy of the generator: the int32 stores below could alias its
  // uint32 state, which would force it through memory on every draw.
  Rng local = rng;
  const size_t n = counts.size();
  int32_t* c = counts.data();
  std::fill(c, c + n, 0);
  for (size_t i = 0; i < n; i++) c[local.Int(n)]++;
  rng = local;
}

// Weights are counts of drawn facts: whole numbers, summed exactly in integers
// (as TypeScript's doubles sum them exactly), then combined in double as there.
double Auroc(const SortedGroup& g, const int32_t* weight) {
  double neg_below = 0, sum_pos = 0, wins = 0;
  for (size_t t = 0; t < g.n_ties; t++) {
    int64_t pos = 0, all = 0;
    for (int32_t i = g.ties[t]; i < g.ties[t + 1]; i++) {
      const int64_t w = weight[g.fact[i]];
      pos += w * g.label[i];
      all += w;
    }
    const double p = static_cast<double>(pos);
    const double neg = static_cast<double>(all - pos);
    wins += p * (neg_below + neg / 2);
    neg_below += neg;
    sum_pos += p;
  }
  if (sum_pos == 0 || neg_below == 0) return std::numeric_limits<double>::quiet_NaN();
  return wins / (sum_pos * neg_below);
}

}  // namespace

void BootstrapMean(uint32_t seed, uint32_t stream, const double* values, size_t n, size_t b, double* out) {
  Rng rng(seed, stream);
  std::vector<int32_t> counts(n);
  for (size_t r = 0; r < b; r++) {
    Draw(rng, counts);
    double s = 0;
    for (size_t f = 0; f < n; f++) s += counts[f] * values[f];
    out[r] = s / static_cast<double>(n);
  }
}

void BootstrapAuroc(uint32_t seed, uint32_t stream, const SortedGroup& group, size_t b, double* out,
                    const SortedGroup* paired, const int32_t* to_paired, double* paired_out, int threads) {
  // The draws are one sequential stream; the AUROC passes over them are independent and split across cores.
  const size_t n = group.n_facts;
  Rng rng(seed, stream);
  std::vector<int32_t> draws(b * n);
  std::vector<int32_t> counts(n);
  for (size_t r = 0; r < b; r++) {
    Draw(rng, counts);
    std::copy(counts.begin(), counts.end(), draws.begin() + r * n);
  }
  auto work = [&](size_t first, size_t last) {
    std::vector<int32_t> paired_weights(paired ? paired->n_facts : 0);
    for (size_t r = first; r < last; r++) {
      const int32_t* c = draws.data() + r * n;
      out[r] = Auroc(group, c);
      if (paired) {
        std::fill(paired_weights.begin(), paired_weights.end(), 0);
        for (size_t f = 0; f < n; f++) {
          if (to_paired[f] >= 0) paired_weights[to_paired[f]] += c[f];
        }
        paired_out[r] = Auroc(*paired, paired_weights.data());
      }
    }
  };
  const size_t nt = std::max<size_t>(1, std::min<size_t>(static_cast<size_t>(std::max(1, threads)), b / 16 + 1));
  std::vector<std::thread> pool;
  for (size_t t = 1; t < nt; t++) pool.emplace_back(work, b * t / nt, b * (t + 1) / nt);
  work(0, b / nt);
  for (auto& th : pool) th.join();
}

}  // namespace hsm
