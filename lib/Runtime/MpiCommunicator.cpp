//===- MpiCommunicator.cpp - one MPI process per rank ---------------------===//
//
// Built only with MPI (TP_HAVE_MPI). Every operation is nonblocking MPI
// polled with MPI_Test until it completes or the timeout expires, so that a
// peer that died or diverged gives an Error instead of a hang.
//
// Each group gets its own communicator, made once with MPI_Comm_create_group,
// which, unlike MPI_Comm_split, involves only the group's members: pipeline
// stages run their tensor-parallel collectives while other stages are
// waiting in recv. Creating a communicator cannot time out, so the members
// first exchange nonblocking hellos; only when all have answered does
// MPI_Comm_create_group run, and a member that never comes is named in the
// timeout.
//
// All traffic goes over duplicates of MPI_COMM_WORLD, whose errors are
// returned rather than fatal, so that the runtime's messages never meet the
// caller's own.
//
//===----------------------------------------------------------------------===//

#include "tp/Runtime/Communicators.h"

#include "Messages.h"
#include "Reduce.h"

#include <mpi.h>

#include <algorithm>
#include <climits>
#include <cstring>
#include <deque>
#include <map>
#include <thread>
#include <vector>

using namespace tp::rt;
using namespace tp::rt::detail;

namespace {

using Clock = std::chrono::steady_clock;

/// Tag of send/recv messages on the data communicator.
constexpr int dataTag = 0;
/// The byte every member of a new group sends to the others.
const char hello = 1;

/// A send that has not completed yet, with the copy of its data.
struct PendingSend {
  MPI_Request request = MPI_REQUEST_NULL;
  std::vector<char> data;
};

class MpiRankContext final : public RankContext {
public:
  explicit MpiRankContext(std::chrono::milliseconds timeout);
  ~MpiRankContext() override;

  int32_t rank() const override { return myRank; }
  int32_t worldSize() const override { return size; }

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
  /// Throws when `code` is an MPI error.
  void check(int code, const char *site, const char *call) const;
  int toInt(int64_t value, const char *what, const char *site) const;
  std::vector<int32_t> membersOf(Group group, const char *site) const;
  void checkPeer(int32_t peer, const char *site) const;
  MPI_Datatype datatype(DType type, const char *site) const;
  /// MPI's own op, or for f16 and bf16 (which MPI cannot add) a user op
  /// that combines them in f32, made on first use.
  MPI_Op reduction(Reduction op, DType type);
  std::string timedOut(const std::string &waitingFor) const;

  /// The communicator of the group with `members`, made on first use.
  MPI_Comm communicator(const std::vector<int32_t> &members, const char *site);
  /// Waits for `request`; on timeout throws naming `waitingFor`.
  void wait(MPI_Request &request, MPI_Status *status, const char *site,
            const std::string &waitingFor);
  /// Waits for a collective over `members`.
  void waitGroup(MPI_Request &request, const std::vector<int32_t> &members,
                 const char *site);
  /// Forgets the sends that have completed.
  void reapSends();

  int32_t myRank = 0;
  int32_t size = 1;
  std::chrono::milliseconds timeout;
  /// send/recv and group communicators' parent.
  MPI_Comm data = MPI_COMM_NULL;
  /// The hellos before a group communicator is made.
  MPI_Comm control = MPI_COMM_NULL;
  int tagLimit = 32767;
  std::map<std::vector<int32_t>, MPI_Comm> groups;
  std::map<std::pair<DType, Reduction>, MPI_Op> halfOps;
  std::deque<PendingSend> pendingSends;
  /// Set after a timeout: operations may still be in flight, so the
  /// destructor leaves MPI objects alone.
  bool stuck = false;
};

} // namespace

MpiRankContext::MpiRankContext(std::chrono::milliseconds timeout)
    : timeout(timeout) {
  int initialized = 0;
  MPI_Initialized(&initialized);
  if (!initialized)
    throw Error("createMpiRankContext: MPI_Init has not been called");
  int value = 0;
  check(MPI_Comm_rank(MPI_COMM_WORLD, &value), nullptr, "MPI_Comm_rank");
  myRank = value;
  check(MPI_Comm_size(MPI_COMM_WORLD, &value), nullptr, "MPI_Comm_size");
  size = value;
  check(MPI_Comm_dup(MPI_COMM_WORLD, &data), nullptr, "MPI_Comm_dup");
  MPI_Comm_set_errhandler(data, MPI_ERRORS_RETURN);
  check(MPI_Comm_dup(MPI_COMM_WORLD, &control), nullptr, "MPI_Comm_dup");
  MPI_Comm_set_errhandler(control, MPI_ERRORS_RETURN);
  void *limit = nullptr;
  int found = 0;
  MPI_Comm_get_attr(MPI_COMM_WORLD, MPI_TAG_UB, &limit, &found);
  if (found && limit)
    tagLimit = *static_cast<int *>(limit);
}

MpiRankContext::~MpiRankContext() {
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (finalized || stuck)
    return;
  // Sends do not wait for their receiver, so they finish here, as long as
  // the receivers come within the timeout.
  Clock::time_point deadline = Clock::now() + timeout;
  while (!pendingSends.empty() && Clock::now() < deadline) {
    reapSends();
    std::this_thread::sleep_for(std::chrono::microseconds(50));
  }
  if (!pendingSends.empty())
    return;
  for (auto &entry : groups)
    MPI_Comm_free(&entry.second);
  MPI_Comm_free(&control);
  for (auto &entry : halfOps)
    MPI_Op_free(&entry.second);
  MPI_Comm_free(&data);
}

void MpiRankContext::check(int code, const char *site, const char *call) const {
  if (code == MPI_SUCCESS)
    return;
  char text[MPI_MAX_ERROR_STRING];
  int length = 0;
  if (MPI_Error_string(code, text, &length) != MPI_SUCCESS)
    length = 0;
  fail(site, std::string("failed in ") + call + ": " +
                 (length ? std::string(text, length) : "unknown MPI error"));
}

int MpiRankContext::toInt(int64_t value, const char *what,
                          const char *site) const {
  if (value < 0 || value > INT_MAX)
    fail(site, std::string("cannot pass ") + std::to_string(value) + " " +
                   what + " to MPI");
  return static_cast<int>(value);
}

std::vector<int32_t> MpiRankContext::membersOf(Group group,
                                               const char *site) const {
  std::string shape = "group of " + std::to_string(group.size) +
                      " ranks with stride " + std::to_string(group.stride);
  if (group.size < 1 || group.stride < 1)
    fail(site, "got an invalid " + shape);
  std::vector<int32_t> members;
  for (int32_t i = 0; i < group.size; ++i) {
    int64_t peer = groupPeer(group, i);
    if (peer < 0 || peer >= size)
      fail(site, "got a " + shape + " that does not fit in a world of " +
                     std::to_string(size) + " ranks");
    members.push_back(static_cast<int32_t>(peer));
  }
  return members;
}

void MpiRankContext::checkPeer(int32_t peer, const char *site) const {
  if (peer < 0 || peer >= size)
    fail(site, "names rank " + std::to_string(peer) + " in a world of " +
                   std::to_string(size) + " ranks");
}

MPI_Datatype MpiRankContext::datatype(DType type, const char *site) const {
  switch (type) {
  case DType::F32:
    return MPI_FLOAT;
  case DType::F64:
    return MPI_DOUBLE;
  case DType::I64:
    return MPI_INT64_T;
  case DType::I32:
    return MPI_INT32_T;
  case DType::I16:
    return MPI_INT16_T;
  case DType::I8:
    return MPI_INT8_T;
  case DType::U8:
    return MPI_UINT8_T;
  case DType::F16:
  case DType::BF16:
    return MPI_UINT16_T; // combined by a user op (reduction())
  case DType::Bool:
    break;
  }
  fail(site, std::string("cannot reduce ") + dtypeName(type) + " values");
}

namespace {
template <DType Type, Reduction Op>
void combineHalves(void *in, void *inout, int *count, MPI_Datatype *) {
  detail::reduceInto(Type, Op, inout, in, *count);
}

template <DType Type> MPI_User_function *halfFunction(Reduction op) {
  switch (op) {
  case Reduction::Sum:
    return combineHalves<Type, Reduction::Sum>;
  case Reduction::Product:
    return combineHalves<Type, Reduction::Product>;
  case Reduction::Max:
    return combineHalves<Type, Reduction::Max>;
  case Reduction::Min:
    return combineHalves<Type, Reduction::Min>;
  }
  return combineHalves<Type, Reduction::Sum>;
}
} // namespace

MPI_Op MpiRankContext::reduction(Reduction op, DType type) {
  if (type == DType::F16 || type == DType::BF16) {
    auto [it, inserted] = halfOps.try_emplace({type, op}, MPI_OP_NULL);
    if (inserted)
      MPI_Op_create(type == DType::F16 ? halfFunction<DType::F16>(op)
                                       : halfFunction<DType::BF16>(op),
                    /*commute=*/1, &it->second);
    return it->second;
  }
  switch (op) {
  case Reduction::Sum:
    return MPI_SUM;
  case Reduction::Product:
    return MPI_PROD;
  case Reduction::Max:
    return MPI_MAX;
  case Reduction::Min:
    return MPI_MIN;
  }
  return MPI_SUM;
}

std::string MpiRankContext::timedOut(const std::string &waitingFor) const {
  return "timed out after " + formatSeconds(timeout) + " waiting for " +
         waitingFor;
}

void MpiRankContext::wait(MPI_Request &request, MPI_Status *status,
                          const char *site, const std::string &waitingFor) {
  Clock::time_point start = Clock::now();
  Clock::time_point deadline = start + timeout;
  while (true) {
    int done = 0;
    check(MPI_Test(&request, &done, status ? status : MPI_STATUS_IGNORE), site,
          "MPI_Test");
    if (done)
      return;
    Clock::time_point now = Clock::now();
    if (now >= deadline) {
      stuck = true;
      fail(site, timedOut(waitingFor));
    }
    // Spin briefly for the common quick case, then stop hogging the core,
    // which oversubscribed ranks share.
    if (now - start < std::chrono::milliseconds(1))
      std::this_thread::yield();
    else
      std::this_thread::sleep_for(std::chrono::microseconds(50));
  }
}

void MpiRankContext::waitGroup(MPI_Request &request,
                               const std::vector<int32_t> &members,
                               const char *site) {
  std::vector<int32_t> others;
  for (int32_t member : members)
    if (member != myRank)
      others.push_back(member);
  // MPI cannot tell which members have not arrived.
  std::string waitingFor = listRanks(others);
  if (others.size() > 1)
    waitingFor = "some of " + waitingFor;
  wait(request, nullptr, site, waitingFor);
}

MPI_Comm MpiRankContext::communicator(const std::vector<int32_t> &members,
                                      const char *site) {
  auto found = groups.find(members);
  if (found != groups.end())
    return found->second;

  // A tag of its own for each group, so that the hellos of groups that
  // share members do not match each other.
  uint64_t hash = 1469598103934665603ull;
  for (int32_t member : members)
    hash = (hash ^ static_cast<uint32_t>(member)) * 1099511628211ull;
  int tag = 1 + static_cast<int>(hash % static_cast<uint64_t>(tagLimit));

  std::vector<int32_t> peers;
  std::vector<MPI_Request> sends, receives;
  std::vector<char> answers(members.size());
  for (size_t i = 0; i < members.size(); ++i) {
    if (members[i] == myRank)
      continue;
    peers.push_back(members[i]);
    sends.emplace_back();
    check(
        MPI_Isend(&hello, 1, MPI_CHAR, members[i], tag, control, &sends.back()),
        site, "MPI_Isend");
    receives.emplace_back();
    check(MPI_Irecv(&answers[i], 1, MPI_CHAR, members[i], tag, control,
                    &receives.back()),
          site, "MPI_Irecv");
  }
  Clock::time_point start = Clock::now();
  Clock::time_point deadline = start + timeout;
  while (true) {
    std::vector<int32_t> missing;
    for (size_t i = 0; i < receives.size(); ++i) {
      int done = 0;
      check(MPI_Test(&receives[i], &done, MPI_STATUS_IGNORE), site, "MPI_Test");
      if (!done)
        missing.push_back(peers[i]);
    }
    if (missing.empty())
      break;
    Clock::time_point now = Clock::now();
    if (now >= deadline) {
      for (MPI_Request &request : receives)
        if (request != MPI_REQUEST_NULL) {
          MPI_Cancel(&request);
          MPI_Request_free(&request);
        }
      // The hello lives forever, so the sends may finish whenever.
      for (MPI_Request &request : sends)
        if (request != MPI_REQUEST_NULL)
          MPI_Request_free(&request);
      stuck = true;
      fail(site, timedOut(listRanks(missing)));
    }
    if (now - start < std::chrono::milliseconds(1))
      std::this_thread::yield();
    else
      std::this_thread::sleep_for(std::chrono::microseconds(50));
  }
  // Every peer has answered, so the sends have been received.
  check(MPI_Waitall(static_cast<int>(sends.size()), sends.data(),
                    MPI_STATUSES_IGNORE),
        site, "MPI_Waitall");

  MPI_Group all, subset;
  check(MPI_Comm_group(data, &all), site, "MPI_Comm_group");
  std::vector<int> ranks(members.begin(), members.end());
  check(MPI_Group_incl(all, static_cast<int>(ranks.size()), ranks.data(),
                       &subset),
        site, "MPI_Group_incl");
  MPI_Comm comm = MPI_COMM_NULL;
  int code = MPI_Comm_create_group(data, subset, tag, &comm);
  MPI_Group_free(&subset);
  MPI_Group_free(&all);
  check(code, site, "MPI_Comm_create_group");
  MPI_Comm_set_errhandler(comm, MPI_ERRORS_RETURN);
  groups.emplace(members, comm);
  return comm;
}

void MpiRankContext::reapSends() {
  for (auto it = pendingSends.begin(); it != pendingSends.end();) {
    int done = 0;
    MPI_Test(&it->request, &done, MPI_STATUS_IGNORE);
    it = done ? pendingSends.erase(it) : it + 1;
  }
}

void MpiRankContext::allReduce(Group group, void *buffer, int64_t count,
                               DType type, Reduction op, const char *site) {
  std::vector<int32_t> members = membersOf(group, site);
  MPI_Datatype mpiType = datatype(type, site);
  if (count < 0)
    fail(site, "got a negative element count (" + std::to_string(count) + ")");
  reapSends();
  if (members.size() == 1 || count == 0)
    return;
  MPI_Comm comm = communicator(members, site);
  // Pieces that fit MPI's int counts; every member cuts alike.
  constexpr int64_t piece = int64_t(1) << 30;
  char *bytes = static_cast<char *>(buffer);
  for (int64_t done = 0; done < count; done += piece) {
    int length = static_cast<int>(std::min(piece, count - done));
    MPI_Request request;
    check(MPI_Iallreduce(MPI_IN_PLACE, bytes + done * dtypeBytes(type), length,
                         mpiType, reduction(op, type), comm, &request),
          site, "MPI_Iallreduce");
    waitGroup(request, members, site);
  }
}

void MpiRankContext::allGather(Group group, const void *in, void *out,
                               int64_t outer, int64_t chunkBytes,
                               const char *site) {
  std::vector<int32_t> members = membersOf(group, site);
  if (outer < 0 || chunkBytes < 0)
    fail(site, "got a negative outer count or chunk size");
  int block = toInt(outer * chunkBytes, "bytes per rank", site);
  toInt(outer * chunkBytes * static_cast<int64_t>(members.size()),
        "gathered bytes", site);
  reapSends();
  if (members.size() == 1) {
    if (block)
      std::memcpy(out, in, block);
    return;
  }
  if (!block)
    return;
  MPI_Comm comm = communicator(members, site);
  // MPI concatenates whole blocks: [size, outer, chunk], which equals the
  // wanted [outer, size, chunk] only when outer is 1.
  std::vector<char> gathered;
  char *target = static_cast<char *>(out);
  if (outer != 1) {
    gathered.resize(static_cast<size_t>(block) * members.size());
    target = gathered.data();
  }
  MPI_Request request;
  check(MPI_Iallgather(in, block, MPI_BYTE, target, block, MPI_BYTE, comm,
                       &request),
        site, "MPI_Iallgather");
  waitGroup(request, members, site);
  if (outer == 1)
    return;
  char *result = static_cast<char *>(out);
  for (int64_t o = 0; o < outer; ++o)
    for (size_t i = 0; i < members.size(); ++i, result += chunkBytes)
      std::memcpy(result, gathered.data() + i * block + o * chunkBytes,
                  chunkBytes);
}

void MpiRankContext::reduceScatter(Group group, const void *in, void *out,
                                   int64_t outer, int64_t chunk, DType type,
                                   Reduction op, const char *site) {
  std::vector<int32_t> members = membersOf(group, site);
  MPI_Datatype mpiType = datatype(type, site);
  if (outer < 0 || chunk < 0)
    fail(site, "got a negative outer count or chunk size");
  int block = toInt(outer * chunk, "elements per rank", site);
  int64_t blockBytes = outer * chunk * dtypeBytes(type);
  toInt(block * static_cast<int64_t>(members.size()), "reduced elements", site);
  reapSends();
  if (members.size() == 1) {
    if (blockBytes)
      std::memcpy(out, in, blockBytes);
    return;
  }
  if (!block)
    return;
  MPI_Comm comm = communicator(members, site);
  // MPI hands out whole blocks of [size, outer, chunk]; the input is
  // [outer, size, chunk], the same only when outer is 1.
  std::vector<char> reordered;
  const void *source = in;
  if (outer != 1) {
    int64_t chunkBytes = chunk * dtypeBytes(type);
    reordered.resize(static_cast<size_t>(blockBytes) * members.size());
    const char *from = static_cast<const char *>(in);
    for (int64_t o = 0; o < outer; ++o)
      for (size_t i = 0; i < members.size(); ++i, from += chunkBytes)
        std::memcpy(reordered.data() + i * blockBytes + o * chunkBytes, from,
                    chunkBytes);
    source = reordered.data();
  }
  MPI_Request request;
  check(MPI_Ireduce_scatter_block(source, out, block, mpiType,
                                  reduction(op, type), comm, &request),
        site, "MPI_Ireduce_scatter_block");
  waitGroup(request, members, site);
}

void MpiRankContext::send(int32_t peer, const void *buffer, int64_t bytes,
                          const char *site) {
  checkPeer(peer, site);
  int length = toInt(bytes, "bytes", site);
  reapSends();
  const char *from = static_cast<const char *>(buffer);
  pendingSends.emplace_back();
  PendingSend &pending = pendingSends.back();
  pending.data.assign(from, from + length);
  int code = MPI_Isend(pending.data.data(), length, MPI_BYTE, peer, dataTag,
                       data, &pending.request);
  if (code != MPI_SUCCESS)
    pendingSends.pop_back();
  check(code, site, "MPI_Isend");
}

void MpiRankContext::recv(int32_t peer, void *buffer, int64_t bytes,
                          const char *site) {
  checkPeer(peer, site);
  int length = toInt(bytes, "bytes", site);
  reapSends();
  std::string waitingFor = "rank " + std::to_string(peer);
  // Probe first, to compare the message's size with the expected one.
  MPI_Message message = MPI_MESSAGE_NULL;
  MPI_Status status;
  Clock::time_point start = Clock::now();
  Clock::time_point deadline = start + timeout;
  while (true) {
    int found = 0;
    check(MPI_Improbe(peer, dataTag, data, &found, &message, &status), site,
          "MPI_Improbe");
    if (found)
      break;
    Clock::time_point now = Clock::now();
    if (now >= deadline)
      fail(site, timedOut(waitingFor));
    if (now - start < std::chrono::milliseconds(1))
      std::this_thread::yield();
    else
      std::this_thread::sleep_for(std::chrono::microseconds(50));
  }
  int received = 0;
  check(MPI_Get_count(&status, MPI_BYTE, &received), site, "MPI_Get_count");
  std::vector<char> discard;
  void *target = buffer;
  if (received != length) {
    discard.resize(received);
    target = discard.data();
  }
  MPI_Request request;
  check(MPI_Imrecv(target, received, MPI_BYTE, &message, &request), site,
        "MPI_Imrecv");
  wait(request, nullptr, site, waitingFor);
  if (received != length)
    fail(site, "expected " + std::to_string(bytes) + " bytes from rank " +
                   std::to_string(peer) + " but got " +
                   std::to_string(received));
}

bool tp::rt::haveMpi() { return true; }

std::unique_ptr<RankContext>
tp::rt::createMpiRankContext(std::chrono::milliseconds timeout) {
  return std::make_unique<MpiRankContext>(timeout);
}
