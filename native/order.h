// KTS's order of labelled rows by (score, row), as src/metrics/score-order.ts
// defines it (scores ascending, -0 equal to +0, equal scores in the order the
// rows are given), and the reported groups taken in that order.
#pragma once
#include <cstddef>
#include <cstdint>

namespace hsm {

// Writes rows[0 .. n) ordered by score[rows[i]] into out[0 .. n), stably: equal scores keep
// their order in `rows`. Returns false, out untouched, where a score is NaN (the caller's
// comparison sort decides those).
bool OrderByScore(const int32_t* rows, size_t n, const double* score, int32_t* out);

// One group's rows in score order: each row's fact and 0/1 label, and the start of each run of
// equal scores followed by the row count (ties[0 .. n_ties)).
struct SortedGroupOut {
  int32_t* fact;
  uint8_t* label;
  int32_t* ties;  // room for rows + 1
  size_t rows;
  size_t n_ties;
};

// Takes the rows of `order` (n of them, sorted by score) into groups[0 .. n_groups): row r into
// group group_of[r] (if >= 0) as fact fact_of[r], and into the last group (the pooled one) as fact
// pooled_fact_of[r] (if >= 0). Each group must be sized to exactly the rows it takes; returns
// false, the groups partly written, where one is not.
bool SortedGroups(const int32_t* order, size_t n, const double* score, const uint8_t* y, const int32_t* group_of,
                  const int32_t* fact_of, const int32_t* pooled_fact_of, SortedGroupOut* groups, size_t n_groups);

}  // namespace hsm
