// A stable least-significant-digit radix sort of the scores' bits, as the
// TypeScript fallback does it (src/metrics/score-order.ts), in eleven-bit
// digits: six passes whose counts fit the first-level cache together.
#include "order.h"

#include <cmath>
#include <cstring>
#include <utility>
#include <vector>

namespace hsm {
namespace {

constexpr int kDigitBits = 11;
constexpr int kDigits = (64 + kDigitBits - 1) / kDigitBits;
constexpr size_t kBins = size_t{1} << kDigitBits;

// A float64's bits as an unsigned key that orders like the value: a negative value's bits all flipped, another's
// sign bit set. -0 arrives as +0.
uint64_t Key(double s) {
  uint64_t bits;
  std::memcpy(&bits, &s, sizeof bits);
  return bits >> 63 ? ~bits : bits | (uint64_t{1} << 63);
}

uint32_t Digit(uint64_t key, int d) { return static_cast<uint32_t>(key >> (d * kDigitBits)) & (kBins - 1); }

}  // namespace

bool OrderByScore(const int32_t* rows, size_t n, const double* score, int32_t* out) {
  std::vector<uint64_t> key(n), next_key(n);
  std::vector<int32_t> row(rows, rows + n), next_row(n);
  std::vector<uint32_t> count(kDigits * kBins, 0);
  for (size_t i = 0; i < n; i++) {
    const double s = score[rows[i]];
    if (std::isnan(s)) return false;
    key[i] = Key(s + 0.0);  // -0 + 0 is +0: the two zeros sort as one
    for (int d = 0; d < kDigits; d++) count[d * kBins + Digit(key[i], d)]++;
  }
  for (int d = 0; d < kDigits; d++) {
    uint32_t* c = &count[d * kBins];
    if (n == 0 || c[Digit(key[0], d)] == n) continue;  // one digit everywhere: the pass would change nothing
    uint32_t at = 0;
    for (size_t b = 0; b < kBins; b++) at += std::exchange(c[b], at);
    for (size_t i = 0; i < n; i++) {
      const uint32_t to = c[Digit(key[i], d)]++;
      next_key[to] = key[i];
      next_row[to] = row[i];
    }
    key.swap(next_key);
    row.swap(next_row);
  }
  std::memcpy(out, row.data(), n * sizeof(int32_t));
  return true;
}

}  // namespace hsm
