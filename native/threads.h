// The thread splits the native kernels share. Every kernel that starts threads
// does it here, so that a thread that cannot start, or a C++ exception on any
// thread, reaches the caller as an exception instead of ending the process
// (a std::thread destroyed while joinable calls std::terminate).
#pragma once
#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstddef>
#include <exception>
#include <system_error>
#include <thread>
#include <utility>
#include <vector>

namespace hsm {

namespace testing {
// Test hook: when positive, the thread start that brings it to zero throws, as a
// failed std::thread start would (set through the addon's testFailThreadStart).
inline std::atomic<int> fail_thread_start{0};
}  // namespace testing

namespace detail {
// Threads joined when it goes out of scope, however that happens.
struct Pool {
  std::vector<std::thread> threads;
  ~Pool() {
    for (auto& th : threads) th.join();
  }
};

// A new thread running body, unless the test hook says this start fails.
template <typename Body>
std::thread Start(Body body) {
  int armed = testing::fail_thread_start.load();
  while (armed > 0 && !testing::fail_thread_start.compare_exchange_weak(armed, armed - 1)) {
  }
  if (armed == 1) throw std::system_error(EAGAIN, std::generic_category(), "thread start failed (test hook)");
  return std::thread(std::move(body));
}

// fn(t) for t in [0, nt), t = 0 on the calling thread. A thread that cannot
// start throws (all) or leaves the remaining t undone (!all); either way the
// threads already started are joined first. The first exception any t threw
// is rethrown on the calling thread.
template <typename Fn>
void Run(size_t nt, bool all, Fn& fn) {
  std::vector<std::exception_ptr> errors(nt);
  auto run = [&](size_t t) {
    try {
      fn(t);
    } catch (...) {
      errors[t] = std::current_exception();
    }
  };
  {
    Pool pool;  // declared after `run`, so joined before `run` goes
    pool.threads.reserve(nt - 1);
    for (size_t t = 1; t < nt; t++) {
      try {
        pool.threads.push_back(Start([&run, t] { run(t); }));
      } catch (const std::system_error&) {
        if (all) throw;
        break;
      }
    }
    run(0);
  }
  for (const auto& e : errors) {
    if (e) std::rethrow_exception(e);
  }
}
}  // namespace detail

// fn(t) for every t in [0, nt): t = 0 on the calling thread, each other t on a
// thread of its own. A C++ exception from any t, or the std::system_error of a
// thread that could not start, is rethrown on the calling thread once every
// thread started has been joined.
template <typename Fn>
void Parallel(size_t nt, Fn fn) {
  if (nt <= 1) return fn(size_t{0});
  detail::Run(nt, true, fn);
}

// fn() on up to nt threads (the calling one included) that share a work queue
// of their own: a thread that cannot start leaves its part to the others.
// Exceptions reach the caller as in Parallel.
template <typename Fn>
void Crew(size_t nt, Fn fn) {
  auto each = [&](size_t) { fn(); };
  if (nt <= 1) return each(0);
  detail::Run(nt, false, each);
}

// fn(t, begin, end) over [0, n) in exactly nt >= 1 contiguous shares, share t
// being [n t / nt, n (t + 1) / nt) (empty where nt > n).
template <typename Fn>
void Split(size_t n, size_t nt, Fn fn) {
  nt = std::max<size_t>(1, nt);
  Parallel(nt, [&](size_t t) { fn(t, n * t / nt, n * (t + 1) / nt); });
}

// fn(begin, end) over [0, n) in up to `threads` contiguous shares, never more
// shares than n.
template <typename Fn>
void Shares(size_t n, int threads, Fn fn) {
  const size_t nt = std::max<size_t>(1, std::min<size_t>(static_cast<size_t>(std::max(1, threads)), n));
  Split(n, nt, [&](size_t, size_t begin, size_t end) { fn(begin, end); });
}

}  // namespace hsm
