//===- PrefillPlanTest.cpp - which prefill chunks a prompt runs in --------===//

#include "tp/Runtime/PrefillPlan.h"

#include "gtest/gtest.h"

using namespace tp::rt;

namespace {

/// The chunk lengths planPrefillChunks picks (not their indices).
std::vector<int64_t> plan(const std::vector<int64_t> &lengths,
                          int64_t promptLength, int64_t slots) {
  std::vector<int64_t> result;
  for (int64_t c : planPrefillChunks(lengths, promptLength, slots))
    result.push_back(lengths[c]);
  return result;
}

using Lengths = std::vector<int64_t>;
const Lengths kDefault{16, 64, 256};

TEST(PrefillPlan, ShortPromptTakesTheSmallestChunkThatHoldsIt) {
  EXPECT_EQ(plan(kDefault, 4, 2048), Lengths({16}));
  EXPECT_EQ(plan(kDefault, 16, 2048), Lengths({16}));
  EXPECT_EQ(plan(kDefault, 64, 2048), Lengths({64}));
  EXPECT_EQ(plan(kDefault, 256, 2048), Lengths({256}));
}

TEST(PrefillPlan, ComputedTokensFollowThePrompt) {
  // Not one chunk of 256 (twice the tokens).
  EXPECT_EQ(plan(kDefault, 128, 2048), Lengths({64, 64}));
  EXPECT_EQ(plan(kDefault, 80, 2048), Lengths({64, 16}));
  EXPECT_EQ(plan(kDefault, 512, 2048), Lengths({256, 256}));
  EXPECT_EQ(plan(kDefault, 300, 2048), Lengths({256, 64}));
  EXPECT_EQ(plan(kDefault, 20, 2048), Lengths({16, 16}));
}

TEST(PrefillPlan, FewerChunksWhereSmallOnesSaveLittle) {
  // Three chunks of 16 compute 48 tokens and pay three chunks' fixed cost.
  EXPECT_EQ(plan(kDefault, 40, 2048), Lengths({64}));
  // 64 * 3 + 16 = 208 tokens in four chunks against 256 in one: even.
  EXPECT_EQ(plan(kDefault, 200, 2048), Lengths({256}));
}

TEST(PrefillPlan, ChunksStayInTheContext) {
  // At 47 positions with chunks of 16 and 32: one of 32, and no chunk fits
  // at 32 (32 + 16 > 47); the last 13 tokens are decode steps.
  EXPECT_EQ(plan({16, 32}, 45, 47), Lengths({32}));
  // 100 positions: a chunk of 64 then 16s, never the 256.
  EXPECT_EQ(plan(kDefault, 99, 100), Lengths({64, 16, 16}));
  // Nothing fits at all.
  EXPECT_EQ(plan({64}, 10, 32), Lengths());
}

TEST(PrefillPlan, NothingToPlan) {
  EXPECT_EQ(plan({}, 10, 64), Lengths());
  EXPECT_EQ(plan(kDefault, 0, 64), Lengths());
}

} // namespace
