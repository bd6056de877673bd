// Node-API surface of the native core. Validation of options lives in
// TypeScript (src/native/); this file only checks what would be unsafe to
// trust: argument kinds and buffer lengths.
#include <node_api.h>

#include <cstddef>
#include <cstdint>

#include "float16.h"
#include "rank.h"

namespace {

struct View {
  void* data = nullptr;
  size_t length = 0;
};

bool Fail(napi_env env, const char* message) {
  napi_throw_type_error(env, nullptr, message);
  return false;
}

// Reads argument `value` as a typed array of `type`; throws on anything else.
bool GetTyped(napi_env env, napi_value value, napi_typedarray_type type, const char* message, View* out) {
  bool is_typed = false;
  if (napi_is_typedarray(env, value, &is_typed) != napi_ok || !is_typed) return Fail(env, message);
  napi_typedarray_type actual;
  napi_value buffer;
  size_t offset;
  // `data` already points at the view's first element (byteOffset included).
  if (napi_get_typedarray_info(env, value, &actual, &out->length, &out->data, &buffer, &offset) != napi_ok ||
      actual != type) {
    return Fail(env, message);
  }
  return true;
}

bool GetArgs(napi_env env, napi_callback_info info, size_t want, napi_value* argv) {
  size_t argc = want;
  if (napi_get_cb_info(env, info, &argc, argv, nullptr, nullptr) != napi_ok || argc < want) {
    return Fail(env, "Expected more arguments");
  }
  return true;
}

// One converter shape for both directions: (src, dst) of equal length.
template <typename Src, typename Dst, napi_typedarray_type kSrc, napi_typedarray_type kDst>
napi_value Convert(napi_env env, napi_callback_info info, const char* src_message, const char* dst_message,
                   void (*convert)(const Src*, Dst*, size_t)) {
  napi_value argv[2];
  View src, dst;
  if (!GetArgs(env, info, 2, argv) || !GetTyped(env, argv[0], kSrc, src_message, &src) ||
      !GetTyped(env, argv[1], kDst, dst_message, &dst)) {
    return nullptr;
  }
  if (src.length != dst.length) {
    Fail(env, "Expected src and dst of equal length");
    return nullptr;
  }
  convert(static_cast<const Src*>(src.data), static_cast<Dst*>(dst.data), src.length);
  return nullptr;
}

napi_value F32ToF16(napi_env env, napi_callback_info info) {
  return Convert<float, uint16_t, napi_float32_array, napi_uint16_array>(
      env, info, "Expected Float32Array for src", "Expected Uint16Array for dst", hsm::F32ToF16);
}

napi_value F16ToF32(napi_env env, napi_callback_info info) {
  return Convert<uint16_t, float, napi_uint16_array, napi_float32_array>(
      env, info, "Expected Uint16Array for src", "Expected Float32Array for dst", hsm::F16ToF32);
}

napi_value F16Stats(napi_env env, napi_callback_info info) {
  napi_value argv[1];
  View src;
  if (!GetArgs(env, info, 1, argv) ||
      !GetTyped(env, argv[0], napi_uint16_array, "Expected Uint16Array for src", &src)) {
    return nullptr;
  }
  uint64_t nonfinite = 0;
  uint16_t max_bits = 0;
  hsm::F16Stats(static_cast<const uint16_t*>(src.data), src.length, &nonfinite, &max_bits);
  napi_value result, a, b;
  napi_create_array_with_length(env, 2, &result);
  napi_create_double(env, static_cast<double>(nonfinite), &a);
  napi_create_uint32(env, max_bits, &b);
  napi_set_element(env, result, 0, a);
  napi_set_element(env, result, 1, b);
  return result;
}

bool GetCount(napi_env env, napi_value v, const char* message, size_t* out) {
  double n = -1;
  if (napi_get_value_double(env, v, &n) != napi_ok || !(n >= 0) || n != static_cast<double>(static_cast<size_t>(n))) {
    return Fail(env, message);
  }
  *out = static_cast<size_t>(n);
  return true;
}

// rankAgainstAnchors(x, nRows, a, nAnchors, d, own, ownScore, above, threads)
napi_value RankAgainstAnchors(napi_env env, napi_callback_info info) {
  napi_value argv[9];
  View x, a, own, own_score, above;
  size_t n_rows, n_anchors, d, threads;
  if (!GetArgs(env, info, 9, argv) || !GetTyped(env, argv[0], napi_float32_array, "Expected Float32Array for x", &x) ||
      !GetCount(env, argv[1], "Expected a row count", &n_rows) ||
      !GetTyped(env, argv[2], napi_float32_array, "Expected Float32Array for anchors", &a) ||
      !GetCount(env, argv[3], "Expected an anchor count", &n_anchors) || !GetCount(env, argv[4], "Expected d", &d) ||
      !GetTyped(env, argv[5], napi_int32_array, "Expected Int32Array for own", &own) ||
      !GetTyped(env, argv[6], napi_float32_array, "Expected Float32Array for ownScore", &own_score) ||
      !GetTyped(env, argv[7], napi_int32_array, "Expected Int32Array for above", &above) ||
      !GetCount(env, argv[8], "Expected a thread count", &threads)) {
    return nullptr;
  }
  if (x.length < n_rows * d || a.length < n_anchors * d || own.length < n_rows || own_score.length < n_rows ||
      above.length < n_rows) {
    Fail(env, "Expected buffers large enough for the given counts");
    return nullptr;
  }
  const int32_t* owns = static_cast<const int32_t*>(own.data);
  for (size_t i = 0; i < n_rows; i++) {
    if (owns[i] >= static_cast<int64_t>(n_anchors)) {
      Fail(env, "Expected own anchor indices below the anchor count");
      return nullptr;
    }
  }
  hsm::RankAgainstAnchors(static_cast<const float*>(x.data), n_rows, static_cast<const float*>(a.data), n_anchors, d, owns,
                          static_cast<float*>(own_score.data), static_cast<int32_t*>(above.data),
                          static_cast<int>(threads < 1 ? 1 : threads));
  return nullptr;
}

}  // namespace

NAPI_MODULE_INIT() {
  const napi_property_descriptor props[] = {
      {"f32ToF16", nullptr, F32ToF16, nullptr, nullptr, nullptr, napi_default, nullptr},
      {"f16ToF32", nullptr, F16ToF32, nullptr, nullptr, nullptr, napi_default, nullptr},
      {"f16Stats", nullptr, F16Stats, nullptr, nullptr, nullptr, napi_default, nullptr},
      {"rankAgainstAnchors", nullptr, RankAgainstAnchors, nullptr, nullptr, nullptr, napi_default, nullptr},
  };
  napi_define_properties(env, exports, sizeof(props) / sizeof(props[0]), props);
  napi_value simd;
  const char* name = hsm::HasF16c() ? "f16c" : "portable";
  napi_create_string_utf8(env, name, NAPI_AUTO_LENGTH, &simd);
  napi_set_named_property(env, exports, "simd", simd);
  return exports;
}
