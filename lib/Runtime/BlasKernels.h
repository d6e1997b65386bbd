//===- BlasKernels.h - which OpenBLAS kernels a CPU library gets -*- C++ -*-===//
//
// OpenBLAS picks its kernels by the CPU's family and model numbers and
// falls back to its slowest generic ones on a CPU it does not know by
// number, whatever vector units the CPU has: a virtual machine reporting
// "Intel(R) Xeon(R) Processor" with AVX-512 got the SSE3 (Prescott)
// kernels, and a forward pass of a GPT-2-style model ran 3.6x slower.
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

} // namespace tp::rt

#endif // TP_LIB_RUNTIME_BLASKERNELS_H
