// Node-API surface of the native core. Options (thread counts, whether to use
// bfloat16, the SIMD level) are decided in TypeScript (src/kernels/native.ts) and arrive
// as arguments or through setSimd; this file reads no environment and only
// checks what would be unsafe to trust: argument kinds and buffer lengths.
// Every entry runs inside Guard, which turns a C++ exception into a JS Error.
#include <node_api.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <iterator>
#include <memory>
#include <new>
#include <stdexcept>
#include <string>
#include <system_error>
#include <vector>

#ifdef __GLIBC__
#include <malloc.h>
#endif

#include "bootstrap.h"
#include "cpu.h"
#include "float16.h"
#include "hash_files.h"
#include "head.h"
#include "json_scan.h"
#include "large_buffers.h"
#include "order.h"
#include "products.h"
#include "rank.h"
#include "rows.h"
#include "sha256.h"
#include "threads.h"

namespace {

struct View {
  void* data = nullptr;
  size_t length = 0;
};

bool Fail(napi_env env, const char* message) {
  napi_throw_type_error(env, nullptr, message);
  return false;
}

// One line for a C++ exception that left entry `name`, written into `out`
// without allocating (the exception may be std::bad_alloc).
void Describe(const char* name, std::exception_ptr error, char* out, size_t size) {
  try {
    std::rethrow_exception(error);
  } catch (const std::bad_alloc&) {
    std::snprintf(out, size, "%s: out of memory in the native core", name);
  } catch (const std::system_error& e) {
    std::snprintf(out, size, "%s: system error in the native core (%s)", name, e.what());
  } catch (const std::exception& e) {
    std::snprintf(out, size, "%s: C++ exception in the native core (%s)", name, e.what());
  } catch (...) {
    std::snprintf(out, size, "%s: unknown C++ exception in the native core", name);
  }
}

// An exported function: its JavaScript name and the callback behind it.
struct Entry {
  const char* name;
  napi_callback impl;
};

// The callback every export goes through (its Entry arrives as the callback's
// data): a C++ exception thrown below it becomes a JS Error naming the entry,
// where it would otherwise end the process.
napi_value Guard(napi_env env, napi_callback_info info) {
  void* data = nullptr;
  if (napi_get_cb_info(env, info, nullptr, nullptr, nullptr, &data) != napi_ok || data == nullptr) return nullptr;
  const Entry* entry = static_cast<const Entry*>(data);
  try {
    return entry->impl(env, info);
  } catch (...) {
    char message[320];
    Describe(entry->name, std::current_exception(), message, sizeof message);
    bool pending = false;
    if (napi_is_exception_pending(env, &pending) == napi_ok && !pending) napi_throw_error(env, nullptr, message);
    return nullptr;
  }
}

// Reads argument `value` as a typed array of any type, into *out and *type; throws on anything else.
bool GetTypedAny(napi_env env, napi_value value, const char* message, View* out, napi_typedarray_type* type) {
  bool is_typed = false;
  if (napi_is_typedarray(env, value, &is_typed) != napi_ok || !is_typed) return Fail(env, message);
  napi_value buffer;
  size_t offset;
  // `data` already points at the view's first element (byteOffset included).
  if (napi_get_typedarray_info(env, value, type, &out->length, &out->data, &buffer, &offset) != napi_ok) {
    return Fail(env, message);
  }
  return true;
}

// Reads argument `value` as a typed array of `type`; throws on anything else.
bool GetTyped(napi_env env, napi_value value, napi_typedarray_type type, const char* message, View* out) {
  napi_typedarray_type actual;
  return GetTypedAny(env, value, message, out, &actual) && (actual == type || Fail(env, message));
}

// Reads argument `value` as a layer's rows: a Float32Array, or a Uint16Array of float16 bits (*half set).
bool GetRows(napi_env env, napi_value value, const char* message, View* out, bool* half) {
  napi_typedarray_type actual;
  if (!GetTypedAny(env, value, message, out, &actual)) return false;
  if (actual != napi_float32_array && actual != napi_uint16_array) return Fail(env, message);
  *half = actual == napi_uint16_array;
  return true;
}

hsm::LayerRows Rows(const View& h, bool half, size_t d) {
  return half ? hsm::LayerRows::Float16(static_cast<const uint16_t*>(h.data), d)
              : hsm::LayerRows::Float32(static_cast<const float*>(h.data), d);
}

bool GetArgs(napi_env env, napi_callback_info info, size_t want, napi_value* argv) {
  size_t argc = want;
  if (napi_get_cb_info(env, info, &argc, argv, nullptr, nullptr) != napi_ok || argc < want) {
    return Fail(env, "Expected more arguments");
  }
  return true;
}

bool GetCount(napi_env env, napi_value v, const char* message, size_t* out) {
  double n = -1;
  // Whole numbers up to 2^53 - 1 only: casting a larger double to size_t would be undefined.
  if (napi_get_value_double(env, v, &n) != napi_ok || !(n >= 0 && n <= 9007199254740991.0) || n != std::floor(n)) {
    return Fail(env, message);
  }
  *out = static_cast<size_t>(n);
  return true;
}

// True when typed array `v` (the argument `name`) holds at least rows x cols
// elements, the product taken without wrapping around; else throws a
// RangeError naming the argument and the counts (`counts`, e.g. "n × d").
bool Need(napi_env env, const View& v, const char* name, size_t rows, size_t cols, const char* counts) {
  size_t need = 0;
  const bool wraps = __builtin_mul_overflow(rows, cols, &need);
  if (!wraps && need <= v.length) return true;
  char message[256];
  if (cols == 1) {
    std::snprintf(message, sizeof message, "Expected %s large enough for %s = %zu values but received %zu", name,
                  counts, rows, v.length);
  } else {
    std::snprintf(message, sizeof message, "Expected %s large enough for %s = %zu × %zu values but received %zu", name,
                  counts, rows, cols, v.length);
  }
  napi_throw_range_error(env, nullptr, message);
  return false;
}

int Threads(size_t threads) { return static_cast<int>(threads < 1 ? 1 : threads); }

// One converter shape for both directions: (src, dst, threads), src and dst of equal length.
template <typename Src, typename Dst, napi_typedarray_type kSrc, napi_typedarray_type kDst>
napi_value Convert(napi_env env, napi_callback_info info, const char* src_message, const char* dst_message,
                   void (*convert)(const Src*, Dst*, size_t, int)) {
  napi_value argv[3];
  View src, dst;
  size_t threads;
  if (!GetArgs(env, info, 3, argv) || !GetTyped(env, argv[0], kSrc, src_message, &src) ||
      !GetTyped(env, argv[1], kDst, dst_message, &dst) ||
      !GetCount(env, argv[2], "Expected a thread count", &threads)) {
    return nullptr;
  }
  if (src.length != dst.length) {
    Fail(env, "Expected src and dst of equal length");
    return nullptr;
  }
  convert(static_cast<const Src*>(src.data), static_cast<Dst*>(dst.data), src.length, Threads(threads));
  return nullptr;
}

napi_value F32ToF16(napi_env env, napi_callback_info info) {
  return Convert<float, uint16_t, napi_float32_array, napi_uint16_array>(env, info, "Expected Float32Array for src",
                                                                         "Expected Uint16Array for dst", hsm::F32ToF16);
}

napi_value F16ToF32(napi_env env, napi_callback_info info) {
  return Convert<uint16_t, float, napi_uint16_array, napi_float32_array>(
      env, info, "Expected Uint16Array for src", "Expected Float32Array for dst", hsm::F16ToF32);
}

// f16Stats(src, threads) -> [nonfinite, maxBits]
napi_value F16Stats(napi_env env, napi_callback_info info) {
  napi_value argv[2];
  View src;
  size_t threads;
  if (!GetArgs(env, info, 2, argv) ||
      !GetTyped(env, argv[0], napi_uint16_array, "Expected Uint16Array for src", &src) ||
      !GetCount(env, argv[1], "Expected a thread count", &threads)) {
    return nullptr;
  }
  uint64_t nonfinite = 0;
  uint16_t max_bits = 0;
  hsm::F16Stats(static_cast<const uint16_t*>(src.data), src.length, &nonfinite, &max_bits, Threads(threads));
  napi_value result, a, b;
  napi_create_array_with_length(env, 2, &result);
  napi_create_double(env, static_cast<double>(nonfinite), &a);
  napi_create_uint32(env, max_bits, &b);
  napi_set_element(env, result, 0, a);
  napi_set_element(env, result, 1, b);
  return result;
}

// Every entry of `rows` below `limit`.
bool RowsBelow(napi_env env, const View& rows, size_t limit, const char* message) {
  const int32_t* r = static_cast<const int32_t*>(rows.data);
  for (size_t i = 0; i < rows.length; i++) {
    if (r[i] < 0 || static_cast<size_t>(r[i]) >= limit) return Fail(env, message);
  }
  return true;
}

// rankAgainstAnchors(x, rows, a, nAnchors, d, own, ownScore, above, threads, allowBf16)
napi_value RankAgainstAnchors(napi_env env, napi_callback_info info) {
  napi_value argv[10];
  bool allow_bf16 = false;
  View x, rows, a, own, own_score, above;
  size_t n_anchors, d, threads;
  if (!GetArgs(env, info, 10, argv) || !GetTyped(env, argv[0], napi_float32_array, "Expected Float32Array for x", &x) ||
      !GetTyped(env, argv[1], napi_int32_array, "Expected Int32Array for rows", &rows) ||
      !GetTyped(env, argv[2], napi_float32_array, "Expected Float32Array for anchors", &a) ||
      !GetCount(env, argv[3], "Expected an anchor count", &n_anchors) || !GetCount(env, argv[4], "Expected d", &d) ||
      !GetTyped(env, argv[5], napi_int32_array, "Expected Int32Array for own", &own) ||
      !GetTyped(env, argv[6], napi_float32_array, "Expected Float32Array for ownScore", &own_score) ||
      !GetTyped(env, argv[7], napi_int32_array, "Expected Int32Array for above", &above) ||
      !GetCount(env, argv[8], "Expected a thread count", &threads)) {
    return nullptr;
  }
  if (napi_get_value_bool(env, argv[9], &allow_bf16) != napi_ok) {
    Fail(env, "Expected a boolean allowBf16");
    return nullptr;
  }
  const size_t n = rows.length;
  if (d == 0) {
    Fail(env, "Expected d above 0");
    return nullptr;
  }
  if (!Need(env, a, "anchors", n_anchors, d, "nAnchors × d") || !Need(env, own, "own", n, 1, "rows.length") ||
      !Need(env, own_score, "ownScore", n, 1, "rows.length") || !Need(env, above, "above", n, 1, "rows.length")) {
    return nullptr;
  }
  if (!RowsBelow(env, rows, x.length / d, "Expected rows inside x")) return nullptr;
  const int32_t* owns = static_cast<const int32_t*>(own.data);
  for (size_t i = 0; i < n; i++) {
    if (owns[i] >= static_cast<int64_t>(n_anchors)) {
      Fail(env, "Expected own anchor indices below the anchor count");
      return nullptr;
    }
  }
  hsm::RankAgainstAnchors(static_cast<const float*>(x.data), static_cast<const int32_t*>(rows.data), n,
                          static_cast<const float*>(a.data), n_anchors, d, owns, static_cast<float*>(own_score.data),
                          static_cast<int32_t*>(above.data), Threads(threads), allow_bf16);
  return nullptr;
}

bool GetU32(napi_env env, napi_value v, const char* message, uint32_t* out) {
  if (napi_get_value_uint32(env, v, out) != napi_ok) return Fail(env, message);
  return true;
}

bool IsNull(napi_env env, napi_value v) {
  napi_valuetype t;
  return napi_typeof(env, v, &t) == napi_ok && (t == napi_null || t == napi_undefined);
}

// bootstrapMean(seed, stream, values, b, out, threads)
napi_value BootstrapMean(napi_env env, napi_callback_info info) {
  napi_value argv[6];
  uint32_t seed, stream;
  size_t b, threads;
  View values, out;
  if (!GetArgs(env, info, 6, argv) || !GetU32(env, argv[0], "Expected a 32-bit seed", &seed) ||
      !GetU32(env, argv[1], "Expected a 32-bit stream", &stream) ||
      !GetTyped(env, argv[2], napi_float64_array, "Expected Float64Array for values", &values) ||
      !GetCount(env, argv[3], "Expected a replicate count", &b) ||
      !GetTyped(env, argv[4], napi_float64_array, "Expected Float64Array for out", &out) ||
      !GetCount(env, argv[5], "Expected a thread count", &threads)) {
    return nullptr;
  }
  if (!Need(env, out, "out", b, 1, "b")) return nullptr;
  hsm::BootstrapMean(seed, stream, static_cast<const double*>(values.data), values.length, b,
                     static_cast<double*>(out.data), Threads(threads));
  return nullptr;
}

bool GetGroup(napi_env env, napi_value* argv, size_t n_facts, hsm::SortedGroup* g, size_t* rows) {
  View fact, label, ties;
  if (!GetTyped(env, argv[0], napi_int32_array, "Expected Int32Array for fact", &fact) ||
      !GetTyped(env, argv[1], napi_uint8_array, "Expected Uint8Array for label", &label) ||
      !GetTyped(env, argv[2], napi_int32_array, "Expected Int32Array for ties", &ties)) {
    return false;
  }
  const int32_t* f = static_cast<const int32_t*>(fact.data);
  const int32_t* t = static_cast<const int32_t*>(ties.data);
  if (fact.length != label.length || ties.length < 1 || t[0] != 0 ||
      static_cast<size_t>(t[ties.length - 1]) != fact.length) {
    return Fail(env, "Expected a sorted group whose ties run from 0 to its row count");
  }
  for (size_t i = 1; i < ties.length; i++) {
    if (t[i] < t[i - 1]) return Fail(env, "Expected ascending tie boundaries");
  }
  for (size_t i = 0; i < fact.length; i++) {
    if (f[i] < 0 || static_cast<size_t>(f[i]) >= n_facts)
      return Fail(env, "Expected fact indices below the fact count");
  }
  *g = {f, static_cast<const uint8_t*>(label.data), t, ties.length - 1, n_facts};
  *rows = fact.length;
  return true;
}

// Work done off the JavaScript thread and settled as a promise: what every such entry's work holds.
struct PromiseWork {
  napi_deferred deferred = nullptr;
  napi_async_work work = nullptr;
  char error[256] = "";  // a C++ exception on the worker, for the promise's rejection
};

// On the worker: fn(), a C++ exception that leaves it kept (named for `entry`) for the rejection.
template <typename Fn>
void RunCaught(PromiseWork* w, const char* entry, Fn fn) {
  try {
    fn();
  } catch (...) {
    Describe(entry, std::current_exception(), w->error, sizeof w->error);
  }
}

// Back on the JavaScript thread: the async work deleted, and true (the promise rejected) where it failed.
bool Rejected(napi_env env, PromiseWork* w) {
  napi_delete_async_work(env, w->work);
  if (w->error[0] == 0) return false;
  napi_value message, error;
  napi_create_string_utf8(env, w->error, NAPI_AUTO_LENGTH, &message);
  napi_create_error(env, nullptr, message, &error);
  napi_reject_deferred(env, w->deferred, error);
  return true;
}

// Queues `w` (execute on the worker, then complete, which owns it from then on) and returns its promise; null,
// with `failure` thrown and `w` still the caller's, where the work cannot start.
template <class W>
napi_value QueuePromise(napi_env env, std::unique_ptr<W>& w, const char* name, napi_async_execute_callback execute,
                        napi_async_complete_callback complete, const char* failure) {
  napi_value promise, resource;
  napi_create_promise(env, &w->deferred, &promise);
  napi_create_string_utf8(env, name, NAPI_AUTO_LENGTH, &resource);
  if (napi_create_async_work(env, nullptr, resource, execute, complete, w.get(), &w->work) != napi_ok) {
    Fail(env, failure);
    return nullptr;
  }
  if (napi_queue_async_work(env, w->work) != napi_ok) {
    napi_delete_async_work(env, w->work);
    Fail(env, failure);
    return nullptr;
  }
  w.release();
  return promise;
}

// One group's replicates for bootstrapAuroc: its draws, its sorted rows, and the paired group's, if any.
struct AurocJob {
  uint32_t seed = 0, stream = 0;
  hsm::SortedGroup group{}, paired{};
  bool has_paired = false;
  size_t b = 0;
  double* out = nullptr;
  const int32_t* to_paired = nullptr;
  double* paired_out = nullptr;
};

// One bootstrapAuroc call's jobs, drawn one after another off the JavaScript thread. The typed arrays their
// pointers read and write are held by references until it completes.
struct AurocWork : PromiseWork {
  std::vector<AurocJob> jobs;
  int threads = 1;
  std::vector<napi_ref> held;
};

void AurocExecute(napi_env, void* data) {
  auto* w = static_cast<AurocWork*>(data);
  RunCaught(w, "bootstrapAuroc", [w] {
    for (const AurocJob& j : w->jobs) {
      hsm::BootstrapAuroc(j.seed, j.stream, j.group, j.b, j.out, j.has_paired ? &j.paired : nullptr, j.to_paired,
                          j.paired_out, w->threads);
    }
  });
}

void AurocComplete(napi_env env, napi_status, void* data) {
  std::unique_ptr<AurocWork> w(static_cast<AurocWork*>(data));
  for (napi_ref r : w->held) napi_delete_reference(env, r);
  if (Rejected(env, w.get())) return;
  napi_value done;
  napi_get_undefined(env, &done);
  napi_resolve_deferred(env, w->deferred, done);
}

// One job of bootstrapAuroc, [seed, stream, fact, label, ties, nFacts, b, out, pFact, pLabel, pTies, pNFacts,
// toPaired, pOut] (the paired four null without a paired group), checked into *job; its typed arrays held in
// *held. False with an exception pending where it does not hold.
bool GetAurocJob(napi_env env, napi_value list, AurocJob* job, std::vector<napi_ref>* held) {
  constexpr uint32_t kFields = 14;
  napi_value argv[kFields];
  bool is_array = false;
  uint32_t length = 0;
  if (napi_is_array(env, list, &is_array) != napi_ok || !is_array ||
      napi_get_array_length(env, list, &length) != napi_ok || length != kFields) {
    return Fail(env, "Expected each bootstrap job as an array of 14 arguments");
  }
  for (uint32_t i = 0; i < kFields; i++) {
    if (napi_get_element(env, list, i, &argv[i]) != napi_ok) return Fail(env, "Expected a bootstrap job's arguments");
  }
  size_t n_facts, rows, p_facts = 0, p_rows = 0;
  View out, to_paired, p_out;
  if (!GetU32(env, argv[0], "Expected a 32-bit seed", &job->seed) ||
      !GetU32(env, argv[1], "Expected a 32-bit stream", &job->stream) ||
      !GetCount(env, argv[5], "Expected a fact count", &n_facts) ||
      !GetGroup(env, argv + 2, n_facts, &job->group, &rows) ||
      !GetCount(env, argv[6], "Expected a replicate count", &job->b) ||
      !GetTyped(env, argv[7], napi_float64_array, "Expected Float64Array for out", &out) ||
      !Need(env, out, "out", job->b, 1, "b")) {
    return false;
  }
  job->out = static_cast<double*>(out.data);
  job->has_paired = !IsNull(env, argv[8]);
  if (job->has_paired) {
    if (!GetCount(env, argv[11], "Expected a paired fact count", &p_facts) ||
        !GetGroup(env, argv + 8, p_facts, &job->paired, &p_rows) ||
        !GetTyped(env, argv[12], napi_int32_array, "Expected Int32Array for toPaired", &to_paired) ||
        !GetTyped(env, argv[13], napi_float64_array, "Expected Float64Array for pairedOut", &p_out)) {
      return false;
    }
    const int32_t* tp = static_cast<const int32_t*>(to_paired.data);
    if (to_paired.length != n_facts) return Fail(env, "Expected toPaired per fact");
    if (!Need(env, p_out, "pairedOut", job->b, 1, "b")) return false;
    for (size_t f = 0; f < n_facts; f++) {
      if (tp[f] >= static_cast<int64_t>(p_facts)) {
        return Fail(env, "Expected paired fact indices below the paired fact count");
      }
    }
    job->to_paired = tp;
    job->paired_out = static_cast<double*>(p_out.data);
  }
  for (int i : {2, 3, 4, 7, 8, 9, 10, 12, 13}) {
    if (i >= 8 && !job->has_paired) break;
    napi_ref r;
    napi_create_reference(env, argv[i], 1, &r);
    held->push_back(r);
  }
  return true;
}

// bootstrapAuroc(jobs, threads) -> a promise, settled once every job's `out` (and `pOut`) is written: the jobs
// (GetAurocJob) are checked at once, their replicates drawn on a worker thread one job after another, so that
// the JavaScript thread goes on meanwhile and need not come back between two groups.
napi_value BootstrapAuroc(napi_env env, napi_callback_info info) {
  napi_value argv[2];
  size_t threads;
  bool is_array = false;
  uint32_t count = 0;
  if (!GetArgs(env, info, 2, argv) || !GetCount(env, argv[1], "Expected a thread count", &threads)) return nullptr;
  if (napi_is_array(env, argv[0], &is_array) != napi_ok || !is_array ||
      napi_get_array_length(env, argv[0], &count) != napi_ok) {
    Fail(env, "Expected an array of bootstrap jobs");
    return nullptr;
  }
  auto w = std::make_unique<AurocWork>();
  w->threads = Threads(threads);
  const auto release = [&] {
    for (napi_ref r : w->held) napi_delete_reference(env, r);
  };
  for (uint32_t i = 0; i < count; i++) {
    napi_value job;
    AurocJob parsed;
    if (napi_get_element(env, argv[0], i, &job) != napi_ok || !GetAurocJob(env, job, &parsed, &w->held)) {
      release();
      return nullptr;
    }
    w->jobs.push_back(parsed);
  }
  napi_value promise =
      QueuePromise(env, w, "hsm.bootstrapAuroc", AurocExecute, AurocComplete, "Could not start the bootstrap work");
  if (promise == nullptr) release();
  return promise;
}

// rowsTimes(h, n, d, v, k, out, threads) and rowsTransposeTimes(h, n, d, g, k, out, threads)
template <bool kTranspose>
napi_value Products(napi_env env, napi_callback_info info) {
  napi_value argv[7];
  View h, in, out;
  size_t n, d, k, threads;
  bool half = false;
  if (!GetArgs(env, info, 7, argv) ||
      // Hᵀ·G runs on the probe's float32 rows only.
      !(kTranspose ? GetTyped(env, argv[0], napi_float32_array, "Expected Float32Array for h", &h)
                   : GetRows(env, argv[0], "Expected Float32Array or Uint16Array for h", &h, &half)) ||
      !GetCount(env, argv[1], "Expected a row count", &n) || !GetCount(env, argv[2], "Expected d", &d) ||
      !GetTyped(env, argv[3], napi_float64_array, "Expected Float64Array for the right-hand side", &in) ||
      !GetCount(env, argv[4], "Expected a column count", &k) ||
      !GetTyped(env, argv[5], napi_float64_array, "Expected Float64Array for out", &out) ||
      !GetCount(env, argv[6], "Expected a thread count", &threads)) {
    return nullptr;
  }
  const bool sized = Need(env, h, "h", n, d, "n × d") &&
                     (kTranspose ? Need(env, in, "g", n, k, "n × k") && Need(env, out, "out", k, d, "k × d")
                                 : Need(env, in, "v", k, d, "k × d") && Need(env, out, "out", n, k, "n × k"));
  if (!sized) return nullptr;
  const int nt = Threads(threads);
  if (kTranspose) {
    hsm::RowsTransposeTimes(static_cast<const float*>(h.data), n, d, static_cast<const double*>(in.data), k,
                            static_cast<double*>(out.data), nt);
  } else {
    hsm::RowsTimes(Rows(h, half, d), n, d, static_cast<const double*>(in.data), k, static_cast<double*>(out.data), nt);
  }
  return nullptr;
}

// logisticPass(h, n, d, v, offset, y, train, k, loss, gsum, grad, threads)
napi_value LogisticPass(napi_env env, napi_callback_info info) {
  napi_value argv[12];
  View h, v, offset, y, train, loss, gsum, grad;
  size_t n, d, k, threads;
  if (!GetArgs(env, info, 12, argv) || !GetTyped(env, argv[0], napi_float32_array, "Expected Float32Array for h", &h) ||
      !GetCount(env, argv[1], "Expected a row count", &n) || !GetCount(env, argv[2], "Expected d", &d) ||
      !GetTyped(env, argv[3], napi_float64_array, "Expected Float64Array for v", &v) ||
      !GetTyped(env, argv[4], napi_float64_array, "Expected Float64Array for offset", &offset) ||
      !GetTyped(env, argv[5], napi_uint8_array, "Expected Uint8Array for y", &y) ||
      !GetTyped(env, argv[6], napi_uint8_array, "Expected Uint8Array for train", &train) ||
      !GetCount(env, argv[7], "Expected a fold count", &k) ||
      !GetTyped(env, argv[8], napi_float64_array, "Expected Float64Array for loss", &loss) ||
      !GetTyped(env, argv[9], napi_float64_array, "Expected Float64Array for gsum", &gsum) ||
      !GetTyped(env, argv[10], napi_float64_array, "Expected Float64Array for grad", &grad) ||
      !GetCount(env, argv[11], "Expected a thread count", &threads)) {
    return nullptr;
  }
  if (!Need(env, h, "h", n, d, "n × d") || !Need(env, v, "v", k, d, "k × d") ||
      !Need(env, offset, "offset", k, 1, "k") || !Need(env, y, "y", n, 1, "n") ||
      !Need(env, train, "train", k, n, "k × n") || !Need(env, loss, "loss", k, 1, "k") ||
      !Need(env, gsum, "gsum", k, 1, "k") || !Need(env, grad, "grad", k, d, "k × d")) {
    return nullptr;
  }
  hsm::LogisticPass(static_cast<const float*>(h.data), n, d, static_cast<const double*>(v.data),
                    static_cast<const double*>(offset.data), static_cast<const uint8_t*>(y.data),
                    static_cast<const uint8_t*>(train.data), k, static_cast<double*>(loss.data),
                    static_cast<double*>(gsum.data), static_cast<double*>(grad.data), Threads(threads));
  return nullptr;
}

// centreRows(h, n, d, valid, out, threads) -> rows left unmarked
napi_value CentreRows(napi_env env, napi_callback_info info) {
  napi_value argv[6];
  View h, valid, out;
  size_t n, d, threads;
  bool half = false;
  if (!GetArgs(env, info, 6, argv) || !GetRows(env, argv[0], "Expected Float32Array or Uint16Array for h", &h, &half) ||
      !GetCount(env, argv[1], "Expected a row count", &n) || !GetCount(env, argv[2], "Expected d", &d) ||
      !GetTyped(env, argv[3], napi_uint8_array, "Expected Uint8Array for valid", &valid) ||
      !GetTyped(env, argv[4], napi_float32_array, "Expected Float32Array for out", &out) ||
      !GetCount(env, argv[5], "Expected a thread count", &threads)) {
    return nullptr;
  }
  if (!Need(env, h, "h", n, d, "n × d") || !Need(env, out, "out", n, d, "n × d") ||
      !Need(env, valid, "valid", n, 1, "n")) {
    return nullptr;
  }
  const size_t excluded = hsm::CentreRows(Rows(h, half, d), n, d, static_cast<uint8_t*>(valid.data),
                                          static_cast<float*>(out.data), Threads(threads));
  napi_value result;
  napi_create_double(env, static_cast<double>(excluded), &result);
  return result;
}

// anchorCosines(x, rows, a, nAnchors, d, own, ownCos, otherCos, threads)
napi_value AnchorCosines(napi_env env, napi_callback_info info) {
  napi_value argv[9];
  View x, rows, a, own, own_cos, other_cos;
  size_t n_anchors, d, threads;
  if (!GetArgs(env, info, 9, argv) || !GetTyped(env, argv[0], napi_float32_array, "Expected Float32Array for x", &x) ||
      !GetTyped(env, argv[1], napi_int32_array, "Expected Int32Array for rows", &rows) ||
      !GetTyped(env, argv[2], napi_float32_array, "Expected Float32Array for anchors", &a) ||
      !GetCount(env, argv[3], "Expected an anchor count", &n_anchors) || !GetCount(env, argv[4], "Expected d", &d) ||
      !GetTyped(env, argv[5], napi_int32_array, "Expected Int32Array for own", &own) ||
      !GetTyped(env, argv[6], napi_float64_array, "Expected Float64Array for ownCos", &own_cos) ||
      !GetTyped(env, argv[7], napi_float64_array, "Expected Float64Array for otherCos", &other_cos) ||
      !GetCount(env, argv[8], "Expected a thread count", &threads)) {
    return nullptr;
  }
  const size_t n = rows.length;
  if (d == 0 || n_anchors < 2) {
    Fail(env, "Expected at least two anchors and d above 0");
    return nullptr;
  }
  if (!Need(env, a, "anchors", n_anchors, d, "nAnchors × d") || !Need(env, own, "own", n, 1, "rows.length") ||
      !Need(env, own_cos, "ownCos", n, 1, "rows.length") || !Need(env, other_cos, "otherCos", n, 1, "rows.length")) {
    return nullptr;
  }
  if (!RowsBelow(env, rows, x.length / d, "Expected rows inside x") ||
      !RowsBelow(env, own, n_anchors, "Expected own anchors below the anchor count")) {
    return nullptr;
  }
  hsm::AnchorCosines(static_cast<const float*>(x.data), static_cast<const int32_t*>(rows.data), n,
                     static_cast<const float*>(a.data), n_anchors, d, static_cast<const int32_t*>(own.data),
                     static_cast<double*>(own_cos.data), static_cast<double*>(other_cos.data), Threads(threads));
  return nullptr;
}

// standardizeRows(h, rows, d, out, mean, scale, threads)
napi_value StandardizeRows(napi_env env, napi_callback_info info) {
  napi_value argv[7];
  View h, rows, out, mean, scale;
  size_t d, threads;
  bool half = false;
  if (!GetArgs(env, info, 7, argv) || !GetRows(env, argv[0], "Expected Float32Array or Uint16Array for h", &h, &half) ||
      !GetTyped(env, argv[1], napi_int32_array, "Expected Int32Array for rows", &rows) ||
      !GetCount(env, argv[2], "Expected d", &d) ||
      !GetTyped(env, argv[3], napi_float32_array, "Expected Float32Array for out", &out) ||
      !GetTyped(env, argv[4], napi_float64_array, "Expected Float64Array for mean", &mean) ||
      !GetTyped(env, argv[5], napi_float64_array, "Expected Float64Array for scale", &scale) ||
      !GetCount(env, argv[6], "Expected a thread count", &threads)) {
    return nullptr;
  }
  if (d == 0) {
    Fail(env, "Expected d above 0");
    return nullptr;
  }
  if (!Need(env, out, "out", rows.length, d, "rows.length × d") || !Need(env, mean, "mean", d, 1, "d") ||
      !Need(env, scale, "scale", d, 1, "d")) {
    return nullptr;
  }
  if (!RowsBelow(env, rows, h.length / d, "Expected rows inside h")) return nullptr;
  hsm::StandardizeRows(Rows(h, half, d), static_cast<const int32_t*>(rows.data), rows.length, d,
                       static_cast<float*>(out.data), static_cast<double*>(mean.data), static_cast<double*>(scale.data),
                       Threads(threads));
  return nullptr;
}

// addMoments(h, rows, d, sum, sumSquares, threads)
napi_value AddMoments(napi_env env, napi_callback_info info) {
  napi_value argv[6];
  View h, rows, sum, sum_squares;
  size_t d, threads;
  if (!GetArgs(env, info, 6, argv) || !GetTyped(env, argv[0], napi_float32_array, "Expected Float32Array for h", &h) ||
      !GetTyped(env, argv[1], napi_int32_array, "Expected Int32Array for rows", &rows) ||
      !GetCount(env, argv[2], "Expected d", &d) ||
      !GetTyped(env, argv[3], napi_float64_array, "Expected Float64Array for sum", &sum) ||
      !GetTyped(env, argv[4], napi_float64_array, "Expected Float64Array for sumSquares", &sum_squares) ||
      !GetCount(env, argv[5], "Expected a thread count", &threads)) {
    return nullptr;
  }
  if (d == 0) {
    Fail(env, "Expected d above 0");
    return nullptr;
  }
  if (!Need(env, sum, "sum", d, 1, "d") || !Need(env, sum_squares, "sumSquares", d, 1, "d")) return nullptr;
  if (!RowsBelow(env, rows, h.length / d, "Expected rows inside h")) return nullptr;
  hsm::AddMoments(static_cast<const float*>(h.data), static_cast<const int32_t*>(rows.data), rows.length, d,
                  static_cast<double*>(sum.data), static_cast<double*>(sum_squares.data), Threads(threads));
  return nullptr;
}

// foldMoments(h, d, rows, starts, sum, sumSquares, threads) -> false where it added nothing (see rows.h)
napi_value FoldMoments(napi_env env, napi_callback_info info) {
  napi_value argv[7];
  View h, rows, starts, sum, sum_squares;
  size_t d, threads;
  if (!GetArgs(env, info, 7, argv) || !GetTyped(env, argv[0], napi_float32_array, "Expected Float32Array for h", &h) ||
      !GetCount(env, argv[1], "Expected d", &d) ||
      !GetTyped(env, argv[2], napi_int32_array, "Expected Int32Array for rows", &rows) ||
      !GetTyped(env, argv[3], napi_int32_array, "Expected Int32Array for starts", &starts) ||
      !GetTyped(env, argv[4], napi_float64_array, "Expected Float64Array for sum", &sum) ||
      !GetTyped(env, argv[5], napi_float64_array, "Expected Float64Array for sumSquares", &sum_squares) ||
      !GetCount(env, argv[6], "Expected a thread count", &threads)) {
    return nullptr;
  }
  if (d == 0 || starts.length == 0) {
    Fail(env, "Expected d above 0 and at least one fold start");
    return nullptr;
  }
  const size_t k = starts.length - 1;
  const int32_t* s = static_cast<const int32_t*>(starts.data);
  bool ordered = s[0] == 0 && static_cast<size_t>(s[k]) == rows.length;
  for (size_t f = 0; f < k; f++) ordered = ordered && s[f + 1] >= s[f];
  if (!ordered) {
    Fail(env, "Expected fold starts ascending from 0 to the row count");
    return nullptr;
  }
  if (!Need(env, sum, "sum", k, d, "folds × d") || !Need(env, sum_squares, "sumSquares", k, d, "folds × d")) {
    return nullptr;
  }
  if (!RowsBelow(env, rows, h.length / d, "Expected rows inside h")) return nullptr;
  const bool added =
      hsm::FoldMoments(static_cast<const float*>(h.data), h.length / d, d, static_cast<const int32_t*>(rows.data), s, k,
                       static_cast<double*>(sum.data), static_cast<double*>(sum_squares.data), Threads(threads));
  napi_value result;
  napi_get_boolean(env, added, &result);
  return result;
}

// prepareHead(w, d, vocab, hi, lo, norms, threads)
napi_value PrepareHead(napi_env env, napi_callback_info info) {
  napi_value argv[7];
  View w, hi, lo, norms;
  size_t d, vocab, threads;
  if (!GetArgs(env, info, 7, argv) || !GetTyped(env, argv[0], napi_float32_array, "Expected Float32Array for w", &w) ||
      !GetCount(env, argv[1], "Expected d", &d) || !GetCount(env, argv[2], "Expected a vocabulary size", &vocab) ||
      !GetTyped(env, argv[3], napi_uint16_array, "Expected Uint16Array for hi", &hi) ||
      !GetTyped(env, argv[4], napi_uint16_array, "Expected Uint16Array for lo", &lo) ||
      !GetTyped(env, argv[5], napi_float32_array, "Expected Float32Array for norms", &norms) ||
      !GetCount(env, argv[6], "Expected a thread count", &threads)) {
    return nullptr;
  }
  if (!Need(env, w, "w", d, vocab, "d × vocab") || !Need(env, hi, "hi", vocab, d, "vocab × d") ||
      !Need(env, lo, "lo", vocab, d, "vocab × d") || !Need(env, norms, "norms", vocab, 1, "vocab")) {
    return nullptr;
  }
  hsm::PrepareHead(static_cast<const float*>(w.data), d, vocab, static_cast<uint16_t*>(hi.data),
                   static_cast<uint16_t*>(lo.data), static_cast<float*>(norms.data), Threads(threads));
  return nullptr;
}

// headArgmax(h, batch, d, hi, lo, norms, vocab, out, threads, allowBf16) -> float64 dot products taken
napi_value HeadArgmax(napi_env env, napi_callback_info info) {
  napi_value argv[10];
  View h, hi, lo, norms, out;
  size_t batch, d, vocab, threads;
  bool allow_bf16 = false;
  if (!GetArgs(env, info, 10, argv) || !GetTyped(env, argv[0], napi_float32_array, "Expected Float32Array for h", &h) ||
      !GetCount(env, argv[1], "Expected a batch size", &batch) || !GetCount(env, argv[2], "Expected d", &d) ||
      !GetTyped(env, argv[3], napi_uint16_array, "Expected Uint16Array for hi", &hi) ||
      !GetTyped(env, argv[4], napi_uint16_array, "Expected Uint16Array for lo", &lo) ||
      !GetTyped(env, argv[5], napi_float32_array, "Expected Float32Array for norms", &norms) ||
      !GetCount(env, argv[6], "Expected a vocabulary size", &vocab) ||
      !GetTyped(env, argv[7], napi_int32_array, "Expected Int32Array for out", &out) ||
      !GetCount(env, argv[8], "Expected a thread count", &threads)) {
    return nullptr;
  }
  if (napi_get_value_bool(env, argv[9], &allow_bf16) != napi_ok) {
    Fail(env, "Expected a boolean allowBf16");
    return nullptr;
  }
  if (vocab > 0x7fffffffu) {
    Fail(env, "Expected a vocabulary below 2^31 entries");
    return nullptr;
  }
  if (!Need(env, h, "h", batch, d, "batch × d") || !Need(env, hi, "hi", vocab, d, "vocab × d") ||
      !Need(env, lo, "lo", vocab, d, "vocab × d") || !Need(env, norms, "norms", vocab, 1, "vocab") ||
      !Need(env, out, "out", batch, 1, "batch")) {
    return nullptr;
  }
  const uint64_t dots =
      hsm::HeadArgmax(static_cast<const float*>(h.data), batch, d, static_cast<const uint16_t*>(hi.data),
                      static_cast<const uint16_t*>(lo.data), static_cast<const float*>(norms.data), vocab,
                      static_cast<int32_t*>(out.data), Threads(threads), allow_bf16);
  napi_value result;
  napi_create_double(env, static_cast<double>(dots), &result);
  return result;
}

// The hash state lives in a Uint8Array the caller keeps (8-byte aligned, at least sizeof(Sha256State)).
bool GetShaState(napi_env env, napi_value value, hsm::Sha256State** out) {
  View v;
  if (!GetTyped(env, value, napi_uint8_array, "Expected Uint8Array for state", &v)) return false;
  if (v.length < sizeof(hsm::Sha256State) || reinterpret_cast<uintptr_t>(v.data) % 8 != 0) {
    return Fail(env, "Expected an 8-byte aligned state of sha256StateBytes bytes");
  }
  *out = static_cast<hsm::Sha256State*>(v.data);
  return true;
}

// sha256Init(state)
napi_value Sha256Init(napi_env env, napi_callback_info info) {
  napi_value argv[1];
  hsm::Sha256State* s;
  if (!GetArgs(env, info, 1, argv) || !GetShaState(env, argv[0], &s)) return nullptr;
  hsm::Sha256Init(s);
  return nullptr;
}

// sha256Update(state, data, statsFrom, width): hashes data; counts values of `width` bytes (0, 2, 4) from statsFrom.
napi_value Sha256Update(napi_env env, napi_callback_info info) {
  napi_value argv[4];
  hsm::Sha256State* s;
  View data;
  size_t stats_from, width;
  if (!GetArgs(env, info, 4, argv) || !GetShaState(env, argv[0], &s) ||
      !GetTyped(env, argv[1], napi_uint8_array, "Expected Uint8Array for data", &data) ||
      !GetCount(env, argv[2], "Expected a byte offset for statsFrom", &stats_from) ||
      !GetCount(env, argv[3], "Expected 0, 2 or 4 for width", &width)) {
    return nullptr;
  }
  if (width != 0 && width != 2 && width != 4) {
    Fail(env, "Expected 0, 2 or 4 for width");
    return nullptr;
  }
  hsm::Sha256Update(s, static_cast<const uint8_t*>(data.data), data.length, stats_from, static_cast<int>(width));
  return nullptr;
}

// sha256Update2(stateA, dataA, statsFromA, stateB, dataB, statsFromB, width): sha256Update on two streams at once.
napi_value Sha256Update2(napi_env env, napi_callback_info info) {
  napi_value argv[7];
  hsm::Sha256State *a, *b;
  View data_a, data_b;
  size_t from_a, from_b, width;
  if (!GetArgs(env, info, 7, argv) || !GetShaState(env, argv[0], &a) ||
      !GetTyped(env, argv[1], napi_uint8_array, "Expected Uint8Array for dataA", &data_a) ||
      !GetCount(env, argv[2], "Expected a byte offset for statsFromA", &from_a) || !GetShaState(env, argv[3], &b) ||
      !GetTyped(env, argv[4], napi_uint8_array, "Expected Uint8Array for dataB", &data_b) ||
      !GetCount(env, argv[5], "Expected a byte offset for statsFromB", &from_b) ||
      !GetCount(env, argv[6], "Expected 0, 2 or 4 for width", &width)) {
    return nullptr;
  }
  if (width != 0 && width != 2 && width != 4) {
    Fail(env, "Expected 0, 2 or 4 for width");
    return nullptr;
  }
  if (a == b) {
    Fail(env, "Expected two different states");
    return nullptr;
  }
  hsm::Sha256Update2(a, static_cast<const uint8_t*>(data_a.data), data_a.length, from_a, b,
                     static_cast<const uint8_t*>(data_b.data), data_b.length, from_b, static_cast<int>(width));
  return nullptr;
}

// sha256Final(state, digest) -> [nonfinite, maxBits]; digest receives the 32 bytes.
napi_value Sha256Final(napi_env env, napi_callback_info info) {
  napi_value argv[2];
  hsm::Sha256State* s;
  View digest;
  if (!GetArgs(env, info, 2, argv) || !GetShaState(env, argv[0], &s) ||
      !GetTyped(env, argv[1], napi_uint8_array, "Expected Uint8Array for digest", &digest)) {
    return nullptr;
  }
  if (!Need(env, digest, "digest", 32, 1, "32 bytes")) return nullptr;
  hsm::Sha256Final(s, static_cast<uint8_t*>(digest.data));
  napi_value result, a, b;
  napi_create_array_with_length(env, 2, &result);
  napi_create_double(env, static_cast<double>(s->nonfinite), &a);
  napi_create_uint32(env, s->max_bits, &b);
  napi_set_element(env, result, 0, a);
  napi_set_element(env, result, 1, b);
  return result;
}

// sha256Files(paths, statsFrom, widths, threads) -> Promise of one entry per
// path: [hexDigest, bytes, nonfinite, maxBits], or the errno (a number) of the
// open or read that failed. The files are read and hashed off the JavaScript
// thread (see hash_files.h).
struct FilesWork : PromiseWork {
  std::vector<std::string> paths;
  std::vector<hsm::FileHashJob> jobs;
  std::vector<hsm::FileHashResult> results;
  int threads = 1;
};

void FilesExecute(napi_env, void* data) {
  auto* w = static_cast<FilesWork*>(data);
  RunCaught(w, "sha256Files", [w] { hsm::Sha256Files(w->jobs.data(), w->jobs.size(), w->threads, w->results.data()); });
}

void FilesComplete(napi_env env, napi_status, void* data) {
  std::unique_ptr<FilesWork> w(static_cast<FilesWork*>(data));
  if (Rejected(env, w.get())) return;
  napi_value list;
  napi_create_array_with_length(env, w->results.size(), &list);
  for (size_t i = 0; i < w->results.size(); i++) {
    const hsm::FileHashResult& r = w->results[i];
    napi_value entry;
    if (r.error != 0) {
      napi_create_int32(env, r.error, &entry);
    } else {
      char hex[65];
      for (int k = 0; k < 32; k++) std::snprintf(hex + 2 * k, 3, "%02x", r.digest[k]);
      napi_value digest, bytes, nonfinite, max_bits;
      napi_create_string_utf8(env, hex, 64, &digest);
      napi_create_double(env, static_cast<double>(r.bytes), &bytes);
      napi_create_double(env, static_cast<double>(r.nonfinite), &nonfinite);
      napi_create_uint32(env, r.max_bits, &max_bits);
      napi_create_array_with_length(env, 4, &entry);
      napi_set_element(env, entry, 0, digest);
      napi_set_element(env, entry, 1, bytes);
      napi_set_element(env, entry, 2, nonfinite);
      napi_set_element(env, entry, 3, max_bits);
    }
    napi_set_element(env, list, static_cast<uint32_t>(i), entry);
  }
  napi_resolve_deferred(env, w->deferred, list);
}

napi_value Sha256Files(napi_env env, napi_callback_info info) {
  napi_value argv[4];
  View from, widths;
  size_t threads;
  if (!GetArgs(env, info, 4, argv) ||
      !GetTyped(env, argv[1], napi_float64_array, "Expected Float64Array for statsFrom", &from) ||
      !GetTyped(env, argv[2], napi_uint8_array, "Expected Uint8Array for widths", &widths) ||
      !GetCount(env, argv[3], "Expected a thread count", &threads)) {
    return nullptr;
  }
  bool is_array = false;
  uint32_t n = 0;
  if (napi_is_array(env, argv[0], &is_array) != napi_ok || !is_array ||
      napi_get_array_length(env, argv[0], &n) != napi_ok) {
    Fail(env, "Expected an array of paths");
    return nullptr;
  }
  if (from.length != n || widths.length != n) {
    Fail(env, "Expected statsFrom and widths as long as paths");
    return nullptr;
  }
  auto w = std::make_unique<FilesWork>();
  w->paths.resize(n);
  for (uint32_t i = 0; i < n; i++) {
    napi_value p;
    size_t len = 0;
    const uint8_t width = static_cast<const uint8_t*>(widths.data)[i];
    const double at = static_cast<const double*>(from.data)[i];
    if (napi_get_element(env, argv[0], i, &p) != napi_ok ||
        napi_get_value_string_utf8(env, p, nullptr, 0, &len) != napi_ok) {
      Fail(env, "Expected an array of paths");
      return nullptr;
    }
    if ((width != 0 && width != 2 && width != 4) || !(at >= 0) ||
        at != static_cast<double>(static_cast<uint64_t>(at))) {
      Fail(env, "Expected widths of 0, 2 or 4 and byte offsets for statsFrom");
      return nullptr;
    }
    w->paths[i].resize(len);
    napi_get_value_string_utf8(env, p, &w->paths[i][0], len + 1, &len);
  }
  w->jobs.resize(n);
  for (uint32_t i = 0; i < n; i++) {
    w->jobs[i] = {w->paths[i].c_str(), static_cast<uint64_t>(static_cast<const double*>(from.data)[i]),
                  static_cast<const uint8_t*>(widths.data)[i]};
  }
  w->results.resize(n);
  w->threads = Threads(threads);
  return QueuePromise(env, w, "hsm.sha256Files", FilesExecute, FilesComplete, "Could not start the hashing work");
}

constexpr const char* kSimdNames[] = {"portable", "avx2", "avx512", "amx"};

// setSimd(level): the SIMD level the kernels may use at most, one of
// "portable", "avx2", "avx512", "amx"; a level this CPU lacks is refused.
napi_value SetSimd(napi_env env, napi_callback_info info) {
  napi_value argv[1];
  if (!GetArgs(env, info, 1, argv)) return nullptr;
  char name[16] = "";
  size_t len = 0;
  napi_valuetype type;
  if (napi_typeof(env, argv[0], &type) != napi_ok || type != napi_string ||
      napi_get_value_string_utf8(env, argv[0], name, sizeof name, &len) != napi_ok) {
    Fail(env, "Expected portable, avx2, avx512 or amx for the SIMD level");
    return nullptr;
  }
  const std::string want(name, len);
  for (int level = 0; level < static_cast<int>(std::size(kSimdNames)); level++) {
    if (want != kSimdNames[level]) continue;
    if (level > static_cast<int>(hsm::CpuSimd())) {
      char message[160];
      std::snprintf(message, sizeof message,
                    "Expected a SIMD level this CPU has (portable up to %s) but received \"%s\"",
                    kSimdNames[static_cast<int>(hsm::CpuSimd())], want.c_str());
      napi_throw_range_error(env, nullptr, message);
      return nullptr;
    }
    hsm::SetSimdCap(static_cast<hsm::Simd>(level));
    return nullptr;
  }
  char message[160];
  std::snprintf(message, sizeof message,
                "Expected portable, avx2, avx512 or amx for the SIMD level but received \"%s\"", want.c_str());
  napi_throw_type_error(env, nullptr, message);
  return nullptr;
}

// simdLevel(): the level the kernels use now.
napi_value SimdLevel(napi_env env, napi_callback_info) {
  napi_value result;
  napi_create_string_utf8(env, kSimdNames[static_cast<int>(hsm::SimdInUse())], NAPI_AUTO_LENGTH, &result);
  return result;
}

// Test hooks, so that tests can see what Guard does with each kind of C++
// exception. testThrow(kind) throws one: "bad_alloc", "system_error",
// "runtime_error", anything else a non-standard one.
napi_value TestThrow(napi_env env, napi_callback_info info) {
  napi_value argv[1];
  if (!GetArgs(env, info, 1, argv)) return nullptr;
  char kind[32] = "";
  size_t len = 0;
  if (napi_get_value_string_utf8(env, argv[0], kind, sizeof kind, &len) != napi_ok) {
    Fail(env, "Expected a string for kind");
    return nullptr;
  }
  const std::string k(kind, len);
  if (k == "bad_alloc") throw std::bad_alloc();
  if (k == "system_error") throw std::system_error(EAGAIN, std::generic_category(), "test");
  if (k == "runtime_error") throw std::runtime_error("test");
  throw 42;
}

// testFailThreadStart(k): the k-th thread start from now throws as a failed
// std::thread start does (0 disarms).
napi_value TestFailThreadStart(napi_env env, napi_callback_info info) {
  napi_value argv[1];
  uint32_t k;
  if (!GetArgs(env, info, 1, argv) || !GetU32(env, argv[0], "Expected a count", &k)) return nullptr;
  hsm::testing::fail_thread_start.store(static_cast<int>(k < 0x7fffffffu ? k : 0x7fffffffu));
  return nullptr;
}

// testShaWideFrom(k): the vector lanes hash from k streams with blocks in
// common (1 to 17; 17: never), or as timed (0).
napi_value TestShaWideFrom(napi_env env, napi_callback_info info) {
  napi_value argv[1];
  uint32_t k;
  if (!GetArgs(env, info, 1, argv) || !GetU32(env, argv[0], "Expected a count", &k)) return nullptr;
  hsm::testing::sha_wide_from.store(static_cast<int>(std::min<uint32_t>(k, 17)));
  return nullptr;
}

// shaPaths(): the whole-file hashing paths at the SIMD level in force (see
// Sha256Paths).
napi_value ShaPaths(napi_env env, napi_callback_info) {
  napi_value out;
  napi_create_string_utf8(env, hsm::Sha256Paths(), NAPI_AUTO_LENGTH, &out);
  return out;
}

// trimHeap(): hands the kernels' kept mappings (large_buffers.h) and the free pages of every malloc arena back to
// the system (glibc's malloc_trim; only the mappings where the C library is not glibc).
napi_value TrimHeap(napi_env, napi_callback_info) {
  hsm::SpareMappings::Get().Release();
#ifdef __GLIBC__
  malloc_trim(0);
#endif
  return nullptr;
}

// largeBuffer(bytes): a zero-filled ArrayBuffer, from kLargeBuffer up in a mapping of its own
// (large_buffers.h). Unmapped when the ArrayBuffer is collected; V8 counts it as external memory meanwhile.
napi_value LargeBuffer(napi_env env, napi_callback_info info) {
  napi_value argv[1];
  size_t bytes;
  if (!GetArgs(env, info, 1, argv) || !GetCount(env, argv[0], "largeBuffer: expected a byte count", &bytes))
    return nullptr;
  napi_value out;
  hsm::LargeMapping* mapping = new hsm::LargeMapping(hsm::MapLarge(bytes));
  const napi_finalize unmap = [](napi_env env, void*, void* hint) {
    hsm::LargeMapping* m = static_cast<hsm::LargeMapping*>(hint);
    int64_t ignored;
    napi_adjust_external_memory(env, -static_cast<int64_t>(m->length), &ignored);
    hsm::Unmap(*m);
    delete m;
  };
  if (napi_create_external_arraybuffer(env, mapping->start, bytes, unmap, mapping, &out) != napi_ok) {
    // A runtime that refuses memory from outside its heap gets an ordinary buffer.
    hsm::Unmap(*mapping);
    delete mapping;
    void* data;
    napi_create_arraybuffer(env, bytes, &data, &out);
    return out;
  }
  int64_t ignored;
  napi_adjust_external_memory(env, static_cast<int64_t>(mapping->length), &ignored);
  return out;
}

// `list` as strings into *out (of `want` strings where want > 0); false, without an exception, where it is not an
// array of that many strings.
bool GetStrings(napi_env env, napi_value list, uint32_t want, std::vector<std::string>* out) {
  bool is_array = false;
  uint32_t count = 0;
  if (napi_is_array(env, list, &is_array) != napi_ok || !is_array ||
      napi_get_array_length(env, list, &count) != napi_ok || (want > 0 && count != want)) {
    return false;
  }
  out->resize(count);
  for (uint32_t i = 0; i < count; i++) {
    napi_value v;
    size_t len = 0;
    if (napi_get_element(env, list, i, &v) != napi_ok ||
        napi_get_value_string_utf8(env, v, nullptr, 0, &len) != napi_ok) {
      return false;
    }
    (*out)[i].resize(len);
    napi_get_value_string_utf8(env, v, &(*out)[i][0], len + 1, &len);
  }
  return true;
}

// The text of a scan's call, argument 0, as a Uint8Array of at most 2 GiB - 1 bytes (offsets are int32); taken
// after the call's other arguments, since reading those may run JavaScript (a getter), which must not move it.
bool GetScanBytes(napi_env env, napi_value value, View* bytes) {
  if (!GetTyped(env, value, napi_uint8_array, "Expected Uint8Array for bytes", bytes)) return false;
  if (bytes->length > INT32_MAX) return Fail(env, "Expected at most 2 GiB - 1 bytes");
  return true;
}

// The text and the keys of a scan's call (bytes, keys); false with an exception pending where they are not
// a Uint8Array (GetScanBytes) and an array of strings.
bool ScanArgs(napi_env env, napi_callback_info info, View* bytes, std::vector<std::string>* keys) {
  napi_value argv[2];
  if (!GetArgs(env, info, 2, argv)) return false;
  if (!GetStrings(env, argv[1], 0, keys)) return Fail(env, "Expected an array of keys");
  return GetScanBytes(env, argv[0], bytes);
}

// `values` as a new Int32Array.
napi_value Int32s(napi_env env, const std::vector<int32_t>& values) {
  napi_value buffer, out;
  void* data;
  if (napi_create_arraybuffer(env, values.size() * sizeof(int32_t), &data, &buffer) != napi_ok ||
      napi_create_typedarray(env, napi_int32_array, values.size(), buffer, 0, &out) != napi_ok) {
    return nullptr;
  }
  std::copy(values.begin(), values.end(), static_cast<int32_t*>(data));
  return out;
}

// jsonlKeys(bytes, keys) -> Int32Array: per line of `bytes` that is not blank, [line, start, end, verdict,
// then start and end per key] (json_scan.h). Lines are cut at '\n'; the caller hands whole lines.
napi_value JsonlKeys(napi_env env, napi_callback_info info) {
  View bytes;
  std::vector<std::string> keys;
  if (!ScanArgs(env, info, &bytes, &keys)) return nullptr;
  std::vector<int32_t> found;
  hsm::ScanJsonlKeys(static_cast<const uint8_t*>(bytes.data), bytes.length, keys, &found);
  return Int32s(env, found);
}

// The tag of jsonlIdRows' externals: jsonlJoin takes no other.
constexpr napi_type_tag kIdRowsTag = {0x6873'6d5f'6964'726fULL, 0x7773'5f74'6167'0001ULL};

// jsonlIdRows(ids, count) -> an external holding json_scan.h's IdRows of the `count` ids of `ids` (one per line),
// for jsonlJoin.
napi_value JsonlIdRows(napi_env env, napi_callback_info info) {
  napi_value argv[2];
  size_t length = 0, count = 0;
  if (!GetArgs(env, info, 2, argv) || !GetCount(env, argv[1], "Expected an id count", &count)) return nullptr;
  if (napi_get_value_string_utf8(env, argv[0], nullptr, 0, &length) != napi_ok) {
    Fail(env, "Expected the ids as one string");
    return nullptr;
  }
  std::string ids(length, '\0');
  napi_get_value_string_utf8(env, argv[0], &ids[0], length + 1, &length);
  auto rows = std::make_unique<hsm::IdRows>(std::move(ids), count);
  if (!rows->complete()) {
    Fail(env, "Expected as many ids as the count, one per line");
    return nullptr;
  }
  napi_value out;
  const auto drop = [](napi_env, void* data, void*) { delete static_cast<hsm::IdRows*>(data); };
  if (napi_create_external(env, rows.get(), drop, nullptr, &out) != napi_ok) return nullptr;
  rows.release();
  napi_type_tag_object(env, out, &kIdRowsTag);
  return out;
}

// jsonlJoin(bytes, keys, idRows, values) -> Int32Array: json_scan.h's ScanJsonlJoin of whole lines of `bytes`
// for the id member keys[0] and the value member keys[1], ids from jsonlIdRows.
napi_value JsonlJoin(napi_env env, napi_callback_info info) {
  napi_value argv[4];
  View bytes;
  napi_valuetype type;
  void* rows = nullptr;
  bool tagged = false;
  std::vector<std::string> keys, values;
  if (!GetArgs(env, info, 4, argv)) return nullptr;
  if (!GetStrings(env, argv[1], 2, &keys)) {
    Fail(env, "Expected the id key and the value key");
    return nullptr;
  }
  if (napi_typeof(env, argv[2], &type) != napi_ok || type != napi_external ||
      napi_check_object_type_tag(env, argv[2], &kIdRowsTag, &tagged) != napi_ok || !tagged ||
      napi_get_value_external(env, argv[2], &rows) != napi_ok) {
    Fail(env, "Expected ids from jsonlIdRows");
    return nullptr;
  }
  if (!GetStrings(env, argv[3], 0, &values)) {
    Fail(env, "Expected an array of values");
    return nullptr;
  }
  if (!GetScanBytes(env, argv[0], &bytes)) return nullptr;
  std::vector<int32_t> found;
  hsm::ScanJsonlJoin(static_cast<const uint8_t*>(bytes.data), bytes.length, keys,
                     *static_cast<const hsm::IdRows*>(rows), values, &found);
  return Int32s(env, found);
}

// jsonRowArrays(bytes, keys) -> Int32Array | null: per key, [start, end, count, distinct (1 or 0)] of its
// top-level array of plain strings (start -1: absent); null where the document is left to the caller
// (json_scan.h).
napi_value JsonRowArrays(napi_env env, napi_callback_info info) {
  View bytes;
  std::vector<std::string> keys;
  if (!ScanArgs(env, info, &bytes, &keys)) return nullptr;
  std::vector<hsm::JsonRowArray> arrays;
  if (!hsm::ScanJsonRowArrays(static_cast<const uint8_t*>(bytes.data), bytes.length, keys, &arrays)) {
    napi_value null;
    napi_get_null(env, &null);
    return null;
  }
  std::vector<int32_t> found;
  for (const hsm::JsonRowArray& a : arrays) found.insert(found.end(), {a.start, a.end, a.count, a.distinct ? 1 : 0});
  return Int32s(env, found);
}

// orderByScore(rows, score) -> Int32Array | null: `rows` ordered by (score[row], their order in `rows`), -0 with
// +0 (order.h); null where a score is NaN.
napi_value OrderByScore(napi_env env, napi_callback_info info) {
  napi_value argv[2];
  View rows, score;
  if (!GetArgs(env, info, 2, argv) ||
      !GetTyped(env, argv[0], napi_int32_array, "Expected Int32Array for rows", &rows) ||
      !GetTyped(env, argv[1], napi_float64_array, "Expected Float64Array for score", &score)) {
    return nullptr;
  }
  const int32_t* r = static_cast<const int32_t*>(rows.data);
  for (size_t i = 0; i < rows.length; i++) {
    if (r[i] < 0 || static_cast<size_t>(r[i]) >= score.length) {
      Fail(env, "Expected rows below the score count");
      return nullptr;
    }
  }
  std::vector<int32_t> order(rows.length);
  if (!hsm::OrderByScore(r, rows.length, static_cast<const double*>(score.data), order.data())) {
    napi_value null;
    napi_get_null(env, &null);
    return null;
  }
  return Int32s(env, order);
}

// sortedGroups(order, score, y, groupOf, factOf, pooledFactOf, fact[], label[], ties[], auroc) -> Int32Array:
// the rows of `order` (sorted by score) taken into the groups' arrays (order.h's SortedGroups), each group's
// unweighted AUROC into auroc[g] (NaN: undefined), and per group the length of its ties.
napi_value SortedGroups(napi_env env, napi_callback_info info) {
  napi_value argv[10];
  View order, score, y, group_of, fact_of, pooled_fact_of, auroc;
  if (!GetArgs(env, info, 10, argv) ||
      !GetTyped(env, argv[9], napi_float64_array, "Expected Float64Array for auroc", &auroc)) {
    return nullptr;
  }
  // The groups' arrays first, every list element before any typed array: reading a list may run JavaScript (a
  // getter), which must not move what is read after it. The rows' order, and each group's ties, are then worked on in
  // copies of this entry's own, so that an output array sharing memory with an input cannot steer a read out of bounds.
  const size_t n_groups = auroc.length;
  std::vector<napi_value> lists(3 * n_groups);
  for (uint32_t g = 0; g < n_groups; g++) {
    for (uint32_t a = 0; a < 3; a++) {
      if (napi_get_element(env, argv[6 + a], g, &lists[3 * g + a]) != napi_ok) {
        Fail(env, "Expected the groups' facts, labels and ties, one of each per group");
        return nullptr;
      }
    }
  }
  std::vector<hsm::SortedGroupOut> groups(n_groups);
  std::vector<std::vector<int32_t>> ties(n_groups);
  std::vector<View> ties_out(n_groups);
  for (uint32_t g = 0; g < n_groups; g++) {
    View fact, label;
    if (!GetTyped(env, lists[3 * g], napi_int32_array, "Expected an Int32Array of facts per group", &fact) ||
        !GetTyped(env, lists[3 * g + 1], napi_uint8_array, "Expected a Uint8Array of labels per group", &label) ||
        !GetTyped(env, lists[3 * g + 2], napi_int32_array, "Expected an Int32Array of ties per group", &ties_out[g])) {
      return nullptr;
    }
    if (label.length != fact.length || ties_out[g].length < fact.length + 1) {
      Fail(env, "Expected a group's labels as long as its facts, and room for one tie more");
      return nullptr;
    }
    ties[g].resize(fact.length + 1);
    groups[g] = {static_cast<int32_t*>(fact.data), static_cast<uint8_t*>(label.data), ties[g].data(), fact.length, 0};
  }
  if (!GetTyped(env, argv[0], napi_int32_array, "Expected Int32Array for order", &order) ||
      !GetTyped(env, argv[1], napi_float64_array, "Expected Float64Array for score", &score) ||
      !GetTyped(env, argv[2], napi_uint8_array, "Expected Uint8Array for y", &y) ||
      !GetTyped(env, argv[3], napi_int32_array, "Expected Int32Array for groupOf", &group_of) ||
      !GetTyped(env, argv[4], napi_int32_array, "Expected Int32Array for factOf", &fact_of) ||
      !GetTyped(env, argv[5], napi_int32_array, "Expected Int32Array for pooledFactOf", &pooled_fact_of) ||
      !GetTyped(env, argv[9], napi_float64_array, "Expected Float64Array for auroc", &auroc)) {
    return nullptr;
  }
  if (auroc.length != n_groups) {
    Fail(env, "Expected one group per auroc, each sized to the rows it takes");
    return nullptr;
  }
  const size_t n = score.length;
  if (y.length != n || group_of.length != n || fact_of.length != n || pooled_fact_of.length != n) {
    Fail(env, "Expected y, groupOf, factOf and pooledFactOf of one length per score");
    return nullptr;
  }
  const int32_t* given = static_cast<const int32_t*>(order.data);
  const std::vector<int32_t> rows(given, given + order.length);
  for (int32_t r : rows) {
    if (r < 0 || static_cast<size_t>(r) >= n) {
      Fail(env, "Expected rows below the score count");
      return nullptr;
    }
  }
  if (!hsm::SortedGroups(rows.data(), rows.size(), static_cast<const double*>(score.data),
                         static_cast<const uint8_t*>(y.data), static_cast<const int32_t*>(group_of.data),
                         static_cast<const int32_t*>(fact_of.data), static_cast<const int32_t*>(pooled_fact_of.data),
                         groups.data(), n_groups)) {
    Fail(env, "Expected one group per auroc, each sized to the rows it takes");
    return nullptr;
  }
  std::vector<int32_t> n_ties(n_groups);
  for (size_t g = 0; g < n_groups; g++) {
    const hsm::SortedGroup sorted{groups[g].fact, groups[g].label, groups[g].ties, groups[g].n_ties - 1, 0};
    static_cast<double*>(auroc.data)[g] = hsm::Auroc(sorted, nullptr);  // every row weighted 1
    n_ties[g] = static_cast<int32_t>(groups[g].n_ties);
    std::copy(ties[g].begin(), ties[g].begin() + groups[g].n_ties, static_cast<int32_t*>(ties_out[g].data));
  }
  return Int32s(env, n_ties);
}

}  // namespace

NAPI_MODULE_INIT() {
  static const Entry kEntries[] = {
      {"f32ToF16", F32ToF16},
      {"f16ToF32", F16ToF32},
      {"f16Stats", F16Stats},
      {"rankAgainstAnchors", RankAgainstAnchors},
      {"bootstrapMean", BootstrapMean},
      {"bootstrapAuroc", BootstrapAuroc},
      {"orderByScore", OrderByScore},
      {"sortedGroups", SortedGroups},
      {"rowsTimes", Products<false>},
      {"rowsTransposeTimes", Products<true>},
      {"logisticPass", LogisticPass},
      {"centreRows", CentreRows},
      {"anchorCosines", AnchorCosines},
      {"standardizeRows", StandardizeRows},
      {"addMoments", AddMoments},
      {"foldMoments", FoldMoments},
      {"prepareHead", PrepareHead},
      {"headArgmax", HeadArgmax},
      {"sha256Init", Sha256Init},
      {"sha256Update", Sha256Update},
      {"sha256Update2", Sha256Update2},
      {"sha256Final", Sha256Final},
      {"sha256Files", Sha256Files},
      {"setSimd", SetSimd},
      {"simdLevel", SimdLevel},
      {"trimHeap", TrimHeap},
      {"largeBuffer", LargeBuffer},
      {"jsonlKeys", JsonlKeys},
      {"jsonRowArrays", JsonRowArrays},
      {"jsonlIdRows", JsonlIdRows},
      {"jsonlJoin", JsonlJoin},
      {"shaPaths", ShaPaths},
      {"testThrow", TestThrow},
      {"testFailThreadStart", TestFailThreadStart},
      {"testShaWideFrom", TestShaWideFrom},
  };
  constexpr size_t kCount = sizeof(kEntries) / sizeof(kEntries[0]);
  napi_property_descriptor props[kCount];
  for (size_t i = 0; i < kCount; i++) {
    props[i] = {kEntries[i].name, nullptr, Guard,        nullptr,
                nullptr,          nullptr, napi_default, const_cast<Entry*>(&kEntries[i])};
  }
  napi_define_properties(env, exports, kCount, props);
  napi_value simd;
  const char* name = hsm::HasF16c() ? "f16c" : "portable";
  napi_create_string_utf8(env, name, NAPI_AUTO_LENGTH, &simd);
  napi_set_named_property(env, exports, "simd", simd);
  napi_value levels;
  const int top = static_cast<int>(hsm::CpuSimd());
  napi_create_array_with_length(env, top + 1, &levels);
  for (int level = 0; level <= top; level++) {
    napi_value name;
    napi_create_string_utf8(env, kSimdNames[level], NAPI_AUTO_LENGTH, &name);
    napi_set_element(env, levels, level, name);
  }
  napi_set_named_property(env, exports, "simdLevels", levels);
  napi_value state_bytes;
  napi_create_uint32(env, static_cast<uint32_t>(sizeof(hsm::Sha256State)), &state_bytes);
  napi_set_named_property(env, exports, "sha256StateBytes", state_bytes);
  return exports;
}
