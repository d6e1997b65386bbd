//===- TranslateRegistration.cpp - tp-translate --emit-cpp|--emit-cuda ---===//

#include "tp/Dialect/TP/TPDialect.h"
#include "tp/Target/Emit/EmitCpp.h"
#include "tp/Target/Emit/EmitCuda.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/Linalg/IR/Linalg.h"
#include "mlir/Dialect/Math/IR/Math.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/Dialect/Shard/IR/ShardDialect.h"
#include "mlir/Dialect/Tensor/IR/Tensor.h"
#include "mlir/Tools/mlir-translate/Translation.h"

using namespace mlir;

/// The dialects a partitioned module holds.
static void registerEmitDialects(DialectRegistry &registry) {
  registry.insert<arith::ArithDialect, func::FuncDialect, linalg::LinalgDialect,
                  math::MathDialect, scf::SCFDialect, shard::ShardDialect,
                  tensor::TensorDialect, tp::TPDialect>();
}

void mlir::tp::registerEmitCudaTranslation() {
  TranslateFromMLIRRegistration registration(
      "emit-cuda",
      "Emit a partitioned module as CUDA C++ for one rank (--target cuda)",
      [](Operation *op, llvm::raw_ostream &os) -> LogicalResult {
        auto module = dyn_cast<ModuleOp>(op);
        if (!module)
          return op->emitError("--emit-cuda expects a builtin.module");
        if (failed(prepareForEmission(module, "cuda")))
          return failure();
        return emitCuda(module, os);
      },
      registerEmitDialects);
}

void mlir::tp::registerEmitCppTranslation() {
  TranslateFromMLIRRegistration registration(
      "emit-cpp",
      "Emit a partitioned module as C++ for one rank (--target cpu)",
      [](Operation *op, llvm::raw_ostream &os) -> LogicalResult {
        auto module = dyn_cast<ModuleOp>(op);
        if (!module)
          return op->emitError("--emit-cpp expects a builtin.module");
        if (failed(prepareForEmission(module, "cpu")))
          return failure();
        return emitCpp(module, os);
      },
      [](DialectRegistry &registry) {
        registry.insert<arith::ArithDialect, func::FuncDialect,
                        linalg::LinalgDialect, math::MathDialect,
                        scf::SCFDialect, shard::ShardDialect,
                        tensor::TensorDialect, tp::TPDialect>();
      });
}
