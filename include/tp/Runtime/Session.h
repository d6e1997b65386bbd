//===- Session.h - an artifact opened once, run many times -----*- C++ -*-===//
//
// What tp-run does with an artifact, as a library: open it once (verify the
// manifest, the model library and every rank's weights, load them, start
// the ranks' communicators), then run forward passes on inputs held in
// memory. tp-run is a command line over it; the Python module is another.
//
//===----------------------------------------------------------------------===//

#ifndef TP_RUNTIME_SESSION_H
#define TP_RUNTIME_SESSION_H

#include "tp/Runtime/Artifact.h"
#include "tp/Runtime/Trace.h"

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

namespace tp::rt {

class ThreadWorld;

struct SessionOptions {
  /// "threads": every rank a thread of this process. "mpi": this process is
  /// one rank of MPI_COMM_WORLD (the caller has called MPI_Init).
  std::string launcher = "threads";
  /// How long a rank waits for a peer before the run fails.
  double timeoutSeconds = 60;
  /// Testing only: this rank binds its weights but never runs, so that its
  /// peers time out.
  int64_t stallRank = -1;
  /// Record each rank's forward passes and collectives (getTrace; tp-run
  /// --trace). CPU targets only: NCCL runs inside a CUDA library.
  bool trace = false;
  /// Data parallelism (an artifact compiled with --data-parallel D): with
  /// threads, the replica this session runs, 0 .. D-1, and the world its
  /// ranks share with the other replicas' sessions (getThreadWorld() of
  /// replica 0). Without a world the session makes one for all D
  /// replicas and runs replica 0. Under MPI mpirun starts D x ranks
  /// processes, and process p runs rank p % ranks of replica p / ranks.
  int32_t dataReplica = 0;
  std::shared_ptr<ThreadWorld> world;
};

/// A model input supplied by the caller, read in place (never written):
/// `data` holds the dtype × shape bytes. `source` names it in errors (a
/// file path, "argument 'input_ids'").
struct InputView {
  std::string dtype; // safetensors spelling: F32, I64, ...
  std::vector<int64_t> shape;
  const void *data = nullptr;
  std::string source;
};

/// A model output: the manifest's name, dtype and shape, and its bytes.
struct OutputTensor {
  std::string name, dtype;
  std::vector<int64_t> shape;
  std::vector<char> data;
};

/// One model output of the last run where the ranks hold it: the whole
/// output on one rank, or, for an output the manifest splits
/// (`split_dim`), one block per rank of the last stage in rank order, the
/// block of rank t holding entries [t * blockShape[dim], ...) of `dim`, up
/// to the output's size (the rest is padding). The data stays valid until
/// the session runs again.
struct OutputBlocks {
  std::vector<const char *> blocks;
  std::vector<int64_t> blockShape;
  /// The split dim; -1 when `blocks` is the whole output.
  int64_t dim = -1;
  /// Under --launcher mpi a process holds its own rank's block alone (none
  /// before the last stage): its position among the last stage's ranks.
  int64_t firstBlock = 0;
};

/// Where a forward pass's time went on the rank that holds the outputs:
/// seconds in its stage function, and the part of them spent in
/// collectives and send/recv, waiting for peers included. (For a CUDA
/// artifact NCCL runs inside the library: communication reads 0.)
struct RunTiming {
  double stageSeconds = 0, communicationSeconds = 0;
};

/// Session::generate's options (tp-run --generate).
struct GenerateOptions {
  /// Tokens to add after each prompt.
  int64_t maxNewTokens = 0;
  /// A sequence stops once it produces this token, and is padded with it
  /// after; -1: no stop token.
  int64_t eosTokenId = -1;
  /// Sampling instead of greedy, as transformers' generate(do_sample=True)
  /// filters the logits: divided by `temperature`, then the `topK` largest
  /// kept (0: all), then the smallest set of the largest whose
  /// probabilities sum to at least `topP`. Draws come from `seed` alone
  /// (splitmix64, one per sequence per step), so a seed gives the same
  /// tokens on any number of ranks.
  bool sample = false;
  double temperature = 1.0, topP = 1.0;
  int64_t topK = 0;
  uint64_t seed = 0;
  /// Beam search over this many beams per prompt (1: none), as
  /// transformers' generate(num_beams=K) with length_penalty 1 and
  /// early_stopping False: batch × K sequences must fit --max-batch.
  int64_t numBeams = 1;
};

/// Prompts and the tokens generated after them.
struct Generation {
  /// [batch, length] int64, row-major.
  std::vector<int64_t> tokens;
  int64_t batch = 0, length = 0;
  /// Seconds for the prompt's steps (through the first new token), and
  /// per decode step after it.
  double prefillSeconds = 0, secondsPerToken = 0;
  /// Prefill chunks the prompt ran in (the rest of it, if any, ran through
  /// decode steps), and decode steps after the prompt.
  int64_t prefillChunks = 0, decodeSteps = 0;
  /// A decode step's seconds split three ways (they add up to
  /// secondsPerToken): compute in the stage function, communication
  /// inside it (RunTiming), and the runtime around it (starting the
  /// ranks, binding inputs, choosing the token).
  double computeSecondsPerToken = 0, communicationSecondsPerToken = 0,
         runtimeSecondsPerToken = 0;
};

class Session {
public:
  /// Opens `artifact`: the checks of loadManifest, verifyLibrary and
  /// checkLibrarySignature, then every rank's weights (loadRankWeights; one
  /// rank under MPI) and, for --target cuda, one GPU and NCCL communicator
  /// per rank. Throws Error naming the first problem.
  explicit Session(const std::string &artifact, SessionOptions options = {});
  ~Session();
  Session(const Session &) = delete;
  Session &operator=(const Session &) = delete;

  const Manifest &getManifest() const;
  const SessionOptions &getOptions() const;

  /// Checks `inputs` against the model's inputs (names, dtypes, shapes, and
  /// the index range of token ids), then runs the forward pass `warmup`
  /// times untimed and `repeat` times timed. Returns the model's outputs in
  /// manifest order on the process that holds them (every process with
  /// threads; rank 0 under MPI), nothing elsewhere. A failed run throws
  /// Error with every rank's message, and the session cannot run again.
  std::vector<OutputTensor> run(const std::map<std::string, InputView> &inputs,
                                int64_t warmup = 0, int64_t repeat = 1);

  /// Seconds per timed run of the last run(), on the rank that holds the
  /// outputs.
  double getSecondsPerRun() const;

  /// OpenBLAS's threads per rank in this process (a --target cpu artifact):
  /// OPENBLAS_NUM_THREADS (GOTO_NUM_THREADS, OMP_NUM_THREADS) if set, else
  /// the process's cores divided by the ranks on this node, at least 1.
  /// 0 for CUDA artifacts.
  int getBlasThreads() const;

  /// How the last run's time per forward pass splits on the rank that
  /// holds the outputs.
  RunTiming getLastRunTiming() const;

  /// The forward pass (a generation artifact's decode step), as a program
  /// index; 0 .. K-1 are the prefill chunks of manifest.prefill.
  static constexpr int kMainProgram = -1;

  /// One run of `program` (the forward pass, or prefill chunk `program`)
  /// whose outputs stay on the ranks, for getOutputBlocks: no whole output
  /// is assembled. Throws Error as run() does.
  void runInPlace(const std::map<std::string, InputView> &inputs,
                  int program = kMainProgram);

  /// The output `name` of the last run of `program`, as the ranks hold it;
  /// under MPI, as this process's rank holds it (see
  /// OutputBlocks::firstBlock). Throws Error for an unknown name.
  OutputBlocks getOutputBlocks(const std::string &name,
                               int program = kMainProgram) const;

  /// With SessionOptions::trace: every run's forward passes and collectives
  /// so far, one timeline per rank of this process (all with threads, this
  /// process's under MPI). Empty without.
  const std::vector<RankTrace> &getTrace() const;

  /// This process's rank under --launcher mpi; -1 with threads, where
  /// every rank is in this process.
  int32_t getMpiRank() const;

  /// Under --launcher mpi: `mine` from each rank of the last stage to rank
  /// 0, which returns them in the stage's rank order (every other process
  /// returns nothing). With threads: {mine}.
  std::vector<std::vector<char>>
  gatherFromLastStage(const std::vector<char> &mine);

  /// Under --launcher mpi: rank 0's `data` to every process (a no-op with
  /// threads).
  void broadcastFromRoot(std::vector<char> &data);

  /// Data-parallel replicas in the world (1 unless the artifact was
  /// compiled with --data-parallel), and the one this session runs.
  int32_t getDataReplicas() const;
  int32_t getDataReplica() const;
  /// With threads: the world this session's ranks talk in, for the other
  /// replicas' sessions (SessionOptions::world). Null under MPI.
  std::shared_ptr<ThreadWorld> getThreadWorld() const;
  /// The sum over the data axis, in place: every replica's rank `rank` (of
  /// this process) calls it with its `count` floats, and all end with the
  /// sum, bitwise equal. One collective, at `site`. A no-op with one
  /// replica.
  void allReduceOverReplicas(int32_t rank, float *buffer, int64_t count,
                             const char *site);
  void allReduceOverReplicas(int32_t rank, double *buffer, int64_t count,
                             const char *site);
  /// ZeRO over the data axis: `in` is D chunks of `chunk` floats, and
  /// replica d's `out` gets the sum over the replicas of chunk d
  /// (reduce-scatter); allGather puts replica d's `chunk` floats of `in`
  /// at chunk d of every replica's `out`. One collective each; no-ops
  /// (copies) with one replica.
  void reduceScatterOverReplicas(int32_t rank, const float *in, float *out,
                                 int64_t chunk, const char *site);
  void allGatherOverReplicas(int32_t rank, const float *in, float *out,
                             int64_t chunk, const char *site);

  /// Training (Trainer) reads and writes the ranks' memory directly. The
  /// ranks of this process: all of them with threads, one under MPI.
  std::vector<int32_t> getLocalRanks() const;
  /// Rank `rank`'s weight file as loaded: the whole safetensors image
  /// (header and weights, RankSpec::bytes long), in the memory the model
  /// library reads the weights from on every run. A --target cpu artifact
  /// whose weights are updated in place (tp-compile --train) keeps no copy
  /// of them. Throws Error for a rank not in this process or a CUDA
  /// artifact (its weights live on the GPU).
  char *getRankWeightFile(int32_t rank);
  /// Rank `rank`'s result for model output `name` of the last run of the
  /// main program: its block of a split output, its own copy of a whole
  /// one. Throws Error as getRankWeightFile does, or for an unknown name.
  const char *getRankOutput(int32_t rank, const std::string &name) const;

  /// Runs a generation artifact's prefill chunk `chunk` (its inputs and
  /// outputs are manifest.prefill[chunk]'s), which writes the KV caches the
  /// decode step reads. Throws Error as run() does, and for an artifact
  /// without that chunk.
  std::vector<OutputTensor>
  runPrefill(const std::map<std::string, InputView> &inputs, int chunk = 0);

  /// Reorders the sequences (dim 0) of every KV cache on this process's
  /// ranks: sequence i takes what sequence `source[i]` held (beam search
  /// keeping the beams it extends), where they live: on the host, or on
  /// the GPUs of a --target cuda artifact.
  void reorderCaches(const std::vector<int64_t> &source);

  /// Generation with an artifact compiled with --max-seq, on thread ranks
  /// or, under --launcher mpi, called by every process (rank 0 chooses the
  /// tokens from the candidates each last-stage rank sends, then sends them
  /// to all; every process returns the same tokens):
  /// `promptIds` is [batch, promptLength] int64 (batch up to the compiled
  /// --max-batch), `attentionMask` the same shape, 0 on the left padding of
  /// shorter prompts (empty: all ones). Each step runs the decode program
  /// on one token per sequence, at the next position of the ranks' KV
  /// caches; the prompt runs through it token by token. Throws Error for
  /// an artifact without a decode step, a batch over the compiled one, or
  /// a prompt and new tokens longer than --max-seq.
  Generation generate(const std::vector<int64_t> &promptIds, int64_t batch,
                      const std::vector<int64_t> &attentionMask,
                      const GenerateOptions &options);

  class Impl;

private:
  std::unique_ptr<Impl> impl;
};

/// The shape as text: [2, 16].
std::string formatShape(const std::vector<int64_t> &shape);

} // namespace tp::rt

#endif // TP_RUNTIME_SESSION_H
