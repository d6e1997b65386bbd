//===- TPDialect.h - the tp dialect -----------------------------*- C++ -*-===//
//
// Declares the tp dialect, which owns and verifies the `tp.*` attributes.
//
//===----------------------------------------------------------------------===//

#ifndef TP_DIALECT_TP_TPDIALECT_H
#define TP_DIALECT_TP_TPDIALECT_H

#include "mlir/IR/Dialect.h"

#include "tp/Dialect/TP/TPDialect.h.inc"

#include "tp/Dialect/TP/TPAttrs.h"

#endif // TP_DIALECT_TP_TPDIALECT_H
