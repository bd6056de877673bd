// Bootstrap replicates over facts, drawn with the same generator as
// src/util/random.ts (xoshiro128**, seeded through a splitmix-style step), so
// native and TypeScript draws — and therefore intervals — are identical.
#pragma once
#include <cstddef>
#include <cstdint>

namespace hsm {

// For each of b replicates: draw n facts with replacement, then
// out[r] = sum_f count_f * values[f] / n. Replicates are split across up to
// `threads` threads, each starting the generator where the sequential stream
// would be at its first replicate.
void BootstrapMean(uint32_t seed, uint32_t stream, const double* values, size_t n, size_t b, double* out, int threads);

// A group of rows sorted by score: each row's fact and 0/1 label, and the
// starts of runs of equal scores (ties[0] = 0, ties[n_ties] = rows).
struct SortedGroup {
  const int32_t* fact;
  const uint8_t* label;
  const int32_t* ties;
  size_t n_ties;
  size_t n_facts;
};

// The group's AUROC with each row weighted by weight[its fact] (every row 1 where weight is null); equal scores
// count 1/2. Exact: every sum is a whole or half number far below 2^53. NaN when a class has no weight.
double Auroc(const SortedGroup& g, const int32_t* weight);

// For each replicate: draw group.n_facts facts, out[r] = the group's AUROC
// with rows weighted by their fact's count (NaN when a class has no weight).
// With paired != nullptr, also paired_out[r] = the paired group's AUROC with
// weights carried over by to_paired[f] (the paired fact of fact f, or -1).
// Replicates (draws and passes) are split across up to `threads` threads as in
// BootstrapMean; the results do not depend on the split.
void BootstrapAuroc(uint32_t seed, uint32_t stream, const SortedGroup& group, size_t b, double* out,
                    const SortedGroup* paired, const int32_t* to_paired, double* paired_out, int threads);

}  // namespace hsm
