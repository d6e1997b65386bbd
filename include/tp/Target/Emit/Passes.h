//===- Passes.h - passes that prepare a module for emission ----*- C++ -*-===//
//
// Declares tp-fuse-elementwise and tp-prepare-for-emission (Passes.td) and
// their registration.
//
//===----------------------------------------------------------------------===//

#ifndef TP_TARGET_EMIT_PASSES_H
#define TP_TARGET_EMIT_PASSES_H

#include "tp/Dialect/TP/TPDialect.h"

#include "mlir/Dialect/Linalg/IR/Linalg.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/Pass/Pass.h"

namespace mlir::tp {

#define GEN_PASS_DECL
#include "tp/Target/Emit/Passes.h.inc"

#define GEN_PASS_REGISTRATION
#include "tp/Target/Emit/Passes.h.inc"

} // namespace mlir::tp

#endif // TP_TARGET_EMIT_PASSES_H
