//===- WaitAwake.h - waiting for a peer without sleeping --------*- C++ -*-===//
//
// Private to lib/Runtime. A thread rank that waits for a peer (at a
// collective's barrier, or for its next call) polls for a while before it
// sleeps on a futex: a sleep and wake-up costs tens of microseconds, and in
// a virtual machine, where an idle core is halted and its wake-up goes
// through the hypervisor, often hundreds.
//
//===----------------------------------------------------------------------===//

#ifndef TP_LIB_RUNTIME_WAITAWAKE_H
#define TP_LIB_RUNTIME_WAITAWAKE_H

#include <algorithm>
#include <chrono>
#include <thread>

namespace tp::rt::detail {

/// How long a waiting thread spins before it yields between checks.
constexpr std::chrono::microseconds kPureSpin(50);

inline void cpuRelax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  asm volatile("yield");
#endif
}

/// Polls `ready()` for up to `awake`: spinning for the first kPureSpin,
/// then handing the core to any other thread that wants it
/// (sched_yield) between checks. Returns whether `ready()` held.
template <typename Ready>
bool waitAwake(std::chrono::microseconds awake, Ready ready) {
  using Clock = std::chrono::steady_clock;
  if (awake.count() <= 0)
    return ready();
  Clock::time_point start = Clock::now(), until = start + awake,
                    polite = start + std::min(awake, kPureSpin);
  for (Clock::time_point now = start; now < until; now = Clock::now()) {
    if (ready())
      return true;
    if (now < polite)
      cpuRelax();
    else
      std::this_thread::yield();
  }
  return ready();
}

} // namespace tp::rt::detail

#endif // TP_LIB_RUNTIME_WAITAWAKE_H
