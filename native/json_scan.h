// Two scans that find what a reader needs in JSON text without building the
// values, each checking the text against JSON's grammar (RFC 8259) as it goes:
//
// - the top-level string members of JSON Lines records;
// - the top-level arrays of strings of one JSON document (a store's per-row
//   lists in index.json, tens of thousands of ids).
//
// Text the scan cannot vouch for is left to the caller, which parses it in
// full: text that is not a JSON object or not valid JSON, a wanted member in a
// form the scan does not take (below), a key written with escapes at the top
// level (it might spell a wanted key). Every error and every unusual record
// thus stays the caller's parser's, word for word; the scan only speeds up the
// plain case.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace hsm {

// What the scan says of a line that is not blank.
enum JsonlVerdict : int32_t {
  kJsonlPlain = 0,  // a valid JSON object: the wanted keys' spans are given (start = end = -1 where absent)
  kJsonlDefer = 1,  // anything else: the caller parses the line itself
};

// Scans bytes[0, n): whole lines, each ending in '\n' except perhaps the last. A line of JSON whitespace only
// (spaces, tabs, carriage returns) is blank and skipped. Per other line, appends to `out`:
// line index (0-based, blank lines counted), first byte, end (before '\n'), verdict, then per key of `keys` the
// start and end of its value's characters between the quotes (of the last member with that key, as JSON.parse
// keeps the last).
void ScanJsonlKeys(const uint8_t* bytes, size_t n, const std::vector<std::string>& keys, std::vector<int32_t>* out);

// A wanted top-level array of one document, as the scan found it.
struct JsonRowArray {
  int32_t start = -1;    // its '[' (-1: the document has no such member)
  int32_t end = -1;      // just past its ']'
  int32_t count = 0;     // the strings it holds
  bool distinct = true;  // no string twice
};

// Scans one JSON document, bytes[0, n), which may span lines. Returns true when it is a valid JSON object in which
// each of `keys` is absent or appears once at the top level as an array of plain strings written without
// whitespace: every byte of every string printable ASCII (0x20 to 0x7E) other than '"' and '\'. Such an array is
// then its own canonical JSON (JSON.stringify writes it back byte for byte), and out[k] says where key k's array
// is. Returns false otherwise, for the caller to parse the document in full. Strings that come each after the one
// before, byte by byte (as a bank's zero-padded ids do), are distinct without further work; others are checked in a
// hash set, which stops at the first repeat.
bool ScanJsonRowArrays(const uint8_t* bytes, size_t n, const std::vector<std::string>& keys,
                       std::vector<JsonRowArray>* out);

// Ids and their rows, for ScanJsonlJoin: `count` ids given one per line ('\n' between two; an id holds no
// '\n', and may be empty), row i the i-th; an id given twice keeps its last row.
class IdRows {
 public:
  IdRows(std::string ids, size_t count);
  // Whether `ids` held exactly `count` ids.
  bool complete() const { return complete_; }
  // The row of `id`, or -1.
  int32_t Find(std::string_view id) const;

 private:
  std::string ids_;
  std::unordered_map<std::string_view, int32_t> rows_;
  bool complete_ = false;
};

// ScanJsonlKeys for an id member and a value member (keys[0], keys[1]), joined: per line that is not blank,
// [line, first byte, end, verdict, row, value, id start, id end], where a plain line (both members plain strings,
// the value one of `values`) has the id's row in `ids` (-1: not there) and the value's index in `values`; any
// other line is kJsonlDefer with row and value -1, for the caller to parse.
void ScanJsonlJoin(const uint8_t* bytes, size_t n, const std::vector<std::string>& keys, const IdRows& ids,
                   const std::vector<std::string>& values, std::vector<int32_t>* out);

}  // namespace hsm
