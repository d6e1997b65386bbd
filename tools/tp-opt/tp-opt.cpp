//===- tp-opt.cpp - the tp-mlir optimizer driver --------------------------===//
//
// mlir-opt with the dialects and upstream passes that tp-mlir's pipeline
// uses, plus every `tp-` pass.
//
//===----------------------------------------------------------------------===//

#include "tp/Conversion/Passes.h"
#include "tp/Dialect/Shard/ShardingExtensions.h"
#include "tp/Dialect/TP/TPDialect.h"
#include "tp/Target/Emit/Passes.h"
#include "tp/Transforms/Passes.h"
#include "tp/Transforms/Pipelines.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Bufferization/IR/Bufferization.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/Linalg/IR/Linalg.h"
#include "mlir/Dialect/Math/IR/Math.h"
#include "mlir/Dialect/MemRef/IR/MemRef.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/Dialect/Shard/IR/ShardDialect.h"
#include "mlir/Dialect/Shard/Transforms/Passes.h"
#include "mlir/Dialect/Tensor/IR/Tensor.h"
#include "mlir/Tools/mlir-opt/MlirOptMain.h"
#include "mlir/Transforms/Passes.h"

int main(int argc, char **argv) {
  mlir::DialectRegistry registry;
  registry.insert<mlir::tp::TPDialect, mlir::arith::ArithDialect,
                  mlir::bufferization::BufferizationDialect,
                  mlir::func::FuncDialect, mlir::linalg::LinalgDialect,
                  mlir::math::MathDialect, mlir::memref::MemRefDialect,
                  mlir::scf::SCFDialect, mlir::shard::ShardDialect,
                  mlir::tensor::TensorDialect>();
  mlir::tp::registerShardingExtensions(registry);
  mlir::registerTransformsPasses();
  mlir::shard::registerShardPasses();
  mlir::tp::registerTPPasses();
  mlir::tp::registerTPEmitPasses();
  mlir::tp::registerTPConversionPasses();
  mlir::tp::registerTPPipelines();
  return mlir::asMainReturnCode(
      mlir::MlirOptMain(argc, argv, "tp-mlir optimizer driver\n", registry));
}
