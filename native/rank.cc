#include "rank.h"

#include "amx.h"
#include "cpu.h"
#include "large_buffers.h"
#include "row_groups.h"
#include "threads.h"
#include "transpose.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <mutex>
#include <vector>

#if defined(__x86_64__)
#include <immintrin.h>
#define HSM_X86 1
#endif

namespace hsm {
namespace {

constexpr size_t kPanel = 16;       // anchors per packed panel (one 512-bit vector)
constexpr size_t kBlockPanels = 8;  // panels per anchor block: 128 anchors, 512 KB at d = 1024
constexpr size_t kRows = 8;         // rows per micro-tile
constexpr size_t kTilePanels = 3;   // panels per micro-tile (FloatTile): 24 accumulators of 32 registers

// The anchors in the order the bfloat16 screens take them (AnchorSlots): slot s holds anchor slot[s].
struct SlotRows {
  const float* a;
  const uint32_t* slot;
  size_t d;
  const float* operator[](size_t s) const { return a + static_cast<size_t>(slot[s]) * d; }
};

// Panels for n_anchors anchors of d values.
inline size_t PanelCount(size_t n_anchors) { return (n_anchors + kPanel - 1) / kPanel; }

// Anchors packed panel by panel into `packed` (PanelCount panels of kPanel x d, zero-filled by the caller):
// panel p holds anchors [16p, 16p+16) transposed, so that for each k the 16 values a[16p + j][k] are
// contiguous. Missing anchors past the end stay zero and are never counted. row(g) is anchor g's d values;
// each thread's share of panels is written by it.
template <class Row>
void Pack(const Row& row, size_t n_anchors, size_t d, float* packed, int threads) {
  Shares(PanelCount(n_anchors), threads, [&](size_t p0, size_t p1) {
    for (size_t g = p0 * kPanel; g < std::min(n_anchors, p1 * kPanel); g++) {
      float* panel = packed + (g / kPanel) * kPanel * d;
      const float* a = row(g);
      for (size_t k = 0; k < d; k++) panel[k * kPanel + g % kPanel] = a[k];
    }
  });
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

// A one-panel tile (TilePortable, TileAvx2) over np consecutive panels, one after the other, with the scores laid out
// as TileAvx512 lays them: scores + (q * kRows + i) * kPanel is row i against panel q.
template <void (*Tile)(const float*, size_t, size_t, size_t, const float*, float*)>
void PanelByPanel(const float* x, size_t d, size_t r0, size_t nr, const float* panels, size_t np, float* scores) {
  for (size_t q = 0; q < np; q++) Tile(x, d, r0, nr, panels + q * kPanel * d, scores + q * kRows * kPanel);
}

#ifdef HSM_X86
// kRows rows (xr) against NP panels (panel), as the float32 tiles compute: in every lane one fused multiply-add
// per coordinate, in order, from zero. out[q * kRows + i] is row i against panel q. Each panel load feeds kRows
// rows and each broadcast NP panels, so that the loads keep up with the multiply-adds.
template <size_t NP>
__attribute__((target("avx512f"), always_inline)) inline void FloatBlock(const float* const* xr,
                                                                         const float* const* panel, size_t d,
                                                                         __m512* out) {
  // c[q * kRows + i]: row i against panel q, as out holds it.
  __m512 c[NP * kRows];
  for (__m512& v : c) v = _mm512_setzero_ps();
  for (size_t k = 0; k < d; k++) {
    __m512 p[NP];
#pragma GCC unroll 4
    for (size_t q = 0; q < NP; q++) p[q] = _mm512_loadu_ps(panel[q] + k * kPanel);
#pragma GCC unroll 8
    for (size_t i = 0; i < kRows; i++) {
      const __m512 b = _mm512_set1_ps(xr[i][k]);
#pragma GCC unroll 4
      for (size_t q = 0; q < NP; q++) c[q * kRows + i] = _mm512_fmadd_ps(b, p[q], c[q * kRows + i]);
    }
  }
  std::copy(c, c + NP * kRows, out);
}

// kRows rows against np <= kTilePanels panels; out as in FloatBlock. Kept out of line, as ScreenTile is.
__attribute__((target("avx512f"), noinline)) void FloatTile(const float* const* xr, const float* const* panel,
                                                            size_t np, size_t d, __m512* out) {
  if (np == 3) return FloatBlock<3>(xr, panel, d, out);
  if (np == 2) return FloatBlock<2>(xr, panel, d, out);
  FloatBlock<1>(xr, panel, d, out);
}
static_assert(kTilePanels == 3, "FloatTile dispatches on up to three panels");

// Rows [r0, r0 + nr) of x against np consecutive panels; a short tile repeats its first row, whose copies are
// dropped.
__attribute__((target("avx512f"))) void TileAvx512(const float* x, size_t d, size_t r0, size_t nr, const float* panels,
                                                   size_t np, float* scores) {
  const float* xr[kRows];
  for (size_t i = 0; i < kRows; i++) xr[i] = x + (r0 + (i < nr ? i : 0)) * d;
  const float* panel[kTilePanels] = {};
  for (size_t q = 0; q < np; q++) panel[q] = panels + q * kPanel * d;
  __m512 out[kTilePanels * kRows];
  FloatTile(xr, panel, np, d, out);
  for (size_t q = 0; q < np; q++) {
    for (size_t i = 0; i < nr; i++) _mm512_storeu_ps(scores + (q * kRows + i) * kPanel, out[q * kRows + i]);
  }
}

// The portable tile's arithmetic eight lanes at a time: per lane a product rounded to float32, then a
// sum rounded to float32 (no fused multiply-add), over k in order from zero, so its scores are
// TilePortable's bit for bit. Four rows per pass keep the eight accumulators, the panel's two
// halves and a broadcast in the sixteen vector registers.
__attribute__((target("avx2"))) void TileAvx2(const float* x, size_t d, size_t r0, size_t nr, const float* panel,
                                              float* scores) {
  size_t i = 0;
  for (; i + 4 <= nr; i += 4) {
    const float* x0 = x + (r0 + i) * d;
    __m256 c00 = _mm256_setzero_ps(), c01 = _mm256_setzero_ps(), c10 = _mm256_setzero_ps();
    __m256 c11 = _mm256_setzero_ps(), c20 = _mm256_setzero_ps(), c21 = _mm256_setzero_ps();
    __m256 c30 = _mm256_setzero_ps(), c31 = _mm256_setzero_ps();
    for (size_t k = 0; k < d; k++) {
      const __m256 p0 = _mm256_loadu_ps(panel + k * kPanel), p1 = _mm256_loadu_ps(panel + k * kPanel + 8);
      __m256 v = _mm256_broadcast_ss(x0 + k);
      c00 = _mm256_add_ps(c00, _mm256_mul_ps(v, p0));
      c01 = _mm256_add_ps(c01, _mm256_mul_ps(v, p1));
      v = _mm256_broadcast_ss(x0 + d + k);
      c10 = _mm256_add_ps(c10, _mm256_mul_ps(v, p0));
      c11 = _mm256_add_ps(c11, _mm256_mul_ps(v, p1));
      v = _mm256_broadcast_ss(x0 + 2 * d + k);
      c20 = _mm256_add_ps(c20, _mm256_mul_ps(v, p0));
      c21 = _mm256_add_ps(c21, _mm256_mul_ps(v, p1));
      v = _mm256_broadcast_ss(x0 + 3 * d + k);
      c30 = _mm256_add_ps(c30, _mm256_mul_ps(v, p0));
      c31 = _mm256_add_ps(c31, _mm256_mul_ps(v, p1));
    }
    float* s = scores + i * kPanel;
    _mm256_storeu_ps(s, c00);
    _mm256_storeu_ps(s + 8, c01);
    _mm256_storeu_ps(s + kPanel, c10);
    _mm256_storeu_ps(s + kPanel + 8, c11);
    _mm256_storeu_ps(s + 2 * kPanel, c20);
    _mm256_storeu_ps(s + 2 * kPanel + 8, c21);
    _mm256_storeu_ps(s + 3 * kPanel, c30);
    _mm256_storeu_ps(s + 3 * kPanel + 8, c31);
  }
  for (; i < nr; i++) {
    const float* xi = x + (r0 + i) * d;
    __m256 c0 = _mm256_setzero_ps(), c1 = _mm256_setzero_ps();
    for (size_t k = 0; k < d; k++) {
      const __m256 v = _mm256_broadcast_ss(xi + k);
      c0 = _mm256_add_ps(c0, _mm256_mul_ps(v, _mm256_loadu_ps(panel + k * kPanel)));
      c1 = _mm256_add_ps(c1, _mm256_mul_ps(v, _mm256_loadu_ps(panel + k * kPanel + 8)));
    }
    _mm256_storeu_ps(scores + i * kPanel, c0);
    _mm256_storeu_ps(scores + i * kPanel + 8, c1);
  }
}

// v[0, d) as bfloat16 pairs, rounded to nearest even by the conversion instruction:
// out[k * stride] = bf16(v[2k]) | bf16(v[2k + 1]) << 16 for k < (d + 1) / 2, zero past d.
__attribute__((target("avx512f,avx512bf16"))) void PairsBf16(const float* v, size_t d, uint32_t* out, size_t stride) {
  for (size_t k0 = 0; k0 < d; k0 += 32) {
    const size_t n = std::min<size_t>(32, d - k0);
    const __mmask16 lo = n >= 16 ? 0xffff : static_cast<__mmask16>((1u << n) - 1);
    const __mmask16 hi = n >= 32 ? 0xffff : n > 16 ? static_cast<__mmask16>((1u << (n - 16)) - 1) : 0;
    // The second operand fills the low 16 halves: v[k0 + 2j] lands in the low half of pair j.
    const __m512i pairs =
        (__m512i)_mm512_cvtne2ps_pbh(_mm512_maskz_loadu_ps(hi, v + k0 + 16), _mm512_maskz_loadu_ps(lo, v + k0));
    const size_t np = (n + 1) / 2;
    if (stride == 1 && np == 16) {
      _mm512_storeu_si512(out + k0 / 2, pairs);
      continue;
    }
    alignas(64) uint32_t t[16];
    _mm512_store_si512(t, pairs);
    for (size_t j = 0; j < np; j++) out[(k0 / 2 + j) * stride] = t[j];
  }
}

// Screening with bfloat16 products, exact where it matters. A row x and an
// anchor a are read by the screen as xh and ah, their values rounded to
// bfloat16 (to nearest; values below 2^-126 read as 0), and the rest xl = x - xh,
// al = a - ah is left out. The screen's products xh_i ah_i are exact in float32,
// and x.a - xh.ah = xl.a + xh.al, which by Cauchy-Schwarz is at most
// |xl| |a| + |xh| |al| in size. Summing d terms in float32 (the screen's
// accumulation, or the float32 path's d fused multiply-adds) moves a sum by at
// most g_d times the sum of the terms' sizes, g_d = d u / (1 - d u), u = 2^-24,
// and that sum is at most |xh| |ah| for the screen and |x| |a| for the float32
// path. So the screened score of the pair is within
//   B = (|xl| + g_d |x|) |a| + |xh| (|al| + g_d |ah|)
// of the float32 score, norms taken per row and per anchor (in float64, then
// rounded up). For unit vectors B is about 0.003 at d = 1024: the bfloat16
// rounding errors of d coordinates do not all lean one way unless the vectors
// make them. An anchor scoring more than B + δ above a row's own score is
// counted from the screen, one more than B + δ below is not; an anchor between
// is recomputed in float32 with the float32 path's arithmetic (NearPairs), so
// every count equals that path's. δ = 2^-20 (1 + |x| max |a|) covers the float32
// rounding of the bound and of the comparisons, and products flushed below 2^-126.

// The screen's bound for one row, ready for the epilogue: B + δ = r1 |a| + r2 c_a + delta, with c_a =
// |al| + g_d |ah| kept per anchor (ScreenBound).
struct RowBound {
  float r1;     // |xl| + g_d |x|
  float r2;     // |xh|
  float delta;  // δ
  float norm;   // |x|
};

// v's norms as the bound needs them, in float64: of v, of vh (v's bfloat16 values as the screen reads them,
// from `pairs` as PairsBf16 wrote them with `stride`) and of vl = v - vh (each difference exact in float32).
struct Bf16Norms {
  double v, h, l;
};
// Values [8 half, 8 half + 8) of v in float64. (The masked conversions do what plain ones do, without GCC 12's
// false warning: see Dot4.)
__attribute__((target("avx512f,avx512dq"), always_inline)) inline __m512d WideHalf(__m512 v, int half) {
  return _mm512_maskz_cvtps_pd(
      0xff, half ? _mm512_maskz_extractf32x8_ps(0xff, v, 1) : _mm512_maskz_extractf32x8_ps(0xff, v, 0));
}
// NormsOf for a row's pairs (stride 1), sixteen values at a time: the same sums in float64, in another order.
__attribute__((target("avx512f,avx512bw,avx512vl,avx512dq"))) Bf16Norms RowNorms(const float* v, size_t d,
                                                                                 const uint32_t* pairs) {
  const uint16_t* halves = reinterpret_cast<const uint16_t*>(pairs);
  __m512d sv = _mm512_setzero_pd(), sh = _mm512_setzero_pd(), sl = _mm512_setzero_pd();
  for (size_t k = 0; k < d; k += 16) {
    const __mmask16 m = d - k >= 16 ? 0xffff : static_cast<__mmask16>((1u << (d - k)) - 1);
    const __m512 x = _mm512_maskz_loadu_ps(m, v + k);
    // Half k of the pairs is value k's bfloat16 bits: the high half of its float32.
    const __m512 h = _mm512_castsi512_ps(_mm512_maskz_slli_epi32(
        0xffff, _mm512_maskz_cvtepu16_epi32(0xffff, _mm256_maskz_loadu_epi16(m, halves + k)), 16));
    const __m512 l = _mm512_sub_ps(x, h);  // exact
    for (int half = 0; half < 2; half++) {
      const __m512d xd = WideHalf(x, half), hd = WideHalf(h, half), ld = WideHalf(l, half);
      sv = _mm512_fmadd_pd(xd, xd, sv);
      sh = _mm512_fmadd_pd(hd, hd, sh);
      sl = _mm512_fmadd_pd(ld, ld, sl);
    }
  }
  alignas(64) double t[3][8];
  _mm512_store_pd(t[0], sv);
  _mm512_store_pd(t[1], sh);
  _mm512_store_pd(t[2], sl);
  double sum[3] = {};
  for (size_t i = 0; i < 3; i++) {
    for (size_t j = 0; j < 8; j++) sum[i] += t[i][j];
  }
  return {std::sqrt(sum[0]), std::sqrt(sum[1]), std::sqrt(sum[2])};
}

// Value k of a vector as its bfloat16 pairs hold it (PairsBf16's layout, read with `stride`), in float32.
inline float PairValue(const uint32_t* pairs, size_t k, size_t stride) {
  const uint32_t pair = pairs[(k / 2) * stride];
  const uint32_t bits = (k % 2 == 0 ? pair & 0xffffu : pair >> 16) << 16;
  float h;
  std::memcpy(&h, &bits, sizeof(h));
  return h;
}

// v's norms (Bf16Norms), its pairs read with `stride`.
Bf16Norms NormsOf(const float* v, size_t d, const uint32_t* pairs, size_t stride) {
  if (stride == 1) return RowNorms(v, d, pairs);
  double sv = 0, sh = 0, sl = 0;
  for (size_t k = 0; k < d; k++) {
    const float h = PairValue(pairs, k, stride);
    const double l = static_cast<double>(v[k] - h);
    sv += static_cast<double>(v[k]) * v[k];
    sh += static_cast<double>(h) * h;
    sl += l * l;
  }
  return {std::sqrt(sv), std::sqrt(sh), std::sqrt(sl)};
}

// A nonnegative float64 as the nearest float32 not below it.
float Up(double v) {
  const float f = static_cast<float>(v);
  return static_cast<double>(f) < v ? std::nextafter(f, INFINITY) : f;
}

// The anchors' side of the bound, lane for lane as the panels hold them (zero past the last anchor).
class ScreenBound {
 public:
  // pairs: anchor g's bfloat16 pairs start at pairs + (g / 16) * 16 * dp + g % 16, stride 16.
  ScreenBound(const SlotRows& a, size_t n_anchors, size_t d, const uint32_t* pairs, size_t dp, size_t n_panels,
              int threads)
      : d_(d), na_(n_panels * kPanel), ca_(n_panels * kPanel) {
    const double n = static_cast<double>(d + 2) * 0x1p-24;  // the sums' roundings, with room for padding
    gamma_ = n / (1 - n);
    Shares(n_anchors, threads, [&](size_t g0, size_t g1) {
      for (size_t g = g0; g < g1; g++) {
        const Bf16Norms m = NormsOf(a[g], d, pairs + (g / kPanel) * kPanel * dp + g % kPanel, kPanel);
        na_[g] = Up(m.v);
        ca_[g] = Up(m.l + gamma_ * m.h);
      }
    });
    for (size_t g = 0; g < n_anchors; g++) na_max_ = std::max(na_max_, na_[g]);
  }

  // Row x (pairs: its bfloat16 pairs, stride 1).
  RowBound Row(const float* x, const uint32_t* pairs) const {
    const Bf16Norms m = NormsOf(x, d_, pairs, 1);
    return {Up(m.l + gamma_ * m.v), Up(m.h), Up(0x1p-20 * (1 + m.v * na_max_)), Up(m.v)};
  }
  const float* na(size_t panel) const { return na_.data() + panel * kPanel; }
  // |a| of anchor g, rounded up, and the largest.
  float norm(size_t g) const { return na_[g]; }
  float norm_max() const { return na_max_; }
  // The bound's g_d: how far d float32 roundings in a row can move a sum, relative to the sum of its terms' sizes.
  double gamma() const { return gamma_; }
  const float* ca(size_t panel) const { return ca_.data() + panel * kPanel; }

 private:
  size_t d_;
  double gamma_ = 0;
  float na_max_ = 0;
  std::vector<float> na_, ca_;
};

// GCC 12's AVX-512 headers pass an undefined register as the unused merge source of unmasked intrinsics, which
// -Wuninitialized and -Wmaybe-uninitialized report once they are inlined (here, _mm512_reduce_add_ps's); every lane
// is written.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
// x.a[0], ..., x.a[3] in float32, another order than the float32 path's: lane j of accumulator q sums
// the coordinates k = 16 q + j (mod 64) (a last partial step adds to accumulator 0), then the four
// accumulators and the sixteen lanes are added pairwise. Each term meets at most d / 64 + 10 roundings.
// The row's coordinates, loaded once, serve the four anchors.
__attribute__((target("avx512f"))) void Dot4(const float* x, const float* const a[4], size_t d, float* out) {
  __m512 c[4][4];
  for (int j = 0; j < 4; j++) {
    for (int q = 0; q < 4; q++) c[j][q] = _mm512_setzero_ps();
  }
  size_t k = 0;
  for (; k + 64 <= d; k += 64) {
#pragma GCC unroll 4
    for (int q = 0; q < 4; q++) {
      const __m512 v = _mm512_loadu_ps(x + k + 16 * q);
#pragma GCC unroll 4
      for (int j = 0; j < 4; j++) c[j][q] = _mm512_fmadd_ps(v, _mm512_loadu_ps(a[j] + k + 16 * q), c[j][q]);
    }
  }
  for (; k < d; k += 16) {
    const __mmask16 m = d - k >= 16 ? 0xffff : static_cast<__mmask16>((1u << (d - k)) - 1);
    const __m512 v = _mm512_maskz_loadu_ps(m, x + k);
    for (int j = 0; j < 4; j++) c[j][0] = _mm512_fmadd_ps(v, _mm512_maskz_loadu_ps(m, a[j] + k), c[j][0]);
  }
  for (int j = 0; j < 4; j++)
    out[j] = _mm512_reduce_add_ps(_mm512_add_ps(_mm512_add_ps(c[j][0], c[j][1]), _mm512_add_ps(c[j][2], c[j][3])));
}
#pragma GCC diagnostic pop

// The anchors as float32 panels (Pack's layout), packed the first time a thread asks for them: only
// anchors that crowd a row's own score need them (NearPairs::Exact).
class FloatPanels {
 public:
  FloatPanels(const SlotRows& a, size_t n_anchors, size_t d) : a_(a), n_anchors_(n_anchors), d_(d) {}
  const float* Get() {
    std::call_once(once_, [this]() {
      // Zero-filled (LargeArray), so zero past the last anchor.
      packed_ = std::make_unique<LargeArray<float>>(PanelCount(n_anchors_) * kPanel * d_);
      Pack([this](size_t g) { return a_[g]; }, n_anchors_, d_, packed_->get(), 1);
    });
    return packed_->get();
  }

 private:
  SlotRows a_;
  size_t n_anchors_, d_;
  std::once_flag once_;
  std::unique_ptr<LargeArray<float>> packed_;
};

// How the reordered dot product (Dot4) has fared on a thread's rows, so that NearPairs uses it where it pays.
// It settles a pair for about half the cost of the float32 path's lanes; where near-copies of one anchor crowd
// the own score it settles almost none and only adds its cost. The tallies halve at each use, so they follow
// the rows of late. Either way every count is the float32 path's: only the time differs.
struct Dot4Odds {
  // One row in this many tries Dot4 on its first kProbePairs anchors while it settles too little.
  static constexpr size_t kProbeRows = 64;
  static constexpr size_t kProbePairs = 16;
  size_t rows = 0, tried = 0, settled = 0;

  // How many of a row's n anchors, from its first, go through Dot4: all while it has settled at least half of
  // what it tried, else a probe's share of one row in kProbeRows.
  size_t Take(size_t n) {
    if (2 * settled >= tried) return n;
    return ++rows % kProbeRows == 0 ? std::min(n, kProbePairs) : 0;
  }
  void Tally(size_t n, size_t n_settled) {
    tried = tried / 2 + n;
    settled = settled / 2 + n_settled;
  }
};

// The (row, anchor) pairs a screen could not call, settled when an anchor block ends, while its
// anchors are in cache. Most are settled by a float32 dot product in another order (Dot4, a row
// against four of its anchors): it and the float32 path's sum are each within g_m or g_d times the
// sum of the terms' sizes of the exact x.a (g_m for Dot4's at most m = d / 64 + 10 roundings a term),
// so an anchor scoring more than (g_d + g_m) |x| |a| + δ above or below the own score there is above
// or below it in the float32 path too. The few left (anchors within about 1e-4 of the own score) are
// recomputed with the float32 tiles' arithmetic, one fused multiply-add per k, in order, from zero:
// kLanes pairs at a time, one a vector lane. Where Dot4 settles too few (near-copies of one anchor crowd
// the own score: Dot4Odds), a row's anchors go straight to that arithmetic: a panel holding several of them
// whole (Exact, PanelRows), the others in lanes.
class NearPairs {
 public:
  // Rows [r_begin, r_end) may come (row r is x's row x_rows[r], its bound rb[r - r_begin]). A block holds at most
  // block_anchors anchors.
  NearPairs(const float* x, const int32_t* x_rows, const SlotRows& a, size_t d, const float* own_score, int32_t* above,
            size_t r_begin, size_t r_end, size_t block_anchors, const ScreenBound& bound, const RowBound* rb,
            FloatPanels& panels, Dot4Odds& odds)
      : x_(x),
        x_rows_(x_rows),
        a_(a),
        d_(d),
        own_score_(own_score),
        above_(above),
        r_begin_(r_begin),
        near_lanes_((r_end - r_begin) * kMaxBlockPanels),
        bound_(bound),
        rb_(rb),
        panels_(panels),
        odds_(odds),
        block_panels_(block_anchors / kPanel) {
    const double m = static_cast<double>(d / 64 + 10) * 0x1p-24;
    settle_ = Up(bound.gamma() + m / (1 - m));
  }

  // Panel p's anchors in the lanes of `lanes`, for row r.
  void Add(size_t r, size_t p, __mmask16 lanes) {
    near_lanes_[(r - r_begin_) * kMaxBlockPanels + p % block_panels_] |= lanes;
  }

  // The anchor block whose first panel is `first` is done: every pair found near in it.
  void EndBlock(size_t first) {
    block_first_ = first;
    for (size_t i = 0; i < near_lanes_.size() / kMaxBlockPanels; i++) {
      uint16_t* lanes = near_lanes_.data() + i * kMaxBlockPanels;
      Settle(r_begin_ + i, lanes);
      std::fill(lanes, lanes + kMaxBlockPanels, 0);
    }
    Pairs();
    PanelRows();
  }

 private:
  // Pairs a batch, one a lane of a vector; also the coordinates a step transposes (a square 16 x 16).
  static constexpr size_t kLanes = 16;
  // A panel with at least this many of a row's pairs is computed whole (Exact).
  static constexpr size_t kPanelPairs = 2;
  // A panel with at least this many of a row's pairs goes to the float32 tiles whole, never to Dot4: a tile
  // computes a panel's sixteen lanes for about what Dot4 takes for eight pairs, and where near-copies of a row's
  // anchor crowd its own score, the pairs Dot4 cannot settle would still go to the lanes (Pair), far slower.
  static constexpr size_t kDensePanel = 8;
  // A row's panels of the block to be computed whole (bit q: the block's panel q) and, for each, the lanes
  // whose anchors it counts.
  static constexpr size_t kMaxBlockPanels = 16;
  struct WholePanels {
    uint32_t r;
    uint32_t panels;
    __mmask16 lanes[kMaxBlockPanels];
  };

  const float* Row(size_t r) const { return x_ + static_cast<size_t>(x_rows_[r]) * d_; }

  // Counts row r's near anchors in the block (lanes[q]: those of the block's panel q): of those in panels with
  // fewer than kDensePanel, the ones Dot4Odds gives Dot4 and Dot4 can call (cleared from `lanes`); the others go
  // to the float32 path (Exact, Pair). A last short group of four repeats its first anchor, whose copies are not
  // used.
  __attribute__((target("avx512f"))) void Settle(size_t r, uint16_t* lanes) {
    uint32_t* g = sparse_;
    size_t n = 0;
    bool dense = false;
    for (size_t q = 0; q < block_panels_; q++) {
      const uint32_t m = lanes[q];
      if (static_cast<size_t>(__builtin_popcount(m)) >= kDensePanel) {
        dense = true;
        continue;
      }
      for (uint32_t left = m; left != 0; left &= left - 1)
        g[n++] = static_cast<uint32_t>((block_first_ + q) * kPanel + __builtin_ctz(left));
    }
    if (n == 0 && !dense) return;
    const size_t dotted = odds_.Take(n);
    for (size_t j = 0; j < dotted; j++) lanes[(g[j] / kPanel) % block_panels_] &= ~(1u << (g[j] % kPanel));
    if (dense || dotted < n) Exact(r, lanes);
    if (dotted == 0) return;
    n = dotted;
    size_t settled = 0;
    const float* xr = Row(r);
    const RowBound& b = rb_[r - r_begin_];
    const __m128 o = _mm_set1_ps(own_score_[r]);
    const __m128 margin = _mm_set1_ps(settle_ * b.norm);
    const __m128 delta = _mm_set1_ps(b.delta);
    int32_t above = 0;
    for (size_t j = 0; j < n; j += 4) {
      const size_t left = std::min<size_t>(4, n - j);
      uint32_t g4[4];
      const float* a[4];
      for (size_t t = 0; t < 4; t++) {
        g4[t] = g[j + (t < left ? t : 0)];
        a[t] = a_[g4[t]];
      }
      alignas(16) float s[4];
      Dot4(xr, a, d_, s);
      const __m128 norms = _mm_setr_ps(bound_.norm(g4[0]), bound_.norm(g4[1]), bound_.norm(g4[2]), bound_.norm(g4[3]));
      const __m128 e = _mm_add_ps(_mm_mul_ps(margin, norms), delta);
      const __m128 gap = _mm_sub_ps(_mm_load_ps(s), o);
      const uint32_t valid = (1u << left) - 1;
      const uint32_t high = static_cast<uint32_t>(_mm_movemask_ps(_mm_cmpgt_ps(gap, e))) & valid;
      // Too close for this sum: the float32 path's decides.
      const uint32_t close =
          static_cast<uint32_t>(_mm_movemask_ps(_mm_cmpge_ps(gap, _mm_sub_ps(_mm_setzero_ps(), e)))) & valid & ~high;
      above += __builtin_popcount(high);
      settled += __builtin_popcount(valid & ~close);
      for (uint32_t m = close; m != 0; m &= m - 1) Pair(r, g4[__builtin_ctz(m)]);
    }
    odds_.Tally(n, settled);
    above_[r] += above;
  }

  // Row r's anchors in the block without Dot4, by lane of the block's panels (lanes[q]: panel q): the panels holding
  // kPanelPairs or more of them are left for the block's end (PanelRows), where they are computed whole; the others
  // go to the lanes (Pair).
  void Exact(size_t r, const uint16_t* lanes) {
    WholePanels w{static_cast<uint32_t>(r), 0, {}};
    for (size_t q = 0; q < block_panels_; q++) {
      const uint32_t m = lanes[q];
      if (static_cast<size_t>(__builtin_popcount(m)) >= kPanelPairs) {
        w.panels |= 1u << q;
        w.lanes[q] = static_cast<__mmask16>(m);
        continue;
      }
      for (uint32_t left = m; left != 0; left &= left - 1) Pair(r, (block_first_ + q) * kPanel + __builtin_ctz(left));
    }
    if (w.panels != 0) whole_.push_back(w);
  }

  // The rows with whole panels left (Exact), kRows at a time against every panel any of them needs, up to
  // kTilePanels at once, as the float32 tiles compute them (FloatTile): per row and anchor one fused multiply-add
  // per k, in order, from zero. Rows needing the same panels are taken together (sorted by their panel sets), and a
  // tile's rows stay in cache while its panels pass; each row counts the anchors of its lanes that score above its
  // own.
  __attribute__((target("avx512f"))) void PanelRows() {
    if (whole_.empty()) return;
    const float* panels = panels_.Get() + block_first_ * kPanel * d_;
    std::sort(whole_.begin(), whole_.end(),
              [](const WholePanels& u, const WholePanels& v) { return u.panels < v.panels; });
    for (size_t i0 = 0; i0 < whole_.size(); i0 += kRows) {
      const size_t nr = std::min(kRows, whole_.size() - i0);
      const WholePanels* rows = whole_.data() + i0;
      // A short tile repeats its first row, whose copies are not counted.
      const float* xr[kRows];
      uint32_t needed = 0;
      for (size_t i = 0; i < kRows; i++) {
        xr[i] = Row(rows[i < nr ? i : 0].r);
        if (i < nr) needed |= rows[i].panels;
      }
      for (uint32_t left = needed; left != 0;) {
        // Up to kTilePanels of the needed panels at a time.
        size_t q[kTilePanels] = {};
        const float* panel[kTilePanels] = {};
        size_t np = 0;
        for (; np < kTilePanels && left != 0; np++, left &= left - 1) {
          q[np] = static_cast<size_t>(__builtin_ctz(left));
          panel[np] = panels + q[np] * kPanel * d_;
        }
        __m512 c[kTilePanels * kRows];
        FloatTile(xr, panel, np, d_, c);
        for (size_t t = 0; t < np; t++) {
          for (size_t i = 0; i < nr; i++) {
            if (!(rows[i].panels >> q[t] & 1)) continue;
            above_[rows[i].r] += __builtin_popcount(_mm512_mask_cmp_ps_mask(
                rows[i].lanes[q[t]], c[t * kRows + i], _mm512_set1_ps(own_score_[rows[i].r]), _CMP_GT_OQ));
          }
        }
      }
    }
    whole_.clear();
  }

  void Pair(size_t r, size_t g) {
    pair_rows_[n_pairs_] = r;
    pair_anchors_[n_pairs_] = g;
    if (++n_pairs_ == kLanes) Pairs();
  }

#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
  // The pairs so far, with the float32 tiles' arithmetic: lane j of one vector is pair j's sum, one fused
  // multiply-add per k, in order, from zero. Sixteen coordinates of each pair's row and anchor are loaded at a
  // time and transposed into lanes. A short batch repeats its first pair, whose copies are not counted.
  __attribute__((target("avx512f"))) void Pairs() {
    if (n_pairs_ == 0) return;
    const float* xs[kLanes];
    const float* as[kLanes];
    for (size_t j = 0; j < kLanes; j++) {
      const size_t i = j < n_pairs_ ? j : 0;
      xs[j] = Row(pair_rows_[i]);
      as[j] = a_[pair_anchors_[i]];
    }
    __m512 c = _mm512_setzero_ps();
    for (size_t k0 = 0; k0 < d_; k0 += kLanes) {
      const size_t nk = std::min(kLanes, d_ - k0);
      const __mmask16 m = nk == kLanes ? 0xffff : static_cast<__mmask16>((1u << nk) - 1);
      __m512i v[kLanes], w[kLanes];
#pragma GCC unroll 16
      for (size_t j = 0; j < kLanes; j++) {
        v[j] = _mm512_maskz_loadu_epi32(m, xs[j] + k0);
        w[j] = _mm512_maskz_loadu_epi32(m, as[j] + k0);
      }
      Transpose16(v);
      Transpose16(w);
      if (nk == kLanes) {
#pragma GCC unroll 16
        for (size_t i = 0; i < kLanes; i++)
          c = _mm512_fmadd_ps(_mm512_castsi512_ps(v[i]), _mm512_castsi512_ps(w[i]), c);
      } else {
        for (size_t i = 0; i < nk; i++) c = _mm512_fmadd_ps(_mm512_castsi512_ps(v[i]), _mm512_castsi512_ps(w[i]), c);
      }
    }
    alignas(64) float sums[kLanes];
    _mm512_store_ps(sums, c);
    for (size_t j = 0; j < n_pairs_; j++) above_[pair_rows_[j]] += sums[j] > own_score_[pair_rows_[j]];
    n_pairs_ = 0;
  }
#pragma GCC diagnostic pop

  const float* x_;
  const int32_t* x_rows_;
  SlotRows a_;
  size_t d_;
  const float* own_score_;
  int32_t* above_;
  size_t r_begin_;
  // Each row's near anchors in the current block, as lanes: row i's in the block's panel q at
  // near_lanes_[i * kMaxBlockPanels + q].
  std::vector<uint16_t> near_lanes_;
  // Settle's list of a row's anchors in sparse panels.
  uint32_t sparse_[kMaxBlockPanels * kPanel];
  const ScreenBound& bound_;
  const RowBound* rb_;
  FloatPanels& panels_;
  Dot4Odds& odds_;
  // Panels a block holds, the current block's first, and its rows with panels to compute whole (Exact).
  size_t block_panels_;
  size_t block_first_ = 0;
  std::vector<WholePanels> whole_;
  // g_d + g_m, rounded up: what Settle's margin is made of.
  float settle_ = 0;
  size_t pair_rows_[kLanes] = {};
  size_t pair_anchors_[kLanes] = {};
  size_t n_pairs_ = 0;
};

// `lanes` of panel p but the lane of row r's own anchor.
inline __mmask16 OthersThanOwn(__mmask16 lanes, size_t p, int32_t own) {
  if (static_cast<size_t>(own) / kPanel != p) return lanes;
  return static_cast<__mmask16>(lanes & ~(1u << (own % kPanel)));
}

// Counts, for row r (its bound rb) and panel p, the anchors whose screened scores s (lanes of the
// panel; `lanes` masks those past the last anchor) lie above the row's own score; each anchor too
// close to call goes to `near`, which adds its float32 verdict to the row's count. Returns whether
// the screen called none of the row's anchors in the panel.
__attribute__((target("avx512f"), always_inline)) inline bool CountScreened(__m512 s, size_t r, const RowBound& rb,
                                                                            size_t p, __mmask16 lanes,
                                                                            const ScreenBound& bound,
                                                                            const int32_t* own, const float* own_score,
                                                                            int32_t* above, NearPairs& near_pairs) {
  if (own[r] < 0) return true;
  const __mmask16 mine = OthersThanOwn(lanes, p, own[r]);
  const __m512 b =
      _mm512_fmadd_ps(_mm512_set1_ps(rb.r1), _mm512_loadu_ps(bound.na(p)),
                      _mm512_fmadd_ps(_mm512_set1_ps(rb.r2), _mm512_loadu_ps(bound.ca(p)), _mm512_set1_ps(rb.delta)));
  const __m512 o = _mm512_set1_ps(own_score[r]);
  const __mmask16 high = _mm512_mask_cmp_ps_mask(mine, s, _mm512_add_ps(o, b), _CMP_GT_OQ);
  const __mmask16 near = _mm512_mask_cmp_ps_mask(mine, s, _mm512_sub_ps(o, b), _CMP_GE_OQ) & ~high;
  above[r] += __builtin_popcount(high);
  near_pairs.Add(r, p, near);  // too close to call: those anchors again in float32
  return near == mine;
}

// Row r's anchors in panel p (`lanes` masks those past the last anchor), but for its own, all sent to the
// float32 path unscreened, as CountScreened sends those it cannot call.
__attribute__((target("avx512f"), always_inline)) inline void Unscreened(size_t r, size_t p, __mmask16 lanes,
                                                                         const int32_t* own, NearPairs& near_pairs) {
  if (own[r] >= 0) near_pairs.Add(r, p, OthersThanOwn(lanes, p, own[r]));
}

// The screen's register block: kScreenRows rows against kScreenPanels panels,
// one accumulator each (24 of the 32 vector registers), so that every
// broadcast row pair feeds several panels and every panel load several rows,
// and enough independent sums are in flight to cover the dot-product latency.
constexpr size_t kScreenRows = 8;
constexpr size_t kScreenPanels = 3;
// Panels per anchor block: 192 anchors, 384 KB as bfloat16 at d = 1024, held in
// L2 while a chunk's rows pass over them.
constexpr size_t kScreenBlockPanels = 4 * kScreenPanels;

// NR rows of bfloat16 pairs (dp per row) against NP consecutive panels (dp x 16 pairs
// each); out[i * NP + q] holds row i against panel q.
template <size_t NR, size_t NP>
__attribute__((target("avx512f,avx512bf16"), always_inline)) inline void ScreenBlock(const uint32_t* xb, size_t dp,
                                                                                     const uint32_t* panels,
                                                                                     __m512* out) {
  __m512 c[NR][NP];
#pragma GCC unroll 8
  for (size_t i = 0; i < NR; i++) {
#pragma GCC unroll 4
    for (size_t q = 0; q < NP; q++) c[i][q] = _mm512_setzero_ps();
  }
  const size_t stride = kPanel * dp;
  for (size_t k = 0; k < dp; k++) {
    __m512bh p[NP];
#pragma GCC unroll 4
    for (size_t q = 0; q < NP; q++) p[q] = (__m512bh)_mm512_loadu_si512(panels + q * stride + k * kPanel);
#pragma GCC unroll 8
    for (size_t i = 0; i < NR; i++) {
      const __m512bh b = (__m512bh)_mm512_set1_epi32(static_cast<int>(xb[i * dp + k]));
#pragma GCC unroll 4
      for (size_t q = 0; q < NP; q++) c[i][q] = _mm512_dpbf16_ps(c[i][q], b, p[q]);
    }
  }
#pragma GCC unroll 8
  for (size_t i = 0; i < NR; i++) {
#pragma GCC unroll 4
    for (size_t q = 0; q < NP; q++) out[i * NP + q] = c[i][q];
  }
}

// One row tile against np <= kScreenPanels panels; out as in ScreenBlock with NP = np. Kept
// out of line: inlined into its caller, the block's 24 accumulators compete with the
// caller's live values for registers and one spills to the stack on every step.
__attribute__((target("avx512f,avx512bf16"), noinline)) void ScreenTile(const uint32_t* xb, size_t dp,
                                                                        const uint32_t* panels, size_t np,
                                                                        __m512* out) {
  if (np == 3) return ScreenBlock<kScreenRows, 3>(xb, dp, panels, out);
  if (np == 2) return ScreenBlock<kScreenRows, 2>(xb, dp, panels, out);
  ScreenBlock<kScreenRows, 1>(xb, dp, panels, out);
}
static_assert(kScreenPanels == 3, "ScreenTile dispatches on up to three panels");

// Rows [r_begin, r_end) (row r is x's row x_rows[r]) against every anchor of a, which packed_bf holds as bfloat16
// panels.
__attribute__((target("avx512f,avx512bf16"))) void RankBf16Rows(const float* x, const int32_t* x_rows, size_t d,
                                                                size_t r_begin, size_t r_end, const SlotRows& a,
                                                                const uint32_t* packed_bf, size_t n_panels,
                                                                size_t n_anchors, const ScreenBound& bound,
                                                                const int32_t* own, const float* own_score,
                                                                int32_t* above, FloatPanels& panels, Dot4Odds& odds) {
  const size_t dp = (d + 1) / 2;
  // These rows as bfloat16 pairs (k, k+1), converted once; d and the last tile of rows
  // are zero-padded (padding rows are never counted).
  const size_t tiles = (r_end - r_begin + kScreenRows - 1) / kScreenRows;
  std::vector<uint32_t> xb(tiles * kScreenRows * dp);
  std::vector<RowBound> rb(r_end - r_begin);
  for (size_t r = r_begin; r < r_end; r++) {
    const float* xr = x + static_cast<size_t>(x_rows[r]) * d;
    PairsBf16(xr, d, xb.data() + (r - r_begin) * dp, 1);
    rb[r - r_begin] = bound.Row(xr, xb.data() + (r - r_begin) * dp);
  }
  __m512 acc[kScreenRows * kScreenPanels];
  NearPairs near_pairs(x, x_rows, a, d, own_score, above, r_begin, r_end, kScreenBlockPanels * kPanel, bound, rb.data(),
                       panels, odds);
  for (size_t b0 = 0; b0 < n_panels; b0 += kScreenBlockPanels) {
    const size_t b1 = std::min(n_panels, b0 + kScreenBlockPanels);
    for (size_t r0 = r_begin; r0 < r_end; r0 += kScreenRows) {
      const size_t nr = std::min(kScreenRows, r_end - r0);
      for (size_t p0 = b0; p0 < b1; p0 += kScreenPanels) {
        const size_t np = std::min(kScreenPanels, b1 - p0);
        ScreenTile(xb.data() + (r0 - r_begin) * dp, dp, packed_bf + p0 * kPanel * dp, np, acc);
        for (size_t q = 0; q < np; q++) {
          const size_t p = p0 + q;
          const size_t valid = std::min(kPanel, n_anchors - p * kPanel);
          const __mmask16 lanes = static_cast<__mmask16>((1u << valid) - 1);
          for (size_t i = 0; i < nr; i++) {
            CountScreened(acc[i * np + q], r0 + i, rb[r0 + i - r_begin], p, lanes, bound, own, own_score, above,
                          near_pairs);
          }
        }
      }
    }
    near_pairs.EndBlock(b0);
  }
}

// The same screen on AMX tiles: TDPBF16PS multiplies a tile of 16 rows by 16 pairs of bfloat16
// values against 16 pairs of 16 anchors, 8,192 products an instruction, each product exact in
// float32 and summed in float32 (subnormals flushed, as VDPBF16PS does). The order of the sums
// differs from the register path's, not their number, so the bound above holds as it stands and
// the counts are again the float32 path's, bit for bit. Tiles 0-3 accumulate 32 rows against two
// panels; tiles 4-5 hold the rows' pairs, tiles 6-7 the panels'.
constexpr size_t kAmxRows = 32;
constexpr size_t kAmxPairs = 16;        // pairs along d per tile step (64 bytes a tile row)
constexpr size_t kAmxBlockPanels = 16;  // 256 anchors a block, 512 KB as bfloat16 at d = 1024
static_assert(kAmxBlockPanels <= 16 && kScreenBlockPanels <= 16, "NearPairs keeps a block's panels in 16 bits");

// The pairs a row of d values takes on the AMX tiles: d padded with zeros to a whole number of tile steps.
inline size_t AmxPairs(size_t d) { return ((d + 1) / 2 + kAmxPairs - 1) / kAmxPairs * kAmxPairs; }

// Tiles 0-3 set to zero, for a group of 32 rows against two panels.
__attribute__((target("amx-tile"), always_inline)) inline void AmxZero() {
  _tile_zero(0);
  _tile_zero(1);
  _tile_zero(2);
  _tile_zero(3);
}

// One step of a group on tiles 0-3: pairs [k, k + 16) of 32 rows (rows, row_bytes apart, the second sixteen from
// row 16) against those of two panels (panels, the second panel_pairs pairs on).
__attribute__((target("amx-tile,amx-bf16"), always_inline)) inline void AmxStep(const uint32_t* rows, size_t row_bytes,
                                                                                const uint32_t* panels,
                                                                                size_t panel_pairs, size_t k) {
  _tile_loadd(4, rows + k, row_bytes);
  _tile_loadd(5, rows + 16 * (row_bytes / sizeof(uint32_t)) + k, row_bytes);
  _tile_loadd(6, panels + k * kPanel, 64);
  _tile_loadd(7, panels + panel_pairs + k * kPanel, 64);
  _tile_dpbf16ps(0, 4, 6);
  _tile_dpbf16ps(1, 4, 7);
  _tile_dpbf16ps(2, 5, 6);
  _tile_dpbf16ps(3, 5, 7);
}

// Tiles 0-3 stored as one block of 32 rows against 32 lanes (two panels), row i at out + i * stride.
__attribute__((target("amx-tile"), always_inline)) inline void AmxStore(float* out, size_t stride) {
  _tile_stored(0, out, stride * sizeof(float));
  _tile_stored(1, out + kPanel, stride * sizeof(float));
  _tile_stored(2, out + 16 * stride, stride * sizeof(float));
  _tile_stored(3, out + 16 * stride + kPanel, stride * sizeof(float));
}

// A centre for each pair of the AMX screen's panels (pair j: panels 2j and 2j + 1, 32 anchors), to settle a whole
// group of rows against the pair's 32 anchors at once where they all lie far from the rows' own scores (anchors of
// another kind altogether, in tight kinds: RankAmxRows). The centre c of pair j is the mean of its anchors rounded to
// bfloat16, packed as the anchors are (16 centres a panel, AmxPairs(d) pairs a row); R_j = max |a - c| over its
// anchors, and |c|, are taken in float64 and rounded up. For a row x and an anchor a of the pair,
// x.a = x.c + x.(a - c), the second term at most |x| R_j; the tiles' x.c, from xh in float32 sums, is within
// (|xl| + g_d |xh|) |c| of x.c; and the float32 path's score of the pair is within g_d |x| |a| of x.a. So where
// the tiles' x.c lies more than
//   E = r1 |c| + r2 g_d |c| + |x| (R_j + g_d max |a|) + δ
// below the row's own score, no anchor of the pair scores above it in the float32 path, and where it lies more
// than E above, every one does (r1, r2, δ: the row's RowBound). A pair whose radius is over half the largest
// anchor norm is not tried: its anchors are too spread for their centre to settle anything.
class PairCentres {
 public:
  PairCentres(const SlotRows& a, size_t n_anchors, size_t d, size_t n_pairs, const ScreenBound& bound, int threads)
      : dq_(AmxPairs(d)),
        n_lanes_((n_pairs + 2 * kPanel - 1) / (2 * kPanel) * 2 * kPanel),
        packed_(n_lanes_ * dq_),
        tried_(n_pairs),
        norm_(n_pairs),
        gamma_norm_(n_pairs),
        reach_(n_pairs) {
    const float na_max = bound.norm_max();
    const double gamma = bound.gamma();
    Shares(n_pairs, threads, [&](size_t j0, size_t j1) {
      std::vector<double> sum(d), c(d);
      std::vector<float> mean(d);
      for (size_t j = j0; j < j1; j++) {
        const size_t g0 = j * 2 * kPanel, g1 = std::min(n_anchors, g0 + 2 * kPanel);
        if (g0 >= g1) continue;
        std::fill(sum.begin(), sum.end(), 0.0);
        for (size_t g = g0; g < g1; g++) {
          for (size_t k = 0; k < d; k++) sum[k] += a[g][k];
        }
        for (size_t k = 0; k < d; k++) mean[k] = static_cast<float>(sum[k] / static_cast<double>(g1 - g0));
        uint32_t* pairs = packed_.get() + (j / kPanel) * kPanel * dq_ + j % kPanel;
        PairsBf16(mean.data(), d, pairs, kPanel);
        // The centre as the tiles read it.
        double norm = 0;
        for (size_t k = 0; k < d; k++) {
          c[k] = PairValue(pairs, k, kPanel);
          norm += c[k] * c[k];
        }
        double radius = 0;
        for (size_t g = g0; g < g1; g++) {
          double r = 0;
          for (size_t k = 0; k < d; k++) r += (a[g][k] - c[k]) * (a[g][k] - c[k]);
          radius = std::max(radius, r);
        }
        radius = std::sqrt(radius);
        if (!(radius <= 0.5 * na_max)) continue;
        tried_[j] = 1;
        norm_[j] = Up(std::sqrt(norm));
        gamma_norm_[j] = Up(gamma * norm_[j]);
        reach_[j] = Up(radius + gamma * na_max);
      }
    });
    for (size_t j = 0; j < n_pairs; j++) any_ |= tried_[j] != 0;
  }

  // Whether any pair is tried; whether pair j is.
  bool any() const { return any_; }
  bool tried(size_t j) const { return tried_[j] != 0; }
  // The centres' panels, n_lanes() / 16 of them (an even count).
  const uint32_t* packed() const { return packed_.get(); }
  size_t n_lanes() const { return n_lanes_; }
  // E for a row (its bound b) against pair j.
  float Reach(const RowBound& b, size_t j) const {
    return b.r1 * norm_[j] + b.r2 * gamma_norm_[j] + b.norm * reach_[j] + b.delta;
  }

 private:
  size_t dq_, n_lanes_;
  LargeArray<uint32_t> packed_;
  std::vector<uint8_t> tried_;
  std::vector<float> norm_, gamma_norm_, reach_;
  bool any_ = false;
};

// Rows [r_begin, r_end) (row r is x's row x_rows[r]) against every anchor. packed_bf holds the panels as PairsBf16 lays
// them out with AmxPairs(d) pairs a row, n_panels rounded up to an even count with zero panels.
__attribute__((target("amx-tile,amx-bf16,avx512f,avx512bf16"))) void RankAmxRows(
    const float* x, const int32_t* x_rows, size_t d, size_t r_begin, size_t r_end, const SlotRows& a,
    const uint32_t* packed_bf, size_t n_panels, size_t n_anchors, const ScreenBound& bound, const PairCentres& centres,
    const int32_t* own, const float* own_score, int32_t* above, FloatPanels& panels, Dot4Odds& odds) {
  const size_t dq = AmxPairs(d);
  const size_t padded = (r_end - r_begin + kAmxRows - 1) / kAmxRows * kAmxRows;
  // Each tile row a whole cache line (LineArray): a tile load of rows that straddle two takes twice as long.
  const LineArray<uint32_t> xb(padded * dq);
  std::vector<RowBound> rb(r_end - r_begin);
  for (size_t r = r_begin; r < r_end; r++) {
    const float* xr = x + static_cast<size_t>(x_rows[r]) * d;
    PairsBf16(xr, d, xb.get() + (r - r_begin) * dq, 1);
    rb[r - r_begin] = bound.Row(xr, xb.get() + (r - r_begin) * dq);
  }
  AmxTiles tiles;
  const size_t row_bytes = dq * sizeof(uint32_t), panel_pairs = kPanel * dq, steps = dq / kAmxPairs;
  // The tiles' x.c for every row and pair centre (PairCentres): row i's against pair j at centre[i * nc + j].
  const size_t nc = centres.any() ? centres.n_lanes() : 0;
  const LineArray<float> centre(padded * nc);
  for (size_t r0 = 0; r0 < padded && nc > 0; r0 += kAmxRows) {
    const uint32_t* rows = xb.get() + r0 * dq;
    for (size_t c0 = 0; c0 < nc; c0 += 2 * kPanel) {
      AmxZero();
      for (size_t k = 0; k < dq; k += kAmxPairs) AmxStep(rows, row_bytes, centres.packed() + c0 * dq, panel_pairs, k);
      AmxStore(centre.get() + r0 * nc + c0, nc);
    }
  }
  NearPairs near_pairs(x, x_rows, a, d, own_score, above, r_begin, r_end, kAmxBlockPanels * kPanel, bound, rb.data(),
                       panels, odds);

  // A group's scores (32 rows against two panels, as AmxStore lays them out) are counted while the next group's
  // products run, a share after each tile step: the vector units count while the AMX unit multiplies. count(g, i0,
  // i1) counts g's items [i0, i1), item j being row r0 + j % 32 against panel p0 + j / 32: each row still meets its
  // panels in order, as NearPairs needs.
  //
  // Where a group's screen called none of its pairs (near-copies of its rows' anchors crowd every own score), the
  // next kSkipGroups groups of rows on the same two panels are sent to the float32 path unscreened, as the screen
  // would have sent them: the rows come ordered by their own anchors' slots (RankAgainstAnchors), so the rows that
  // follow are most likely alike. Every count is still the float32 path's; a guess that proves wrong only costs time.
  struct Group {
    size_t r0, p0;
    bool uncalled;                                    // the screen called none of the group's pairs
    alignas(64) float scores[kAmxRows * 2 * kPanel];  // row i against lane j of the two panels at i * 32 + j
  };
  constexpr size_t kItems = 2 * kAmxRows;
  constexpr uint8_t kSkipGroups = 3;
  Group groups[2];
  const auto lanes_of = [n_anchors](size_t p) {
    return static_cast<__mmask16>((1u << std::min(kPanel, n_anchors - p * kPanel)) - 1);
  };
  // Per pair of panels in the block: how many more groups go unscreened.
  uint8_t skip[kAmxBlockPanels / 2];
  const auto count = [&](Group & g, size_t i0, size_t i1) __attribute__((target("avx512f"), always_inline)) {
    bool uncalled = true;
    for (size_t j = i0; j < i1; j++) {
      const size_t q = j / kAmxRows, i = j % kAmxRows, p = g.p0 + q, r = g.r0 + i;
      if (r >= r_end || p * kPanel >= n_anchors) continue;
      const __m512 s = _mm512_load_ps(g.scores + (i * 2 + q) * kPanel);
      uncalled &= CountScreened(s, r, rb[r - r_begin], p, lanes_of(p), bound, own, own_score, above, near_pairs);
    }
    g.uncalled &= uncalled;
    if (i1 == kItems) skip[(g.p0 % kAmxBlockPanels) / 2] = g.uncalled ? kSkipGroups : 0;
  };
  // Rows [r0, r0 + 32) against the pair of panels from p0, settled from its centre where every row can be: a row's
  // count moves by the pair's anchors (but its own) where all score above it. False where any row is left.
  const auto far = [&](size_t r0, size_t p0) {
    const size_t j = p0 / 2, r1 = std::min(r_end, r0 + kAmxRows);
    uint32_t high = 0;
    for (size_t r = r0; r < r1; r++) {
      if (own[r] < 0) continue;
      const float z = centre.get()[(r - r_begin) * nc + j], e = centres.Reach(rb[r - r_begin], j);
      if (z - e > own_score[r]) {
        high |= 1u << (r - r0);
      } else if (!(z + e < own_score[r])) {
        return false;
      }
    }
    for (uint32_t m = high; m != 0; m &= m - 1) {
      const size_t r = r0 + __builtin_ctz(m);
      for (size_t q = 0; q < 2 && (p0 + q) * kPanel < n_anchors; q++) {
        above[r] += __builtin_popcount(OthersThanOwn(lanes_of(p0 + q), p0 + q, own[r]));
      }
    }
    return true;
  };
  for (size_t b0 = 0; b0 < n_panels; b0 += kAmxBlockPanels) {
    const size_t b1 = std::min(n_panels, b0 + kAmxBlockPanels);
    Group* pending = nullptr;
    std::fill(std::begin(skip), std::end(skip), 0);
    for (size_t r0 = r_begin; r0 < r_end; r0 += kAmxRows) {
      const uint32_t* rows = xb.get() + (r0 - r_begin) * dq;
      for (size_t p0 = b0; p0 < b1; p0 += 2) {
        if (nc > 0 && centres.tried(p0 / 2) && far(r0, p0)) continue;
        uint8_t& left = skip[(p0 - b0) / 2];
        if (left > 0) {
          left--;
          // The group before first, so that each row still meets its panels in order.
          if (pending != nullptr) count(*pending, 0, kItems);
          pending = nullptr;
          for (size_t q = 0; q < 2 && (p0 + q) * kPanel < n_anchors; q++) {
            for (size_t r = r0; r < std::min(r_end, r0 + kAmxRows); r++)
              Unscreened(r, p0 + q, lanes_of(p0 + q), own, near_pairs);
          }
          continue;
        }
        AmxZero();
        for (size_t k = 0, step = 0; k < dq; k += kAmxPairs, step++) {
          AmxStep(rows, row_bytes, packed_bf + p0 * panel_pairs, panel_pairs, k);
          // The group before's share of items for this step, all of them by the last.
          if (pending != nullptr) count(*pending, step * kItems / steps, (step + 1) * kItems / steps);
        }
        Group& g = pending == &groups[0] ? groups[1] : groups[0];
        g.r0 = r0;
        g.p0 = p0;
        g.uncalled = true;
        AmxStore(g.scores, 2 * kPanel);
        pending = &g;
      }
    }
    if (pending != nullptr) count(*pending, 0, kItems);
    near_pairs.EndBlock(b0);
  }
}

// Slots for the anchors: an order that puts near-duplicate anchors side by side. Where a row's own
// score has many anchors within float32 rounding of it (anchors that are copies, or nearly, of one
// another), those anchors then sit in a few runs of consecutive slots, and the pairs the screen cannot
// call come in runs too. Anchor g's key is the signs of its projections on kOrderBits fixed directions
// of +1 and -1 (random hyperplanes: two anchors at an angle t differ in a bit with probability t / pi);
// slots go by key, then by anchor. The order changes no count: each anchor is counted or not on its own.
constexpr size_t kOrderBits = 16;
static_assert(kOrderBits == 16, "OrderKey takes the projections as the lanes of one vector");
// The signs of v's projections on the directions (dirs[k * kOrderBits + b]: direction b at k), as bits.
// Only the bfloat16 screens order their anchors, and they run where AVX-512 does.
__attribute__((target("avx512f"))) uint32_t OrderKey(const float* v, const float* dirs, size_t d) {
  __m512 p[4] = {_mm512_setzero_ps(), _mm512_setzero_ps(), _mm512_setzero_ps(), _mm512_setzero_ps()};
  for (size_t k = 0; k < d; k++)
    p[k % 4] = _mm512_fmadd_ps(_mm512_set1_ps(v[k]), _mm512_loadu_ps(dirs + k * kOrderBits), p[k % 4]);
  const __m512 sum = _mm512_add_ps(_mm512_add_ps(p[0], p[1]), _mm512_add_ps(p[2], p[3]));
  return _mm512_cmp_ps_mask(sum, _mm512_setzero_ps(), _CMP_GT_OQ);
}

std::vector<uint32_t> AnchorSlots(const float* a, size_t n_anchors, size_t d, int threads) {
  // Direction b's sign at coordinate k, dirs[k * kOrderBits + b]: bit b of a fixed hash of k.
  std::vector<float> dirs(d * kOrderBits);
  for (size_t k = 0; k < d; k++) {
    uint64_t h = (k + 1) * 0x9e3779b97f4a7c15ull;
    h = (h ^ (h >> 30)) * 0xbf58476d1ce4e5b9ull;
    h = (h ^ (h >> 27)) * 0x94d049bb133111ebull;
    h ^= h >> 31;
    for (size_t b = 0; b < kOrderBits; b++) dirs[k * kOrderBits + b] = (h >> b) & 1 ? 1.0f : -1.0f;
  }
  std::vector<uint32_t> key(n_anchors);
  Shares(n_anchors, threads, [&](size_t g0, size_t g1) {
    for (size_t g = g0; g < g1; g++) key[g] = OrderKey(a + g * d, dirs.data(), d);
  });
  std::vector<uint32_t> slots(n_anchors);
  for (size_t g = 0; g < n_anchors; g++) slots[g] = static_cast<uint32_t>(g);
  std::stable_sort(slots.begin(), slots.end(), [&](uint32_t u, uint32_t v) { return key[u] < key[v]; });
  return slots;
}

// The anchors' slots (AnchorSlots), and each ranked row's own anchor as a slot.
struct SlottedAnchors {
  SlottedAnchors(const float* a, size_t n_anchors, size_t d, const int32_t* own, size_t n_rows, int threads)
      : slots(AnchorSlots(a, n_anchors, d, threads)), own(n_rows), rows{a, slots.data(), d} {
    std::vector<int32_t> slot_of(n_anchors);
    for (size_t s = 0; s < n_anchors; s++) slot_of[slots[s]] = static_cast<int32_t>(s);
    for (size_t r = 0; r < n_rows; r++) this->own[r] = own[r] < 0 ? -1 : slot_of[own[r]];
  }
  std::vector<uint32_t> slots;
  std::vector<int32_t> own;
  SlotRows rows;
};

// The anchors (a, in slot order) into `packed` as bfloat16 panels of `pairs` pairs a row (PairsBf16's layout,
// stride 16: panel p, pair k holds (a[g][2k], a[g][2k+1]) for its 16 anchors); returns packed.
const uint32_t* PackBf16(const SlotRows& a, size_t n_anchors, size_t d, uint32_t* packed, size_t pairs, int threads) {
  Shares(PanelCount(n_anchors), threads, [&](size_t p0, size_t p1) {
    for (size_t g = p0 * kPanel; g < std::min(n_anchors, p1 * kPanel); g++) {
      PairsBf16(a[g], d, packed + (g / kPanel) * kPanel * pairs + g % kPanel, kPanel);
    }
  });
  return packed;
}

// What both bfloat16 screens read of the anchors: their slots (SlottedAnchors), their bfloat16 panels of `pairs`
// pairs a row (n_panels panels, zero past the last anchor; large_buffers.h), their side of the bound, and their float32
// panels for crowded rows.
struct ScreenAnchors {
  ScreenAnchors(const float* a, size_t n_anchors, size_t d, const int32_t* own, size_t n_rows, size_t pairs,
                size_t n_panels, int threads)
      : slotted(a, n_anchors, d, own, n_rows, threads),
        n_panels(n_panels),
        packed_bf(n_panels * kPanel * pairs),
        bound(slotted.rows, n_anchors, d, PackBf16(slotted.rows, n_anchors, d, packed_bf.get(), pairs, threads), pairs,
              n_panels, threads),
        panels(slotted.rows, n_anchors, d) {}
  const SlottedAnchors slotted;
  const size_t n_panels;
  const LargeArray<uint32_t> packed_bf;
  const ScreenBound bound;
  FloatPanels panels;
};

// The ranked rows in the order the bfloat16 screens take them, by their own anchors' slots (rows without one last):
// rows alike come together as their anchors do (AnchorSlots), so that a group of rows whose own scores near-copies of
// their anchors crowd is followed by more of the same (RankAmxRows). Row i of the order is the caller's row
// order[i]; each row is counted on its own, so the order changes no count.
struct RowOrder {
  RowOrder(const int32_t* x_rows, const int32_t* own_slot, const float* own_score_in, size_t n)
      : order(n), rows(n), own(n), own_score(n), above(n) {
    for (size_t i = 0; i < n; i++) order[i] = static_cast<uint32_t>(i);
    // A row without an own anchor (slot -1) goes last.
    std::stable_sort(order.begin(), order.end(), [own_slot](uint32_t u, uint32_t v) {
      return static_cast<uint32_t>(own_slot[u]) < static_cast<uint32_t>(own_slot[v]);
    });
    for (size_t i = 0; i < n; i++) {
      rows[i] = x_rows[order[i]];
      own[i] = own_slot[order[i]];
      own_score[i] = own_score_in[order[i]];
    }
  }
  // Each row's count back in the caller's order.
  void CountsTo(int32_t* above_out) const {
    for (size_t i = 0; i < order.size(); i++) above_out[order[i]] = above[i];
  }
  std::vector<uint32_t> order;
  std::vector<int32_t> rows, own;
  std::vector<float> own_score;
  std::vector<int32_t> above;
};

// Rows [0, n_rows) in chunks of chunk_rows, rank(first, last, odds) on each, handed out one at a time so that a
// thread the machine slows down (other processes on the same cores) takes fewer chunks instead of holding the others
// up at the end. Each thread keeps one Dot4Odds over all its chunks.
template <class Rank>
void InChunks(size_t n_rows, size_t chunk_rows, int threads, const Rank& rank) {
  const size_t chunks = (n_rows + chunk_rows - 1) / chunk_rows;
  const size_t nt = std::max<size_t>(1, std::min<size_t>(threads, chunks));
  std::atomic<size_t> next{0};
  Crew(nt, [&]() {
    Dot4Odds odds;
    for (size_t c = next.fetch_add(1); c < chunks; c = next.fetch_add(1)) {
      rank(c * chunk_rows, std::min(n_rows, (c + 1) * chunk_rows), odds);
    }
  });
}
#endif

// Rows owned in the own-score pass at a time: as many independent sums in flight, each still in order.
constexpr size_t kOwnRows = 8;

#ifdef HSM_X86
// kOwnRows rows' own scores in the AVX-512 tiles' arithmetic: one fused multiply-add per coordinate, in order,
// from zero.
__attribute__((target("avx512f"))) void FusedDots(const float* const* xr, const float* const* ar, size_t d, float* s) {
  for (size_t k = 0; k < d; k++) {
    for (size_t i = 0; i < kOwnRows; i++) s[i] = __builtin_fmaf(xr[i][k], ar[i][k], s[i]);
  }
}
#endif

// Own scores first, in the same float32 arithmetic as the tiles that score every other anchor (`fused`: the
// AVX-512 tiles' fused multiply-adds; else the portable tile's rounded product, then rounded sum), so that an
// anchor equal to the row's own scores exactly its own score and does not raise the rank. Rows are split across
// threads, each row's sum in order on one thread; every count starts at 0. Row r is x's row x_rows[r].
void OwnScores(const float* x, const int32_t* x_rows, size_t n_rows, const float* a, size_t d, const int32_t* own,
               float* own_score, int32_t* above, bool fused, int threads) {
  Shares(n_rows, n_rows >= 256 ? threads : 1, [&](size_t begin, size_t end) {
    RowGroups<kOwnRows>(
        begin, end, [&](size_t r) { return x + static_cast<size_t>(x_rows[r]) * d; },
        [&](size_t r, const float* xr) { return own[r] < 0 ? xr : a + static_cast<size_t>(own[r]) * d; },
        [&](size_t r0, size_t nr, const float* const* xr, const float* const* ar) {
          float s[kOwnRows] = {0};
#ifdef HSM_X86
          if (fused) {
            FusedDots(xr, ar, d, s);
          } else
#endif
          {
            for (size_t k = 0; k < d; k++) {
              for (size_t i = 0; i < kOwnRows; i++) s[i] += xr[i][k] * ar[i][k];
            }
          }
          for (size_t i = 0; i < nr; i++) {
            above[r0 + i] = 0;
            own_score[r0 + i] = own[r0 + i] < 0 ? 0 : s[i];
          }
        });
  });
}

// Rows the float32 tiles take at a time, gathered into one contiguous block.
constexpr size_t kGatherRows = 8192;

}  // namespace

void RankAgainstAnchors(const float* x, const int32_t* rows, size_t n_rows, const float* a, size_t n_anchors, size_t d,
                        const int32_t* own, float* own_score, int32_t* above, int threads, bool allow_bf16) {
#ifdef HSM_X86
  // Every path from the AVX-512 tile up scores anchors with fused multiply-adds.
  const bool fused = HasAvx512();
#else
  const bool fused = false;
#endif
  OwnScores(x, rows, n_rows, a, d, own, own_score, above, fused, threads);
  if (n_rows == 0) return;
    // The screens read each chunk's rows where they are, as they convert them to bfloat16.
#ifdef HSM_X86
  if (HasAmxBf16() && allow_bf16) {
    // The panels padded to an even count.
    ScreenAnchors s(a, n_anchors, d, own, n_rows, AmxPairs(d), (PanelCount(n_anchors) + 1) / 2 * 2, threads);
    RowOrder o(rows, s.slotted.own.data(), own_score, n_rows);
    const PairCentres centres(s.slotted.rows, n_anchors, d, s.n_panels / 2, s.bound, threads);
    InChunks(n_rows, 16 * kAmxRows, threads, [&](size_t first, size_t last, Dot4Odds& odds) {
      RankAmxRows(x, o.rows.data(), d, first, last, s.slotted.rows, s.packed_bf.get(), s.n_panels, n_anchors, s.bound,
                  centres, o.own.data(), o.own_score.data(), o.above.data(), s.panels, odds);
    });
    o.CountsTo(above);
    return;
  }
  if (HasAvx512Bf16() && allow_bf16) {
    ScreenAnchors s(a, n_anchors, d, own, n_rows, (d + 1) / 2, PanelCount(n_anchors), threads);
    RowOrder o(rows, s.slotted.own.data(), own_score, n_rows);
    // Each chunk is converted to bfloat16 once (1 MB) and read again for every anchor block.
    InChunks(n_rows, 64 * kScreenRows, threads, [&](size_t first, size_t last, Dot4Odds& odds) {
      RankBf16Rows(x, o.rows.data(), d, first, last, s.slotted.rows, s.packed_bf.get(), s.n_panels, n_anchors, s.bound,
                   o.own.data(), o.own_score.data(), o.above.data(), s.panels, odds);
    });
    o.CountsTo(above);
    return;
  }
  using Tile = void (*)(const float*, size_t, size_t, size_t, const float*, size_t, float*);
  const Tile tile = HasAvx512() ? TileAvx512 : HasAvx2() ? PanelByPanel<TileAvx2> : PanelByPanel<TilePortable>;
#else
  const auto tile = PanelByPanel<TilePortable>;
#endif
  // The float32 tiles read whole micro-tiles of contiguous rows: other rows are gathered a slice at a time.
  const size_t n_panels = PanelCount(n_anchors);
  // On a cache line (LineArray): each k of a panel, its 16 anchors' values, is one line.
  const LineArray<float> packed(n_panels * kPanel * d);
  Pack([&](size_t g) { return a + g * d; }, n_anchors, d, packed.get(), threads);
  // Consecutive rows are read where they are, all at once.
  bool consecutive = true;
  for (size_t i = 1; i < n_rows && consecutive; i++) consecutive = rows[i] == rows[i - 1] + 1;
  const size_t slice = consecutive ? n_rows : std::min(n_rows, kGatherRows);
  std::unique_ptr<float[]> gathered(consecutive ? nullptr : new float[slice * d]);
  for (size_t s0 = 0; s0 < n_rows; s0 += slice) {
    const size_t ns = std::min(slice, n_rows - s0);
    if (!consecutive) {
      Shares(ns, threads, [&](size_t begin, size_t end) {
        for (size_t i = begin; i < end; i++)
          std::memcpy(gathered.get() + i * d, x + static_cast<size_t>(rows[s0 + i]) * d, d * sizeof(float));
      });
    }
    const float* xs = consecutive ? x + static_cast<size_t>(rows[0]) * d : gathered.get();
    const size_t nt = std::max<size_t>(1, std::min<size_t>(threads, (ns + kRows - 1) / kRows));
    Parallel(nt, [&](size_t t) {
      // Each thread takes whole micro-tiles of rows: no two threads touch one row.
      const size_t tiles = (ns + kRows - 1) / kRows;
      const size_t first = tiles * t / nt, last = tiles * (t + 1) / nt;
      float scores[kTilePanels * kRows * kPanel];
      for (size_t b0 = 0; b0 < n_panels; b0 += kBlockPanels) {
        const size_t b1 = std::min(n_panels, b0 + kBlockPanels);
        for (size_t tr = first; tr < last; tr++) {
          const size_t r0 = tr * kRows;
          const size_t nr = std::min(kRows, ns - r0);
          for (size_t p = b0; p < b1; p += kTilePanels) {
            const size_t np = std::min(kTilePanels, b1 - p);
            tile(xs, d, r0, nr, packed.get() + p * kPanel * d, np, scores);
            for (size_t q = 0; q < np; q++) {
              CountTile(scores + q * kRows * kPanel, nr, r0, p + q, n_anchors, own + s0, own_score + s0, above + s0);
            }
          }
        }
      }
    });
  }
}

}  // namespace hsm
