//===- mpi_smoke.cpp - the MPI communicator on MPI_COMM_WORLD -------------===//
//
// Run by hand, e.g. `mpirun -np 4 bin/tp-mpi-smoke`: runs the collectives of
// ThreadCommunicatorTest over all ranks of MPI_COMM_WORLD (and over the
// stride-1 and stride-2 pairs when the world has a multiple of 4 ranks),
// checks every value, and prints "mpi smoke ok" on rank 0 when all ranks
// passed.
//
//===----------------------------------------------------------------------===//

#include "tp/Runtime/Communicators.h"

#include <mpi.h>

#include <cstdio>
#include <string>
#include <vector>

using namespace tp::rt;
using namespace std::chrono_literals;

namespace {

int failures = 0;

void expect(bool condition, int rank, const std::string &what) {
  if (condition)
    return;
  ++failures;
  std::fprintf(stderr, "rank %d: FAILED: %s\n", rank, what.c_str());
}

/// Runs `body` and returns the message of the Error it throws, or "".
template <typename Body> std::string errorOf(Body body) {
  try {
    body();
  } catch (const Error &error) {
    return error.what();
  }
  return "";
}

void collectives(RankContext &context) {
  int32_t rank = context.rank(), size = context.worldSize();
  Group world{size, 1};

  std::vector<float> sums(5);
  for (int i = 0; i < 5; ++i)
    sums[i] = rank * 10.0f + i;
  context.allReduce(world, sums.data(), 5, DType::F32, Reduction::Sum,
                    "all_reduce at smoke:1");
  for (int i = 0; i < 5; ++i) {
    float expected = 0;
    for (int32_t peer = 0; peer < size; ++peer)
      expected += peer * 10.0f + i;
    expect(sums[i] == expected, rank, "all_reduce sum " + std::to_string(i));
  }

  int64_t maximum = rank * 3 - 1;
  context.allReduce(world, &maximum, 1, DType::I64, Reduction::Max,
                    "all_reduce at smoke:2");
  expect(maximum == (size - 1) * 3 - 1, rank, "all_reduce max");

  constexpr int64_t outer = 3, chunk = 2;
  std::vector<int32_t> in(outer * chunk), out(outer * size * chunk, -1);
  for (int64_t o = 0; o < outer; ++o)
    for (int64_t j = 0; j < chunk; ++j)
      in[o * chunk + j] = rank * 100 + o * 10 + j;
  context.allGather(world, in.data(), out.data(), outer,
                    chunk * sizeof(int32_t), "all_gather at smoke:3");
  for (int64_t o = 0; o < outer; ++o)
    for (int32_t i = 0; i < size; ++i)
      for (int64_t j = 0; j < chunk; ++j)
        expect(out[(o * size + i) * chunk + j] == i * 100 + o * 10 + j, rank,
               "all_gather at [" + std::to_string(o) + ", " +
                   std::to_string(i) + ", " + std::to_string(j) + "]");

  auto value = [](int32_t r, int64_t o, int64_t p, int64_t j) {
    return static_cast<double>(r * 1000 + o * 100 + p * 10 + j);
  };
  std::vector<double> spread(outer * size * chunk), mine(outer * chunk, -1);
  for (int64_t o = 0; o < outer; ++o)
    for (int32_t p = 0; p < size; ++p)
      for (int64_t j = 0; j < chunk; ++j)
        spread[(o * size + p) * chunk + j] = value(rank, o, p, j);
  context.reduceScatter(world, spread.data(), mine.data(), outer, chunk,
                        DType::F64, Reduction::Sum,
                        "reduce_scatter at smoke:4");
  for (int64_t o = 0; o < outer; ++o)
    for (int64_t j = 0; j < chunk; ++j) {
      double expected = 0;
      for (int32_t peer = 0; peer < size; ++peer)
        expected += value(peer, o, rank, j);
      expect(mine[o * chunk + j] == expected, rank,
             "reduce_scatter at [" + std::to_string(o) + ", " +
                 std::to_string(j) + "]");
    }

  // Pairs of a 2x2 grid (or several): rows, then columns, repeatedly.
  if (size % 4 == 0)
    for (int iteration = 0; iteration < 50; ++iteration) {
      int64_t row = rank + iteration, column = rank * iteration;
      context.allReduce({2, 1}, &row, 1, DType::I64, Reduction::Sum, "rows");
      context.allReduce({2, 2}, &column, 1, DType::I64, Reduction::Sum,
                        "columns");
      expect(row == rank + (rank ^ 1) + 2 * iteration, rank, "row sum");
      expect(column == (rank + (rank ^ 2)) * iteration, rank, "column sum");
    }

  // Point to point: the first rank to the last, twice, FIFO.
  if (size > 1) {
    std::vector<int64_t> first = {1, 2, 3}, second = {4, 5};
    if (rank == 0) {
      context.send(size - 1, first.data(), 24, "send at smoke:5");
      first[0] = 99;
      context.send(size - 1, second.data(), 16, "send at smoke:6");
    } else if (rank == size - 1) {
      std::vector<int64_t> a(3), b(2);
      context.recv(0, a.data(), 24, "recv at smoke:5");
      context.recv(0, b.data(), 16, "recv at smoke:6");
      expect(a == std::vector<int64_t>({1, 2, 3}), rank, "first message");
      expect(b == std::vector<int64_t>({4, 5}), rank, "second message");
    }
  }
}

/// Timeouts, on a context of their own, since a timed-out context is left
/// with operations in flight.
void timeouts() {
  std::unique_ptr<RankContext> context = createMpiRankContext(300ms);
  int32_t rank = context->rank(), size = context->worldSize();
  if (size < 2)
    return;
  // The last rank never comes to this group. First, so that the others
  // arrive together.
  if (rank != size - 1) {
    float value = 1;
    std::string error = errorOf([&] {
      context->allReduce({size, 1}, &value, 1, DType::F32, Reduction::Sum,
                         "all_reduce at smoke:8");
    });
    std::string expected =
        "rank " + std::to_string(rank) +
        ": all_reduce at smoke:8 timed out after 0.3 s waiting for rank " +
        std::to_string(size - 1);
    expect(error == expected, rank, "all_reduce timeout, got '" + error + "'");
  }
  if (rank == 0) {
    char byte;
    std::string error =
        errorOf([&] { context->recv(1, &byte, 1, "recv at smoke:7"); });
    expect(error == "rank 0: recv at smoke:7 timed out after 0.3 s "
                    "waiting for rank 1",
           rank, "recv timeout, got '" + error + "'");
  }
}

} // namespace

int main(int argc, char **argv) {
  MPI_Init(&argc, &argv);
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  if (!haveMpi()) {
    std::fprintf(stderr, "built without MPI\n");
    MPI_Finalize();
    return 1;
  }
  try {
    std::unique_ptr<RankContext> context = createMpiRankContext(10000ms);
    collectives(*context);
    context.reset();
    timeouts();
  } catch (const std::exception &error) {
    expect(false, rank, error.what());
  }
  int total = 0;
  MPI_Allreduce(&failures, &total, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
  if (rank == 0 && total)
    std::printf("mpi smoke FAILED (%d failures)\n", total);
  else if (rank == 0)
    std::printf("mpi smoke ok\n");
  MPI_Finalize();
  return total ? 1 : 0;
}
