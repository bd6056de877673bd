#include "bootstrap.h"

#include "cpu.h"
#include "threads.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

namespace hsm {
namespace {

inline uint32_t Rotl(uint32_t x, int k) { return (x << k) | (x >> (32 - k)); }

// One step of the xoshiro128** state, without the output. Every operation is
// an exclusive-or, shift or rotation, so a step is a linear map of the 128
// state bits over GF(2).
inline void Step(uint32_t s[4]) {
  const uint32_t t = s[1] << 9;
  s[2] ^= s[0];
  s[3] ^= s[1];
  s[1] ^= s[2];
  s[0] ^= s[3];
  s[2] ^= t;
  s[3] = Rotl(s[3], 11);
}

// The step map raised to the powers 2^0 … 2^(kJumpBits − 1), each as its 128
// columns (the images of the unit states), so that a thread can start its
// share of the replicates where the one sequential stream would be.
constexpr int kJumpBits = 48;
struct JumpTable {
  uint32_t col[kJumpBits][128][4];
  JumpTable() {
    for (int j = 0; j < 128; j++) {
      uint32_t s[4] = {0, 0, 0, 0};
      s[j / 32] = 1u << (j % 32);
      Step(s);
      std::copy(s, s + 4, col[0][j]);
    }
    for (int p = 1; p < kJumpBits; p++) {
      for (int j = 0; j < 128; j++) Apply(p - 1, col[p - 1][j], col[p][j]);
    }
  }
  // out = (step map)^(2^p) applied to v.
  void Apply(int p, const uint32_t v[4], uint32_t out[4]) const {
    uint32_t r[4] = {0, 0, 0, 0};
    for (int j = 0; j < 128; j++) {
      if ((v[j / 32] >> (j % 32)) & 1u) {
        for (int w = 0; w < 4; w++) r[w] ^= col[p][j][w];
      }
    }
    std::copy(r, r + 4, out);
  }
};

const JumpTable& Jumps() {
  static const JumpTable* table = new JumpTable();
  return *table;
}

// Twin of class Rng in src/util/random.ts.
class Rng {
 public:
  Rng(uint32_t seed, uint32_t stream) {
    uint32_t s = seed ^ ((stream + 1u) * 0x9e3779b9u);
    auto next = [&s]() {
      s += 0x9e3779b9u;
      uint32_t z = s;
      z = (z ^ (z >> 16)) * 0x85ebca6bu;
      z = (z ^ (z >> 13)) * 0xc2b2ae35u;
      return z ^ (z >> 16);
    };
    a_ = next();
    b_ = next();
    c_ = next();
    d_ = next();
    if ((a_ | b_ | c_ | d_) == 0) a_ = 1;
  }
  uint32_t U32() {
    const uint32_t result = Rotl(b_ * 5u, 7) * 9u;
    const uint32_t t = b_ << 9;
    c_ ^= a_;
    d_ ^= b_;
    b_ ^= c_;
    a_ ^= d_;
    c_ ^= t;
    d_ = Rotl(d_, 11);
    return result;
  }
  // Math.floor((u32 / 2^32) * n) as TypeScript computes it. Below 2^21 items the
  // product u32 * n fits a double's 53 bits, so the double result is exact and
  // equals the integer multiply-shift; above, the double arithmetic is repeated.
  size_t Int(size_t n) {
    const uint32_t u = U32();
    if (n < (size_t{1} << 21)) return static_cast<size_t>((static_cast<uint64_t>(u) * n) >> 32);
    return static_cast<size_t>(static_cast<int64_t>(static_cast<double>(u) * 0x1p-32 * static_cast<double>(n)));
  }
  // The four state words, for lanes that run this generator's steps side by side.
  void State(uint32_t out[4]) const { out[0] = a_, out[1] = b_, out[2] = c_, out[3] = d_; }

  // The generator as it will be after `steps` more draws (each draw is one step).
  void Skip(uint64_t steps) {
    uint32_t s[4] = {a_, b_, c_, d_};
    for (int p = 0; steps != 0 && p < kJumpBits; p++, steps >>= 1) {
      if (steps & 1) Jumps().Apply(p, s, s);
    }
    for (; steps != 0; steps--) Step(s);  // beyond 2^48 draws: not reached in practice
    a_ = s[0], b_ = s[1], c_ = s[2], d_ = s[3];
  }

 private:
  uint32_t a_, b_, c_, d_;
};

void Draw(Rng& rng, std::vector<int32_t>& counts) {
  // A local copy of the generator: the int32 stores below could alias its
  // uint32 state, which would force it through memory on every draw.
  Rng local = rng;
  const size_t n = counts.size();
  int32_t* c = counts.data();
  std::fill(c, c + n, 0);
  for (size_t i = 0; i < n; i++) c[local.Int(n)]++;
  rng = local;
}

// Threads worth starting for `work` draws-and-passes (a thread start costs tens of microseconds).
int ThreadsFor(size_t work, size_t b, int threads) {
  if (work < (size_t{1} << 18)) return 1;
  return static_cast<int>(std::max<size_t>(1, std::min<size_t>({static_cast<size_t>(std::max(1, threads)), b, 16})));
}

#if defined(__x86_64__)
// Sixteen replicates at once, each fact's count in each replicate (lane) held in a LaneTable.
// Each replicate's sums are whole numbers (or halves) far below 2^53, so every
// double operation is exact and each lane equals Auroc() on its own counts.
// (The masked conversions do what plain ones do, without GCC 12's false warning.)
constexpr size_t kLanes = 16;
// Below this many items a draw is the high half of a 32 x 32-bit product (Rng::Int).
constexpr size_t kLaneItems = size_t{1} << 21;
// Below this many items a replicate's counts are 16-bit: a count never exceeds the n draws. Half the bytes
// of 32-bit counts, so more of the table stays in cache while the draws scatter into it.
constexpr size_t kShortCountItems = size_t{1} << 16;
// The largest table of counts kept whole (LaneTable): about what the first-level data cache holds.
constexpr size_t kWholeTableBytes = size_t{64} << 10;

// The counts of n facts in sixteen lanes, n * 16 values of type C in one array: fact f's counts in lanes 0-7 at
// Lo(f), in lanes 8-15 at Hi(f). A small table is kept whole, each fact's sixteen lanes side by side. A larger one is
// kept in halves, lanes 0-7 of every fact and then lanes 8-15, and its draws are counted half by half (RngLanes): each
// step's places then scatter over half the bytes, which more often stay in cache (a third less time at 6,500 facts).
template <class C>
struct LaneTable {
  LaneTable(C* counts, size_t n)
      : stride(n * kLanes * sizeof(C) > kWholeTableBytes ? 8 : kLanes),
        lo(counts),
        hi(halves() ? counts + n * 8 : counts + 8) {}
  bool halves() const { return stride == 8; }
  C* Lo(size_t f) const { return lo + f * stride; }
  C* Hi(size_t f) const { return hi + f * stride; }
  size_t stride;
  C* lo;
  C* hi;
};

// Eight lanes' counts of one fact as doubles.
__attribute__((target("avx512f"))) inline __m512d EightCounts(const int32_t* c) {
  return _mm512_maskz_cvtepi32_pd(0xff, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(c)));
}
__attribute__((target("avx512f"))) inline __m512d EightCounts(const uint16_t* c) {
  return _mm512_maskz_cvtepi32_pd(0xff, _mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(c))));
}
// Sixteen lanes' counts of fact f as doubles, lanes 0-7 and 8-15.
template <class C>
__attribute__((target("avx512f"))) inline void LaneCounts(const LaneTable<C>& t, size_t f, __m512d& c0, __m512d& c1) {
  c0 = EightCounts(t.Lo(f));
  c1 = EightCounts(t.Hi(f));
}
// Four lanes' counts of one fact as doubles (AVX2).
__attribute__((target("avx2"))) inline __m256d QuarterCounts(const int32_t* c) {
  return _mm256_cvtepi32_pd(_mm_loadu_si128(reinterpret_cast<const __m128i*>(c)));
}
__attribute__((target("avx2"))) inline __m256d QuarterCounts(const uint16_t* c) {
  return _mm256_cvtepi32_pd(_mm_cvtepu16_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(c))));
}
// Lanes [4 q, 4 q + 4) of fact f as doubles (AVX2).
template <class C>
__attribute__((target("avx2"))) inline __m256d QuarterCounts(const LaneTable<C>& t, size_t f, int q) {
  return QuarterCounts(q < 2 ? t.Lo(f) + 4 * q : t.Hi(f) + 4 * (q - 2));
}

// Every lane where the row's label is 1, none where it is 0: the label selects the lanes an operation writes
// instead of a branch, which labels in score order mispredict often. Each lane then sees exactly the
// operations the branch would have done.
inline __mmask8 RowMask(uint8_t label) { return static_cast<__mmask8>(0u - static_cast<unsigned>(label != 0)); }

template <class C>
__attribute__((target("avx512f"))) void AurocLanes(const SortedGroup& g, const LaneTable<C>& weight, double* out) {
  const __m512d half = _mm512_set1_pd(0.5);
  __m512d nb0 = _mm512_setzero_pd(), nb1 = _mm512_setzero_pd();
  __m512d sp0 = _mm512_setzero_pd(), sp1 = _mm512_setzero_pd();
  __m512d w0 = _mm512_setzero_pd(), w1 = _mm512_setzero_pd();
  for (size_t t = 0; t < g.n_ties; t++) {
    const int32_t begin = g.ties[t], end = g.ties[t + 1];
    if (end - begin == 1) {
      // A score of its own: a positive row wins against every negative below it.
      __m512d c0, c1;
      LaneCounts(weight, static_cast<size_t>(g.fact[begin]), c0, c1);
      const __mmask8 positive = RowMask(g.label[begin]), negative = static_cast<__mmask8>(~positive);
      w0 = _mm512_mask3_fmadd_pd(c0, nb0, w0, positive);
      w1 = _mm512_mask3_fmadd_pd(c1, nb1, w1, positive);
      sp0 = _mm512_mask_add_pd(sp0, positive, sp0, c0);
      sp1 = _mm512_mask_add_pd(sp1, positive, sp1, c1);
      nb0 = _mm512_mask_add_pd(nb0, negative, nb0, c0);
      nb1 = _mm512_mask_add_pd(nb1, negative, nb1, c1);
      continue;
    }
    __m512d p0 = _mm512_setzero_pd(), p1 = _mm512_setzero_pd(), a0 = _mm512_setzero_pd(), a1 = _mm512_setzero_pd();
    for (int32_t i = begin; i < end; i++) {
      __m512d c0, c1;
      LaneCounts(weight, static_cast<size_t>(g.fact[i]), c0, c1);
      const __mmask8 positive = RowMask(g.label[i]);
      p0 = _mm512_mask_add_pd(p0, positive, p0, c0);
      p1 = _mm512_mask_add_pd(p1, positive, p1, c1);
      a0 = _mm512_add_pd(a0, c0);
      a1 = _mm512_add_pd(a1, c1);
    }
    const __m512d n0 = _mm512_sub_pd(a0, p0), n1 = _mm512_sub_pd(a1, p1);
    w0 = _mm512_fmadd_pd(p0, _mm512_fmadd_pd(n0, half, nb0), w0);
    w1 = _mm512_fmadd_pd(p1, _mm512_fmadd_pd(n1, half, nb1), w1);
    nb0 = _mm512_add_pd(nb0, n0);
    nb1 = _mm512_add_pd(nb1, n1);
    sp0 = _mm512_add_pd(sp0, p0);
    sp1 = _mm512_add_pd(sp1, p1);
  }
  alignas(64) double wins[kLanes], pos[kLanes], neg[kLanes];
  _mm512_store_pd(wins, w0);
  _mm512_store_pd(wins + 8, w1);
  _mm512_store_pd(pos, sp0);
  _mm512_store_pd(pos + 8, sp1);
  _mm512_store_pd(neg, nb0);
  _mm512_store_pd(neg + 8, nb1);
  for (size_t l = 0; l < kLanes; l++) {
    out[l] = pos[l] == 0 || neg[l] == 0 ? std::numeric_limits<double>::quiet_NaN() : wins[l] / (pos[l] * neg[l]);
  }
}

// AurocLanes with AVX2: the same sums, four lanes per vector, each operation unfused as Auroc() does it.
template <class C>
__attribute__((target("avx2"))) void AurocLanesAvx2(const SortedGroup& g, const LaneTable<C>& weight, double* out) {
  const __m256d half = _mm256_set1_pd(0.5);
  __m256d nb[4], sp[4], w[4];
  for (int q = 0; q < 4; q++) nb[q] = _mm256_setzero_pd(), sp[q] = _mm256_setzero_pd(), w[q] = _mm256_setzero_pd();
  for (size_t t = 0; t < g.n_ties; t++) {
    const int32_t begin = g.ties[t], end = g.ties[t + 1];
    __m256d p[4], a[4];
    for (int q = 0; q < 4; q++) p[q] = _mm256_setzero_pd(), a[q] = _mm256_setzero_pd();
    for (int32_t i = begin; i < end; i++) {
      const size_t f = static_cast<size_t>(g.fact[i]);
      for (int q = 0; q < 4; q++) {
        const __m256d cq = QuarterCounts(weight, f, q);
        if (g.label[i]) p[q] = _mm256_add_pd(p[q], cq);
        a[q] = _mm256_add_pd(a[q], cq);
      }
    }
    for (int q = 0; q < 4; q++) {
      const __m256d n = _mm256_sub_pd(a[q], p[q]);
      w[q] = _mm256_add_pd(w[q], _mm256_mul_pd(p[q], _mm256_add_pd(nb[q], _mm256_mul_pd(n, half))));
      nb[q] = _mm256_add_pd(nb[q], n);
      sp[q] = _mm256_add_pd(sp[q], p[q]);
    }
  }
  alignas(32) double wins[kLanes], pos[kLanes], neg[kLanes];
  for (int q = 0; q < 4; q++) {
    _mm256_store_pd(wins + 4 * q, w[q]);
    _mm256_store_pd(pos + 4 * q, sp[q]);
    _mm256_store_pd(neg + 4 * q, nb[q]);
  }
  for (size_t l = 0; l < kLanes; l++) {
    out[l] = pos[l] == 0 || neg[l] == 0 ? std::numeric_limits<double>::quiet_NaN() : wins[l] / (pos[l] * neg[l]);
  }
}

// Sixteen generators side by side, lane l the generator of one replicate: its
// state is the sequential stream's at that replicate's first draw, so lane l
// draws what Draw() would for it. Below 2^21 items Int(n) is the high half of
// u32 * n, which the even/odd 32 x 32 -> 64 multiplies give exactly.
class RngLanes {
 public:
  // Lane l starts `starts[l]` replicates of n draws after `rng`.
  RngLanes(const Rng& rng, const size_t* starts, size_t n) {
    for (size_t l = 0; l < kLanes; l++) {
      Rng lane = rng;
      lane.Skip(static_cast<uint64_t>(starts[l]) * n);
      uint32_t w[4];
      lane.State(w);
      for (int k = 0; k < 4; k++) s_[k][l] = w[k];
    }
  }

  // One replicate per lane: n draws of Int(n), each lane's counts added to `weight` (which the caller has zeroed).
  // A whole table is drawn sixteen lanes at a time where AVX-512 runs; a table in halves, or any table where only
  // AVX2 does, eight lanes at a time, half by half (DrawHalf).
  template <class C>
  void Draw(size_t n, const LaneTable<C>& weight) {
    if (HasAvx512() && !weight.halves()) return DrawWhole(n, weight.lo);
    DrawHalf(n, weight.lo, weight.stride, 0);
    DrawHalf(n, weight.hi, weight.stride, 8);
  }

 private:
  // Draw() for a whole table, weight[f * 16 + l] for fact f in lane l. A step's sixteen places go through memory
  // and are counted one step later, read back by plain loads while the next step is drawn; taken out of the
  // register one by one instead, they held every step up behind the extractions.
  template <class C>
  __attribute__((target("avx512f"))) void DrawWhole(size_t n, C* weight) {
    const __m512i lane = _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
    const __m512i nv = _mm512_set1_epi64(static_cast<long long>(n));
    const __m512i five = _mm512_set1_epi32(5), nine = _mm512_set1_epi32(9);
    __m512i a = _mm512_load_si512(s_[0]), b = _mm512_load_si512(s_[1]), c = _mm512_load_si512(s_[2]),
            d = _mm512_load_si512(s_[3]);
    alignas(64) int32_t at[2][kLanes];
    const auto count = [weight](const int32_t* places) {
      for (size_t l = 0; l < kLanes; l++) weight[places[l]]++;
    };
    // (The zero-masked forms do what the plain ones do, without GCC 12's false uninitialized warning.)
    constexpr __mmask16 all = 0xffff;
    constexpr __mmask8 all64 = 0xff;
    for (size_t i = 0; i < n; i++) {
      const __m512i u = _mm512_mullo_epi32(_mm512_maskz_rol_epi32(all, _mm512_mullo_epi32(b, five), 7), nine);
      const __m512i t = _mm512_maskz_slli_epi32(all, b, 9);
      c = _mm512_xor_si512(c, a);
      d = _mm512_xor_si512(d, b);
      b = _mm512_xor_si512(b, c);
      a = _mm512_xor_si512(a, d);
      c = _mm512_xor_si512(c, t);
      d = _mm512_maskz_rol_epi32(all, d, 11);
      const __m512i even = _mm512_maskz_srli_epi64(all64, _mm512_maskz_mul_epu32(all64, u, nv), 32);
      const __m512i odd = _mm512_maskz_mul_epu32(all64, _mm512_maskz_srli_epi64(all64, u, 32), nv);
      const __m512i item = _mm512_mask_blend_epi32(0xAAAA, even, odd);
      _mm512_store_si512(at[i & 1], _mm512_add_epi32(_mm512_maskz_slli_epi32(all, item, 4), lane));
      // Only a compiler barrier: it keeps the places in memory for count() to load.
      asm volatile("" ::: "memory");
      if (i > 0) count(at[(i - 1) & 1]);
    }
    if (n > 0) count(at[(n - 1) & 1]);
    _mm512_store_si512(s_[0], a);
    _mm512_store_si512(s_[1], b);
    _mm512_store_si512(s_[2], c);
    _mm512_store_si512(s_[3], d);
  }

  // Lanes [h, h + 8) with AVX2, the same steps and the same high halves: lane h + l's count of fact f at
  // counts[f * stride + l]. Counted a step late, as DrawWhole counts.
  template <class C>
  __attribute__((target("avx2"))) void DrawHalf(size_t n, C* counts, size_t stride, size_t h) {
    const __m256i nv = _mm256_set1_epi64x(static_cast<long long>(n));
    const __m256i five = _mm256_set1_epi32(5), nine = _mm256_set1_epi32(9);
    const __m256i lane = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
    const __m128i shift = _mm_cvtsi32_si128(stride == 8 ? 3 : 4);
    __m256i a = _mm256_load_si256(reinterpret_cast<const __m256i*>(s_[0] + h));
    __m256i b = _mm256_load_si256(reinterpret_cast<const __m256i*>(s_[1] + h));
    __m256i c = _mm256_load_si256(reinterpret_cast<const __m256i*>(s_[2] + h));
    __m256i d = _mm256_load_si256(reinterpret_cast<const __m256i*>(s_[3] + h));
    alignas(32) int32_t at[2][8];
    const auto count = [counts](const int32_t* places) {
      for (size_t l = 0; l < 8; l++) counts[places[l]]++;
    };
    for (size_t i = 0; i < n; i++) {
      const __m256i b5 = _mm256_mullo_epi32(b, five);
      const __m256i u = _mm256_mullo_epi32(_mm256_or_si256(_mm256_slli_epi32(b5, 7), _mm256_srli_epi32(b5, 25)), nine);
      const __m256i t = _mm256_slli_epi32(b, 9);
      c = _mm256_xor_si256(c, a);
      d = _mm256_xor_si256(d, b);
      b = _mm256_xor_si256(b, c);
      a = _mm256_xor_si256(a, d);
      c = _mm256_xor_si256(c, t);
      d = _mm256_or_si256(_mm256_slli_epi32(d, 11), _mm256_srli_epi32(d, 21));
      const __m256i even = _mm256_srli_epi64(_mm256_mul_epu32(u, nv), 32);
      const __m256i odd = _mm256_mul_epu32(_mm256_srli_epi64(u, 32), nv);
      const __m256i item = _mm256_blend_epi32(even, odd, 0xAA);
      _mm256_store_si256(reinterpret_cast<__m256i*>(at[i & 1]), _mm256_add_epi32(_mm256_sll_epi32(item, shift), lane));
      asm volatile("" ::: "memory");
      if (i > 0) count(at[(i - 1) & 1]);
    }
    if (n > 0) count(at[(n - 1) & 1]);
    _mm256_store_si256(reinterpret_cast<__m256i*>(s_[0] + h), a);
    _mm256_store_si256(reinterpret_cast<__m256i*>(s_[1] + h), b);
    _mm256_store_si256(reinterpret_cast<__m256i*>(s_[2] + h), c);
    _mm256_store_si256(reinterpret_cast<__m256i*>(s_[3] + h), d);
  }

  alignas(64) uint32_t s_[4][kLanes];
};

// Replicates [first, last) split into sixteen runs of consecutive replicates,
// one per lane; step t draws replicate t of every run at once. `rng` is at
// replicate `first`. fn(weight, replicate of each lane or -1) then reads the
// counts, a LaneTable<C>.
template <class C, typename Fn>
void LaneReplicates(Rng rng, size_t first, size_t last, size_t n, Fn fn) {
  const size_t count = last - first;
  size_t starts[kLanes], ends[kLanes];
  for (size_t l = 0; l < kLanes; l++) starts[l] = count * l / kLanes, ends[l] = count * (l + 1) / kLanes;
  RngLanes lanes(rng, starts, n);
  std::vector<C> counts(std::max<size_t>(n, 1) * kLanes);  // never empty: a table's halves point into it
  const LaneTable<C> weight(counts.data(), n);
  int64_t replicate[kLanes];
  for (size_t t = 0; t < (count + kLanes - 1) / kLanes; t++) {
    std::fill(counts.begin(), counts.end(), C{0});
    lanes.Draw(n, weight);
    for (size_t l = 0; l < kLanes; l++)
      replicate[l] = starts[l] + t < ends[l] ? static_cast<int64_t>(first + starts[l] + t) : -1;
    fn(weight, replicate);
  }
}

// Replicates [first, last), sixteen at a time, drawn from `rng` (already at replicate `first`), counted in C.
template <class C>
void BootstrapAurocLanesOf(Rng rng, size_t first, size_t last, const SortedGroup& group, double* out,
                           const SortedGroup* paired, const int32_t* to_paired, double* paired_out) {
  const size_t n = group.n_facts;
  const size_t pn = paired ? paired->n_facts : 0;
  // A paired fact's weight is a sum of counts, at most the n draws: C holds it too.
  std::vector<C> paired_counts(std::max<size_t>(pn, 1) * kLanes);
  const LaneTable<C> paired_weight(paired_counts.data(), pn);
  double lanes[kLanes];
  LaneReplicates<C>(rng, first, last, n, [&](const LaneTable<C>& weight, const int64_t* replicate) {
    (HasAvx512() ? AurocLanes<C> : AurocLanesAvx2<C>)(group, weight, lanes);
    for (size_t l = 0; l < kLanes; l++)
      if (replicate[l] >= 0) out[replicate[l]] = lanes[l];
    if (!paired) return;
    std::fill(paired_counts.begin(), paired_counts.end(), C{0});
    for (size_t f = 0; f < n; f++) {
      if (to_paired[f] < 0) continue;
      const size_t pf = static_cast<size_t>(to_paired[f]);
      C *lo = paired_weight.Lo(pf), *hi = paired_weight.Hi(pf);
      const C *src_lo = weight.Lo(f), *src_hi = weight.Hi(f);
      for (size_t l = 0; l < 8; l++) {
        lo[l] = static_cast<C>(lo[l] + src_lo[l]);
        hi[l] = static_cast<C>(hi[l] + src_hi[l]);
      }
    }
    (HasAvx512() ? AurocLanes<C> : AurocLanesAvx2<C>)(*paired, paired_weight, lanes);
    for (size_t l = 0; l < kLanes; l++)
      if (replicate[l] >= 0) paired_out[replicate[l]] = lanes[l];
  });
}

void BootstrapAurocLanes(Rng rng, size_t first, size_t last, const SortedGroup& group, double* out,
                         const SortedGroup* paired, const int32_t* to_paired, double* paired_out) {
  if (group.n_facts < kShortCountItems)
    BootstrapAurocLanesOf<uint16_t>(rng, first, last, group, out, paired, to_paired, paired_out);
  else BootstrapAurocLanesOf<int32_t>(rng, first, last, group, out, paired, to_paired, paired_out);
}

// Per lane, sum_f count_f * values[f] in f order (a product, then a sum, as the scalar loop does).
template <class C>
__attribute__((target("avx512f"))) void MeanSums(const LaneTable<C>& weight, const double* values, size_t n,
                                                 double* sums) {
  __m512d s0 = _mm512_setzero_pd(), s1 = _mm512_setzero_pd();
  for (size_t f = 0; f < n; f++) {
    const __m512d v = _mm512_set1_pd(values[f]);
    __m512d c0, c1;
    LaneCounts(weight, f, c0, c1);
    s0 = _mm512_add_pd(s0, _mm512_mul_pd(c0, v));
    s1 = _mm512_add_pd(s1, _mm512_mul_pd(c1, v));
  }
  _mm512_storeu_pd(sums, s0);
  _mm512_storeu_pd(sums + 8, s1);
}

// MeanSums with AVX2, four lanes per vector, the same unfused product and sum.
template <class C>
__attribute__((target("avx2"))) void MeanSumsAvx2(const LaneTable<C>& weight, const double* values, size_t n,
                                                  double* sums) {
  __m256d acc[4] = {_mm256_setzero_pd(), _mm256_setzero_pd(), _mm256_setzero_pd(), _mm256_setzero_pd()};
  for (size_t f = 0; f < n; f++) {
    const __m256d v = _mm256_set1_pd(values[f]);
    for (int q = 0; q < 4; q++) {
      const __m256d cq = QuarterCounts(weight, f, q);
      acc[q] = _mm256_add_pd(acc[q], _mm256_mul_pd(cq, v));
    }
  }
  for (int q = 0; q < 4; q++) _mm256_storeu_pd(sums + 4 * q, acc[q]);
}

template <class C>
void BootstrapMeanLanesOf(Rng rng, size_t first, size_t last, const double* values, size_t n, double* out) {
  double sums[kLanes];
  LaneReplicates<C>(rng, first, last, n, [&](const LaneTable<C>& weight, const int64_t* replicate) {
    (HasAvx512() ? MeanSums<C> : MeanSumsAvx2<C>)(weight, values, n, sums);
    for (size_t l = 0; l < kLanes; l++)
      if (replicate[l] >= 0) out[replicate[l]] = sums[l] / static_cast<double>(n);
  });
}

void BootstrapMeanLanes(Rng rng, size_t first, size_t last, const double* values, size_t n, double* out) {
  if (n < kShortCountItems) BootstrapMeanLanesOf<uint16_t>(rng, first, last, values, n, out);
  else BootstrapMeanLanesOf<int32_t>(rng, first, last, values, n, out);
}
#endif

}  // namespace

// Weights are counts of drawn facts (every row 1 without them): whole numbers, summed exactly in integers (as
// TypeScript's doubles sum them exactly), then combined in double as there.
double Auroc(const SortedGroup& g, const int32_t* weight) {
  double neg_below = 0, sum_pos = 0, wins = 0;
  for (size_t t = 0; t < g.n_ties; t++) {
    int64_t pos = 0, all = 0;
    for (int32_t i = g.ties[t]; i < g.ties[t + 1]; i++) {
      const int64_t w = weight ? weight[g.fact[i]] : 1;
      pos += w * g.label[i];
      all += w;
    }
    const double p = static_cast<double>(pos);
    const double neg = static_cast<double>(all - pos);
    wins += p * (neg_below + neg / 2);
    neg_below += neg;
    sum_pos += p;
  }
  if (sum_pos == 0 || neg_below == 0) return std::numeric_limits<double>::quiet_NaN();
  return wins / (sum_pos * neg_below);
}

void BootstrapMean(uint32_t seed, uint32_t stream, const double* values, size_t n, size_t b, double* out, int threads) {
  // One sequential stream of draws; each thread skips ahead to its share's first replicate.
  const Rng start(seed, stream);
  Shares(b, ThreadsFor(n * b, b, threads), [&](size_t first, size_t last) {
    Rng rng = start;
    rng.Skip(static_cast<uint64_t>(first) * n);
#if defined(__x86_64__)
    if ((HasAvx512() || HasAvx2()) && n < kLaneItems) return BootstrapMeanLanes(rng, first, last, values, n, out);
#endif
    std::vector<int32_t> counts(n);
    for (size_t r = first; r < last; r++) {
      Draw(rng, counts);
      double s = 0;
      for (size_t f = 0; f < n; f++) s += counts[f] * values[f];
      out[r] = s / static_cast<double>(n);
    }
  });
}

void BootstrapAuroc(uint32_t seed, uint32_t stream, const SortedGroup& group, size_t b, double* out,
                    const SortedGroup* paired, const int32_t* to_paired, double* paired_out, int threads) {
  // One sequential stream of draws; each thread skips ahead to its share's first replicate.
  const size_t n = group.n_facts;
  const Rng start(seed, stream);
  const size_t rows =
      static_cast<size_t>(group.ties[group.n_ties]) + (paired ? static_cast<size_t>(paired->ties[paired->n_ties]) : 0);
  Shares(b, ThreadsFor((n + rows) * b, b, threads), [&](size_t first, size_t last) {
    Rng rng = start;
    rng.Skip(static_cast<uint64_t>(first) * n);
#if defined(__x86_64__)
    if ((HasAvx512() || HasAvx2()) && n < kLaneItems)
      return BootstrapAurocLanes(rng, first, last, group, out, paired, to_paired, paired_out);
#endif
    std::vector<int32_t> counts(n);
    std::vector<int32_t> paired_weights(paired ? paired->n_facts : 0);
    for (size_t r = first; r < last; r++) {
      Draw(rng, counts);
      out[r] = Auroc(group, counts.data());
      if (paired) {
        std::fill(paired_weights.begin(), paired_weights.end(), 0);
        for (size_t f = 0; f < n; f++) {
          if (to_paired[f] >= 0) paired_weights[to_paired[f]] += counts[f];
        }
        paired_out[r] = Auroc(*paired, paired_weights.data());
      }
    }
  });
}

}  // namespace hsm
