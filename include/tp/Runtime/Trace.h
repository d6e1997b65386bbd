//===- Trace.h - a timeline of each rank's forward passes and collectives
//---===//
//
// tp-run --trace FILE records, per rank, when each forward pass (a call of
// the rank's stage function) and each collective or send/recv began and
// ended, and writes them in Chrome's trace event format: one track per
// rank, viewable in Perfetto or chrome://tracing. Comparing the ranks'
// arrivals at the same collective tells a rank that is late at every layer
// (its compute is heavier) from one delayed now and then (the machine
// took its core away).
//
//===----------------------------------------------------------------------===//

#ifndef TP_RUNTIME_TRACE_H
#define TP_RUNTIME_TRACE_H

#include <cstdint>
#include <string>
#include <vector>

namespace tp::rt {

/// One interval of a rank's timeline.
struct TraceEvent {
  /// "forward", or the call: "all-reduce", "all-gather", "reduce-scatter",
  /// "send", "recv".
  std::string name;
  /// The collective's site (the op that asked for it); empty for a forward.
  std::string site;
  /// Bytes the call moves (its buffer); 0 for a forward.
  int64_t bytes = 0;
  /// Microseconds on the steady clock (CLOCK_MONOTONIC on Linux, shared by
  /// the processes of one machine, so that MPI ranks' files line up).
  double startMicros = 0, endMicros = 0;
};

/// A rank's events, in the order they ended. Written by the rank's thread
/// only.
struct RankTrace {
  int32_t rank = 0;
  std::vector<TraceEvent> events;
};

/// The steady clock now, in microseconds.
double traceMicros();

/// Writes `ranks` to `path` as a Chrome trace (JSON object format): one
/// complete ("X") event per interval, pid 0, tid the rank, the site and
/// bytes as args. Throws Error naming `path` when it cannot be written.
void writeChromeTrace(const std::string &path,
                      const std::vector<RankTrace> &ranks);

} // namespace tp::rt

#endif // TP_RUNTIME_TRACE_H
