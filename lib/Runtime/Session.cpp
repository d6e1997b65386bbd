//===- Session.cpp - open an artifact once, run it many times -------------===//
//
// Every rank reads only its own weight file (checked against the manifest),
// binds its stage function's arguments once, and runs it per forward pass;
// the model's outputs end on the last stage's first rank. With threads the
// ranks' communicators live as long as the session, so their buffer pools
// carry over from one run to the next; with MPI this process is one rank;
// a --target cuda artifact runs one GPU per rank (rank % visible devices,
// or, under MPI, the process's rank on its node), with NCCL between them;
// a data-parallel replica's ranks take the GPUs after the replicas before
// it, and the data axis reduces on the host.
// Either way the model library is reached through its C ABI
// (tp_model_abi.h, ModelLibrary).
//
//===----------------------------------------------------------------------===//

#include "tp/Runtime/Session.h"

#include "BlasKernels.h"
#include "RankThreads.h"

#include "tp/Runtime/Communicators.h"
#include "tp/Runtime/ModelLibrary.h"

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <dlfcn.h>
#include <mutex>
#include <sstream>
#include <thread>
#include <tuple>

using namespace tp::rt;

std::string tp::rt::formatShape(const std::vector<int64_t> &shape) {
  std::ostringstream os;
  os << "[";
  for (size_t i = 0; i < shape.size(); ++i)
    os << (i ? ", " : "") << shape[i];
  os << "]";
  return os.str();
}

namespace {

/// One program of an artifact: the forward pass (a generation artifact's
/// decode step), or one of a generation artifact's prefill chunks.
struct Program {
  const std::vector<StageSpec> &stages;
  const std::vector<TensorSpec> &inputs, &outputs;
};

Program mainProgram(const Manifest &manifest) {
  return {manifest.stages, manifest.inputs, manifest.outputs};
}

Program prefillProgram(const Manifest &manifest, size_t chunk) {
  const PrefillSpec &prefill = manifest.prefill.at(chunk);
  return {prefill.stages, prefill.inputs, prefill.outputs};
}

/// Program `program` of `manifest`: kMainProgram, or a prefill chunk's
/// index.
Program programOf(const Manifest &manifest, int program) {
  return program == Session::kMainProgram ? mainProgram(manifest)
                                          : prefillProgram(manifest, program);
}

using Buffer = std::unique_ptr<char, void (*)(void *)>;

struct WholeOutput;
/// Split outputs put together, by name.
using Assembly = std::map<std::string, WholeOutput>;

/// A model output's whole-batch data on one rank, 64-byte aligned like the
/// buffers generated code writes: the stage function writes each
/// micro-batch's slice of it in place, so that no copy follows a forward
/// pass (a GPT-2 batch's logits are 206 MB).
struct WholeOutput {
  Buffer buffer{nullptr, release};
  size_t bytes = 0;
  char *data() const { return buffer.get(); }
  size_t size() const { return bytes; }
  std::vector<char> copy() const {
    return bytes ? std::vector<char>(data(), data() + bytes)
                 : std::vector<char>();
  }
};

/// One rank's bound stage: weights, argument pointers, result buffers.
/// With micro-batches, input arguments advance by one micro-batch per call
/// and the model's outputs collect every micro-batch's slice. A rank's
/// programs (decode step and prefill) share its weights and KV caches.
struct BoundRank {
  std::shared_ptr<RankWeights> weights;
  std::vector<void *> args;
  /// For each input argument: its index, whole-batch data, bytes per call.
  std::vector<std::tuple<size_t, const char *, int64_t>> inputSlices;
  /// Whole-batch outputs of the last stage, by result slot.
  std::map<size_t, WholeOutput> outputs;
  std::vector<std::unique_ptr<char, void (*)(void *)>> results;
  /// KV caches by name, zeroed once and kept between runs (each step
  /// writes them in place).
  std::shared_ptr<std::map<std::string, Buffer>> caches;
  std::vector<void *> resultPointers;
  const StageSpec *stage = nullptr;
};

/// A fresh KV cache's contents: zeros, or, with TP_POISON_CACHES=1 in the
/// environment, quiet NaNs, so that any program that computes with a
/// position no call has written yet returns NaN (the generation tests run
/// so, to show that attention reads only the filled positions).
void initCache(char *data, const TensorSpec &arg) {
  const char *poison = std::getenv("TP_POISON_CACHES");
  if (!poison || std::strcmp(poison, "1") != 0) {
    std::memset(data, 0, arg.bytes());
    return;
  }
  auto fill = [&](auto nan) {
    for (int64_t i = 0, e = arg.bytes() / int64_t(sizeof(nan)); i < e; ++i)
      std::memcpy(data + i * sizeof(nan), &nan, sizeof(nan));
  };
  if (arg.dtype == "F32")
    fill(uint32_t(0x7FC00000));
  else if (arg.dtype == "F64")
    fill(uint64_t(0x7FF8000000000000ULL));
  else if (arg.dtype == "F16")
    fill(uint16_t(0x7E00));
  else if (arg.dtype == "BF16")
    fill(uint16_t(0x7FC0));
  else
    std::memset(data, 0, arg.bytes());
}

/// Binds rank `rank`'s stage of `program` and everything but the model
/// inputs, which bindInputs points at each run's data. The weights and
/// caches come from `shared` (a binding of another program of the rank);
/// without it, the rank's weights are loaded and its caches allocated.
BoundRank bindRank(const Manifest &manifest, const Program &program,
                   int32_t rank, const BoundRank *shared = nullptr) {
  BoundRank bound;
  const RankSpec &spec = manifest.rankSpecs.at(rank);
  bound.stage = &program.stages.at(spec.stage);
  if (shared) {
    bound.weights = shared->weights;
    bound.caches = shared->caches;
  } else {
    bound.weights =
        std::make_shared<RankWeights>(loadRankWeights(manifest, rank));
    bound.caches = std::make_shared<std::map<std::string, Buffer>>();
  }
  for (const TensorSpec &arg : bound.stage->args) {
    if (arg.kind == "input") {
      bound.inputSlices.emplace_back(bound.args.size(), nullptr, arg.bytes());
      bound.args.push_back(nullptr);
    } else if (arg.kind == "weight") {
      auto it = bound.weights->byName.find(arg.name);
      if (it == bound.weights->byName.end())
        throw Error("rank " + std::to_string(rank) + ": weight '" + arg.name +
                    "' is not in " + spec.file);
      bound.args.push_back(it->second);
    } else if (arg.kind == "cache") {
      auto it = bound.caches->find(arg.name);
      if (it == bound.caches->end()) {
        it = bound.caches
                 ->emplace(arg.name,
                           Buffer(static_cast<char *>(allocate(arg.bytes())),
                                  release))
                 .first;
        initCache(it->second.get(), arg);
      }
      bound.args.push_back(it->second.get());
    } else {
      throw Error("stage argument of unknown kind '" + arg.kind + "'");
    }
  }
  for (const TensorSpec &result : bound.stage->results) {
    size_t slot = bound.resultPointers.size();
    size_t whole = result.bytes() * manifest.microbatches;
    if (result.kind == "output" && whole) {
      // Written in place (runForward); filled once here, so that no run
      // pays for its first touch of the pages.
      WholeOutput &output = bound.outputs[slot];
      output.buffer.reset(static_cast<char *>(allocate(whole)));
      output.bytes = whole;
      std::memset(output.data(), 0, whole);
      bound.results.emplace_back(nullptr, release);
      bound.resultPointers.push_back(output.data());
      continue;
    }
    if (result.kind == "output")
      bound.outputs[slot];
    bound.results.emplace_back(static_cast<char *>(allocate(result.bytes())),
                               release);
    bound.resultPointers.push_back(bound.results.back().get());
  }
  return bound;
}

void bindInputs(BoundRank &bound, const std::map<std::string, InputView> &in) {
  size_t next = 0;
  for (const TensorSpec &arg : bound.stage->args)
    if (arg.kind == "input")
      std::get<1>(bound.inputSlices[next++]) =
          static_cast<const char *>(in.at(arg.name).data);
}

/// One forward pass: every micro-batch through this rank's stage. Stages
/// overlap because a send does not wait for its recv: stage 0 runs ahead
/// into the next micro-batch while stage 1 works on the previous one.
template <typename Call>
void runForward(BoundRank &bound, int64_t microbatches, Call call) {
  for (int64_t m = 0; m < microbatches; ++m) {
    // Stage functions read their inputs and never write them.
    for (auto &[index, data, bytes] : bound.inputSlices)
      bound.args[index] = const_cast<char *>(data + m * bytes);
    // The model's outputs are written where the whole batch's are kept (an
    // empty one keeps its own buffer).
    for (auto &[slot, whole] : bound.outputs)
      if (whole.size())
        bound.resultPointers[slot] =
            whole.data() + m * (whole.size() / microbatches);
    call();
  }
}

/// `warmup` untimed forward passes, then `repeat` timed ones, each
/// followed by `finish` (the rank's part of putting split outputs
/// together); returns seconds per timed pass.
template <typename Call, typename Finish>
double runTimed(BoundRank &bound, int64_t microbatches, int64_t warmup,
                int64_t repeat, Call call, Finish finish) {
  for (int64_t i = 0; i < warmup; ++i) {
    runForward(bound, microbatches, call);
    finish();
  }
  auto start = std::chrono::steady_clock::now();
  for (int64_t i = 0; i < repeat; ++i) {
    runForward(bound, microbatches, call);
    finish();
  }
  std::chrono::duration<double> elapsed =
      std::chrono::steady_clock::now() - start;
  return elapsed.count() / static_cast<double>(repeat);
}

/// Rank that holds the model's outputs: the last stage's first rank.
int32_t outputRank(const Program &program) {
  return program.stages.back().ranks.front();
}

/// Positions of the model outputs among the last stage's results.
std::vector<size_t> outputSlots(const Program &program) {
  std::vector<size_t> slots;
  const StageSpec &last = program.stages.back();
  for (const TensorSpec &output : program.outputs) {
    size_t slot = 0;
    while (slot < last.results.size() && last.results[slot].name != output.name)
      ++slot;
    if (slot == last.results.size())
      throw Error("output '" + output.name + "' is not a result of " +
                  last.function);
    slots.push_back(slot);
  }
  return slots;
}

/// Reads element `i` of an integer tensor as int64 (unsigned values past
/// INT64_MAX saturate).
int64_t readInteger(const char *base, int64_t i, const std::string &dtype) {
  int64_t bytes = dtypeNameBytes(dtype);
  const char *p = base + i * bytes;
  if (dtype[0] == 'I') {
    switch (bytes) {
    case 8: {
      int64_t x;
      std::memcpy(&x, p, 8);
      return x;
    }
    case 4: {
      int32_t x;
      std::memcpy(&x, p, 4);
      return x;
    }
    case 2: {
      int16_t x;
      std::memcpy(&x, p, 2);
      return x;
    }
    default:
      return static_cast<int8_t>(*p);
    }
  }
  uint64_t x = 0;
  std::memcpy(&x, p, bytes);
  return static_cast<int64_t>(
      std::min<uint64_t>(x, static_cast<uint64_t>(INT64_MAX)));
}

/// Every value of an input read as indices lies in its index range, as
/// onnxruntime requires (an id past the vocabulary would read past a
/// table). The error names the input, the first bad value and where it is.
void checkIndices(const TensorSpec &input, const InputView &view) {
  auto [low, high] = *input.indexRange;
  const char *base = static_cast<const char *>(view.data);
  for (int64_t i = 0, e = input.numElements(); i < e; ++i) {
    int64_t v = readInteger(base, i, input.dtype);
    if (v >= low && v <= high)
      continue;
    std::vector<int64_t> index(view.shape.size());
    for (int64_t d = static_cast<int64_t>(index.size()) - 1, rest = i; d >= 0;
         --d) {
      index[d] = rest % view.shape[d];
      rest /= view.shape[d];
    }
    throw Error("input '" + input.name + "' from " + view.source + ": value " +
                std::to_string(v) + " at " + formatShape(index) +
                " is outside the valid range [" + std::to_string(low) + ", " +
                std::to_string(high) + "] (it indexes a table of " +
                std::to_string(high + 1) + " entries)");
  }
}

/// Checks `inputs` against the program's signature.
void checkInputs(const Program &program,
                 const std::map<std::string, InputView> &inputs) {
  std::string expected;
  for (const TensorSpec &input : program.inputs)
    expected += (expected.empty() ? "" : ", ") + input.name;
  for (const auto &[name, view] : inputs)
    if (std::none_of(program.inputs.begin(), program.inputs.end(),
                     [&](const TensorSpec &s) { return s.name == name; }))
      throw Error("unknown input '" + name +
                  "'; the model's inputs are: " + expected);
  for (const TensorSpec &input : program.inputs) {
    auto it = inputs.find(input.name);
    if (it == inputs.end())
      throw Error("missing input '" + input.name + "' (" + input.dtype + " " +
                  formatShape(input.shape) + ")");
    const InputView &view = it->second;
    if (view.dtype != input.dtype || view.shape != input.shape)
      throw Error("input '" + input.name + "' from " + view.source +
                  ": expected " + input.dtype + " " + formatShape(input.shape) +
                  ", got " + view.dtype + " " + formatShape(view.shape));
    if (!view.data && input.bytes() > 0)
      throw Error("input '" + input.name + "' from " + view.source +
                  " has no data");
    if (input.indexRange)
      checkIndices(input, view);
  }
}

/// The error of a failed run: ranks that failed on their own first, then
/// the "aborted" echoes of their peers.
Error collectErrors(const std::vector<std::string> &errors) {
  std::string text;
  for (bool echoes : {false, true})
    for (const std::string &error : errors)
      if (!error.empty() &&
          (error.find(" aborted: ") != std::string::npos) == echoes)
        text += (text.empty() ? "" : "\n") + error;
  return Error(text);
}

bool anyError(const std::vector<std::string> &errors) {
  return std::any_of(errors.begin(), errors.end(),
                     [](const std::string &e) { return !e.empty(); });
}

} // namespace

class Session::Impl {
public:
  Impl(const std::string &artifact, SessionOptions options);
  ~Impl();
  void reorderCaches(const std::vector<int64_t> &source);
  /// Runs `program`: the forward pass (decode step), or a prefill chunk;
  /// with `collect`, returns its outputs.
  std::vector<OutputTensor> run(const std::map<std::string, InputView> &inputs,
                                int64_t warmup, int64_t repeat, int program,
                                bool collect = true);
  OutputBlocks getOutputBlocks(const std::string &name, int program) const;

  SessionOptions options;
  std::string artifact;
  Manifest manifest;
  void *library = nullptr;
  double seconds = 0;
  /// OpenBLAS's threads per rank, as the loaded library reports them.
  int blasThreads = 0;
  RunTiming timing;

  /// This process's binding of rank `rank` of the main program, for
  /// training; throws for a CUDA artifact or a rank elsewhere.
  const BoundRank &trainingRank(int32_t rank) const;
  /// The ranks this process binds.
  std::vector<int32_t> localRanks() const;

private:
  /// Throws unless `index` names a program of the artifact.
  void checkProgram(int index) const {
    if (index != Session::kMainProgram &&
        (index < 0 || static_cast<size_t>(index) >= manifest.prefill.size()))
      throw Error(artifact + " has no prefill chunk " + std::to_string(index) +
                  " (it has " + std::to_string(manifest.prefill.size()) + ")");
  }
  std::chrono::milliseconds timeout() const {
    return std::chrono::milliseconds(
        static_cast<int64_t>(options.timeoutSeconds * 1000));
  }
  /// Binds every rank in its own thread (weights are read in parallel).
  void bindAll();
  void openCuda();
  /// The model's outputs from the ranks' results: each split output as
  /// the ranks put it together in `assembled`.
  std::vector<OutputTensor> collectOutputs(const Program &program,
                                           const std::vector<BoundRank> &ranks,
                                           const Assembly &assembled) const;
  /// Thread and CUDA ranks put each split output together themselves,
  /// after each forward pass and inside its time, each copying its own
  /// block in (in parallel, where an all-gather had every rank copy every
  /// block): `assembly` (null when the run's outputs are not wanted).
  void runThreads(const Program &program, std::vector<BoundRank> &ranks,
                  int64_t warmup, int64_t repeat, Assembly *assembly);
  void runCuda(const Program &program, std::vector<BoundRank> &ranks,
               int64_t warmup, int64_t repeat, Assembly *assembly);
  /// `program`'s assembly, with a buffer for each split output.
  Assembly &assemblyFor(const Program &program, int index);
  /// The bindings of program `index` on this process's ranks.
  std::vector<BoundRank> &boundOf(int index) {
    return index == Session::kMainProgram ? bound : prefillBound.at(index);
  }
  const std::vector<BoundRank> &boundOf(int index) const {
    return index == Session::kMainProgram ? bound : prefillBound.at(index);
  }
  /// Copies rank `rank`'s blocks of the split outputs into `assembly`.
  void placeRankBlocks(const Program &program, const BoundRank &mine,
                       int32_t rank, Assembly &assembly) const;
  std::vector<OutputTensor> runMpi(const Program &program,
                                   std::vector<BoundRank> &ranks,
                                   int64_t warmup, int64_t repeat,
                                   bool collect);
  /// MPI: the model's outputs on rank 0, from the ranks that hold them.
  std::vector<OutputTensor> gatherOutputs(const Program &program,
                                          const BoundRank &mine,
                                          RankContext &context);

public:
  std::vector<std::vector<char>>
  gatherFromLastStage(const std::vector<char> &mine);
  void broadcastFromRoot(std::vector<char> &data);
  int32_t getMpiRank() const { return mpi ? mpiRank : -1; }
  /// The context of this process's rank `rank` and the data axis's group.
  std::pair<RankContext *, Group> dataAxis(int32_t rank);
  /// Data-parallel replicas in the world, and this session's.
  int32_t replicas = 1, replica = 0;
  std::shared_ptr<ThreadWorld> getThreadWorld() const {
    return mpi ? nullptr : world;
  }
  const std::vector<RankTrace> &getTrace() const { return traces; }

private:
  bool mpi = false;
  /// Threads: every rank; MPI: this process's rank alone, at mpiRank.
  std::vector<BoundRank> bound;
  /// Each prefill chunk's bindings, beside `bound` (same weights, caches).
  std::vector<std::vector<BoundRank>> prefillBound;
  /// The split outputs put together, of the main program and each chunk.
  Assembly assembled;
  std::vector<Assembly> prefillAssembled;
  int32_t mpiRank = 0;
  std::shared_ptr<ThreadWorld> world;
  /// Thread ranks: the threads that run ranks 1 .. N-1, kept between runs.
  std::unique_ptr<detail::RankThreads> rankThreads;
  std::vector<std::unique_ptr<RankContext>> contexts;
  /// Seconds each context has spent communicating (createTimedRankContext),
  /// one per context, sized before they are made.
  std::vector<double> communication;
  /// With options.trace, each context's timeline (beside `communication`,
  /// sized with it); empty without.
  std::vector<RankTrace> traces;
  std::unique_ptr<ModelLibrary> model;
  /// The library's ranks, beside `bound`.
  std::vector<std::unique_ptr<ModelLibrary::Rank>> modelRanks;
  std::mutex modelRanksMutex;
  bool cuda = false;
  /// Set by a failed run: peers may have been left mid-collective.
  std::string broken;

  /// The timeline of this process's `index`-th context; null when not
  /// tracing.
  RankTrace *traceOf(size_t index) {
    return index < traces.size() ? &traces[index] : nullptr;
  }
  /// Calls `call` (one forward pass of the stage function), recorded as a
  /// "forward" interval of this process's `index`-th context's timeline.
  template <typename Call> void traced(size_t index, Call call) {
    RankTrace *trace = traceOf(index);
    if (!trace)
      return call();
    double start = traceMicros();
    call();
    trace->events.push_back({"forward", "", 0, start, traceMicros()});
  }
};

/// This process's rank among those on its node, as the MPI launcher says
/// (Open MPI, MPICH, Slurm); `rank` when none does.
static int32_t localRank(int32_t rank) {
  for (const char *name :
       {"OMPI_COMM_WORLD_LOCAL_RANK", "MPI_LOCALRANKID", "SLURM_LOCALID"})
    if (const char *value = std::getenv(name)) {
      char *end = nullptr;
      long parsed = std::strtol(value, &end, 10);
      if (end != value && *end == '\0' && parsed >= 0 && parsed < kMaxRanks)
        return static_cast<int32_t>(parsed);
    }
  return rank;
}

/// How many ranks share this node's cores: under MPI the launcher's count of
/// processes on the node (Open MPI, MPICH, Slurm), else `ranks` (all of
/// them, as with threads).
static int ranksOnNode(bool mpi, int64_t ranks) {
  if (mpi)
    for (const char *name : {"OMPI_COMM_WORLD_LOCAL_SIZE", "MPI_LOCALNRANKS",
                             "SLURM_NTASKS_PER_NODE"})
      if (const char *value = std::getenv(name)) {
        char *end = nullptr;
        long parsed = std::strtol(value, &end, 10);
        if (end != value && *end == '\0' && parsed > 0 && parsed < kMaxRanks)
          return static_cast<int>(parsed);
      }
  return static_cast<int>(std::clamp<int64_t>(ranks, 1, kMaxRanks));
}

Session::Impl::Impl(const std::string &artifact, SessionOptions options)
    : options(std::move(options)), artifact(artifact) {
  manifest = loadManifest(artifact);
  if (manifest.target != "cpu" && manifest.target != "cuda")
    throw Error(artifact + " was compiled with --target " +
                (manifest.target.empty() ? "none" : manifest.target) +
                "; tp-run runs --target cpu and cuda artifacts");
  if (this->options.launcher != "threads" && this->options.launcher != "mpi")
    throw Error("unknown launcher '" + this->options.launcher +
                "' (threads or mpi)");
  mpi = this->options.launcher == "mpi";
  replicas = manifest.training
                 ? static_cast<int32_t>(manifest.training->dataParallel)
                 : 1;
  if (this->options.dataReplica < 0 || this->options.dataReplica >= replicas)
    throw Error(artifact + ": data-parallel replica " +
                std::to_string(this->options.dataReplica) + " of " +
                std::to_string(replicas));
  replica = this->options.dataReplica;
  if (mpi && !haveMpi())
    throw Error("this tp-run was built without MPI; use --launcher threads");
  // The library's static constructors run when it is loaded: check it
  // first, then check that it was compiled for this manifest.
  std::string libraryPath = verifyLibrary(manifest);
  if (manifest.target == "cpu") {
    chooseBlasKernels();
    chooseBlasThreads(ranksOnNode(mpi, manifest.ranks * replicas));
  }
  library = dlopen(libraryPath.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (!library)
    throw Error(std::string("cannot load ") + libraryPath + ": " + dlerror());
  if (manifest.target == "cpu")
    blasThreads = blasThreadsOf(library);
  model = std::make_unique<ModelLibrary>(library, libraryPath);
  if (model->target() != manifest.target)
    throw Error(libraryPath + " is a --target " + model->target() +
                " library, but " + artifact + "/manifest.json says --target " +
                manifest.target);
  checkLibrarySignature(manifest, model->signature());
  cuda = manifest.target == "cuda";
  if (options.trace && cuda)
    throw Error("tracing records the ranks' collectives as the CPU runtime "
                "makes them; " +
                artifact +
                " is a --target cuda artifact, whose NCCL calls run inside "
                "its library");
  if (mpi) {
    auto context = createMpiRankContext(timeout());
    int32_t size = static_cast<int32_t>(manifest.ranks);
    if (context->worldSize() != size * replicas)
      throw Error("the artifact was built for " +
                  std::to_string(size * replicas) + " ranks (tp " +
                  std::to_string(manifest.tp) + " x pp " +
                  std::to_string(manifest.pp) +
                  (replicas > 1 ? " x data " + std::to_string(replicas) : "") +
                  ") but mpirun started " +
                  std::to_string(context->worldSize()) + " processes");
    int32_t worldRank = context->rank();
    if (replicas > 1) {
      replica = context->rank() / size;
      context =
          createReplicaRankContext(std::move(context), replica * size, size);
    }
    mpiRank = context->rank();
    communication.assign(1, 0);
    if (options.trace && !cuda)
      traces.assign(1, RankTrace{mpiRank, {}});
    contexts.push_back(createTimedRankContext(std::move(context),
                                              &communication[0], traceOf(0)));
    bound.push_back(bindRank(manifest, mainProgram(manifest), mpiRank));
    prefillBound.resize(manifest.prefill.size());
    for (size_t c = 0; c < manifest.prefill.size(); ++c)
      prefillBound[c].push_back(bindRank(manifest, prefillProgram(manifest, c),
                                         mpiRank, &bound.back()));
    if (!cuda) {
      modelRanks.push_back(
          model->createRank(mpiRank, size, contexts.front().get()));
      return;
    }
    // One GPU per process, by its rank on its node (among all replicas'
    // processes); each replica's rank 0 creates its NCCL id and MPI carries
    // it to the replica's other ranks, on any node.
    int devices = model->deviceCount();
    if (devices < 1)
      throw Error("rank " + std::to_string(mpiRank) +
                  ": no CUDA device is visible to this process");
    std::vector<char> id;
    if (mpiRank == 0)
      id = model->uniqueId();
    broadcastFromRoot(id);
    if (id.size() != TP_MODEL_UNIQUE_ID_BYTES)
      throw Error("rank " + std::to_string(mpiRank) +
                  ": rank 0 sent an NCCL id of " + std::to_string(id.size()) +
                  " bytes");
    modelRanks.push_back(model->createRank(mpiRank, size, nullptr,
                                           localRank(worldRank) % devices, id));
    return;
  }
  if (cuda) {
    openCuda();
    return;
  }
  bindAll();
  int32_t size = static_cast<int32_t>(manifest.ranks);
  world = this->options.world ? this->options.world
                              : createThreadWorld(size * replicas, timeout());
  rankThreads = std::make_unique<detail::RankThreads>(
      size, threadRankAwake(size * replicas));
  communication.assign(manifest.ranks, 0);
  if (options.trace)
    for (int32_t rank = 0; rank < manifest.ranks; ++rank)
      traces.push_back(RankTrace{rank, {}});
  for (int32_t rank = 0; rank < manifest.ranks; ++rank) {
    std::unique_ptr<RankContext> context =
        createThreadRankContext(world, replica * size + rank);
    if (replicas > 1)
      context =
          createReplicaRankContext(std::move(context), replica * size, size);
    contexts.push_back(createTimedRankContext(
        std::move(context), &communication[rank], traceOf(rank)));
    modelRanks.push_back(model->createRank(
        rank, static_cast<int32_t>(manifest.ranks), contexts.back().get()));
  }
}

Session::Impl::~Impl() {
  // GPU ranks and communicators go first, while the library that created
  // them is loaded. The library stays loaded (it is never dlclose'd): a
  // CUDA runtime inside it may still run its own teardown at exit. The
  // rank threads stop first: nothing of theirs runs past here.
  rankThreads.reset();
  modelRanks.clear();
  contexts.clear();
  bound.clear();
}

void Session::Impl::bindAll() {
  int32_t ranks = static_cast<int32_t>(manifest.ranks);
  bound.resize(ranks);
  prefillBound.resize(manifest.prefill.size());
  for (std::vector<BoundRank> &chunk : prefillBound)
    chunk.resize(ranks);
  std::vector<std::string> errors(ranks);
  std::vector<std::thread> threads;
  for (int32_t rank = 0; rank < ranks; ++rank)
    threads.emplace_back([&, rank] {
      try {
        bound[rank] = bindRank(manifest, mainProgram(manifest), rank);
        for (size_t c = 0; c < manifest.prefill.size(); ++c)
          prefillBound[c][rank] = bindRank(
              manifest, prefillProgram(manifest, c), rank, &bound[rank]);
      } catch (const std::exception &e) {
        errors[rank] = e.what();
      }
    });
  for (std::thread &thread : threads)
    thread.join();
  if (anyError(errors))
    throw collectErrors(errors);
}

/// Host data is bound first, so that a bad weight file fails before NCCL
/// waits for every rank; then one GPU and communicator per rank.
void Session::Impl::openCuda() {
  int32_t ranks = static_cast<int32_t>(manifest.ranks);
  // NCCL refuses two ranks of one communicator on the same GPU.
  int devices = model->deviceCount();
  if (devices < ranks)
    throw Error(artifact + " runs " + std::to_string(ranks) +
                " ranks, one per GPU, but " + std::to_string(devices) +
                " CUDA device(s) are visible");
  bindAll();
  // Data-parallel replicas: the GPUs in replica-major order, and the
  // replicas' host collectives over the data axis (the trainer reduces the
  // gradients on the host, where its optimizer runs); each replica is a
  // Session whose NCCL communicator spans its own ranks.
  int32_t firstDevice = replica * ranks;
  if (replicas > 1) {
    world = this->options.world
                ? this->options.world
                : createThreadWorld(ranks * replicas, timeout());
    communication.assign(ranks, 0);
    for (int32_t rank = 0; rank < ranks; ++rank) {
      std::unique_ptr<RankContext> context = createReplicaRankContext(
          createThreadRankContext(world, firstDevice + rank), firstDevice,
          ranks);
      contexts.push_back(createTimedRankContext(
          std::move(context), &communication[rank], traceOf(rank)));
    }
  }
  std::vector<char> id = model->uniqueId();
  modelRanks.resize(ranks);
  std::vector<std::string> errors(ranks);
  std::vector<std::thread> threads;
  for (int32_t rank = 0; rank < ranks; ++rank)
    threads.emplace_back([&, rank] {
      try {
        auto gpu = model->createRank(rank, ranks, nullptr,
                                     (firstDevice + rank) % devices, id);
        std::lock_guard<std::mutex> lock(modelRanksMutex);
        modelRanks[rank] = std::move(gpu);
      } catch (const std::exception &e) {
        errors[rank] = e.what();
        std::lock_guard<std::mutex> lock(modelRanksMutex);
        for (auto &gpu : modelRanks)
          if (gpu)
            gpu->abort();
      }
    });
  for (std::thread &thread : threads)
    thread.join();
  if (anyError(errors))
    throw collectErrors(errors);
}

/// Block `t` of split output `spec` (of `blockShape`: `spec.shape` but for
/// the split dim) copied to its place in `whole`; what lies past the end of
/// the split dim is padding, left out.
static void placeBlock(const TensorSpec &spec,
                       const std::vector<int64_t> &blockShape, size_t t,
                       const char *block, char *whole) {
  size_t dim = spec.splitDim;
  int64_t outer = 1, inner = dtypeNameBytes(spec.dtype);
  for (size_t d = 0; d < dim; ++d)
    outer *= spec.shape[d];
  for (size_t d = dim + 1; d < spec.shape.size(); ++d)
    inner *= spec.shape[d];
  int64_t size = spec.shape[dim], stride = blockShape[dim];
  int64_t begin = static_cast<int64_t>(t) * stride;
  int64_t count = std::min(stride, size - begin);
  if (count <= 0)
    return;
  for (int64_t o = 0; o < outer; ++o)
    std::memcpy(whole + (o * size + begin) * inner, block + o * stride * inner,
                count * inner);
}

/// The whole of split output `spec` from the blocks of its ranks, each of
/// `blockShape` (`spec.shape` but for the split dim), past whose end the
/// last blocks hold padding.
static std::vector<char>
assembleBlocks(const TensorSpec &spec, const std::vector<int64_t> &blockShape,
               const std::vector<const char *> &blocks) {
  std::vector<char> whole(spec.bytes());
  for (size_t t = 0; t < blocks.size(); ++t)
    placeBlock(spec, blockShape, t, blocks[t], whole.data());
  return whole;
}

/// The result slot of each last-stage rank holding `output`'s blocks.
static const TensorSpec &lastResult(const Program &program, size_t slot) {
  return program.stages.back().results.at(slot);
}

/// `shape` with dim 0 `microbatches` times larger (a stage result's shape
/// as the whole-batch buffer holds it).
static std::vector<int64_t> wholeBatch(std::vector<int64_t> shape,
                                       int64_t microbatches) {
  if (!shape.empty())
    shape[0] *= microbatches;
  return shape;
}

Assembly &Session::Impl::assemblyFor(const Program &program, int index) {
  if (prefillAssembled.size() < manifest.prefill.size())
    prefillAssembled.resize(manifest.prefill.size());
  Assembly &assembly =
      index == Session::kMainProgram ? assembled : prefillAssembled.at(index);
  for (const TensorSpec &spec : program.outputs) {
    if (spec.splitDim < 0 || assembly.count(spec.name))
      continue;
    WholeOutput &whole = assembly[spec.name];
    whole.bytes = spec.bytes();
    if (!whole.bytes)
      continue;
    // Touched once here, so that no timed run pays for its first touch.
    whole.buffer.reset(static_cast<char *>(allocate(whole.bytes)));
    std::memset(whole.data(), 0, whole.bytes);
  }
  return assembly;
}

void Session::Impl::placeRankBlocks(const Program &program,
                                    const BoundRank &mine, int32_t rank,
                                    Assembly &assembly) const {
  const std::vector<int32_t> &last = program.stages.back().ranks;
  auto it = std::find(last.begin(), last.end(), rank);
  if (it == last.end())
    return;
  std::vector<size_t> slots = outputSlots(program);
  for (size_t i = 0; i < slots.size(); ++i) {
    const TensorSpec &spec = program.outputs[i];
    if (spec.splitDim < 0)
      continue;
    WholeOutput &whole = assembly.at(spec.name);
    if (!whole.size())
      continue;
    placeBlock(
        spec,
        wholeBatch(lastResult(program, slots[i]).shape, manifest.microbatches),
        it - last.begin(), mine.outputs.at(slots[i]).data(), whole.data());
  }
}

std::vector<OutputTensor>
Session::Impl::collectOutputs(const Program &program,
                              const std::vector<BoundRank> &ranks,
                              const Assembly &assembly) const {
  std::vector<OutputTensor> outputs;
  std::vector<size_t> slots = outputSlots(program);
  const BoundRank &holder = ranks.at(outputRank(program));
  for (size_t i = 0; i < slots.size(); ++i) {
    const TensorSpec &spec = program.outputs[i];
    const WholeOutput &whole = spec.splitDim < 0 ? holder.outputs.at(slots[i])
                                                 : assembly.at(spec.name);
    outputs.push_back({spec.name, spec.dtype, spec.shape, whole.copy()});
  }
  return outputs;
}

OutputBlocks Session::Impl::getOutputBlocks(const std::string &name,
                                            int index) const {
  checkProgram(index);
  Program program = programOf(manifest, index);
  const std::vector<BoundRank> &ranks = boundOf(index);
  std::vector<size_t> slots = outputSlots(program);
  for (size_t i = 0; i < slots.size(); ++i) {
    const TensorSpec &spec = program.outputs[i];
    if (spec.name != name)
      continue;
    OutputBlocks result;
    result.dim = spec.splitDim;
    if (mpi) {
      // This process's rank alone: its block, if it is in the last stage.
      const std::vector<int32_t> &last = program.stages.back().ranks;
      auto it = std::find(last.begin(), last.end(), mpiRank);
      const BoundRank &mine = ranks.front();
      bool holds =
          spec.splitDim < 0 ? mpiRank == outputRank(program) : it != last.end();
      if (holds)
        result.blocks.push_back(mine.outputs.at(slots[i]).data());
      result.firstBlock = spec.splitDim < 0 ? 0 : it - last.begin();
      result.blockShape = spec.splitDim < 0
                              ? spec.shape
                              : wholeBatch(lastResult(program, slots[i]).shape,
                                           manifest.microbatches);
      return result;
    }
    if (spec.splitDim < 0) {
      result.blocks.push_back(
          ranks.at(outputRank(program)).outputs.at(slots[i]).data());
      result.blockShape = spec.shape;
      return result;
    }
    for (int32_t rank : program.stages.back().ranks)
      result.blocks.push_back(ranks.at(rank).outputs.at(slots[i]).data());
    result.blockShape =
        wholeBatch(lastResult(program, slots[i]).shape, manifest.microbatches);
    return result;
  }
  throw Error(artifact + " has no output '" + name + "'");
}

std::vector<OutputTensor>
Session::Impl::run(const std::map<std::string, InputView> &inputs,
                   int64_t warmup, int64_t repeat, int index, bool collect) {
  if (!broken.empty())
    throw Error("this session cannot run again: an earlier run failed (" +
                broken + ")");
  checkProgram(index);
  Program program = programOf(manifest, index);
  std::vector<BoundRank> &ranks = boundOf(index);
  checkInputs(program, inputs);
  warmup = std::max<int64_t>(0, warmup);
  repeat = std::max<int64_t>(1, repeat);
  for (BoundRank &rank : ranks)
    bindInputs(rank, inputs);
  try {
    if (mpi)
      return runMpi(program, ranks, warmup, repeat, collect);
    Assembly *assembly = collect ? &assemblyFor(program, index) : nullptr;
    if (cuda)
      runCuda(program, ranks, warmup, repeat, assembly);
    else
      runThreads(program, ranks, warmup, repeat, assembly);
  } catch (const std::exception &e) {
    broken = std::string(e.what()).substr(0, 200);
    throw;
  }
  if (!collect)
    return {};
  return collectOutputs(program, ranks, assemblyFor(program, index));
}

void Session::Impl::runThreads(const Program &program,
                               std::vector<BoundRank> &bound, int64_t warmup,
                               int64_t repeat, Assembly *assembly) {
  int32_t ranks = static_cast<int32_t>(manifest.ranks);
  std::vector<std::string> errors(ranks);
  std::vector<double> perRank(ranks, 0);
  std::fill(communication.begin(), communication.end(), 0);
  rankThreads->run([&](int32_t rank) {
    if (rank == options.stallRank)
      return; // never joins a collective: the others must time out
    try {
      BoundRank &mine = bound[rank];
      ModelLibrary::Rank &cpu = *modelRanks[rank];
      perRank[rank] = runTimed(
          mine, manifest.microbatches, warmup, repeat,
          [&] {
            traced(rank, [&] {
              cpu.run(mine.stage->function, mine.args.data(),
                      mine.resultPointers.data());
            });
          },
          [&] {
            if (assembly)
              placeRankBlocks(program, mine, rank, *assembly);
          });
    } catch (const std::exception &e) {
      errors[rank] = e.what();
      abortThreadWorld(*world, "rank " + std::to_string(rank) + " failed");
    }
  });
  if (anyError(errors))
    throw collectErrors(errors);
  // A pass ends when every rank has placed its blocks.
  int32_t holder = outputRank(program);
  seconds = *std::max_element(perRank.begin(), perRank.end());
  timing = {seconds,
            communication[holder] / static_cast<double>(warmup + repeat)};
}

void Session::Impl::runCuda(const Program &program,
                            std::vector<BoundRank> &bound, int64_t warmup,
                            int64_t repeat, Assembly *assembly) {
  int32_t ranks = static_cast<int32_t>(manifest.ranks);
  std::vector<std::string> errors(ranks);
  std::vector<double> perRank(ranks, 0);
  int32_t firstFailure = -1;
  std::vector<std::thread> threads;
  for (int32_t rank = 0; rank < ranks; ++rank)
    threads.emplace_back([&, rank] {
      try {
        BoundRank &mine = bound[rank];
        ModelLibrary::Rank *gpu = modelRanks[rank].get();
        perRank[rank] = runTimed(
            mine, manifest.microbatches, warmup, repeat,
            [&] {
              gpu->run(mine.stage->function, mine.args.data(),
                       mine.resultPointers.data());
            },
            [&] {
              if (assembly)
                placeRankBlocks(program, mine, rank, *assembly);
            });
      } catch (const std::exception &e) {
        errors[rank] = e.what();
        // A failing rank aborts the others' communicators.
        std::lock_guard<std::mutex> lock(modelRanksMutex);
        if (firstFailure < 0)
          firstFailure = rank;
        for (auto &gpu : modelRanks)
          gpu->abort();
      }
    });
  for (std::thread &thread : threads)
    thread.join();
  // The first failure is the cause; the others' are usually its echoes.
  if (firstFailure > 0)
    std::swap(errors[0], errors[firstFailure]);
  if (anyError(errors)) {
    std::string text;
    for (const std::string &error : errors)
      if (!error.empty())
        text += (text.empty() ? "" : "\n") + error;
    throw Error(text);
  }
  seconds = *std::max_element(perRank.begin(), perRank.end());
  timing = {seconds, 0};
}

std::vector<OutputTensor> Session::Impl::runMpi(const Program &program,
                                                std::vector<BoundRank> &bound,
                                                int64_t warmup, int64_t repeat,
                                                bool collect) {
  if (mpiRank == options.stallRank)
    return {};
  BoundRank &mine = bound.front();
  RankContext &context = *contexts.front();
  ModelLibrary::Rank &rank = *modelRanks.front();
  communication[0] = 0;
  seconds = runTimed(
      mine, manifest.microbatches, warmup, repeat,
      [&] {
        traced(0, [&] {
          rank.run(mine.stage->function, mine.args.data(),
                   mine.resultPointers.data());
        });
      },
      [] {});
  timing = {seconds, communication[0] / static_cast<double>(warmup + repeat)};
  if (!collect)
    return {};
  // Gathering the outputs to rank 0 is part of a pass (the blocks of a
  // split output travel here instead of in an all-gather): its time is
  // added to the pass's.
  auto gatherStart = std::chrono::steady_clock::now();
  std::vector<OutputTensor> outputs = gatherOutputs(program, mine, context);
  std::chrono::duration<double> gathered =
      std::chrono::steady_clock::now() - gatherStart;
  seconds += gathered.count();
  timing.stageSeconds = seconds;
  return outputs;
}

std::vector<OutputTensor> Session::Impl::gatherOutputs(const Program &program,
                                                       const BoundRank &mine,
                                                       RankContext &context) {
  // Outputs travel to rank 0 when another rank holds them; a split
  // output's blocks, from every rank of the last stage.
  const std::vector<int32_t> &last = program.stages.back().ranks;
  int32_t holder = outputRank(program);
  bool inLast = std::find(last.begin(), last.end(), mpiRank) != last.end();
  std::vector<size_t> slots = outputSlots(program);
  std::vector<OutputTensor> outputs;
  for (size_t i = 0; i < slots.size(); ++i) {
    const TensorSpec &spec = program.outputs[i];
    // Ranks before the last stage hold no outputs.
    static const WholeOutput none;
    auto it = mine.outputs.find(slots[i]);
    const WholeOutput &own = it != mine.outputs.end() ? it->second : none;
    if (spec.splitDim >= 0) {
      if (mpiRank != 0 && inLast)
        context.send(0, own.data(), own.size(), "output gather");
      if (mpiRank != 0)
        continue;
      std::vector<std::vector<char>> received;
      std::vector<const char *> blocks;
      std::vector<int64_t> blockShape = wholeBatch(
          lastResult(program, slots[i]).shape, manifest.microbatches);
      int64_t blockBytes = dtypeNameBytes(spec.dtype);
      for (int64_t d : blockShape)
        blockBytes *= d;
      for (int32_t rank : last) {
        if (rank == 0) {
          blocks.push_back(own.data());
          continue;
        }
        received.emplace_back(blockBytes);
        context.recv(rank, received.back().data(), blockBytes, "output gather");
        blocks.push_back(received.back().data());
      }
      outputs.push_back({spec.name, spec.dtype, spec.shape,
                         assembleBlocks(spec, blockShape, blocks)});
    } else if (holder == 0) {
      if (mpiRank == 0)
        outputs.push_back({spec.name, spec.dtype, spec.shape, own.copy()});
    } else if (mpiRank == holder) {
      context.send(0, own.data(), spec.bytes(), "output gather");
    } else if (mpiRank == 0) {
      outputs.push_back(
          {spec.name, spec.dtype, spec.shape, std::vector<char>(spec.bytes())});
      context.recv(holder, outputs.back().data.data(), spec.bytes(),
                   "output gather");
    }
  }
  return outputs;
}

Session::Session(const std::string &artifact, SessionOptions options)
    : impl(std::make_unique<Impl>(artifact, std::move(options))) {}

Session::~Session() = default;

const Manifest &Session::getManifest() const { return impl->manifest; }

const SessionOptions &Session::getOptions() const { return impl->options; }

std::vector<OutputTensor>
Session::run(const std::map<std::string, InputView> &inputs, int64_t warmup,
             int64_t repeat) {
  return impl->run(inputs, warmup, repeat, kMainProgram);
}

std::vector<OutputTensor>
Session::runPrefill(const std::map<std::string, InputView> &inputs, int chunk) {
  return impl->run(inputs, 0, 1, chunk);
}

double Session::getSecondsPerRun() const { return impl->seconds; }

int Session::getBlasThreads() const { return impl->blasThreads; }

RunTiming Session::getLastRunTiming() const { return impl->timing; }

void Session::runInPlace(const std::map<std::string, InputView> &inputs,
                         int program) {
  impl->run(inputs, 0, 1, program, /*collect=*/false);
}

int32_t Session::getMpiRank() const { return impl->getMpiRank(); }

const std::vector<RankTrace> &Session::getTrace() const {
  return impl->getTrace();
}

std::vector<std::vector<char>>
Session::gatherFromLastStage(const std::vector<char> &mine) {
  return impl->gatherFromLastStage(mine);
}

void Session::broadcastFromRoot(std::vector<char> &data) {
  impl->broadcastFromRoot(data);
}

/// Sizes first: what a rank sends is only known to it.
std::vector<std::vector<char>>
Session::Impl::gatherFromLastStage(const std::vector<char> &mine) {
  if (!mpi)
    return {mine};
  RankContext &context = *contexts.front();
  const std::vector<int32_t> &last = manifest.stages.back().ranks;
  const char *site = "generation: gathering the next tokens' candidates";
  if (mpiRank != 0) {
    if (std::find(last.begin(), last.end(), mpiRank) != last.end()) {
      int64_t bytes = static_cast<int64_t>(mine.size());
      context.send(0, &bytes, sizeof(bytes), site);
      context.send(0, mine.data(), bytes, site);
    }
    return {};
  }
  std::vector<std::vector<char>> all;
  for (int32_t rank : last) {
    if (rank == 0) {
      all.push_back(mine);
      continue;
    }
    int64_t bytes = 0;
    context.recv(rank, &bytes, sizeof(bytes), site);
    if (bytes < 0 || bytes > kMaxTensorBytes)
      throw Error(std::string(site) + ": rank " + std::to_string(rank) +
                  " announced " + std::to_string(bytes) + " bytes");
    all.emplace_back(bytes);
    context.recv(rank, all.back().data(), bytes, site);
  }
  return all;
}

void Session::Impl::broadcastFromRoot(std::vector<char> &data) {
  if (!mpi)
    return;
  RankContext &context = *contexts.front();
  const char *site = "generation: sending the chosen tokens";
  if (mpiRank == 0) {
    int64_t bytes = static_cast<int64_t>(data.size());
    for (int32_t rank = 1; rank < manifest.ranks; ++rank) {
      context.send(rank, &bytes, sizeof(bytes), site);
      context.send(rank, data.data(), bytes, site);
    }
    return;
  }
  int64_t bytes = 0;
  context.recv(0, &bytes, sizeof(bytes), site);
  if (bytes < 0 || bytes > kMaxTensorBytes)
    throw Error(std::string(site) + ": rank 0 announced " +
                std::to_string(bytes) + " bytes");
  data.resize(bytes);
  context.recv(0, data.data(), bytes, site);
}

int32_t Session::getDataReplicas() const { return impl->replicas; }

int32_t Session::getDataReplica() const { return impl->replica; }

std::shared_ptr<ThreadWorld> Session::getThreadWorld() const {
  return impl->getThreadWorld();
}

std::pair<RankContext *, Group> Session::Impl::dataAxis(int32_t rank) {
  trainingRank(rank); // throws for a rank not in this process
  return {contexts.at(mpi ? 0 : rank).get(),
          Group{replicas, static_cast<int32_t>(manifest.ranks)}};
}

void Session::allReduceOverReplicas(int32_t rank, float *buffer, int64_t count,
                                    const char *site) {
  if (impl->replicas == 1)
    return;
  auto [context, group] = impl->dataAxis(rank);
  context->allReduce(group, buffer, count, DType::F32, Reduction::Sum, site);
}

void Session::allReduceOverReplicas(int32_t rank, double *buffer, int64_t count,
                                    const char *site) {
  if (impl->replicas == 1)
    return;
  auto [context, group] = impl->dataAxis(rank);
  context->allReduce(group, buffer, count, DType::F64, Reduction::Sum, site);
}

void Session::reduceScatterOverReplicas(int32_t rank, const float *in,
                                        float *out, int64_t chunk,
                                        const char *site) {
  if (impl->replicas == 1) {
    std::memcpy(out, in, chunk * sizeof(float));
    return;
  }
  auto [context, group] = impl->dataAxis(rank);
  context->reduceScatter(group, in, out, 1, chunk, DType::F32, Reduction::Sum,
                         site);
}

void Session::allGatherOverReplicas(int32_t rank, const float *in, float *out,
                                    int64_t chunk, const char *site) {
  if (impl->replicas == 1) {
    std::memcpy(out, in, chunk * sizeof(float));
    return;
  }
  auto [context, group] = impl->dataAxis(rank);
  context->allGather(group, in, out, 1, chunk * sizeof(float), site);
}

std::vector<int32_t> Session::getLocalRanks() const {
  return impl->localRanks();
}

std::vector<int32_t> Session::Impl::localRanks() const {
  if (mpi)
    return {mpiRank};
  std::vector<int32_t> ranks(bound.size());
  for (size_t r = 0; r < ranks.size(); ++r)
    ranks[r] = static_cast<int32_t>(r);
  return ranks;
}

const BoundRank &Session::Impl::trainingRank(int32_t rank) const {
  // A --target cuda training artifact runs on these host buffers too: its
  // weights are uploaded at every run (tp.mutable_weights) and its results
  // copied back.
  if (mpi ? rank != mpiRank
          : rank < 0 || rank >= static_cast<int32_t>(bound.size()))
    throw Error("rank " + std::to_string(rank) + " is not in this process");
  return bound.at(mpi ? 0 : rank);
}

char *Session::getRankWeightFile(int32_t rank) {
  return impl->trainingRank(rank).weights->data.get();
}

const char *Session::getRankOutput(int32_t rank,
                                   const std::string &name) const {
  const BoundRank &bound = impl->trainingRank(rank);
  Program program = mainProgram(impl->manifest);
  std::vector<size_t> slots = outputSlots(program);
  for (size_t i = 0; i < slots.size(); ++i)
    if (program.outputs[i].name == name)
      return bound.outputs.at(slots[i]).data();
  throw Error(impl->artifact + " has no output '" + name + "'");
}

OutputBlocks Session::getOutputBlocks(const std::string &name,
                                      int program) const {
  return impl->getOutputBlocks(name, program);
}

void Session::reorderCaches(const std::vector<int64_t> &source) {
  impl->reorderCaches(source);
}

/// Each rank's library moves the rows where the cache lives: in the host
/// buffer (CPU), or on the GPU, where a CUDA library keeps it resident.
void Session::Impl::reorderCaches(const std::vector<int64_t> &source) {
  for (size_t r = 0; r < bound.size(); ++r) {
    BoundRank &rank = bound[r];
    for (const TensorSpec &arg : rank.stage->args) {
      if (arg.kind != "cache")
        continue;
      if (arg.shape.empty() ||
          arg.shape[0] != static_cast<int64_t>(source.size()))
        throw Error("KV cache '" + arg.name + "' (" + formatShape(arg.shape) +
                    ") does not hold " + std::to_string(source.size()) +
                    " sequences");
      modelRanks.at(r)->reorderRows(rank.caches->at(arg.name).get(),
                                    arg.bytes() / arg.shape[0], source);
    }
  }
}
