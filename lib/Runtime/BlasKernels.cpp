//===- BlasKernels.cpp - which OpenBLAS kernels a CPU library gets --------===//

#include "BlasKernels.h"

#include <algorithm>
#include <cstdlib>
#include <dlfcn.h>
#include <sched.h>
#include <string>

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
      __builtin_cpu_supports("avx512bw") &&
      __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("avx512vl"))
    name = "SkylakeX";
  else if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma"))
    name = "Haswell";
#endif
  if (name)
    setenv("OPENBLAS_CORETYPE", name, /*overwrite=*/0);
  return name;
}

int tp::rt::availableCores() {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof(set), &set) != 0)
    return 1;
  return std::max(1, CPU_COUNT(&set));
}

int tp::rt::chooseBlasThreads(int ranksOnCores) {
  for (const char *name :
       {"OPENBLAS_NUM_THREADS", "GOTO_NUM_THREADS", "OMP_NUM_THREADS"})
    if (std::getenv(name))
      return 0;
  // Read once, when OpenBLAS is loaded (see chooseBlasKernels).
  if (dlsym(RTLD_DEFAULT, "openblas_get_num_threads"))
    return 0;
  int threads = std::max(1, availableCores() / std::max(1, ranksOnCores));
  setenv("OPENBLAS_NUM_THREADS", std::to_string(threads).c_str(),
         /*overwrite=*/0);
  return threads;
}

int tp::rt::blasThreadsOf(void *library) {
  using Query = int (*)();
  auto query = reinterpret_cast<Query>(
      dlsym(library ? library : RTLD_DEFAULT, "openblas_get_num_threads"));
  return query ? query() : 0;
}
