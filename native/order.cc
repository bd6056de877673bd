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

bool SortedGroups(const int32_t* order, size_t n, const double* score, const uint8_t* y, const int32_t* group_of,
                  const int32_t* fact_of, const int32_t* pooled_fact_of, SortedGroupOut* groups, size_t n_groups) {
  if (n_groups == 0) return false;
  std::vector<size_t> at(n_groups, 0);
  std::vector<double> last(n_groups, 0);
  for (size_t g = 0; g < n_groups; g++) groups[g].n_ties = 0;
  const auto place = [&](size_t g, int32_t r, int32_t fact) {
    SortedGroupOut& o = groups[g];
    if (at[g] == o.rows) return false;
    if (at[g] == 0 || score[r] != last[g]) o.ties[o.n_ties++] = static_cast<int32_t>(at[g]);
    last[g] = score[r];
    o.fact[at[g]] = fact;
    o.label[at[g]++] = y[r];
    return true;
  };
  const size_t pooled = n_groups - 1;
  for (size_t i = 0; i < n; i++) {
    const int32_t r = order[i];
    if (group_of[r] >= 0 && (static_cast<size_t>(group_of[r]) >= n_groups || !place(group_of[r], r, fact_of[r]))) {
      return false;
    }
    if (pooled_fact_of[r] >= 0 && !place(pooled, r, pooled_fact_of[r])) return false;
  }
  for (size_t g = 0; g < n_groups; g++) {
    if (at[g] != groups[g].rows) return false;
    groups[g].ties[groups[g].n_ties++] = static_cast<int32_t>(at[g]);
  }
  return true;
}

}  // namespace hsm
