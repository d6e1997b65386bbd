//===- ReplicaRankContext.cpp - one data-parallel replica's ranks ---------===//
//
// Under data parallelism (tp-compile --data-parallel D) the world holds D
// replicas of the tensor- and pipeline-parallel grid, replica d at world
// ranks d*N .. d*N+N-1. A replica's model code numbers its ranks 0 .. N-1
// as it was compiled; this context shows it that numbering over a world
// context. A group {size, stride} needs no translation: its members are
// computed from the world rank, and since size*stride divides N (a group
// of the model) or D*N (the data axis, {D, N}), they stay inside the
// caller's replica or run across the replicas at its own position. A
// point-to-point peer is moved into the replica.
//
//===----------------------------------------------------------------------===//

#include "tp/Runtime/Communicators.h"

using namespace tp::rt;

namespace {

class ReplicaRankContext final : public RankContext {
public:
  ReplicaRankContext(std::unique_ptr<RankContext> world, int32_t first,
                     int32_t size)
      : world(std::move(world)), first(first), size(size) {}

  int32_t rank() const override { return world->rank() - first; }
  int32_t worldSize() const override { return size; }
  void allReduce(Group group, void *buffer, int64_t count, DType type,
                 Reduction op, const char *site) override {
    check(group, site);
    world->allReduce(group, buffer, count, type, op, site);
  }
  void allGather(Group group, const void *in, void *out, int64_t outer,
                 int64_t chunkBytes, const char *site) override {
    check(group, site);
    world->allGather(group, in, out, outer, chunkBytes, site);
  }
  void reduceScatter(Group group, const void *in, void *out, int64_t outer,
                     int64_t chunk, DType type, Reduction op,
                     const char *site) override {
    check(group, site);
    world->reduceScatter(group, in, out, outer, chunk, type, op, site);
  }
  void send(int32_t peer, const void *buffer, int64_t bytes,
            const char *site) override {
    world->send(first + peer, buffer, bytes, site);
  }
  void recv(int32_t peer, void *buffer, int64_t bytes,
            const char *site) override {
    world->recv(first + peer, buffer, bytes, site);
  }

private:
  /// A group whose members the world rank would not place as the replica's
  /// rank does is a bug of the caller, never a silent mix of replicas.
  void check(Group group, const char *site) const {
    int64_t span = int64_t(group.size) * group.stride;
    if (group.size < 1 || group.stride < 1 ||
        (size % span != 0 && world->worldSize() % span != 0))
      throw Error(std::string(site ? site : "collective") + ": the group of " +
                  std::to_string(group.size) + " ranks at stride " +
                  std::to_string(group.stride) +
                  " does not tile a replica of " + std::to_string(size) +
                  " ranks or the world of " +
                  std::to_string(world->worldSize()));
  }

  std::unique_ptr<RankContext> world;
  int32_t first, size;
};

} // namespace

std::unique_ptr<RankContext>
tp::rt::createReplicaRankContext(std::unique_ptr<RankContext> world,
                                 int32_t first, int32_t size) {
  if (size < 1 || first < 0 || world->worldSize() % size != 0 ||
      first % size != 0 || world->rank() < first ||
      world->rank() >= first + size)
    throw Error("rank " + std::to_string(world->rank()) +
                " is not in the replica of world ranks " +
                std::to_string(first) + " .. " +
                std::to_string(first + size - 1) + " (world of " +
                std::to_string(world->worldSize()) + ")");
  return std::make_unique<ReplicaRankContext>(std::move(world), first, size);
}
