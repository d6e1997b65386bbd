//===- CompileOptions.h - The options of a compile, typed -------*- C++ -*-===//
//
// CompileOptions, whose fields CompileOptions.def declares, and the table of
// them that tp-compile's command line and tp_mlir.compile's keywords are
// made from. Choices (--target, --dtype, --strategy, --train) are enums,
// parsed from their names where the options come in.
//
//===----------------------------------------------------------------------===//

#ifndef TP_DRIVER_COMPILEOPTIONS_H
#define TP_DRIVER_COMPILEOPTIONS_H

#include "mlir/Support/LLVM.h"
#include "llvm/ADT/ArrayRef.h"
#include "llvm/ADT/StringRef.h"

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <variant>
#include <vector>

namespace mlir::tp {

/// --target: the code to generate.
enum class CompileTarget { None, Cpu, Cuda };
/// --dtype: the type weights and activations are stored in; Model keeps
/// the model's own (as F32 does).
enum class CompileDType { Model, BF16, F16, F32 };
/// --strategy: the planner's own plan, or the rules of --config.
enum class PlanStrategy { Auto, Config };
/// --train: the optimizer the runtime applies.
enum class TrainOptimizer { AdamW, SGD };

/// The names an enum's values have on the command line and in Python, in
/// the enum's order; "" is a value that is only ever the default.
template <typename E> ArrayRef<StringLiteral> getChoiceNames();
template <> ArrayRef<StringLiteral> getChoiceNames<CompileTarget>();
template <> ArrayRef<StringLiteral> getChoiceNames<CompileDType>();
template <> ArrayRef<StringLiteral> getChoiceNames<PlanStrategy>();
template <> ArrayRef<StringLiteral> getChoiceNames<TrainOptimizer>();

/// The name of `value` ("cuda" for CompileTarget::Cuda).
template <typename E> StringRef stringifyChoice(E value) {
  return getChoiceNames<E>()[static_cast<size_t>(value)];
}

/// The value named `name`, if there is one.
template <typename E> std::optional<E> symbolizeChoice(StringRef name) {
  ArrayRef<StringLiteral> names = getChoiceNames<E>();
  for (size_t i = 0; i < names.size(); ++i)
    if (names[i] == name)
      return static_cast<E>(i);
  return std::nullopt;
}

/// "unknown --target 'tpu'; expected none, cpu or cuda": the error for a
/// value of `flag` that is none of `names`.
std::string getUnknownChoiceMessage(StringRef flag, StringRef value,
                                    ArrayRef<StringLiteral> names);

/// What a compile does: one field per tp-compile option (its flag and
/// Python keyword are in CompileOptions.def), and the callbacks of a
/// compile run in process.
struct CompileOptions {
#define TP_COMPILE_OPTION(FIELD, TYPE, DEFAULT, ...) TYPE FIELD = DEFAULT;
#include "tp/Driver/CompileOptions.def"

  /// If set, the plan as tp-explain's JSON goes to this file
  /// (tp_mlir.explain).
  std::string explainJson;
  /// False: plan and explain only, write no artifact (`output` unused).
  bool writeArtifact = true;
  /// Called as the weight shards are written (bytes written, total);
  /// returning false interrupts the compile.
  std::function<bool(uint64_t done, uint64_t total)> progress;
  /// Asked between the compile's stages (import, planning, prefill,
  /// weights, code); true interrupts the compile, which then fails with an
  /// error and leaves no artifact behind (Ctrl-C in tp_mlir.compile).
  std::function<bool()> interrupted;
};

/// One row of CompileOptions.def: an option's flag, keyword, help and
/// field, for the code that makes a command line or Python keywords of it.
struct CompileOption {
  /// How the command line takes it.
  enum Kind { Optional, Required, Hidden, Positional };
  template <typename T> using Member = T CompileOptions::*;
  /// The field, by its type (a new type in CompileOptions.def is a new
  /// alternative here, and a case in each maker of options).
  using Field = std::variant<
      Member<bool>, Member<int64_t>, Member<uint64_t>, Member<std::string>,
      Member<std::optional<int64_t>>, Member<std::optional<double>>,
      Member<std::optional<std::string>>, Member<std::vector<int64_t>>,
      Member<std::vector<double>>, Member<std::vector<std::string>>,
      Member<CompileTarget>, Member<CompileDType>, Member<PlanStrategy>,
      Member<std::optional<TrainOptimizer>>>;

  /// The flag without dashes ("devices"; "" for the positional model).
  const char *flag;
  /// tp_mlir.compile's keyword ("devices").
  const char *keyword;
  Kind kind;
  /// The value's name in --help; "" for the type's.
  const char *valueName;
  const char *help;
  Field field;
};

/// Every option, in CompileOptions.def's order.
ArrayRef<CompileOption> getCompileOptions();

} // namespace mlir::tp

#endif // TP_DRIVER_COMPILEOPTIONS_H
