#include "head.h"

#include "amx.h"
#include "cpu.h"
#include "threads.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#if defined(__x86_64__)
#include <immintrin.h>
#define HSM_X86 1
#endif

// The screen and its bound.
//
// For a batch row h and a vocabulary row w (float32, d long), s = the float64
// sum of h_i w_i in order, and s~ = the screened score: h rounded and w truncated
// to bfloat16 (h^, w^), their products summed in float32 lanes (any order, no
// element passing through more than n = d + 64 roundings: d + 1 at most with
// the AVX-512 dot products, d/8 + 3 in the portable lanes), where the AVX-512
// instructions also read bfloat16 subnormals as zero and flush subnormal
// results to zero. With u = 2^-8 (the unit roundoff of bfloat16), t = 2^-126
// (the smallest normal float32), g = n 2^-24 / (1 - n 2^-24), and h's rounding
// error e = h^ - h known exactly (the screen computes |e| per row) while w's,
// f = w^ - w, is only bounded: w^ is w's float32 bits truncated to their top 16, so
// |f_i| < 2u|w_i|, or |f_i| <= t where w_i is subnormal (read as zero):
//   sum (h^_i w^_i - h_i w_i) = sum e_i w^_i + sum h_i f_i, at most
//     |e| |w^| + 2u sum|h_i w_i| + t sum|h_i|, with |w^| <= |w| <= (1 + u)|w| + t sqrt(d);
//   a subnormal of h^ read as zero costs t (1 + u) sum|w_i| more;
//   flushing each product and each partial sum costs at most t apiece (2d + n);
//   float32 summation of the products adds at most g sum|h^_i w^_i|, with
//     sum|h^_i w^_i| <= |h^| |w^| and |h^| <= (1 + u)|h| + t sqrt(d);
//   the float64 reference itself is within 1.01 d 2^-53 sum|h_i w_i| of the real sum.
// Cauchy-Schwarz (sum|h_i w_i| <= |h| |w|, sum|x_i| <= sqrt(d) |x|) turns this into
//   |s~ - s| <= k |w| + a,  k = (1 + u)|e| + (2u + g (1 + u)^2 + 1.01 d 2^-53) |h|,
//                           a = t (3 sqrt(d) (|h| + |w|) + 3d + 3n)
// (k <= (3u + u^2 + g (1 + u)^2 + ...) |h|, as |e| <= u|h| + t sqrt(d); for
// Gaussian values |e| is about 0.4 u|h|, which keeps fewer candidates),
// as long as nothing overflows: every row screened has |h| <= 2^120, and
// |h| max_v |w_v| <= 2^100 (so no bfloat16 factor, product or partial sum
// comes near float32's range); any other row, and any row with a non-finite
// value, is computed exactly over the whole vocabulary. The kernel uses
// E = 1.25 k |w| + 2a: the margin covers the float32 rounding of the norms,
// of E itself and of s~ +- E (each at most 2^-24 of |h| |w| + |s~|, about
// 2^-23 |h| |w|, against a margin of k/4 |w| >= u/2 |h| |w| = 2^-9 |h| |w|).
// Truncating w instead of rounding it doubles its share of the bound and keeps
// a few more candidates; it lets W^T's two halves, hi and lo, hold each value
// exactly in the four bytes float32 takes, the screen reading hi alone.
//
// The screen keeps every v with s~_v + E_v >= max_u (s~_u - E_u): since
// s_v <= s~_v + E_v and s_u >= s~_u - E_u, no v it drops can have the largest
// exact logit, nor tie with it. The survivors (usually a handful) are computed
// exactly and the largest taken, ties to the lowest v. The running maximum of
// s~ - E and each row's candidate list are kept in one pass over the
// vocabulary, candidates below the maximum pruned as it grows.

namespace hsm {
namespace {

constexpr size_t kTileV = 4;              // vocabulary rows per micro-tile
constexpr size_t kTileB = 4;              // batch rows per micro-tile
constexpr size_t kPrefetchBytes = 32768;  // how far ahead of the vector screens their vocabulary rows are prefetched

inline uint16_t Bf16(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((u >> 16) | 0x40u);  // a NaN stays a (quiet) NaN
  return static_cast<uint16_t>((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}

inline float Bf16ToF32(uint16_t b) {
  const uint32_t u = static_cast<uint32_t>(b) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

// Row v of W^T as float32, from its two halves.
inline void RowF32(const uint16_t* hi, const uint16_t* lo, size_t v, size_t d, float* out) {
  const uint16_t *a = hi + v * d, *b = lo + v * d;
  for (size_t i = 0; i < d; i++) {
    const uint32_t u = static_cast<uint32_t>(a[i]) << 16 | b[i];
    std::memcpy(out + i, &u, 4);
  }
}

// Exact logits: float64 products of float32 values (exact) summed in order, out[j] for
// the vocabulary row at(j), j < n. Four rows at a time, so that four chains of additions
// are in flight instead of one; each row's sum is still taken in order.
template <typename At>
void Dots(const float* h, size_t d, const uint16_t* hi, const uint16_t* lo, size_t n, At at, double* out) {
  std::vector<float> rows(4 * d);
  float *w0 = rows.data(), *w1 = w0 + d, *w2 = w1 + d, *w3 = w2 + d;
  size_t j = 0;
  for (; j + 4 <= n; j += 4) {
    RowF32(hi, lo, at(j), d, w0);
    RowF32(hi, lo, at(j + 1), d, w1);
    RowF32(hi, lo, at(j + 2), d, w2);
    RowF32(hi, lo, at(j + 3), d, w3);
    double s0 = 0, s1 = 0, s2 = 0, s3 = 0;
    for (size_t i = 0; i < d; i++) {
      const double x = h[i];
      s0 += x * w0[i];
      s1 += x * w1[i];
      s2 += x * w2[i];
      s3 += x * w3[i];
    }
    out[j] = s0, out[j + 1] = s1, out[j + 2] = s2, out[j + 3] = s3;
  }
  for (; j < n; j++) {
    RowF32(hi, lo, at(j), d, w0);
    double s = 0;
    for (size_t i = 0; i < d; i++) s += static_cast<double>(h[i]) * w0[i];
    out[j] = s;
  }
}

struct Candidate {
  uint32_t v;
  float upper;  // s~ + E
};

// One batch row's screen over one share of the vocabulary.
struct Screen {
  float lower = -std::numeric_limits<float>::infinity();  // the largest s~ - E seen
  std::vector<Candidate> list;
  size_t cap = 64;

  void Add(uint32_t v, float upper) {
    if (list.size() >= cap) {
      // Drop the candidates the maximum has passed since they were kept (in order, so the list stays sorted by v).
      list.erase(std::remove_if(list.begin(), list.end(), [&](const Candidate& c) { return c.upper < lower; }),
                 list.end());
      if (list.size() > cap / 2) cap *= 2;
    }
    list.push_back({v, upper});
  }
};

// Each screened row's share of its bounds: E = hn |w_v| + abs.
struct Bounds {
  std::vector<float> hn;   // 1.25 k
  std::vector<float> abs;  // 2a, with max_v |w_v| for |w|
};

// The scalar epilogue: tile scores s[bi * 4 + vi] of rows r0 + bi and vocabulary v0 + vi.
inline void EpilogueScalar(const float* s, size_t r0, size_t nb, size_t v0, size_t nv, const float* norms,
                           const Bounds& bounds, Screen* screens) {
  for (size_t bi = 0; bi < nb; bi++) {
    Screen& sc = screens[r0 + bi];
    float upper[kTileV];
    for (size_t vi = 0; vi < nv; vi++) {
      const float e = bounds.hn[r0 + bi] * norms[v0 + vi] + bounds.abs[r0 + bi];
      upper[vi] = s[bi * kTileV + vi] + e;
      sc.lower = std::max(sc.lower, s[bi * kTileV + vi] - e);
    }
    for (size_t vi = 0; vi < nv; vi++) {
      if (!(upper[vi] < sc.lower)) sc.Add(static_cast<uint32_t>(v0 + vi), upper[vi]);
    }
  }
}

// How many vocabulary rows ahead the vector screens prefetch: kPrefetchBytes, at least the next tile.
inline size_t PrefetchRows(size_t d) {
  return std::max<size_t>(1, kPrefetchBytes / (kTileV * d * sizeof(uint16_t))) * kTileV;
}

// Asks for n bfloat16 values from p on into the cache while the current tile computes: the
// hardware prefetcher alone leaves the stream of vocabulary rows waiting on memory between tiles.
// Locality 3 fills L1, 2 stops at L2. The portable and AVX2 screens ask into L2 from far ahead:
// into L1 from near, all at once, the requests outran the L1's outstanding misses (measured on
// Zen 4: 28 ms against 20 ms for 16 rows over a 128,256 × 512 head); AMX asks for its next pass
// into L1, as it reads whole tiles. The AVX-512 lanes spread their requests over the steps
// (LaneScores).
template <int Locality>
inline void Prefetch(const uint16_t* p, size_t n) {
  const char* c = reinterpret_cast<const char*>(p);
  for (size_t off = 0; off < n * sizeof(uint16_t); off += 64) __builtin_prefetch(c + off, 0, Locality);
}

// Portable scores: float32 lanes over the bfloat16 values. hf holds the screened rows
// rounded to bfloat16 and widened to float32, wf four vocabulary rows widened the
// same way, each padded with zeros to dp floats; s[bi * 4 + vi] for NB rows.
template <size_t NB>
inline __attribute__((always_inline)) void TileLanes(const float* hf, const float* wf, size_t dp, float* s) {
  float acc[NB][kTileV][8] = {};
  for (size_t k = 0; k < dp; k += 8) {
    for (size_t bi = 0; bi < NB; bi++) {
      for (size_t vi = 0; vi < kTileV; vi++) {
        for (size_t l = 0; l < 8; l++) acc[bi][vi][l] += hf[bi * dp + k + l] * wf[vi * dp + k + l];
      }
    }
  }
  for (size_t bi = 0; bi < NB; bi++) {
    for (size_t vi = 0; vi < kTileV; vi++) {
      const float* a = acc[bi][vi];
      s[bi * kTileV + vi] = ((a[0] + a[4]) + (a[1] + a[5])) + ((a[2] + a[6]) + (a[3] + a[7]));
    }
  }
}

constexpr size_t kLaneRows = 2;  // batch rows per portable micro-tile (their accumulators fill the vector registers)

// One share [v_begin, v_end) of the vocabulary for every screened row, portable lanes: each
// group of four vocabulary rows widened once, then run against the batch rows two by two.
template <typename Pair>
inline __attribute__((always_inline)) void ScreenLanesBody(const float* hf, size_t dp, size_t rows, size_t d,
                                                           const uint16_t* bf16, const float* norms, size_t v_begin,
                                                           size_t v_end, const Bounds& bounds, Screen* screens,
                                                           Pair pair) {
  float s[kTileB * kTileV];
  std::vector<float> wf(kTileV * dp, 0.0f);
  const size_t ahead = PrefetchRows(d);
  for (size_t v0 = v_begin; v0 < v_end; v0 += kTileV) {
    const size_t nv = std::min(kTileV, v_end - v0);
    if (v0 + kTileV + ahead <= v_end) Prefetch<2>(bf16 + (v0 + ahead) * d, kTileV * d);
    for (size_t vi = 0; vi < kTileV; vi++) {
      const uint16_t* row = bf16 + (v0 + std::min(vi, nv - 1)) * d;
      for (size_t i = 0; i < d; i++) wf[vi * dp + i] = Bf16ToF32(row[i]);
    }
    for (size_t r0 = 0; r0 < rows; r0 += kLaneRows) {
      const size_t nb = std::min(kLaneRows, rows - r0);
      if (nb == kLaneRows) pair(hf + r0 * dp, wf.data(), dp, s);
      else TileLanes<1>(hf + r0 * dp, wf.data(), dp, s);
      EpilogueScalar(s, r0, nb, v0, nv, norms, bounds, screens);
    }
  }
}

void ScreenLanes(const float* hf, size_t dp, size_t rows, size_t d, const uint16_t* bf16, const float* norms,
                 size_t v_begin, size_t v_end, const Bounds& bounds, Screen* screens) {
  ScreenLanesBody(hf, dp, rows, d, bf16, norms, v_begin, v_end, bounds, screens, TileLanes<kLaneRows>);
}

#ifdef HSM_X86
// TileLanes<2> in AVX2 registers: eight accumulators, a multiply and an add per product.
__attribute__((target("avx2"))) inline void PairAvx2(const float* hf, const float* wf, size_t dp, float* s) {
  __m256 a00 = _mm256_setzero_ps(), a01 = _mm256_setzero_ps(), a02 = _mm256_setzero_ps(), a03 = _mm256_setzero_ps();
  __m256 a10 = _mm256_setzero_ps(), a11 = _mm256_setzero_ps(), a12 = _mm256_setzero_ps(), a13 = _mm256_setzero_ps();
  for (size_t k = 0; k < dp; k += 8) {
    const __m256 w0 = _mm256_loadu_ps(wf + k), w1 = _mm256_loadu_ps(wf + dp + k);
    const __m256 w2 = _mm256_loadu_ps(wf + 2 * dp + k), w3 = _mm256_loadu_ps(wf + 3 * dp + k);
    const __m256 h0 = _mm256_loadu_ps(hf + k), h1 = _mm256_loadu_ps(hf + dp + k);
    a00 = _mm256_add_ps(a00, _mm256_mul_ps(h0, w0)), a01 = _mm256_add_ps(a01, _mm256_mul_ps(h0, w1)),
    a02 = _mm256_add_ps(a02, _mm256_mul_ps(h0, w2)), a03 = _mm256_add_ps(a03, _mm256_mul_ps(h0, w3));
    a10 = _mm256_add_ps(a10, _mm256_mul_ps(h1, w0)), a11 = _mm256_add_ps(a11, _mm256_mul_ps(h1, w1)),
    a12 = _mm256_add_ps(a12, _mm256_mul_ps(h1, w2)), a13 = _mm256_add_ps(a13, _mm256_mul_ps(h1, w3));
  }
  // Eight horizontal sums at once: lane bi * 4 + vi.
  const __m256 u0 = _mm256_hadd_ps(_mm256_hadd_ps(a00, a01), _mm256_hadd_ps(a02, a03));
  const __m256 u1 = _mm256_hadd_ps(_mm256_hadd_ps(a10, a11), _mm256_hadd_ps(a12, a13));
  _mm256_storeu_ps(s, _mm256_add_ps(_mm256_permute2f128_ps(u0, u1, 0x20), _mm256_permute2f128_ps(u0, u1, 0x31)));
}

__attribute__((target("avx2"))) void ScreenLanesAvx2(const float* hf, size_t dp, size_t rows, size_t d,
                                                     const uint16_t* bf16, const float* norms, size_t v_begin,
                                                     size_t v_end, const Bounds& bounds, Screen* screens) {
  ScreenLanesBody(hf, dp, rows, d, bf16, norms, v_begin, v_end, bounds, screens, PairAvx2);
}

// GCC 12's AVX-512 headers start unmasked shuffles from _mm512_undefined_ps(), which
// -Wmaybe-uninitialized reports once they are inlined; every lane here is written.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

// Sixteen float32 lanes in memory, aligned for one vector load.
struct alignas(64) Lanes {
  float x[16];
};

#define HSM_BF16_TARGET __attribute__((target("avx512f,avx512bw,avx512bf16")))

// The screened rows of h (screened[r] for row r) rounded to bfloat16 as the dot products read
// them, in pairs along d with the rows across: group g of 16 rows, pair k, row n at
// ((g * dh + k) * 16 + n) for dh = ceil(d / 2) pairs, the pair's first value in the low half;
// rows past the last, and the value after an odd d's last, are zero.
constexpr size_t kGroup = 16;  // screened rows a group (a vector's float32 lanes, a tile's rows)

std::vector<uint32_t> PairedRows(const float* h, const std::vector<size_t>& screened, size_t d) {
  const size_t rows = screened.size(), groups = (rows + kGroup - 1) / kGroup, dh = (d + 1) / 2;
  std::vector<uint32_t> hv(groups * dh * kGroup, 0);
  for (size_t r = 0; r < rows; r++) {
    const float* row = h + screened[r] * d;
    uint32_t* out = hv.data() + (r / kGroup) * dh * kGroup + r % kGroup;
    for (size_t i = 0; i < d; i++) out[i / 2 * kGroup] |= static_cast<uint32_t>(Bf16(row[i])) << (16 * (i % 2));
  }
  return hv;
}

// The screen on AVX-512 BF16 dot products, the screened rows across the lanes: each VDPBF16PS
// multiplies one pair of a vocabulary row's values, broadcast, by the same pair of 16 screened
// rows, so lane n holds row n's score of that vocabulary row, summed over dh steps of two
// roundings each: d roundings in all (d + 1 for an odd d, whose last pair holds a zero), within
// the n = d + 64 of the bound above, and no lanes to add up. kLaneVocab vocabulary rows are
// scored at once, each in an accumulator of its own; the bound's terms for all 16 rows are one
// vector too, and the running maximum of s~ - E stays in a register across the vocabulary.
constexpr size_t kLaneVocab = 12;  // vocabulary rows scored at once

// acc[r] = the scores of vocabulary row w + r * d against one group of screened rows (g). With
// `next`, the R rows after these (R * d values from next on) are asked into L1 while they compute,
// a few cache lines each step, spread evenly over the steps: asked for all at once, far ahead and
// into L2, the requests came in bursts the memory could not keep up with, and the screen waited on
// its rows between tiles (measured on Zen 5: 13.6 ms against 9.1 ms for 16 rows over a
// 128,256 × 512 head).
template <size_t R>
HSM_BF16_TARGET inline void LaneScores(const uint32_t* g, const uint16_t* w, size_t d, __m512* acc,
                                       const uint16_t* next = nullptr) {
  const size_t full = d / 2;
  const char* line = reinterpret_cast<const char*>(next);
  const size_t lines = next ? (R * d * sizeof(uint16_t) + 63) / 64 : 0;
  size_t owed = 0;  // lines * k, less full for each line asked for so far
  // In registers of their own: stored through acc, every step would write them out.
  __m512 a[R];
  for (size_t r = 0; r < R; r++) a[r] = _mm512_setzero_ps();
  for (size_t k = 0; k < full; k++) {
    for (owed += lines; owed >= full; owed -= full, line += 64) __builtin_prefetch(line, 0, 3);
    const __m512bh x = (__m512bh)_mm512_loadu_si512(g + k * kGroup);
#pragma GCC unroll 16
    for (size_t r = 0; r < R; r++) {
      const __m512bh pair = (__m512bh)_mm512_broadcastd_epi32(_mm_loadu_si32(w + r * d + 2 * k));
      a[r] = _mm512_dpbf16_ps(a[r], pair, x);
    }
  }
  if (d % 2 != 0) {
    // An odd d's last value, paired with zero (the row after it is not this row's).
    const __m512bh x = (__m512bh)_mm512_loadu_si512(g + full * kGroup);
    for (size_t r = 0; r < R; r++) a[r] = _mm512_dpbf16_ps(a[r], (__m512bh)_mm512_set1_epi32(w[r * d + d - 1]), x);
  }
  for (size_t r = 0; r < R; r++) acc[r] = a[r];
}

// Per group of screened rows, what the epilogue reads: the bound's terms and the running maximum.
struct LaneGroup {
  Lanes hn, abs, lower;
  __mmask16 valid;
};

// The groups of `rows` screened rows, from their bounds and their running maxima so far.
std::vector<LaneGroup> LaneGroups(size_t rows, const Bounds& bounds, const Screen* screens) {
  std::vector<LaneGroup> lg((rows + kGroup - 1) / kGroup);
  for (size_t g = 0; g < lg.size(); g++) {
    for (size_t j = 0; j < kGroup; j++) {
      const size_t r = g * kGroup + j;
      lg[g].hn.x[j] = r < rows ? bounds.hn[r] : 0;
      lg[g].abs.x[j] = r < rows ? bounds.abs[r] : 0;
      lg[g].lower.x[j] = r < rows ? screens[r].lower : -std::numeric_limits<float>::infinity();
    }
    lg[g].valid = static_cast<__mmask16>((uint32_t{1} << std::min(kGroup, rows - g * kGroup)) - 1);
  }
  return lg;
}

// Each screened row's running maximum back from its group.
void StoreLower(const std::vector<LaneGroup>& lg, size_t rows, Screen* screens) {
  for (size_t r = 0; r < rows; r++) screens[r].lower = lg[r / kGroup].lower.x[r % kGroup];
}

// One vocabulary row v's scores s of a group of screened rows (lanes past its rows off in `valid`):
// the bound, the running maximum of s~ - E, and the candidates that may still win, into screens
// (the group's first row's).
HSM_BF16_TARGET inline void LaneCandidates(__m512 s, size_t v, float norm, __m512 hn, __m512 abs, __mmask16 valid,
                                           __m512& lower, Screen* screens) {
  const __m512 neg_inf = _mm512_set1_ps(-std::numeric_limits<float>::infinity());
  const __m512 e = _mm512_fmadd_ps(hn, _mm512_set1_ps(norm), abs);
  const __m512 up = _mm512_add_ps(s, e);
  lower = _mm512_max_ps(lower, _mm512_mask_sub_ps(neg_inf, valid, s, e));
  uint32_t keep = _mm512_mask_cmp_ps_mask(valid, up, lower, _CMP_NLT_UQ);
  if (keep == 0) return;
  alignas(64) float ups[16], lows[16];
  _mm512_store_ps(ups, up);
  _mm512_store_ps(lows, lower);
  for (; keep != 0; keep &= keep - 1) {
    const unsigned j = static_cast<unsigned>(__builtin_ctz(keep));
    screens[j].lower = lows[j];
    screens[j].Add(static_cast<uint32_t>(v), ups[j]);
  }
}

// The screen's epilogue for R scored vocabulary rows from v of one group (rows r0…).
template <size_t R>
HSM_BF16_TARGET inline void LaneEpilogue(const __m512* acc, size_t v, const float* norms, LaneGroup& lg, size_t r0,
                                         Screen* screens) {
  const __m512 hn = _mm512_load_ps(lg.hn.x), abs = _mm512_load_ps(lg.abs.x);
  __m512 lower = _mm512_load_ps(lg.lower.x);
  for (size_t r = 0; r < R; r++) LaneCandidates(acc[r], v + r, norms[v + r], hn, abs, lg.valid, lower, screens + r0);
  _mm512_store_ps(lg.lower.x, lower);
}

HSM_BF16_TARGET void ScreenBf16(const uint32_t* hv, size_t rows, size_t d, const uint16_t* bf16, const float* norms,
                                size_t v_begin, size_t v_end, const Bounds& bounds, Screen* screens) {
  const size_t dh = (d + 1) / 2;
  std::vector<LaneGroup> lg = LaneGroups(rows, bounds, screens);
  __m512 acc[kLaneVocab];
  size_t v = v_begin;
  for (; v + kLaneVocab <= v_end; v += kLaneVocab) {
    // The next tile's rows, asked for during the first group's steps.
    const uint16_t* next = v + 2 * kLaneVocab <= v_end ? bf16 + (v + kLaneVocab) * d : nullptr;
    for (size_t g = 0; g < lg.size(); g++) {
      LaneScores<kLaneVocab>(hv + g * dh * kGroup, bf16 + v * d, d, acc, g == 0 ? next : nullptr);
      LaneEpilogue<kLaneVocab>(acc, v, norms, lg[g], g * kGroup, screens);
    }
  }
  for (; v < v_end; v++) {
    for (size_t g = 0; g < lg.size(); g++) {
      LaneScores<1>(hv + g * dh * kGroup, bf16 + v * d, d, acc);
      LaneEpilogue<1>(acc, v, norms, lg[g], g * kGroup, screens);
    }
  }
  StoreLower(lg, rows, screens);
}

// The same screen on AMX tiles, for d a whole number of 32-value steps: TDPBF16PS multiplies 16
// vocabulary rows (read in place, 32 values a tile row) by 16 pairs of 16 screened rows, each
// product exact in float32 and summed in float32 with subnormals read as zero and flushed, as
// VDPBF16PS does. Each score passes through d roundings, within the n = d + 64 of the bound above,
// so the bound holds as it stands. Tiles 0-3 accumulate 32 vocabulary rows (tiles 4-5) against
// two groups of 16 screened rows (tiles 6-7).
constexpr size_t kAmxVocab = 32;  // vocabulary rows a pass
constexpr size_t kAmxPairs = 16;  // pairs along d a tile step

#define HSM_AMX_TARGET __attribute__((target("amx-tile,amx-bf16,avx512f,avx512bw,avx512bf16")))

// Tiles 0-1 (and 2-3 with Two) += vocabulary rows a0, a1 (16 each, d apart) times group g (and g + 1).
template <bool Two>
HSM_AMX_TARGET inline void AmxPass(const uint16_t* a0, const uint16_t* a1, const uint32_t* g, size_t d) {
  const size_t dh = d / 2, row_bytes = d * sizeof(uint16_t);
  for (size_t k = 0; k < dh; k += kAmxPairs) {
    _tile_loadd(4, a0 + 2 * k, row_bytes);
    _tile_loadd(5, a1 + 2 * k, row_bytes);
    _tile_loadd(6, g + k * kGroup, 64);
    _tile_dpbf16ps(0, 4, 6);
    _tile_dpbf16ps(1, 5, 6);
    if constexpr (Two) {
      _tile_loadd(7, g + (dh + k) * kGroup, 64);
      _tile_dpbf16ps(2, 4, 7);
      _tile_dpbf16ps(3, 5, 7);
    }
  }
}

// ScreenBf16 over [v_begin, end) on tiles, for the returned end: v_begin plus a whole number of
// passes; the rest of [v_begin, v_end) is left to ScreenBf16.
HSM_AMX_TARGET size_t ScreenAmx(const uint32_t* hv, size_t rows, size_t d, const uint16_t* bf16, const float* norms,
                                size_t v_begin, size_t v_end, const Bounds& bounds, Screen* screens) {
  const size_t groups = (rows + kGroup - 1) / kGroup, dh = d / 2;
  const size_t end = v_begin + (v_end - v_begin) / kAmxVocab * kAmxVocab;
  if (end == v_begin) return end;
  std::vector<LaneGroup> lg = LaneGroups(rows, bounds, screens);
  alignas(64) float scores[4][kGroup * 16];
  AmxTiles tiles;
  for (size_t v0 = v_begin; v0 < end; v0 += kAmxVocab) {
    const uint16_t* a0 = bf16 + v0 * d;
    // The next pass's rows, one contiguous block, asked for while this one computes.
    if (v0 + 2 * kAmxVocab <= end) Prefetch<3>(a0 + kAmxVocab * d, kAmxVocab * d);
    for (size_t g0 = 0; g0 < groups; g0 += 2) {
      const bool two = g0 + 1 < groups;
      _tile_zero(0);
      _tile_zero(1);
      if (two) {
        _tile_zero(2);
        _tile_zero(3);
        AmxPass<true>(a0, a0 + 16 * d, hv + g0 * dh * kGroup, d);
        _tile_stored(2, scores[2], 64);
        _tile_stored(3, scores[3], 64);
      } else {
        AmxPass<false>(a0, a0 + 16 * d, hv + g0 * dh * kGroup, d);
      }
      _tile_stored(0, scores[0], 64);
      _tile_stored(1, scores[1], 64);
      for (size_t q = 0; q < (two ? 2u : 1u); q++) {
        const size_t g = g0 + q;
        const __m512 hnv = _mm512_load_ps(lg[g].hn.x), absv = _mm512_load_ps(lg[g].abs.x);
        __m512 low = _mm512_load_ps(lg[g].lower.x);
        // Vocabulary rows in order (panel 0, then panel 1), so that each row's list stays sorted by v.
        for (size_t i = 0; i < kAmxVocab; i++) {
          const size_t v = v0 + i;
          const __m512 sv = _mm512_load_ps(scores[2 * q + i / 16] + (i % 16) * 16);
          LaneCandidates(sv, v, norms[v], hnv, absv, lg[g].valid, low, screens + g * kGroup);
        }
        _mm512_store_ps(lg[g].lower.x, low);
      }
    }
  }
  StoreLower(lg, rows, screens);
  return end;
}
#pragma GCC diagnostic pop
#endif

// The best (value, v) so far of one row: NaN never taken, ties kept at the lower v.
struct Best {
  double value = 0;
  int64_t v = -1;
  void Offer(double s, int64_t at) {
    if (!std::isnan(s) && (v < 0 || s > value)) value = s, v = at;
  }
};

}  // namespace

void PrepareHead(const float* w, size_t d, size_t vocab, uint16_t* hi, uint16_t* lo, float* norms, int threads) {
  constexpr size_t kBlock = 16;  // vocabulary columns transposed together: one cache line of each W row
  Shares((vocab + kBlock - 1) / kBlock, threads, [&](size_t b0, size_t b1) {
    const size_t v_end = std::min(vocab, b1 * kBlock);
    for (size_t v0 = b0 * kBlock; v0 < v_end; v0 += kBlock) {
      const size_t nv = std::min(kBlock, v_end - v0);
      for (size_t i = 0; i < d; i++) {
        const float* src = w + i * vocab + v0;
        for (size_t j = 0; j < nv; j++) {
          uint32_t u;
          std::memcpy(&u, src + j, 4);
          hi[(v0 + j) * d + i] = static_cast<uint16_t>(u >> 16);
          lo[(v0 + j) * d + i] = static_cast<uint16_t>(u);
        }
      }
      std::vector<float> row(d);
      for (size_t v = v0; v < v0 + nv; v++) {
        RowF32(hi, lo, v, d, row.data());
        double ss = 0;
        for (size_t i = 0; i < d; i++) ss += static_cast<double>(row[i]) * row[i];
        norms[v] = static_cast<float>(std::sqrt(ss));
      }
    }
  });
}

uint64_t HeadArgmax(const float* h, size_t batch, size_t d, const uint16_t* hi, const uint16_t* lo, const float* norms,
                    size_t vocab, int32_t* out, int threads, bool allow_bf16) {
  if (batch == 0) return 0;
  if (vocab == 0 || d == 0) {
    // No vocabulary: nothing to choose; no features: every logit is 0 and the first wins.
    std::fill(out, out + batch, 0);
    return 0;
  }
  // Which rows can be screened (see the bound above), and their bounds.
  double max_norm = 0;
  bool norms_ok = d <= (size_t{1} << 20);
  for (size_t v = 0; v < vocab && norms_ok; v++) {
    if (!(norms[v] <= 0x1p120)) norms_ok = false;
    max_norm = std::max(max_norm, static_cast<double>(norms[v]));
  }
  const double u = 0x1p-8, t = 0x1p-126, n = static_cast<double>(d) + 64;
  const double g = n * 0x1p-24 / (1 - n * 0x1p-24);
  const double c = 2 * u + g * (1 + u) * (1 + u) + 1.01 * static_cast<double>(d) * 0x1p-53;
  std::vector<size_t> screened;
  std::vector<uint8_t> exact_rows(batch, 1);
  Bounds bounds;
  for (size_t b = 0; b < batch && norms_ok; b++) {
    const float* row = h + b * d;
    double ss = 0, ee = 0;
    bool finite = true;
    for (size_t i = 0; i < d; i++) {
      finite = finite && std::isfinite(row[i]);
      ss += static_cast<double>(row[i]) * row[i];
      const double e = static_cast<double>(Bf16ToF32(Bf16(row[i]))) - row[i];  // exact
      ee += e * e;
    }
    const double hn = std::sqrt(ss);
    if (!finite || !(hn <= 0x1p120) || !(hn * max_norm <= 0x1p100)) continue;
    exact_rows[b] = 0;
    screened.push_back(b);
    bounds.hn.push_back(static_cast<float>(1.25 * ((1 + u) * std::sqrt(ee) + c * hn)));
    bounds.abs.push_back(static_cast<float>(
        2 * t * (3 * std::sqrt(static_cast<double>(d)) * (hn + max_norm) + 3 * static_cast<double>(d) + 3 * n)));
  }
  const size_t rows = screened.size();
  // The shares of the vocabulary, fixed for both passes.
  const size_t nt = std::max<size_t>(1, std::min<size_t>(static_cast<size_t>(std::max(1, threads)), vocab));
  std::vector<std::vector<Screen>> screens(nt, std::vector<Screen>(rows));
  if (rows > 0) {
#ifdef HSM_X86
    const bool use_bf16 = allow_bf16 && HasAvx512Bf16() && HasAvx512Bw();
#else
    const bool use_bf16 = false;
#endif
    // AMX reads the vocabulary rows in place, 32 values a step, so d must be a whole number of steps.
#ifdef HSM_X86
    const bool use_amx = use_bf16 && HasAmxBf16() && d % 32 == 0;
#endif
    // For the portable lanes, the screened rows rounded to bfloat16 and widened back, zero-padded
    // to whole 32-value steps.
    const size_t dp = (d + 31) / 32 * 32;
    std::vector<float> hf;
    if (!use_bf16) {
      hf.assign(rows * dp, 0.0f);
      for (size_t r = 0; r < rows; r++) {
        const float* row = h + screened[r] * d;
        for (size_t i = 0; i < d; i++) hf[r * dp + i] = Bf16ToF32(Bf16(row[i]));
      }
    }
#ifdef HSM_X86
    const std::vector<uint32_t> hv = use_bf16 ? PairedRows(h, screened, d) : std::vector<uint32_t>();
#endif
    Shares(nt, static_cast<int>(nt), [&](size_t t0, size_t t1) {
      for (size_t s = t0; s < t1; s++) {
        size_t v_begin = vocab * s / nt;
        const size_t v_end = vocab * (s + 1) / nt;
#ifdef HSM_X86
        if (use_amx) v_begin = ScreenAmx(hv.data(), rows, d, hi, norms, v_begin, v_end, bounds, screens[s].data());
        if (use_bf16) ScreenBf16(hv.data(), rows, d, hi, norms, v_begin, v_end, bounds, screens[s].data());
        else if (HasAvx2())
          ScreenLanesAvx2(hf.data(), dp, rows, d, hi, norms, v_begin, v_end, bounds, screens[s].data());
        else
#endif
          ScreenLanes(hf.data(), dp, rows, d, hi, norms, v_begin, v_end, bounds, screens[s].data());
      }
    });
  }
  // Each screened row's bar over the whole vocabulary, then the survivors (and every v of the
  // rows that were not screened) exactly, share by share.
  std::vector<float> bar(rows, -std::numeric_limits<float>::infinity());
  for (size_t s = 0; s < nt; s++) {
    for (size_t r = 0; r < rows; r++) bar[r] = std::max(bar[r], screens[s][r].lower);
  }
  std::vector<Best> best(nt * batch);
  std::vector<uint64_t> dots(nt, 0);
  Shares(nt, static_cast<int>(nt), [&](size_t t0, size_t t1) {
    std::vector<uint32_t> vs;
    std::vector<double> logits;
    for (size_t s = t0; s < t1; s++) {
      const size_t v_begin = vocab * s / nt, v_end = vocab * (s + 1) / nt;
      for (size_t r = 0; r < rows; r++) {
        const size_t b = screened[r];
        vs.clear();
        for (const Candidate& cand : screens[s][r].list) {
          if (!(cand.upper < bar[r])) vs.push_back(cand.v);
        }
        logits.resize(vs.size());
        Dots(
            h + b * d, d, hi, lo, vs.size(), [&](size_t j) { return static_cast<size_t>(vs[j]); }, logits.data());
        for (size_t j = 0; j < vs.size(); j++) best[s * batch + b].Offer(logits[j], vs[j]);
        dots[s] += vs.size();
      }
      for (size_t b = 0; b < batch; b++) {
        if (!exact_rows[b]) continue;
        logits.resize(v_end - v_begin);
        Dots(
            h + b * d, d, hi, lo, v_end - v_begin, [&](size_t j) { return v_begin + j; }, logits.data());
        for (size_t v = v_begin; v < v_end; v++)
          best[s * batch + b].Offer(logits[v - v_begin], static_cast<int64_t>(v));
        dots[s] += v_end - v_begin;
      }
    }
  });
  uint64_t total = 0;
  for (size_t s = 0; s < nt; s++) total += dots[s];
  for (size_t b = 0; b < batch; b++) {
    Best all;
    // Shares in vocabulary order, so that an equal value later keeps the lower v.
    for (size_t s = 0; s < nt; s++) {
      const Best& bb = best[s * batch + b];
      if (bb.v >= 0) all.Offer(bb.value, bb.v);
    }
    out[b] = static_cast<int32_t>(all.v < 0 ? 0 : all.v);
  }
  return total;
}

}  // namespace hsm
