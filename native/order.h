// KTS's order of labelled rows by (score, row), as src/metrics/score-order.ts
// defines it: scores ascending, -0 equal to +0, equal scores in the order the
// rows are given.
#pragma once
#include <cstddef>
#include <cstdint>

namespace hsm {

// Writes rows[0 .. n) ordered by score[rows[i]] into out[0 .. n), stably: equal scores keep
// their order in `rows`. Returns false, out untouched, where a score is NaN (the caller's
// comparison sort decides those).
bool OrderByScore(const int32_t* rows, size_t n, const double* score, int32_t* out);

}  // namespace hsm
