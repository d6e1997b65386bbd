//===- SamplingTest.cpp - greedy and sampled decoding ---------------------===//

#include "tp/Runtime/Sampling.h"

#include "LogitsTable.h"

#include "gtest/gtest.h"

#include <cmath>
#include <set>

using namespace tp::rt;
using tp::rt::test::LogitsTable;

namespace {

GenerateOptions sampling(int64_t topK, double topP, double temperature = 1) {
  GenerateOptions options;
  options.sample = true;
  options.topK = topK;
  options.topP = topP;
  options.temperature = temperature;
  return options;
}

/// The tokens sampleToken gives row 0 over draws spread across [0, 1).
std::set<int64_t> reachable(const Candidates &logits,
                            const GenerateOptions &options) {
  std::set<int64_t> tokens;
  for (int i = 0; i < 1000; ++i)
    tokens.insert(sampleToken(logits, 0, options, (i + 0.5) / 1000));
  return tokens;
}

TEST(Draws, AreSplitMix64) {
  // splitmix64's first two outputs for seed 0.
  Draws draws(0);
  EXPECT_EQ(draws.next(),
            static_cast<double>(0xe220a8397b1dcdafull >> 11) * 0x1.0p-53);
  EXPECT_EQ(draws.next(),
            static_cast<double>(0x6e789e6aa1b965f4ull >> 11) * 0x1.0p-53);
  Draws again(42), other(42);
  for (int i = 0; i < 100; ++i) {
    double x = again.next();
    EXPECT_EQ(x, other.next());
    EXPECT_GE(x, 0);
    EXPECT_LT(x, 1);
  }
}

TEST(Greedy, PicksTheFirstMaximumAcrossBlocks) {
  // torch.argmax: the first of equal maxima, wherever the blocks cut.
  LogitsTable table({{0, 5, 1, 5, 5}, {7, 0, 0, 0, 7}, {0, 1, 2, 3, 4}}, 2);
  Candidates logits = table.candidates(1, /*withLogSumExp=*/false);
  EXPECT_EQ(greedyToken(logits, 0), 1);
  EXPECT_EQ(greedyToken(logits, 1), 0);
  EXPECT_EQ(greedyToken(logits, 2), 4);
}

TEST(SampleToken, TopKKeepsTheKLargest) {
  // Probabilities 0.1, 0.4, 0.2, 0.3 over two blocks.
  LogitsTable table(
      {{std::log(0.1f), std::log(0.4f), std::log(0.2f), std::log(0.3f)}}, 2);
  EXPECT_EQ(reachable(table.candidates(2, false), sampling(2, 1)),
            std::set<int64_t>({1, 3}));
  EXPECT_EQ(reachable(table.candidates(1, false), sampling(1, 1)),
            std::set<int64_t>({1}));
  EXPECT_EQ(reachable(table.candidates(0, false), sampling(0, 1)),
            std::set<int64_t>({0, 1, 2, 3}));
  // Largest first: the cumulative probability of 1 then 3 (4 / 7).
  Candidates logits = table.candidates(2, false);
  EXPECT_EQ(sampleToken(logits, 0, sampling(2, 1), 0.0), 1);
  EXPECT_EQ(sampleToken(logits, 0, sampling(2, 1), 0.56), 1);
  EXPECT_EQ(sampleToken(logits, 0, sampling(2, 1), 0.58), 3);
  EXPECT_EQ(sampleToken(logits, 0, sampling(2, 1), 0.9999), 3);
}

TEST(SampleToken, TopPKeepsTheSmallestNucleus) {
  LogitsTable table(
      {{std::log(0.1f), std::log(0.4f), std::log(0.2f), std::log(0.3f)}}, 3);
  Candidates logits = table.candidates(0, false);
  // 0.4 + 0.3 reach 0.65; 0.4 alone reaches 0.35; 0.4 + 0.3 + 0.2 reach 0.8.
  EXPECT_EQ(reachable(logits, sampling(0, 0.65)), std::set<int64_t>({1, 3}));
  EXPECT_EQ(reachable(logits, sampling(0, 0.35)), std::set<int64_t>({1}));
  EXPECT_EQ(reachable(logits, sampling(0, 0.8)), std::set<int64_t>({1, 2, 3}));
  // Top-k first, then top-p of what it kept: 0.4 of 0.7 is below 0.65.
  Candidates two = table.candidates(2, false);
  EXPECT_EQ(reachable(two, sampling(2, 0.65)), std::set<int64_t>({1, 3}));
  EXPECT_EQ(reachable(two, sampling(2, 0.5)), std::set<int64_t>({1}));
  // Renormalized over the nucleus: 1 up to 4 / 7.
  EXPECT_EQ(sampleToken(logits, 0, sampling(0, 0.65), 0.56), 1);
  EXPECT_EQ(sampleToken(logits, 0, sampling(0, 0.65), 0.58), 3);
}

TEST(SampleToken, TemperatureSharpens) {
  // Probabilities 0.25 and 0.75; at temperature 0.5, 0.1 and 0.9.
  LogitsTable table({{0, std::log(3.f)}}, 1);
  Candidates logits = table.candidates(0, false);
  EXPECT_EQ(sampleToken(logits, 0, sampling(0, 1), 0.74), 1);
  EXPECT_EQ(sampleToken(logits, 0, sampling(0, 1), 0.76), 0);
  EXPECT_EQ(sampleToken(logits, 0, sampling(0, 1, 0.5), 0.89), 1);
  EXPECT_EQ(sampleToken(logits, 0, sampling(0, 1, 0.5), 0.91), 0);
}

TEST(Sampler, GreedyStopsEachRowAtEos) {
  // Three rows, the first two the batch; vocabulary 4, eos 3.
  GenerateOptions options;
  options.eosTokenId = 3;
  Sampler sampler(options, 3, 2);
  int64_t length = 5;
  std::vector<int64_t> sequence(3 * length, -1);
  LogitsTable first({{0, 1, 0, 9}, {0, 5, 0, 1}, {0, 0, 7, 0}}, 2);
  EXPECT_FALSE(sampler.step(first.candidates(1, false), sequence, length, 0));
  EXPECT_EQ(sequence[1], 3);
  EXPECT_EQ(sequence[length + 1], 1);
  EXPECT_EQ(sequence[2 * length + 1], 2);
  // Row 0 is done: eos whatever its logits say.
  LogitsTable second({{9, 0, 0, 0}, {0, 0, 0, 9}, {0, 0, 7, 0}}, 2);
  // Rows past the batch do not hold the others up.
  EXPECT_TRUE(sampler.step(second.candidates(1, false), sequence, length, 1));
  EXPECT_EQ(sequence[2], 3);
  EXPECT_EQ(sequence[length + 2], 3);
  EXPECT_EQ(sequence[2 * length + 2], 2);
  // Once all are done, every row is eos after the token just written.
  for (int64_t r = 0; r < 3; ++r) {
    EXPECT_EQ(sequence[r * length + 3], 3);
    EXPECT_EQ(sequence[r * length + 4], 3);
  }
}

TEST(Sampler, EachRowDrawsEveryStep) {
  // Row 1's tokens do not depend on when row 0 stops: one draw per row per
  // step, done or not. Vocabulary 3, eos 2: in `stops` row 0 ends at once,
  // in `goes` never; row 1 takes 0 or 1, rarely eos.
  GenerateOptions options = sampling(0, 1);
  options.eosTokenId = 2;
  options.seed = 5;
  int64_t length = 9;
  LogitsTable stop({{-50, -50, 50}, {0, 0, -3}}, 2);
  LogitsTable go({{50, -50, -50}, {0, 0, -3}}, 2);
  Sampler stops(options, 2, 2), goes(options, 2, 2);
  std::vector<int64_t> a(2 * length, 0), b(2 * length, 0);
  Draws draws(options.seed);
  double total = 2 + std::exp(-3.0);
  for (int64_t t = 0; t + 1 < length; ++t) {
    stops.step((t == 0 ? stop : go).candidates(0, false), a, length, t);
    goes.step(go.candidates(0, false), b, length, t);
    EXPECT_EQ(a[t + 1], 2);
    EXPECT_EQ(b[t + 1], 0);
    draws.next();
    double target = draws.next() * total;
    int64_t expected = target < 1 ? 0 : target < 2 ? 1 : 2;
    EXPECT_EQ(a[length + t + 1], expected) << "t = " << t;
    EXPECT_EQ(b[length + t + 1], expected) << "t = " << t;
    if (expected == 2)
      break;
  }
}

} // namespace
