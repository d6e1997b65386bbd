//===- PrefillPlan.cpp - which prefill chunks a prompt runs in ------------===//
//
// A shortest path over the prompt's positions: from p, a chunk of C tokens
// reaches min(p + C, promptLength) at the cost of C plus a fixed part (see
// the header). The prompt is at most the context (a few thousand
// positions) and a few chunk sizes are compiled, so this is immediate.
//
//===----------------------------------------------------------------------===//

#include "tp/Runtime/PrefillPlan.h"

#include <algorithm>
#include <limits>

using namespace tp::rt;

std::vector<int64_t>
tp::rt::planPrefillChunks(const std::vector<int64_t> &lengths,
                          int64_t promptLength, int64_t slots) {
  if (lengths.empty() || promptLength <= 0)
    return {};
  int64_t fixed = lengths.front();
  // Where the chunks stop: the furthest position some sequence of them
  // reaches (decode steps run the rest). Positions are reachable from 0
  // only, so walk them forward.
  std::vector<bool> reached(promptLength + 1, false);
  reached[0] = true;
  int64_t end = 0;
  for (int64_t p = 0; p < promptLength; ++p) {
    if (!reached[p])
      continue;
    for (int64_t length : lengths)
      if (p + length <= slots) {
        int64_t next = std::min(p + length, promptLength);
        reached[next] = true;
        end = std::max(end, next);
      }
  }
  if (end == 0)
    return {};
  // The cheapest way from each position to `end`, computed backwards;
  // ties go to fewer chunks, then to larger chunks first.
  constexpr int64_t kNone = std::numeric_limits<int64_t>::max();
  struct Best {
    int64_t cost = kNone;
    int64_t chunks = 0;
    int64_t choice = -1;
  };
  std::vector<Best> best(end + 1);
  best[end].cost = 0;
  for (int64_t p = end - 1; p >= 0; --p) {
    for (int64_t c = static_cast<int64_t>(lengths.size()) - 1; c >= 0; --c) {
      int64_t length = lengths[c];
      if (p + length > slots)
        continue;
      int64_t next = std::min(p + length, promptLength);
      // Past `end` are positions no chunk finishes (end < promptLength):
      // only sequences that stop at `end` count.
      if (next > end || best[next].cost == kNone)
        continue;
      int64_t cost = best[next].cost + length + fixed;
      int64_t chunks = best[next].chunks + 1;
      if (cost < best[p].cost ||
          (cost == best[p].cost && chunks < best[p].chunks))
        best[p] = {cost, chunks, c};
    }
  }
  std::vector<int64_t> plan;
  for (int64_t p = 0; p < end;) {
    int64_t c = best[p].choice;
    plan.push_back(c);
    p = std::min(p + lengths[c], promptLength);
  }
  return plan;
}
