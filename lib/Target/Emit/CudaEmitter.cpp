//===- CudaEmitter.cpp - CUDA module structure and device buffers ---------===//
//
// The file layout (prelude, constants, kernels, host functions, the stage
// table the runtime looks functions up in), device buffers, and the dispatch
// that keeps scalars, calls and branches on the C++ emitter's host code.
//
//===----------------------------------------------------------------------===//

#include "CudaEmitter.h"
#include "tp/Dialect/TP/TPOps.h"
#include "tp/Target/Artifact/ModelSignature.h"

#include "tp/Target/Emit/EmitCuda.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/Math/IR/Math.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/Dialect/Shard/IR/ShardDialect.h"
#include "mlir/Dialect/Shard/IR/ShardOps.h"

using namespace mlir;
using namespace mlir::tp;
using namespace mlir::tp::emit;

CudaEmitter::CudaEmitter(ModuleOp module, raw_indented_ostream &os)
    : CppEmitter(module, os) {
  contextType = "tp::cuda::Rank";
}

//===----------------------------------------------------------------------===//
// Buffers
//===----------------------------------------------------------------------===//

LogicalResult CudaEmitter::allocate(Value result, Operation *op,
                                    StringRef prefix) {
  FailureOr<std::string> type = elementTypeOf(result, op);
  if (failed(type))
    return failure();
  std::string text = bind(result, prefix);
  os << *type << " *" << text << " = tp::cuda::allocate<" << *type
     << ">(context, " << numElements(result) << ", "
     << siteLiteral(op, op->getName().getStringRef()) << ");\n";
  owned.insert(result);
  return success();
}

void CudaEmitter::copy(Value dst, Value src) {
  os << "TP_CUDA_CHECK(cudaMemcpyAsync(" << name(dst) << ", " << name(src)
     << ", " << byteCount(dst)
     << ", cudaMemcpyDeviceToDevice, context->stream), " << site << ");\n";
}

void CudaEmitter::release(Value value) {
  os << "tp::cuda::release(context, " << name(value) << ");\n";
}

void CudaEmitter::copyResult(unsigned index, Value value) {
  auto func = value.getParentRegion()->getParentOfType<func::FuncOp>();
  os << "TP_CUDA_CHECK(cudaMemcpyAsync(results[" << index << "], "
     << name(value) << ", " << byteCount(value)
     << ", cudaMemcpyDeviceToDevice, context->stream), \"return from @"
     << (func ? func.getSymName() : "?") << "\");\n";
}

std::string CudaEmitter::commFor(GroupSpec group) {
  groups.insert({group.size, group.stride});
  return "context->comm(tp::cuda::Group{" + std::to_string(group.size) + ", " +
         std::to_string(group.stride) + "})";
}

//===----------------------------------------------------------------------===//
// Dispatch
//===----------------------------------------------------------------------===//

LogicalResult CudaEmitter::emitOp(Operation *op) {
  // Calls, branches and scalar arithmetic are host code, as on the CPU (the
  // ops in their regions come back here); arithmetic on tensors has no
  // kernel of its own.
  bool isTensor = llvm::any_of(op->getResultTypes(),
                               [](Type type) { return isa<ShapedType>(type); });
  if (isTensor &&
      isa<arith::ArithDialect, math::MathDialect>(op->getDialect()) &&
      !isa<arith::ConstantOp>(op))
    return op->emitError("CUDA code generation does not support ")
           << op->getName();
  // Checks name the op they come from (a branch's copies: the branch).
  std::string outerSite = site;
  site = siteLiteral(op, op->getName().getStringRef());
  LogicalResult result = CppEmitter::emitOp(op);
  site = outerSite;
  return result;
}

LogicalResult CudaEmitter::emitExtract(tensor::ExtractOp op) {
  FailureOr<std::string> type = scalarTypeFor(op.getType(), op);
  if (failed(type))
    return failure();
  SmallVector<int64_t> strides = stridesOf(op.getTensor().getType().getShape());
  std::string offset;
  for (auto [i, index] : llvm::enumerate(op.getIndices()))
    offset += " + " + name(index) + " * " + std::to_string(strides[i]) + "LL";
  os << "const " << *type << " " << bind(op.getResult())
     << " = tp::cuda::load(context, " << name(op.getTensor()) << offset << ", "
     << site << ");\n";
  return success();
}

//===----------------------------------------------------------------------===//
// The module
//===----------------------------------------------------------------------===//

static constexpr const char *kCudaPrelude = R"(#define TP_CUDA_MODEL_LIBRARY
#include "tp_cuda_runtime.h"

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cmath>
#include <cstdint>
#include <limits>

// The scalar semantics the C++ target shares (tp_scalar_ops.h), on the
// host and the device.
#define TP_HD __host__ __device__
#include "tp_scalar_ops.h"

namespace {

// The element types the emitters name Float16 and BFloat16: arithmetic on
// them goes through float (tp-convert-dtype extends every operand).
using Float16 = __half;
using BFloat16 = __nv_bfloat16;

// The C++ target's vectorisable tanh, exp and erf (tp_math.h); CUDA's own
// are fast already.
__host__ __device__ inline float tanhF(float x) { return tanhf(x); }
__host__ __device__ inline float expF(float x) { return expf(x); }
__host__ __device__ inline float erfF(float x) { return erff(x); }

} // namespace

using namespace tp::math;

)";

/// `count * sizeof(T)` for a tensor type, as C++.
static std::string bytesOf(Type type) {
  auto tensor = cast<RankedTensorType>(type);
  return std::to_string(tensor.getNumElements()) + " * sizeof(" +
         CppEmitter::scalarType(tensor.getElementType()) + ")";
}

LogicalResult CudaEmitter::emitStageTable(raw_indented_ostream &out) {
  SmallVector<func::FuncOp> stages;
  for (func::FuncOp func : module.getOps<func::FuncOp>())
    if (!func.isPrivate())
      stages.push_back(func);
  // Arrays are left out when empty: C++ has no zero-length arrays.
  auto array = [&](StringRef type, StringRef arrayName, unsigned count,
                   function_ref<void(unsigned)> element) {
    if (count == 0)
      return;
    out << "const " << type << " " << arrayName << "[] = {";
    for (unsigned i = 0; i < count; ++i) {
      out << (i ? ", " : "");
      element(i);
    }
    out << "};\n";
  };
  bool mutableWeights = module->hasAttr(TPDialect::kMutableWeightsAttrName);
  out << "// The stage functions the runtime runs (see manifest.json), and "
         "the groups\n// whose communicators every rank creates.\n";
  out << "namespace {\n";
  for (func::FuncOp func : stages) {
    std::string prefix = func.getSymName().str();
    for (Type type : llvm::concat<const Type>(func.getArgumentTypes(),
                                              func.getResultTypes()))
      if (!isa<RankedTensorType>(type) ||
          scalarType(cast<RankedTensorType>(type).getElementType()).empty())
        return func.emitError("CUDA code generation supports tensor "
                              "arguments and results only");
    array("std::int64_t", prefix + "_argBytes", func.getNumArguments(),
          [&](unsigned i) { out << bytesOf(func.getArgumentTypes()[i]); });
    array("bool", prefix + "_argIsWeight", func.getNumArguments(),
          [&](unsigned i) {
            // A KV cache too: uploaded once (zeros) and then written on
            // the device, step after step. Weights that an optimizer
            // updates on the host between runs (a training step) are
            // uploaded with the inputs at every run instead.
            bool resident = (func.getArgAttr(i, TPDialect::kWeightAttrName) &&
                             !mutableWeights) ||
                            func.getArgAttr(i, TPDialect::kCacheAttrName);
            out << (resident ? "true" : "false");
          });
    array("std::int64_t", prefix + "_resultBytes", func.getNumResults(),
          [&](unsigned i) { out << bytesOf(func.getResultTypes()[i]); });
  }
  auto orNull = [](bool present, const std::string &text) {
    return present ? text : std::string("nullptr");
  };
  array("tp::cuda::StageInfo", "stages", stages.size(), [&](unsigned i) {
    func::FuncOp func = stages[i];
    std::string prefix = func.getSymName().str();
    out << "\n    {\"" << prefix << "\", fn_" << prefix << ", "
        << func.getNumArguments() << ", " << func.getNumResults() << ", "
        << orNull(func.getNumArguments(), prefix + "_argBytes") << ", "
        << orNull(func.getNumArguments(), prefix + "_argIsWeight") << ", "
        << orNull(func.getNumResults(), prefix + "_resultBytes") << "}";
  });
  array("tp::cuda::Group", "groups", groups.size(), [&](unsigned i) {
    out << "{" << groups[i].first << ", " << groups[i].second << "}";
  });
  out << "} // namespace\n\n";
  out << "const tp::cuda::ModelInfo &tp::cuda::model() {\n";
  out << "  static const ModelInfo info{" << orNull(!stages.empty(), "stages")
      << ", " << stages.size() << ", " << orNull(!groups.empty(), "groups")
      << ", " << groups.size() << "};\n  return info;\n}\n";
  return success();
}

LogicalResult CudaEmitter::emitModule() {
  std::string body;
  llvm::raw_string_ostream bodyStream(body);
  raw_indented_ostream bodyOs(bodyStream);
  SmallVector<func::FuncOp> funcs(module.getOps<func::FuncOp>());
  for (func::FuncOp func : funcs)
    bodyOs << "static void fn_" << func.getSymName() << "(" << contextType
           << " *, void *const *, void *const *);\n";
  bodyOs << "\n";
  {
    // Function bodies go to a buffer first: the constants and kernels they
    // make are printed above them.
    CudaEmitter inner(module, bodyOs);
    if (failed(inner.findFusedAttention()))
      return failure();
    inner.findRowGroups();
    for (func::FuncOp func : funcs)
      if (failed(inner.emitFunction(func)))
        return failure();
    globals = std::move(inner.globals);
    kernels = std::move(inner.kernels);
    groups = std::move(inner.groups);
  }
  if (failed(emitStageTable(bodyOs)))
    return failure();

  os << "// Generated by tp-compile from ";
  if (auto model = module->getAttrOfType<StringAttr>("tp.model"))
    os << llvm::sys::path::filename(model.getValue());
  else
    os << "an MLIR module";
  os << ": one rank's program (SPMD) for CUDA.\n";
  for (auto grid : module.getOps<shard::GridOp>()) {
    os << "// grid @" << grid.getSymName() << " shape [";
    llvm::interleaveComma(grid.getShape(), os);
    os << "]\n";
  }
  os << kCudaPrelude;
  if (!globals.empty() || !kernels.empty())
    os << "namespace {\n\n"
       << globals << (globals.empty() ? "" : "\n") << kernels
       << "} // namespace\n\n";
  os << body;
  return emitModelSignature(module, os);
}

LogicalResult mlir::tp::emitCuda(ModuleOp module, llvm::raw_ostream &os) {
  raw_indented_ostream indented(os);
  CudaEmitter emitter(module, indented);
  return emitter.emitModule();
}
