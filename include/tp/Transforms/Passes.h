//===- Passes.h - tp-mlir transform passes ----------------------*- C++ -*-===//
//
// Declares the `tp-` passes and their registration.
//
//===----------------------------------------------------------------------===//

#ifndef TP_TRANSFORMS_PASSES_H
#define TP_TRANSFORMS_PASSES_H

#include "tp/Dialect/TP/TPDialect.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/Shard/IR/ShardDialect.h"
#include "mlir/Dialect/Tensor/IR/Tensor.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/Pass/Pass.h"

namespace mlir::tp {

#define GEN_PASS_DECL
#include "tp/Transforms/Passes.h.inc"

#define GEN_PASS_REGISTRATION
#include "tp/Transforms/Passes.h.inc"

} // namespace mlir::tp

#endif // TP_TRANSFORMS_PASSES_H
