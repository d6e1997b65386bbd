//===- Module.cpp - the _tp_mlir extension of the tp_mlir package ---------===//
//
// The C++ half of tp_mlir: compile (tp::compileModel, with the options of
// CompileOptions.cpp), Session (tp::rt::Session, and tp::rt::Trainer for
// its training steps), export_weights (tp::exportWeights) and export_onnx
// (tp::exportOnnxModel). Arrays cross as
// numpy arrays: inputs are read in place, outputs are handed over without a
// copy. Every C++ error becomes a Python exception carrying its message;
// the GIL is released while a model compiles or runs.
//
//===----------------------------------------------------------------------===//

#include "CompileOptions.h"

#include "tp/Driver/Compile.h"
#include "tp/Runtime/Session.h"
#include "tp/Runtime/Trainer.h"
#include "tp/Target/Artifact/WeightExport.h"

#include "mlir/IR/MLIRContext.h"
#include "llvm/Support/raw_ostream.h"

#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>
#include <nanobind/stl/map.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include <memory>

namespace nb = nanobind;
using namespace nb::literals;

using tp::python::CompileError;

namespace {

struct DType {
  const char *name;
  nb::dlpack::dtype_code code;
  uint8_t bits;
};

constexpr DType kDTypes[] = {
    {"F32", nb::dlpack::dtype_code::Float, 32},
    {"F64", nb::dlpack::dtype_code::Float, 64},
    {"F16", nb::dlpack::dtype_code::Float, 16},
    {"BF16", nb::dlpack::dtype_code::Bfloat, 16},
    {"I64", nb::dlpack::dtype_code::Int, 64},
    {"I32", nb::dlpack::dtype_code::Int, 32},
    {"I16", nb::dlpack::dtype_code::Int, 16},
    {"I8", nb::dlpack::dtype_code::Int, 8},
    {"U8", nb::dlpack::dtype_code::UInt, 8},
    {"BOOL", nb::dlpack::dtype_code::Bool, 8},
};

std::string dtypeName(nb::dlpack::dtype type) {
  for (const DType &d : kDTypes)
    if (static_cast<uint8_t>(d.code) == type.code && d.bits == type.bits &&
        type.lanes == 1)
      return d.name;
  return "dtype(code " + std::to_string(type.code) + ", " +
         std::to_string(type.bits) + " bits)";
}

nb::dlpack::dtype dlpackType(const std::string &name) {
  for (const DType &d : kDTypes)
    if (name == d.name)
      return {static_cast<uint8_t>(d.code), d.bits, 1};
  throw tp::rt::Error("no numpy dtype for " + name);
}

/// Compiles with the GIL released. Between its stages, and after each chunk
/// of weights, the compile takes the GIL back to run Python's signal
/// handlers (Ctrl-C raises KeyboardInterrupt there) and `progress(done,
/// total)` if given; an exception from either stops the compile, and is
/// raised once it has stopped (no artifact is left behind).
std::vector<std::string> compile(mlir::tp::CompileOptions options,
                                 nb::object progress) {
  std::string errors, warnings;
  bool failed, stopped = false;
  // True to go on; false (with a Python error set) once one was raised.
  auto poll = [&](const std::function<bool()> &call) {
    if (stopped)
      return false;
    nb::gil_scoped_acquire acquire;
    if (PyErr_CheckSignals() != 0 || !call())
      stopped = true;
    return !stopped;
  };
  options.interrupted = [&] { return !poll([] { return true; }); };
  if (!progress.is_none())
    options.progress = [&](uint64_t done, uint64_t total) {
      return poll([&] {
        try {
          progress(done, total);
          return true;
        } catch (nb::python_error &e) {
          e.restore();
          return false;
        }
      });
    };
  {
    nb::gil_scoped_release release;
    mlir::DialectRegistry registry;
    mlir::tp::registerCompileDialects(registry);
    mlir::MLIRContext context(registry);
    context.getDiagEngine().registerHandler([&](mlir::Diagnostic &diag) {
      std::string text = mlir::tp::formatDiagnostic(diag, "tp_mlir.compile");
      (diag.getSeverity() == mlir::DiagnosticSeverity::Error ? errors
                                                             : warnings) +=
          text;
      return mlir::success();
    });
    failed = mlir::failed(mlir::tp::compileModel(context, options));
    // explain=True's report, now rather than when Python exits.
    llvm::outs().flush();
  }
  if (stopped && PyErr_Occurred())
    throw nb::python_error();
  if (failed)
    throw CompileError(errors + warnings);
  std::vector<std::string> lines;
  for (size_t start = 0, end; start < warnings.size(); start = end + 1) {
    end = warnings.find('\n', start);
    lines.push_back(warnings.substr(start, end - start));
  }
  return lines;
}

using InputArray = nb::ndarray<nb::ro, nb::c_contig, nb::device::cpu>;
using InputArrays = std::map<std::string, InputArray>;

/// The session's views of `arrays`, read in place; `source` names them in
/// the session's errors.
std::map<std::string, tp::rt::InputView> inputViews(const InputArrays &arrays,
                                                    const std::string &source) {
  std::map<std::string, tp::rt::InputView> inputs;
  for (const auto &[name, array] : arrays) {
    std::vector<int64_t> shape(array.shape_ptr(),
                               array.shape_ptr() + array.ndim());
    inputs[name] = {dtypeName(array.dtype()), shape, array.data(), source};
  }
  return inputs;
}

class PySession {
public:
  PySession(const std::string &artifact, const std::string &launcher,
            double timeout, bool trace) {
    tp::rt::SessionOptions options;
    options.launcher = launcher;
    options.timeoutSeconds = timeout;
    options.trace = trace;
    nb::gil_scoped_release release;
    session = std::make_unique<tp::rt::Session>(artifact, options);
  }

  nb::dict run(const InputArrays &arrays, int64_t warmup, int64_t repeat) {
    std::map<std::string, tp::rt::InputView> inputs =
        inputViews(arrays, "run()");
    std::vector<tp::rt::OutputTensor> outputs;
    {
      nb::gil_scoped_release release;
      outputs = session->run(inputs, warmup, repeat);
    }
    nb::dict result;
    for (tp::rt::OutputTensor &output : outputs) {
      // The array owns the bytes the session produced: no copy.
      auto *bytes = new std::vector<char>(std::move(output.data));
      nb::capsule owner(bytes, [](void *p) noexcept {
        delete static_cast<std::vector<char> *>(p);
      });
      std::vector<size_t> shape(output.shape.begin(), output.shape.end());
      result[output.name.c_str()] =
          nb::ndarray<nb::numpy>(bytes->data(), shape.size(), shape.data(),
                                 owner, nullptr, dlpackType(output.dtype));
    }
    return result;
  }

  nb::list signature(bool outputs) const {
    const tp::rt::Manifest &manifest = session->getManifest();
    nb::list list;
    for (const tp::rt::TensorSpec &spec :
         outputs ? manifest.outputs : manifest.inputs)
      list.append(nb::make_tuple(spec.name, spec.dtype, spec.shape));
    return list;
  }

  /// Session::generate on [batch, length] int64 prompts (and mask).
  nb::ndarray<nb::numpy, int64_t>
  generate(nb::ndarray<int64_t, nb::ndim<2>, nb::c_contig, nb::device::cpu> ids,
           std::optional<
               nb::ndarray<int64_t, nb::ndim<2>, nb::c_contig, nb::device::cpu>>
               mask,
           int64_t maxNewTokens, int64_t eos, bool sample, int64_t topK,
           double topP, double temperature, uint64_t seed, int64_t beams) {
    int64_t batch = static_cast<int64_t>(ids.shape(0));
    std::vector<int64_t> prompt(ids.data(), ids.data() + ids.size());
    std::vector<int64_t> attention;
    if (mask)
      attention.assign(mask->data(), mask->data() + mask->size());
    tp::rt::GenerateOptions options;
    options.maxNewTokens = maxNewTokens;
    options.eosTokenId = eos;
    options.sample = sample;
    options.topK = topK;
    options.topP = topP;
    options.temperature = temperature;
    options.seed = seed;
    options.numBeams = beams;
    tp::rt::Generation result;
    {
      nb::gil_scoped_release release;
      result = session->generate(prompt, batch, attention, options);
    }
    lastGeneration = nb::dict();
    lastGeneration["prefill_seconds"] = result.prefillSeconds;
    lastGeneration["prefill_chunks"] = result.prefillChunks;
    lastGeneration["decode_steps"] = result.decodeSteps;
    lastGeneration["seconds_per_token"] = result.secondsPerToken;
    lastGeneration["compute_seconds_per_token"] = result.computeSecondsPerToken;
    lastGeneration["communication_seconds_per_token"] =
        result.communicationSecondsPerToken;
    lastGeneration["runtime_seconds_per_token"] = result.runtimeSecondsPerToken;
    auto *tokens = new std::vector<int64_t>(std::move(result.tokens));
    nb::capsule owner(tokens, [](void *p) noexcept {
      delete static_cast<std::vector<int64_t> *>(p);
    });
    size_t shape[2] = {static_cast<size_t>(result.batch),
                       static_cast<size_t>(result.length)};
    return nb::ndarray<nb::numpy, int64_t>(tokens->data(), 2, shape, owner);
  }

  double secondsPerRun() const { return session->getSecondsPerRun(); }
  /// Writes the ranks' timelines so far (a session opened with trace=True)
  /// as a Chrome trace.
  void writeTrace(const std::string &path) const {
    if (!session->getOptions().trace)
      throw tp::rt::Error("write_trace: the session was opened without "
                          "trace=True");
    tp::rt::writeChromeTrace(path, session->getTrace());
  }
  int64_t ranks() const { return session->getManifest().ranks; }
  /// The timings of the last generate(), as tp-run --generate prints them.
  nb::dict lastGenerationTimings() const { return lastGeneration; }

  /// One optimizer step (Trainer::step) over `microbatches`; `lr` < 0: the
  /// artifact's. Returns the loss; lastTrainStep() has the rest.
  double trainStep(const std::vector<InputArrays> &microbatches, double lr) {
    std::vector<std::map<std::string, tp::rt::InputView>> batches;
    for (size_t k = 0; k < microbatches.size(); ++k)
      batches.push_back(
          inputViews(microbatches[k],
                     microbatches.size() == 1
                         ? "train_step()"
                         : "train_step() micro-batch " + std::to_string(k)));
    tp::rt::TrainStep result;
    {
      nb::gil_scoped_release release;
      result = getTrainer().step(batches, lr);
    }
    lastStep = nb::dict();
    lastStep["step"] = result.step;
    lastStep["loss"] = result.loss;
    lastStep["grad_norm"] = result.gradNorm;
    lastStep["lr"] = result.lr;
    lastStep["seconds"] = result.seconds;
    lastStep["program_seconds"] = result.programSeconds;
    lastStep["update_seconds"] = result.updateSeconds;
    if (result.lossScale > 0) {
      lastStep["loss_scale"] = result.lossScale;
      lastStep["skipped"] = result.skipped;
    }
    if (result.dataCollectives) {
      lastStep["data_collectives"] = result.dataCollectives;
      lastStep["data_buckets"] = result.dataBuckets;
      lastStep["data_bytes"] = result.dataBytes;
    }
    return result.loss;
  }

  void save(const std::string &dir) {
    nb::gil_scoped_release release;
    getTrainer().save(dir);
  }

  void resume(const std::string &dir) {
    nb::gil_scoped_release release;
    getTrainer().resume(dir);
  }

  /// Optimizer steps taken (restored by resume); 0 before training.
  int64_t steps() const { return trainer ? trainer->getStep() : 0; }
  /// The last train_step()'s figures, as tp-run --train prints them.
  nb::dict lastTrainStep() const { return lastStep; }

private:
  /// Made on the first train_step, save or resume: an artifact compiled
  /// without train= runs (and refuses to train) as before.
  tp::rt::Trainer &getTrainer() {
    if (!trainer)
      trainer = std::make_unique<tp::rt::Trainer>(*session);
    return *trainer;
  }

  std::unique_ptr<tp::rt::Session> session;
  /// Declared after `session`, which it refers to: destroyed first.
  std::unique_ptr<tp::rt::Trainer> trainer;
  nb::dict lastGeneration, lastStep;
};

} // namespace

NB_MODULE(_tp_mlir, m) {
  m.doc() = "tp-mlir's compiler and runtime (use the tp_mlir package)";
  static nb::exception<tp::rt::Error> error(m, "TPError", PyExc_RuntimeError);
  nb::exception<CompileError>(m, "CompileError", error.ptr());

  tp::python::bindCompileOptions(m);

  m.def("compile", &compile, "options"_a, "progress"_a = nb::none(),
        "Compiles options.model into the artifact folder options.output; "
        "returns the warnings, raises CompileError with every diagnostic. "
        "progress(done, total) is called as the weights are written; an "
        "exception from it, or Ctrl-C, stops the compile and is raised.");

  nb::class_<PySession>(m, "Session")
      .def(nb::init<const std::string &, const std::string &, double, bool>(),
           "artifact"_a, "launcher"_a = "threads", "timeout"_a = 60.0,
           "trace"_a = false)
      .def("write_trace", &PySession::writeTrace, "path"_a)
      .def("run", &PySession::run, "inputs"_a, "warmup"_a = 0, "repeat"_a = 1)
      .def("generate", &PySession::generate, "input_ids"_a,
           "attention_mask"_a.none(), "max_new_tokens"_a, "eos"_a, "sample"_a,
           "top_k"_a, "top_p"_a, "temperature"_a, "seed"_a, "num_beams"_a)
      .def_prop_ro("inputs",
                   [](const PySession &s) { return s.signature(false); })
      .def_prop_ro("outputs",
                   [](const PySession &s) { return s.signature(true); })
      .def_prop_ro("seconds_per_run", &PySession::secondsPerRun)
      .def_prop_ro("generation_timings", &PySession::lastGenerationTimings)
      .def("train_step", &PySession::trainStep, "microbatches"_a, "lr"_a)
      .def("save", &PySession::save, "path"_a)
      .def("resume", &PySession::resume, "path"_a)
      .def_prop_ro("steps", &PySession::steps)
      .def_prop_ro("last_train_step", &PySession::lastTrainStep)
      .def_prop_ro("ranks", &PySession::ranks);

  m.def(
      "export_weights",
      [](const std::string &artifact, const std::string &path,
         const std::string &checkpoint) {
        std::string error;
        bool ok;
        {
          nb::gil_scoped_release release;
          ok = mlir::tp::exportWeights(artifact, path, /*progress=*/false,
                                       error, checkpoint);
        }
        if (!ok)
          throw tp::rt::Error(error);
      },
      "artifact"_a, "path"_a, "checkpoint"_a = "");
  m.def(
      "export_onnx",
      [](const std::string &artifact, const std::string &path,
         const std::string &checkpoint, const std::string &source) {
        std::string error;
        bool ok;
        {
          nb::gil_scoped_release release;
          ok = mlir::tp::exportOnnxModel(artifact, source, path,
                                         /*progress=*/false, error, checkpoint);
        }
        if (!ok)
          throw tp::rt::Error(error);
      },
      "artifact"_a, "path"_a, "checkpoint"_a = "", "source"_a = "");

  // The manifest as the runtime reads it (checked against SHA256SUMS and
  // the schema), in the text its one writer prints.
  m.def(
      "read_manifest",
      [](const std::string &artifact) {
        return tp::rt::printManifest(tp::rt::loadManifest(artifact));
      },
      "artifact"_a);
}
