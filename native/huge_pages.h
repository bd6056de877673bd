// Memory mapped on its own and offered 2 MB pages (Linux's transparent huge
// pages, granted on request where the system allows it), for buffers of many
// megabytes read out of order: one page-table entry then covers 2 MB instead
// of 4 KB, so a kernel that jumps between rows keeps its translations cached,
// and touching the buffer costs hundreds of page faults instead of tens of
// thousands (dear in virtual machines). Where the request is refused the
// pages stay small. A buffer under one huge page, or any where there is no
// mmap, is an ordinary allocation on a 64-byte boundary (LineAlloc). Either
// way a kernel can load whole cache lines: AMX tile loads, for one, run at
// half speed on rows that straddle two.
#pragma once
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <new>

#if defined(__unix__) || defined(__APPLE__)
#include <sys/mman.h>
#define HSM_MMAP 1
#endif

namespace hsm {

constexpr size_t kHugePage = size_t{2} << 20;
constexpr size_t kCacheLine = 64;

// The buffer's zero-filled bytes start at `start`: on a 2 MB boundary where mapped, else on a 64-byte one.
// `base` and `length` are what Unmap releases: a mapping of its own, or (below one huge page, or without mmap)
// an ordinary allocation.
struct HugeMapping {
  void* base;
  size_t length;
  void* start;
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
inline HugeMapping MapHuge(size_t bytes) {
#ifdef HSM_MMAP
  if (bytes >= kHugePage) {
    // Room to start on a 2 MB boundary, so that every 2 MB of the buffer can be one page.
    const size_t length = bytes + kHugePage;
    void* base = mmap(nullptr, length, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (base == MAP_FAILED) throw std::bad_alloc();
    void* start = reinterpret_cast<void*>((reinterpret_cast<uintptr_t>(base) + kHugePage - 1) & ~(kHugePage - 1));
#ifdef MADV_HUGEPAGE
    // A hint: refused or ignored, pages stay small.
    madvise(start, (bytes + kHugePage - 1) & ~(kHugePage - 1), MADV_HUGEPAGE);
#endif
    return {base, length, start, true};
  }
#endif
  void* p = LineAlloc(bytes);
  return {p, bytes, p, false};
}

inline void Unmap(const HugeMapping& m) {
#ifdef HSM_MMAP
  if (m.mapped) {
    munmap(m.base, m.length);
    return;
  }
#endif
  std::free(m.base);
}

// n zero-filled values of T in a mapping of their own, released with the array.
template <class T>
class HugeArray {
 public:
  explicit HugeArray(size_t n) : m_(MapHuge(n * sizeof(T))) {}
  ~HugeArray() { Unmap(m_); }
  HugeArray(const HugeArray&) = delete;
  HugeArray& operator=(const HugeArray&) = delete;
  T* get() const { return static_cast<T*>(m_.start); }

 private:
  HugeMapping m_;
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
