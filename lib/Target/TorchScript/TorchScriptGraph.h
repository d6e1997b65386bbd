//===- TorchScriptGraph.h - a loaded, typed TorchScript graph ---*- C++ -*-===//
//
// Private to the TorchScript frontend: the module's forward graph inlined,
// its attribute reads resolved (parameters and buffers kept as reads of
// named weights, everything else folded to constants), and every value
// typed by one run on example inputs.
//
//===----------------------------------------------------------------------===//

#ifndef TP_LIB_TARGET_TORCHSCRIPT_TORCHSCRIPTGRAPH_H
#define TP_LIB_TARGET_TORCHSCRIPT_TORCHSCRIPTGRAPH_H

#include "tp/Target/TorchScript/TorchScriptToONNX.h"

#include <caffe2/serialize/read_adapter_interface.h>
#include <torch/script.h>

#include <memory>
#include <stdexcept>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <vector>

namespace tp::torchscript {

/// A failure with a message for the user (file, op, source range).
struct ConvertError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

/// Where a weight's bytes are in the archive: an absolute offset into the
/// .pt file (records are stored uncompressed) and their length.
struct ArchiveLocation {
  uint64_t offset = 0;
  uint64_t bytes = 0;
};

/// The module's state as the archive holds it, read from data.pkl without
/// reading any tensor data.
struct ArchiveState {
  /// Every tensor, by attribute path ("h.0.attn.c_attn.weight"), viewing a
  /// private mapping of the file: bytes are read only where used.
  std::unordered_map<std::string, at::Tensor> tensors;
  /// Where the contiguous ones lie.
  std::unordered_map<std::string, ArchiveLocation> locations;
  /// File offsets of the records that loading the module need not read
  /// (large floating-point tensors: weights).
  std::unordered_set<uint64_t> unreadRecords;
  /// forward()'s example inputs' dtypes, in argument order, where the
  /// trace recorded them (PyTorch 2.0 and later); empty otherwise.
  std::vector<c10::ScalarType> tracedInputTypes;
};

ArchiveState readArchiveState(const std::string &path);

struct LoadedGraph {
  torch::jit::Module module;
  std::shared_ptr<torch::jit::Graph> graph;
  /// forward()'s argument names, without self, in graph input order (graph
  /// input i + 1).
  std::vector<std::string> inputNames;
  /// Values that read a parameter or buffer, by attribute path.
  std::unordered_map<const torch::jit::Value *, std::string> weights;
  /// Their tensors as loaded: the types are right, but the large
  /// floating-point ones were never read (see ArchiveState); the run that
  /// types the graph reads them, and nothing else may.
  std::unordered_map<const torch::jit::Value *, at::Tensor> weightTensors;
  /// What the user should know of the conversion (an input type that was
  /// assumed, and how to give it), one line each, without the file name.
  std::vector<std::string> warnings;
};

/// How a forward() input's element type was decided, most trusted first.
enum class InputTypeSource {
  Given,    ///< by the user, --input-shape NAME=DIMS:TYPE
  Recorded, ///< the example input's, recorded by the trace (PyTorch 2)
  Used,     ///< by a use that admits one type only (indices: int64)
  Assumed,  ///< by nothing: a guess, which the user is told of
};

struct InputType {
  int32_t elementType = 0; ///< ONNX's
  InputTypeSource source = InputTypeSource::Assumed;
  /// For Used, the use that decided it; for Assumed, the input's first
  /// use (if any) that is not a view: "aten::to at model.py:12".
  std::string reason;
};

/// Each forward() input's element type, in argument order, for the
/// untyped (not yet run) graph; a type the user gave that differs from the
/// recorded one adds a warning.
std::vector<InputType>
chooseInputTypes(const LoadedGraph &loaded, const ArchiveState &archive,
                 const std::map<std::string, InputSpec> &inputs,
                 std::vector<std::string> &warnings);

/// "f32", "i64", ...: the names --input-shape takes; null for other types.
const char *elementTypeName(int32_t type);

/// Loads, checks and simplifies the module at `path`, leaving the records
/// `archive` marks unread; with `typed`, also types every value by running
/// the graph on inputs shaped as `inputs` says (each forward() argument
/// needs one).
LoadedGraph loadGraph(const std::string &path, const ArchiveState &archive,
                      const std::map<std::string, InputSpec> &inputs,
                      bool typed);

/// The reader torch::jit::load reads the archive through: it reads every
/// byte but those of the records at `unread` (see ArchiveState).
std::shared_ptr<caffe2::serialize::ReadAdapterInterface>
makeArchiveReader(const std::string &path,
                  const std::unordered_set<uint64_t> &unread);

/// "aten::linear at model.py:12" for messages.
std::string describeNode(const torch::jit::Node *node);

/// The ONNX element type of a torch scalar type; throws for the others.
int32_t onnxElementType(c10::ScalarType type, const std::string &what);

/// Translates the typed graph into `model`'s graph.
void translateGraph(const std::string &path, LoadedGraph &loaded,
                    const ArchiveState &archive, onnx::ModelProto &model);

} // namespace tp::torchscript

#endif // TP_LIB_TARGET_TORCHSCRIPT_TORCHSCRIPTGRAPH_H
