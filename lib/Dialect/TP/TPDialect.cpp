//===- TPDialect.cpp - the tp dialect -------------------------------------===//
//
// Verifies the `tp.*` attributes that the importer writes, so that a
// hand-edited module with a malformed weight or name tag fails early.
//
//===----------------------------------------------------------------------===//

#include "tp/Dialect/TP/TPDialect.h"

#include "mlir/Dialect/Linalg/IR/Linalg.h"

#include "mlir/IR/BuiltinAttributes.h"
#include "mlir/IR/BuiltinOps.h"

using namespace mlir;
using namespace mlir::tp;

#include "tp/Dialect/TP/TPDialect.cpp.inc"

void TPDialect::initialize() {}

/// Every tp name tag is a non-empty string.
static LogicalResult verifyNameTag(Operation *op, NamedAttribute attr) {
  auto str = dyn_cast<StringAttr>(attr.getValue());
  if (!str || str.getValue().empty())
    return op->emitOpError() << "'" << attr.getName().getValue()
                             << "' must be a non-empty string";
  return success();
}

static LogicalResult verifyBlock(Operation *op, NamedAttribute attr) {
  auto block = dyn_cast<IntegerAttr>(attr.getValue());
  if (!block || block.getInt() < 0)
    return op->emitOpError() << "'" << attr.getName().getValue()
                             << "' must be a non-negative integer";
  return success();
}

LogicalResult TPDialect::verifyRegionArgAttribute(Operation *op, unsigned,
                                                  unsigned,
                                                  NamedAttribute attr) {
  StringRef name = attr.getName().getValue();
  if (name == kWeightAttrName || name == kInputAttrName ||
      name == kParallelAttrName)
    return verifyNameTag(op, attr);
  if (name == kBlockAttrName)
    return verifyBlock(op, attr);
  if (name == kPaddedAttrName) {
    auto sizes = dyn_cast<DenseI64ArrayAttr>(attr.getValue());
    if (!sizes || sizes.size() != 2 || sizes[0] <= 0 || sizes[1] < sizes[0])
      return op->emitOpError() << "'" << name
                               << "' must be [original size, padded size] "
                                  "with 0 < original <= padded";
    return success();
  }
  if (name == kPiecesAttrName) {
    auto pieces = dyn_cast<DenseI64ArrayAttr>(attr.getValue());
    if (!pieces || pieces.empty() ||
        llvm::any_of(pieces.asArrayRef(), [](int64_t n) { return n <= 0; }))
      return op->emitOpError() << "'" << name
                               << "' must be a non-empty array of positive "
                                  "lengths";
    return success();
  }
  return op->emitOpError() << "unknown argument attribute '" << name << "'";
}

LogicalResult TPDialect::verifyRegionResultAttribute(Operation *op, unsigned,
                                                     unsigned,
                                                     NamedAttribute attr) {
  StringRef name = attr.getName().getValue();
  if (name == kOutputAttrName)
    return verifyNameTag(op, attr);
  return op->emitOpError() << "unknown result attribute '" << name << "'";
}

LogicalResult TPDialect::verifyOperationAttribute(Operation *op,
                                                  NamedAttribute attr) {
  StringRef name = attr.getName().getValue();
  if (name == kModelAttrName || name == kReplicatedAttrName ||
      name == kParallelAttrName)
    return verifyNameTag(op, attr);
  if (name == kBlockAttrName)
    return verifyBlock(op, attr);
  if (name == kStageAttrName || name == kEmbeddingAttrName)
    return verifyBlock(op, attr);
  if (name == kPipelineAttrName) {
    auto dict = dyn_cast<DictionaryAttr>(attr.getValue());
    if (!dict || !dict.getAs<IntegerAttr>("stages") ||
        !dict.getAs<IntegerAttr>("microbatches"))
      return op->emitOpError() << "'" << name
                               << "' must be a dictionary with integer "
                                  "'stages' and 'microbatches'";
    return success();
  }
  if (name == kLoopSizesAttrName) {
    auto sizes = dyn_cast<DenseI64ArrayAttr>(attr.getValue());
    auto linalgOp = dyn_cast<linalg::LinalgOp>(op);
    if (!sizes || !linalgOp ||
        static_cast<int64_t>(linalgOp.getNumLoops()) != sizes.size() ||
        llvm::any_of(sizes.asArrayRef(), [](int64_t s) { return s < 0; }))
      return op->emitOpError() << "'" << name
                               << "' must be an array of one static size per "
                                  "loop of a linalg op";
    return success();
  }
  if (name == kOpsetAttrName) {
    if (!isa<IntegerAttr>(attr.getValue()))
      return op->emitOpError() << "'" << name << "' must be an integer";
    return success();
  }
  if (name == kExternalDataAttrName) {
    auto files = dyn_cast<ArrayAttr>(attr.getValue());
    if (!files ||
        llvm::any_of(files, [](Attribute a) { return !isa<StringAttr>(a); }))
      return op->emitOpError()
             << "'" << name << "' must be an array of file names";
    return success();
  }
  return op->emitOpError() << "unknown attribute '" << name << "'";
}
