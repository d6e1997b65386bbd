//===- ThreadCommunicator.cpp - ranks as threads of one process -----------===//
//
// Collectives meet at a Rendezvous, one per group of ranks. A collective is
// two barriers: at the first every member publishes a pointer to its input;
// between them each member computes its own result by reading its peers'
// inputs; the second keeps every input alive and unchanged until all members
// have finished reading. allReduce works in place, so it reduces into a
// temporary and copies it back after the second barrier. Every member reduces
// in group order, so all members end with bitwise equal results.
//
// One mutex guards the whole world; the copying and arithmetic run outside
// it, so groups with different members proceed independently.
//
// A member that arrives first waits awake before it sleeps on the condition
// variable: a futex sleep and wake-up costs tens of microseconds, and in a
// virtual machine, where an idle core is halted and its wake-up goes
// through the hypervisor, often hundreds; a decode step pays it at about
// 50 barriers (a 12-layer decoder). So it spins for kPureSpin, then keeps
// checking between sched_yield calls, which hand the core to any other
// thread that wants it, for up to 2 ms in all. On 2 ranks of this 2-core
// VM the GPT-2-small-shaped decode step's waits at collectives went from
// 2.0-2.2 ms (spinning 50 us) to 0.4-0.5 ms. With more ranks than cores a
// waiting rank would take the core a peer needs, so it sleeps at once.
// TP_SPIN_WAIT_US sets the time awake (0: sleep at once).
//
//===----------------------------------------------------------------------===//

#include "tp/Runtime/Communicators.h"

#include "Messages.h"
#include "Reduce.h"
#include "WaitAwake.h"

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <map>
#include <mutex>
#include <thread>
#include <utility>
#include <vector>

using namespace tp::rt;
using namespace tp::rt::detail;

namespace {

using Clock = std::chrono::steady_clock;

} // namespace

std::chrono::microseconds tp::rt::threadRankAwake(int32_t ranks) {
  if (const char *text = std::getenv("TP_SPIN_WAIT_US")) {
    char *end = nullptr;
    long long us = std::strtoll(text, &end, 10);
    if (end == text || *end != '\0' || us < 0 || us > 1000000)
      throw Error(std::string("TP_SPIN_WAIT_US must be a number of "
                              "microseconds from 0 to 1000000, not '") +
                  text + "'");
    return std::chrono::microseconds(us);
  }
  unsigned cores = std::thread::hardware_concurrency();
  return std::chrono::microseconds(
      cores && static_cast<unsigned>(ranks) <= cores ? 2000 : 0);
}

namespace {

enum class Kind { AllReduce, AllGather, ReduceScatter };

const char *kindName(Kind kind) {
  switch (kind) {
  case Kind::AllReduce:
    return "all_reduce";
  case Kind::AllGather:
    return "all_gather";
  case Kind::ReduceScatter:
    return "reduce_scatter";
  }
  return "collective";
}

/// What one member brings to a collective: its input, and the parameters on
/// which all members must agree.
struct Contribution {
  Kind kind = Kind::AllReduce;
  const void *input = nullptr;
  /// Elements for allReduce and reduceScatter (per chunk), bytes per chunk
  /// for allGather.
  int64_t count = 0;
  int64_t outer = 1;
  DType type = DType::U8;
  Reduction op = Reduction::Sum;

  bool agrees(const Contribution &other) const {
    return kind == other.kind && count == other.count && outer == other.outer &&
           type == other.type && op == other.op;
  }

  std::string describe() const {
    std::string text = kindName(kind);
    text += " (outer " + std::to_string(outer) + ", ";
    if (kind == Kind::AllGather)
      return text + std::to_string(count) + " bytes)";
    return text + std::to_string(count) + " " + dtypeName(type) + ", " +
           reductionName(op) + ")";
  }
};

/// The meeting point of one group of ranks, reused by all its collectives.
struct Rendezvous {
  explicit Rendezvous(std::vector<int32_t> ranks)
      : members(std::move(ranks)), present(members.size(), false),
        contributions(members.size()) {}

  /// Global ranks in group order.
  const std::vector<int32_t> members;
  std::condition_variable changed;
  /// Advances each time all members have arrived at a barrier. Written
  /// under the world's mutex; read without it by a spinning member.
  std::atomic<uint64_t> generation{0};
  size_t arrived = 0;
  /// Which members have arrived at the current barrier.
  std::vector<bool> present;
  std::vector<Contribution> contributions;
  /// Set once a member timed out: the group can never meet again, because
  /// the member that did not come may still arrive and must not find a
  /// half-complete barrier.
  std::string broken;
};

/// Messages from one rank to another, oldest first.
struct Mailbox {
  std::deque<std::vector<char>> messages;
  std::condition_variable changed;
};

} // namespace

namespace tp::rt {

class ThreadWorld {
public:
  ThreadWorld(int32_t ranks, std::chrono::milliseconds timeout,
              std::chrono::microseconds spin)
      : ranks(ranks), timeout(timeout), spin(spin) {}

  const int32_t ranks;
  const std::chrono::milliseconds timeout;
  /// How long a member waits at a barrier before it sleeps.
  const std::chrono::microseconds spin;

  /// Guards everything below.
  std::mutex mutex;
  bool aborted = false;
  std::string abortReason;
  std::map<std::vector<int32_t>, std::unique_ptr<Rendezvous>> meetings;
  std::map<std::pair<int32_t, int32_t>, std::unique_ptr<Mailbox>> mailboxes;

  /// The rendezvous of the group with `members`; the caller holds `mutex`.
  Rendezvous &meeting(const std::vector<int32_t> &members) {
    std::unique_ptr<Rendezvous> &slot = meetings[members];
    if (!slot)
      slot = std::make_unique<Rendezvous>(members);
    return *slot;
  }

  /// The mailbox for messages from `source` to `destination`; the caller
  /// holds `mutex`.
  Mailbox &mailbox(int32_t source, int32_t destination) {
    std::unique_ptr<Mailbox> &slot = mailboxes[{source, destination}];
    if (!slot)
      slot = std::make_unique<Mailbox>();
    return *slot;
  }
};

} // namespace tp::rt

namespace {

class ThreadRankContext final : public RankContext {
public:
  ThreadRankContext(std::shared_ptr<ThreadWorld> world, int32_t rank)
      : world(std::move(world)), myRank(rank) {}

  int32_t rank() const override { return myRank; }
  int32_t worldSize() const override { return world->ranks; }

  void allReduce(Group group, void *buffer, int64_t count, DType type,
                 Reduction op, const char *site) override;
  void allGather(Group group, const void *in, void *out, int64_t outer,
                 int64_t chunkBytes, const char *site) override;
  void reduceScatter(Group group, const void *in, void *out, int64_t outer,
                     int64_t chunk, DType type, Reduction op,
                     const char *site) override;
  void send(int32_t peer, const void *buffer, int64_t bytes,
            const char *site) override;
  void recv(int32_t peer, void *buffer, int64_t bytes,
            const char *site) override;

private:
  [[noreturn]] void fail(const char *site, const std::string &what) const {
    throw Error(where(myRank, site) + " " + what);
  }
  [[noreturn]] void failAborted(const char *site) const {
    fail(site, "aborted: " + world->abortReason);
  }

  /// The global ranks of the caller's `group`, in group order.
  std::vector<int32_t> membersOf(Group group, const char *site) const;
  void checkPeer(int32_t peer, const char *site) const;
  void checkCount(int64_t count, const char *what, const char *site) const;
  void checkReducible(DType type, const char *site) const;

  /// Runs one collective: publishes `mine`, waits for the group, calls
  /// `compute` with every member's contribution in group order, and waits
  /// until all members have computed. `compute` must not throw.
  template <typename Compute>
  void collective(Group group, const Contribution &mine, const char *site,
                  Compute compute);

  /// Barrier over `meeting`'s members; `lock` holds the world's mutex. When
  /// `abortable` is false an abort of the world is ignored: the peers are
  /// known to be coming and may still be reading the caller's buffers.
  void meet(Rendezvous &meeting, std::unique_lock<std::mutex> &lock,
            size_t index, const char *site, bool abortable);

  std::shared_ptr<ThreadWorld> world;
  int32_t myRank;
};

} // namespace

std::vector<int32_t> ThreadRankContext::membersOf(Group group,
                                                  const char *site) const {
  std::string shape = "group of " + std::to_string(group.size) +
                      " ranks with stride " + std::to_string(group.stride);
  if (group.size < 1 || group.stride < 1)
    fail(site, "got an invalid " + shape);
  std::vector<int32_t> members;
  members.reserve(group.size);
  for (int32_t i = 0; i < group.size; ++i) {
    int64_t peer = groupPeer(group, i);
    if (peer < 0 || peer >= world->ranks)
      fail(site, "got a " + shape + " that does not fit in a world of " +
                     std::to_string(world->ranks) + " ranks");
    members.push_back(static_cast<int32_t>(peer));
  }
  return members;
}

void ThreadRankContext::checkPeer(int32_t peer, const char *site) const {
  if (peer < 0 || peer >= world->ranks)
    fail(site, "names rank " + std::to_string(peer) + " in a world of " +
                   std::to_string(world->ranks) + " ranks");
}

void ThreadRankContext::checkCount(int64_t count, const char *what,
                                   const char *site) const {
  if (count < 0)
    fail(site, std::string("got a negative ") + what + " (" +
                   std::to_string(count) + ")");
}

void ThreadRankContext::checkReducible(DType type, const char *site) const {
  if (!canReduce(type))
    fail(site, std::string("cannot reduce ") + dtypeName(type) + " values");
}

void ThreadRankContext::meet(Rendezvous &meeting,
                             std::unique_lock<std::mutex> &lock, size_t index,
                             const char *site, bool abortable) {
  if (abortable && world->aborted)
    failAborted(site);
  if (!meeting.broken.empty())
    fail(site, "cannot run: its group already " + meeting.broken);

  uint64_t generation = meeting.generation;
  meeting.present[index] = true;
  if (++meeting.arrived == meeting.members.size()) {
    meeting.arrived = 0;
    std::fill(meeting.present.begin(), meeting.present.end(), false);
    ++meeting.generation;
    meeting.changed.notify_all();
    return;
  }

  if (world->spin.count() > 0) {
    lock.unlock();
    waitAwake(world->spin, [&] {
      return meeting.generation.load(std::memory_order_acquire) != generation;
    });
    lock.lock();
  }

  Clock::time_point deadline = Clock::now() + world->timeout;
  // A changed generation wins over an abort or a timeout that came later:
  // the barrier is complete and the caller's peers rely on it.
  while (meeting.generation == generation) {
    if (abortable && world->aborted)
      failAborted(site);
    if (!meeting.broken.empty())
      fail(site, meeting.broken);
    if (meeting.changed.wait_until(lock, deadline) != std::cv_status::timeout ||
        meeting.generation != generation || (abortable && world->aborted) ||
        !meeting.broken.empty())
      continue;
    std::vector<int32_t> missing;
    for (size_t i = 0; i < meeting.members.size(); ++i)
      if (!meeting.present[i])
        missing.push_back(meeting.members[i]);
    meeting.broken = "timed out after " + formatSeconds(world->timeout) +
                     " waiting for " + listRanks(missing);
    meeting.changed.notify_all();
    fail(site, meeting.broken);
  }
}

template <typename Compute>
void ThreadRankContext::collective(Group group, const Contribution &mine,
                                   const char *site, Compute compute) {
  std::vector<int32_t> members = membersOf(group, site);
  if (members.size() == 1) {
    compute(std::vector<Contribution>{mine});
    return;
  }
  size_t index = static_cast<size_t>(groupIndex(group));

  std::unique_lock<std::mutex> lock(world->mutex);
  Rendezvous &meeting = world->meeting(members);
  meeting.contributions[index] = mine;
  meet(meeting, lock, index, site, /*abortable=*/true);
  std::vector<Contribution> all = meeting.contributions;
  lock.unlock();

  // Every member sees the same contributions, so either all members find a
  // disagreement or none does. They still meet a second time before
  // throwing, so that no member starts the next collective, and overwrites
  // its contribution, while another is reading the contributions.
  std::string disagreement;
  for (size_t i = 0; i < all.size() && disagreement.empty(); ++i)
    if (!all[i].agrees(mine))
      disagreement = "called " + mine.describe() + " but rank " +
                     std::to_string(members[i]) + " called " +
                     all[i].describe();
  if (disagreement.empty())
    compute(all);

  lock.lock();
  meet(meeting, lock, index, site, /*abortable=*/false);
  if (!disagreement.empty())
    fail(site, disagreement);
}

void ThreadRankContext::allReduce(Group group, void *buffer, int64_t count,
                                  DType type, Reduction op, const char *site) {
  checkCount(count, "element count", site);
  checkReducible(type, site);
  int64_t elementBytes = dtypeBytes(type);
  // Each member reduces its own 1/n of the elements, block by block
  // through a small buffer, and writes the result into every member's
  // buffer there: no other member reads or writes that part meanwhile
  // (each reads only its own part of the inputs), and the second meeting
  // keeps every buffer alive until all parts are written. Each element is
  // reduced once, in group order, so all members end bitwise equal.
  constexpr int64_t kBlock = 16384;
  // Allocated before meeting so that computing cannot fail.
  std::vector<char> partial(static_cast<size_t>(
      std::min<int64_t>(std::max<int64_t>(count, 1), kBlock) * elementBytes));
  Contribution mine;
  mine.kind = Kind::AllReduce;
  mine.input = buffer;
  mine.count = count;
  mine.type = type;
  mine.op = op;
  collective(group, mine, site, [&](const std::vector<Contribution> &all) {
    int64_t members = static_cast<int64_t>(all.size());
    if (members == 1)
      return;
    int64_t index = groupIndex(group);
    // Parts of whole cache lines (16 floats), the last one shorter.
    int64_t part = (count + members - 1) / members;
    part = (part + 15) / 16 * 16;
    int64_t begin = std::min(count, index * part);
    int64_t end = std::min(count, begin + part);
    for (int64_t at = begin; at < end; at += kBlock) {
      int64_t n = std::min(kBlock, end - at);
      size_t offset = static_cast<size_t>(at * elementBytes);
      size_t bytes = static_cast<size_t>(n * elementBytes);
      std::memcpy(partial.data(),
                  static_cast<const char *>(all[0].input) + offset, bytes);
      for (int64_t i = 1; i < members; ++i)
        reduceInto(type, op, partial.data(),
                   static_cast<const char *>(all[i].input) + offset, n);
      for (int64_t i = 0; i < members; ++i)
        std::memcpy(static_cast<char *>(const_cast<void *>(all[i].input)) +
                        offset,
                    partial.data(), bytes);
    }
  });
}

void ThreadRankContext::allGather(Group group, const void *in, void *out,
                                  int64_t outer, int64_t chunkBytes,
                                  const char *site) {
  checkCount(outer, "outer count", site);
  checkCount(chunkBytes, "chunk size", site);
  Contribution mine;
  mine.kind = Kind::AllGather;
  mine.input = in;
  mine.count = chunkBytes;
  mine.outer = outer;
  collective(group, mine, site, [&](const std::vector<Contribution> &all) {
    size_t chunk = static_cast<size_t>(chunkBytes);
    if (!chunk)
      return;
    char *target = static_cast<char *>(out);
    for (int64_t o = 0; o < outer; ++o)
      for (size_t i = 0; i < all.size(); ++i, target += chunk)
        std::memcpy(target, static_cast<const char *>(all[i].input) + o * chunk,
                    chunk);
  });
}

void ThreadRankContext::reduceScatter(Group group, const void *in, void *out,
                                      int64_t outer, int64_t chunk, DType type,
                                      Reduction op, const char *site) {
  checkCount(outer, "outer count", site);
  checkCount(chunk, "chunk size", site);
  checkReducible(type, site);
  Contribution mine;
  mine.kind = Kind::ReduceScatter;
  mine.input = in;
  mine.count = chunk;
  mine.outer = outer;
  mine.type = type;
  mine.op = op;
  size_t index = static_cast<size_t>(groupIndex(group));
  collective(group, mine, site, [&](const std::vector<Contribution> &all) {
    size_t chunkBytes = static_cast<size_t>(chunk * dtypeBytes(type));
    if (!chunkBytes)
      return;
    size_t size = all.size();
    for (int64_t o = 0; o < outer; ++o) {
      char *target = static_cast<char *>(out) + o * chunkBytes;
      size_t offset = (o * size + index) * chunkBytes;
      std::memcpy(target, static_cast<const char *>(all[0].input) + offset,
                  chunkBytes);
      for (size_t i = 1; i < size; ++i)
        reduceInto(type, op, target,
                   static_cast<const char *>(all[i].input) + offset, chunk);
    }
  });
}

void ThreadRankContext::send(int32_t peer, const void *buffer, int64_t bytes,
                             const char *site) {
  checkPeer(peer, site);
  checkCount(bytes, "byte count", site);
  const char *data = static_cast<const char *>(buffer);
  std::vector<char> message(data, data + bytes);
  std::lock_guard<std::mutex> lock(world->mutex);
  if (world->aborted)
    failAborted(site);
  Mailbox &mailbox = world->mailbox(myRank, peer);
  mailbox.messages.push_back(std::move(message));
  mailbox.changed.notify_all();
}

void ThreadRankContext::recv(int32_t peer, void *buffer, int64_t bytes,
                             const char *site) {
  checkPeer(peer, site);
  checkCount(bytes, "byte count", site);
  std::unique_lock<std::mutex> lock(world->mutex);
  Mailbox &mailbox = world->mailbox(peer, myRank);
  Clock::time_point deadline = Clock::now() + world->timeout;
  while (true) {
    if (world->aborted)
      failAborted(site);
    if (!mailbox.messages.empty())
      break;
    if (mailbox.changed.wait_until(lock, deadline) == std::cv_status::timeout &&
        mailbox.messages.empty() && !world->aborted)
      fail(site, "timed out after " + formatSeconds(world->timeout) +
                     " waiting for rank " + std::to_string(peer));
  }
  std::vector<char> message = std::move(mailbox.messages.front());
  mailbox.messages.pop_front();
  lock.unlock();

  if (static_cast<int64_t>(message.size()) != bytes)
    fail(site, "expected " + std::to_string(bytes) + " bytes from rank " +
                   std::to_string(peer) + " but got " +
                   std::to_string(message.size()));
  if (bytes)
    std::memcpy(buffer, message.data(), message.size());
}

std::shared_ptr<ThreadWorld>
tp::rt::createThreadWorld(int32_t ranks, std::chrono::milliseconds timeout) {
  if (ranks < 1)
    throw Error("a thread world needs at least one rank, not " +
                std::to_string(ranks));
  return std::make_shared<ThreadWorld>(ranks, timeout, threadRankAwake(ranks));
}

std::unique_ptr<RankContext>
tp::rt::createThreadRankContext(std::shared_ptr<ThreadWorld> world,
                                int32_t rank) {
  if (!world)
    throw Error("createThreadRankContext needs a world");
  if (rank < 0 || rank >= world->ranks)
    throw Error("no rank " + std::to_string(rank) + " in a world of " +
                std::to_string(world->ranks) + " ranks");
  return std::make_unique<ThreadRankContext>(std::move(world), rank);
}

void tp::rt::abortThreadWorld(ThreadWorld &world, const std::string &reason) {
  std::lock_guard<std::mutex> lock(world.mutex);
  if (world.aborted)
    return;
  world.aborted = true;
  world.abortReason = reason;
  for (auto &entry : world.meetings)
    entry.second->changed.notify_all();
  for (auto &entry : world.mailboxes)
    entry.second->changed.notify_all();
}
