// The KTS probe's products on a fixed row matrix H (n x d, float32): H.V and
// H^T.G for a handful of columns (one per fold). Both stream H once per call,
// split across threads by rows.
#pragma once
#include <cstddef>

namespace hsm {

// out (n x k, row-major) = H . V, where column j of V is v[j*d .. j*d+d).
void RowsTimes(const float* h, size_t n, size_t d, const double* v, size_t k, double* out, int threads);

// out (k x d: column j at out[j*d ..]) = H^T . G, for G (n x k, row-major).
void RowsTransposeTimes(const float* h, size_t n, size_t d, const double* g, size_t k, double* out, int threads);

}  // namespace hsm
