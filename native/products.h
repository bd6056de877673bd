// The KTS probe's products on a fixed row matrix H (n x d, float32): H.V and
// H^T.G for a handful of columns (one per fold). Both stream H once per call,
// split across threads by rows.
#pragma once
#include <cstddef>
#include <cstdint>

#include "layer_rows.h"

namespace hsm {

// out (n x k, row-major) = H . V, where column j of V is v[j*d .. j*d+d); H float32 or float16 (LayerRows).
void RowsTimes(const LayerRows& h, size_t n, size_t d, const double* v, size_t k, double* out, int threads);

// out (k x d: column j at out[j*d ..]) = H^T . G, for G (n x k, row-major).
void RowsTransposeTimes(const float* h, size_t n, size_t d, const double* g, size_t k, double* out, int threads);

// The logistic probe's objective and gradient for k folds in one pass over H:
// for fold j, over the rows i with train[j*n + i] set, with s = +1 where y[i]
// else -1 and m = s (H_i . v_j + offset[j]): loss[j] = sum log(1 + e^-m),
// gsum[j] = sum g_i and grad (column j at grad[j*d ..]) = sum g_i H_i, where
// g_i = -s / (1 + e^m).
void LogisticPass(const float* h, size_t n, size_t d, const double* v, const double* offset, const uint8_t* y,
                  const uint8_t* train, size_t k, double* loss, double* gsum, double* grad, int threads);

}  // namespace hsm
