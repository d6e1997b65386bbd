//===- DenseRouting.h - per-expert token lists made static ------*- C++ -*-===//
//
// Private header of lib/Target/ONNX: the rewrite of a mixture-of-experts
// block's data-dependent token lists (NonZero of an expert's top-k mask)
// into a dense form over every token, and the check, made while the
// rewritten graph imports, that what reads those lists is row-wise.
// docs/design/moe-import.md says why this is exact.
//
//===----------------------------------------------------------------------===//

#ifndef TP_LIB_TARGET_ONNX_DENSEROUTING_H
#define TP_LIB_TARGET_ONNX_DENSEROUTING_H

#include "Importer.h"

#include "llvm/ADT/StringSet.h"

namespace mlir::tp::onnx_import {

/// The token lists that rewriteDenseRouting made dense, followed value by
/// value as the graph imports.
class DenseRouting {
public:
  /// Declares `value` a token list: entry i of its dim `axis` belongs to
  /// token i; `nonZero` names the node it replaces, for diagnostics.
  void addRows(StringRef value, int64_t axis, StringRef nonZero);
  /// Declares the ScatterElements writing `output` the end of a list.
  void addSink(StringRef output) { sinks.insert(output); }
  bool empty() const { return rows.empty(); }

  /// Called after `node` imported, with the imported values of its inputs
  /// and outputs: records which outputs are token lists and on which dim,
  /// or reports the node as not row-wise.
  LogicalResult visit(const onnx::NodeProto &node,
                      function_ref<const ImportedValue *(StringRef)> lookup,
                      Location loc);
  /// A token list must not be a graph output.
  LogicalResult checkOutput(StringRef name, Location loc) const;

private:
  struct Rows {
    int64_t axis;
    std::string nonZero;
  };
  llvm::StringMap<Rows> rows;
  llvm::StringSet<> sinks;
};

/// Rewrites every NonZero of `graph` that lists the tokens routed to one
/// expert (a row of the transposed OneHot of TopK's indices) into its dense
/// form: the token list becomes all tokens (slot = the slot routing the
/// token there, or 0), and each ScatterElements writing the list back
/// keeps, for tokens not routed, what it would not have written. Errors
/// name the NonZero and what did not match.
LogicalResult rewriteDenseRouting(onnx::GraphProto &graph, Location loc,
                                  DenseRouting &routing);

} // namespace mlir::tp::onnx_import

#endif // TP_LIB_TARGET_ONNX_DENSEROUTING_H
