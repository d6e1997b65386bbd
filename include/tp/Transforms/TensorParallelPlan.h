//===- TensorParallelPlan.h - Megatron-style split analysis -----*- C++ -*-===//
//
// Finds column→row weight pairs by graph structure and records which
// weights split on which dim; tp-plan-tensor-parallel writes the result as
// shard annotations.
//
//===----------------------------------------------------------------------===//

#ifndef TP_TRANSFORMS_TENSORPARALLELPLAN_H
#define TP_TRANSFORMS_TENSORPARALLELPLAN_H

#include "tp/Dialect/TP/TPDialect.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "llvm/ADT/MapVector.h"

#include <string>

namespace mlir::tp {

struct WeightSplit {
  int64_t dim;
  SplitRole role;
  /// The column→row group (block) the weight belongs to, numbered in program
  /// order; the weights of one block share the collective that ends it.
  int64_t block;
};

struct TensorParallelPlan {
  /// Weights (arguments, or slices of them) and how each splits.
  llvm::MapVector<Value, WeightSplit> splits;
  struct Replicated {
    Operation *op;
    std::string reason;
    /// Replicated only because a dim does not divide by the device count.
    bool uneven;
    /// Kept whole by design (a position table), not for want of a rule:
    /// explained, but not warned about.
    bool intended = false;
  };
  /// KV caches (tp.cache arguments) that split as the keys or values
  /// written into them, with the dim (their heads).
  llvm::MapVector<Value, int64_t> caches;
  /// Ops that upstream partition cannot split (a depthwise convolution's
  /// window) on the split channels, with the loop they split on.
  llvm::MapVector<Operation *, unsigned> splitLoops;
  /// Operands an op reads split on a dim though their value is not: the
  /// operand of a sum or max over a split dim (a vocabulary-parallel softmax
  /// or loss: each rank reduces its part, one all-reduce completes it), and
  /// model inputs read elementwise with a split value (one-hot labels
  /// against split log-probabilities: each rank reads its part), and biases
  /// read through a reshape of the split weight, and biases that stay whole
  /// because an op outside every split reads them too.
  llvm::MapVector<OpOperand *, int64_t> splitOperands;
  /// Values of the backward (tp-differentiate's ops) that keep a split of
  /// the forward values they are computed from, with the dim: the
  /// gradients stay split as their forward values are, rather than as
  /// sharding propagation would guess between a split and a whole operand.
  llvm::MapVector<Value, int64_t> backwardSplits;
  /// Values that reach a function result still split (a vocabulary-parallel
  /// head's logits, or what elementwise ops make of them: Granite's
  /// division by a scale, Gemma 2's soft-capping), with the dim: they are
  /// computed split and gathered at the result, not before those ops.
  llvm::MapVector<Value, int64_t> resultSplits;
  /// Weight contractions left replicated, with the reason.
  SmallVector<Replicated> replicated;
};

/// Plans Megatron-style splits of `func` over `devices` ranks.
TensorParallelPlan planTensorParallel(func::FuncOp func, int64_t devices);

/// An elementwise add of two same-shape activations, one the output of a
/// block (a weight contraction, possibly through its collective and a bias
/// add), the other the stream it is added to: a residual add, where
/// transformer blocks end and pipeline stages may be cut. `throughViews`
/// also follows the block's output through reshapes (for recomputation,
/// which checks the stream besides).
bool isResidualAdd(Operation *op, bool throughViews = false);

/// The stream operand of a residual add (the one that is not a block's
/// output); null for another op.
Value getResidualStream(Operation *op, bool throughViews = false);

/// Applies strategy=config rules from the JSON file at `path` on top of
/// `plan`; fails, with a diagnostic naming the rule, on a rule that matches
/// no weight or asks for a split that does not divide.
LogicalResult applyConfigRules(func::FuncOp func, StringRef path,
                               int64_t devices, TensorParallelPlan &plan);

/// True if `ids` is a model input, possibly through reshapes and casts: the
/// token ids of a word embedding (not computed positions).
bool isModelInput(Value ids);

/// True if `v` is a broadcast: a generic whose one input has fewer dims
/// than its loops (Llama's repeat_kv of the K/V heads, before its merge).
bool isBroadcast(Value v);

/// The weight a contraction reads, if exactly one of its two inputs is a
/// `tp.weight` argument (or a static slice of one); returns its operand
/// index.
std::optional<unsigned> getWeightOperand(Operation *op);

} // namespace mlir::tp

#endif // TP_TRANSFORMS_TENSORPARALLELPLAN_H
