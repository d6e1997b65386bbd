//===- DropDeadOps.cpp - tp-drop-dead-ops ---------------------------------===//
//
// Erases side-effect-free ops with no uses before planning: upstream
// partition needs every tensor result annotated, and propagation annotates
// only results that are used.
//
//===----------------------------------------------------------------------===//

#include "tp/Transforms/Passes.h"

#include "mlir/Interfaces/SideEffectInterfaces.h"

namespace mlir::tp {
#define GEN_PASS_DEF_DROPDEADOPS
#include "tp/Transforms/Passes.h.inc"
} // namespace mlir::tp

using namespace mlir;
using namespace mlir::tp;

namespace {

struct DropDeadOps : tp::impl::DropDeadOpsBase<DropDeadOps> {
  void runOnOperation() override {
    // Reversed pre-order visits every user before the values it reads and
    // nested ops before their parent, so erasing a user exposes its (now
    // dead) producers to the same sweep.
    SmallVector<Operation *> ops;
    getOperation().getBody().walk<WalkOrder::PreOrder>(
        [&](Operation *op) { ops.push_back(op); });
    for (Operation *op : llvm::reverse(ops))
      if (isOpTriviallyDead(op))
        op->erase();
  }
};

} // namespace
