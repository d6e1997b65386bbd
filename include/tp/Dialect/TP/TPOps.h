//===- TPOps.h - the tp dialect's ops ---------------------------*- C++ -*-===//
//
// Declares tp.cache_update (TPOps.td).
//
//===----------------------------------------------------------------------===//

#ifndef TP_DIALECT_TP_TPOPS_H
#define TP_DIALECT_TP_TPOPS_H

#include "tp/Dialect/TP/TPDialect.h"

#include "mlir/Bytecode/BytecodeOpInterface.h"
#include "mlir/IR/BuiltinTypes.h"
#include "mlir/IR/OpDefinition.h"
#include "mlir/Interfaces/SideEffectInterfaces.h"

#define GET_OP_CLASSES
#include "tp/Dialect/TP/TPOps.h.inc"

#endif // TP_DIALECT_TP_TPOPS_H
