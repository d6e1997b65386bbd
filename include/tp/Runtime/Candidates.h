//===- Candidates.h - the next token's candidates per block -----*- C++ -*-===//
//
// What each rank's block of the logits yields for a decoding rule (its
// first maximum, its top-k, its (max, sum of exp) pair), read in place so
// that the logits are never gathered, and merged across blocks; as bytes
// for the rank that merges them under MPI.
//
//===----------------------------------------------------------------------===//

#ifndef TP_RUNTIME_CANDIDATES_H
#define TP_RUNTIME_CANDIDATES_H

#include <cmath>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace tp::rt {

struct OutputBlocks;

/// A logit and its index in the vocabulary.
using Logit = std::pair<float, int64_t>;

/// The index of the first largest of `x[0, n)` (n > 0), NaNs skipped (0
/// when all are NaN): greedy's choice within a block.
int64_t firstMaximum(const float *x, int64_t n);

/// The next token's candidates of every row at one position of the logits,
/// as the ranks hold them: each rank's block of the vocabulary (or the
/// whole vocabulary on one) is read in place and yields only what the
/// decoding rule needs (greedy: its first maximum; sampling: its top-k;
/// beams: its 2K best and its (max, sum of exp) pair), so the logits are
/// never gathered. Under MPI each last-stage process reduces its own block
/// and rank 0 merges what they send (serialize / deserialize).
class Candidates {
public:
  Candidates() = default;

  /// Position `t` of the [rows, positions, vocabulary] output `blocks`:
  /// each block's `k` best per row (all for k = 0; its first maximum for
  /// k = 1), with (max, sum of exp) when `withLogSumExp`.
  Candidates(const OutputBlocks &blocks, int64_t vocab, int64_t rows, int64_t t,
             int64_t k, bool withLogSumExp);

  /// The index of the largest logit of row `r`; the first on ties, as
  /// torch.argmax: each block's first maximum, then the largest of those
  /// (blocks in vocabulary order, so a later one wins only when larger).
  int64_t argmax(int64_t r) const;

  /// log(sum(exp(logits))) of row `r`, from each block's (max, sum of exp)
  /// pair.
  double logSumExp(int64_t r) const;

  /// The `k` largest logits of row `r` (all for k = 0), largest first,
  /// ties by index: each block's `k` largest, merged.
  std::vector<Logit> top(int64_t r, int64_t k) const;

  /// The blocks' candidates as bytes, for another process.
  std::vector<char> serialize() const;

  /// Adds the blocks `bytes` (serialize()) holds; `from` names the sender
  /// in errors.
  void deserialize(const std::vector<char> &bytes, const std::string &from);

private:
  /// What one block says about one row: its best logits, largest first,
  /// ties by index, and, where the rule needs the log-softmax, the block's
  /// (max, sum of exp) pair.
  struct RowCandidates {
    std::vector<Logit> top;
    double max = -INFINITY, sumExp = 0;
  };

  /// One entry per block, in vocabulary order; one per row within it.
  std::vector<std::vector<RowCandidates>> parts;
};

} // namespace tp::rt

#endif // TP_RUNTIME_CANDIDATES_H
