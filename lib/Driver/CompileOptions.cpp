//===- CompileOptions.cpp - The table of tp-compile's options -------------===//
//
// getCompileOptions(), one row per line of CompileOptions.def, and the
// names of the choices.
//
//===----------------------------------------------------------------------===//

#include "tp/Driver/CompileOptions.h"

#include "llvm/Support/raw_ostream.h"

using namespace mlir;
using namespace mlir::tp;

template <> ArrayRef<StringLiteral> mlir::tp::getChoiceNames<CompileTarget>() {
  static constexpr StringLiteral names[] = {"none", "cpu", "cuda"};
  return names;
}

template <> ArrayRef<StringLiteral> mlir::tp::getChoiceNames<CompileDType>() {
  static constexpr StringLiteral names[] = {"", "bf16", "f16", "f32"};
  return names;
}

template <> ArrayRef<StringLiteral> mlir::tp::getChoiceNames<PlanStrategy>() {
  static constexpr StringLiteral names[] = {"auto", "config"};
  return names;
}

template <> ArrayRef<StringLiteral> mlir::tp::getChoiceNames<TrainOptimizer>() {
  static constexpr StringLiteral names[] = {"adamw", "sgd"};
  return names;
}

std::string mlir::tp::getUnknownChoiceMessage(StringRef flag, StringRef value,
                                              ArrayRef<StringLiteral> names) {
  SmallVector<StringRef> named;
  for (StringRef name : names)
    if (!name.empty())
      named.push_back(name);
  std::string message;
  llvm::raw_string_ostream os(message);
  os << "unknown --" << flag << " '" << value << "'; expected ";
  for (size_t i = 0; i < named.size(); ++i)
    os << (i == 0 ? "" : i + 1 == named.size() ? " or " : ", ") << named[i];
  return message;
}

ArrayRef<CompileOption> mlir::tp::getCompileOptions() {
  static const CompileOption table[] = {
#define TP_COMPILE_OPTION(FIELD, TYPE, DEFAULT, FLAG, KEYWORD, KIND, VALUE,    \
                          HELP)                                                \
  {FLAG, KEYWORD, CompileOption::KIND, VALUE, HELP, &CompileOptions::FIELD},
#include "tp/Driver/CompileOptions.def"
  };
  return table;
}
