//===- tp-run.cpp - run a tp-compile artifact on CPU or GPU ranks ---------===//
//
//   tp-run model.tpa --input input_ids=ids.npy [--output-dir DIR]
//   mpirun -np N tp-run model.tpa --launcher mpi --input ...
//
// A command line over tp::rt::Session (include/tp/Runtime/Session.h), which
// verifies the artifact, loads every rank's weights and runs the ranks:
// this file reads the inputs from .npy files and writes the model's outputs
// as DIR/<output name>.npy. tp-run itself links no CUDA.
//
//===----------------------------------------------------------------------===//

#include "tp/Runtime/Npy.h"
#include "tp/Runtime/Session.h"
#include "tp/Runtime/Trainer.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <iomanip>
#include <iostream>
#include <malloc.h>
#include <map>
#include <optional>
#include <set>
#include <sstream>

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
  bool printManifest = false;
  std::string trace;     // --trace FILE: Chrome trace of the ranks' timelines
  int64_t generate = -1; // --generate T: new tokens per prompt
  int64_t eos = -1;
  bool sample = false;
  int64_t numBeams = 1;
  int64_t topK = 0;
  double topP = 1.0, temperature = 1.0;
  uint64_t seed = 0;
  // --train: optimizer steps over the micro-batches in --data.
  bool train = false;
  int64_t steps = 1;
  std::string data;
  double lr = -1; // the artifact's
  std::string save, resume;
  int64_t saveEvery = 0;
};

[[noreturn]] void usage(const std::string &message) {
  std::cerr
      << "tp-run: error: " << message << "\n"
      << "usage: tp-run ARTIFACT --input NAME=FILE.npy ... "
         "[--output-dir DIR] [--launcher threads|mpi] [--ranks N] "
         "[--timeout SECONDS] [--repeat N] [--warmup N] [--quiet] "
         "[--trace FILE.json]\n"
         "       tp-run ARTIFACT --print-manifest\n"
         "       tp-run ARTIFACT --generate T --input input_ids=FILE.npy "
         "[--input attention_mask=FILE.npy] [--eos ID] [--num-beams K] "
         "[--sample [--top-k K] [--top-p P] [--temperature T] "
         "[--seed N]] [--output-dir DIR]\n"
         "       tp-run ARTIFACT --train --data DIR [--steps N] [--lr LR] "
         "[--save CKPT [--save-every N]] [--resume CKPT]\n";
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
  // A finite number: the whole text ("0.9x" is not 0.9).
  auto parseNumber = [](const std::string &text) -> std::optional<double> {
    size_t used = 0;
    double v = 0;
    try {
      v = std::stod(text, &used);
    } catch (...) {
      return std::nullopt;
    }
    if (used != text.size() || !std::isfinite(v))
      return std::nullopt;
    return v;
  };
  auto number = [&](const std::string &text, const std::string &flag) {
    std::optional<double> v = parseNumber(text);
    if (!v)
      usage(flag + " needs a number, got '" + text + "'");
    return *v;
  };
  auto seconds = [&](const std::string &text, const std::string &flag) {
    std::optional<double> v = parseNumber(text);
    if (!v || *v <= 0)
      usage(flag + " needs a positive number of seconds, got '" + text + "'");
    return *v;
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
      options.repeat =
          std::max<int64_t>(1, integer(value(i, "--repeat"), "--repeat"));
    } else if (matches(arg, "--warmup")) {
      options.warmup = integer(value(i, "--warmup"), "--warmup");
    } else if (matches(arg, "--debug-stall-rank")) {
      options.stallRank = integer(value(i, "--debug-stall-rank"), arg);
    } else if (matches(arg, "--generate")) {
      options.generate = integer(value(i, "--generate"), "--generate");
      if (options.generate < 0)
        usage("--generate needs a number of new tokens, 0 or more");
    } else if (matches(arg, "--eos")) {
      options.eos = integer(value(i, "--eos"), "--eos");
      if (options.eos < 0)
        usage("--eos needs a token id, 0 or more");
    } else if (matches(arg, "--num-beams")) {
      options.numBeams = integer(value(i, "--num-beams"), "--num-beams");
      if (options.numBeams < 1)
        usage("--num-beams needs 1 or more");
    } else if (arg == "--sample") {
      options.sample = true;
    } else if (matches(arg, "--top-k")) {
      options.topK = integer(value(i, "--top-k"), "--top-k");
      if (options.topK < 0)
        usage("--top-k needs 0 (all tokens) or more");
    } else if (matches(arg, "--top-p")) {
      options.topP = number(value(i, "--top-p"), "--top-p");
      if (!(options.topP > 0 && options.topP <= 1))
        usage("--top-p needs a number in (0, 1]");
    } else if (matches(arg, "--temperature")) {
      options.temperature = number(value(i, "--temperature"), "--temperature");
      if (!(options.temperature > 0))
        usage("--temperature needs a number above 0");
    } else if (matches(arg, "--seed")) {
      long long seed = integer(value(i, "--seed"), "--seed");
      if (seed < 0)
        usage("--seed needs 0 or more");
      options.seed = static_cast<uint64_t>(seed);
    } else if (arg == "--train") {
      options.train = true;
    } else if (matches(arg, "--steps")) {
      options.steps = integer(value(i, "--steps"), "--steps");
      if (options.steps < 1)
        usage("--steps needs 1 or more");
    } else if (matches(arg, "--data")) {
      options.data = value(i, "--data");
    } else if (matches(arg, "--lr")) {
      options.lr = number(value(i, "--lr"), "--lr");
      if (options.lr < 0)
        usage("--lr needs 0 or more");
    } else if (matches(arg, "--save")) {
      options.save = value(i, "--save");
    } else if (matches(arg, "--save-every")) {
      options.saveEvery = integer(value(i, "--save-every"), "--save-every");
      if (options.saveEvery < 1)
        usage("--save-every needs 1 or more");
    } else if (matches(arg, "--resume")) {
      options.resume = value(i, "--resume");
    } else if (arg == "--quiet") {
      options.quiet = true;
    } else if (matches(arg, "--trace")) {
      options.trace = value(i, "--trace");
      if (options.trace.empty())
        usage("--trace needs a file name");
    } else if (arg == "--print-manifest") {
      options.printManifest = true;
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
  if (options.generate < 0 && (options.sample || options.eos >= 0))
    usage("--sample and --eos go with --generate");
  if (!options.train &&
      (!options.data.empty() || !options.save.empty() ||
       !options.resume.empty() || options.lr >= 0 || options.saveEvery))
    usage("--data, --lr, --save, --save-every and --resume go with --train");
  if (options.train && (options.data.empty() || !options.inputs.empty() ||
                        options.generate >= 0))
    usage("--train reads its micro-batches from --data DIR (no --input, no "
          "--generate)");
  if (options.saveEvery && options.save.empty())
    usage("--save-every needs --save CKPT");
  return options;
}

/// The numpy descr of each dtype tp-run reads and writes.
const std::map<std::string, std::string> &descrs() {
  static const std::map<std::string, std::string> table = {
      {"F32", "<f4"}, {"F64", "<f8"}, {"I64", "<i8"}, {"I32", "<i4"},
      {"I16", "<i2"}, {"I8", "|i1"},  {"U8", "|u1"},  {"BOOL", "|b1"},
      {"F16", "<f2"}, {"BF16", "<u2"}};
  return table;
}

/// The dtype of a numpy descr; the descr itself if tp-run reads no such
/// dtype (the session's check then names it).
std::string dtypeOfDescr(const std::string &descr) {
  for (const auto &[dtype, d] : descrs())
    if (d == descr)
      return dtype;
  return descr;
}

/// Reads every --input file; the session checks names, dtypes, shapes and
/// values.
std::map<std::string, NpyArray> readInputs(const Options &options) {
  std::map<std::string, NpyArray> arrays;
  for (const auto &[name, path] : options.inputs)
    arrays[name] = readNpy(path);
  return arrays;
}

std::string fileNameFor(const std::string &name) {
  std::string text = name;
  for (char &c : text)
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '.' && c != '_' &&
        c != '-')
      c = '_';
  return text;
}

void writeOutputs(const Options &options,
                  const std::vector<OutputTensor> &outputs) {
  std::error_code ec;
  std::filesystem::create_directories(options.outputDir, ec);
  if (ec)
    throw Error("cannot create --output-dir " + options.outputDir + ": " +
                ec.message());
  // Distinct outputs get distinct files, even where their names map to the
  // same file name ('a/b' and 'a_b' both to 'a_b'): later ones get a suffix.
  std::set<std::string> taken;
  for (const OutputTensor &output : outputs) {
    std::string file = fileNameFor(output.name);
    for (int k = 2; !taken.insert(file).second; ++k)
      file = fileNameFor(output.name) + "-" + std::to_string(k);
    NpyArray array;
    array.descr = descrs().at(output.dtype);
    array.shape = output.shape;
    array.data = output.data;
    std::string path = options.outputDir + "/" + file + ".npy";
    writeNpy(path, array);
    if (!options.quiet)
      std::cout << "output " << output.name << " " << output.dtype << " "
                << formatShape(output.shape) << " -> " << path << "\n";
  }
}

/// An int64 [batch, length] input of --generate, as values.
std::vector<int64_t> readTokens(const Options &options,
                                const std::map<std::string, NpyArray> &arrays,
                                const std::string &name, int64_t &batch,
                                int64_t &length) {
  const NpyArray &array = arrays.at(name);
  const std::string &path = options.inputs.at(name);
  if (array.descr != "<i8" || array.shape.size() != 2 || array.shape[0] < 1 ||
      array.shape[1] < 1)
    throw Error(path + ": --generate reads " + name +
                " as int64 [batch, length], got " + dtypeOfDescr(array.descr) +
                " " + formatShape(array.shape));
  if (batch >= 0 && (array.shape[0] != batch || array.shape[1] != length))
    throw Error(path + ": " + name + " is " + formatShape(array.shape) +
                " but input_ids is " + formatShape({batch, length}));
  batch = array.shape[0];
  length = array.shape[1];
  std::vector<int64_t> values(batch * length);
  std::memcpy(values.data(), array.data.data(), values.size() * 8);
  return values;
}

int generate(const Options &options, Session &session,
             const std::map<std::string, NpyArray> &arrays) {
  for (const auto &[name, path] : options.inputs)
    if (name != "input_ids" && name != "attention_mask")
      throw Error(path +
                  ": --generate reads input_ids and attention_mask; "
                  "tp-run feeds the decode step's other inputs itself, "
                  "not '" +
                  name + "'");
  if (!arrays.count("input_ids"))
    throw Error("--generate needs the prompts: --input input_ids=FILE.npy");
  int64_t batch = -1, length = 0;
  std::vector<int64_t> ids =
      readTokens(options, arrays, "input_ids", batch, length);
  std::vector<int64_t> mask;
  if (arrays.count("attention_mask"))
    mask = readTokens(options, arrays, "attention_mask", batch, length);
  GenerateOptions generateOptions;
  generateOptions.maxNewTokens = options.generate;
  generateOptions.eosTokenId = options.eos;
  generateOptions.sample = options.sample;
  generateOptions.numBeams = options.numBeams;
  generateOptions.topK = options.topK;
  generateOptions.topP = options.topP;
  generateOptions.temperature = options.temperature;
  generateOptions.seed = options.seed;
  Generation result = session.generate(ids, batch, mask, generateOptions);
  // Under MPI every process has the tokens; rank 0 writes them.
  if (session.getMpiRank() > 0)
    return 0;
  OutputTensor tokens{"tokens", "I64", {result.batch, result.length}, {}};
  tokens.data.resize(result.tokens.size() * sizeof(int64_t));
  std::memcpy(tokens.data.data(), result.tokens.data(), tokens.data.size());
  writeOutputs(options, {tokens});
  const Manifest &manifest = session.getManifest();
  std::cout << "prefill: " << result.prefillSeconds * 1e3 << " ms for "
            << length << " prompt tokens x " << batch << " ("
            << result.prefillChunks << " prefill chunks)\n"
            << "decode: " << result.secondsPerToken * 1e3 << " ms per token ("
            << result.decodeSteps << " steps, " << manifest.ranks << " ranks), "
            << (result.secondsPerToken > 0
                    ? static_cast<double>(batch) / result.secondsPerToken
                    : 0)
            << " tokens/s\n";
  if (result.decodeSteps > 0) {
    double step = result.secondsPerToken;
    auto part = [&](const char *what, double seconds) {
      std::cout << " " << what << " " << seconds * 1e3 << " ms ("
                << 100 * seconds / step << "%)";
    };
    std::cout << "decode step:";
    part("compute", result.computeSecondsPerToken);
    std::cout << ",";
    part("communication", result.communicationSecondsPerToken);
    std::cout << ",";
    part("runtime", result.runtimeSecondsPerToken);
    std::cout << "\n";
  }
  return 0;
}

/// Where this process writes --trace FILE: FILE itself with thread ranks;
/// under MPI each process writes its own, FILE with ".rank<N>" before its
/// extension (trace.json -> trace.rank1.json).
std::string tracePath(const std::string &path, int32_t mpiRank) {
  if (mpiRank < 0)
    return path;
  size_t slash = path.find_last_of('/');
  size_t dot = path.find_last_of('.');
  if (dot == std::string::npos || (slash != std::string::npos && dot < slash))
    dot = path.size();
  return path.substr(0, dot) + ".rank" + std::to_string(mpiRank) +
         path.substr(dot);
}

/// --data DIR's micro-batches: its sub-folders named 0, 1, 2, ... in
/// order, each one micro-batch's inputs as <input name>.npy.
std::vector<std::map<std::string, NpyArray>>
readMicrobatches(const std::string &dir, const Manifest &manifest) {
  namespace fs = std::filesystem;
  std::vector<std::pair<int64_t, fs::path>> folders;
  std::error_code ec;
  for (const fs::directory_entry &entry : fs::directory_iterator(dir, ec)) {
    std::string name = entry.path().filename().string();
    if (entry.is_directory() && !name.empty() &&
        std::all_of(name.begin(), name.end(), ::isdigit))
      folders.emplace_back(std::stoll(name), entry.path());
  }
  if (ec)
    throw Error("--data " + dir + ": " + ec.message());
  if (folders.empty())
    throw Error("--data " + dir +
                " holds no micro-batch: sub-folders 0, 1, ... each with "
                "<input>.npy");
  std::sort(folders.begin(), folders.end());
  std::vector<std::map<std::string, NpyArray>> batches;
  for (const auto &[index, folder] : folders) {
    std::map<std::string, NpyArray> &batch = batches.emplace_back();
    for (const TensorSpec &input : manifest.inputs) {
      if (manifest.training->feedsInput(input.name))
        continue;
      fs::path file = folder / (input.name + ".npy");
      if (!fs::exists(file))
        throw Error(file.string() + " is missing: each micro-batch of --data "
                                    "holds every model input");
      batch[input.name] = readNpy(file.string());
    }
  }
  return batches;
}

/// tp-run --train: --steps optimizer steps, each over the artifact's
/// `accumulate` micro-batches of --data in turn (cycling), printing the
/// loss, the gradient norm and tokens per second (a token is an element of
/// the first integer input, input_ids).
int train(const Options &options, Session &session) {
  const Manifest &manifest = session.getManifest();
  Trainer trainer(session);
  if (!options.resume.empty())
    trainer.resume(options.resume);
  std::vector<std::map<std::string, NpyArray>> batches =
      readMicrobatches(options.data, manifest);
  int64_t tokens = 0;
  for (const TensorSpec &input : manifest.inputs)
    if (input.dtype[0] == 'I') {
      tokens = input.numElements();
      break;
    }
  // A step takes `accumulate` micro-batches per data-parallel replica.
  int64_t accumulate =
      manifest.training->accumulate * manifest.training->dataParallel;
  bool root = session.getMpiRank() <= 0 && session.getDataReplica() == 0;
  double seconds = 0;
  int64_t next = trainer.getStep() * accumulate;
  // The step the --save checkpoint holds; -1: none written by this run.
  int64_t saved = -1;
  for (int64_t s = 0; s < options.steps; ++s) {
    std::vector<std::map<std::string, InputView>> step;
    for (int64_t k = 0; k < accumulate; ++k, ++next) {
      size_t index = static_cast<size_t>(next % batches.size());
      std::map<std::string, InputView> &inputs = step.emplace_back();
      for (const auto &[name, array] : batches[index])
        inputs[name] = {
            dtypeOfDescr(array.descr), array.shape, array.data.data(),
            options.data + "/" + std::to_string(index) + "/" + name + ".npy"};
    }
    TrainStep result;
    try {
      result = trainer.step(step, options.lr);
    } catch (const Error &e) {
      // A failed step changed no weight: the last checkpoint stays.
      if (saved < 0)
        throw;
      throw Error(std::string(e.what()) + "; " + options.save + " holds step " +
                  std::to_string(saved));
    }
    seconds += result.seconds;
    if (root && !options.quiet) {
      std::cout << "step " << result.step << ": loss " << std::setprecision(9)
                << result.loss << std::setprecision(4) << " grad norm "
                << result.gradNorm << " lr " << result.lr << " (" << std::fixed
                << std::setprecision(1) << result.seconds * 1e3
                << " ms: " << result.programSeconds * 1e3 << " ms in the step, "
                << result.updateSeconds * 1e3 << " ms updating";
      if (tokens)
        std::cout << ", " << std::setprecision(0)
                  << static_cast<double>(tokens * accumulate) / result.seconds
                  << " tokens/s";
      if (result.dataCollectives && manifest.training->zero && result.skipped)
        std::cout << "; data axis (ZeRO-1): " << result.dataBuckets
                  << " reduce-scatter(s) of " << result.dataBytes
                  << " B per rank, 1 all-reduce of the loss and norm, no "
                     "all-gather";
      else if (result.dataCollectives && manifest.training->zero)
        std::cout << "; data axis (ZeRO-1): " << result.dataBuckets
                  << " reduce-scatter(s) and " << result.dataBuckets
                  << " all-gather(s) of " << result.dataBytes << " B per rank, "
                  << result.dataCollectives - 2 * result.dataBuckets
                  << " all-reduce of the loss and norm";
      else if (result.dataCollectives)
        std::cout << "; data axis: " << result.dataCollectives
                  << " all-reduce(s), " << result.dataBytes << " B per rank";
      if (result.lossScale > 0)
        std::cout << "; loss scale " << std::defaultfloat
                  << std::setprecision(6) << result.lossScale
                  << (result.skipped ? ": the gradients overflowed, step "
                                       "skipped"
                                     : "");
      std::cout << ")" << std::defaultfloat << std::setprecision(6) << "\n"
                << std::flush;
    }
    bool last = s + 1 == options.steps;
    if (!options.save.empty() &&
        (last || (options.saveEvery && result.step % options.saveEvery == 0))) {
      trainer.save(options.save);
      saved = result.step;
      if (root && !options.quiet)
        std::cout << "saved step " << result.step << " -> " << options.save
                  << "\n";
    }
  }
  if (root) {
    std::cout << "trained " << options.steps << " steps on "
              << manifest.ranks * manifest.training->dataParallel << " ranks";
    if (manifest.training->dataParallel > 1)
      std::cout << " (data " << manifest.training->dataParallel << " x "
                << manifest.ranks << ")";
    std::cout << " in " << std::fixed << std::setprecision(3) << seconds
              << " s";
    if (tokens)
      std::cout << ", " << std::setprecision(0)
                << static_cast<double>(tokens * accumulate * options.steps) /
                       seconds
                << " tokens/s";
    std::cout << std::defaultfloat << std::setprecision(6) << "\n";
  }
  return 0;
}

int runSession(const Options &options, Session &session);

int run(const Options &options) {
  // The manifest as this runtime reads it (checked against SHA256SUMS and
  // the schema), printed by the writer tp-compile uses.
  if (options.printManifest) {
    std::cout << printManifest(loadManifest(options.artifact));
    return 0;
  }
  SessionOptions sessionOptions;
  sessionOptions.launcher = options.launcher;
  sessionOptions.timeoutSeconds = options.timeoutSeconds;
  sessionOptions.stallRank = options.stallRank;
  sessionOptions.trace = !options.trace.empty();
  Session session(options.artifact, sessionOptions);
  const Manifest &manifest = session.getManifest();
  int rc = runSession(options, session);
  if (sessionOptions.trace)
    writeChromeTrace(tracePath(options.trace, session.getMpiRank()),
                     session.getTrace());
  return rc;
}

int runSession(const Options &options, Session &session) {
  const Manifest &manifest = session.getManifest();
  if (options.ranks >= 0 && options.ranks != manifest.ranks)
    throw Error("the artifact was built for " + std::to_string(manifest.ranks) +
                " ranks (tp " + std::to_string(manifest.tp) + " x pp " +
                std::to_string(manifest.pp) + "), not " +
                std::to_string(options.ranks));
  if (options.train)
    return train(options, session);
  std::map<std::string, NpyArray> arrays = readInputs(options);
  if (options.generate >= 0)
    return generate(options, session, arrays);
  std::map<std::string, InputView> inputs;
  for (const auto &[name, array] : arrays)
    inputs[name] = {dtypeOfDescr(array.descr), array.shape, array.data.data(),
                    options.inputs.at(name)};
  std::vector<OutputTensor> outputs =
      session.run(inputs, options.warmup, options.repeat);
  // Under MPI only rank 0 gets the outputs.
  if (outputs.empty() && !manifest.outputs.empty())
    return 0;
  writeOutputs(options, outputs);
  if (options.repeat > 1 || options.warmup > 0) {
    std::cout << "time per run: " << session.getSecondsPerRun() * 1e3 << " ms ("
              << manifest.ranks << " ranks, " << options.repeat << " runs";
    if (int threads = session.getBlasThreads())
      std::cout << ", " << threads << " OpenBLAS thread"
                << (threads == 1 ? "" : "s") << " per rank";
    std::cout << ")\n";
  }
  return 0;
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
    // One line per failed rank.
    std::istringstream lines(e.what());
    for (std::string line; std::getline(lines, line);)
      std::cerr << "tp-run: error: " << line << "\n";
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
