// The LM head of greedy decoding: for each batch row, the vocabulary entry
// with the largest logit h . w_v, exactly as float64 arithmetic gives it,
// found by screening every entry with bfloat16 dot products under a rigorous
// error bound and computing only the survivors exactly.
#pragma once
#include <cstddef>
#include <cstdint>

namespace hsm {

// From W as an ONNX graph stores an LM head (float32, row-major d x vocab): f32 = W^T
// (vocab x d, each vocabulary row contiguous), bf16 = f32 rounded to bfloat16 bits (to
// nearest, ties to even; NaN stays NaN) and norms[v] = the Euclidean norm of row v of f32
// (its squares summed in float64 in order, the square root rounded to float32).
void PrepareHead(const float* w, size_t d, size_t vocab, float* f32, uint16_t* bf16, float* norms, int threads);

// out[b] = argmax over v of sum_i h[b*d + i] * f32[v*d + i], each product exact and the
// sum taken in float64 in order i = 0 .. d-1; ties go to the lowest v, a NaN logit never
// wins (all NaN: 0). f32, bf16 and norms as PrepareHead writes them. allow_bf16: screen
// with the AVX-512 bfloat16 dot products where the CPU has them; false (or no such CPU):
// float32 arithmetic over the same bfloat16 values. The answer is the same either way,
// and for any thread count. Returns how many float64 dot products it took.
uint64_t HeadArgmax(const float* h, size_t batch, size_t d, const float* f32, const uint16_t* bf16, const float* norms,
                    size_t vocab, int32_t* out, int threads, bool allow_bf16);

}  // namespace hsm
