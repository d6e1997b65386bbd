//===- InputTypes.cpp - the element type of each forward() input ----------===//
//
// A TorchScript file declares forward()'s inputs as `Tensor`, without a
// dtype, and the compiled model takes exactly the type it was compiled
// for, so a wrong guess fails only when it runs. Each input's type comes
// from the most trusted of: the user (--input-shape NAME=DIMS:TYPE); the
// example input the trace recorded (PyTorch 2); a use that admits one type
// only (indices are int64, a matmul operand has its weight's type);
// otherwise it is assumed, and the caller says so.
//
//===----------------------------------------------------------------------===//

#include "TorchScriptGraph.h"

#include <unordered_set>

using namespace tp::torchscript;
using torch::jit::Node;
using torch::jit::Value;

namespace {

/// Ops whose result holds the values of their input 0 (a view, a copy), so
/// that the result's uses are the input's.
bool keepsValues(const std::string &kind) {
  static const std::unordered_set<std::string> ops = {
      "aten::view",      "aten::reshape", "aten::unsqueeze",  "aten::squeeze",
      "aten::slice",     "aten::select",  "aten::contiguous", "aten::flatten",
      "aten::unflatten", "aten::expand",  "aten::expand_as",  "aten::transpose",
      "aten::permute",   "aten::t",       "aten::narrow",     "aten::repeat",
      "aten::clone",     "aten::detach"};
  return ops.count(kind) != 0;
}

/// Ops that compute in one type with all their tensor operands, or promote
/// an integer operand to the float one's type: an operand used with a
/// floating-point weight is a float of the weight's type.
bool combinesWithWeights(const std::string &kind) {
  static const std::unordered_set<std::string> ops = {"aten::linear",
                                                      "aten::matmul",
                                                      "aten::mm",
                                                      "aten::bmm",
                                                      "aten::addmm",
                                                      "aten::baddbmm",
                                                      "aten::addmv",
                                                      "aten::conv1d",
                                                      "aten::conv2d",
                                                      "aten::conv3d",
                                                      "aten::convolution",
                                                      "aten::_convolution",
                                                      "aten::conv_transpose1d",
                                                      "aten::conv_transpose2d",
                                                      "aten::conv_transpose3d",
                                                      "aten::layer_norm",
                                                      "aten::group_norm",
                                                      "aten::batch_norm",
                                                      "aten::instance_norm",
                                                      "aten::add",
                                                      "aten::sub",
                                                      "aten::mul",
                                                      "aten::div",
                                                      "aten::rsub",
                                                      "aten::addcmul",
                                                      "aten::addcdiv"};
  return ops.count(kind) != 0;
}

/// Ops that torch runs on floating-point operands only (an integer one is
/// "not implemented for 'Long'"), at these operand positions.
bool needsFloat(const Node *node, size_t offset) {
  std::string kind = node->kind().toQualString();
  if (kind == "aten::layer_norm" || kind == "aten::group_norm" ||
      kind == "aten::gelu" || kind == "aten::silu")
    return offset == 0;
  if (kind == "aten::softmax" || kind == "aten::log_softmax")
    // Unless a dtype to compute in is given.
    return offset == 0 && node->inputs().size() > 2 &&
           node->input(2)->type()->kind() == c10::TypeKind::NoneType;
  if (kind == "aten::scaled_dot_product_attention")
    return offset <= 2;
  return false;
}

class InputTypeChooser {
public:
  explicit InputTypeChooser(const LoadedGraph &loaded) : loaded(loaded) {
    // The model's float type: its floating-point weights' most common one.
    std::map<c10::ScalarType, size_t> counts;
    for (const auto &[value, tensor] : loaded.weightTensors)
      if (at::isFloatingType(tensor.scalar_type()))
        ++counts[tensor.scalar_type()];
    size_t best = 0;
    for (const auto &[type, count] : counts)
      if (count > best) {
        best = count;
        modelFloat = onnxElementType(type, "a weight");
      }
  }

  /// The type the uses of `input` admit, with the use that decides it; or
  /// no type, with the input's first use that is not a view or a size.
  InputType fromUses(const Value *input) const {
    InputType result;
    result.source = InputTypeSource::Assumed;
    std::vector<const Value *> work = {input};
    std::unordered_set<const Value *> seen;
    while (!work.empty()) {
      const Value *v = work.back();
      work.pop_back();
      if (!seen.insert(v).second)
        continue;
      for (const torch::jit::Use &use : v->uses()) {
        const Node *user = use.user;
        std::string kind = user->kind().toQualString();
        if (kind == "aten::size" || kind == "aten::dim" ||
            kind == "prim::device" || kind == "prim::dtype")
          continue;
        if (keepsValues(kind) && use.offset == 0) {
          work.push_back(user->output());
          continue;
        }
        if (int32_t type = decide(user, use.offset)) {
          result.elementType = type;
          result.source = InputTypeSource::Used;
          result.reason = describeNode(user);
          return result;
        }
        if (result.reason.empty())
          result.reason = describeNode(user);
      }
    }
    return result;
  }

private:
  /// The one type that `user` admits for its operand `offset`; 0 when it
  /// admits several (a cast, a comparison, arithmetic without weights).
  int32_t decide(const Node *user, size_t offset) const {
    std::string kind = user->kind().toQualString();
    // Indices.
    if ((kind == "aten::embedding" && offset == 1) ||
        (kind == "aten::index_select" && offset == 2) ||
        (kind == "aten::gather" && offset == 2) ||
        (kind == "aten::one_hot" && offset == 0))
      return onnx::TensorProto::INT64;
    // x[..., v]: aten::index's list of indices.
    if (kind == "prim::ListConstruct")
      for (const torch::jit::Use &listUse : user->output()->uses())
        if (listUse.user->kind().toQualString() == std::string("aten::index") &&
            listUse.offset == 1)
          return onnx::TensorProto::INT64;
    if (kind == "aten::where" && offset == 0)
      return onnx::TensorProto::BOOL;
    if (combinesWithWeights(kind))
      for (size_t i = 0; i < user->inputs().size(); ++i)
        if (i != offset)
          if (int32_t type = floatWeightType(user->input(i)))
            return type;
    if (needsFloat(user, offset))
      return modelFloat;
    return 0;
  }

  /// The type of the floating-point weight that `v` views, or 0.
  int32_t floatWeightType(const Value *v) const {
    while (v) {
      auto weight = loaded.weightTensors.find(v);
      if (weight != loaded.weightTensors.end())
        return at::isFloatingType(weight->second.scalar_type())
                   ? onnxElementType(weight->second.scalar_type(), "a weight")
                   : 0;
      const Node *producer = v->node();
      v = keepsValues(producer->kind().toQualString()) ? producer->input(0)
                                                       : nullptr;
    }
    return 0;
  }

  const LoadedGraph &loaded;
  int32_t modelFloat = onnx::TensorProto::FLOAT;
};

} // namespace

const char *tp::torchscript::elementTypeName(int32_t type) {
  switch (type) {
  case onnx::TensorProto::FLOAT:
    return "f32";
  case onnx::TensorProto::FLOAT16:
    return "f16";
  case onnx::TensorProto::BFLOAT16:
    return "bf16";
  case onnx::TensorProto::DOUBLE:
    return "f64";
  case onnx::TensorProto::INT64:
    return "i64";
  case onnx::TensorProto::INT32:
    return "i32";
  case onnx::TensorProto::BOOL:
    return "bool";
  default:
    return nullptr;
  }
}

std::vector<InputType> tp::torchscript::chooseInputTypes(
    const LoadedGraph &loaded, const ArchiveState &archive,
    const std::map<std::string, InputSpec> &inputs,
    std::vector<std::string> &warnings) {
  InputTypeChooser chooser(loaded);
  // A recorded type we cannot take as an input type (uint8, complex)
  // records nothing usable; the uses decide then.
  auto recorded = [&](size_t i) -> int32_t {
    if (archive.tracedInputTypes.size() != loaded.inputNames.size())
      return 0;
    try {
      int32_t type = onnxElementType(archive.tracedInputTypes[i], "");
      return elementTypeName(type) ? type : 0;
    } catch (const ConvertError &) {
      return 0;
    }
  };
  std::vector<InputType> types;
  for (size_t i = 0; i < loaded.inputNames.size(); ++i) {
    const std::string &name = loaded.inputNames[i];
    InputType type;
    auto spec = inputs.find(name);
    int32_t traced = recorded(i);
    if (spec != inputs.end() && spec->second.elementType) {
      type.elementType = spec->second.elementType;
      type.source = InputTypeSource::Given;
      if (traced && traced != type.elementType)
        warnings.push_back("input '" + name + "' is given as " +
                           elementTypeName(type.elementType) +
                           ", but the module was traced with an input of "
                           "type " +
                           elementTypeName(traced));
    } else if (traced) {
      type.elementType = traced;
      type.source = InputTypeSource::Recorded;
    } else {
      type = chooser.fromUses(loaded.graph->inputs()[i + 1]);
      // Nothing decides it. What models leave free is, in practice, token
      // ids and attention masks that they cast or compare (tokenizers
      // give int64; transformers casts the mask to its float type), while
      // float data meets a weight, which decides it. If the graph cannot
      // run with int64, the caller falls back to f32.
      if (type.source == InputTypeSource::Assumed)
        type.elementType = onnx::TensorProto::INT64;
    }
    types.push_back(std::move(type));
  }
  return types;
}
