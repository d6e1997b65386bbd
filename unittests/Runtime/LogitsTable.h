//===- LogitsTable.h - hand-made logits as the ranks hold them --*- C++ -*-===//
//
// The decoding rules' tests: a [rows, positions, vocabulary] logits table
// cut into the vocabulary blocks the last stage's ranks return, the last
// block padded with values no rule may read.
//
//===----------------------------------------------------------------------===//

#ifndef TP_UNITTESTS_RUNTIME_LOGITSTABLE_H
#define TP_UNITTESTS_RUNTIME_LOGITSTABLE_H

#include "tp/Runtime/Candidates.h"
#include "tp/Runtime/Session.h"

#include <cstdint>
#include <vector>

namespace tp::rt::test {

/// Padding past the vocabulary: larger than any logit, so that a rule
/// reading it picks it.
constexpr float kPadding = 1e30f;

class LogitsTable {
public:
  /// `logits[r][p]` is row r's vocabulary at position p; `blocks` ranks
  /// hold ceil(vocab / blocks) entries each.
  LogitsTable(const std::vector<std::vector<std::vector<float>>> &logits,
              int64_t blocks)
      : rows(logits.size()), positions(logits[0].size()),
        vocab(logits[0][0].size()), width((vocab + blocks - 1) / blocks),
        data(blocks, std::vector<float>(rows * positions * width, kPadding)) {
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t p = 0; p < positions; ++p)
        for (int64_t v = 0; v < vocab; ++v)
          data[v / width][(r * positions + p) * width + v % width] =
              logits[r][p][v];
  }

  /// One position per row.
  LogitsTable(const std::vector<std::vector<float>> &logits, int64_t blocks)
      : LogitsTable(atOnePosition(logits), blocks) {}

  /// Blocks [first, first + count) (all for count = -1), as a process
  /// holding them sees them.
  OutputBlocks getBlocks(int64_t first = 0, int64_t count = -1) const {
    if (count < 0)
      count = static_cast<int64_t>(data.size()) - first;
    OutputBlocks blocks;
    for (int64_t b = first; b < first + count; ++b)
      blocks.blocks.push_back(reinterpret_cast<const char *>(data[b].data()));
    blocks.blockShape = {rows, positions, width};
    blocks.dim = 2;
    blocks.firstBlock = first;
    return blocks;
  }

  /// Every block's candidates at position `t`.
  Candidates candidates(int64_t k, bool withLogSumExp, int64_t t = 0) const {
    return Candidates(getBlocks(), vocab, rows, t, k, withLogSumExp);
  }

  int64_t getVocab() const { return vocab; }
  int64_t getRows() const { return rows; }

private:
  static std::vector<std::vector<std::vector<float>>>
  atOnePosition(const std::vector<std::vector<float>> &logits) {
    std::vector<std::vector<std::vector<float>>> table;
    for (const std::vector<float> &row : logits)
      table.push_back({row});
    return table;
  }

  int64_t rows, positions, vocab, width;
  std::vector<std::vector<float>> data;
};

} // namespace tp::rt::test

#endif // TP_UNITTESTS_RUNTIME_LOGITSTABLE_H
