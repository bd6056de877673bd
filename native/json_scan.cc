#include "json_scan.h"

#include <algorithm>
#include <cstring>
#include <string_view>
#include <unordered_set>
#include <utility>

#include "cpu.h"

#if defined(__x86_64__)
#include <immintrin.h>
#endif

namespace hsm {
namespace {

// Bytes that may stand for themselves inside a JSON string: everything but the quote, the backslash and the
// control characters below 0x20. Bytes from 0x80 up are UTF-8, checked by the caller before the scan.
struct PlainTable {
  bool plain[256];
  constexpr PlainTable() : plain() {
    for (int c = 0; c < 256; c++) plain[c] = c >= 0x20 && c != '"' && c != '\\';
  }
};
constexpr PlainTable kPlain;

// The bytes a per-row array's strings may hold: printable ASCII but the quote and the backslash, so that the
// strings are written as JSON.stringify writes them and compare byte by byte as JavaScript compares them.
struct AsciiTable {
  bool plain[256];
  constexpr AsciiTable() : plain() {
    for (int c = 0; c < 256; c++) plain[c] = c >= 0x20 && c < 0x7f && c != '"' && c != '\\';
  }
};
constexpr AsciiTable kAscii;

// The first byte of [p, end) that may not stand for itself in a JSON string (kPlain), or end.
const uint8_t* SkipPlain(const uint8_t* p, const uint8_t* end) {
  while (p < end && kPlain.plain[*p]) ++p;
  return p;
}

#if defined(__x86_64__)
// SkipPlain 32 bytes at a time: a quote, a backslash or a byte up to 0x1f stops it.
__attribute__((target("avx2"))) const uint8_t* SkipPlainAvx2(const uint8_t* p, const uint8_t* end) {
  const __m256i quote = _mm256_set1_epi8('"');
  const __m256i backslash = _mm256_set1_epi8('\\');
  const __m256i control = _mm256_set1_epi8(0x1f);
  for (; end - p >= 32; p += 32) {
    const __m256i v = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
    const __m256i special = _mm256_or_si256(_mm256_cmpeq_epi8(v, quote), _mm256_cmpeq_epi8(v, backslash));
    const __m256i low = _mm256_cmpeq_epi8(_mm256_max_epu8(v, control), control);  // v <= 0x1f, unsigned
    const uint32_t stops = static_cast<uint32_t>(_mm256_movemask_epi8(_mm256_or_si256(special, low)));
    if (stops != 0) return p + __builtin_ctz(stops);
  }
  return SkipPlain(p, end);
}
#endif

// SkipPlain at the level in force, chosen once per scan.
using SkipPlainFn = const uint8_t* (*)(const uint8_t*, const uint8_t*);
SkipPlainFn SkipPlainForLevel() {
#if defined(__x86_64__)
  if (HasAvx2()) return SkipPlainAvx2;
#endif
  return SkipPlain;
}

bool IsDigit(uint8_t c) { return c >= '0' && c <= '9'; }

bool IsHex(uint8_t c) { return IsDigit(c) || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F'); }

// One JSON text, [p, end): a line (no '\n' inside), or with `arrays` a whole document, where '\n' is whitespace
// and the wanted members are arrays (json_scan.h). Nesting is kept on a stack of the brackets still to close, not in
// recursion, so that however deep the text nests, the scan takes no more of the thread's stack.
class Scan {
 public:
  // Fills `spans` (two per key) for a line, or with `arrays` (one per key, as the caller set them) a document.
  Scan(const uint8_t* p, const uint8_t* end, const std::vector<std::string>& keys, int32_t* spans,
       std::vector<uint8_t>* stack, JsonRowArray* arrays = nullptr)
      : p_(p),
        end_(end),
        keys_(keys),
        spans_(spans),
        stack_(*stack),
        arrays_(arrays),
        skip_plain_(SkipPlainForLevel()) {}

  // kJsonlPlain with the spans (or arrays) filled (offsets from `origin`), or kJsonlDefer.
  JsonlVerdict Run(const uint8_t* origin) {
    origin_ = origin;
    if (!arrays_) std::fill(spans_, spans_ + 2 * keys_.size(), -1);
    stack_.clear();
    SkipSpace();
    if (p_ == end_ || *p_ != '{') return kJsonlDefer;
    ++p_;
    stack_.push_back('}');
    opened_ = true;
    while (!stack_.empty()) {
      SkipSpace();
      if (p_ == end_) return kJsonlDefer;
      const uint8_t close = stack_.back();
      if (*p_ == close) {
        // A container ends: empty, or after an item.
        ++p_;
        stack_.pop_back();
        opened_ = false;
        continue;
      }
      if (!opened_) {
        if (*p_ != ',') return kJsonlDefer;
        ++p_;
      }
      opened_ = false;
      if (!(close == '}' ? Member() : Value())) return kJsonlDefer;
    }
    SkipSpace();
    return p_ == end_ ? kJsonlPlain : kJsonlDefer;
  }

 private:
  void SkipSpace() {
    while (p_ < end_ && (*p_ == ' ' || *p_ == '\t' || *p_ == '\r' || (*p_ == '\n' && arrays_))) ++p_;
  }

  // A wanted array, in the one form taken: '[', plain strings joined by ',' with no whitespace, ']'.
  bool RowArray(JsonRowArray* a) {
    SkipSpace();
    if (p_ == end_ || *p_ != '[') return false;
    a->start = static_cast<int32_t>(p_ - origin_);
    const uint8_t* previous = nullptr;
    size_t previous_length = 0;
    bool ascending = true;
    if (++p_ < end_ && *p_ == ']') {
      a->end = static_cast<int32_t>(++p_ - origin_);
      return true;
    }
    for (;;) {
      if (p_ == end_ || *p_ != '"') return false;
      const uint8_t* start = ++p_;
      while (p_ < end_ && kAscii.plain[*p_]) ++p_;
      if (p_ == end_ || *p_ != '"') return false;
      const size_t length = static_cast<size_t>(p_++ - start);
      if (previous && ascending) {
        const int order = std::memcmp(previous, start, std::min(previous_length, length));
        ascending = order < 0 || (order == 0 && previous_length < length);
      }
      previous = start, previous_length = length;
      a->count++;
      if (p_ == end_) return false;
      if (*p_ == ']') {
        a->end = static_cast<int32_t>(++p_ - origin_);
        if (!ascending) a->distinct = Distinct(origin_ + a->start, p_);
        return true;
      }
      if (*p_++ != ',') return false;
    }
  }

  // A string, at its opening quote; its characters are [*start, *stop), `*escaped` when a backslash is among them.
  bool String(const uint8_t** start, const uint8_t** stop, bool* escaped) {
    ++p_;
    *start = p_;
    *escaped = false;
    for (;;) {
      p_ = skip_plain_(p_, end_);
      if (p_ == end_ || *p_ < 0x20) return false;
      if (*p_ == '"') {
        *stop = p_++;
        return true;
      }
      // A backslash: one of JSON's escapes.
      *escaped = true;
      if (++p_ == end_) return false;
      const uint8_t c = *p_;
      if (c == 'u') {
        if (end_ - p_ < 5 || !IsHex(p_[1]) || !IsHex(p_[2]) || !IsHex(p_[3]) || !IsHex(p_[4])) return false;
        p_ += 5;
      } else if (c == '"' || c == '\\' || c == '/' || c == 'b' || c == 'f' || c == 'n' || c == 'r' || c == 't') {
        ++p_;
      } else {
        return false;
      }
    }
  }

  // Whether the strings of a row array, [open, close) as RowArray read it, are all different. Read again only
  // for arrays out of order, and only to the first repeat (a fact's ids repeat at once).
  static bool Distinct(const uint8_t* open, const uint8_t* close) {
    std::unordered_set<std::string_view> seen;
    for (const uint8_t* p = open + 1; p < close - 1;) {
      const uint8_t* start = p + 1;  // past the opening quote
      const auto* stop = static_cast<const uint8_t*>(std::memchr(start, '"', static_cast<size_t>(close - start)));
      if (!seen.emplace(reinterpret_cast<const char*>(start), static_cast<size_t>(stop - start)).second) return false;
      p = stop + 2;  // past the closing quote and the comma or bracket
    }
    return true;
  }

  bool Digits() {
    const uint8_t* from = p_;
    while (p_ < end_ && IsDigit(*p_)) ++p_;
    return p_ > from;
  }

  // -?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?
  bool Number() {
    if (*p_ == '-') ++p_;
    if (p_ == end_) return false;
    if (*p_ == '0') {
      ++p_;
    } else if (!Digits()) {
      return false;
    }
    if (p_ < end_ && *p_ == '.') {
      ++p_;
      if (!Digits()) return false;
    }
    if (p_ < end_ && (*p_ == 'e' || *p_ == 'E')) {
      ++p_;
      if (p_ < end_ && (*p_ == '+' || *p_ == '-')) ++p_;
      if (!Digits()) return false;
    }
    return true;
  }

  bool Word(const char* word, size_t length) {
    if (static_cast<size_t>(end_ - p_) < length || std::memcmp(p_, word, length) != 0) return false;
    p_ += length;
    return true;
  }

  // A value. A container is only opened here (its closing bracket pushed); Run's loop reads what it holds.
  bool Value() {
    SkipSpace();
    if (p_ == end_) return false;
    const uint8_t* start;
    const uint8_t* stop;
    bool escaped;
    switch (*p_) {
      case '{':
      case '[':
        stack_.push_back(*p_ == '{' ? '}' : ']');
        ++p_;
        opened_ = true;
        return true;
      case '"':
        return String(&start, &stop, &escaped);
      case 't':
        return Word("true", 4);
      case 'f':
        return Word("false", 5);
      case 'n':
        return Word("null", 4);
      default:
        return (*p_ == '-' || IsDigit(*p_)) && Number();
    }
  }

  // A member of the innermost open object: key, colon, value. In the text's own object (one bracket deep) a
  // wanted key's value must be a string without escapes, and its span is kept; or, scanning for arrays, the key
  // must not have come before and its value must be a row array.
  bool Member() {
    SkipSpace();
    if (p_ == end_ || *p_ != '"') return false;
    const uint8_t* key;
    const uint8_t* key_end;
    bool escaped;
    if (!String(&key, &key_end, &escaped)) return false;
    SkipSpace();
    if (p_ == end_ || *p_ != ':') return false;
    ++p_;
    if (stack_.size() != 1) return Value();
    if (escaped) return false;  // it might spell a wanted key: the caller decides
    const size_t length = static_cast<size_t>(key_end - key);
    for (size_t k = 0; k < keys_.size(); k++) {
      if (keys_[k].size() != length || std::memcmp(keys_[k].data(), key, length) != 0) continue;
      if (arrays_) return arrays_[k].start < 0 && RowArray(&arrays_[k]);
      SkipSpace();
      const uint8_t* start;
      const uint8_t* stop;
      if (p_ == end_ || *p_ != '"' || !String(&start, &stop, &escaped) || escaped) return false;
      spans_[2 * k] = static_cast<int32_t>(start - origin_);
      spans_[2 * k + 1] = static_cast<int32_t>(stop - origin_);
      return true;
    }
    return Value();
  }

  const uint8_t* p_;
  const uint8_t* const end_;
  const std::vector<std::string>& keys_;
  int32_t* const spans_;
  std::vector<uint8_t>& stack_;
  JsonRowArray* const arrays_;
  const SkipPlainFn skip_plain_;
  const uint8_t* origin_ = nullptr;
  // Whether the innermost container was just opened: then it may close at once, and its first item has no comma.
  bool opened_ = false;
};

}  // namespace

void ScanJsonlKeys(const uint8_t* bytes, size_t n, const std::vector<std::string>& keys, std::vector<int32_t>* out) {
  std::vector<uint8_t> stack;
  std::vector<int32_t> spans(2 * keys.size());
  int32_t line = 0;
  for (size_t from = 0; from < n; line++) {
    const void* nl = std::memchr(bytes + from, '\n', n - from);
    const size_t to = nl ? static_cast<size_t>(static_cast<const uint8_t*>(nl) - bytes) : n;
    size_t first = from;
    while (first < to && (bytes[first] == ' ' || bytes[first] == '\t' || bytes[first] == '\r')) first++;
    if (first < to) {
      const JsonlVerdict verdict = Scan(bytes + from, bytes + to, keys, spans.data(), &stack).Run(bytes);
      out->insert(out->end(), {line, static_cast<int32_t>(from), static_cast<int32_t>(to), verdict});
      if (verdict == kJsonlPlain) {
        out->insert(out->end(), spans.begin(), spans.end());
      } else {
        out->insert(out->end(), spans.size(), -1);
      }
    }
    from = to + 1;
  }
}

bool ScanJsonRowArrays(const uint8_t* bytes, size_t n, const std::vector<std::string>& keys,
                       std::vector<JsonRowArray>* out) {
  std::vector<uint8_t> stack;
  out->assign(keys.size(), JsonRowArray{});
  return Scan(bytes, bytes + n, keys, nullptr, &stack, out->data()).Run(bytes) == kJsonlPlain;
}

IdRows::IdRows(std::string ids, size_t count) : ids_(std::move(ids)) {
  const char* p = ids_.data();
  const char* const end = p + ids_.size();
  for (size_t row = 0; row < count; row++) {
    const char* nl = static_cast<const char*>(std::memchr(p, '\n', static_cast<size_t>(end - p)));
    const char* stop = nl ? nl : end;
    rows_.insert_or_assign(std::string_view(p, static_cast<size_t>(stop - p)), static_cast<int32_t>(row));
    if (!nl) {
      complete_ = row + 1 == count;
      return;
    }
    p = nl + 1;
  }
  complete_ = count == 0 && ids_.empty();
}

int32_t IdRows::Find(std::string_view id) const {
  const auto it = rows_.find(id);
  return it == rows_.end() ? -1 : it->second;
}

void ScanJsonlJoin(const uint8_t* bytes, size_t n, const std::vector<std::string>& keys, const IdRows& ids,
                   const std::vector<std::string>& values, std::vector<int32_t>* out) {
  std::vector<int32_t> found;
  ScanJsonlKeys(bytes, n, keys, &found);
  constexpr size_t kStride = 8;  // ScanJsonlKeys' entries for two keys
  out->reserve(found.size());
  const auto text = [&](int32_t start, int32_t stop) {
    return std::string_view(reinterpret_cast<const char*>(bytes) + start, static_cast<size_t>(stop - start));
  };
  for (size_t e = 0; e + kStride <= found.size(); e += kStride) {
    const int32_t* f = &found[e];
    int32_t verdict = f[3], row = -1, value = -1;
    if (verdict == kJsonlPlain && f[4] >= 0 && f[6] >= 0) {
      const std::string_view v = text(f[6], f[7]);
      for (size_t i = 0; i < values.size() && value < 0; i++) {
        if (values[i] == v) value = static_cast<int32_t>(i);
      }
    }
    if (value >= 0) {
      row = ids.Find(text(f[4], f[5]));
    } else {
      verdict = kJsonlDefer;
    }
    out->insert(out->end(), {f[0], f[1], f[2], verdict, row, value, f[4], f[5]});
  }
}

}  // namespace hsm
