// Buffers for the native kernels. A buffer of many megabytes is mapped on its
// own: its pages are zero until written, cost nothing until touched, and go
// back to the system as soon as it is released. One under kLargeBuffer, or any
// where there is no mmap, is an ordinary allocation on a 64-byte boundary
// (LineAlloc). Either way a kernel can load whole cache lines: AMX tile loads,
// for one, run at half speed on rows that straddle two.
//
// The mappings are not offered 2 MB pages (madvise(MADV_HUGEPAGE)). In a
// virtual machine that hands its free memory back to the host, a 2 MB page
// took about five times as long to fault in as 512 small ones (4.8 against
// 0.9 ms a megabyte), and the system time it cost ISS outweighed what fewer
// address translations saved (docs/metrics.md, Memory).
#pragma once
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <new>

#if defined(__unix__) || defined(__APPLE__)
#include <sys/mman.h>
#define HSM_MMAP 1
#endif

namespace hsm {

constexpr size_t kLargeBuffer = size_t{2} << 20;
constexpr size_t kCacheLine = 64;

// The buffer's zero-filled bytes start at `start`, on a page where mapped, else on a 64-byte boundary. `length` is
// what Unmap releases: a mapping of its own, or (below kLargeBuffer, or without mmap) an ordinary allocation.
struct LargeMapping {
  void* start;
  size_t length;
  bool mapped;
};

// `bytes` zero-filled bytes from the ordinary heap, on a cache line, so that a 64-byte load never straddles two;
// released with std::free. Throws std::bad_alloc when the memory is not there.
inline void* LineAlloc(size_t bytes) {
  const size_t length = std::max(kCacheLine, (bytes + kCacheLine - 1) / kCacheLine * kCacheLine);
  void* p = std::aligned_alloc(kCacheLine, length);
  if (p == nullptr) throw std::bad_alloc();
  std::memset(p, 0, length);
  return p;
}

// `bytes` zero-filled bytes; throws std::bad_alloc when the memory is not there.
inline LargeMapping MapLarge(size_t bytes) {
#ifdef HSM_MMAP
  if (bytes >= kLargeBuffer) {
    void* start = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (start == MAP_FAILED) throw std::bad_alloc();
    return {start, bytes, true};
  }
#endif
  return {LineAlloc(bytes), bytes, false};
}

inline void Unmap(const LargeMapping& m) {
#ifdef HSM_MMAP
  if (m.mapped) {
    munmap(m.start, m.length);
    return;
  }
#endif
  std::free(m.start);
}

// Mappings of LargeArrays that are gone, kept for the next ones: a kernel that makes the same buffers again for
// every layer (ISS's anchor panels) then writes over pages already faulted in, instead of faulting in fresh ones
// (0.4 to 0.9 ms a megabyte in a virtual machine, against about 0.05 to zero them again). At most kKept are kept;
// Release hands them back to the system (trimHeap).
class SpareMappings {
 public:
  static SpareMappings& Get() {
    static SpareMappings spares;
    return spares;
  }

  // `bytes` zero-filled bytes: a kept mapping of at least that many where there is one, else MapLarge's.
  LargeMapping Take(size_t bytes) {
    if (bytes >= kLargeBuffer) {
      std::lock_guard<std::mutex> lock(mutex_);
      for (size_t i = 0; i < n_; i++) {
        if (kept_[i].length < bytes) continue;
        const LargeMapping m = kept_[i];
        kept_[i] = kept_[--n_];
        std::memset(m.start, 0, bytes);
        return m;
      }
    }
    return MapLarge(bytes);
  }

  // Keeps m, in place of the smallest kept one where kKept are; one below kLargeBuffer is released.
  void Give(const LargeMapping& m) {
    if (!m.mapped) return Unmap(m);
    std::lock_guard<std::mutex> lock(mutex_);
    if (n_ < kKept) {
      kept_[n_++] = m;
      return;
    }
    LargeMapping* smallest = std::min_element(
        kept_, kept_ + n_, [](const LargeMapping& u, const LargeMapping& v) { return u.length < v.length; });
    if (smallest->length >= m.length) return Unmap(m);
    Unmap(*smallest);
    *smallest = m;
  }

  void Release() {
    std::lock_guard<std::mutex> lock(mutex_);
    for (size_t i = 0; i < n_; i++) Unmap(kept_[i]);
    n_ = 0;
  }

 private:
  static constexpr size_t kKept = 2;
  std::mutex mutex_;
  LargeMapping kept_[kKept] = {};
  size_t n_ = 0;
};

// n zero-filled values of T (MapLarge, or a kept mapping: SpareMappings), kept for the next array when released.
template <class T>
class LargeArray {
 public:
  explicit LargeArray(size_t n) : m_(SpareMappings::Get().Take(n * sizeof(T))) {}
  ~LargeArray() { SpareMappings::Get().Give(m_); }
  LargeArray(const LargeArray&) = delete;
  LargeArray& operator=(const LargeArray&) = delete;
  T* get() const { return static_cast<T*>(m_.start); }

 private:
  LargeMapping m_;
};

// n zero-filled values of T on a cache line, from the ordinary heap (LineAlloc), released with the array: for a
// buffer made again and again, which the heap hands back already faulted in where a mapping of its own would be
// faulted in afresh each time.
template <class T>
class LineArray {
 public:
  explicit LineArray(size_t n) : p_(static_cast<T*>(LineAlloc(n * sizeof(T)))) {}
  ~LineArray() { std::free(p_); }
  LineArray(const LineArray&) = delete;
  LineArray& operator=(const LineArray&) = delete;
  T* get() const { return p_; }

 private:
  T* p_;
};

}  // namespace hsm
