// What this CPU can run, decided once per process, and the SIMD level the
// kernels may use at most (setSimd; HSM_SIMD in TypeScript). Every kernel with
// a fast path asks here on each call; each answer is false where the build is
// not for x86-64.
#pragma once
#include <atomic>

#if defined(__linux__) && defined(__x86_64__)
#include <sys/syscall.h>
#include <unistd.h>
#endif

namespace hsm {

// The SIMD levels, lowest first. portable: plain C++ only (no SHA extensions
// either); avx2: the AVX2 + F16C paths and the SHA extensions; avx512: every
// AVX-512 path the CPU has (F, BW, BF16) as well; amx: the AMX tile paths too.
enum class Simd : int { kPortable = 0, kAvx2 = 1, kAvx512 = 2, kAmx = 3 };

namespace detail {
// The cap in force; the highest level unless setSimd lowered it.
inline std::atomic<int> simd_cap{static_cast<int>(Simd::kAmx)};
inline bool Allowed(Simd level) { return detail::simd_cap.load(std::memory_order_relaxed) >= static_cast<int>(level); }
}  // namespace detail

#if defined(__x86_64__) || defined(__i386__)
namespace cpu {
inline bool Avx2F16c() {
  static const bool yes = [] {
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("f16c");
  }();
  return yes;
}
inline bool Avx512() {
  static const bool yes = [] {
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx512f") != 0;
  }();
  return yes;
}
inline bool Avx512Bf16() {
  static const bool yes = [] {
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bf16");
  }();
  return yes;
}
inline bool Avx512Bw() {
  static const bool yes = [] {
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx512bw") != 0;
  }();
  return yes;
}
inline bool Avx2() {
  static const bool yes = [] {
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx2") != 0;
  }();
  return yes;
}
// AMX tiles with bfloat16 products, and the kernel's leave to use them: Linux hands the tile
// registers' state only to a process that asks for it (arch_prctl ARCH_REQ_XCOMP_PERM for
// XFEATURE_XTILEDATA, granted to every thread of the process).
inline bool AmxBf16() {
  static const bool yes = [] {
    __builtin_cpu_init();
    if (!__builtin_cpu_supports("amx-tile") || !__builtin_cpu_supports("amx-bf16") || !Avx512Bf16()) return false;
#if defined(__linux__) && defined(__x86_64__)
    constexpr long kReqXcompPerm = 0x1023, kXtileData = 18;
    return syscall(SYS_arch_prctl, kReqXcompPerm, kXtileData) == 0;
#else
    return false;
#endif
  }();
  return yes;
}
inline bool Sha() {
  static const bool yes = [] {
    __builtin_cpu_init();
    return __builtin_cpu_supports("sha") && __builtin_cpu_supports("ssse3") && __builtin_cpu_supports("sse4.1");
  }();
  return yes;
}
}  // namespace cpu

// The highest level this CPU has.
inline Simd CpuSimd() {
  if (cpu::AmxBf16() && cpu::Avx2F16c()) return Simd::kAmx;
  if (cpu::Avx512() && cpu::Avx2F16c()) return Simd::kAvx512;
  if (cpu::Avx2F16c()) return Simd::kAvx2;
  return Simd::kPortable;
}

inline bool HasAvx2F16c() { return cpu::Avx2F16c() && detail::Allowed(Simd::kAvx2); }
inline bool HasAvx512() { return cpu::Avx512() && detail::Allowed(Simd::kAvx512); }
inline bool HasAvx512Bf16() { return cpu::Avx512Bf16() && detail::Allowed(Simd::kAvx512); }
inline bool HasAmxBf16() { return cpu::AmxBf16() && detail::Allowed(Simd::kAmx); }
// The byte and word instructions (masked loads of 16-bit values) every AVX-512 BF16 CPU also has.
inline bool HasAvx512Bw() { return cpu::Avx512Bw() && detail::Allowed(Simd::kAvx512); }
inline bool HasAvx2() { return cpu::Avx2() && detail::Allowed(Simd::kAvx2); }
// The SHA extensions, with the SSSE3 and SSE4.1 their kernel also uses.
inline bool HasSha() { return cpu::Sha() && detail::Allowed(Simd::kAvx2); }
#else
inline Simd CpuSimd() { return Simd::kPortable; }
inline bool HasAvx2F16c() { return false; }
inline bool HasAvx512() { return false; }
inline bool HasAvx512Bf16() { return false; }
inline bool HasAmxBf16() { return false; }
inline bool HasAvx512Bw() { return false; }
inline bool HasAvx2() { return false; }
inline bool HasSha() { return false; }
#endif

// The level the kernels use now: the cap, or the CPU's highest if lower.
inline Simd SimdInUse() {
  const int cap = detail::simd_cap.load(std::memory_order_relaxed);
  const int cpu = static_cast<int>(CpuSimd());
  return static_cast<Simd>(cap < cpu ? cap : cpu);
}

// Caps the level; the caller has checked that the CPU has it. Meant for
// moments when no kernel runs: a kernel running meanwhile may mix paths.
inline void SetSimdCap(Simd level) { detail::simd_cap.store(static_cast<int>(level), std::memory_order_relaxed); }

}  // namespace hsm
