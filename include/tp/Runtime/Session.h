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

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

namespace tp::rt {

struct SessionOptions {
  /// "threads": every rank a thread of this process. "mpi": this process is
  /// one rank of MPI_COMM_WORLD (the caller has called MPI_Init).
  std::string launcher = "threads";
  /// How long a rank waits for a peer before the run fails.
  double timeoutSeconds = 60;
  /// Testing only: this rank binds its weights but never runs, so that its
  /// peers time out.
  int64_t stallRank = -1;
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

  class Impl;

private:
  std::unique_ptr<Impl> impl;
};

/// The shape as text: [2, 16].
std::string formatShape(const std::vector<int64_t> &shape);

} // namespace tp::rt

#endif // TP_RUNTIME_SESSION_H
