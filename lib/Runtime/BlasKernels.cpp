//===- BlasKernels.cpp - which OpenBLAS kernels a CPU library gets --------===//

#include "BlasKernels.h"

#include <cstdlib>
#include <dlfcn.h>

const char *tp::rt::chooseBlasKernels() {
  if (std::getenv("OPENBLAS_CORETYPE"))
    return nullptr;
  // OpenBLAS reads the variable once, when it is loaded: once it is in the
  // process (a host program that linked it), setting it changes nothing.
  if (dlsym(RTLD_DEFAULT, "openblas_get_corename"))
    return nullptr;
  const char *name = nullptr;
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
  __builtin_cpu_init();
  if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512cd") &&
      __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512dq") &&
      __builtin_cpu_supports("avx512vl"))
    name = "SkylakeX";
  else if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma"))
    name = "Haswell";
#endif
  if (name)
    setenv("OPENBLAS_CORETYPE", name, /*overwrite=*/0);
  return name;
}
