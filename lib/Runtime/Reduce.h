//===- Reduce.h - elementwise reductions of raw buffers ---------*- C++ -*-===//
//
// Private to lib/Runtime: the arithmetic behind the thread communicator's
// allReduce and reduceScatter.
//
//===----------------------------------------------------------------------===//

#ifndef TP_LIB_RUNTIME_REDUCE_H
#define TP_LIB_RUNTIME_REDUCE_H

#include "tp/Runtime/RankContext.h"

#include <cstdint>

namespace tp::rt::detail {

/// Whether reduceInto() handles `type`: every type but Bool.
bool canReduce(DType type);

/// accumulator[i] = op(accumulator[i], operand[i]) for i < count, both
/// buffers holding `type`. Integer Sum and Product wrap around.
void reduceInto(DType type, Reduction op, void *accumulator,
                const void *operand, int64_t count);

} // namespace tp::rt::detail

#endif // TP_LIB_RUNTIME_REDUCE_H
