// RUN: tp-translate --emit-cpp --no-implicit-module --verify-diagnostics %s
// RUN: tp-translate --emit-cuda --no-implicit-module --verify-diagnostics %s

// Without the implicit module the top-level op is the function itself: the
// emitters print a module (every function of a rank), so they refuse it.

// expected-error-re @below {{--emit-{{cpp|cuda}} expects a builtin.module}}
func.func @main(%x: tensor<2xf32>) -> tensor<2xf32> {
  return %x : tensor<2xf32>
}
