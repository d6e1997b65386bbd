//===- Sampling.cpp - greedy and sampled decoding -------------------------===//
//
// Greedy and sampling over the merged candidates of the logits blocks, and
// the step that applies either to every sequence.
//
//===----------------------------------------------------------------------===//

#include "tp/Runtime/Sampling.h"

#include "tp/Runtime/Candidates.h"

#include <algorithm>
#include <cmath>

using namespace tp::rt;

int64_t tp::rt::greedyToken(const Candidates &logits, int64_t r) {
  return logits.argmax(r);
}

int64_t tp::rt::sampleToken(const Candidates &logits, int64_t r,
                            const GenerateOptions &options, double draw) {
  std::vector<Logit> order = logits.top(r, options.topK);
  int64_t keep = static_cast<int64_t>(order.size());
  std::vector<double> weights(keep);
  double top = order[0].first / options.temperature, total = 0;
  for (int64_t i = 0; i < keep; ++i)
    total += weights[i] = std::exp(order[i].first / options.temperature - top);
  if (options.topP < 1.0) {
    double sum = 0;
    int64_t nucleus = 0;
    while (nucleus < keep && sum < options.topP * total)
      sum += weights[nucleus++];
    keep = std::max<int64_t>(1, nucleus);
    total = sum > 0 ? sum : weights[0];
  }
  double target = draw * total, sum = 0;
  for (int64_t i = 0; i < keep; ++i) {
    sum += weights[i];
    if (target < sum)
      return order[i].second;
  }
  return order[keep - 1].second;
}

Sampler::Sampler(const GenerateOptions &options, int64_t rows, int64_t batch)
    : options(options), draws(options.seed), done(rows, false), batch(batch) {}

bool Sampler::step(const Candidates &logits, std::vector<int64_t> &sequence,
                   int64_t length, int64_t t) {
  int64_t rows = static_cast<int64_t>(done.size());
  int64_t eos = options.eosTokenId;
  bool allDone = true;
  for (int64_t r = 0; r < rows; ++r) {
    double draw = options.sample ? draws.next() : 0;
    int64_t next = done[r]          ? eos
                   : options.sample ? sampleToken(logits, r, options, draw)
                                    : greedyToken(logits, r);
    sequence[r * length + t + 1] = next;
    done[r] = done[r] || (eos >= 0 && next == eos);
    allDone &= r >= batch || done[r];
  }
  if (allDone)
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t u = t + 2; u < length; ++u)
        sequence[r * length + u] = eos;
  return allDone;
}
