//===- Sampling.h - greedy and sampled decoding -----------------*- C++ -*-===//
//
// The decoding rules that pick one token per sequence per step from the
// candidates of the logits blocks: greedy (the first maximum) and sampling
// (temperature, top-k, top-p), with the seeded draws sampling takes.
//
//===----------------------------------------------------------------------===//

#ifndef TP_RUNTIME_SAMPLING_H
#define TP_RUNTIME_SAMPLING_H

#include "tp/Runtime/Session.h"

#include <cstdint>
#include <vector>

namespace tp::rt {

class Candidates;

/// splitmix64: the same stream on every platform and rank count.
class Draws {
public:
  explicit Draws(uint64_t seed) : state(seed) {}
  /// Uniform in [0, 1).
  double next() {
    uint64_t z = (state += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    z ^= z >> 31;
    return static_cast<double>(z >> 11) * 0x1.0p-53;
  }

private:
  uint64_t state;
};

/// Greedy's token for row `r`: its largest logit, the first on ties (as
/// torch.argmax).
int64_t greedyToken(const Candidates &logits, int64_t r);

/// One token of row `r` drawn from the softmax of the logits / temperature,
/// restricted to the top-k and then the top-p tokens (transformers' order
/// of its TemperatureLogitsWarper, TopKLogitsWarper and TopPLogitsWarper):
/// `draw` (in [0, 1)) picks where the cumulative probability passes it.
/// Only the top-k of each block are read.
int64_t sampleToken(const Candidates &logits, int64_t r,
                    const GenerateOptions &options, double draw);

/// Greedy or sampled decoding (GenerateOptions::sample) of `rows`
/// sequences, of which the first `batch` are the caller's: one token per
/// sequence per step, eos once a sequence has produced it.
class Sampler {
public:
  Sampler(const GenerateOptions &options, int64_t rows, int64_t batch);

  /// Writes the token after position `t` of each row of `sequence`
  /// ([rows, length], row-major) from `logits`. Every row takes its draw,
  /// done or not, so that the stream of row r at step t does not depend on
  /// when the others stop. True once the first `batch` rows are done; then
  /// every row is padded with eos after position t + 1.
  bool step(const Candidates &logits, std::vector<int64_t> &sequence,
            int64_t length, int64_t t);

private:
  GenerateOptions options;
  Draws draws;
  std::vector<bool> done;
  int64_t batch;
};

} // namespace tp::rt

#endif // TP_RUNTIME_SAMPLING_H
