//===- RankThreads.h - thread ranks that live as long as a session -*- C++
//-*-===//
//
// Private to lib/Runtime. A decode step is one call of every rank's stage
// function, a few milliseconds; starting a thread per rank per call cost a
// thread start, and a new thread lands on a core that may have gone idle
// (halted, in a virtual machine: its wake-up goes through the hypervisor).
// RankThreads keeps ranks 1 .. N-1 on threads of their own for the
// session's life, runs rank 0 on the caller's thread, and lets a rank that
// finished wait awake, as a rank at a barrier does (spinning, then
// yielding the core between checks), for the next call before it sleeps.
//
//===----------------------------------------------------------------------===//

#ifndef TP_LIB_RUNTIME_RANKTHREADS_H
#define TP_LIB_RUNTIME_RANKTHREADS_H

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace tp::rt::detail {

class RankThreads {
public:
  /// Threads for ranks 1 .. ranks-1, each awake for up to `awake` after a
  /// call before it sleeps (0: sleeps at once).
  RankThreads(int32_t ranks, std::chrono::microseconds awake);
  ~RankThreads();
  RankThreads(const RankThreads &) = delete;
  RankThreads &operator=(const RankThreads &) = delete;

  /// Runs job(rank) for every rank, rank 0 on this thread, and returns once
  /// all have returned. `job` must not throw (each rank catches its own).
  void run(const std::function<void(int32_t)> &job);

private:
  void serve(int32_t rank);
  /// Waits until `ready()`: awake for up to `awake`, then asleep on
  /// `wakeUp` under `mutex`.
  template <typename Ready>
  void wait(std::condition_variable &wakeUp, Ready ready);

  const std::chrono::microseconds awake;
  std::mutex mutex;
  std::condition_variable started, finished;
  /// Incremented by each run(); a worker runs the job once per increment.
  std::atomic<uint64_t> calls{0};
  /// Workers still running the current job.
  std::atomic<int32_t> running{0};
  std::atomic<bool> stopping{false};
  const std::function<void(int32_t)> *job = nullptr;
  std::vector<std::thread> workers;
};

} // namespace tp::rt::detail

#endif // TP_LIB_RUNTIME_RANKTHREADS_H
