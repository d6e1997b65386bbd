//===- Passes.h - tp-mlir conversion passes ---------------------*- C++ -*-===//
//
// Declares the `tp-` conversion passes and their registration.
//
//===----------------------------------------------------------------------===//

#ifndef TP_CONVERSION_PASSES_H
#define TP_CONVERSION_PASSES_H

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Shard/IR/ShardDialect.h"
#include "mlir/Dialect/Tensor/IR/Tensor.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/Pass/Pass.h"

namespace mlir::tp {

#define GEN_PASS_DECL
#include "tp/Conversion/Passes.h.inc"

#define GEN_PASS_REGISTRATION
#include "tp/Conversion/Passes.h.inc"

} // namespace mlir::tp

#endif // TP_CONVERSION_PASSES_H
