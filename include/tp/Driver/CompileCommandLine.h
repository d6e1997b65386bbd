//===- CompileCommandLine.h - tp-compile's flags, from a table --*- C++ -*-===//
//
// The command line of tp-compile, made from getCompileOptions(): one
// cl::opt (or cl::list) per row of CompileOptions.def, and the
// CompileOptions they give once parsed.
//
//===----------------------------------------------------------------------===//

#ifndef TP_DRIVER_COMPILECOMMANDLINE_H
#define TP_DRIVER_COMPILECOMMANDLINE_H

#include "tp/Driver/CompileOptions.h"

#include "llvm/Support/CommandLine.h"

#include <memory>

namespace mlir::tp {

/// Registers a flag for every compile option in `category` while it lives;
/// make it before llvm::cl::ParseCommandLineOptions.
class CompileCommandLine {
public:
  explicit CompileCommandLine(llvm::cl::OptionCategory &category);
  ~CompileCommandLine();
  CompileCommandLine(const CompileCommandLine &) = delete;
  CompileCommandLine &operator=(const CompileCommandLine &) = delete;

  /// The options the parsed flags give (defaults for those not given).
  /// Fails with `error` set for a choice that names none of its values
  /// ("unknown --target 'tpu'; expected none, cpu or cuda").
  LogicalResult getOptions(CompileOptions &options, std::string &error) const;

  /// One option's cl::opt and how its value is stored.
  struct Flag;

private:
  std::vector<std::unique_ptr<Flag>> flags;
};

} // namespace mlir::tp

#endif // TP_DRIVER_COMPILECOMMANDLINE_H
