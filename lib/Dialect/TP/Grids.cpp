//===- Grids.cpp - the tensor-parallel and pipeline grids -----------------===//

#include "tp/Dialect/TP/Grids.h"

using namespace mlir;
using namespace mlir::tp;

GridRole mlir::tp::getGridRole(shard::GridOp grid) {
  if (auto role =
          grid->getAttrOfType<GridRoleAttr>(TPDialect::kGridRoleAttrName))
    return role.getValue();
  return GridRole::Tensor;
}

void mlir::tp::setGridRole(shard::GridOp grid, GridRole role) {
  grid->setAttr(TPDialect::kGridRoleAttrName,
                GridRoleAttr::get(grid.getContext(), role));
}

shard::GridOp mlir::tp::lookupGrid(ModuleOp module, GridRole role) {
  for (auto grid : module.getOps<shard::GridOp>())
    if (getGridRole(grid) == role)
      return grid;
  return nullptr;
}

int64_t mlir::tp::getGridSize1D(ModuleOp module, GridRole role) {
  shard::GridOp grid = lookupGrid(module, role);
  if (!grid || grid.getShape().size() != 1)
    return -1;
  return grid.getShape()[0];
}
