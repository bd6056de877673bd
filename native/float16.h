// Float32 <-> float16 conversion over whole buffers, bit for bit as NumPy's
// portable algorithm (npy_floatbits_to_halfbits / npy_halfbits_to_floatbits).
#pragma once
#include <cstddef>
#include <cstdint>

namespace hsm {

// True when this CPU has F16C and AVX2 and the fast paths are in use.
bool HasF16c();

// Large buffers are split across up to `threads` threads (at most 8).
void F32ToF16(const float* src, uint16_t* dst, size_t n, int threads);
void F16ToF32(const uint16_t* src, float* dst, size_t n, int threads);

// F16ToF32 on the calling thread, for spans small enough to stay in cache (a row, a tile).
void WidenF16(const uint16_t* src, float* dst, size_t n);

// Non-finite count and the largest finite magnitude, as float16 bits; large buffers split as above.
void F16Stats(const uint16_t* src, size_t n, uint64_t* nonfinite, uint16_t* max_bits, int threads = 1);

}  // namespace hsm
