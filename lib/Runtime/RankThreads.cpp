//===- RankThreads.cpp - thread ranks that live as long as a session ------===//

#include "RankThreads.h"
#include "WaitAwake.h"

using namespace tp::rt::detail;

RankThreads::RankThreads(int32_t ranks, std::chrono::microseconds awake)
    : awake(awake) {
  for (int32_t rank = 1; rank < ranks; ++rank)
    workers.emplace_back([this, rank] { serve(rank); });
}

RankThreads::~RankThreads() {
  {
    std::lock_guard<std::mutex> lock(mutex);
    stopping = true;
  }
  started.notify_all();
  for (std::thread &worker : workers)
    worker.join();
}

template <typename Ready>
void RankThreads::wait(std::condition_variable &wakeUp, Ready ready) {
  if (waitAwake(awake, ready))
    return;
  std::unique_lock<std::mutex> lock(mutex);
  wakeUp.wait(lock, ready);
}

void RankThreads::run(const std::function<void(int32_t)> &call) {
  {
    std::lock_guard<std::mutex> lock(mutex);
    job = &call;
    running.store(static_cast<int32_t>(workers.size()),
                  std::memory_order_relaxed);
    calls.fetch_add(1, std::memory_order_release);
  }
  started.notify_all();
  call(0);
  wait(finished, [&] { return running.load(std::memory_order_acquire) == 0; });
}

void RankThreads::serve(int32_t rank) {
  uint64_t done = 0;
  for (;;) {
    wait(started, [&] {
      return calls.load(std::memory_order_acquire) != done ||
             stopping.load(std::memory_order_acquire);
    });
    if (stopping.load(std::memory_order_acquire))
      return;
    done = calls.load(std::memory_order_acquire);
    (*job)(rank);
    if (running.fetch_sub(1, std::memory_order_acq_rel) == 1) {
      // Under the mutex, so that the caller cannot miss the notification
      // between its last check and its sleep.
      std::lock_guard<std::mutex> lock(mutex);
      finished.notify_all();
    }
  }
}
