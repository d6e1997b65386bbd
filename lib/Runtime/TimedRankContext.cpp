//===- TimedRankContext.cpp - time spent communicating --------------------===//
//
// Wraps a rank's context so that the runtime can split a step's time into
// compute and communication: every collective and send/recv is timed.
//
//===----------------------------------------------------------------------===//

#include "tp/Runtime/Communicators.h"

using namespace tp::rt;

namespace {

class TimedRankContext final : public RankContext {
public:
  TimedRankContext(std::unique_ptr<RankContext> inner, double *seconds)
      : inner(std::move(inner)), seconds(seconds) {}

  int32_t rank() const override { return inner->rank(); }
  int32_t worldSize() const override { return inner->worldSize(); }
  void allReduce(Group group, void *buffer, int64_t count, DType type,
                 Reduction op, const char *site) override {
    Timer timer(seconds);
    inner->allReduce(group, buffer, count, type, op, site);
  }
  void allGather(Group group, const void *in, void *out, int64_t outer,
                 int64_t chunkBytes, const char *site) override {
    Timer timer(seconds);
    inner->allGather(group, in, out, outer, chunkBytes, site);
  }
  void reduceScatter(Group group, const void *in, void *out, int64_t outer,
                     int64_t chunk, DType type, Reduction op,
                     const char *site) override {
    Timer timer(seconds);
    inner->reduceScatter(group, in, out, outer, chunk, type, op, site);
  }
  void send(int32_t peer, const void *buffer, int64_t bytes,
            const char *site) override {
    Timer timer(seconds);
    inner->send(peer, buffer, bytes, site);
  }
  void recv(int32_t peer, void *buffer, int64_t bytes,
            const char *site) override {
    Timer timer(seconds);
    inner->recv(peer, buffer, bytes, site);
  }

private:
  /// Adds its lifetime to `*total`, also when the call throws.
  class Timer {
  public:
    explicit Timer(double *total)
        : total(total), start(std::chrono::steady_clock::now()) {}
    ~Timer() {
      *total += std::chrono::duration<double>(std::chrono::steady_clock::now() -
                                              start)
                    .count();
    }

  private:
    double *total;
    std::chrono::steady_clock::time_point start;
  };

  std::unique_ptr<RankContext> inner;
  double *seconds;
};

} // namespace

std::unique_ptr<RankContext>
tp::rt::createTimedRankContext(std::unique_ptr<RankContext> inner,
                               double *seconds) {
  return std::make_unique<TimedRankContext>(std::move(inner), seconds);
}
