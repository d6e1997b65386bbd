//===- tp-translate.cpp - tp-mlir import and emit driver ------------------===//
//
// mlir-translate with tp-mlir's translations: `--import-onnx`,
// `--emit-cpp` and `--emit-cuda`.
//
//===----------------------------------------------------------------------===//

#include "tp/Target/Emit/EmitCpp.h"
#include "tp/Target/Emit/EmitCuda.h"
#include "tp/Target/ONNX/ImportONNX.h"

#include "mlir/Tools/mlir-translate/MlirTranslateMain.h"

int main(int argc, char **argv) {
  mlir::tp::registerImportONNXTranslation();
  mlir::tp::registerEmitCppTranslation();
  mlir::tp::registerEmitCudaTranslation();
  return mlir::failed(
      mlir::mlirTranslateMain(argc, argv, "tp-mlir translation driver\n"));
}
