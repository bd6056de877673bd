#include "hash_files.h"

#include <fcntl.h>
#include <setjmp.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdlib>
#include <memory>
#include <mutex>
#include <vector>

#include "sha256.h"
#include "threads.h"

namespace hsm {
namespace {

// Bytes of each file per step (mapped, or read per call): all lanes' chunks
// stay in a core's L2 cache between a read and the hash, and system calls cost
// nothing at this size. A multiple of 4, so no counted value straddles two
// chunks.
constexpr size_t kChunk = size_t{128} << 10;

// Bytes of a file mapped at a time (a multiple of kChunk): the pages hashed are
// unmapped as the next window is mapped, so that a process hashing a 10 GB
// store never holds more than a few windows a file in its resident set.
constexpr size_t kWindow = size_t{2} << 20;

// One file in progress on a thread. A regular file is hashed where the page
// cache holds it, mapped into memory a window at a time (map: bytes
// [map_from, map_from + map_len) of its first `size`, its length when it was
// opened), which spares the copy a read makes: about a third of the CPU time of
// hashing a store whose pages are cached. Past that length, and for any file
// that cannot be mapped, it is read into buf, until its end: a file that grew
// since it was opened is hashed whole, as reading alone would.
struct Lane {
  size_t job = 0;
  int fd = -1;
  uint64_t pos = 0;
  const uint8_t* data = nullptr;  // the bytes from the last read: in buf or in the window
  size_t len = 0;
  Sha256State state;
  uint8_t* buf = nullptr;
  uint64_t size = 0;  // bytes to take from windows; 0: read them all
  const uint8_t* map = nullptr;
  uint64_t map_from = 0;
  size_t map_len = 0;
};

void Unmap(Lane& lane) {
  if (lane.map != nullptr) munmap(const_cast<uint8_t*>(lane.map), lane.map_len);
  lane.map = nullptr, lane.map_from = 0, lane.map_len = 0;
}

// Mapped bytes that are gone (the file was cut short after it was mapped) raise
// SIGBUS on the thread that touches them. While a thread hashes mapped bytes
// its jump point is armed, and the handler returns there: the hash in progress
// fails, and its files are read again by the caller. Any other SIGBUS goes to
// whatever handled it before. (Initial-exec: reading the variable in the
// handler allocates nothing, on any thread.)
__attribute__((tls_model("initial-exec"))) thread_local sigjmp_buf* t_jump = nullptr;
struct sigaction g_before_bus;

void OnBus(int sig, siginfo_t* info, void* context) {
  if (sigjmp_buf* jump = t_jump) siglongjmp(*jump, 1);
  if (g_before_bus.sa_flags & SA_SIGINFO) {
    if (g_before_bus.sa_sigaction != nullptr) g_before_bus.sa_sigaction(sig, info, context);
  } else if (g_before_bus.sa_handler == SIG_DFL) {
    // Returning re-runs the faulting access, which now meets the default action.
    signal(SIGBUS, SIG_DFL);
  } else if (g_before_bus.sa_handler != SIG_IGN) {
    g_before_bus.sa_handler(sig);
  }
}

// Whether the handler is in place (installed once per process, on first use).
bool BusHandled() {
  static std::once_flag once;
  static bool ok = false;
  std::call_once(once, [] {
    struct sigaction sa = {};
    sa.sa_sigaction = OnBus;
    sa.sa_flags = SA_SIGINFO | SA_ONSTACK;
    sigemptyset(&sa.sa_mask);
    ok = sigaction(SIGBUS, &sa, &g_before_bus) == 0;
  });
  return ok;
}

// Sha256UpdateN with the jump point armed; false where mapped bytes were gone,
// and the states are then of no use. Only plain arithmetic runs while it is
// armed: nothing to release on the way out.
__attribute__((noinline)) bool UpdateGuarded(Sha256State* const s[], const uint8_t* const data[], const size_t n[],
                                             const size_t from[], const int width[], int count) {
  sigjmp_buf jump;
  if (sigsetjmp(jump, 1) != 0) {
    t_jump = nullptr;
    return false;
  }
  t_jump = &jump;
  Sha256UpdateN(s, data, n, from, width, count);
  t_jump = nullptr;
  return true;
}

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
    lane.job = i, lane.fd = fd, lane.pos = 0, lane.len = 0, lane.size = 0;
    struct stat st;
    if (BusHandled() && fstat(fd, &st) == 0 && S_ISREG(st.st_mode)) lane.size = static_cast<uint64_t>(st.st_size);
    Sha256Init(&lane.state);
    return true;
  }
}

// The lane's next chunk: from its window while the file's first `size` bytes
// last (the next window mapped as one ends), else read into its buffer;
// returns 0, or errno.
int Read(Lane& lane) {
  if (lane.pos < lane.size && lane.pos >= lane.map_from + lane.map_len) {
    Unmap(lane);
    const size_t len = static_cast<size_t>(std::min<uint64_t>(kWindow, lane.size - lane.pos));
    void* map = mmap(nullptr, len, PROT_READ, MAP_SHARED, lane.fd, static_cast<off_t>(lane.pos));
    if (map == MAP_FAILED) {
      lane.size = 0;  // read the rest
    } else {
      madvise(map, len, MADV_SEQUENTIAL);
#ifdef MADV_POPULATE_READ
      // The window's page table at once (where the kernel offers it, 5.14 on), not a fault every 64 KB.
      madvise(map, len, MADV_POPULATE_READ);
#endif
      lane.map = static_cast<const uint8_t*>(map), lane.map_from = lane.pos, lane.map_len = len;
    }
  }
  if (lane.pos < lane.size) {
    lane.data = lane.map + (lane.pos - lane.map_from);
    lane.len = static_cast<size_t>(std::min<uint64_t>(kChunk, lane.map_from + lane.map_len - lane.pos));
    return 0;
  }
  Unmap(lane);
  lane.data = lane.buf;
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
  Unmap(lane);
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
    bool mapped = false;
    for (int j = 0; j < kMaxLanes; j++) {
      // A lane at its file's end finishes it and takes the next file.
      while (active[j]) {
        const int error = Read(lanes[j]);
        if (error == 0 && lanes[j].len > 0) break;
        Finish(sh, lanes[j], error);
        active[j] = Take(sh, lanes[j]);
      }
      if (!active[j]) continue;
      states[count] = &lanes[j].state, data[count] = lanes[j].data, len[count] = lanes[j].len;
      from[count] = StatsOffset(sh, lanes[j]), width[count] = sh.jobs[lanes[j].job].width;
      mapped = mapped || lanes[j].map != nullptr;  // a window is held only while its bytes are hashed
      count++;
    }
    if (count == 0) break;
    if (!mapped) Sha256UpdateN(states, data, len, from, width, count);
    else if (!UpdateGuarded(states, data, len, from, width, count)) {
      // A mapped file was cut short: every file of this step fails (their states took part), to be read again.
      for (int j = 0; j < kMaxLanes; j++) {
        if (!active[j]) continue;
        Finish(sh, lanes[j], EIO);
        active[j] = Take(sh, lanes[j]);
      }
      continue;
    }
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
