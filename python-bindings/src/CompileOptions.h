//===- CompileOptions.h - tp_mlir's compile options -------------*- C++ -*-===//
//
// The compile options as the _tp_mlir extension binds them: one Python
// keyword per row of include/tp/Driver/CompileOptions.def.
//
//===----------------------------------------------------------------------===//

#ifndef TP_PYTHON_COMPILEOPTIONS_H
#define TP_PYTHON_COMPILEOPTIONS_H

#include <nanobind/nanobind.h>

#include <stdexcept>

namespace tp::python {

/// A failed compile (tp_mlir.CompileError): every diagnostic, one per
/// line, as tp-compile prints them.
struct CompileError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

/// Binds CompileOptions, with a property per option named by its keyword,
/// and compile_options(), the table itself as a list of dicts.
void bindCompileOptions(nanobind::module_ &m);

} // namespace tp::python

#endif // TP_PYTHON_COMPILEOPTIONS_H
