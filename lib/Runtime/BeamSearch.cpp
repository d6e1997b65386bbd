//===- BeamSearch.cpp - beam search over the logits blocks ----------------===//
//
// A beam-search step over the merged candidates of the logits blocks, the
// finished hypotheses, and their finalization.
//
//===----------------------------------------------------------------------===//

#include "tp/Runtime/BeamSearch.h"

#include "tp/Runtime/Candidates.h"

#include <algorithm>
#include <cmath>
#include <cstring>

using namespace tp::rt;

BeamSearch::BeamSearch(int64_t batch, int64_t beams, int64_t rows,
                       int64_t vocab, int64_t promptLength, int64_t eosTokenId)
    : batch(batch), beams(beams), vocab(vocab), promptLength(promptLength),
      eosTokenId(eosTokenId), hypotheses(batch), batchDone(batch, false),
      beamScores(rows, 0) {
  // All beams of a prompt start alike: only the first may extend it.
  for (int64_t b = 0; b < batch; ++b)
    for (int64_t k = 1; k < beams; ++k)
      beamScores[b * beams + k] = -1e9;
}

namespace {

template <typename Hypothesis>
double worst(const std::vector<Hypothesis> &list) {
  double low = INFINITY;
  for (const Hypothesis &h : list)
    low = std::min(low, h.score);
  return low;
}

} // namespace

void BeamSearch::addHypothesis(int64_t b, std::vector<int64_t> tokens,
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
}

void BeamSearch::choose(const Candidates &logits, int64_t b,
                        const std::vector<int64_t> &sequence, int64_t length,
                        int64_t t, Choice &choice) {
  int64_t generated = t + 2 - promptLength;
  // The 2K best of all beams are among the 2K best of each beam, which are
  // among the 2K best of each block.
  std::vector<std::pair<double, int64_t>> candidates;
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
    if (eosTokenId >= 0 && token == eosTokenId) {
      if (rank < beams)
        addHypothesis(
            b,
            std::vector<int64_t>(sequence.begin() + from * length,
                                 sequence.begin() + from * length + t + 1),
            score, generated);
      continue;
    }
    int64_t row = b * beams + filled++;
    choice.source[row] = from;
    choice.next[row] = token;
    choice.scores[row] = score;
  }
  double best = candidates.front().first;
  batchDone[b] = static_cast<int64_t>(hypotheses[b].size()) >= beams &&
                 worst(hypotheses[b]) >= best / generated;
}

std::vector<int64_t> BeamSearch::step(const Candidates &logits,
                                      std::vector<int64_t> &sequence,
                                      int64_t length, int64_t t) {
  int64_t rows = static_cast<int64_t>(beamScores.size());
  Choice choice{std::vector<int64_t>(rows), std::vector<int64_t>(rows),
                beamScores};
  for (int64_t r = 0; r < rows; ++r) {
    choice.source[r] = r;
    choice.next[r] = r < batch * beams ? eosTokenId : 0;
  }
  for (int64_t b = 0; b < batch; ++b)
    if (!batchDone[b])
      choose(logits, b, sequence, length, t, choice);
  // The beams kept: their tokens so far, then the new token.
  std::vector<int64_t> moved(sequence);
  for (int64_t r = 0; r < rows; ++r)
    if (choice.source[r] != r)
      std::memcpy(&sequence[r * length], &moved[choice.source[r] * length],
                  length * sizeof(int64_t));
  for (int64_t r = 0; r < batch * beams; ++r)
    sequence[r * length + t + 1] = choice.next[r];
  beamScores = choice.scores;
  return choice.source;
}

bool BeamSearch::isDone() const {
  return std::all_of(batchDone.begin(), batchDone.end(),
                     [](bool d) { return d; });
}

void BeamSearch::finish(std::vector<int64_t> &sequence, int64_t length,
                        int64_t lastWritten) {
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
    std::vector<int64_t> row(length, eosTokenId);
    std::copy(best->tokens.begin(), best->tokens.end(), row.begin());
    std::copy(row.begin(), row.end(), sequence.begin() + b * length);
  }
}
