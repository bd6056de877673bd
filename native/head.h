// The LM head of greedy decoding: for each batch row, the vocabulary entry
// with the largest logit h . w_v, exactly as float64 arithmetic gives it,
// found by screening every entry with bfloat16 dot products under a rigorous
// error bound and computing only the survivors exactly.
#pragma once
#include <cstddef>
#include <cstdint>

namespace hsm {

// From W as an ONNX graph stores an LM head (float32, row-major d x vocab), W^T (vocab x d,
// each vocabulary row contiguous) split into the two halves of each value's bits: hi = the top
// 16 (the value's bfloat16 truncated toward zero, which the screen reads), lo = the bottom 16
// (read, with hi, only where a logit is computed exactly); and norms[v] = the Euclidean norm of
// row v (its squares summed in float64 in order, the square root rounded to float32).
void PrepareHead(const float* w, size_t d, size_t vocab, uint16_t* hi, uint16_t* lo, float* norms, int threads);

// out[b] = argmax over v of sum_i h[b*d + i] * W^T[v*d + i], each product exact and the sum
// taken in float64 in order i = 0 .. d-1; ties go to the lowest v, a NaN logit never wins (all
// NaN: 0). hi, lo and norms as PrepareHead writes them. allow_bf16: screen with AMX tiles or
// the AVX-512 bfloat16 dot products where the CPU has them; false (or no such CPU): float32
// arithmetic over the same bfloat16 values. The answer is the same either way, and for any
// thread count. Returns how many float64 dot products it took.
uint64_t HeadArgmax(const float* h, size_t batch, size_t d, const uint16_t* hi, const uint16_t* lo, const float* norms,
                    size_t vocab, int32_t* out, int threads, bool allow_bf16);

}  // namespace hsm
