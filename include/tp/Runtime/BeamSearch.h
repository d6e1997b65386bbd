//===- BeamSearch.h - beam search over the logits blocks --------*- C++ -*-===//
//
// Beam search as transformers' BeamSearchScorer (length_penalty 1,
// early_stopping False): each step's beams from the candidates of the
// logits blocks, the rows whose KV caches the kept beams continue, and the
// finished hypotheses.
//
//===----------------------------------------------------------------------===//

#ifndef TP_RUNTIME_BEAMSEARCH_H
#define TP_RUNTIME_BEAMSEARCH_H

#include <cstdint>
#include <vector>

namespace tp::rt {

class Candidates;

/// Beam search over `batch` prompts of `beams` beams each, row b * beams +
/// k holding beam k of prompt b (rows past them are ignored). Each step
/// takes, per prompt, the 2K best (beam score + log-softmax) continuations
/// of its K beams, keeps the first K that do not end in eos (those that
/// do, among the first K, become finished hypotheses), and moves each
/// beam's row along. The candidates must hold each block's 2K best and its
/// (max, sum of exp) pair.
class BeamSearch {
public:
  /// Sequences of prompts `promptLength` long over a vocabulary of `vocab`;
  /// `eosTokenId` -1 for none.
  BeamSearch(int64_t batch, int64_t beams, int64_t rows, int64_t vocab,
             int64_t promptLength, int64_t eosTokenId);

  /// Picks the token after position `t` of each beam from `logits`: moves
  /// the rows of `sequence` ([rows, length], row-major) to the beams they
  /// continue and writes their tokens at t + 1. Returns the source rows:
  /// row i now continues what row source[i] held, as its cache must.
  std::vector<int64_t> step(const Candidates &logits,
                            std::vector<int64_t> &sequence, int64_t length,
                            int64_t t);

  /// Whether every prompt is done: K hypotheses finished, and none of its
  /// beams can still beat the worst of them.
  bool isDone() const;

  /// The best finished hypothesis of each prompt (transformers' finalize),
  /// the beams still running counted, padded with eos after its end, into
  /// rows 0 .. batch - 1 of `sequence`; `lastWritten` is the last position
  /// a token was written at.
  void finish(std::vector<int64_t> &sequence, int64_t length,
              int64_t lastWritten);

  /// Each row's sum of log-probabilities over its generated tokens.
  const std::vector<double> &getBeamScores() const { return beamScores; }

private:
  struct Hypothesis {
    double score;
    std::vector<int64_t> tokens;
  };
  /// What a step decides for each row.
  struct Choice {
    std::vector<int64_t> source, next;
    std::vector<double> scores;
  };

  /// Prompt `b`'s beams after position `t`, into `choice`.
  void choose(const Candidates &logits, int64_t b,
              const std::vector<int64_t> &sequence, int64_t length, int64_t t,
              Choice &choice);
  void addHypothesis(int64_t b, std::vector<int64_t> tokens, double sumLogprobs,
                     int64_t generated);

  int64_t batch, beams, vocab, promptLength, eosTokenId;
  std::vector<std::vector<Hypothesis>> hypotheses;
  std::vector<bool> batchDone;
  std::vector<double> beamScores;
};

} // namespace tp::rt

#endif // TP_RUNTIME_BEAMSEARCH_H
