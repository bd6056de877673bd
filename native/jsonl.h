// The top-level string members of JSON Lines records, found without building
// the records. Each line is checked against JSON's grammar (RFC 8259) as it is
// scanned, and the spans of the wanted keys' values are kept. A line the scan
// cannot vouch for is left to the caller, which parses it in full: one that is
// not a JSON object or not valid JSON, one where a wanted key's value is not a
// string free of escapes, one with a key written with escapes at the top level
// (it might spell a wanted key). Every error and every unusual record thus stays
// the caller's parser's, word for word; the scan only speeds up the plain case.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>
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

}  // namespace hsm
