//===- Generate.cpp - generation over a decode step -----------------------===//
//
// Session::generate: runs the decode program of an artifact compiled with
// --max-seq once per position, feeding each sequence's next token, its
// attention mask over the cache and its position, while the ranks keep
// their KV caches between steps. Greedy, sampling or beam search, on thread
// ranks or one MPI process per rank.
//
//===----------------------------------------------------------------------===//

#include "tp/Runtime/Session.h"

#include "tp/Runtime/PrefillPlan.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#if defined(__SSE2__)
#include <emmintrin.h>
#endif

using namespace tp::rt;

namespace {

/// The program's input `name` (of `inputs`), which must be I64 of
/// `shape`.
const TensorSpec *findInput(const std::vector<TensorSpec> &inputs,
                            const std::string &dir, const std::string &name,
                            const std::vector<int64_t> &shape, bool required) {
  for (const TensorSpec &input : inputs) {
    if (input.name != name)
      continue;
    if (input.dtype != "I64" || input.shape != shape)
      throw Error(dir + ": the decode step's input '" + name + "' is " +
                  input.dtype + " " + formatShape(input.shape) +
                  "; generation feeds I64 " + formatShape(shape));
    return &input;
  }
  if (required)
    throw Error(dir + ": the decode step has no input '" + name + "'");
  return nullptr;
}

/// The index of the first largest of `x[0, n)` (n > 0), NaNs skipped (0
/// when all are NaN): greedy's choice within a block. Two passes with SSE2,
/// the largest value, then where it first is: a block of 25k logits takes
/// ~4 us where the compare-and-branch loop took ~30 us, which at batch 8 on
/// 2 ranks was ~0.4 ms of a 47 ms decode step.
int64_t firstMaximum(const float *x, int64_t n) {
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

/// What one block of the vocabulary says about one row's next token: its
/// best (logit, index) pairs, largest first, ties by index, and, where the
/// rule needs the log-softmax, the block's (max, sum of exp) pair.
struct RowCandidates {
  std::vector<std::pair<float, int64_t>> top;
  double max = -INFINITY, sumExp = 0;
};

bool better(const std::pair<float, int64_t> &a,
            const std::pair<float, int64_t> &b) {
  return a.first > b.first || (a.first == b.first && a.second < b.second);
}

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
  /// each block's `k` best per row (all for k = 0), with (max, sum of exp)
  /// when `withLogSumExp`.
  Candidates(const OutputBlocks &blocks, int64_t vocab, int64_t rows,
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
      std::vector<std::pair<float, int64_t>> all;
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

  /// The index of the largest logit of row `r`; the first on ties, as
  /// torch.argmax: each block's first maximum, then the largest of those
  /// (blocks in vocabulary order, so a later one wins only when larger).
  int64_t argmax(int64_t r) const {
    float best = -INFINITY;
    int64_t index = -1;
    for (const std::vector<RowCandidates> &part : parts)
      for (const auto &[x, i] : part[r].top)
        if (index < 0 || x > best || (x == best && i < index))
          best = x, index = i;
    return index;
  }

  /// log(sum(exp(logits))) of row `r`, from each block's (max, sum of exp)
  /// pair.
  double logSumExp(int64_t r) const {
    double top = -INFINITY;
    for (const std::vector<RowCandidates> &part : parts)
      top = std::max(top, part[r].max);
    double sum = 0;
    for (const std::vector<RowCandidates> &part : parts)
      if (part[r].sumExp > 0)
        sum += part[r].sumExp * std::exp(part[r].max - top);
    return top + std::log(sum);
  }

  /// The `k` largest logits of row `r` (all for k = 0), largest first,
  /// ties by index: each block's `k` largest, merged.
  std::vector<std::pair<float, int64_t>> top(int64_t r, int64_t k) const {
    std::vector<std::pair<float, int64_t>> all;
    for (const std::vector<RowCandidates> &part : parts) {
      const auto &mine = part[r].top;
      int64_t keep =
          k > 0 ? std::min<int64_t>(k, mine.size()) : mine.size();
      all.insert(all.end(), mine.begin(), mine.begin() + keep);
    }
    int64_t keep = k > 0 ? std::min<int64_t>(k, all.size()) : all.size();
    std::partial_sort(all.begin(), all.begin() + keep, all.end(), better);
    all.resize(keep);
    return all;
  }

  /// The blocks' candidates as bytes, for another process.
  std::vector<char> serialize() const {
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

  /// Adds the blocks `bytes` (serialize()) holds; `from` names the sender
  /// in errors.
  void deserialize(const std::vector<char> &bytes, const std::string &from) {
    size_t at = 0;
    auto get = [&](void *p, size_t n) {
      if (bytes.size() - at < n)
        throw Error("generation: the candidates from " + from +
                    " are truncated");
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

private:
  /// One entry per block, in vocabulary order; one per row within it.
  std::vector<std::vector<RowCandidates>> parts;
};

/// splitmix64: the same stream on every platform and rank count.
class Draws {
public:
  explicit Draws(uint64_t seed) : state(seed) {}
  /// Uniform in [0, 1).
  double next() {
    uint64_t z = (state += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    z ^= z >> 31;
    return static_cast<double>(z >> 11) * 0x1.0p-53;
  }

private:
  uint64_t state;
};

/// One token of row `r` drawn from the softmax of the logits / temperature,
/// restricted to the top-k and then the top-p tokens (transformers' order
/// of its TemperatureLogitsWarper, TopKLogitsWarper and TopPLogitsWarper):
/// only the top-k of each rank's block are read.
int64_t sampleToken(const Candidates &logits, int64_t r,
                    const GenerateOptions &options, double draw) {
  std::vector<std::pair<float, int64_t>> order = logits.top(r, options.topK);
  int64_t keep = static_cast<int64_t>(order.size());
  std::vector<double> weights(keep);
  double top = order[0].first / options.temperature, total = 0;
  for (int64_t i = 0; i < keep; ++i)
    total += weights[i] = std::exp(order[i].first / options.temperature - top);
  if (options.topP < 1.0) {
    double sum = 0;
    int64_t nucleus = 0;
    while (nucleus < keep && sum < options.topP * total)
      sum += weights[nucleus++];
    keep = std::max<int64_t>(1, nucleus);
    total = sum > 0 ? sum : weights[0];
  }
  double target = draw * total, sum = 0;
  for (int64_t i = 0; i < keep; ++i) {
    sum += weights[i];
    if (target < sum)
      return order[i].second;
  }
  return order[keep - 1].second;
}

} // namespace

Generation Session::generate(const std::vector<int64_t> &promptIds,
                             int64_t batch,
                             const std::vector<int64_t> &attentionMask,
                             const GenerateOptions &options) {
  const Manifest &manifest = getManifest();
  if (manifest.maxSeq == 0)
    throw Error(manifest.dir + " has no decode step: compile the model, "
                               "exported with its KV cache, with tp-compile "
                               "--max-seq S");
  int64_t slots = manifest.maxSeq, rows = manifest.maxBatch;
  int64_t beams = options.numBeams;
  if (beams < 1)
    throw Error("--num-beams must be at least 1");
  if (beams > 1 && options.sample)
    throw Error("beam search is greedy: --num-beams with --sample is not "
                "supported");
  if (batch < 1 || batch * beams > rows)
    throw Error("a batch of " + std::to_string(batch) + " prompts" +
                (beams > 1 ? " x " + std::to_string(beams) + " beams" : "") +
                ", but " + manifest.dir + " decodes up to " +
                std::to_string(rows) + " at once (tp-compile --max-batch)");
  if (promptIds.empty() || promptIds.size() % batch != 0)
    throw Error("the prompt ids do not form " + std::to_string(batch) +
                " rows");
  int64_t promptLength = static_cast<int64_t>(promptIds.size()) / batch;
  if (!attentionMask.empty() && attentionMask.size() != promptIds.size())
    throw Error("attention_mask has " + std::to_string(attentionMask.size()) +
                " values for " + std::to_string(promptIds.size()) +
                " prompt ids");
  if (options.maxNewTokens < 0)
    throw Error("a negative number of new tokens");
  if (options.sample &&
      (!(options.temperature > 0) || !std::isfinite(options.temperature) ||
       !(options.topP > 0 && options.topP <= 1) || options.topK < 0))
    throw Error("sampling needs a temperature above 0, a top-p in (0, 1] "
                "and a top-k of 0 or more");
  if (promptLength + options.maxNewTokens > slots)
    throw Error("a prompt of " + std::to_string(promptLength) + " tokens and " +
                std::to_string(options.maxNewTokens) +
                " new ones need a context of " +
                std::to_string(promptLength + options.maxNewTokens) + ", but " +
                manifest.dir + " was compiled for " + std::to_string(slots) +
                " (tp-compile --max-seq)");

  findInput(manifest.inputs, manifest.dir, "input_ids", {rows, 1}, true);
  findInput(manifest.inputs, manifest.dir, "attention_mask", {rows, slots},
            true);
  bool hasPositions = findInput(manifest.inputs, manifest.dir, "position_ids",
                                {rows, 1}, false);
  findInput(manifest.inputs, manifest.dir, "cache_position", {}, true);
  const TensorSpec *logits = nullptr;
  for (const TensorSpec &output : manifest.outputs)
    if (output.name == "logits")
      logits = &output;
  // Split, if at all, by vocabulary (tp-split-outputs).
  if (!logits || logits->dtype != "F32" || logits->shape.size() != 3 ||
      logits->shape[0] != rows || logits->shape[1] != 1 ||
      (logits->splitDim >= 0 && logits->splitDim != 2))
    throw Error(manifest.dir + ": the decode step has no F32 [" +
                std::to_string(rows) + ", 1, vocabulary] output 'logits'");
  int64_t vocab = logits->shape[2];

  int64_t length = promptLength + options.maxNewTokens;
  // Row b * beams + k holds beam k of prompt b. Rows past them repeat the
  // first prompt; their tokens are dropped.
  std::vector<int64_t> sequence(rows * length, 0), mask(rows * slots, 0),
      promptMask(rows * promptLength, 1);
  for (int64_t r = 0; r < rows; ++r) {
    int64_t from = r < batch * beams ? r / beams : 0;
    std::memcpy(&sequence[r * length], &promptIds[from * promptLength],
                promptLength * sizeof(int64_t));
    if (!attentionMask.empty())
      std::memcpy(&promptMask[r * promptLength],
                  &attentionMask[from * promptLength],
                  promptLength * sizeof(int64_t));
  }
  std::vector<int64_t> ids(rows), positions(rows), seen(rows, 0);
  std::vector<bool> done(rows, false);
  int64_t position = 0;
  auto view = [](const std::vector<int64_t> &data, std::vector<int64_t> shape,
                 const char *name) {
    return InputView{"I64", std::move(shape), data.data(),
                     std::string("generation's ") + name};
  };

  Generation result;
  result.batch = batch;
  result.length = length;
  using Clock = std::chrono::steady_clock;
  Clock::time_point start = Clock::now();
  // Picks the token after position t of each sequence from `logits`; true
  // once every sequence is done.
  Draws draws(options.seed);
  auto choose = [&](const Candidates &logits, int64_t t) {
    bool allDone = true;
    for (int64_t r = 0; r < rows; ++r) {
      // Every row takes its draw, done or not: the stream of row r at step
      // t does not depend on when the others stop.
      double draw = options.sample ? draws.next() : 0;
      int64_t next = done[r]          ? options.eosTokenId
                     : options.sample ? sampleToken(logits, r, options, draw)
                                      : logits.argmax(r);
      sequence[r * length + t + 1] = next;
      done[r] =
          done[r] || (options.eosTokenId >= 0 && next == options.eosTokenId);
      allDone &= r >= batch || done[r];
    }
    if (allDone)
      for (int64_t r = 0; r < rows; ++r)
        for (int64_t u = t + 2; u < length; ++u)
          sequence[r * length + u] = options.eosTokenId;
    return allDone;
  };
  // The prompt's position t: its mask, and transformers' position under
  // left padding (the count of real tokens so far, minus one; 1 on
  // padding).
  auto advance = [&](int64_t r, int64_t t) {
    int64_t m = t < promptLength ? promptMask[r * promptLength + t] : 1;
    mask[r * slots + t] = m;
    seen[r] += m != 0;
    return std::pair(m, m != 0 ? seen[r] - 1 : int64_t(1));
  };
  // Beam search, as transformers' BeamSearchScorer with length_penalty 1
  // and early_stopping False: each step takes, per prompt, the 2K best
  // (beam score + log-softmax) continuations of its K beams, keeps the
  // first K that do not end in eos (those that do, among the first K,
  // become finished hypotheses), and moves each beam's cache rows along.
  struct Hypothesis {
    double score;
    std::vector<int64_t> tokens;
  };
  std::vector<std::vector<Hypothesis>> hypotheses(batch);
  std::vector<bool> batchDone(batch, false);
  std::vector<double> beamScores(rows, 0);
  for (int64_t b = 0; b < batch; ++b)
    for (int64_t k = 1; k < beams; ++k)
      beamScores[b * beams + k] = -1e9;
  auto worst = [](const std::vector<Hypothesis> &list) {
    double low = INFINITY;
    for (const Hypothesis &h : list)
      low = std::min(low, h.score);
    return low;
  };
  auto addHypothesis = [&](int64_t b, std::vector<int64_t> tokens,
                           double sumLogprobs, int64_t generated) {
    double score =
        sumLogprobs / static_cast<double>(std::max<int64_t>(1, generated));
    std::vector<Hypothesis> &list = hypotheses[b];
    if (static_cast<int64_t>(list.size()) >= beams && score <= worst(list))
      return;
    list.push_back({score, std::move(tokens)});
    if (static_cast<int64_t>(list.size()) > beams)
      list.erase(std::min_element(list.begin(), list.end(),
                                  [](const Hypothesis &a, const Hypothesis &c) {
                                    return a.score < c.score;
                                  }));
  };
  // The rows each beam-search step moved the caches from (MPI ranks other
  // than 0 move theirs as rank 0 says).
  std::vector<int64_t> lastSource;
  auto beamStep = [&](const Candidates &logits, int64_t t) {
    std::vector<int64_t> source(rows), next(rows);
    for (int64_t r = 0; r < rows; ++r)
      source[r] = r, next[r] = r < batch * beams ? options.eosTokenId : 0;
    std::vector<double> scores(beamScores);
    std::vector<std::pair<double, int64_t>> candidates;
    int64_t curLen = t + 2, generated = curLen - promptLength;
    for (int64_t b = 0; b < batch; ++b) {
      if (batchDone[b])
        continue;
      candidates.clear();
      // The 2K best of all beams are among the 2K best of each beam, which
      // are among the 2K best of each rank's block.
      for (int64_t k = 0; k < beams; ++k) {
        int64_t row = b * beams + k;
        double lse = logits.logSumExp(row);
        for (auto [x, v] : logits.top(row, 2 * beams))
          candidates.push_back({beamScores[row] + x - lse, k * vocab + v});
      }
      int64_t keep = std::min<int64_t>(2 * beams, candidates.size());
      std::partial_sort(candidates.begin(), candidates.begin() + keep,
                        candidates.end(), [](const auto &a, const auto &c) {
                          return a.first > c.first ||
                                 (a.first == c.first && a.second < c.second);
                        });
      int64_t filled = 0;
      for (int64_t rank = 0; rank < keep && filled < beams; ++rank) {
        auto [score, flat] = candidates[rank];
        int64_t from = b * beams + flat / vocab, token = flat % vocab;
        if (options.eosTokenId >= 0 && token == options.eosTokenId) {
          if (rank < beams)
            addHypothesis(
                b,
                std::vector<int64_t>(sequence.begin() + from * length,
                                     sequence.begin() + from * length + t + 1),
                score, generated);
          continue;
        }
        int64_t row = b * beams + filled++;
        source[row] = from;
        next[row] = token;
        scores[row] = score;
      }
      // Done when K hypotheses are finished and none of the beams can
      // still beat the worst of them.
      double best = candidates.front().first;
      batchDone[b] = static_cast<int64_t>(hypotheses[b].size()) >= beams &&
                     worst(hypotheses[b]) >= best / generated;
    }
    // The beams kept: their tokens so far, their caches, then the new token.
    std::vector<int64_t> moved(sequence);
    for (int64_t r = 0; r < rows; ++r)
      if (source[r] != r)
        std::memcpy(&sequence[r * length], &moved[source[r] * length],
                    length * sizeof(int64_t));
    reorderCaches(source);
    lastSource = source;
    for (int64_t r = 0; r < batch * beams; ++r)
      sequence[r * length + t + 1] = next[r];
    beamScores = scores;
    return std::all_of(batchDone.begin(), batchDone.end(),
                       [](bool d) { return d; });
  };
  // The best finished hypothesis of each prompt (beam search's finalize),
  // padded with eos after its end, into rows 0 .. batch - 1.
  auto finishBeams = [&](int64_t lastWritten) {
    for (int64_t b = 0; b < batch; ++b) {
      if (!batchDone[b])
        for (int64_t k = 0; k < beams; ++k) {
          int64_t row = b * beams + k;
          addHypothesis(b,
                        std::vector<int64_t>(sequence.begin() + row * length,
                                             sequence.begin() + row * length +
                                                 lastWritten + 1),
                        beamScores[row], lastWritten + 1 - promptLength);
        }
      const Hypothesis *best = &hypotheses[b].front();
      for (const Hypothesis &h : hypotheses[b])
        if (h.score > best->score)
          best = &h;
      std::vector<int64_t> row(length, options.eosTokenId);
      std::copy(best->tokens.begin(), best->tokens.end(), row.begin());
      std::copy(row.begin(), row.end(), sequence.begin() + b * length);
    }
  };
  auto pick = [&](const Candidates &logits, int64_t t) {
    return beams > 1 ? beamStep(logits, t) : choose(logits, t);
  };
  // What each rank's block of the logits must yield for the rule.
  int64_t candidates = beams > 1 ? 2 * beams : options.sample ? options.topK : 1;
  // Under MPI each process holds one rank: the last stage's ranks send
  // their candidates to rank 0, which picks the tokens and sends every
  // process the sequences (and the beams' cache moves).
  bool mpi = getMpiRank() >= 0, root = getMpiRank() <= 0;
  auto put = [](std::vector<char> &out, const void *p, size_t n) {
    out.insert(out.end(), static_cast<const char *>(p),
               static_cast<const char *>(p) + n);
  };
  auto shareSequences = [&](std::vector<char> &message, size_t at) {
    if (!root) {
      size_t bytes = sequence.size() * sizeof(int64_t);
      if (message.size() < at + bytes)
        throw Error("generation: rank 0 sent a truncated step");
      std::memcpy(sequence.data(), message.data() + at, bytes);
      return at + bytes;
    }
    put(message, sequence.data(), sequence.size() * sizeof(int64_t));
    return message.size();
  };
  // Position `position` of the logits of the last run of `program` (the
  // decode step, or a prefill chunk) picks the token after position t.
  auto step = [&](int program, int64_t position, int64_t t) {
    Candidates mine(getOutputBlocks("logits", program), vocab, rows, position,
                    candidates, /*withLogSumExp=*/beams > 1);
    if (!mpi)
      return pick(mine, t);
    std::vector<std::vector<char>> sent = gatherFromLastStage(mine.serialize());
    std::vector<char> message;
    int64_t finished = 0;
    if (root) {
      Candidates merged;
      for (size_t i = 0; i < sent.size(); ++i)
        merged.deserialize(sent[i], "last-stage rank " + std::to_string(i));
      finished = pick(merged, t);
      put(message, &finished, sizeof(finished));
      shareSequences(message, 0);
      if (beams > 1)
        put(message, lastSource.data(), lastSource.size() * sizeof(int64_t));
    }
    broadcastFromRoot(message);
    if (!root) {
      if (message.size() < sizeof(finished))
        throw Error("generation: rank 0 sent a truncated step");
      std::memcpy(&finished, message.data(), sizeof(finished));
      size_t at = shareSequences(message, sizeof(finished));
      if (beams > 1) {
        std::vector<int64_t> source(rows);
        if (message.size() != at + rows * sizeof(int64_t))
          throw Error("generation: rank 0 sent a truncated step");
        std::memcpy(source.data(), message.data() + at,
                    rows * sizeof(int64_t));
        reorderCaches(source);
      }
    }
    return finished != 0;
  };

  int64_t lastStep = length - 1;
  bool finished = false;
  // The last position a token was written at.
  int64_t lastWritten = promptLength - 1;

  // The prompt runs in prefill chunks, each C tokens at cache_position p
  // reading the cache written before it, chosen by planPrefillChunks (the
  // least work, so that the cost follows the prompt), the last one
  // right-padded (masked: the padded positions' cache entries are
  // overwritten by the steps after, before they are unmasked). Only what no
  // chunk fits (the last positions of a prompt that nearly fills the
  // context) goes through decode steps.
  int64_t first = 0;
  std::vector<int64_t> chunkIds, chunkPositions, chunkLengths;
  for (const PrefillSpec &prefill : manifest.prefill)
    chunkLengths.push_back(prefill.length);
  std::vector<int64_t> plan;
  if (promptLength > 1)
    plan = planPrefillChunks(chunkLengths, promptLength, slots);
  for (int64_t chosen : plan) {
    int64_t rest = promptLength - first;
    const PrefillSpec &prefill = manifest.prefill[chosen];
    int64_t chunk = prefill.length, count = std::min(rest, chunk);
    findInput(prefill.inputs, manifest.dir, "input_ids", {rows, chunk}, true);
    findInput(prefill.inputs, manifest.dir, "attention_mask", {rows, slots},
              true);
    bool chunkHasPositions = findInput(prefill.inputs, manifest.dir,
                                       "position_ids", {rows, chunk}, false);
    findInput(prefill.inputs, manifest.dir, "cache_position", {}, true);
    // A chunk compiled by tp-select-logits returns the logits at
    // logits_position only.
    bool selectsLogits = findInput(prefill.inputs, manifest.dir,
                                   "logits_position", {}, false);
    int64_t logitsRows = selectsLogits ? 1 : chunk;
    const TensorSpec *chunkLogits = nullptr;
    for (const TensorSpec &output : prefill.outputs)
      if (output.name == "logits")
        chunkLogits = &output;
    if (!chunkLogits || chunkLogits->dtype != "F32" ||
        chunkLogits->shape != std::vector<int64_t>{rows, logitsRows, vocab} ||
        (chunkLogits->splitDim >= 0 && chunkLogits->splitDim != 2))
      throw Error(manifest.dir + ": the prefill chunk of " +
                  std::to_string(chunk) + " tokens has no F32 [" +
                  std::to_string(rows) + ", " + std::to_string(logitsRows) +
                  ", " + std::to_string(vocab) + "] output 'logits'");
    chunkIds.assign(rows * chunk, 0);
    chunkPositions.assign(rows * chunk, 1);
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t t = 0; t < count; ++t) {
        chunkIds[r * chunk + t] = sequence[r * length + first + t];
        chunkPositions[r * chunk + t] = advance(r, first + t).second;
      }
    std::vector<int64_t> cachePosition{first}, logitsPosition{count - 1};
    std::map<std::string, InputView> inputs{
        {"input_ids", view(chunkIds, {rows, chunk}, "input_ids")},
        {"attention_mask", view(mask, {rows, slots}, "attention_mask")},
        {"cache_position", view(cachePosition, {}, "cache_position")}};
    if (chunkHasPositions)
      inputs["position_ids"] =
          view(chunkPositions, {rows, chunk}, "position_ids");
    if (selectsLogits)
      inputs["logits_position"] =
          view(logitsPosition, {}, "logits_position");
    runInPlace(inputs, static_cast<int>(chosen));
    ++result.prefillChunks;
    first += count;
    if (first == promptLength && lastStep >= promptLength) {
      finished = step(static_cast<int>(chosen), selectsLogits ? 0 : count - 1,
                      first - 1);
      lastWritten = first;
      result.prefillSeconds =
          std::chrono::duration<double>(Clock::now() - start).count();
      start = Clock::now();
    }
  }

  // Step t reads the token at position t and picks the one after it.
  // Decode steps' seconds in the stage function, and in communication.
  double stageSeconds = 0, communicationSeconds = 0;
  for (int64_t t = first; t < lastStep && !finished; ++t) {
    for (int64_t r = 0; r < rows; ++r) {
      ids[r] = sequence[r * length + t];
      positions[r] = advance(r, t).second;
    }
    position = t;
    std::vector<int64_t> cachePosition{position};
    std::map<std::string, InputView> inputs{
        {"input_ids", view(ids, {rows, 1}, "input_ids")},
        {"attention_mask", view(mask, {rows, slots}, "attention_mask")},
        {"cache_position", view(cachePosition, {}, "cache_position")}};
    if (hasPositions)
      inputs["position_ids"] = view(positions, {rows, 1}, "position_ids");
    runInPlace(inputs);
    if (t + 1 > promptLength) {
      RunTiming timing = getLastRunTiming();
      stageSeconds += timing.stageSeconds;
      communicationSeconds += timing.communicationSeconds;
    }
    if (t + 1 == promptLength) {
      result.prefillSeconds =
          std::chrono::duration<double>(Clock::now() - start).count();
      start = Clock::now();
    }
    if (t + 1 < promptLength)
      continue;
    finished = step(kMainProgram, 0, t);
    lastWritten = t + 1;
    if (t + 1 > promptLength)
      ++result.decodeSteps;
  }
  if (result.decodeSteps > 0) {
    double steps = static_cast<double>(result.decodeSteps);
    result.secondsPerToken =
        std::chrono::duration<double>(Clock::now() - start).count() / steps;
    result.communicationSecondsPerToken = communicationSeconds / steps;
    result.computeSecondsPerToken =
        (stageSeconds - communicationSeconds) / steps;
    result.runtimeSecondsPerToken =
        result.secondsPerToken - stageSeconds / steps;
  }
  if (beams > 1 && options.maxNewTokens > 0 && root)
    finishBeams(lastWritten);
  // Every process returns rank 0's tokens.
  if (mpi) {
    std::vector<char> message;
    if (root)
      shareSequences(message, 0);
    broadcastFromRoot(message);
    if (!root)
      shareSequences(message, 0);
  }
  result.tokens.assign(sequence.begin(), sequence.begin() + batch * length);
  return result;
}
