//===- Generate.cpp - generation over a decode step -----------------------===//
//
// Session::generate: runs the decode program of an artifact compiled with
// --max-seq once per position, feeding each sequence's next token, its
// attention mask over the cache and its position, while the ranks keep
// their KV caches between steps: the prompt in prefill chunks, then one
// decode step per token, each choosing the next tokens by the rule of
// Sampling.h or BeamSearch.h, on thread ranks or one MPI process per rank.
//
//===----------------------------------------------------------------------===//

#include "tp/Runtime/Session.h"

#include "tp/Runtime/BeamSearch.h"
#include "tp/Runtime/Candidates.h"
#include "tp/Runtime/PrefillPlan.h"
#include "tp/Runtime/Sampling.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <map>
#include <string>
#include <vector>

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

/// The program's F32 output 'logits', or null.
const TensorSpec *findLogits(const std::vector<TensorSpec> &outputs) {
  const TensorSpec *logits = nullptr;
  for (const TensorSpec &output : outputs)
    if (output.name == "logits")
      logits = &output;
  return logits;
}

/// Throws Error unless `manifest` can generate as asked.
void checkRequest(const Manifest &manifest,
                  const std::vector<int64_t> &promptIds, int64_t batch,
                  const std::vector<int64_t> &attentionMask,
                  const GenerateOptions &options) {
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
}

/// What generation feeds the decode step and reads from it.
struct DecodeStepSpec {
  int64_t vocab;
  bool hasPositions;
};

/// Throws Error unless the decode step reads one token per sequence and
/// returns its logits, split, if at all, by vocabulary
/// (tp-split-outputs).
DecodeStepSpec checkDecodeStep(const Manifest &manifest) {
  int64_t slots = manifest.maxSeq, rows = manifest.maxBatch;
  findInput(manifest.inputs, manifest.dir, "input_ids", {rows, 1}, true);
  findInput(manifest.inputs, manifest.dir, "attention_mask", {rows, slots},
            true);
  bool hasPositions = findInput(manifest.inputs, manifest.dir, "position_ids",
                                {rows, 1}, false);
  findInput(manifest.inputs, manifest.dir, "cache_position", {}, true);
  const TensorSpec *logits = findLogits(manifest.outputs);
  if (!logits || logits->dtype != "F32" || logits->shape.size() != 3 ||
      logits->shape[0] != rows || logits->shape[1] != 1 ||
      (logits->splitDim >= 0 && logits->splitDim != 2))
    throw Error(manifest.dir + ": the decode step has no F32 [" +
                std::to_string(rows) + ", 1, vocabulary] output 'logits'");
  return {logits->shape[2], hasPositions};
}

/// What generation feeds a prefill chunk and reads from it.
struct ChunkSpec {
  bool hasPositions;
  /// Compiled by tp-select-logits: the logits at logits_position only.
  bool selectsLogits;
};

/// Throws Error unless `prefill` reads its chunk of tokens per sequence
/// and returns their logits (or those at logits_position).
ChunkSpec checkPrefillChunk(const Manifest &manifest,
                            const PrefillSpec &prefill, int64_t vocab) {
  int64_t slots = manifest.maxSeq, rows = manifest.maxBatch;
  int64_t chunk = prefill.length;
  findInput(prefill.inputs, manifest.dir, "input_ids", {rows, chunk}, true);
  findInput(prefill.inputs, manifest.dir, "attention_mask", {rows, slots},
            true);
  bool hasPositions = findInput(prefill.inputs, manifest.dir, "position_ids",
                                {rows, chunk}, false);
  findInput(prefill.inputs, manifest.dir, "cache_position", {}, true);
  bool selectsLogits =
      findInput(prefill.inputs, manifest.dir, "logits_position", {}, false);
  int64_t logitsRows = selectsLogits ? 1 : chunk;
  const TensorSpec *logits = findLogits(prefill.outputs);
  if (!logits || logits->dtype != "F32" ||
      logits->shape != std::vector<int64_t>{rows, logitsRows, vocab} ||
      (logits->splitDim >= 0 && logits->splitDim != 2))
    throw Error(manifest.dir + ": the prefill chunk of " +
                std::to_string(chunk) + " tokens has no F32 [" +
                std::to_string(rows) + ", " + std::to_string(logitsRows) +
                ", " + std::to_string(vocab) + "] output 'logits'");
  return {hasPositions, selectsLogits};
}

InputView view(const std::vector<int64_t> &data, std::vector<int64_t> shape,
               const char *name) {
  return InputView{"I64", std::move(shape), data.data(),
                   std::string("generation's ") + name};
}

void put(std::vector<char> &out, const void *p, size_t n) {
  out.insert(out.end(), static_cast<const char *>(p),
             static_cast<const char *>(p) + n);
}

/// One generate() call: the sequences, their masks and positions, and the
/// rule choosing their tokens. Row b * beams + k holds beam k of prompt b;
/// rows past them repeat the first prompt and their tokens are dropped.
class Decoder {
public:
  Decoder(Session &session, const std::vector<int64_t> &promptIds,
          int64_t batch, const std::vector<int64_t> &attentionMask,
          const GenerateOptions &options, DecodeStepSpec decodeStep);

  Generation run();

private:
  using Clock = std::chrono::steady_clock;

  /// Runs the prompt in prefill chunks, then picks the first new token
  /// from the last one; returns the positions they ran.
  int64_t runPrefillChunks();
  /// Runs prefill chunk `chosen` on positions [first, first + count).
  void runChunk(int64_t chosen, const ChunkSpec &spec, int64_t first,
                int64_t count);
  /// Runs the decode step from position `first` on, one token at a time.
  void runDecodeSteps(int64_t first);
  /// Unmasks position t of row r unless it is the prompt's left padding,
  /// and returns its position id as transformers counts it under left
  /// padding (the real tokens so far, minus one; 1 on padding).
  int64_t advance(int64_t r, int64_t t);
  /// Position `position` of the logits of the last run of `program` (the
  /// decode step, or a prefill chunk) picks the token after position t;
  /// true once every sequence is done.
  bool chooseTokens(int program, int64_t position, int64_t t);
  /// Under MPI: rank 0 picks from every last-stage rank's candidates and
  /// sends every process the sequences (and the beams' cache moves).
  bool chooseTokensOverMpi(const Candidates &mine, int64_t t);
  /// The rule's tokens after position t from `logits` (all of them, on
  /// rank 0 under MPI); beam search moves the caches here. True once
  /// every sequence is done.
  bool pick(const Candidates &logits, int64_t t);
  /// Rank 0 appends the sequences to `message`; every other process reads
  /// them from `message` at `at`. Returns where they end.
  size_t shareSequences(std::vector<char> &message, size_t at);
  /// The prompt's time ends (through the first new token).
  void endPrefill();

  Session &session;
  const Manifest &manifest;
  const GenerateOptions &options;
  int64_t batch, beams, rows, slots, vocab, promptLength, length;
  bool hasPositions;
  /// Under MPI each process holds one rank: the last stage's ranks send
  /// their candidates to rank 0, which picks the tokens.
  bool mpi, root;
  /// What each block of the logits must yield for the rule.
  int64_t candidatesPerBlock;
  std::vector<int64_t> sequence, mask, promptMask, ids, positions, seen;
  Sampler sampler;
  BeamSearch beamSearch;
  /// The rows the last beam-search step moved the caches from (MPI ranks
  /// other than 0 move theirs as rank 0 says).
  std::vector<int64_t> lastSource;
  bool finished = false;
  /// The last position a token was written at.
  int64_t lastWritten;
  Generation result;
  Clock::time_point start;
};

Decoder::Decoder(Session &session, const std::vector<int64_t> &promptIds,
                 int64_t batch, const std::vector<int64_t> &attentionMask,
                 const GenerateOptions &options, DecodeStepSpec decodeStep)
    : session(session), manifest(session.getManifest()), options(options),
      batch(batch), beams(options.numBeams), rows(manifest.maxBatch),
      slots(manifest.maxSeq), vocab(decodeStep.vocab),
      promptLength(static_cast<int64_t>(promptIds.size()) / batch),
      length(promptLength + options.maxNewTokens),
      hasPositions(decodeStep.hasPositions), mpi(session.getMpiRank() >= 0),
      root(session.getMpiRank() <= 0),
      candidatesPerBlock(beams > 1        ? 2 * beams
                         : options.sample ? options.topK
                                          : 1),
      sequence(rows * length, 0), mask(rows * slots, 0),
      promptMask(rows * promptLength, 1), ids(rows), positions(rows),
      seen(rows, 0), sampler(options, rows, batch),
      beamSearch(batch, beams, rows, vocab, promptLength, options.eosTokenId),
      lastWritten(promptLength - 1) {
  for (int64_t r = 0; r < rows; ++r) {
    int64_t from = r < batch * beams ? r / beams : 0;
    std::memcpy(&sequence[r * length], &promptIds[from * promptLength],
                promptLength * sizeof(int64_t));
    if (!attentionMask.empty())
      std::memcpy(&promptMask[r * promptLength],
                  &attentionMask[from * promptLength],
                  promptLength * sizeof(int64_t));
  }
  result.batch = batch;
  result.length = length;
  start = Clock::now();
}

Generation Decoder::run() {
  int64_t first = runPrefillChunks();
  runDecodeSteps(first);
  if (beams > 1 && options.maxNewTokens > 0 && root)
    beamSearch.finish(sequence, length, lastWritten);
  // Every process returns rank 0's tokens.
  if (mpi) {
    std::vector<char> message;
    if (root)
      shareSequences(message, 0);
    session.broadcastFromRoot(message);
    if (!root)
      shareSequences(message, 0);
  }
  result.tokens.assign(sequence.begin(), sequence.begin() + batch * length);
  return result;
}

// The prompt runs in prefill chunks, each C tokens at cache_position p
// reading the cache written before it, chosen by planPrefillChunks (the
// least work, so that the cost follows the prompt), the last one
// right-padded (masked: the padded positions' cache entries are
// overwritten by the steps after, before they are unmasked). Only what no
// chunk fits (the last positions of a prompt that nearly fills the
// context) goes through decode steps.
int64_t Decoder::runPrefillChunks() {
  std::vector<int64_t> chunkLengths;
  for (const PrefillSpec &prefill : manifest.prefill)
    chunkLengths.push_back(prefill.length);
  std::vector<int64_t> plan;
  if (promptLength > 1)
    plan = planPrefillChunks(chunkLengths, promptLength, slots);
  int64_t first = 0;
  for (int64_t chosen : plan) {
    const PrefillSpec &prefill = manifest.prefill[chosen];
    int64_t count = std::min(promptLength - first, prefill.length);
    ChunkSpec spec = checkPrefillChunk(manifest, prefill, vocab);
    runChunk(chosen, spec, first, count);
    ++result.prefillChunks;
    first += count;
    if (first == promptLength && length - 1 >= promptLength) {
      finished = chooseTokens(static_cast<int>(chosen),
                              spec.selectsLogits ? 0 : count - 1, first - 1);
      lastWritten = first;
      endPrefill();
    }
  }
  return first;
}

void Decoder::runChunk(int64_t chosen, const ChunkSpec &spec, int64_t first,
                       int64_t count) {
  int64_t chunk = manifest.prefill[chosen].length;
  std::vector<int64_t> chunkIds(rows * chunk, 0),
      chunkPositions(rows * chunk, 1);
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t t = 0; t < count; ++t) {
      chunkIds[r * chunk + t] = sequence[r * length + first + t];
      chunkPositions[r * chunk + t] = advance(r, first + t);
    }
  std::vector<int64_t> cachePosition{first}, logitsPosition{count - 1};
  std::map<std::string, InputView> inputs{
      {"input_ids", view(chunkIds, {rows, chunk}, "input_ids")},
      {"attention_mask", view(mask, {rows, slots}, "attention_mask")},
      {"cache_position", view(cachePosition, {}, "cache_position")}};
  if (spec.hasPositions)
    inputs["position_ids"] =
        view(chunkPositions, {rows, chunk}, "position_ids");
  if (spec.selectsLogits)
    inputs["logits_position"] = view(logitsPosition, {}, "logits_position");
  session.runInPlace(inputs, static_cast<int>(chosen));
}

// Step t reads the token at position t and picks the one after it.
void Decoder::runDecodeSteps(int64_t first) {
  // Decode steps' seconds in the stage function, and in communication.
  double stageSeconds = 0, communicationSeconds = 0;
  for (int64_t t = first; t < length - 1 && !finished; ++t) {
    for (int64_t r = 0; r < rows; ++r) {
      ids[r] = sequence[r * length + t];
      positions[r] = advance(r, t);
    }
    std::vector<int64_t> cachePosition{t};
    std::map<std::string, InputView> inputs{
        {"input_ids", view(ids, {rows, 1}, "input_ids")},
        {"attention_mask", view(mask, {rows, slots}, "attention_mask")},
        {"cache_position", view(cachePosition, {}, "cache_position")}};
    if (hasPositions)
      inputs["position_ids"] = view(positions, {rows, 1}, "position_ids");
    session.runInPlace(inputs);
    if (t + 1 > promptLength) {
      RunTiming timing = session.getLastRunTiming();
      stageSeconds += timing.stageSeconds;
      communicationSeconds += timing.communicationSeconds;
    }
    if (t + 1 == promptLength)
      endPrefill();
    if (t + 1 < promptLength)
      continue;
    finished = chooseTokens(Session::kMainProgram, 0, t);
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
}

int64_t Decoder::advance(int64_t r, int64_t t) {
  int64_t m = t < promptLength ? promptMask[r * promptLength + t] : 1;
  mask[r * slots + t] = m;
  seen[r] += m != 0;
  return m != 0 ? seen[r] - 1 : int64_t(1);
}

void Decoder::endPrefill() {
  result.prefillSeconds =
      std::chrono::duration<double>(Clock::now() - start).count();
  start = Clock::now();
}

bool Decoder::chooseTokens(int program, int64_t position, int64_t t) {
  Candidates mine(session.getOutputBlocks("logits", program), vocab, rows,
                  position, candidatesPerBlock, /*withLogSumExp=*/beams > 1);
  return mpi ? chooseTokensOverMpi(mine, t) : pick(mine, t);
}

bool Decoder::chooseTokensOverMpi(const Candidates &mine, int64_t t) {
  std::vector<std::vector<char>> sent =
      session.gatherFromLastStage(mine.serialize());
  std::vector<char> message;
  int64_t allDone = 0;
  if (root) {
    Candidates merged;
    for (size_t i = 0; i < sent.size(); ++i)
      merged.deserialize(sent[i], "last-stage rank " + std::to_string(i));
    allDone = pick(merged, t);
    put(message, &allDone, sizeof(allDone));
    shareSequences(message, 0);
    if (beams > 1)
      put(message, lastSource.data(), lastSource.size() * sizeof(int64_t));
  }
  session.broadcastFromRoot(message);
  if (root)
    return allDone != 0;
  if (message.size() < sizeof(allDone))
    throw Error("generation: rank 0 sent a truncated step");
  std::memcpy(&allDone, message.data(), sizeof(allDone));
  size_t at = shareSequences(message, sizeof(allDone));
  if (beams > 1) {
    std::vector<int64_t> source(rows);
    if (message.size() != at + rows * sizeof(int64_t))
      throw Error("generation: rank 0 sent a truncated step");
    std::memcpy(source.data(), message.data() + at, rows * sizeof(int64_t));
    session.reorderCaches(source);
  }
  return allDone != 0;
}

bool Decoder::pick(const Candidates &logits, int64_t t) {
  if (beams == 1)
    return sampler.step(logits, sequence, length, t);
  lastSource = beamSearch.step(logits, sequence, length, t);
  session.reorderCaches(lastSource);
  return beamSearch.isDone();
}

size_t Decoder::shareSequences(std::vector<char> &message, size_t at) {
  size_t bytes = sequence.size() * sizeof(int64_t);
  if (root) {
    put(message, sequence.data(), bytes);
    return message.size();
  }
  if (message.size() < at + bytes)
    throw Error("generation: rank 0 sent a truncated step");
  std::memcpy(sequence.data(), message.data() + at, bytes);
  return at + bytes;
}

} // namespace

Generation Session::generate(const std::vector<int64_t> &promptIds,
                             int64_t batch,
                             const std::vector<int64_t> &attentionMask,
                             const GenerateOptions &options) {
  const Manifest &manifest = getManifest();
  checkRequest(manifest, promptIds, batch, attentionMask, options);
  DecodeStepSpec decodeStep = checkDecodeStep(manifest);
  return Decoder(*this, promptIds, batch, attentionMask, options, decodeStep)
      .run();
}
