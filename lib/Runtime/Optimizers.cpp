//===- Optimizers.cpp - the optimizers' arithmetic on raw buffers ---------===//

#include "Optimizers.h"

#include <cmath>

using namespace tp::rt::detail;

void tp::rt::detail::adamwUpdate(const AdamW &adamw, float *w,
                                 const float *grad, float *m, float *v,
                                 int64_t n, float scale) {
  double t = static_cast<double>(adamw.step);
  double bias1 = 1 - std::pow(adamw.beta1, t);
  double bias2 = 1 - std::pow(adamw.beta2, t);
  float decay = static_cast<float>(1 - adamw.lr * adamw.weightDecay);
  float beta1 = static_cast<float>(adamw.beta1);
  float beta2 = static_cast<float>(adamw.beta2);
  float stepSize = static_cast<float>(adamw.lr / bias1);
  float bias2Sqrt = static_cast<float>(std::sqrt(bias2));
  float eps = static_cast<float>(adamw.eps);
  for (int64_t i = 0; i < n; ++i) {
    float g = grad[i] * scale;
    w[i] *= decay;
    m[i] = m[i] * beta1 + g * (1 - beta1);
    v[i] = v[i] * beta2 + g * g * (1 - beta2);
    float denom = std::sqrt(v[i]) / bias2Sqrt + eps;
    w[i] -= stepSize * (m[i] / denom);
  }
}

void tp::rt::detail::sgdUpdate(const Sgd &sgd, float *w, const float *grad,
                               float *buffer, int64_t n, float scale) {
  float decay = static_cast<float>(sgd.weightDecay);
  float rate = static_cast<float>(sgd.lr);
  float momentum = static_cast<float>(sgd.momentum);
  if (!buffer) {
    for (int64_t i = 0; i < n; ++i)
      w[i] -= rate * (grad[i] * scale + decay * w[i]);
    return;
  }
  for (int64_t i = 0; i < n; ++i) {
    float d = grad[i] * scale + decay * w[i];
    d = buffer[i] = sgd.step == 1 ? d : buffer[i] * momentum + d;
    w[i] -= rate * d;
  }
}

double tp::rt::detail::sumOfSquares(const float *grad, int64_t n) {
  double part[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  int64_t i = 0;
  for (; i + 8 <= n; i += 8)
    for (int k = 0; k < 8; ++k)
      part[k] += static_cast<double>(grad[i + k]) * grad[i + k];
  for (; i < n; ++i)
    part[i % 8] += static_cast<double>(grad[i]) * grad[i];
  return ((part[0] + part[1]) + (part[2] + part[3])) +
         ((part[4] + part[5]) + (part[6] + part[7]));
}
