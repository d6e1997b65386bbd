//===- Passes.td - tp-mlir transform passes ----------------*- tablegen -*-===//
//
// Passes over imported models. Every flag starts with `tp-`.
//
//===----------------------------------------------------------------------===//

#ifndef TP_TRANSFORMS_PASSES_TD
#define TP_TRANSFORMS_PASSES_TD

include "mlir/Pass/PassBase.td"

def ModelSummary : Pass<"tp-model-summary", "::mlir::ModuleOp"> {
  let summary = "Print what an imported model holds: inputs, outputs, "
                "weights and ops";
  let description = [{
    Prints, for each function, its inputs and outputs with their ONNX names
    and types, the number of weights and parameters (and their bytes), and
    how many of each op it contains. The IR is not changed. Used by the
    README's first command to show that a model imported.
  }];
  let options = [
    Option<"json", "json", "bool", /*default=*/"false",
           "Print the summary as one JSON object">
  ];
}

#endif // TP_TRANSFORMS_PASSES_TD
