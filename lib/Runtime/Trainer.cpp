//===- Trainer.cpp - the optimizer over a training artifact ---------------===//
//
// Trainer::step runs the artifact's program (forward, loss and backward,
// split as planned) once per micro-batch, then updates each rank's weights
// in place from its own gradient blocks: the same arithmetic as torch's
// AdamW and SGD, per element, on each rank's shard. A gradient the plan
// keeps whole is the same on every rank (it was all-reduced), so every
// rank applies the same update to its copy and the copies stay equal.
//
//===----------------------------------------------------------------------===//

#include "tp/Runtime/Trainer.h"

#include "tp/Runtime/Sha256.h"

#include "Optimizers.h"

#include "llvm/Support/JSON.h"

#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>
#include <unistd.h>

using namespace tp::rt;

namespace {

/// A trainable weight of one rank: its memory, its gradient output, and
/// its optimizer states (split as the weight is).
struct Param {
  const WeightSpec *spec = nullptr;
  float *weight = nullptr;
  std::string grad;
  int64_t size = 0;
  /// The gradient is the rank's block of a split one: it counts once per
  /// rank in the global norm. A whole one counts on one rank only.
  bool split = false;
  /// AdamW: exp_avg and exp_avg_sq; SGD: the momentum buffer (first).
  std::vector<float> first, second;
  /// The sum of the micro-batches' gradients (accumulate > 1).
  std::vector<float> accumulated;
  /// Where the gradient starts in its rank's `reduced` buffer.
  int64_t offset = 0;
};

/// ZeRO-1's cut of a rank's gradients (all its params' one after another,
/// `total` floats) over D replicas: buckets of `chunk` * D floats (the last
/// padded with zeros), of which replica d owns the d-th chunk of each. Its
/// optimizer states and its share of the reduced gradients are those
/// chunks, `buckets` * `chunk` floats.
struct Shard {
  int64_t total = 0, chunk = 0, buckets = 0, replica = 0, replicas = 1;
  int64_t bucket() const { return chunk * replicas; }
  /// The flat range replica `replica` owns in bucket b (empty past the
  /// end).
  int64_t begin(int64_t b) const {
    return std::min(total, b * bucket() + replica * chunk);
  }
  int64_t end(int64_t b) const { return std::min(total, begin(b) + chunk); }
};

struct LocalRank {
  /// The rank in its replica, and the session (replica) that runs it.
  int32_t rank = 0;
  Session *session = nullptr;
  std::vector<Param> params;
  /// Data parallelism: the rank's gradients, one after another in params'
  /// order (then, without ZeRO, the replica's loss): what the data axis
  /// reduces. ZeRO-1 pads it to whole buckets.
  std::vector<float> reduced;
  /// ZeRO-1: the chunks this replica owns; its reduced gradients and
  /// optimizer states there (Param's stay empty).
  Shard shard;
  std::vector<float> ownedGrad, ownedFirst, ownedSecond;
};

std::string readFile(const std::string &path) {
  std::ifstream in(path, std::ios::binary);
  if (!in)
    throw Error("cannot read " + path + ": " + std::strerror(errno));
  std::ostringstream os;
  os << in.rdbuf();
  return os.str();
}

void writeFile(const std::string &path, const void *data, size_t bytes) {
  std::FILE *file = std::fopen(path.c_str(), "wb");
  if (!file)
    throw Error("cannot write " + path + ": " + std::strerror(errno));
  bool ok = std::fwrite(data, 1, bytes, file) == bytes;
  ok = std::fflush(file) == 0 && ok;
  ok = ::fsync(fileno(file)) == 0 && ok;
  ok = std::fclose(file) == 0 && ok;
  if (!ok)
    throw Error("cannot write " + path + ": " + std::strerror(errno));
}

/// Calls `fn(i)` for i in [0, n), each on its own thread (the first on
/// this one): the ranks' shards are independent, and each rank's update is
/// a pass over its weights, gradients and states that one core's memory
/// bandwidth bounds.
template <typename Fn> void forEachInParallel(size_t n, Fn fn) {
  std::vector<std::thread> threads;
  for (size_t i = 1; i < n; ++i)
    threads.emplace_back(fn, i);
  if (n)
    fn(0);
  for (std::thread &thread : threads)
    thread.join();
}

std::string stateFileName(int32_t rank) {
  return "rank-" + std::to_string(rank) + ".state.safetensors";
}

} // namespace

class Trainer::Impl {
public:
  explicit Impl(Session &session);
  TrainStep step(const std::vector<std::map<std::string, InputView>> &batches,
                 double lr);
  void save(const std::string &dir);
  void resume(const std::string &dir);

  Session &session;
  const Manifest &manifest;
  const TrainingSpec &spec;
  /// With threads and --data-parallel D: the sessions of replicas 1 .. D-1
  /// (replica 0 is `session`), in the world `session` made for them all.
  std::vector<std::unique_ptr<Session>> replicaSessions;
  /// This process's replicas: `session` and replicaSessions.
  std::vector<Session *> sessions;
  std::vector<LocalRank> ranks;
  /// Steps taken, and optimizer updates made (fewer where loss scaling
  /// skipped a step; AdamW's bias correction counts these).
  int64_t steps = 0, updates = 0;
  /// Dynamic loss scaling (spec.lossScale > 0): the scale the next step
  /// starts its backward from, and the steps in a row without overflow.
  double lossScale = 0;
  int64_t goodSteps = 0;

private:
  /// ZeRO-1 over more than one replica.
  bool zero() const { return spec.zero == 1 && session.getDataReplicas() > 1; }
  /// Adds `local`'s trainable weights, from its session's memory.
  void addParams(LocalRank &local);
  /// Whole optimizer states for `param` (zeros).
  void allocateStates(Param &param) const;
  /// ZeRO-1: fills (`toParams`) every param's whole states from the
  /// replicas' chunks, all-gathered over the data axis, or keeps this
  /// replica's chunks of them and frees them (!toParams).
  void gatherStates(LocalRank &local, bool toParams);
  /// ZeRO-1: frees the whole states gatherStates made for a checkpoint.
  void releaseWholeStates();
  /// ZeRO-1's step after the backward: reduce-scatters each bucket, sums
  /// the loss and squared norm over the replicas, updates this replica's
  /// chunks and all-gathers the weights. Returns the collectives.
  void zeroStep(std::vector<double> &replicaLoss, TrainStep &result, double lr);
  /// Calls fn(param, begin, end, index) for the part [begin, end) of each
  /// param (flat positions) that `local`'s replica owns, index being its
  /// position in the owned arrays.
  template <typename Fn> void forOwned(LocalRank &local, Fn fn);
  /// The sum of `value` over the ranks of a replica: over the processes of
  /// this one under MPI (one per rank), `value` itself with threads.
  double sumOverProcesses(double value);
  /// After a step's loss and norm are known: whether to skip the update.
  /// A loss or gradient that is not finite skips the step and halves the
  /// scale under loss scaling, and throws without it.
  bool overflowed(TrainStep &result);
  /// After an update: doubles the loss scale after lossScaleWindow steps
  /// in a row without overflow.
  void grewScale();
  /// Zeroes the accumulated micro-batches' gradients.
  void clearAccumulated();
  /// The optimizer on `n` elements: weights `w`, gradients `grad`,
  /// states `first` and `second` (null where the optimizer has none).
  void update(float *w, const float *grad, float *first, float *second,
              int64_t n, double scale, double lr);
  std::string stateHeader(const LocalRank &rank) const;
  /// Runs every replica's micro-batches (feeding the loss scale), summing
  /// their gradients where they accumulate; returns each replica's summed
  /// loss.
  std::vector<double>
  runMicroBatches(const std::vector<std::map<std::string, InputView>> &batches);
  /// Where a param's gradient is after the micro-batches: summed over the
  /// replicas, else summed over the micro-batches, else as the step left it.
  const float *gradientOf(const LocalRank &local, const Param &param) const;
  /// Data parallelism without ZeRO: all-reduces every rank's gradients and
  /// its replica's loss over the data axis in buckets; returns the summed
  /// loss and counts the collectives in `result`.
  double reduceOverReplicas(const std::vector<double> &replicaLoss,
                            TrainStep &result);
  /// This process's share of the squared global gradient norm, of the
  /// gradients multiplied by `unscale`.
  double squaredNorm(double unscale) const;
};

Trainer::Impl::Impl(Session &session)
    : session(session), manifest(session.getManifest()),
      spec([&]() -> const TrainingSpec & {
        if (!session.getManifest().training)
          throw Error(session.getManifest().dir +
                      " was not compiled for training: compile it with "
                      "tp-compile --train adamw|sgd");
        return *session.getManifest().training;
      }()) {
  sessions.push_back(&session);
  lossScale = spec.lossScale;
  int32_t replicas = session.getDataReplicas();
  if (replicas > 1 && session.getMpiRank() < 0)
    for (int32_t d = 1; d < replicas; ++d) {
      SessionOptions options = session.getOptions();
      options.dataReplica = d;
      options.world = session.getThreadWorld();
      replicaSessions.push_back(
          std::make_unique<Session>(manifest.dir, options));
      sessions.push_back(replicaSessions.back().get());
    }
  for (Session *replica : sessions)
    for (int32_t r : replica->getLocalRanks()) {
      LocalRank &local = ranks.emplace_back();
      local.rank = r;
      local.session = replica;
      addParams(local);
    }
}

void Trainer::Impl::addParams(LocalRank &local) {
  std::map<std::string, const TensorSpec *> outputs;
  for (const TensorSpec &output : manifest.outputs)
    outputs[output.name] = &output;
  const StageSpec &stage = manifest.stages.at(0);
  std::map<std::string, const TensorSpec *> results;
  for (const TensorSpec &result : stage.results)
    results[result.name] = &result;
  int32_t r = local.rank;
  char *file = local.session->getRankWeightFile(r);
  int64_t elements = 0;
  for (const WeightSpec &weight : manifest.rankSpecs.at(r).weights) {
    std::string grad = "grad." + weight.name;
    auto output = outputs.find(grad);
    if (output == outputs.end())
      continue; // frozen (--freeze), or no float weight
    const TensorSpec *result = results.at(grad);
    if (weight.dtype != "F32" || result->dtype != "F32" ||
        result->shape != weight.shape)
      throw Error(manifest.dir + ": rank " + std::to_string(r) +
                  ": gradient '" + grad + "' is " + result->dtype + " " +
                  formatShape(result->shape) + " but its weight is " +
                  weight.dtype + " " + formatShape(weight.shape));
    Param param;
    param.spec = &weight;
    param.weight = reinterpret_cast<float *>(file + weight.fileOffset);
    param.grad = grad;
    param.size = static_cast<int64_t>(weight.bytes / sizeof(float));
    param.split = output->second->splitDim >= 0;
    if (!zero())
      allocateStates(param);
    if (spec.accumulate > 1)
      param.accumulated.assign(param.size, 0.f);
    param.offset = elements;
    elements += param.size;
    local.params.push_back(std::move(param));
  }
  if (local.params.empty())
    throw Error(manifest.dir + ": rank " + std::to_string(r) +
                " has no trainable weight with a gradient");
  if (zero()) {
    Shard &shard = local.shard;
    shard.total = elements;
    shard.replicas = session.getDataReplicas();
    shard.replica = local.session->getDataReplica();
    // No bucket larger than the gradients need.
    shard.chunk = std::max<int64_t>(
        1, std::min(spec.bucketBytes / int64_t(sizeof(float)) / shard.replicas,
                    (elements + shard.replicas - 1) / shard.replicas));
    shard.buckets = (elements + shard.bucket() - 1) / shard.bucket();
    local.reduced.assign(shard.buckets * shard.bucket(), 0.f);
    int64_t owned = shard.buckets * shard.chunk;
    local.ownedGrad.assign(owned, 0.f);
    if (spec.optimizer == "adamw" || spec.momentum > 0)
      local.ownedFirst.assign(owned, 0.f);
    if (spec.optimizer == "adamw")
      local.ownedSecond.assign(owned, 0.f);
  } else if (session.getDataReplicas() > 1) {
    local.reduced.assign(elements + 1, 0.f);
  }
}

void Trainer::Impl::allocateStates(Param &param) const {
  if (spec.optimizer == "adamw" || spec.momentum > 0)
    param.first.assign(param.size, 0.f);
  if (spec.optimizer == "adamw")
    param.second.assign(param.size, 0.f);
}

double Trainer::Impl::sumOverProcesses(double value) {
  if (session.getMpiRank() < 0)
    return value;
  std::vector<char> mine(sizeof(double));
  std::memcpy(mine.data(), &value, sizeof(double));
  std::vector<std::vector<char>> all = session.gatherFromLastStage(mine);
  std::vector<char> total(sizeof(double));
  if (session.getMpiRank() == 0) {
    double sum = 0;
    for (const std::vector<char> &part : all) {
      double v;
      std::memcpy(&v, part.data(), sizeof(double));
      sum += v;
    }
    std::memcpy(total.data(), &sum, sizeof(double));
  }
  session.broadcastFromRoot(total);
  double sum;
  std::memcpy(&sum, total.data(), sizeof(double));
  return sum;
}

/// The optimizer of the manifest (Optimizers.h); `scale` folds the
/// accumulation's mean and the clip.
void Trainer::Impl::update(float *w, const float *grad, float *first,
                           float *second, int64_t n, double scale, double lr) {
  float s = static_cast<float>(scale);
  if (spec.optimizer == "adamw")
    return detail::adamwUpdate(
        {lr, spec.beta1, spec.beta2, spec.eps, spec.weightDecay, updates}, w,
        grad, first, second, n, s);
  detail::sgdUpdate({lr, spec.momentum, spec.weightDecay, updates}, w, grad,
                    spec.momentum > 0 ? first : nullptr, n, s);
}

TrainStep Trainer::Impl::step(
    const std::vector<std::map<std::string, InputView>> &batches, double lr) {
  int64_t replicas = session.getDataReplicas();
  if (static_cast<int64_t>(batches.size()) != spec.accumulate * replicas)
    throw Error("a training step of " + manifest.dir + " takes " +
                std::to_string(spec.accumulate * replicas) +
                " micro-batches (tp-compile --accumulate " +
                std::to_string(spec.accumulate) +
                (replicas > 1 ? " for each of --data-parallel " +
                                    std::to_string(replicas) + " replicas"
                              : std::string()) +
                "), got " + std::to_string(batches.size()));
  if (lr < 0)
    lr = spec.lr;
  auto start = std::chrono::steady_clock::now();
  TrainStep result;
  result.step = steps + 1;
  result.lr = lr;
  result.lossScale = lossScale;
  std::vector<double> replicaLoss = runMicroBatches(batches);
  result.programSeconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start)
          .count();
  if (zero()) {
    zeroStep(replicaLoss, result, lr);
  } else {
    double mean = 1.0 / static_cast<double>(spec.accumulate * replicas);
    result.loss = mean * (replicas > 1 ? reduceOverReplicas(replicaLoss, result)
                                       : replicaLoss.front());
    // What turns the summed gradients into the mean, unscaled.
    double unscale = spec.lossScale > 0 ? mean / lossScale : mean;
    result.gradNorm = std::sqrt(sumOverProcesses(squaredNorm(unscale)));
    if (overflowed(result)) {
      clearAccumulated();
    } else {
      double scale = unscale;
      if (spec.clipNorm > 0)
        scale *= std::min(1.0, spec.clipNorm / (result.gradNorm + 1e-6));
      ++updates;
      forEachInParallel(ranks.size(), [&](size_t r) {
        for (Param &param : ranks[r].params)
          update(param.weight, gradientOf(ranks[r], param), param.first.data(),
                 param.second.data(), param.size, scale, lr);
      });
      clearAccumulated();
      grewScale();
    }
    ++steps;
  }
  std::chrono::duration<double> elapsed =
      std::chrono::steady_clock::now() - start;
  result.seconds = elapsed.count();
  result.updateSeconds = result.seconds - result.programSeconds;
  return result;
}

std::vector<double> Trainer::Impl::runMicroBatches(
    const std::vector<std::map<std::string, InputView>> &batches) {
  // Under loss scaling each micro-batch also takes the scale, which the
  // backward starts from: the gradients come out multiplied by it.
  float scaleInput = static_cast<float>(lossScale);
  std::vector<std::map<std::string, InputView>> scaled;
  const std::vector<std::map<std::string, InputView>> *feed = &batches;
  if (spec.lossScale > 0) {
    scaled = batches;
    for (std::map<std::string, InputView> &batch : scaled) {
      if (batch.count(kLossScaleInput))
        throw Error(std::string("'") + kLossScaleInput +
                    "' is the trainer's own input to " + manifest.dir +
                    " (dynamic loss scaling): leave it out of the data");
      batch[kLossScaleInput] = {"F32", {}, &scaleInput, "the loss scale"};
    }
    feed = &scaled;
  }
  // Each replica runs its own micro-batches, K in a row: replica d takes
  // batches d*K .. d*K+K-1.
  std::vector<double> replicaLoss(sessions.size(), 0.0);
  forEachInParallel(sessions.size(), [&](size_t i) {
    Session &replica = *sessions[i];
    int64_t first = replica.getDataReplica() * spec.accumulate;
    for (int64_t k = 0; k < spec.accumulate; ++k) {
      replica.runInPlace((*feed)[first + k]);
      replicaLoss[i] += *reinterpret_cast<const float *>(
          replica.getRankOutput(replica.getLocalRanks().front(), spec.loss));
      if (spec.accumulate == 1)
        break;
      for (LocalRank &local : ranks) {
        if (local.session != &replica)
          continue;
        for (Param &param : local.params) {
          auto *grad = reinterpret_cast<const float *>(
              replica.getRankOutput(local.rank, param.grad));
          for (int64_t i = 0; i < param.size; ++i)
            param.accumulated[i] += grad[i];
        }
      }
    }
  });
  return replicaLoss;
}

const float *Trainer::Impl::gradientOf(const LocalRank &local,
                                       const Param &param) const {
  if (session.getDataReplicas() > 1)
    return local.reduced.data() + param.offset;
  if (spec.accumulate > 1)
    return param.accumulated.data();
  return reinterpret_cast<const float *>(
      local.session->getRankOutput(local.rank, param.grad));
}

double Trainer::Impl::reduceOverReplicas(const std::vector<double> &replicaLoss,
                                         TrainStep &result) {
  // Each local rank copies its gradients and its replica's loss into
  // `reduced` and all-reduces that over the data axis, a bucket at a time.
  std::vector<int64_t> collectives(ranks.size()), bytes(ranks.size());
  forEachInParallel(ranks.size(), [&](size_t r) {
    LocalRank &local = ranks[r];
    float *out = local.reduced.data();
    for (const Param &param : local.params) {
      const float *grad =
          spec.accumulate > 1
              ? param.accumulated.data()
              : reinterpret_cast<const float *>(
                    local.session->getRankOutput(local.rank, param.grad));
      std::memcpy(out, grad, param.size * sizeof(float));
      out += param.size;
    }
    size_t replica =
        std::find(sessions.begin(), sessions.end(), local.session) -
        sessions.begin();
    *out = static_cast<float>(replicaLoss[replica]);
    int64_t count = static_cast<int64_t>(local.reduced.size());
    int64_t bucket = std::max<int64_t>(spec.bucketBytes / 4, 1);
    for (int64_t offset = 0; offset < count; offset += bucket) {
      int64_t n = std::min(bucket, count - offset);
      local.session->allReduceOverReplicas(
          local.rank, local.reduced.data() + offset, n,
          "data parallel: the gradients' all-reduce over the replicas");
      ++collectives[r];
      bytes[r] += n * static_cast<int64_t>(sizeof(float));
    }
  });
  result.dataCollectives = result.dataBuckets = collectives.front();
  result.dataBytes = bytes.front();
  return ranks.front().reduced.back();
}

double Trainer::Impl::squaredNorm(double unscale) const {
  // Each split gradient's blocks once, each whole one on the stage's first
  // rank only. Every replica holds the same sums: one replica counts.
  std::vector<double> rankSquares(ranks.size(), 0.0);
  forEachInParallel(ranks.size(), [&](size_t r) {
    const LocalRank &local = ranks[r];
    if (local.session != sessions.front())
      return;
    for (const Param &param : local.params) {
      if (!param.split && manifest.rankSpecs.at(local.rank).tpIndex != 0)
        continue;
      rankSquares[r] +=
          detail::sumOfSquares(gradientOf(local, param), param.size) * unscale *
          unscale;
    }
  });
  // In rank order, the same sum on every run.
  double squares = 0;
  for (double part : rankSquares)
    squares += part;
  return squares;
}

template <typename Fn> void Trainer::Impl::forOwned(LocalRank &local, Fn fn) {
  const Shard &shard = local.shard;
  size_t p = 0;
  for (int64_t b = 0; b < shard.buckets; ++b) {
    int64_t begin = shard.begin(b), end = shard.end(b);
    // Params are in flat order: move on to the first one that ends past
    // `begin`, then walk those that start before `end`.
    while (p < local.params.size() &&
           local.params[p].offset + local.params[p].size <= begin)
      ++p;
    for (size_t q = p; q < local.params.size() && local.params[q].offset < end;
         ++q) {
      Param &param = local.params[q];
      int64_t from = std::max(begin, param.offset);
      int64_t to = std::min(end, param.offset + param.size);
      fn(param, from, to, b * shard.chunk + (from - begin));
    }
  }
}

void Trainer::Impl::zeroStep(std::vector<double> &replicaLoss,
                             TrainStep &result, double lr) {
  int64_t replicas = session.getDataReplicas();
  double mean = 1.0 / static_cast<double>(spec.accumulate * replicas);
  double unscale = spec.lossScale > 0 ? mean / lossScale : mean;
  const char *reduceSite =
      "ZeRO-1: the gradients' reduce-scatter over the replicas";
  // Each rank's gradients into its flat buffer, reduce-scattered bucket by
  // bucket: this replica's chunk of each, summed over the replicas; then
  // the squares of its own chunks, and the loss, summed over the replicas.
  std::vector<double> squares(ranks.size(), 0.0), losses(ranks.size(), 0.0);
  std::vector<int64_t> collectives(ranks.size(), 0), bytes(ranks.size(), 0);
  forEachInParallel(ranks.size(), [&](size_t r) {
    LocalRank &local = ranks[r];
    const Shard &shard = local.shard;
    for (const Param &param : local.params) {
      const float *grad =
          spec.accumulate > 1
              ? param.accumulated.data()
              : reinterpret_cast<const float *>(
                    local.session->getRankOutput(local.rank, param.grad));
      std::memcpy(local.reduced.data() + param.offset, grad,
                  param.size * sizeof(float));
    }
    for (int64_t b = 0; b < shard.buckets; ++b) {
      local.session->reduceScatterOverReplicas(
          local.rank, local.reduced.data() + b * shard.bucket(),
          local.ownedGrad.data() + b * shard.chunk, shard.chunk, reduceSite);
      ++collectives[r];
    }
    bytes[r] = shard.total * static_cast<int64_t>(sizeof(float));
    double sum = 0;
    bool whole = manifest.rankSpecs.at(local.rank).tpIndex == 0;
    forOwned(local, [&](Param &param, int64_t from, int64_t to, int64_t index) {
      if (!param.split && !whole)
        return;
      sum += detail::sumOfSquares(local.ownedGrad.data() + index, to - from);
    });
    size_t replica =
        std::find(sessions.begin(), sessions.end(), local.session) -
        sessions.begin();
    double figures[2] = {replicaLoss[replica], sum * unscale * unscale};
    local.session->allReduceOverReplicas(
        local.rank, figures, 2,
        "ZeRO-1: the loss and squared gradient norm over the replicas");
    ++collectives[r];
    losses[r] = figures[0];
    squares[r] = figures[1];
  });
  result.dataBuckets = ranks.front().shard.buckets;
  result.dataBytes = bytes.front();
  double loss = losses.front() * mean;
  result.loss = loss;
  // The norm over one replica's ranks (each already summed over the
  // replicas), in rank order: the same on every replica.
  double total = 0;
  for (size_t r = 0; r < ranks.size(); ++r)
    if (ranks[r].session == sessions.front())
      total += squares[r];
  total = sumOverProcesses(total);
  result.gradNorm = std::sqrt(total);
  // Every replica sees the same loss and norm: all skip, or none.
  if (overflowed(result)) {
    clearAccumulated();
    result.dataCollectives = collectives.front();
    ++steps;
    return;
  }
  double scale = unscale;
  if (spec.clipNorm > 0)
    scale *= std::min(1.0, spec.clipNorm / (result.gradNorm + 1e-6));
  ++updates;
  const char *gatherSite = "ZeRO-1: the updated weights' all-gather";
  forEachInParallel(ranks.size(), [&](size_t r) {
    LocalRank &local = ranks[r];
    const Shard &shard = local.shard;
    float *first = local.ownedFirst.empty() ? nullptr : local.ownedFirst.data();
    float *second =
        local.ownedSecond.empty() ? nullptr : local.ownedSecond.data();
    // This replica's chunks, updated in place in the weights, then copied
    // beside one another (ownedGrad is free now) for the all-gather.
    forOwned(local, [&](Param &param, int64_t from, int64_t to, int64_t index) {
      float *w = param.weight + (from - param.offset);
      update(w, local.ownedGrad.data() + index, first ? first + index : nullptr,
             second ? second + index : nullptr, to - from, scale, lr);
      std::memcpy(local.ownedGrad.data() + index, w,
                  (to - from) * sizeof(float));
    });
    for (int64_t b = 0; b < shard.buckets; ++b)
      local.session->allGatherOverReplicas(
          local.rank, local.ownedGrad.data() + b * shard.chunk,
          local.reduced.data() + b * shard.bucket(), shard.chunk, gatherSite);
    collectives[r] += shard.buckets;
    for (Param &param : local.params)
      std::memcpy(param.weight, local.reduced.data() + param.offset,
                  param.size * sizeof(float));
  });
  clearAccumulated();
  grewScale();
  ++steps;
  result.dataCollectives = collectives.front();
}

bool Trainer::Impl::overflowed(TrainStep &result) {
  if (std::isfinite(result.loss) && std::isfinite(result.gradNorm))
    return false;
  std::string what = std::isfinite(result.loss) ? "gradient norm" : "loss";
  std::string step = "training step " + std::to_string(result.step) + ": the ";
  if (spec.lossScale <= 0)
    throw Error(step + what + " is not finite (loss " +
                std::to_string(result.loss) + "); no weight was updated");
  // torch's GradScaler: skip the step, halve the scale. A scale this
  // small no longer scales anything: what overflows is the forward.
  result.skipped = true;
  lossScale *= 0.5;
  goodSteps = 0;
  if (lossScale < 1.0 / 16777216.0)
    throw Error(step + what + " is not finite even with the loss scaled " +
                "by " + std::to_string(result.lossScale) +
                ": the forward overflows, not the gradients; no weight was "
                "updated");
  return true;
}

void Trainer::Impl::grewScale() {
  if (spec.lossScale <= 0 || ++goodSteps < spec.lossScaleWindow)
    return;
  lossScale *= 2;
  goodSteps = 0;
}

void Trainer::Impl::clearAccumulated() {
  if (spec.accumulate == 1)
    return;
  forEachInParallel(ranks.size(), [&](size_t r) {
    for (Param &param : ranks[r].params)
      std::fill(param.accumulated.begin(), param.accumulated.end(), 0.f);
  });
}

void Trainer::Impl::gatherStates(LocalRank &local, bool toParams) {
  const Shard &shard = local.shard;
  for (int which = 0; which < 2; ++which) {
    std::vector<float> &owned = which ? local.ownedSecond : local.ownedFirst;
    if (owned.empty())
      continue;
    if (!toParams) {
      // Keep this replica's chunks of the whole states in `Param`s.
      forOwned(local, [&](Param &param, int64_t from, int64_t to,
                          int64_t index) {
        std::vector<float> &whole = which ? param.second : param.first;
        std::memcpy(owned.data() + index, whole.data() + (from - param.offset),
                    (to - from) * sizeof(float));
      });
      continue;
    }
    for (int64_t b = 0; b < shard.buckets; ++b)
      local.session->allGatherOverReplicas(
          local.rank, owned.data() + b * shard.chunk,
          local.reduced.data() + b * shard.bucket(), shard.chunk,
          "ZeRO-1: the optimizer states' all-gather for a checkpoint");
    for (Param &param : local.params) {
      std::vector<float> &whole = which ? param.second : param.first;
      whole.assign(local.reduced.data() + param.offset,
                   local.reduced.data() + param.offset + param.size);
    }
  }
  if (!toParams)
    for (Param &param : local.params) {
      param.first = {};
      param.second = {};
    }
}

/// The states file's safetensors header: per trainable weight, its
/// states (`exp_avg.`, `exp_avg_sq.` or `momentum_buffer.` + the weight's
/// name) in order, and the step.
std::string Trainer::Impl::stateHeader(const LocalRank &local) const {
  llvm::json::Object header;
  uint64_t offset = 0;
  auto add = [&](const std::string &name, const Param &param) {
    llvm::json::Array shape;
    for (int64_t d : param.spec->shape)
      shape.push_back(d);
    uint64_t bytes = static_cast<uint64_t>(param.size) * sizeof(float);
    header[name] = llvm::json::Object{
        {"dtype", "F32"},
        {"shape", std::move(shape)},
        {"data_offsets", llvm::json::Array{offset, offset + bytes}}};
    offset += bytes;
  };
  for (const Param &param : local.params) {
    if (spec.optimizer == "adamw") {
      add("exp_avg." + param.spec->name, param);
      add("exp_avg_sq." + param.spec->name, param);
    } else if (spec.momentum > 0) {
      add("momentum_buffer." + param.spec->name, param);
    }
  }
  header["__metadata__"] =
      llvm::json::Object{{"step", std::to_string(steps)},
                         {"optimizer", spec.optimizer},
                         {"rank", std::to_string(local.rank)}};
  std::string text;
  llvm::raw_string_ostream os(text);
  os << llvm::json::Value(std::move(header));
  os.flush();
  // safetensors pads the header with spaces to 8 bytes.
  text.append((8 - text.size() % 8) % 8, ' ');
  return text;
}

void Trainer::Impl::save(const std::string &dir) {
  namespace fs = std::filesystem;
  // ZeRO-1: every replica's chunks of the states, whole on each.
  if (zero())
    forEachInParallel(ranks.size(),
                      [&](size_t r) { gatherStates(ranks[r], true); });
  // Every replica holds the same weights and states: replica 0 writes.
  if (session.getDataReplica() != 0) {
    releaseWholeStates();
    return;
  }
  std::string building = dir + ".partial";
  bool root = session.getMpiRank() <= 0;
  if (root) {
    std::error_code ec;
    fs::remove_all(building, ec);
    if (!fs::create_directories(building, ec) || ec)
      throw Error("cannot create " + building + ": " + ec.message());
  }
  std::vector<char> none;
  session.broadcastFromRoot(none); // the folder exists for every process
  std::string sums;
  for (const LocalRank &local : ranks) {
    if (local.session != &session)
      continue;
    const RankSpec &rank = manifest.rankSpecs.at(local.rank);
    const char *image = session.getRankWeightFile(local.rank);
    writeFile(building + "/" + rank.file, image, rank.bytes);
    sums += sha256Hex(image, rank.bytes) + "  " + rank.file + "\n";
    std::string header = stateHeader(local);
    std::string state(8, '\0');
    uint64_t length = header.size();
    std::memcpy(state.data(), &length, 8); // little-endian hosts
    state += header;
    for (const Param &param : local.params)
      for (const std::vector<float> *s : {&param.first, &param.second})
        if (!s->empty())
          state.append(reinterpret_cast<const char *>(s->data()),
                       s->size() * sizeof(float));
    writeFile(building + "/" + stateFileName(local.rank), state.data(),
              state.size());
    sums += sha256Hex(state.data(), state.size()) + "  " +
            stateFileName(local.rank) + "\n";
  }
  std::vector<char> mine(sums.begin(), sums.end());
  std::vector<std::vector<char>> all = session.gatherFromLastStage(mine);
  if (root) {
    std::string lines;
    for (const std::vector<char> &part : all)
      lines.append(part.begin(), part.end());
    llvm::json::Object info{
        {"format", "tp-checkpoint"},
        {"format_version", 1},
        {"step", steps},
        {"updates", updates},
        {"loss_scale", lossScale},
        {"loss_scale_good_steps", goodSteps},
        {"optimizer", spec.optimizer},
        {"ranks", manifest.ranks},
        {"manifest_sha256", manifest.checksums.count("manifest.json")
                                ? manifest.checksums.at("manifest.json")
                                : std::string()}};
    std::string text;
    llvm::raw_string_ostream os(text);
    os << llvm::json::Value(std::move(info)) << "\n";
    os.flush();
    writeFile(building + "/trainer.json", text.data(), text.size());
    lines += sha256Hex(text.data(), text.size()) + "  trainer.json\n";
    writeFile(building + "/SHA256SUMS", lines.data(), lines.size());
    // Replace an older checkpoint only once the new one is whole.
    std::error_code ec;
    std::string old = dir + ".old";
    fs::remove_all(old, ec);
    if (fs::exists(dir))
      fs::rename(dir, old, ec);
    if (ec)
      throw Error("cannot replace " + dir + ": " + ec.message());
    fs::rename(building, dir, ec);
    if (ec)
      throw Error("cannot rename " + building + " to " + dir + ": " +
                  ec.message());
    fs::remove_all(old, ec);
  }
  session.broadcastFromRoot(none);
  releaseWholeStates();
}

void Trainer::Impl::releaseWholeStates() {
  if (!zero())
    return;
  for (LocalRank &local : ranks)
    for (Param &param : local.params) {
      param.first = {};
      param.second = {};
    }
}

void Trainer::Impl::resume(const std::string &dir) {
  std::map<std::string, std::string> sums =
      parseChecksums(readFile(dir + "/SHA256SUMS"), dir + "/SHA256SUMS");
  auto checked = [&](const std::string &name) {
    auto it = sums.find(name);
    if (it == sums.end())
      throw Error(dir + "/SHA256SUMS has no checksum for " + name +
                  " (is this a checkpoint of this artifact?)");
    std::string bytes = readFile(dir + "/" + name);
    if (sha256Hex(bytes.data(), bytes.size()) != it->second)
      throw Error(dir + "/" + name +
                  ": checksum mismatch: the checkpoint is corrupted");
    return bytes;
  };
  std::string infoText = checked("trainer.json");
  llvm::Expected<llvm::json::Value> info = llvm::json::parse(infoText);
  if (!info) {
    llvm::consumeError(info.takeError());
    throw Error(dir + "/trainer.json is not JSON");
  }
  const llvm::json::Object *object = info->getAsObject();
  std::optional<int64_t> step =
      object ? object->getInteger("step") : std::nullopt;
  std::optional<llvm::StringRef> optimizer =
      object ? object->getString("optimizer") : std::nullopt;
  std::optional<llvm::StringRef> manifestSum =
      object ? object->getString("manifest_sha256") : std::nullopt;
  if (!step || *step < 0 || !optimizer || !manifestSum)
    throw Error(dir + "/trainer.json lacks its step, optimizer or "
                      "manifest_sha256");
  // Checkpoints written before loss scaling: every step updated.
  std::optional<int64_t> updated = object->getInteger("updates");
  std::optional<double> scale = object->getNumber("loss_scale");
  std::optional<int64_t> good = object->getInteger("loss_scale_good_steps");
  if (updated && (*updated < 0 || *updated > *step))
    throw Error(dir + "/trainer.json: 'updates' is not in [0, step]");
  if (*optimizer != spec.optimizer)
    throw Error(dir + " was written by " + optimizer->str() + ", not " +
                spec.optimizer);
  auto sum = manifest.checksums.find("manifest.json");
  if (sum != manifest.checksums.end() && *manifestSum != sum->second)
    throw Error(dir +
                " is a checkpoint of another artifact (its manifest's "
                "sha256 is not " +
                manifest.dir + "'s)");
  for (LocalRank &local : ranks) {
    const RankSpec &rank = manifest.rankSpecs.at(local.rank);
    std::string image = checked(rank.file);
    if (image.size() != rank.bytes)
      throw Error(dir + "/" + rank.file + " has " +
                  std::to_string(image.size()) + " bytes, the artifact's " +
                  std::to_string(rank.bytes));
    checkSafeTensorsHeader(rank, image.data(), image.size(),
                           dir + "/" + rank.file);
    std::string state = checked(stateFileName(local.rank));
    if (zero())
      for (Param &param : local.params)
        allocateStates(param);
    // The states of this artifact's weights in this order, at the step.
    int64_t saved = steps;
    steps = *step;
    std::string header = stateHeader(local);
    steps = saved;
    uint64_t length = 0;
    if (state.size() >= 8)
      std::memcpy(&length, state.data(), 8);
    uint64_t expected = 8 + header.size();
    for (const Param &param : local.params)
      expected += (param.first.size() + param.second.size()) * sizeof(float);
    if (state.size() != expected || length != header.size() ||
        state.compare(8, length, header) != 0)
      throw Error(dir + "/" + stateFileName(local.rank) +
                  " does not hold the optimizer states of rank " +
                  std::to_string(local.rank) + "'s weights");
    std::memcpy(local.session->getRankWeightFile(local.rank), image.data(),
                image.size());
    const char *data = state.data() + 8 + length;
    for (Param &param : local.params)
      for (std::vector<float> *s : {&param.first, &param.second})
        if (!s->empty()) {
          std::memcpy(s->data(), data, s->size() * sizeof(float));
          data += s->size() * sizeof(float);
        }
    if (zero())
      gatherStates(local, false);
  }
  steps = *step;
  updates = updated.value_or(*step);
  if (spec.lossScale > 0 && scale && *scale > 0 && good) {
    lossScale = *scale;
    goodSteps = *good;
  }
}

Trainer::Trainer(Session &session) : impl(std::make_unique<Impl>(session)) {}
Trainer::~Trainer() = default;

TrainStep
Trainer::step(const std::vector<std::map<std::string, InputView>> &microbatches,
              double lr) {
  return impl->step(microbatches, lr);
}

int64_t Trainer::getStep() const { return impl->steps; }

void Trainer::save(const std::string &dir) { impl->save(dir); }

void Trainer::resume(const std::string &dir) { impl->resume(dir); }
