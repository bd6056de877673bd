// The row passes ISS and KTS make over a layer before their heavy products,
// twins of src/kernels/typescript/rows.ts: the same float64 operations in the
// same order (the build turns off contraction into fused multiply-adds), so
// the results are equal bit for bit. Passes whose rows are independent split
// the rows across threads; sums over rows run in row order on one thread.
// The passes over a layer read it as float32 or as its stored float16 bits
// (LayerRows), with the same results.
#pragma once
#include <cstddef>
#include <cstdint>

#include "layer_rows.h"

namespace hsm {

// Rows of h (n x d) marked in valid, centred on their float64 mean and scaled
// to unit length, into out; rows of zero length are unmarked. Returns the
// number of rows left unmarked.
size_t CentreRows(const LayerRows& h, size_t n, size_t d, uint8_t* valid, float* out, int threads);

// ISS's float64 cosines of rows[i] of x against its own anchor and the mean of the others.
void AnchorCosines(const float* x, const int32_t* rows, size_t n_rows, const float* a, size_t n_anchors, size_t d,
                   const int32_t* own, double* own_cos, double* other_cos, int threads);

// Rows `rows` of h gathered into out, centred and scaled by their float64 mean and population deviation.
void StandardizeRows(const LayerRows& h, const int32_t* rows, size_t n_rows, size_t d, float* out, double* mean,
                     double* scale, int threads);

// Adds the rows `rows` of h, and their squares, into sum and sum_squares (d each), in row order
// (threads take blocks of columns).
void AddMoments(const float* h, const int32_t* rows, size_t n_rows, size_t d, double* sum, double* sum_squares,
                int threads);

// AddMoments for k folds at once over h (n_h x d), fold f's rows being rows[starts[f] .. starts[f + 1]) and
// its sums at f * d of sum and sum_squares: the same sums in one pass over the rows. False (nothing added)
// where a fold's rows do not ascend or there are more than 64 folds: the caller adds them fold by fold.
bool FoldMoments(const float* h, size_t n_h, size_t d, const int32_t* rows, const int32_t* starts, size_t k,
                 double* sum, double* sum_squares, int threads);

}  // namespace hsm
