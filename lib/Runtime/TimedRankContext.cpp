//===- TimedRankContext.cpp - time spent communicating --------------------===//
//
// Wraps a rank's context so that the runtime can split a step's time into
// compute and communication: every collective and send/recv is timed, and,
// when tracing (tp-run --trace), recorded as an interval of the rank's
// timeline.
//
//===----------------------------------------------------------------------===//

#include "tp/Runtime/Communicators.h"
#include "tp/Runtime/Trace.h"

using namespace tp::rt;

namespace {

class TimedRankContext final : public RankContext {
public:
  TimedRankContext(std::unique_ptr<RankContext> inner, double *seconds,
                   RankTrace *trace)
      : inner(std::move(inner)), seconds(seconds), trace(trace) {}

  int32_t rank() const override { return inner->rank(); }
  int32_t worldSize() const override { return inner->worldSize(); }
  void allReduce(Group group, void *buffer, int64_t count, DType type,
                 Reduction op, const char *site) override {
    Timer timer(this, "all-reduce", site, count * dtypeBytes(type));
    inner->allReduce(group, buffer, count, type, op, site);
  }
  void allGather(Group group, const void *in, void *out, int64_t outer,
                 int64_t chunkBytes, const char *site) override {
    Timer timer(this, "all-gather", site, outer * chunkBytes);
    inner->allGather(group, in, out, outer, chunkBytes, site);
  }
  void reduceScatter(Group group, const void *in, void *out, int64_t outer,
                     int64_t chunk, DType type, Reduction op,
                     const char *site) override {
    Timer timer(this, "reduce-scatter", site, outer * chunk * dtypeBytes(type));
    inner->reduceScatter(group, in, out, outer, chunk, type, op, site);
  }
  void send(int32_t peer, const void *buffer, int64_t bytes,
            const char *site) override {
    Timer timer(this, "send", site, bytes);
    inner->send(peer, buffer, bytes, site);
  }
  void recv(int32_t peer, void *buffer, int64_t bytes,
            const char *site) override {
    Timer timer(this, "recv", site, bytes);
    inner->recv(peer, buffer, bytes, site);
  }

private:
  /// Adds its lifetime to the context's total, also when the call throws,
  /// and records it in the trace, if any.
  class Timer {
  public:
    Timer(TimedRankContext *context, const char *name, const char *site,
          int64_t bytes)
        : context(context), name(name), site(site), bytes(bytes),
          start(std::chrono::steady_clock::now()) {}
    ~Timer() {
      auto end = std::chrono::steady_clock::now();
      *context->seconds += std::chrono::duration<double>(end - start).count();
      if (!context->trace)
        return;
      auto micros = [](std::chrono::steady_clock::time_point t) {
        return std::chrono::duration<double, std::micro>(t.time_since_epoch())
            .count();
      };
      context->trace->events.push_back(
          {name, site ? site : "", bytes, micros(start), micros(end)});
    }

  private:
    TimedRankContext *context;
    const char *name, *site;
    int64_t bytes;
    std::chrono::steady_clock::time_point start;
  };

  std::unique_ptr<RankContext> inner;
  double *seconds;
  RankTrace *trace;
};

} // namespace

std::unique_ptr<RankContext>
tp::rt::createTimedRankContext(std::unique_ptr<RankContext> inner,
                               double *seconds, RankTrace *trace) {
  return std::make_unique<TimedRankContext>(std::move(inner), seconds, trace);
}
