//===- Communicators.h - RankContext implementations ------------*- C++ -*-===//
//
// The two ways the CPU runtime connects ranks: threads of one process sharing
// a ThreadWorld, or one process per rank talking MPI.
//
// Both wait at most a given timeout for peers and then throw tp::rt::Error
// naming the caller's rank, the collective's site and, where known, the ranks
// that had not arrived, so that a rank that died or diverged shows up as an
// error instead of a hang.
//
//===----------------------------------------------------------------------===//

#ifndef TP_RUNTIME_COMMUNICATORS_H
#define TP_RUNTIME_COMMUNICATORS_H

#include "tp/Runtime/RankContext.h"

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>

namespace tp::rt {

//===----------------------------------------------------------------------===//
// Threads in one process
//===----------------------------------------------------------------------===//

/// State shared by `ranks` ranks that run as threads of one process: one
/// rendezvous per group of ranks, one mailbox per (sender, receiver) pair.
class ThreadWorld;

/// Creates the shared state for ranks 0 .. ranks-1. Every wait for a peer
/// gives up after `timeout`.
std::shared_ptr<ThreadWorld>
createThreadWorld(int32_t ranks, std::chrono::milliseconds timeout);

/// The context through which the thread running `rank` talks to its peers.
/// Each rank's context must be used by one thread at a time.
std::unique_ptr<RankContext>
createThreadRankContext(std::shared_ptr<ThreadWorld> world, int32_t rank);

/// How long a thread rank waiting for its peers (at a collective) or for
/// its next call stays awake, spinning and then yielding its core between
/// checks, before it sleeps: TP_SPIN_WAIT_US, or 2 ms when the machine has
/// a core for every rank, else 0. Throws Error for a TP_SPIN_WAIT_US that
/// is not 0 to 1000000.
std::chrono::microseconds threadRankAwake(int32_t ranks);

/// Marks `world` failed, e.g. because a rank's thread caught an exception.
/// Every rank waiting in a collective or in recv, and every rank that later
/// enters one, throws Error("rank R: <site> aborted: <reason>") at once.
void abortThreadWorld(ThreadWorld &world, const std::string &reason);

//===----------------------------------------------------------------------===//
// One MPI process per rank
//===----------------------------------------------------------------------===//

/// True when the runtime was built with MPI (TP_HAVE_MPI).
bool haveMpi();

/// The context of this process in MPI_COMM_WORLD; the caller has called
/// MPI_Init and destroys the context before MPI_Finalize. Collectives poll
/// nonblocking MPI operations and throw Error after `timeout`; after such an
/// error the caller should MPI_Abort, since peers may still be waiting.
/// Throws Error when the runtime was built without MPI.
std::unique_ptr<RankContext>
createMpiRankContext(std::chrono::milliseconds timeout);

//===----------------------------------------------------------------------===//
// Data-parallel replicas
//===----------------------------------------------------------------------===//

/// The context of one rank of a data-parallel replica: `world`'s ranks
/// `first` .. `first` + `size` - 1 (first a multiple of size) are the
/// replica's 0 .. size-1. rank() and worldSize() are the replica's, and
/// send/recv peers are replica ranks; a collective's group is taken at the
/// world rank, so a model group stays inside the replica and the data axis
/// (Group{replicas, size}) runs across the replicas at the caller's
/// position. Throws Error when `world`'s rank is not in the replica.
std::unique_ptr<RankContext>
createReplicaRankContext(std::unique_ptr<RankContext> world, int32_t first,
                         int32_t size);

//===----------------------------------------------------------------------===//
// Timing
//===----------------------------------------------------------------------===//

struct RankTrace;

/// A context that forwards every collective and point-to-point call to
/// `inner` and adds the seconds each takes, waiting for peers included, to
/// `*seconds`: what a step spends communicating, beside its compute. With
/// a `trace`, it also appends each call's interval to it (tp-run --trace).
std::unique_ptr<RankContext>
createTimedRankContext(std::unique_ptr<RankContext> inner, double *seconds,
                       RankTrace *trace = nullptr);

} // namespace tp::rt

#endif // TP_RUNTIME_COMMUNICATORS_H
