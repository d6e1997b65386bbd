//===- tp-run.cpp - run a tp-compile artifact on CPU or GPU ranks ---------===//
//
//   tp-run model.tpa --input input_ids=ids.npy [--output-dir DIR]
//   mpirun -np N tp-run model.tpa --launcher mpi --input ...
//
// Every rank reads only its own weight file (checked against the manifest's
// SHA-256), binds its stage function's arguments, and runs it; the model's
// outputs end on rank 0 and are written as DIR/<output name>.npy. A
// --target cuda artifact runs one GPU per rank (rank % visible devices)
// through its library's C ABI; tp-run itself links no CUDA.
//
//===----------------------------------------------------------------------===//

#include "tp/Runtime/Artifact.h"
#include "tp/Runtime/Communicators.h"
#include "tp/Runtime/CudaModel.h"
#include "tp/Runtime/Npy.h"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <dlfcn.h>
#include <filesystem>
#include <malloc.h>
#include <iostream>
#include <cmath>
#include <map>
#include <set>
#include <mutex>
#include <sstream>
#include <thread>
#include <tuple>

#ifdef TP_HAVE_MPI
#include <mpi.h>
#endif

using namespace tp::rt;

namespace {

struct Options {
  std::string artifact;
  std::map<std::string, std::string> inputs; // name -> .npy path
  std::string outputDir = ".";
  std::string launcher = "threads";
  int64_t ranks = -1;
  double timeoutSeconds = 60;
  int64_t repeat = 1, warmup = 0;
  int64_t stallRank = -1; // testing: this rank never enters its stage
  bool quiet = false;
};

[[noreturn]] void usage(const std::string &message) {
  std::cerr << "tp-run: error: " << message << "\n"
            << "usage: tp-run ARTIFACT --input NAME=FILE.npy ... "
               "[--output-dir DIR] [--launcher threads|mpi] [--ranks N] "
               "[--timeout SECONDS] [--repeat N] [--warmup N] [--quiet]\n";
  std::exit(2);
}

Options parseOptions(int argc, char **argv) {
  Options options;
  auto value = [&](int &i, const std::string &flag) -> std::string {
    std::string arg = argv[i];
    if (arg.size() > flag.size() && arg[flag.size()] == '=')
      return arg.substr(flag.size() + 1);
    if (i + 1 >= argc)
      usage(flag + " needs a value");
    return argv[++i];
  };
  auto matches = [](const std::string &arg, const std::string &flag) {
    return arg == flag || arg.rfind(flag + "=", 0) == 0;
  };
  // The whole text must be the number ("12abc" is not 12).
  auto integer = [&](const std::string &text, const std::string &flag) {
    size_t used = 0;
    long long v = 0;
    try {
      v = std::stoll(text, &used);
    } catch (...) {
      used = 0;
    }
    if (used == 0 || used != text.size())
      usage(flag + " needs an integer, got '" + text + "'");
    return v;
  };
  auto seconds = [&](const std::string &text, const std::string &flag) {
    size_t used = 0;
    double v = 0;
    try {
      v = std::stod(text, &used);
    } catch (...) {
      used = 0;
    }
    if (used == 0 || used != text.size() || !std::isfinite(v) || v <= 0)
      usage(flag + " needs a positive number of seconds, got '" + text + "'");
    return v;
  };
  for (int i = 1; i < argc; ++i) {
    std::string arg = argv[i];
    if (matches(arg, "--input")) {
      std::string spec = value(i, "--input");
      size_t eq = spec.find('=');
      if (eq == std::string::npos || eq == 0)
        usage("--input expects NAME=FILE.npy, got '" + spec + "'");
      options.inputs[spec.substr(0, eq)] = spec.substr(eq + 1);
    } else if (matches(arg, "--output-dir")) {
      options.outputDir = value(i, "--output-dir");
    } else if (matches(arg, "--launcher")) {
      options.launcher = value(i, "--launcher");
      if (options.launcher != "threads" && options.launcher != "mpi")
        usage("--launcher is threads or mpi");
    } else if (matches(arg, "--ranks")) {
      options.ranks = integer(value(i, "--ranks"), "--ranks");
    } else if (matches(arg, "--timeout")) {
      options.timeoutSeconds = seconds(value(i, "--timeout"), "--timeout");
    } else if (matches(arg, "--repeat")) {
      options.repeat = std::max<int64_t>(1, integer(value(i, "--repeat"), "--repeat"));
    } else if (matches(arg, "--warmup")) {
      options.warmup = integer(value(i, "--warmup"), "--warmup");
    } else if (matches(arg, "--debug-stall-rank")) {
      options.stallRank = integer(value(i, "--debug-stall-rank"), arg);
    } else if (arg == "--quiet") {
      options.quiet = true;
    } else if (!arg.empty() && arg[0] == '-') {
      usage("unknown option '" + arg + "'");
    } else if (options.artifact.empty()) {
      options.artifact = arg;
    } else {
      usage("more than one artifact given");
    }
  }
  if (options.artifact.empty())
    usage("no artifact given");
  return options;
}

std::string shapeText(const std::vector<int64_t> &shape) {
  std::ostringstream os;
  os << "[";
  for (size_t i = 0; i < shape.size(); ++i)
    os << (i ? ", " : "") << shape[i];
  os << "]";
  return os.str();
}

const char *descrOf(const std::string &dtype) {
  static const std::map<std::string, const char *> table = {
      {"F32", "<f4"}, {"F64", "<f8"}, {"I64", "<i8"}, {"I32", "<i4"},
      {"I16", "<i2"}, {"I8", "|i1"},  {"U8", "|u1"},  {"BOOL", "|b1"},
      {"F16", "<f2"}, {"BF16", "<u2"}};
  auto it = table.find(dtype);
  return it == table.end() ? "" : it->second;
}

/// Every value of an input read as indices lies in its index range, as
/// onnxruntime requires (an id past the vocabulary would read past a
/// table). The error names the input, the first bad value and where it is.
void checkIndices(const TensorSpec &input, const std::string &path,
                  const NpyArray &array) {
  auto [low, high] = *input.indexRange;
  int64_t bytes = dtypeNameBytes(input.dtype);
  bool isSigned = input.dtype[0] == 'I';
  for (int64_t i = 0, e = array.elementCount(); i < e; ++i) {
    const char *p = array.data.data() + i * bytes;
    int64_t v = 0;
    if (isSigned) {
      switch (bytes) {
      case 8: { int64_t x; std::memcpy(&x, p, 8); v = x; break; }
      case 4: { int32_t x; std::memcpy(&x, p, 4); v = x; break; }
      case 2: { int16_t x; std::memcpy(&x, p, 2); v = x; break; }
      default: v = static_cast<int8_t>(*p);
      }
    } else {
      uint64_t x = 0;
      std::memcpy(&x, p, bytes);
      if (x > static_cast<uint64_t>(INT64_MAX))
        x = static_cast<uint64_t>(INT64_MAX);
      v = static_cast<int64_t>(x);
    }
    if (v >= low && v <= high)
      continue;
    std::vector<int64_t> index(array.shape.size());
    for (int64_t d = static_cast<int64_t>(index.size()) - 1, rest = i; d >= 0;
         --d) {
      index[d] = rest % array.shape[d];
      rest /= array.shape[d];
    }
    throw Error("input '" + input.name + "' from " + path + ": value " +
                std::to_string(v) + " at " + shapeText(index) +
                " is outside the valid range [" + std::to_string(low) + ", " +
                std::to_string(high) + "] (it indexes a table of " +
                std::to_string(high + 1) + " entries)");
  }
}

/// Reads and checks every model input against the manifest's signature.
std::map<std::string, NpyArray> readInputs(const Manifest &manifest,
                                           const Options &options) {
  std::map<std::string, NpyArray> arrays;
  std::string expected;
  for (const TensorSpec &input : manifest.inputs)
    expected += (expected.empty() ? "" : ", ") + input.name;
  for (const auto &[name, path] : options.inputs)
    if (std::none_of(manifest.inputs.begin(), manifest.inputs.end(),
                     [&](const TensorSpec &s) { return s.name == name; }))
      throw Error("unknown input '" + name + "'; the model's inputs are: " +
                  expected);
  for (const TensorSpec &input : manifest.inputs) {
    auto it = options.inputs.find(input.name);
    if (it == options.inputs.end())
      throw Error("missing --input " + input.name + "=FILE.npy (" +
                  input.dtype + " " + shapeText(input.shape) + ")");
    NpyArray array = readNpy(it->second);
    if (array.descr != descrOf(input.dtype) || array.shape != input.shape)
      throw Error("input '" + input.name + "' from " + it->second +
                  ": expected " + input.dtype + " " + shapeText(input.shape) +
                  " (" + descrOf(input.dtype) + "), got " +
                  shapeText(array.shape) + " (" + array.descr + ")");
    if (input.indexRange)
      checkIndices(input, it->second, array);
    arrays[input.name] = std::move(array);
  }
  return arrays;
}

/// One rank's bound stage: weights, argument pointers, result buffers.
/// With micro-batches, input arguments advance by one micro-batch per call
/// and the model's outputs collect every micro-batch's slice.
struct BoundRank {
  RankWeights weights;
  std::vector<void *> args;
  /// For each input argument: its index, whole-batch data, bytes per call.
  std::vector<std::tuple<size_t, char *, int64_t>> inputSlices;
  /// Whole-batch outputs of the last stage, by result slot.
  std::map<size_t, std::vector<char>> outputs;
  std::vector<std::unique_ptr<char, void (*)(void *)>> results;
  std::vector<void *> resultPointers;
  tp_stage_fn entry = nullptr;
  const StageSpec *stage = nullptr;
};

BoundRank bindRank(const Manifest &manifest, int32_t rank, void *library,
                   std::map<std::string, NpyArray> &inputs) {
  BoundRank bound;
  const RankSpec &spec = manifest.rankSpecs.at(rank);
  bound.stage = &manifest.stages.at(spec.stage);
  // A CUDA library has one entry point for all stages (CudaModel).
  if (manifest.target == "cpu") {
    std::string symbol = "tp_" + bound.stage->function;
    bound.entry =
        reinterpret_cast<tp_stage_fn>(dlsym(library, symbol.c_str()));
    if (!bound.entry)
      throw Error(manifest.library + " has no entry point " + symbol);
  }
  bound.weights = loadRankWeights(manifest, rank);
  for (const TensorSpec &arg : bound.stage->args) {
    if (arg.kind == "input") {
      char *data = inputs.at(arg.name).data.data();
      bound.inputSlices.emplace_back(bound.args.size(), data, arg.bytes());
      bound.args.push_back(data);
    } else if (arg.kind == "weight") {
      auto it = bound.weights.byName.find(arg.name);
      if (it == bound.weights.byName.end())
        throw Error("rank " + std::to_string(rank) + ": weight '" + arg.name +
                    "' is not in " + spec.file);
      bound.args.push_back(it->second);
    } else {
      throw Error("stage argument of unknown kind '" + arg.kind + "'");
    }
  }
  for (const TensorSpec &result : bound.stage->results) {
    bound.results.emplace_back(static_cast<char *>(allocate(result.bytes())),
                               release);
    bound.resultPointers.push_back(bound.results.back().get());
    if (result.kind == "output")
      bound.outputs[bound.resultPointers.size() - 1].resize(
          result.bytes() * manifest.microbatches);
  }
  return bound;
}

/// One forward pass: every micro-batch through this rank's stage. Stages
/// overlap because a send does not wait for its recv: stage 0 runs ahead
/// into the next micro-batch while stage 1 works on the previous one.
template <typename Call>
void runForward(BoundRank &bound, int64_t microbatches, Call call) {
  for (int64_t m = 0; m < microbatches; ++m) {
    for (auto &[index, data, bytes] : bound.inputSlices)
      bound.args[index] = data + m * bytes;
    call();
    for (auto &[slot, whole] : bound.outputs) {
      size_t bytes = whole.size() / microbatches;
      // An empty output has no buffer: memcpy of null is undefined even for
      // 0 bytes.
      if (bytes)
        std::memcpy(whole.data() + m * bytes, bound.resultPointers[slot],
                    bytes);
    }
  }
}

/// Rank that holds the model's outputs: the last stage's first rank.
int32_t outputRank(const Manifest &manifest) {
  return manifest.stages.back().ranks.front();
}

std::string fileNameFor(const std::string &name) {
  std::string text = name;
  for (char &c : text)
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '.' && c != '_' &&
        c != '-')
      c = '_';
  return text;
}

void writeOutputs(const Manifest &manifest, const Options &options,
                  const std::vector<const void *> &data) {
  std::error_code ec;
  std::filesystem::create_directories(options.outputDir, ec);
  if (ec)
    throw Error("cannot create --output-dir " + options.outputDir + ": " +
                ec.message());
  // Distinct outputs get distinct files, even where their names map to the
  // same file name ('a/b' and 'a_b' both to 'a_b'): later ones get a suffix.
  std::set<std::string> taken;
  for (size_t i = 0; i < manifest.outputs.size(); ++i) {
    const TensorSpec &spec = manifest.outputs[i];
    std::string file = fileNameFor(spec.name);
    for (int k = 2; !taken.insert(file).second; ++k)
      file = fileNameFor(spec.name) + "-" + std::to_string(k);
    NpyArray array;
    array.descr = descrOf(spec.dtype);
    array.shape = spec.shape;
    const char *bytes = static_cast<const char *>(data[i]);
    array.data.assign(bytes, bytes + spec.bytes());
    std::string path = options.outputDir + "/" + file + ".npy";
    writeNpy(path, array);
    if (!options.quiet)
      std::cout << "output " << spec.name << " " << spec.dtype << " "
                << shapeText(spec.shape) << " -> " << path << "\n";
  }
}

/// Positions of the model outputs among the last stage's results.
std::vector<size_t> outputSlots(const Manifest &manifest) {
  std::vector<size_t> slots;
  const StageSpec &last = manifest.stages.back();
  for (const TensorSpec &output : manifest.outputs) {
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

/// Runs `bound` `repeat` times; returns seconds per run (measured by the
/// calling rank, after `warmup` untimed runs).
double runRank(BoundRank &bound, RankContext &context, const Options &options,
               int64_t microbatches) {
  auto call = [&] {
    bound.entry(&context, bound.args.data(), bound.resultPointers.data());
  };
  for (int64_t i = 0; i < options.warmup; ++i)
    runForward(bound, microbatches, call);
  auto start = std::chrono::steady_clock::now();
  for (int64_t i = 0; i < options.repeat; ++i)
    runForward(bound, microbatches, call);
  std::chrono::duration<double> elapsed =
      std::chrono::steady_clock::now() - start;
  return elapsed.count() / options.repeat;
}

void printTiming(const Options &options, double seconds, int64_t ranks) {
  if (options.repeat > 1 || options.warmup > 0)
    std::cout << "time per run: " << seconds * 1e3 << " ms (" << ranks
              << " ranks, " << options.repeat << " runs)\n";
}

int runThreads(const Manifest &manifest, const Options &options, void *library,
               std::map<std::string, NpyArray> &inputs) {
  int32_t ranks = static_cast<int32_t>(manifest.ranks);
  auto world = createThreadWorld(
      ranks, std::chrono::milliseconds(
                 static_cast<int64_t>(options.timeoutSeconds * 1000)));
  std::vector<BoundRank> bound(ranks);
  std::vector<std::string> errors(ranks);
  std::vector<double> seconds(ranks, 0);
  std::vector<std::thread> threads;
  for (int32_t rank = 0; rank < ranks; ++rank)
    threads.emplace_back([&, rank] {
      try {
        bound[rank] = bindRank(manifest, rank, library, inputs);
        if (rank == options.stallRank)
          return; // never joins a collective: the others must time out
        auto context = createThreadRankContext(world, rank);
        seconds[rank] =
            runRank(bound[rank], *context, options, manifest.microbatches);
      } catch (const std::exception &e) {
        errors[rank] = e.what();
        abortThreadWorld(*world, "rank " + std::to_string(rank) + " failed");
      }
    });
  for (std::thread &thread : threads)
    thread.join();
  // Ranks that failed on their own come first; the "aborted" errors of
  // their peers are echoes of those.
  bool failed = false;
  for (bool echoes : {false, true})
    for (int32_t rank = 0; rank < ranks; ++rank)
      if (!errors[rank].empty() &&
          (errors[rank].find(" aborted: ") != std::string::npos) == echoes) {
        std::cerr << "tp-run: error: " << errors[rank] << "\n";
        failed = true;
      }
  if (failed)
    return 1;
  int32_t holder = outputRank(manifest);
  std::vector<const void *> data;
  for (size_t slot : outputSlots(manifest))
    data.push_back(bound[holder].outputs.at(slot).data());
  writeOutputs(manifest, options, data);
  printTiming(options, seconds[holder], ranks);
  return 0;
}

/// --target cuda: threads as for the CPU, each rank driving GPU rank %
/// devices through the model library's C ABI. Host data is bound first, so
/// that a bad weight file fails before NCCL waits for every rank.
int runCudaThreads(const Manifest &manifest, const Options &options,
                   void *library, std::map<std::string, NpyArray> &inputs) {
  CudaModel model(library);
  int32_t ranks = static_cast<int32_t>(manifest.ranks);
  // NCCL refuses two ranks of one communicator on the same GPU.
  int devices = model.deviceCount();
  if (devices < ranks)
    throw Error(options.artifact + " runs " + std::to_string(ranks) +
                " ranks, one per GPU, but " + std::to_string(devices) +
                " CUDA device(s) are visible");
  std::vector<BoundRank> bound(ranks);
  std::vector<std::string> errors(ranks);
  auto reportErrors = [&] {
    for (const std::string &error : errors)
      if (!error.empty())
        std::cerr << "tp-run: error: " << error << "\n";
    return std::any_of(errors.begin(), errors.end(),
                       [](const std::string &e) { return !e.empty(); });
  };
  std::vector<std::thread> threads;
  for (int32_t rank = 0; rank < ranks; ++rank)
    threads.emplace_back([&, rank] {
      try {
        bound[rank] = bindRank(manifest, rank, library, inputs);
      } catch (const std::exception &e) {
        errors[rank] = e.what();
      }
    });
  for (std::thread &thread : threads)
    thread.join();
  if (reportErrors())
    return 1;

  std::vector<char> id = model.uniqueId();
  std::vector<std::unique_ptr<CudaModel::Rank>> gpus(ranks);
  std::mutex gpusMutex; // a failing rank aborts the others' communicators
  int32_t firstFailure = -1;
  std::vector<double> seconds(ranks, 0);
  threads.clear();
  for (int32_t rank = 0; rank < ranks; ++rank)
    threads.emplace_back([&, rank] {
      try {
        auto gpu = model.createRank(rank, ranks, rank % devices, id);
        CudaModel::Rank *self = gpu.get();
        {
          std::lock_guard<std::mutex> lock(gpusMutex);
          gpus[rank] = std::move(gpu);
        }
        BoundRank &mine = bound[rank];
        auto step = [&] {
          runForward(mine, manifest.microbatches, [&] {
            self->run(mine.stage->function, mine.args.data(),
                      mine.resultPointers.data());
          });
        };
        for (int64_t i = 0; i < options.warmup; ++i)
          step();
        auto start = std::chrono::steady_clock::now();
        for (int64_t i = 0; i < options.repeat; ++i)
          step();
        std::chrono::duration<double> elapsed =
            std::chrono::steady_clock::now() - start;
        seconds[rank] = elapsed.count() / options.repeat;
      } catch (const std::exception &e) {
        errors[rank] = e.what();
        std::lock_guard<std::mutex> lock(gpusMutex);
        if (firstFailure < 0)
          firstFailure = rank;
        for (auto &gpu : gpus)
          if (gpu)
            gpu->abort();
      }
    });
  for (std::thread &thread : threads)
    thread.join();
  gpus.clear();
  // The first failure is the cause; the others' are usually its echoes.
  if (firstFailure > 0)
    std::swap(errors[0], errors[firstFailure]);
  if (reportErrors())
    return 1;
  int32_t holder = outputRank(manifest);
  std::vector<const void *> data;
  for (size_t slot : outputSlots(manifest))
    data.push_back(bound[holder].outputs.at(slot).data());
  writeOutputs(manifest, options, data);
  printTiming(options, seconds[holder], ranks);
  return 0;
}

#ifdef TP_HAVE_MPI
int runMpi(const Manifest &manifest, const Options &options, void *library,
           std::map<std::string, NpyArray> &inputs) {
  int rank = 0, size = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  if (size != manifest.ranks)
    throw Error("the artifact was built for " + std::to_string(manifest.ranks) +
                " ranks (tp " + std::to_string(manifest.tp) + " x pp " +
                std::to_string(manifest.pp) + ") but mpirun started " +
                std::to_string(size) + " processes");
  auto context = createMpiRankContext(std::chrono::milliseconds(
      static_cast<int64_t>(options.timeoutSeconds * 1000)));
  BoundRank bound = bindRank(manifest, rank, library, inputs);
  if (rank == options.stallRank)
    return 0;
  double seconds = runRank(bound, *context, options, manifest.microbatches);
  // Outputs travel to rank 0 when another rank holds them.
  int32_t holder = outputRank(manifest);
  std::vector<size_t> slots = outputSlots(manifest);
  std::vector<std::vector<char>> received(slots.size());
  std::vector<const void *> data;
  for (size_t i = 0; i < slots.size(); ++i) {
    int64_t bytes = manifest.outputs[i].bytes();
    if (holder == 0) {
      if (rank == 0)
        data.push_back(bound.outputs.at(slots[i]).data());
    } else if (rank == holder) {
      context->send(0, bound.outputs.at(slots[i]).data(), bytes,
                    "output gather");
    } else if (rank == 0) {
      received[i].resize(bytes);
      context->recv(holder, received[i].data(), bytes, "output gather");
      data.push_back(received[i].data());
    }
  }
  if (rank == 0) {
    writeOutputs(manifest, options, data);
    printTiming(options, seconds, size);
  }
  return 0;
}
#endif

int run(const Options &options) {
  Manifest manifest = loadManifest(options.artifact);
  if (manifest.target != "cpu" && manifest.target != "cuda")
    throw Error(options.artifact + " was compiled with --target " +
                (manifest.target.empty() ? "none" : manifest.target) +
                "; tp-run runs --target cpu and cuda artifacts");
  if (options.ranks >= 0 && options.ranks != manifest.ranks)
    throw Error("the artifact was built for " + std::to_string(manifest.ranks) +
                " ranks (tp " + std::to_string(manifest.tp) + " x pp " +
                std::to_string(manifest.pp) + "), not " +
                std::to_string(options.ranks));
  std::map<std::string, NpyArray> inputs = readInputs(manifest, options);
  // The library's static constructors run when it is loaded: check it
  // first, then check that it was compiled for this manifest.
  std::string libraryPath = verifyLibrary(manifest);
  void *library = dlopen(libraryPath.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (!library)
    throw Error(std::string("cannot load ") + libraryPath + ": " + dlerror());
  checkLibrarySignature(manifest, library);
  if (manifest.target == "cuda") {
    if (options.launcher == "mpi")
      throw Error("--launcher mpi does not run --target cuda artifacts yet; "
                  "use --launcher threads");
    return runCudaThreads(manifest, options, library, inputs);
  }
  if (options.launcher == "mpi") {
#ifdef TP_HAVE_MPI
    return runMpi(manifest, options, library, inputs);
#else
    throw Error("this tp-run was built without MPI; use --launcher threads");
#endif
  }
  return runThreads(manifest, options, library, inputs);
}

} // namespace

int main(int argc, char **argv) {
  Options options = parseOptions(argc, argv);
  // Generated code allocates activations per op and frees them at their
  // last use; keep freed memory in the heap instead of returning it to the
  // kernel, so that the next forward pass does not page-fault it back in.
  mallopt(M_MMAP_THRESHOLD, 1 << 30);
  mallopt(M_TRIM_THRESHOLD, -1);
#ifdef TP_HAVE_MPI
  bool mpi = options.launcher == "mpi";
  if (mpi)
    MPI_Init(&argc, &argv);
#endif
  int rc;
  try {
    rc = run(options);
  } catch (const std::exception &e) {
    std::cerr << "tp-run: error: " << e.what() << "\n";
#ifdef TP_HAVE_MPI
    // One failed process must not leave the others waiting.
    if (mpi) {
      std::cerr.flush();
      MPI_Abort(MPI_COMM_WORLD, 1);
    }
#endif
    return 1;
  }
#ifdef TP_HAVE_MPI
  if (mpi)
    MPI_Finalize();
#endif
  return rc;
}
