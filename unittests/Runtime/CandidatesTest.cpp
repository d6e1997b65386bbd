//===- CandidatesTest.cpp - the next token's candidates per block ---------===//

#include "LogitsTable.h"

#include "gtest/gtest.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <string>

using namespace tp::rt;
using tp::rt::test::LogitsTable;

namespace {

/// The first largest, NaNs skipped, one comparison at a time.
int64_t firstMaximumByLoop(const std::vector<float> &x) {
  int64_t best = 0;
  for (int64_t i = 0; i < static_cast<int64_t>(x.size()); ++i)
    if (!std::isnan(x[i]) && (std::isnan(x[best]) || x[i] > x[best]))
      best = i;
  return best;
}

/// Row `r` of `table`, sorted largest first, ties by index.
std::vector<Logit> sorted(const std::vector<float> &row) {
  std::vector<Logit> all;
  for (int64_t i = 0; i < static_cast<int64_t>(row.size()); ++i)
    all.push_back({row[i], i});
  std::stable_sort(all.begin(), all.end(), [](const Logit &a, const Logit &b) {
    return a.first > b.first;
  });
  return all;
}

std::string deserializeError(const std::vector<char> &bytes) {
  try {
    Candidates candidates;
    candidates.deserialize(bytes, "last-stage rank 1");
  } catch (const Error &error) {
    return error.what();
  }
  return "";
}

TEST(FirstMaximum, TakesTheFirstOfEqualMaxima) {
  // Ties inside one SIMD group, across groups, and in the scalar tail.
  std::vector<float> x(37, 0.f);
  x[5] = x[6] = x[20] = x[36] = 2.f;
  EXPECT_EQ(firstMaximum(x.data(), 37), 5);
  x[5] = 1.f;
  EXPECT_EQ(firstMaximum(x.data(), 37), 6);
  EXPECT_EQ(firstMaximum(x.data() + 7, 30), 13);
  EXPECT_EQ(firstMaximum(x.data() + 21, 16), 15);
  EXPECT_EQ(firstMaximum(x.data() + 30, 3), 0);
}

TEST(FirstMaximum, SkipsNaNs) {
  std::vector<float> x(19, -1.f);
  x[0] = x[3] = NAN;
  x[17] = 4.f;
  EXPECT_EQ(firstMaximum(x.data(), 19), 17);
  std::vector<float> nans(9, NAN);
  EXPECT_EQ(firstMaximum(nans.data(), 9), 0);
  std::vector<float> lows(21, -INFINITY);
  lows[18] = -1e38f;
  EXPECT_EQ(firstMaximum(lows.data(), 21), 18);
}

TEST(FirstMaximum, MatchesTheLoopOnRandomLogits) {
  std::mt19937 random(7);
  // Few distinct values, so that ties are common.
  std::uniform_int_distribution<int> value(0, 5), size(1, 70);
  for (int trial = 0; trial < 500; ++trial) {
    std::vector<float> x(size(random));
    for (float &v : x)
      v = value(random) == 0 ? NAN : static_cast<float>(value(random));
    EXPECT_EQ(firstMaximum(x.data(), x.size()), firstMaximumByLoop(x));
  }
}

TEST(Candidates, ArgmaxTakesTheFirstMaximumAcrossBlocks) {
  // Vocabulary 5 over blocks of 2: [0, 1], [2, 3], [4] and padding.
  LogitsTable table({{1, 3, 0, 3, 2}, {1, 2, 0, 3, 3}, {0, 0, 0, 0, 0}}, 3);
  for (int64_t k : {1, 3, 0}) {
    Candidates logits = table.candidates(k, /*withLogSumExp=*/false);
    EXPECT_EQ(logits.argmax(0), 1) << "k = " << k;
    EXPECT_EQ(logits.argmax(1), 3) << "k = " << k;
    EXPECT_EQ(logits.argmax(2), 0) << "k = " << k;
  }
}

TEST(Candidates, ReadsNoPaddingAndNoEmptyBlock) {
  // Vocabulary 4 over 3 blocks of 2: the last holds padding only.
  LogitsTable table({{0, 1, 2, -5}}, 3);
  Candidates logits = table.candidates(0, /*withLogSumExp=*/true);
  EXPECT_EQ(logits.argmax(0), 2);
  std::vector<Logit> all = logits.top(0, 0);
  ASSERT_EQ(all.size(), 4u);
  EXPECT_EQ(all.back(), Logit(-5.f, 3));
  double expected =
      std::log(1 + std::exp(1.0) + std::exp(2.0) + std::exp(-5.0));
  EXPECT_NEAR(logits.logSumExp(0), expected, 1e-12);
}

TEST(Candidates, TopMergesEachBlocksBest) {
  std::vector<float> row{0.5f, 3, -1, 3, 2, 7, 0.5f, 3, 1};
  LogitsTable table({row}, 4);
  std::vector<Logit> expected = sorted(row);
  for (int64_t k : {1, 2, 3, 4, 9}) {
    Candidates logits = table.candidates(k, /*withLogSumExp=*/false);
    std::vector<Logit> top = logits.top(0, k);
    EXPECT_EQ(top, std::vector<Logit>(expected.begin(), expected.begin() + k))
        << "k = " << k;
  }
  EXPECT_EQ(table.candidates(0, false).top(0, 0), expected);
  // Asking a merge for fewer than the blocks kept.
  EXPECT_EQ(table.candidates(4, false).top(0, 2),
            std::vector<Logit>(expected.begin(), expected.begin() + 2));
}

TEST(Candidates, LogSumExpOfTheWholeRow) {
  std::vector<float> row{10, -3, 12.5f, 0, 11, 9.75f, -20};
  for (int64_t blocks : {1, 2, 3, 7}) {
    LogitsTable table({row}, blocks);
    double sum = 0;
    for (float x : row)
      sum += std::exp(static_cast<double>(x) - 12.5);
    EXPECT_NEAR(table.candidates(2, true).logSumExp(0), 12.5 + std::log(sum),
                1e-12)
        << blocks << " blocks";
  }
}

TEST(Candidates, ReadsTheGivenPosition) {
  // Two rows of three positions (a prefill chunk's logits).
  LogitsTable table(
      {{{0, 1, 2}, {5, 1, 2}, {0, 0, 9}}, {{3, 1, 2}, {0, 4, 2}, {1, 0, 0}}},
      2);
  EXPECT_EQ(table.candidates(1, false, 0).argmax(0), 2);
  EXPECT_EQ(table.candidates(1, false, 1).argmax(0), 0);
  EXPECT_EQ(table.candidates(1, false, 2).argmax(0), 2);
  EXPECT_EQ(table.candidates(1, false, 0).argmax(1), 0);
  EXPECT_EQ(table.candidates(1, false, 1).argmax(1), 1);
  EXPECT_EQ(table.candidates(1, false, 2).argmax(1), 0);
}

TEST(Candidates, SerializationRoundTrips) {
  std::vector<std::vector<float>> rows{
      {4, 1, 4, 0, -2, 3, 8, 1, 1, 0, 2},
      {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0},
      {-1, -2, -3, -4, -5, -6, -7, -8, -9, -10, -11}};
  LogitsTable table(rows, 3);
  for (int64_t k : {1, 4, 0}) {
    Candidates whole(table.getBlocks(), table.getVocab(), 3, 0, k, true);
    // Each process reduces its own block; rank 0 merges what they send.
    Candidates merged;
    for (int64_t b = 0; b < 3; ++b) {
      Candidates mine(table.getBlocks(b, 1), table.getVocab(), 3, 0, k, true);
      merged.deserialize(mine.serialize(),
                         "last-stage rank " + std::to_string(b));
    }
    EXPECT_EQ(merged.serialize(), whole.serialize()) << "k = " << k;
    Candidates copy;
    copy.deserialize(whole.serialize(), "rank 0");
    for (int64_t r = 0; r < 3; ++r) {
      EXPECT_EQ(copy.argmax(r), whole.argmax(r));
      EXPECT_EQ(copy.top(r, k), whole.top(r, k));
      EXPECT_EQ(copy.logSumExp(r), whole.logSumExp(r));
      EXPECT_EQ(merged.top(r, k), whole.top(r, k));
    }
  }
}

TEST(Candidates, DeserializeRejectsBadBytes) {
  LogitsTable table({{1, 2, 3}, {3, 2, 1}}, 2);
  std::vector<char> bytes = table.candidates(2, true).serialize();
  EXPECT_EQ(deserializeError(bytes), "");
  EXPECT_EQ(deserializeError(std::vector<char>(bytes.begin(), bytes.end() - 1)),
            "generation: the candidates from last-stage rank 1 are truncated");
  EXPECT_EQ(deserializeError({}),
            "generation: the candidates from last-stage rank 1 are truncated");
  // The first block's row count, then its first row's candidate count.
  std::vector<char> badRows(bytes);
  int64_t rows = -1;
  std::memcpy(badRows.data() + 8, &rows, sizeof(rows));
  EXPECT_EQ(deserializeError(badRows),
            "generation: bad candidates from last-stage rank 1");
  std::vector<char> badCount(bytes);
  int64_t count = int64_t(1) << 40;
  std::memcpy(badCount.data() + 16, &count, sizeof(count));
  EXPECT_EQ(deserializeError(badCount),
            "generation: bad candidates from last-stage rank 1");
}

} // namespace
