// SHA-256 over a stream of chunks, with the non-finite count and largest
// finite magnitude of the float16 or float32 values it carries counted in the
// same pass (each tile is hashed, then counted while it is still in cache).
// The state is plain data the caller keeps between chunks.
#pragma once
#include <atomic>
#include <cstddef>
#include <cstdint>

namespace hsm {

struct Sha256State {
  uint32_t h[8];
  uint64_t total;      // bytes hashed so far
  uint64_t nonfinite;  // values counted as ±inf or NaN
  uint32_t max_bits;   // largest finite magnitude, as float16 or float32 bits
  uint32_t pending_len;
  uint8_t pending[64];
};

// The whole-file hashing paths at the SIMD level in force: the vector lanes
// ("avx512-lanes", "avx2-lanes") and the SHA extensions ("sha-ni"), joined by
// "+", or "portable".
const char* Sha256Paths();

void Sha256Init(Sha256State* s);

// Hashes data[0, n); counts the values of `width` bytes (2: float16, 4:
// float32; 0: none) in data[stats_from, n), whole values only.
void Sha256Update(Sha256State* s, const uint8_t* data, size_t n, size_t stats_from, int width);

// Sha256Update on two states at once; where the CPU has SHA extensions their
// blocks are interleaved, which hashes about 1.45 times as much per core.
void Sha256Update2(Sha256State* a, const uint8_t* data_a, size_t n_a, size_t from_a, Sha256State* b,
                   const uint8_t* data_b, size_t n_b, size_t from_b, int width);

// Sha256Update on up to kMaxLanes states at once, each with its own values'
// width. Where enough have blocks in common (two without the SHA extensions;
// with them, as many as it takes for the lanes to hash more, timed once per
// process: eleven of sixteen on AMD Zen 5), they are hashed side by side in
// vector lanes, sixteen with AVX-512 or eight with AVX2; otherwise the SHA
// extensions' blocks are interleaved four at a time, as in Sha256Update2.
constexpr int kMaxLanes = 16;
void Sha256UpdateN(Sha256State* const s[], const uint8_t* const data[], const size_t n[], const size_t stats_from[],
                   const int width[], int count);

namespace testing {
// Streams from which the vector lanes are used, in place of the timed choice
// (0: timed; 17: never), so that tests reach every path on any CPU.
inline std::atomic<int> sha_wide_from{0};
}  // namespace testing

// Pads, writes the 32-byte digest to `out`, and leaves `s` finished.
void Sha256Final(Sha256State* s, uint8_t out[32]);

}  // namespace hsm
