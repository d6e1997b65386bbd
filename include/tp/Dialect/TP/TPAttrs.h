//===- TPAttrs.h - attributes of the tp dialect -----------------*- C++ -*-===//
//
// Declares `#tp.layout` (how a weight argument holds its initializer across
// ranks), the SplitRole enum it names, and accessors by argument.
//
//===----------------------------------------------------------------------===//

#ifndef TP_DIALECT_TP_TPATTRS_H
#define TP_DIALECT_TP_TPATTRS_H

#include "mlir/IR/Attributes.h"
#include "mlir/IR/BuiltinAttributes.h"
#include "mlir/IR/DialectImplementation.h"
#include "mlir/Interfaces/FunctionInterfaces.h"

#include <string>

#include "tp/Dialect/TP/TPEnums.h.inc"

#define GET_ATTRDEF_CLASSES
#include "tp/Dialect/TP/TPAttrs.h.inc"

namespace mlir::tp {

/// The `tp.layout` of argument `index` of `func`; null if it has none (the
/// argument is whole on every rank).
LayoutAttr getLayout(FunctionOpInterface func, unsigned index);

/// The `tp.layout` of `value`: of the function argument it is, or written on
/// the op that defines it (a planned pad or slice of a weight); null if none.
LayoutAttr getLayout(Value value);

/// Sets the `tp.layout` of argument `index` of `func`.
void setLayout(FunctionOpInterface func, unsigned index, LayoutAttr layout);

/// How tools name a weight argument: `name` itself, or for a piece of a
/// fused weight the initializer's range numpy-style, `name[:, 0:64]` for
/// rows [0, 64) of dim 1 of a rank-2 initializer; a repeated range ends in
/// `*R` (`name*2`, `name[:, 0:64]*2`).
std::string getPieceName(StringRef name, LayoutAttr layout, int64_t rank);

} // namespace mlir::tp

#endif // TP_DIALECT_TP_TPATTRS_H
