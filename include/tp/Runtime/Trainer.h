//===- Trainer.h - the optimizer over a training artifact ------*- C++ -*-===//
//
// An artifact compiled with tp-compile --train computes the loss and, as
// outputs grad.<weight>, each rank's block of every trainable weight's
// gradient, split as the weight is. The Trainer applies the manifest's
// optimizer to each rank's weights in place, in the memory the model
// library reads them from: every rank updates its own shard with its own
// optimizer states (split exactly as its weights), and the only
// communication beyond the step's own is one sum of the squared gradient
// norm for clipping. Checkpoints hold each rank's weight file and states.
//
// With --data-parallel D the step runs on D replicas of the grid (with
// threads the Trainer opens replicas 1 .. D-1 beside the session it was
// given; under MPI each process is one rank of one replica), each on its
// own micro-batches; every rank all-reduces its gradients and the loss
// over the data axis in buckets before the update, so every replica
// applies the same update and the copies stay equal. A checkpoint is
// replica 0's: the same files as without data parallelism.
//
//===----------------------------------------------------------------------===//

#ifndef TP_RUNTIME_TRAINER_H
#define TP_RUNTIME_TRAINER_H

#include "tp/Runtime/Session.h"

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

namespace tp::rt {

/// One optimizer step's figures.
struct TrainStep {
  /// The step number, from 1.
  int64_t step = 0;
  /// The mean loss over the step's micro-batches.
  double loss = 0;
  /// The global gradient norm before clipping.
  double gradNorm = 0;
  double lr = 0;
  double seconds = 0;
  /// Of `seconds`: running the step's programs (forward, loss, backward,
  /// accumulation), and the rest (the data axis, the norm, the update).
  double programSeconds = 0, updateSeconds = 0;
  /// Data parallelism: what one rank did over the data axis: its
  /// collectives, the buckets its gradients went in, and their bytes
  /// (without ZeRO: one all-reduce per bucket, the loss in the last;
  /// ZeRO-1: a reduce-scatter and an all-gather per bucket, and one
  /// all-reduce of the loss and the squared norm).
  int64_t dataCollectives = 0, dataBuckets = 0, dataBytes = 0;
  /// Dynamic loss scaling: the scale this step's backward started from,
  /// and whether its gradients overflowed, so that it updated nothing
  /// (the next step's scale is half this one's).
  double lossScale = 0;
  bool skipped = false;
};

class Trainer {
public:
  /// Training on `session`'s artifact, which must have been compiled with
  /// --train (a manifest with `training`), for --target cpu or cuda (whose
  /// stages upload the host's weights at every run). Throws Error
  /// otherwise, or when a trainable weight has no gradient of its shape.
  explicit Trainer(Session &session);
  ~Trainer();
  Trainer(const Trainer &) = delete;
  Trainer &operator=(const Trainer &) = delete;

  /// One optimizer step over `microbatches` (the artifact's `accumulate`
  /// of them per data-parallel replica, replica d's at d * accumulate ..):
  /// runs each, averages their gradients, clips them to the
  /// global norm, and updates every trainable weight of this process's
  /// ranks in place, as torch.optim.AdamW / SGD and
  /// torch.nn.utils.clip_grad_norm_ do. `lr` < 0: the manifest's. A
  /// non-finite loss or gradient norm throws Error naming the step before
  /// any weight changes, unless the artifact scales its loss: then the
  /// step is skipped and the scale halved, as torch's GradScaler does.
  /// Under MPI every process calls it.
  TrainStep
  step(const std::vector<std::map<std::string, InputView>> &microbatches,
       double lr = -1);

  /// Steps taken (restored by resume).
  int64_t getStep() const;

  /// Writes a checkpoint folder `dir`: each rank's weight file as it now
  /// is, its optimizer states (rank-<r>.state.safetensors), trainer.json
  /// (the step, the optimizer, the artifact's manifest checksum) and
  /// SHA256SUMS. Written beside `dir` first and renamed into place, so
  /// that `dir` is always a whole checkpoint (an older one is replaced).
  /// Under MPI every process calls it (a shared file system).
  void save(const std::string &dir);

  /// Loads a checkpoint `save` wrote for this artifact: checks every file
  /// against SHA256SUMS, the weight files' headers against the manifest,
  /// and the optimizer, then restores the weights, states and step.
  void resume(const std::string &dir);

  class Impl;

private:
  std::unique_ptr<Impl> impl;
};

} // namespace tp::rt

#endif // TP_RUNTIME_TRAINER_H
