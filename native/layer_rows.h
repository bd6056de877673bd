// A layer's rows as the passes over them read them: float32 values, or the
// float16 bits a store holds, widened a span at a time into a small buffer the
// caller owns. Widening is exact, so a pass gives the same bits either way; on
// float16 it reads half the memory and needs no float32 copy of the layer.
#pragma once
#include <cstddef>
#include <cstdint>
#include <vector>

#include "float16.h"

namespace hsm {

struct LayerRows {
  // One of the two is set: rows of d values each, row-major.
  const float* f32 = nullptr;
  const uint16_t* f16 = nullptr;
  size_t d = 0;

  static LayerRows Float32(const float* h, size_t d) { return {h, nullptr, d}; }
  static LayerRows Float16(const uint16_t* h, size_t d) { return {nullptr, h, d}; }

  // A buffer for spans of up to `width` values: empty where the rows are float32 already.
  std::vector<float> Scratch(size_t width) const { return std::vector<float>(f16 ? width : 0); }

  // Columns [begin, end) of row i as float32: where they lie, or widened into `scratch`.
  const float* Span(size_t i, size_t begin, size_t end, float* scratch) const {
    if (f32) return f32 + i * d + begin;
    WidenF16(f16 + i * d + begin, scratch, end - begin);
    return scratch;
  }
};

}  // namespace hsm
