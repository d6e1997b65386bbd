//===- GraphImporter.h - ONNX graph to func.func @main ----------*- C++ -*-===//
//
// Private: the importer's walk over one graph, shared by GraphImporter.cpp
// (the walk) and NodeContext.cpp (what a converter sees of a node).
//
//===----------------------------------------------------------------------===//

#ifndef TP_LIB_TARGET_ONNX_GRAPHIMPORTER_H
#define TP_LIB_TARGET_ONNX_GRAPHIMPORTER_H

#include "DenseRouting.h"
#include "Importer.h"
#include "ModelLoader.h"

#include "tp/Target/ONNX/ImportONNX.h"

#include "mlir/IR/BuiltinOps.h"
#include "llvm/ADT/SetVector.h"

#include <map>
#include <optional>
#include <vector>

namespace mlir::tp::onnx_import {

/// Imports one ModelProto into a fresh module.
class GraphImporter {
public:
  GraphImporter(MLIRContext *ctx, const onnx::ModelProto &model, StringRef path,
                const ONNXImportOptions &options,
                DenseRouting routing = DenseRouting())
      : ctx(ctx), model(model), graph(model.graph()), path(path),
        options(options), builder(ctx),
        fileLoc(FileLineColLoc::get(ctx, path, 0, 0)), scopes(1),
        routing(std::move(routing)) {}

  OwningOpRef<ModuleOp> run();

  /// The value named `name` in the innermost scope that defines it.
  ImportedValue *lookup(StringRef name) {
    for (auto &scope : llvm::reverse(scopes)) {
      auto it = scope.find(name);
      if (it != scope.end())
        return &it->second;
    }
    return nullptr;
  }
  Value materialize(ImportedValue &v, OpBuilder &b, Location loc) {
    if (!v.value)
      v.value = materializeConstant(b, loc, *v.constant);
    return v.value;
  }
  void define(StringRef name, ImportedValue v) {
    scopes.back()[name] = std::move(v);
  }
  FailureOr<SmallVector<ImportedValue>>
  importSubgraph(const onnx::GraphProto &body, ArrayRef<ImportedValue> inputs,
                 Location loc);

private:
  LogicalResult checkOpset();
  LogicalResult checkSupportedOps();
  void checkSupportedOps(const onnx::GraphProto &g, bool &ok);
  LogicalResult importInputs(SmallVectorImpl<Type> &argTypes,
                             SmallVectorImpl<NamedAttribute> &argAttrs);
  LogicalResult importInitializers(SmallVectorImpl<Type> &argTypes,
                                   SmallVectorImpl<NamedAttribute> &argAttrs);
  LogicalResult importNode(const onnx::NodeProto &node);
  LogicalResult checkArity(const onnx::NodeProto &node, Location loc);
  LogicalResult checkInputTypes(const onnx::NodeProto &node, Location loc);
  LogicalResult checkDeclaredType(const onnx::ValueInfoProto &info,
                                  const ImportedValue &v, Location loc);
  Location nodeLoc(const onnx::NodeProto &node);

  MLIRContext *ctx;
  const onnx::ModelProto &model;
  const onnx::GraphProto &graph;
  std::string path;
  const ONNXImportOptions &options;
  OpBuilder builder;
  Location fileLoc;
  int64_t opset = 0;
  /// Values by name: the graph's, then one scope per subgraph being
  /// imported. StringMap entries do not move, so references stay valid
  /// while inner scopes come and go.
  SmallVector<llvm::StringMap<ImportedValue>, 2> scopes;
  llvm::StringMap<const onnx::ValueInfoProto *> declared;
  llvm::SetVector<StringRef> externalFiles;
  /// Where each argument's value goes once the function exists.
  SmallVector<std::string> argNames;
  /// ONNXImportOptions::tieWeights: the initializers that are another's
  /// values (the source, and whether transposed), in graph order, and the
  /// rank-2 float initializers seen so far by the hash of their values.
  struct Tie {
    std::string copy, source;
    bool transposed;
  };
  SmallVector<Tie> ties;
  /// A rank-2 float initializer seen so far, and where its values are when
  /// not in the model file.
  struct Stored {
    const onnx::TensorProto *init;
    std::optional<ExternalLocation> external;
  };
  std::map<uint64_t, Stored> byValues;
  /// The initializer `init` (rank 2, float; in the model file, or at
  /// `external` beside it) is a copy of one before it, or its transpose:
  /// records the tie and returns true.
  bool tieToEarlier(const onnx::TensorProto &init,
                    const std::optional<ExternalLocation> &external);
  /// The float32 values of `init` wherever they are stored, or nothing
  /// when they cannot be read.
  std::optional<std::vector<float>>
  readFloats(const onnx::TensorProto &init,
             const std::optional<ExternalLocation> &external) const;
  /// The model's folder, which external data locations are relative to.
  SmallString<256> modelDir;
  /// The token lists made dense before import, followed as they import.
  DenseRouting routing;
};

} // namespace mlir::tp::onnx_import

#endif // TP_LIB_TARGET_ONNX_GRAPHIMPORTER_H
