//===- packed_gemm.cpp - the packed-weight GEMM kernel against sgemm ------===//
//
// Built and run by bench/packed_gemm.py, once against this checkout's
// tp_packed_gemm.h and once against a baseline's (--baseline REV). One
// process times one round: every product of a model's forward pass, in
// order, each weight its own matrix (as a forward pass streams its
// weights), by tp::rt::packed::gemm on the packed weights and by
// cblas_sgemm on the same weights as stored, alternately, then a loop of
// nothing but FMAs on 16 independent accumulators (this core's peak).
// It prints one line of GFLOP/s: "packed SGEMM PEAK". With a fourth
// argument "bf16" the packed weights are stored in bf16 (--dtype bf16's
// products; sgemm still multiplies f32 ones).
//
//===----------------------------------------------------------------------===//

#include "tp_packed_gemm.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

namespace {

using Shape = std::pair<int64_t, int64_t>; // (n, k) of one weight

/// The weights of one forward pass, in order.
std::vector<Shape> forwardShapes(const std::string &set) {
  std::vector<Shape> layer;
  int layers = 6;
  if (set == "minilm") // q, k, v, output, MLP up and down
    layer = {{384, 384}, {384, 384},  {384, 384},
             {384, 384}, {1536, 384}, {384, 1536}};
  else if (set == "gpt2") // fused QKV, output, MLP up and down
    layer = {{2304, 768}, {768, 768}, {3072, 768}, {768, 3072}};
  else if (set == "llama") // TinyLlama-1.1B: q, k, v, o, gate, up, down
    layer = {{2048, 2048}, {256, 2048},  {256, 2048}, {2048, 2048},
             {5632, 2048}, {5632, 2048}, {2048, 5632}};
  else if (set == "head") // GPT-2's LM head alone
    layer = {{50304, 768}}, layers = 1;
  else
    return {};
  std::vector<Shape> all;
  for (int l = 0; l < layers; ++l)
    all.insert(all.end(), layer.begin(), layer.end());
  return all;
}

template <typename F> double seconds(F &&f) {
  auto start = std::chrono::steady_clock::now();
  f();
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start)
      .count();
}

double fmaPeak() {
#if defined(__AVX512F__)
  using V = __m512;
  auto fma = [](V a, V b, V c) { return _mm512_fmadd_ps(a, b, c); };
  auto set = [](float x) { return _mm512_set1_ps(x); };
  constexpr int kWidth = 16;
#elif defined(__AVX2__) && defined(__FMA__)
  using V = __m256;
  auto fma = [](V a, V b, V c) { return _mm256_fmadd_ps(a, b, c); };
  auto set = [](float x) { return _mm256_set1_ps(x); };
  constexpr int kWidth = 8;
#else
  return 0.0;
#endif
#if defined(__AVX512F__) || (defined(__AVX2__) && defined(__FMA__))
  V acc[16];
  for (int i = 0; i < 16; ++i)
    acc[i] = set(0.001f * i);
  V b = set(0.999f), c = set(1e-4f);
  const int64_t iterations = 20000000;
  double time = seconds([&] {
    for (int64_t i = 0; i < iterations; ++i) {
#pragma GCC unroll 16
      for (int j = 0; j < 16; ++j)
        acc[j] = fma(acc[j], b, c);
    }
  });
  for (int j = 1; j < 16; ++j)
    acc[0] = fma(acc[0], b, acc[j]);
  float sink[kWidth];
  std::memcpy(sink, &acc[0], sizeof(sink));
  if (sink[0] == 12345.0f) // keeps the loop; never true
    std::puts("");
  return 2.0 * kWidth * 16 * iterations / time / 1e9;
#endif
}

/// f32 to bf16, rounding to nearest even (the weights are finite).
tp::rt::BF16Bits toBF16(float x) {
  std::uint32_t word;
  std::memcpy(&word, &x, sizeof(word));
  return {
      static_cast<std::uint16_t>((word + 0x7FFF + ((word >> 16) & 1)) >> 16)};
}

/// Runs the products of one round with weights packed as W.
template <typename W> struct Packed {
  std::vector<std::vector<W>> panels;
  void add(const std::vector<float> &b, int64_t n, int64_t k) {
    std::vector<W> stored(b.size());
    for (size_t i = 0; i < b.size(); ++i) {
      if constexpr (std::is_same_v<W, float>)
        stored[i] = b[i];
      else
        stored[i] = toBF16(b[i]);
    }
    std::vector<W> p(tp::rt::packed::packedElements(k, n));
    tp::rt::packed::pack(stored.data(), n, false, k, n, p.data());
    panels.push_back(std::move(p));
  }
  void run(size_t i, int64_t m, int64_t n, int64_t k, const float *a,
           float *c) const {
    tp::rt::packed::gemm(m, n, k, a, k, panels[i].data(), c, n, false, {});
  }
};

} // namespace

template <typename W> int bench(int argc, char **argv);

int main(int argc, char **argv) {
  if (argc != 4 && argc != 5) {
    std::fprintf(stderr, "usage: %s minilm|gpt2|head ROWS PASSES [bf16]\n",
                 argv[0]);
    return 2;
  }
  if (argc == 5 && std::string(argv[4]) == "bf16")
    return bench<tp::rt::BF16Bits>(argc, argv);
  return bench<float>(argc, argv);
}

template <typename W> int bench(int argc, char **argv) {
  std::vector<Shape> shapes = forwardShapes(argv[1]);
  int64_t m = std::atoll(argv[2]);
  int passes = std::atoi(argv[3]);
  if (shapes.empty() || m <= 0 || passes <= 0) {
    std::fprintf(stderr, "packed_gemm: bad arguments\n");
    return 2;
  }
  std::mt19937 generator(1);
  std::uniform_real_distribution<float> uniform(-1.0f, 1.0f);
  std::vector<std::vector<float>> stored;
  Packed<W> packedWeights;
  int64_t maxK = 0, maxN = 0;
  double flops = 0.0;
  for (auto [n, k] : shapes) {
    std::vector<float> b(k * n);
    for (float &x : b)
      x = uniform(generator);
    packedWeights.add(b, n, k);
    stored.push_back(std::move(b));
    maxK = std::max(maxK, k), maxN = std::max(maxN, n);
    flops += 2.0 * m * n * k;
  }
  std::vector<float> a(m * maxK), c(m * maxN);
  for (float &x : a)
    x = uniform(generator);

  std::vector<double> packedTimes, sgemmTimes;
  for (int pass = 0; pass < passes + 1; ++pass) {
    double tPacked = seconds([&] {
      for (size_t i = 0; i < shapes.size(); ++i) {
        auto [n, k] = shapes[i];
        packedWeights.run(i, m, n, k, a.data(), c.data());
      }
    });
    double tSgemm = seconds([&] {
      for (size_t i = 0; i < shapes.size(); ++i) {
        auto [n, k] = shapes[i];
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, m, n, k, 1.0f,
                    a.data(), k, stored[i].data(), n, 0.0f, c.data(), n);
      }
    });
    if (pass == 0) // warm-up
      continue;
    packedTimes.push_back(tPacked);
    sgemmTimes.push_back(tSgemm);
  }
  auto median = [](std::vector<double> v) {
    std::sort(v.begin(), v.end());
    return v[v.size() / 2];
  };
  std::printf("%.2f %.2f %.2f\n", flops / median(packedTimes) / 1e9,
              flops / median(sgemmTimes) / 1e9, fmaPeak());
  return 0;
}
