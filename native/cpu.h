// What this CPU can run, decided once per process. Every kernel with a fast
// path asks here; each answer is false where the build is not for x86-64.
#pragma once

namespace hsm {

#if defined(__x86_64__) || defined(__i386__)
inline bool HasAvx2F16c() {
  static const bool yes = [] {
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("f16c");
  }();
  return yes;
}
inline bool HasAvx512() {
  static const bool yes = [] {
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx512f") != 0;
  }();
  return yes;
}
inline bool HasAvx512Bf16() {
  static const bool yes = [] {
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bf16");
  }();
  return yes;
}
// The byte and word instructions (masked loads of 16-bit values) every AVX-512 BF16 CPU also has.
inline bool HasAvx512Bw() {
  static const bool yes = [] {
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx512bw") != 0;
  }();
  return yes;
}
inline bool HasAvx2() {
  static const bool yes = [] {
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx2") != 0;
  }();
  return yes;
}
// The SHA extensions, with the SSSE3 and SSE4.1 their kernel also uses.
inline bool HasSha() {
  static const bool yes = [] {
    __builtin_cpu_init();
    return __builtin_cpu_supports("sha") && __builtin_cpu_supports("ssse3") && __builtin_cpu_supports("sse4.1");
  }();
  return yes;
}
#else
inline bool HasAvx2F16c() { return false; }
inline bool HasAvx512() { return false; }
inline bool HasAvx512Bf16() { return false; }
inline bool HasAvx512Bw() { return false; }
inline bool HasAvx2() { return false; }
inline bool HasSha() { return false; }
#endif

}  // namespace hsm
