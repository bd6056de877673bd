// The heavy part of ISS: every query row against every anchor, keeping only
// each row's own score and how many other anchors score above it. The
// |Q| x F similarity matrix is never held: anchors are packed into panels,
// multiplied in cache-sized tiles, and counted in the tile's epilogue.
#pragma once
#include <cstddef>
#include <cstdint>

namespace hsm {

// x: rows of d values (row-major), of which rows[0 .. n_rows) are ranked (row i below is
// x's row rows[i]); a: n_anchors x d (row-major), own[i]: the anchor index of row i (-1: no
// own anchor; such rows get 0 and 0). Writes own_score[i] (x_i . a_own, float32 arithmetic)
// and above[i] = #{g != own : x_i . a_g > own_score[i]}. allow_bf16: screen with the bfloat16
// dot-product instructions where the CPU has them (the counts stay those of the float32
// kernel); false: float32 only. The anchors are packed once for all the rows.
void RankAgainstAnchors(const float* x, const int32_t* rows, size_t n_rows, const float* a, size_t n_anchors, size_t d,
                        const int32_t* own, float* own_score, int32_t* above, int threads, bool allow_bf16);

}  // namespace hsm
