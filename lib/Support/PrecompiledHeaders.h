//===- PrecompiledHeaders.h - MLIR headers compiled once per build --------===//
//
// The upstream headers that most of our libraries include. Parsing them is
// about half of compiling a typical pass; with TP_ENABLE_PRECOMPILED_HEADERS
// (on by default) they are compiled once into a precompiled header that the
// libraries reuse (tp_precompile_headers in the top-level CMakeLists.txt).
// Only upstream headers belong here: ours change too often, and a source
// must still include what it uses (the build without precompiled headers
// checks that).
//
//===----------------------------------------------------------------------===//

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/Linalg/IR/Linalg.h"
#include "mlir/Dialect/Math/IR/Math.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/Dialect/Shard/IR/ShardOps.h"
#include "mlir/Dialect/Tensor/IR/Tensor.h"
#include "mlir/IR/PatternMatch.h"
#include "mlir/Pass/Pass.h"
#include "llvm/ADT/DenseMap.h"
#include "llvm/ADT/SmallVector.h"
#include "llvm/ADT/StringRef.h"
#include "llvm/Support/raw_ostream.h"
