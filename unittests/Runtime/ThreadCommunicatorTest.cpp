//===- ThreadCommunicatorTest.cpp - ranks as threads ----------------------===//
//
// Every test runs one function on each rank of a ThreadWorld and checks the
// results against values computed here, rank by rank, without the runtime.
//
//===----------------------------------------------------------------------===//

#include "tp/Runtime/Communicators.h"
#include "tp/Runtime/HalfFloat.h"

#include "gtest/gtest.h"

#include <chrono>
#include <cmath>
#include <functional>
#include <string>
#include <thread>
#include <vector>

using namespace tp::rt;
using namespace std::chrono_literals;

namespace {

using Clock = std::chrono::steady_clock;

/// Runs `body` on `ranks` threads and returns each rank's error message
/// ("" when it returned normally).
std::vector<std::string>
runRanks(int32_t ranks, std::chrono::milliseconds timeout,
         const std::function<void(RankContext &)> &body) {
  std::shared_ptr<ThreadWorld> world = createThreadWorld(ranks, timeout);
  std::vector<std::string> errors(ranks);
  std::vector<std::thread> threads;
  for (int32_t rank = 0; rank < ranks; ++rank)
    threads.emplace_back([&, rank] {
      std::unique_ptr<RankContext> context =
          createThreadRankContext(world, rank);
      try {
        body(*context);
      } catch (const std::exception &error) {
        errors[rank] = error.what();
        if (errors[rank].empty())
          errors[rank] = "error without a message";
      }
    });
  for (std::thread &thread : threads)
    thread.join();
  return errors;
}

void expectNoErrors(const std::vector<std::string> &errors) {
  for (size_t rank = 0; rank < errors.size(); ++rank)
    EXPECT_EQ(errors[rank], "") << "rank " << rank;
}

class Collectives : public ::testing::TestWithParam<int32_t> {};

TEST_P(Collectives, AllReduceSum) {
  int32_t ranks = GetParam();
  constexpr int64_t count = 37;
  std::vector<std::vector<float>> results(ranks);
  expectNoErrors(runRanks(ranks, 5000ms, [&](RankContext &context) {
    std::vector<float> buffer(count);
    for (int64_t i = 0; i < count; ++i)
      buffer[i] = context.rank() * 10.0f + i;
    context.allReduce({ranks, 1}, buffer.data(), count, DType::F32,
                      Reduction::Sum, "all_reduce at test:1");
    results[context.rank()] = buffer;
  }));
  for (int32_t rank = 0; rank < ranks; ++rank)
    for (int64_t i = 0; i < count; ++i) {
      float expected = 0;
      for (int32_t peer = 0; peer < ranks; ++peer)
        expected += peer * 10.0f + i;
      EXPECT_EQ(results[rank][i], expected) << "rank " << rank << " i " << i;
    }
}

TEST_P(Collectives, AllReduceOtherTypesAndOps) {
  int32_t ranks = GetParam();
  std::vector<std::vector<int64_t>> maxima(ranks);
  std::vector<std::vector<int32_t>> minima(ranks);
  std::vector<std::vector<double>> products(ranks);
  expectNoErrors(runRanks(ranks, 5000ms, [&](RankContext &context) {
    int32_t r = context.rank();
    std::vector<int64_t> max = {r, -r, 100 - r};
    std::vector<int32_t> min = {r, -r, 7};
    std::vector<double> product = {r + 1.0, 0.5, -1.0};
    context.allReduce({ranks, 1}, max.data(), 3, DType::I64, Reduction::Max,
                      "max");
    context.allReduce({ranks, 1}, min.data(), 3, DType::I32, Reduction::Min,
                      "min");
    context.allReduce({ranks, 1}, product.data(), 3, DType::F64,
                      Reduction::Product, "product");
    maxima[r] = max;
    minima[r] = min;
    products[r] = product;
  }));
  double factorial = 1, half = 1, sign = 1;
  for (int32_t peer = 0; peer < ranks; ++peer) {
    factorial *= peer + 1;
    half *= 0.5;
    sign = -sign;
  }
  for (int32_t rank = 0; rank < ranks; ++rank) {
    EXPECT_EQ(maxima[rank], (std::vector<int64_t>{ranks - 1, 0, 100}));
    EXPECT_EQ(minima[rank], (std::vector<int32_t>{0, 1 - ranks, 7}));
    EXPECT_EQ(products[rank], (std::vector<double>{factorial, half, sign}));
  }
}

TEST_P(Collectives, AllGatherWithOuterDim) {
  int32_t ranks = GetParam();
  constexpr int64_t outer = 3, chunk = 5;
  std::vector<std::vector<int32_t>> results(ranks);
  expectNoErrors(runRanks(ranks, 5000ms, [&](RankContext &context) {
    std::vector<int32_t> in(outer * chunk);
    for (int64_t o = 0; o < outer; ++o)
      for (int64_t j = 0; j < chunk; ++j)
        in[o * chunk + j] = context.rank() * 100 + o * 10 + j;
    std::vector<int32_t> out(outer * ranks * chunk, -1);
    context.allGather({ranks, 1}, in.data(), out.data(), outer,
                      chunk * sizeof(int32_t), "all_gather at test:2");
    results[context.rank()] = out;
  }));
  for (int32_t rank = 0; rank < ranks; ++rank)
    for (int64_t o = 0; o < outer; ++o)
      for (int32_t i = 0; i < ranks; ++i)
        for (int64_t j = 0; j < chunk; ++j)
          EXPECT_EQ(results[rank][(o * ranks + i) * chunk + j],
                    i * 100 + o * 10 + j)
              << "rank " << rank << " at [" << o << ", " << i << ", " << j
              << "]";
}

TEST_P(Collectives, ReduceScatterWithOuterDim) {
  int32_t ranks = GetParam();
  constexpr int64_t outer = 2, chunk = 3;
  auto value = [](int32_t rank, int64_t o, int64_t position, int64_t j) {
    return static_cast<float>(rank * 1000 + o * 100 + position * 10 + j);
  };
  std::vector<std::vector<float>> results(ranks);
  expectNoErrors(runRanks(ranks, 5000ms, [&](RankContext &context) {
    std::vector<float> in(outer * ranks * chunk);
    for (int64_t o = 0; o < outer; ++o)
      for (int32_t p = 0; p < ranks; ++p)
        for (int64_t j = 0; j < chunk; ++j)
          in[(o * ranks + p) * chunk + j] = value(context.rank(), o, p, j);
    std::vector<float> out(outer * chunk, -1);
    context.reduceScatter({ranks, 1}, in.data(), out.data(), outer, chunk,
                          DType::F32, Reduction::Sum,
                          "reduce_scatter at test:3");
    results[context.rank()] = out;
  }));
  for (int32_t rank = 0; rank < ranks; ++rank)
    for (int64_t o = 0; o < outer; ++o)
      for (int64_t j = 0; j < chunk; ++j) {
        float expected = 0;
        for (int32_t peer = 0; peer < ranks; ++peer)
          expected += value(peer, o, rank, j);
        EXPECT_EQ(results[rank][o * chunk + j], expected)
            << "rank " << rank << " at [" << o << ", " << j << "]";
      }
}

INSTANTIATE_TEST_SUITE_P(ThreadCommunicator, Collectives,
                         ::testing::Values(2, 4));

/// Groups {0, 1} and {2, 3} (stride 1), then {0, 2} and {1, 3} (stride 2),
/// many times over, so that the two groups of a kind run at the same time.
TEST(ThreadCommunicator, ConcurrentGroups) {
  constexpr int iterations = 200;
  std::vector<std::vector<int64_t>> results(4);
  expectNoErrors(runRanks(4, 5000ms, [&](RankContext &context) {
    for (int iteration = 0; iteration < iterations; ++iteration) {
      int64_t rows = context.rank() + iteration;
      context.allReduce({2, 1}, &rows, 1, DType::I64, Reduction::Sum, "rows");
      int64_t columns = context.rank() * iteration;
      context.allReduce({2, 2}, &columns, 1, DType::I64, Reduction::Sum,
                        "columns");
      results[context.rank()].push_back(rows);
      results[context.rank()].push_back(columns);
    }
  }));
  for (int32_t rank = 0; rank < 4; ++rank) {
    ASSERT_EQ(results[rank].size(), 2u * iterations);
    int32_t rowPeer = rank ^ 1, columnPeer = rank ^ 2;
    for (int iteration = 0; iteration < iterations; ++iteration) {
      EXPECT_EQ(results[rank][2 * iteration], rank + rowPeer + 2 * iteration);
      EXPECT_EQ(results[rank][2 * iteration + 1],
                (rank + columnPeer) * iteration);
    }
  }
}

TEST(ThreadCommunicator, SizeOneGroupIsACopy) {
  expectNoErrors(runRanks(2, 5000ms, [&](RankContext &context) {
    int32_t value = context.rank() + 5;
    context.allReduce({1, 1}, &value, 1, DType::I32, Reduction::Sum, "one");
    EXPECT_EQ(value, context.rank() + 5);
    int32_t gathered = 0;
    context.allGather({1, 2}, &value, &gathered, 1, sizeof value, "one");
    EXPECT_EQ(gathered, value);
  }));
}

TEST(ThreadCommunicator, SendRecv) {
  std::vector<int64_t> first(3), second(2);
  expectNoErrors(runRanks(4, 5000ms, [&](RankContext &context) {
    if (context.rank() == 0) {
      std::vector<int64_t> a = {1, 2, 3}, b = {4, 5};
      context.send(2, a.data(), 24, "send at test:4");
      // send returns without waiting, so changing the buffer is safe.
      a[0] = 99;
      context.send(2, b.data(), 16, "send at test:5");
    } else if (context.rank() == 2) {
      context.recv(0, first.data(), 24, "recv at test:4");
      context.recv(0, second.data(), 16, "recv at test:5");
    }
  }));
  EXPECT_EQ(first, (std::vector<int64_t>{1, 2, 3}));
  EXPECT_EQ(second, (std::vector<int64_t>{4, 5}));
}

TEST(ThreadCommunicator, RecvOfTheWrongSize) {
  std::vector<std::string> errors =
      runRanks(2, 5000ms, [&](RankContext &context) {
        char buffer[8] = {};
        if (context.rank() == 0)
          context.send(1, buffer, 8, "send");
        else
          context.recv(0, buffer, 4, "recv at test:6");
      });
  EXPECT_EQ(errors[0], "");
  EXPECT_NE(errors[1].find("rank 1: recv at test:6"), std::string::npos)
      << errors[1];
  EXPECT_NE(errors[1].find("expected 4 bytes from rank 0 but got 8"),
            std::string::npos)
      << errors[1];
}

TEST(ThreadCommunicator, MismatchedCollectives) {
  std::vector<std::string> errors =
      runRanks(2, 5000ms, [&](RankContext &context) {
        float buffer[4] = {};
        context.allReduce({2, 1}, buffer, context.rank() ? 4 : 2, DType::F32,
                          Reduction::Sum, "all_reduce at test:7");
      });
  for (const std::string &error : errors)
    EXPECT_NE(error.find("but rank"), std::string::npos) << error;
}

TEST(ThreadCommunicator, Timeout) {
  const char *site = "all_reduce at model.mlir:57";
  Clock::time_point start = Clock::now();
  std::vector<std::string> errors =
      runRanks(4, 200ms, [&](RankContext &context) {
        if (context.rank() == 3)
          return;
        float value = 1;
        context.allReduce({4, 1}, &value, 1, DType::F32, Reduction::Sum, site);
      });
  std::chrono::duration<double> elapsed = Clock::now() - start;
  EXPECT_GE(elapsed.count(), 0.19);
  EXPECT_LT(elapsed.count(), 5.0);
  for (int32_t rank = 0; rank < 3; ++rank) {
    const std::string &error = errors[rank];
    EXPECT_NE(error.find("rank " + std::to_string(rank) + ": " + site),
              std::string::npos)
        << error;
    EXPECT_NE(error.find("timed out after 0.2 s waiting for rank 3"),
              std::string::npos)
        << error;
  }
  EXPECT_EQ(errors[3], "");
}

TEST(ThreadCommunicator, RecvTimeout) {
  std::vector<std::string> errors =
      runRanks(2, 200ms, [&](RankContext &context) {
        char byte;
        if (context.rank() == 1)
          context.recv(0, &byte, 1, "recv at test:8");
      });
  EXPECT_EQ(errors[1],
            "rank 1: recv at test:8 timed out after 0.2 s waiting for rank 0");
}

TEST(ThreadCommunicator, Abort) {
  std::shared_ptr<ThreadWorld> world = createThreadWorld(4, 30000ms);
  std::vector<std::string> errors(4);
  Clock::time_point start = Clock::now();
  std::vector<std::thread> threads;
  for (int32_t rank = 0; rank < 4; ++rank)
    threads.emplace_back([&, rank] {
      std::unique_ptr<RankContext> context =
          createThreadRankContext(world, rank);
      try {
        if (rank == 0) {
          std::this_thread::sleep_for(50ms);
          throw Error("weights.npy: truncated data");
        }
        // Rank 3 waits in recv, the others in a collective.
        if (rank == 3) {
          char byte;
          context->recv(0, &byte, 1, "recv at test:9");
          return;
        }
        float value = 1;
        context->allReduce({3, 1}, &value, 1, DType::F32, Reduction::Sum,
                           "all_reduce at test:9");
      } catch (const std::exception &error) {
        errors[rank] = error.what();
        abortThreadWorld(*world, "rank " + std::to_string(rank) +
                                     " failed: " + error.what());
      }
    });
  for (std::thread &thread : threads)
    thread.join();
  std::chrono::duration<double> elapsed = Clock::now() - start;
  EXPECT_LT(elapsed.count(), 10.0);
  EXPECT_EQ(errors[0], "weights.npy: truncated data");
  EXPECT_EQ(errors[1], "rank 1: all_reduce at test:9 aborted: rank 0 failed: "
                       "weights.npy: truncated data");
  EXPECT_NE(errors[2].find("aborted"), std::string::npos) << errors[2];
  EXPECT_EQ(errors[3], "rank 3: recv at test:9 aborted: rank 0 failed: "
                       "weights.npy: truncated data");

  // A collective entered after the abort fails at once.
  std::unique_ptr<RankContext> late = createThreadRankContext(world, 1);
  float value = 0;
  try {
    late->allReduce({2, 1}, &value, 1, DType::F32, Reduction::Sum, "late");
    ADD_FAILURE() << "allReduce after an abort returned";
  } catch (const Error &error) {
    EXPECT_NE(std::string(error.what()).find("rank 1: late aborted"),
              std::string::npos)
        << error.what();
  }
}

// f16 and bf16 buffers (tp-compile --dtype) are reduced in f32 and rounded
// back. The values are multiples of 1/4 below 64, so every partial sum is
// exact in both types and the result does not depend on the order.
TEST_P(Collectives, AllReduceHalves) {
  int32_t ranks = GetParam();
  constexpr int64_t count = 37;
  for (DType type : {DType::F16, DType::BF16}) {
    auto toBits = type == DType::F16 ? floatToF16 : floatToBF16;
    auto fromBits = type == DType::F16 ? f16ToFloat : bf16ToFloat;
    std::vector<std::vector<uint16_t>> results(ranks);
    expectNoErrors(runRanks(ranks, 5000ms, [&](RankContext &context) {
      std::vector<uint16_t> &data = results[context.rank()];
      for (int64_t i = 0; i < count; ++i)
        data.push_back(toBits(0.25f * i + context.rank()));
      context.allReduce({ranks, 1}, data.data(), count, type, Reduction::Sum,
                        "all_reduce at test:1");
    }));
    for (int32_t rank = 0; rank < ranks; ++rank)
      for (int64_t i = 0; i < count; ++i)
        EXPECT_EQ(fromBits(results[rank][i]),
                  0.25f * i * ranks + ranks * (ranks - 1) / 2)
            << "rank " << rank << " element " << i;
  }
}

TEST(HalfFloat, RoundsToNearestEven) {
  // Halfway between 1 and the next value rounds to the even one (1); just
  // above halfway rounds up.
  EXPECT_EQ(bf16ToFloat(floatToBF16(1.0f + 0x1p-8f)), 1.0f);
  EXPECT_EQ(bf16ToFloat(floatToBF16(1.0f + 0x1p-8f + 0x1p-20f)),
            1.0f + 0x1p-7f);
  EXPECT_EQ(bf16ToFloat(floatToBF16(1.0f + 3 * 0x1p-8f)), 1.0f + 0x1p-6f);
  EXPECT_EQ(f16ToFloat(floatToF16(1.0f + 0x1p-11f)), 1.0f);
  EXPECT_EQ(f16ToFloat(floatToF16(1.0f + 3 * 0x1p-11f)), 1.0f + 0x1p-9f);
  EXPECT_TRUE(std::isnan(bf16ToFloat(floatToBF16(std::nanf("")))));
  EXPECT_EQ(f16ToFloat(floatToF16(1e6f)), INFINITY);
}

TEST(ThreadCommunicator, BoolCannotBeReduced) {
  std::vector<std::string> errors =
      runRanks(2, 5000ms, [&](RankContext &context) {
        bool flag = true;
        context.allReduce({2, 1}, &flag, 1, DType::Bool, Reduction::Max,
                          "all_reduce at test:10");
      });
  for (const std::string &error : errors)
    EXPECT_NE(error.find("cannot reduce bool"), std::string::npos) << error;
}

// A forward pass that throws never releases its live buffers: the context
// frees them (the sanitized suite reports a leak otherwise). Buffers are
// recycled by size.
TEST(ThreadCommunicator, ContextOwnsItsBuffers) {
  std::vector<std::string> errors =
      runRanks(1, 5000ms, [&](RankContext &context) {
        void *kept = context.allocate(256);
        context.release(kept, 256);
        EXPECT_EQ(context.allocate(256), kept);
        context.allocate(1024);
        throw Error("the pass failed with two buffers live");
      });
  EXPECT_EQ(errors[0], "the pass failed with two buffers live");
}

} // namespace
