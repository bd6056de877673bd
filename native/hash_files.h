// Whole files hashed in native threads: each thread keeps an even share of the
// files open at a time, up to sixteen, and feeds them through Sha256UpdateN
// together (side by side in vector lanes, or their blocks interleaved on the
// SHA unit), in large chunks, mapped from the page cache a window at a time
// (or read with pread into buffers of its own, where a file cannot be mapped or
// has grown since it was opened), so the bytes go from the page cache to the
// hash without touching JavaScript. A mapped file cut short while it is hashed
// fails with EIO (see hash_files.cc), as a file that cannot be read does.
#pragma once
#include <cstddef>
#include <cstdint>

namespace hsm {

struct FileHashJob {
  const char* path;
  uint64_t stats_from;  // where the counted values start
  int width;            // 2: float16, 4: float32, 0: count nothing
};

struct FileHashResult {
  uint8_t digest[32];
  uint64_t bytes;      // bytes read and hashed
  uint64_t nonfinite;  // as Sha256State
  uint32_t max_bits;
  int error;  // errno of the open or read that failed (EIO: a mapped file cut short); 0: the fields above hold
};

// Hashes every job on up to `threads` threads (the calling one included);
// out[i] is job i's result.
void Sha256Files(const FileHashJob* jobs, size_t n, int threads, FileHashResult* out);

}  // namespace hsm
