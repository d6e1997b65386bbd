//===- BeamSearchTest.cpp - beam search over the logits blocks ------------===//

#include "tp/Runtime/BeamSearch.h"

#include "LogitsTable.h"

#include "gtest/gtest.h"

#include <cmath>

using namespace tp::rt;
using tp::rt::test::LogitsTable;

namespace {

using Tokens = std::vector<int64_t>;

/// Logits whose log-softmax is log(p) for probabilities `p`.
std::vector<float> logOf(const std::vector<double> &p) {
  std::vector<float> logits;
  for (double x : p)
    logits.push_back(static_cast<float>(std::log(x)));
  return logits;
}

/// Row `r` of the [rows, length] `sequence`.
Tokens row(const Tokens &sequence, int64_t length, int64_t r) {
  return Tokens(sequence.begin() + r * length,
                sequence.begin() + (r + 1) * length);
}

/// One prompt (token 7) of 2 beams over a vocabulary of 4, and a third row
/// past them; the candidates of 1, 2 and 3 blocks (the last of 3 is only
/// padding) choose alike.
class BeamStep : public ::testing::TestWithParam<int64_t> {
protected:
  static constexpr int64_t kLength = 4;
  Tokens sequence{7, -1, -1, -1, 7, -1, -1, -1, 9, 9, 9, 9};

  Candidates logits(const std::vector<std::vector<float>> &rows) {
    return LogitsTable(rows, GetParam()).candidates(4, true);
  }

  /// The first step: only beam 0 extends the prompt, to its 2 most
  /// likely tokens, 1 (0.5) then 2 (0.3).
  std::vector<int64_t> firstStep(BeamSearch &search) {
    std::vector<float> p = logOf({0.1, 0.5, 0.3, 0.1});
    return search.step(logits({p, p, {0, 0, 0, 0}}), sequence, kLength, 0);
  }
  /// The second: beam 1 (7 2) is sure of 0 (0.3 x 0.97); beam 0 (7 1)
  /// splits between 0 and 1 (0.5 x 0.4 each).
  std::vector<int64_t> secondStep(BeamSearch &search) {
    return search.step(logits({logOf({0.4, 0.4, 0.1, 0.1}),
                               logOf({0.97, 0.01, 0.01, 0.01}),
                               {0, 0, 0, 0}}),
                       sequence, kLength, 1);
  }
};

TEST_P(BeamStep, ChoosesTheBestBeamsAndTheirSources) {
  BeamSearch search(/*batch=*/1, /*beams=*/2, /*rows=*/3, /*vocab=*/4,
                    /*promptLength=*/1, /*eosTokenId=*/-1);
  EXPECT_EQ(firstStep(search), Tokens({0, 0, 2}));
  EXPECT_EQ(row(sequence, kLength, 0), Tokens({7, 1, -1, -1}));
  EXPECT_EQ(row(sequence, kLength, 1), Tokens({7, 2, -1, -1}));
  EXPECT_NEAR(search.getBeamScores()[0], std::log(0.5), 1e-6);
  EXPECT_NEAR(search.getBeamScores()[1], std::log(0.3), 1e-6);

  // The beams swap rows, and the caches with them: beam 0 continues row 1
  // (0.291), beam 1 row 0 with token 0 (0.2; of equal scores, the lower
  // token).
  EXPECT_EQ(secondStep(search), Tokens({1, 0, 2}));
  EXPECT_EQ(row(sequence, kLength, 0), Tokens({7, 2, 0, -1}));
  EXPECT_EQ(row(sequence, kLength, 1), Tokens({7, 1, 0, -1}));
  // The row past the beams stays as it was.
  EXPECT_EQ(row(sequence, kLength, 2), Tokens({9, 9, 9, 9}));
  EXPECT_NEAR(search.getBeamScores()[0], std::log(0.3 * 0.97), 1e-6);
  EXPECT_NEAR(search.getBeamScores()[1], std::log(0.5 * 0.4), 1e-6);
  EXPECT_FALSE(search.isDone());

  // Without eos, the best running beam is the result.
  search.finish(sequence, kLength, 2);
  EXPECT_EQ(row(sequence, kLength, 0), Tokens({7, 2, 0, -1}));
}

TEST_P(BeamStep, EndsBeamsAtEos) {
  BeamSearch search(1, 2, 3, 4, 1, /*eosTokenId=*/0);
  firstStep(search);
  // Both of the 2 best end in eos: they become hypotheses (scored by their
  // log-probability per generated token), and the next 2 are the beams.
  EXPECT_EQ(secondStep(search), Tokens({0, 0, 2}));
  EXPECT_EQ(row(sequence, kLength, 0), Tokens({7, 1, 1, -1}));
  EXPECT_EQ(row(sequence, kLength, 1), Tokens({7, 1, 2, -1}));
  EXPECT_NEAR(search.getBeamScores()[0], std::log(0.5 * 0.4), 1e-6);
  EXPECT_NEAR(search.getBeamScores()[1], std::log(0.5 * 0.1), 1e-6);
  // The worst hypothesis (log(0.2) / 2) can still be beaten by a beam
  // (the best candidate, log(0.291) / 2).
  EXPECT_FALSE(search.isDone());

  // The running beams, log(0.2) / 2 and log(0.05) / 2, beat neither
  // hypothesis: the best is 7 2, padded with eos.
  search.finish(sequence, kLength, 2);
  EXPECT_EQ(row(sequence, kLength, 0), Tokens({7, 2, 0, 0}));
}

TEST_P(BeamStep, IsDoneWhenNoBeamCanBeatTheHypotheses) {
  BeamSearch search(1, 2, 3, 4, 1, /*eosTokenId=*/3);
  // Eos (3) is the likeliest continuation of beam 0, twice.
  std::vector<float> p = logOf({0.1, 0.2, 0.1, 0.6});
  EXPECT_EQ(search.step(logits({p, p, {0, 0, 0, 0}}), sequence, kLength, 0),
            Tokens({0, 0, 2}));
  EXPECT_EQ(row(sequence, kLength, 0), Tokens({7, 1, -1, -1}));
  EXPECT_EQ(row(sequence, kLength, 1), Tokens({7, 0, -1, -1}));
  EXPECT_FALSE(search.isDone());
  // Now both beams are sure of eos: 2 hypotheses, 7 (0.6) and 7 1 (0.2 x
  // 0.97 over 2 tokens), better than all that can follow.
  std::vector<float> sure = logOf({0.01, 0.01, 0.01, 0.97});
  search.step(logits({sure, sure, {0, 0, 0, 0}}), sequence, kLength, 1);
  EXPECT_TRUE(search.isDone());
  search.finish(sequence, kLength, 2);
  EXPECT_EQ(row(sequence, kLength, 0), Tokens({7, 3, 3, 3}));
}

INSTANTIATE_TEST_SUITE_P(Blocks, BeamStep, ::testing::Values(1, 2, 3));

TEST(BeamSearch, KeepsEachPromptsBeamsApart) {
  // Two prompts of 2 beams over a vocabulary of 3: rows 0-1 and 2-3.
  BeamSearch search(2, 2, 4, 3, 1, -1);
  int64_t length = 2;
  Tokens sequence{5, -1, 5, -1, 6, -1, 6, -1};
  std::vector<float> a = logOf({0.6, 0.3, 0.1}), b = logOf({0.1, 0.2, 0.7});
  LogitsTable table({a, a, b, b}, 2);
  EXPECT_EQ(search.step(table.candidates(4, true), sequence, length, 0),
            Tokens({0, 0, 2, 2}));
  EXPECT_EQ(sequence, Tokens({5, 0, 5, 1, 6, 2, 6, 1}));
  search.finish(sequence, length, 1);
  EXPECT_EQ(row(sequence, length, 0), Tokens({5, 0}));
  EXPECT_EQ(row(sequence, length, 1), Tokens({6, 2}));
}

} // namespace
