//===- BlasKernels.h - which OpenBLAS kernels a CPU library gets -*- C++
//-*-===//
//
// OpenBLAS picks its kernels by the CPU's family and model numbers and
// falls back to its slowest generic ones on a CPU it does not know by
// number, whatever vector units the CPU has: a virtual machine reporting
// "Intel(R) Xeon(R) Processor" with AVX-512 got the SSE3 (Prescott)
// kernels, and a forward pass of a GPT-2-style model ran 3.6x slower.
// Its thread count is chosen here too.
//
//===----------------------------------------------------------------------===//

#ifndef TP_LIB_RUNTIME_BLASKERNELS_H
#define TP_LIB_RUNTIME_BLASKERNELS_H

namespace tp::rt {

/// Before a --target cpu library (and the BLAS it links) is first loaded:
/// unless OPENBLAS_CORETYPE is set, sets it by the vector units the CPU
/// has, SkylakeX with AVX-512 (F, CD, BW, DQ, VL), Haswell with AVX2 and
/// FMA; leaves it unset otherwise. Returns the name chosen, or null when
/// it chose nothing (already set, another CPU, or BLAS already loaded).
const char *chooseBlasKernels();

/// Before a --target cpu library is first loaded: unless the user set
/// OPENBLAS_NUM_THREADS, GOTO_NUM_THREADS or OMP_NUM_THREADS (or BLAS is
/// loaded already), gives OpenBLAS this process's cores divided by
/// `ranksOnCores`, the ranks that share them, at least 1. OpenBLAS's own
/// default is every core for each call: two thread ranks on two cores then
/// each woke a second BLAS thread that spun (sched_yield) on the other
/// rank's core, and a GPT-2-style forward pass at batch 8 took 1.18x as
/// long. Returns the count set, or 0 when it set none.
int chooseBlasThreads(int ranksOnCores);

/// The cores this process may run on (its affinity mask), at least 1.
int availableCores();

/// OpenBLAS's thread count as `library` (a loaded --target cpu model
/// library, or its dependencies) reports it; 0 without OpenBLAS.
int blasThreadsOf(void *library);

} // namespace tp::rt

#endif // TP_LIB_RUNTIME_BLASKERNELS_H
