#include "hash_files.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdlib>
#include <memory>
#include <vector>

#include "sha256.h"
#include "threads.h"

namespace hsm {
namespace {

// Bytes read per call: all lanes' chunks stay in a core's L2 cache between the
// read and the hash, and system calls cost nothing at this size. A multiple of
// 4, so no counted value straddles two chunks.
constexpr size_t kChunk = size_t{128} << 10;

// One file in progress on a thread.
struct Lane {
  size_t job = 0;
  int fd = -1;
  uint64_t pos = 0;
  size_t len = 0;  // bytes in buf from the last read
  Sha256State state;
  uint8_t* buf = nullptr;
};

struct Shared {
  const FileHashJob* jobs;
  size_t n;
  int lanes;  // files each thread keeps going
  FileHashResult* out;
  std::atomic<size_t> next{0};
};

// Opens the next job not yet taken; false when none is left. A job whose file
// cannot be opened gets its error and the lane moves on to the next.
bool Take(Shared& sh, Lane& lane) {
  for (;;) {
    const size_t i = sh.next.fetch_add(1, std::memory_order_relaxed);
    if (i >= sh.n) return false;
    // Never through a symbolic link, and never waiting on a FIFO: a store
    // holds its own regular files, whatever is swapped in after the checks.
    const int fd = open(sh.jobs[i].path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK);
    if (fd < 0) {
      sh.out[i] = FileHashResult{};
      sh.out[i].error = errno;
      continue;
    }
#ifdef POSIX_FADV_SEQUENTIAL
    posix_fadvise(fd, 0, 0, POSIX_FADV_SEQUENTIAL);
#endif
    lane.job = i, lane.fd = fd, lane.pos = 0, lane.len = 0;
    Sha256Init(&lane.state);
    return true;
  }
}

// Fills the lane's buffer with the next chunk; returns 0, or errno.
int Read(Lane& lane) {
  size_t got = 0;
  while (got < kChunk) {
    const ssize_t r = pread(lane.fd, lane.buf + got, kChunk - got, static_cast<off_t>(lane.pos + got));
    if (r < 0) {
      if (errno == EINTR) continue;
      return errno;
    }
    if (r == 0) break;
    got += static_cast<size_t>(r);
  }
  lane.len = got;
  return 0;
}

void Finish(Shared& sh, Lane& lane, int error) {
  FileHashResult& r = sh.out[lane.job];
  r = FileHashResult{};
  if (error == 0) {
    Sha256Final(&lane.state, r.digest);
    r.bytes = lane.pos;
    r.nonfinite = lane.state.nonfinite;
    r.max_bits = lane.state.max_bits;
  }
  r.error = error;
  close(lane.fd);
  lane.fd = -1;
}

// Where in the chunk just read the counted values start.
size_t StatsOffset(const Shared& sh, const Lane& lane) {
  const uint64_t from = sh.jobs[lane.job].stats_from;
  return from > lane.pos ? static_cast<size_t>(std::min<uint64_t>(from - lane.pos, lane.len)) : 0;
}

void Work(Shared& sh) {
  struct Free {
    void operator()(uint8_t* p) const { std::free(p); }
  };
  std::unique_ptr<uint8_t, Free> mem(static_cast<uint8_t*>(std::aligned_alloc(4096, sh.lanes * kChunk)));
  if (!mem) {
    // No memory for buffers: every job this thread would take fails with ENOMEM.
    for (size_t i = sh.next.fetch_add(1); i < sh.n; i = sh.next.fetch_add(1))
      sh.out[i] = FileHashResult{}, sh.out[i].error = ENOMEM;
    return;
  }
  Lane lanes[kMaxLanes];
  bool active[kMaxLanes] = {};
  for (int j = 0; j < sh.lanes; j++) {
    lanes[j].buf = mem.get() + j * kChunk;
    active[j] = Take(sh, lanes[j]);
  }
  for (;;) {
    Sha256State* states[kMaxLanes];
    const uint8_t* data[kMaxLanes];
    size_t len[kMaxLanes], from[kMaxLanes];
    int width[kMaxLanes];
    int count = 0;
    for (int j = 0; j < kMaxLanes; j++) {
      // A lane at its file's end finishes it and takes the next file.
      while (active[j]) {
        const int error = Read(lanes[j]);
        if (error == 0 && lanes[j].len > 0) break;
        Finish(sh, lanes[j], error);
        active[j] = Take(sh, lanes[j]);
      }
      if (!active[j]) continue;
      states[count] = &lanes[j].state, data[count] = lanes[j].buf, len[count] = lanes[j].len;
      from[count] = StatsOffset(sh, lanes[j]), width[count] = sh.jobs[lanes[j].job].width;
      count++;
    }
    if (count == 0) break;
    Sha256UpdateN(states, data, len, from, width, count);
    for (int j = 0; j < kMaxLanes; j++) {
      if (active[j]) lanes[j].pos += lanes[j].len;
    }
  }
}

}  // namespace

void Sha256Files(const FileHashJob* jobs, size_t n, int threads, FileHashResult* out) {
  Shared sh;
  sh.jobs = jobs, sh.n = n, sh.out = out;
  // Files are shared evenly, up to kMaxLanes going at a time per thread: one
  // file per core hashes faster than two on one core.
  const size_t want = std::min<size_t>(static_cast<size_t>(std::max(1, threads)), std::max<size_t>(1, n));
  sh.lanes = static_cast<int>(std::clamp<size_t>((n + want - 1) / want, 1, kMaxLanes));
  // A thread that cannot start leaves its files to the others.
  Crew(want, [&] { Work(sh); });
}

}  // namespace hsm
