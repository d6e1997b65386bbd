//===- Optimizers.h - the optimizers' arithmetic on raw buffers -*- C++ -*-===//
//
// Private to lib/Runtime: what Trainer applies to each rank's weights, one
// element at a time in float, as torch's single-tensor AdamW and SGD
// compute it. Built with -fno-math-errno so that the loops vectorize (a
// square root that may set errno cannot); the results are the same, element
// by element, since nothing is reassociated.
//
//===----------------------------------------------------------------------===//

#ifndef TP_LIB_RUNTIME_OPTIMIZERS_H
#define TP_LIB_RUNTIME_OPTIMIZERS_H

#include <cstdint>

namespace tp::rt::detail {

/// torch.optim.AdamW's step `step` (from 1) on `n` elements: weights `w`,
/// gradients `grad` times `scale` (the accumulation's mean and the clip),
/// moments `m` and `v`.
struct AdamW {
  double lr, beta1, beta2, eps, weightDecay;
  int64_t step;
};
void adamwUpdate(const AdamW &adamw, float *w, const float *grad, float *m,
                 float *v, int64_t n, float scale);

/// torch.optim.SGD's step `step` (from 1): L2 weight decay added to the
/// gradient, then momentum (`buffer`, null without) and the learning rate.
struct Sgd {
  double lr, momentum, weightDecay;
  int64_t step;
};
void sgdUpdate(const Sgd &sgd, float *w, const float *grad, float *buffer,
               int64_t n, float scale);

/// The sum of grad[i]^2 in double, in 8 interleaved partial sums (the same
/// order on every call).
double sumOfSquares(const float *grad, int64_t n);

} // namespace tp::rt::detail

#endif // TP_LIB_RUNTIME_OPTIMIZERS_H
