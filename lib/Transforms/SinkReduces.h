//===- SinkReduces.h - reduces moved after a linear scale -------*- C++ -*-===//
//
// Private to lib/Transforms: a step of tp-merge-all-reduces.
//
//===----------------------------------------------------------------------===//

#ifndef TP_LIB_TRANSFORMS_SINKREDUCES_H
#define TP_LIB_TRANSFORMS_SINKREDUCES_H

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/Shard/IR/ShardOps.h"

#include <type_traits>

namespace mlir::tp {

/// A summed all-reduce (or reduce-scatter) used only once, else null.
template <typename ReduceOp> ReduceOp getSoleReduce(Value v) {
  auto reduce = v.template getDefiningOp<ReduceOp>();
  if (!reduce || !reduce->hasOneUse() ||
      reduce.getReduction() != shard::ReductionKind::Sum)
    return {};
  if constexpr (std::is_same_v<ReduceOp, shard::AllReduceOp>)
    if (reduce.getInput().getType() != reduce.getResult().getType())
      return {};
  return reduce;
}

/// A reduce of `partial` over the ranks and into the layout of `like`.
shard::AllReduceOp createLike(OpBuilder &b, Location loc, Value partial,
                              shard::AllReduceOp like);
shard::ReduceScatterOp createLike(OpBuilder &b, Location loc, Value partial,
                                  shard::ReduceScatterOp like);

/// Moves each sum all-reduce (or reduce-scatter) whose only user is an
/// elementwise op linear in it, reading nothing else that differs between
/// ranks, after that op: every rank scales its partial result alike. A
/// mixture of experts scales each expert's reduced output by its routing
/// weight and selects it by its routing mask; after this the sum over
/// experts is a sum of reduces, which tp-merge-all-reduces makes one. An
/// all-reduce also moves past a reshape that brings it to such a scale, and
/// past one after a scale it moved past.
void sinkReducesThroughScales(func::FuncOp func);

} // namespace mlir::tp

#endif // TP_LIB_TRANSFORMS_SINKREDUCES_H
