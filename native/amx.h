// AMX tiles as the kernels use them: all eight tiles 16 rows of 64 bytes (16 float32
// values, or 16 pairs of bfloat16 values), configured on the calling thread for the
// lifetime of one AmxTiles and released after it.
#pragma once
#if defined(__x86_64__)
#include <immintrin.h>

#include <cstdint>

namespace hsm {

class AmxTiles {
 public:
  __attribute__((target("amx-tile"))) AmxTiles() {
    Config config;
    for (int t = 0; t < 8; t++) {
      config.colsb[t] = 64;
      config.rows[t] = 16;
    }
    _tile_loadconfig(&config);
  }
  __attribute__((target("amx-tile"))) ~AmxTiles() { _tile_release(); }
  AmxTiles(const AmxTiles&) = delete;
  AmxTiles& operator=(const AmxTiles&) = delete;

 private:
  // The palette-1 layout LDTILECFG reads.
  struct alignas(64) Config {
    uint8_t palette = 1;
    uint8_t start_row = 0;
    uint8_t reserved[14] = {};
    uint16_t colsb[16] = {};
    uint8_t rows[16] = {};
  };
};

}  // namespace hsm
#endif
