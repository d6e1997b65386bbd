//===- Candidates.cpp - the next token's candidates per block -------------===//
//
// Each block of the logits reduced in place to what a decoding rule needs,
// the blocks merged, and their bytes for MPI.
//
//===----------------------------------------------------------------------===//

#include "tp/Runtime/Candidates.h"

#include "tp/Runtime/Session.h"

#include <algorithm>
#include <cstring>
#if defined(__SSE2__)
#include <emmintrin.h>
#endif

using namespace tp::rt;

/// Two passes with SSE2, the largest value, then where it first is: a
/// block of 25k logits takes ~4 us where the compare-and-branch loop took
/// ~30 us, which at batch 8 on 2 ranks was ~0.4 ms of a 47 ms decode step.
int64_t tp::rt::firstMaximum(const float *x, int64_t n) {
  float top = -INFINITY;
  int64_t i = 0;
#if defined(__SSE2__)
  // max(x, acc) keeps acc where x is NaN.
  __m128 a0 = _mm_set1_ps(-INFINITY), a1 = a0, a2 = a0, a3 = a0;
  for (; i + 16 <= n; i += 16) {
    a0 = _mm_max_ps(_mm_loadu_ps(x + i), a0);
    a1 = _mm_max_ps(_mm_loadu_ps(x + i + 4), a1);
    a2 = _mm_max_ps(_mm_loadu_ps(x + i + 8), a2);
    a3 = _mm_max_ps(_mm_loadu_ps(x + i + 12), a3);
  }
  float lanes[4];
  _mm_storeu_ps(lanes, _mm_max_ps(_mm_max_ps(a0, a1), _mm_max_ps(a2, a3)));
  for (float lane : lanes)
    top = lane > top ? lane : top;
#endif
  for (; i < n; ++i)
    top = x[i] > top ? x[i] : top;
  int64_t j = 0;
#if defined(__SSE2__)
  __m128 wanted = _mm_set1_ps(top);
  for (; j + 4 <= n; j += 4)
    if (int hits = _mm_movemask_ps(_mm_cmpeq_ps(_mm_loadu_ps(x + j), wanted)))
      return j + __builtin_ctz(hits);
#endif
  for (; j < n; ++j)
    if (x[j] == top)
      return j;
  return 0;
}

namespace {

/// Larger first, ties by index.
bool better(const Logit &a, const Logit &b) {
  return a.first > b.first || (a.first == b.first && a.second < b.second);
}

} // namespace

Candidates::Candidates(const OutputBlocks &blocks, int64_t vocab, int64_t rows,
                       int64_t t, int64_t k, bool withLogSumExp) {
  int64_t dim = static_cast<int64_t>(blocks.blockShape.size()) - 1;
  int64_t width = blocks.blockShape[dim];
  int64_t positions = blocks.blockShape[1];
  for (size_t b = 0; b < blocks.blocks.size(); ++b) {
    int64_t begin = (blocks.firstBlock + static_cast<int64_t>(b)) * width;
    int64_t count = std::max<int64_t>(0, std::min(width, vocab - begin));
    const float *base =
        reinterpret_cast<const float *>(blocks.blocks[b]) + t * width;
    std::vector<RowCandidates> part(rows);
    std::vector<Logit> all;
    for (int64_t r = 0; r < rows; ++r) {
      const float *x = base + r * positions * width;
      RowCandidates &row = part[r];
      if (count == 0)
        continue;
      if (k == 1) {
        // Greedy: the first maximum.
        int64_t best = firstMaximum(x, count);
        row.top.push_back({x[best], begin + best});
      } else {
        all.clear();
        for (int64_t i = 0; i < count; ++i)
          all.push_back({x[i], begin + i});
        int64_t keep = k > 0 ? std::min<int64_t>(k, count) : count;
        std::partial_sort(all.begin(), all.begin() + keep, all.end(), better);
        row.top.assign(all.begin(), all.begin() + keep);
      }
      if (withLogSumExp) {
        row.max = *std::max_element(x, x + count);
        for (int64_t i = 0; i < count; ++i)
          row.sumExp += std::exp(static_cast<double>(x[i]) - row.max);
      }
    }
    parts.push_back(std::move(part));
  }
}

int64_t Candidates::argmax(int64_t r) const {
  float best = -INFINITY;
  int64_t index = -1;
  for (const std::vector<RowCandidates> &part : parts)
    for (const auto &[x, i] : part[r].top)
      if (index < 0 || x > best || (x == best && i < index))
        best = x, index = i;
  return index;
}

double Candidates::logSumExp(int64_t r) const {
  double top = -INFINITY;
  for (const std::vector<RowCandidates> &part : parts)
    top = std::max(top, part[r].max);
  double sum = 0;
  for (const std::vector<RowCandidates> &part : parts)
    if (part[r].sumExp > 0)
      sum += part[r].sumExp * std::exp(part[r].max - top);
  return top + std::log(sum);
}

std::vector<Logit> Candidates::top(int64_t r, int64_t k) const {
  std::vector<Logit> all;
  for (const std::vector<RowCandidates> &part : parts) {
    const auto &mine = part[r].top;
    int64_t keep = k > 0 ? std::min<int64_t>(k, mine.size()) : mine.size();
    all.insert(all.end(), mine.begin(), mine.begin() + keep);
  }
  int64_t keep = k > 0 ? std::min<int64_t>(k, all.size()) : all.size();
  std::partial_sort(all.begin(), all.begin() + keep, all.end(), better);
  all.resize(keep);
  return all;
}

std::vector<char> Candidates::serialize() const {
  std::vector<char> out;
  auto put = [&](const void *p, size_t n) {
    out.insert(out.end(), static_cast<const char *>(p),
               static_cast<const char *>(p) + n);
  };
  int64_t count = static_cast<int64_t>(parts.size());
  put(&count, sizeof(count));
  for (const std::vector<RowCandidates> &part : parts) {
    int64_t rows = static_cast<int64_t>(part.size());
    put(&rows, sizeof(rows));
    for (const RowCandidates &row : part) {
      int64_t n = static_cast<int64_t>(row.top.size());
      put(&n, sizeof(n));
      for (const auto &[x, i] : row.top) {
        put(&x, sizeof(x));
        put(&i, sizeof(i));
      }
      put(&row.max, sizeof(row.max));
      put(&row.sumExp, sizeof(row.sumExp));
    }
  }
  return out;
}

void Candidates::deserialize(const std::vector<char> &bytes,
                             const std::string &from) {
  size_t at = 0;
  auto get = [&](void *p, size_t n) {
    if (bytes.size() - at < n)
      throw Error("generation: the candidates from " + from + " are truncated");
    std::memcpy(p, bytes.data() + at, n);
    at += n;
  };
  int64_t count = 0;
  get(&count, sizeof(count));
  for (int64_t p = 0; p < count; ++p) {
    int64_t rows = 0;
    get(&rows, sizeof(rows));
    if (rows < 0 || rows > kMaxSequence)
      throw Error("generation: bad candidates from " + from);
    std::vector<RowCandidates> part(rows);
    for (RowCandidates &row : part) {
      int64_t n = 0;
      get(&n, sizeof(n));
      if (n < 0 || static_cast<uint64_t>(n) > bytes.size())
        throw Error("generation: bad candidates from " + from);
      row.top.resize(n);
      for (auto &[x, i] : row.top) {
        get(&x, sizeof(x));
        get(&i, sizeof(i));
      }
      get(&row.max, sizeof(row.max));
      get(&row.sumExp, sizeof(row.sumExp));
    }
    parts.push_back(std::move(part));
  }
}
