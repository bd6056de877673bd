#include "rank.h"

#include <algorithm>
#include <cstring>
#include <memory>
#include <thread>
#include <vector>

#if defined(__x86_64__)
#include <immintrin.h>
#define HSM_X86 1
#endif

namespace hsm {
namespace {

constexpr size_t kPanel = 16;     // anchors per packed panel (one 512-bit vector)
constexpr size_t kBlockPanels = 8;  // panels per anchor block: 128 anchors, 512 KB at d = 1024
constexpr size_t kRows = 8;       // rows per micro-tile

// Anchors packed panel by panel: panel p holds anchors [16p, 16p+16) transposed,
// so that for each k the 16 values a[16p + j][k] are contiguous. Missing anchors
// past the end are zero and never counted.
std::unique_ptr<float[]> Pack(const float* a, size_t n_anchors, size_t d, size_t* n_panels) {
  *n_panels = (n_anchors + kPanel - 1) / kPanel;
  std::unique_ptr<float[]> packed(new float[*n_panels * kPanel * d]());
  for (size_t g = 0; g < n_anchors; g++) {
    float* panel = packed.get() + (g / kPanel) * kPanel * d;
    for (size_t k = 0; k < d; k++) panel[k * kPanel + g % kPanel] = a[g * d + k];
  }
  return packed;
}

// Counts, for rows [r0, r0 + nr) and panel `panel`, anchors scoring above each row's own.
inline void CountTile(const float* scores /* nr x 16 */, size_t nr, size_t r0, size_t panel, size_t n_anchors,
                      const int32_t* own, const float* own_score, int32_t* above) {
  for (size_t i = 0; i < nr; i++) {
    const size_t r = r0 + i;
    if (own[r] < 0) continue;  // a row without an own anchor has no rank
    int32_t c = 0;
    for (size_t j = 0; j < kPanel; j++) {
      const size_t g = panel * kPanel + j;
      if (g < n_anchors && static_cast<int32_t>(g) != own[r] && scores[i * kPanel + j] > own_score[r]) c++;
    }
    above[r] += c;
  }
}

void TilePortable(const float* x, size_t d, size_t r0, size_t nr, const float* panel, float* scores) {
  for (size_t i = 0; i < nr; i++) {
    float acc[kPanel] = {0};
    const float* xi = x + (r0 + i) * d;
    for (size_t k = 0; k < d; k++) {
      const float v = xi[k];
      for (size_t j = 0; j < kPanel; j++) acc[j] += v * panel[k * kPanel + j];
    }
    std::memcpy(scores + i * kPanel, acc, sizeof(acc));
  }
}

#ifdef HSM_X86
__attribute__((target("avx512f"))) void TileAvx512(const float* x, size_t d, size_t r0, size_t nr, const float* panel, float* scores) {
  if (nr != kRows) return TilePortable(x, d, r0, nr, panel, scores);
  __m512 c0 = _mm512_setzero_ps(), c1 = _mm512_setzero_ps(), c2 = _mm512_setzero_ps(), c3 = _mm512_setzero_ps();
  __m512 c4 = _mm512_setzero_ps(), c5 = _mm512_setzero_ps(), c6 = _mm512_setzero_ps(), c7 = _mm512_setzero_ps();
  const float* x0 = x + r0 * d;
  for (size_t k = 0; k < d; k++) {
    const __m512 p = _mm512_loadu_ps(panel + k * kPanel);
    c0 = _mm512_fmadd_ps(_mm512_set1_ps(x0[k]), p, c0);
    c1 = _mm512_fmadd_ps(_mm512_set1_ps(x0[d + k]), p, c1);
    c2 = _mm512_fmadd_ps(_mm512_set1_ps(x0[2 * d + k]), p, c2);
    c3 = _mm512_fmadd_ps(_mm512_set1_ps(x0[3 * d + k]), p, c3);
    c4 = _mm512_fmadd_ps(_mm512_set1_ps(x0[4 * d + k]), p, c4);
    c5 = _mm512_fmadd_ps(_mm512_set1_ps(x0[5 * d + k]), p, c5);
    c6 = _mm512_fmadd_ps(_mm512_set1_ps(x0[6 * d + k]), p, c6);
    c7 = _mm512_fmadd_ps(_mm512_set1_ps(x0[7 * d + k]), p, c7);
  }
  _mm512_storeu_ps(scores + 0 * kPanel, c0);
  _mm512_storeu_ps(scores + 1 * kPanel, c1);
  _mm512_storeu_ps(scores + 2 * kPanel, c2);
  _mm512_storeu_ps(scores + 3 * kPanel, c3);
  _mm512_storeu_ps(scores + 4 * kPanel, c4);
  _mm512_storeu_ps(scores + 5 * kPanel, c5);
  _mm512_storeu_ps(scores + 6 * kPanel, c6);
  _mm512_storeu_ps(scores + 7 * kPanel, c7);
}

bool HasAvx512() {
  __builtin_cpu_init();
  return __builtin_cpu_supports("avx512f");
}
#endif

}  // namespace

void RankAgainstAnchors(const float* x, size_t n_rows, const float* a, size_t n_anchors, size_t d,
                        const int32_t* own, float* own_score, int32_t* above, int threads) {
  // Own scores first, in the same float32 arithmetic the tiles use for everything else.
  for (size_t r = 0; r < n_rows; r++) {
    above[r] = 0;
    if (own[r] < 0) {
      own_score[r] = 0;
      continue;
    }
    const float* xr = x + r * d;
    const float* ar = a + static_cast<size_t>(own[r]) * d;
    float s = 0;
    for (size_t k = 0; k < d; k++) s += xr[k] * ar[k];
    own_score[r] = s;
  }
  size_t n_panels = 0;
  const std::unique_ptr<float[]> packed = Pack(a, n_anchors, d, &n_panels);
#ifdef HSM_X86
  static const bool avx512 = HasAvx512();
  const auto tile = avx512 ? TileAvx512 : TilePortable;
#else
  const auto tile = TilePortable;
#endif
  const size_t nt = std::max<size_t>(1, std::min<size_t>(threads, (n_rows + kRows - 1) / kRows));
  auto work = [&](size_t t) {
    // Each thread takes whole micro-tiles of rows: no two threads touch one row.
    const size_t tiles = (n_rows + kRows - 1) / kRows;
    const size_t first = tiles * t / nt, last = tiles * (t + 1) / nt;
    float scores[kRows * kPanel];
    for (size_t b0 = 0; b0 < n_panels; b0 += kBlockPanels) {
      const size_t b1 = std::min(n_panels, b0 + kBlockPanels);
      for (size_t tr = first; tr < last; tr++) {
        const size_t r0 = tr * kRows;
        const size_t nr = std::min(kRows, n_rows - r0);
        for (size_t p = b0; p < b1; p++) {
          tile(x, d, r0, nr, packed.get() + p * kPanel * d, scores);
          CountTile(scores, nr, r0, p, n_anchors, own, own_score, above);
        }
      }
    }
  };
  std::vector<std::thread> pool;
  for (size_t t = 1; t < nt; t++) pool.emplace_back(work, t);
  work(0);
  for (auto& th : pool) th.join();
}

}  // namespace hsm
