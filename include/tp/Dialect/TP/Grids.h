//===- Grids.h - the tensor-parallel and pipeline grids ---------*- C++ -*-===//
//
// A planned module holds up to two `shard.grid`s: the tensor-parallel ranks
// of a stage and the pipeline stages. Each carries its role as a typed
// `tp.grid_role` attribute; code that needs one finds it by that role, not
// by its symbol name.
//
//===----------------------------------------------------------------------===//

#ifndef TP_DIALECT_TP_GRIDS_H
#define TP_DIALECT_TP_GRIDS_H

#include "tp/Dialect/TP/TPAttrs.h"
#include "tp/Dialect/TP/TPDialect.h"

#include "mlir/Dialect/Shard/IR/ShardOps.h"
#include "mlir/IR/BuiltinOps.h"

namespace mlir::tp {

/// The role of `grid`: its `tp.grid_role`, `Tensor` where it has none.
GridRole getGridRole(shard::GridOp grid);

/// Writes `role` as the `tp.grid_role` of `grid`.
void setGridRole(shard::GridOp grid, GridRole role);

/// The first grid of `module` whose role is `role`; null if there is none.
shard::GridOp lookupGrid(ModuleOp module, GridRole role);

/// The size of the module's grid of `role` where it is 1-D; -1 if there is
/// none or it has more dims.
int64_t getGridSize1D(ModuleOp module, GridRole role);

} // namespace mlir::tp

#endif // TP_DIALECT_TP_GRIDS_H
