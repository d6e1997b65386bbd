// RUN: tp-opt %s -split-input-file --tp-merge-all-reduces | FileCheck %s

#id = affine_map<(d0, d1) -> (d0, d1)>
#bias = affine_map<(d0, d1) -> (d1)>

// GPT-NeoX's parallel residual after partition: attention and MLP partial
// results, each all-reduced and given its bias, then added. One all-reduce
// of their sum remains; both biases are added after it.
shard.grid @grid(shape = 2)
// CHECK-LABEL: func.func @parallel_residual(
// CHECK-SAME: %[[ATTN:[^:]+]]: tensor<4x8xf32>, %[[MLP:[^:]+]]: tensor<4x8xf32>, %[[B1:[^:]+]]: tensor<8xf32>, %[[B2:[^:]+]]: tensor<8xf32>
// CHECK: %[[PARTIAL:.*]] = linalg.generic {{.*}} ins(%[[ATTN]], %[[MLP]] : tensor<4x8xf32>, tensor<4x8xf32>)
// CHECK: %[[REDUCED:.*]] = shard.all_reduce %[[PARTIAL]] on @grid grid_axes = [0]
// CHECK-NOT: shard.all_reduce
// CHECK: %[[WITH_B1:.*]] = linalg.generic {{.*}} ins(%[[REDUCED]], %[[B1]] : tensor<4x8xf32>, tensor<8xf32>)
// CHECK: %[[SUM:.*]] = linalg.generic {{.*}} ins(%[[WITH_B1]], %[[B2]] : tensor<4x8xf32>, tensor<8xf32>)
// CHECK: return %[[SUM]]
func.func @parallel_residual(%attn: tensor<4x8xf32>, %mlp: tensor<4x8xf32>,
                             %b1: tensor<8xf32>, %b2: tensor<8xf32>) -> tensor<4x8xf32> {
  %e = tensor.empty() : tensor<4x8xf32>
  %r1 = shard.all_reduce %attn on @grid grid_axes = [0] : tensor<4x8xf32> -> tensor<4x8xf32>
  %a = linalg.generic {indexing_maps = [#id, #bias, #id], iterator_types = ["parallel", "parallel"]}
      ins(%r1, %b1 : tensor<4x8xf32>, tensor<8xf32>) outs(%e : tensor<4x8xf32>) {
  ^bb0(%x: f32, %y: f32, %o: f32):
    %s = arith.addf %x, %y : f32
    linalg.yield %s : f32
  } -> tensor<4x8xf32>
  %r2 = shard.all_reduce %mlp on @grid grid_axes = [0] : tensor<4x8xf32> -> tensor<4x8xf32>
  %b = linalg.generic {indexing_maps = [#id, #bias, #id], iterator_types = ["parallel", "parallel"]}
      ins(%r2, %b2 : tensor<4x8xf32>, tensor<8xf32>) outs(%e : tensor<4x8xf32>) {
  ^bb0(%x: f32, %y: f32, %o: f32):
    %s = arith.addf %x, %y : f32
    linalg.yield %s : f32
  } -> tensor<4x8xf32>
  %sum = linalg.generic {indexing_maps = [#id, #id, #id], iterator_types = ["parallel", "parallel"]}
      ins(%a, %b : tensor<4x8xf32>, tensor<4x8xf32>) outs(%e : tensor<4x8xf32>) {
  ^bb0(%x: f32, %y: f32, %o: f32):
    %s = arith.addf %x, %y : f32
    linalg.yield %s : f32
  } -> tensor<4x8xf32>
  return %sum : tensor<4x8xf32>
}

// -----

#id = affine_map<(d0, d1) -> (d0, d1)>

// GPT-J: no biases. The two reduces become one.
shard.grid @grid(shape = 2)
// CHECK-LABEL: func.func @no_bias(
// CHECK: %[[PARTIAL:.*]] = linalg.generic
// CHECK: %[[REDUCED:.*]] = shard.all_reduce %[[PARTIAL]]
// CHECK-NEXT: return %[[REDUCED]]
func.func @no_bias(%p: tensor<4x8xf32>, %q: tensor<4x8xf32>) -> tensor<4x8xf32> {
  %e = tensor.empty() : tensor<4x8xf32>
  %r1 = shard.all_reduce %p on @grid grid_axes = [0] : tensor<4x8xf32> -> tensor<4x8xf32>
  %r2 = shard.all_reduce %q on @grid grid_axes = [0] : tensor<4x8xf32> -> tensor<4x8xf32>
  %sum = linalg.generic {indexing_maps = [#id, #id, #id], iterator_types = ["parallel", "parallel"]}
      ins(%r1, %r2 : tensor<4x8xf32>, tensor<4x8xf32>) outs(%e : tensor<4x8xf32>) {
  ^bb0(%x: f32, %y: f32, %o: f32):
    %s = arith.addf %x, %y : f32
    linalg.yield %s : f32
  } -> tensor<4x8xf32>
  return %sum : tensor<4x8xf32>
}

// -----

#id = affine_map<(d0, d1) -> (d0, d1)>

// A reduce with another use, or a max reduction, stays as it is.
shard.grid @grid(shape = 2)
// CHECK-LABEL: func.func @not_merged(
// CHECK-COUNT-2: shard.all_reduce
// CHECK-LABEL: func.func @max_not_merged(
// CHECK-COUNT-2: shard.all_reduce
func.func @not_merged(%p: tensor<4x8xf32>, %q: tensor<4x8xf32>) -> (tensor<4x8xf32>, tensor<4x8xf32>) {
  %e = tensor.empty() : tensor<4x8xf32>
  %r1 = shard.all_reduce %p on @grid grid_axes = [0] : tensor<4x8xf32> -> tensor<4x8xf32>
  %r2 = shard.all_reduce %q on @grid grid_axes = [0] : tensor<4x8xf32> -> tensor<4x8xf32>
  %sum = linalg.generic {indexing_maps = [#id, #id, #id], iterator_types = ["parallel", "parallel"]}
      ins(%r1, %r2 : tensor<4x8xf32>, tensor<4x8xf32>) outs(%e : tensor<4x8xf32>) {
  ^bb0(%x: f32, %y: f32, %o: f32):
    %s = arith.addf %x, %y : f32
    linalg.yield %s : f32
  } -> tensor<4x8xf32>
  return %sum, %r1 : tensor<4x8xf32>, tensor<4x8xf32>
}
func.func @max_not_merged(%p: tensor<4x8xf32>, %q: tensor<4x8xf32>) -> tensor<4x8xf32> {
  %e = tensor.empty() : tensor<4x8xf32>
  %r1 = shard.all_reduce %p on @grid grid_axes = [0] reduction = max : tensor<4x8xf32> -> tensor<4x8xf32>
  %r2 = shard.all_reduce %q on @grid grid_axes = [0] : tensor<4x8xf32> -> tensor<4x8xf32>
  %sum = linalg.generic {indexing_maps = [#id, #id, #id], iterator_types = ["parallel", "parallel"]}
      ins(%r1, %r2 : tensor<4x8xf32>, tensor<4x8xf32>) outs(%e : tensor<4x8xf32>) {
  ^bb0(%x: f32, %y: f32, %o: f32):
    %s = arith.addf %x, %y : f32
    linalg.yield %s : f32
  } -> tensor<4x8xf32>
  return %sum : tensor<4x8xf32>
}

// -----

#id = affine_map<(d0, d1) -> (d0, d1)>
#bias = affine_map<(d0, d1) -> (d1)>

// The residual added first, `(x + (attn + b1)) + (mlp + b2)` (an export of
// `x + attn + mlp`): the sum's terms are reassociated, one all-reduce of the
// two partial results remains; both biases, then the residual, are added
// after it, each once.
shard.grid @grid(shape = 2)
// CHECK-LABEL: func.func @residual_first(
// CHECK-SAME: %[[X:[^:]+]]: tensor<4x8xf32>, %[[ATTN:[^:]+]]: tensor<4x8xf32>, %[[MLP:[^:]+]]: tensor<4x8xf32>, %[[B1:[^:]+]]: tensor<8xf32>, %[[B2:[^:]+]]: tensor<8xf32>
// CHECK: %[[PARTIAL:.*]] = linalg.generic {{.*}} ins(%[[ATTN]], %[[MLP]] : tensor<4x8xf32>, tensor<4x8xf32>)
// CHECK: %[[REDUCED:.*]] = shard.all_reduce %[[PARTIAL]] on @grid grid_axes = [0]
// CHECK-NOT: shard.all_reduce
// CHECK: %[[WITH_B1:.*]] = linalg.generic {{.*}} ins(%[[REDUCED]], %[[B1]] : tensor<4x8xf32>, tensor<8xf32>)
// CHECK: %[[WITH_B2:.*]] = linalg.generic {{.*}} ins(%[[WITH_B1]], %[[B2]] : tensor<4x8xf32>, tensor<8xf32>)
// CHECK: %[[SUM:.*]] = linalg.generic {{.*}} ins(%[[WITH_B2]], %[[X]] : tensor<4x8xf32>, tensor<4x8xf32>)
// CHECK: return %[[SUM]]
func.func @residual_first(%x: tensor<4x8xf32>, %attn: tensor<4x8xf32>, %mlp: tensor<4x8xf32>,
                          %b1: tensor<8xf32>, %b2: tensor<8xf32>) -> tensor<4x8xf32> {
  %e = tensor.empty() : tensor<4x8xf32>
  %r1 = shard.all_reduce %attn on @grid grid_axes = [0] : tensor<4x8xf32> -> tensor<4x8xf32>
  %a = linalg.generic {indexing_maps = [#bias, #id, #id], iterator_types = ["parallel", "parallel"]}
      ins(%b1, %r1 : tensor<8xf32>, tensor<4x8xf32>) outs(%e : tensor<4x8xf32>) {
  ^bb0(%p: f32, %q: f32, %o: f32):
    %s = arith.addf %p, %q : f32
    linalg.yield %s : f32
  } -> tensor<4x8xf32>
  %h = linalg.generic {indexing_maps = [#id, #id, #id], iterator_types = ["parallel", "parallel"]}
      ins(%x, %a : tensor<4x8xf32>, tensor<4x8xf32>) outs(%e : tensor<4x8xf32>) {
  ^bb0(%p: f32, %q: f32, %o: f32):
    %s = arith.addf %p, %q : f32
    linalg.yield %s : f32
  } -> tensor<4x8xf32>
  %r2 = shard.all_reduce %mlp on @grid grid_axes = [0] : tensor<4x8xf32> -> tensor<4x8xf32>
  %b = linalg.generic {indexing_maps = [#bias, #id, #id], iterator_types = ["parallel", "parallel"]}
      ins(%b2, %r2 : tensor<8xf32>, tensor<4x8xf32>) outs(%e : tensor<4x8xf32>) {
  ^bb0(%p: f32, %q: f32, %o: f32):
    %s = arith.addf %p, %q : f32
    linalg.yield %s : f32
  } -> tensor<4x8xf32>
  %sum = linalg.generic {indexing_maps = [#id, #id, #id], iterator_types = ["parallel", "parallel"]}
      ins(%h, %b : tensor<4x8xf32>, tensor<4x8xf32>) outs(%e : tensor<4x8xf32>) {
  ^bb0(%p: f32, %q: f32, %o: f32):
    %s = arith.addf %p, %q : f32
    linalg.yield %s : f32
  } -> tensor<4x8xf32>
  return %sum : tensor<4x8xf32>
}

// -----

#id = affine_map<(d0, d1) -> (d0, d1)>

// Sequence parallel, residual first: `(x + rs(p)) + rs(q)` on this rank's
// slice. The partial results are added whole, then one reduce-scatter.
shard.grid @grid(shape = 2)
// CHECK-LABEL: func.func @residual_first_scatter(
// CHECK-SAME: %[[X:[^:]+]]: tensor<2x8xf32>, %[[P:[^:]+]]: tensor<4x8xf32>, %[[Q:[^:]+]]: tensor<4x8xf32>
// CHECK: %[[PARTIAL:.*]] = linalg.generic {{.*}} ins(%[[P]], %[[Q]] : tensor<4x8xf32>, tensor<4x8xf32>)
// CHECK: %[[SCATTERED:.*]] = shard.reduce_scatter %[[PARTIAL]] on @grid grid_axes = [0] scatter_axis = 0
// CHECK-NOT: shard.reduce_scatter
// CHECK: %[[SUM:.*]] = linalg.generic {{.*}} ins(%[[SCATTERED]], %[[X]] : tensor<2x8xf32>, tensor<2x8xf32>)
// CHECK: return %[[SUM]]
func.func @residual_first_scatter(%x: tensor<2x8xf32>, %p: tensor<4x8xf32>, %q: tensor<4x8xf32>) -> tensor<2x8xf32> {
  %e = tensor.empty() : tensor<2x8xf32>
  %r1 = shard.reduce_scatter %p on @grid grid_axes = [0] scatter_axis = 0 : tensor<4x8xf32> -> tensor<2x8xf32>
  %h = linalg.generic {indexing_maps = [#id, #id, #id], iterator_types = ["parallel", "parallel"]}
      ins(%x, %r1 : tensor<2x8xf32>, tensor<2x8xf32>) outs(%e : tensor<2x8xf32>) {
  ^bb0(%a: f32, %b: f32, %o: f32):
    %s = arith.addf %a, %b : f32
    linalg.yield %s : f32
  } -> tensor<2x8xf32>
  %r2 = shard.reduce_scatter %q on @grid grid_axes = [0] scatter_axis = 0 : tensor<4x8xf32> -> tensor<2x8xf32>
  %sum = linalg.generic {indexing_maps = [#id, #id, #id], iterator_types = ["parallel", "parallel"]}
      ins(%h, %r2 : tensor<2x8xf32>, tensor<2x8xf32>) outs(%e : tensor<2x8xf32>) {
  ^bb0(%a: f32, %b: f32, %o: f32):
    %s = arith.addf %a, %b : f32
    linalg.yield %s : f32
  } -> tensor<2x8xf32>
  return %sum : tensor<2x8xf32>
}

// -----

#id = affine_map<(d0, d1) -> (d0, d1)>

// A sequential residual: `h = x + attn` is also read by the MLP, so it is
// not inside the sum `h + mlp`, and both reduces stay.
shard.grid @grid(shape = 2)
// CHECK-LABEL: func.func @sequential_not_merged(
// CHECK-COUNT-2: shard.all_reduce
func.func @sequential_not_merged(%x: tensor<4x8xf32>, %attn: tensor<4x8xf32>) -> tensor<4x8xf32> {
  %e = tensor.empty() : tensor<4x8xf32>
  %r1 = shard.all_reduce %attn on @grid grid_axes = [0] : tensor<4x8xf32> -> tensor<4x8xf32>
  %h = linalg.generic {indexing_maps = [#id, #id, #id], iterator_types = ["parallel", "parallel"]}
      ins(%x, %r1 : tensor<4x8xf32>, tensor<4x8xf32>) outs(%e : tensor<4x8xf32>) {
  ^bb0(%a: f32, %b: f32, %o: f32):
    %s = arith.addf %a, %b : f32
    linalg.yield %s : f32
  } -> tensor<4x8xf32>
  %mlp = linalg.generic {indexing_maps = [#id, #id], iterator_types = ["parallel", "parallel"]}
      ins(%h : tensor<4x8xf32>) outs(%e : tensor<4x8xf32>) {
  ^bb0(%a: f32, %o: f32):
    %n = arith.negf %a : f32
    linalg.yield %n : f32
  } -> tensor<4x8xf32>
  %r2 = shard.all_reduce %mlp on @grid grid_axes = [0] : tensor<4x8xf32> -> tensor<4x8xf32>
  %sum = linalg.generic {indexing_maps = [#id, #id, #id], iterator_types = ["parallel", "parallel"]}
      ins(%h, %r2 : tensor<4x8xf32>, tensor<4x8xf32>) outs(%e : tensor<4x8xf32>) {
  ^bb0(%a: f32, %b: f32, %o: f32):
    %s = arith.addf %a, %b : f32
    linalg.yield %s : f32
  } -> tensor<4x8xf32>
  return %sum : tensor<4x8xf32>
}

// -----

#id = affine_map<(d0, d1) -> (d0, d1)>
#row = affine_map<(d0, d1) -> (d0)>

// A mixture of experts, tensor parallel inside each expert: each expert's
// reduced output is scaled by its replicated routing weight and selected
// (or 0) by its replicated routing mask, then the experts are summed. The
// scale and the select are linear in the reduced value: they move before
// the reduce, and the sum over experts ends in one all-reduce.
shard.grid @grid(shape = 2)
// CHECK-LABEL: func.func @experts(
// CHECK-SAME: %[[P0:[^:]+]]: tensor<4x8xf32>, %[[P1:[^:]+]]: tensor<4x8xf32>, %[[W0:[^:]+]]: tensor<4xf32>, %[[W1:[^:]+]]: tensor<4xf32>, %[[M0:[^:]+]]: tensor<4xi1>
// CHECK: %[[S0:.*]] = linalg.generic {{.*}} ins(%[[P0]], %[[W0]] : tensor<4x8xf32>, tensor<4xf32>)
// CHECK: %[[T0:.*]] = linalg.generic {{.*}} ins(%[[S0]], %[[M0]] : tensor<4x8xf32>, tensor<4xi1>)
// CHECK: %[[S1:.*]] = linalg.generic {{.*}} ins(%[[P1]], %[[W1]] : tensor<4x8xf32>, tensor<4xf32>)
// CHECK: %[[PARTIAL:.*]] = linalg.generic {{.*}} ins(%[[T0]], %[[S1]] : tensor<4x8xf32>, tensor<4x8xf32>)
// CHECK: shard.all_reduce %[[PARTIAL]]
// CHECK-NOT: shard.all_reduce
func.func @experts(%p0: tensor<4x8xf32>, %p1: tensor<4x8xf32>,
                   %w0: tensor<4xf32>, %w1: tensor<4xf32>,
                   %m0: tensor<4xi1>) -> tensor<4x8xf32> {
  %e = tensor.empty() : tensor<4x8xf32>
  %zero = arith.constant 0.0 : f32
  %r0 = shard.all_reduce %p0 on @grid grid_axes = [0] : tensor<4x8xf32> -> tensor<4x8xf32>
  %s0 = linalg.generic {indexing_maps = [#id, #row, #id], iterator_types = ["parallel", "parallel"]}
      ins(%r0, %w0 : tensor<4x8xf32>, tensor<4xf32>) outs(%e : tensor<4x8xf32>) {
  ^bb0(%x: f32, %w: f32, %o: f32):
    %m = arith.mulf %x, %w : f32
    linalg.yield %m : f32
  } -> tensor<4x8xf32>
  %t0 = linalg.generic {indexing_maps = [#id, #row, #id], iterator_types = ["parallel", "parallel"]}
      ins(%s0, %m0 : tensor<4x8xf32>, tensor<4xi1>) outs(%e : tensor<4x8xf32>) {
  ^bb0(%x: f32, %c: i1, %o: f32):
    %s = arith.select %c, %x, %zero : f32
    linalg.yield %s : f32
  } -> tensor<4x8xf32>
  %r1 = shard.all_reduce %p1 on @grid grid_axes = [0] : tensor<4x8xf32> -> tensor<4x8xf32>
  %s1 = linalg.generic {indexing_maps = [#id, #row, #id], iterator_types = ["parallel", "parallel"]}
      ins(%r1, %w1 : tensor<4x8xf32>, tensor<4xf32>) outs(%e : tensor<4x8xf32>) {
  ^bb0(%x: f32, %w: f32, %o: f32):
    %m = arith.mulf %x, %w : f32
    linalg.yield %m : f32
  } -> tensor<4x8xf32>
  %sum = linalg.generic {indexing_maps = [#id, #id, #id], iterator_types = ["parallel", "parallel"]}
      ins(%t0, %s1 : tensor<4x8xf32>, tensor<4x8xf32>) outs(%e : tensor<4x8xf32>) {
  ^bb0(%x: f32, %y: f32, %o: f32):
    %s = arith.addf %x, %y : f32
    linalg.yield %s : f32
  } -> tensor<4x8xf32>
  return %sum : tensor<4x8xf32>
}

// -----

#id = affine_map<(d0, d1) -> (d0, d1)>
#col = affine_map<(d0, d1) -> (d1)>

// Not linear, or not replicated: a reduce squared, or scaled by a weight
// split across ranks (its tp.layout), stays where it is.
shard.grid @grid(shape = 2)
// CHECK-LABEL: func.func @not_linear(
// CHECK: shard.all_reduce
// CHECK-NEXT: linalg.generic
// CHECK: arith.mulf %{{.*}}, %{{.*}} : f32
// CHECK: shard.all_reduce
// CHECK-NEXT: linalg.generic
func.func @not_linear(%p: tensor<4x8xf32>, %q: tensor<4x8xf32>,
                      %w: tensor<8xf32> {tp.layout = #tp.layout<role = column, dim = 0>, tp.weight = "w"}) -> (tensor<4x8xf32>, tensor<4x8xf32>) {
  %e = tensor.empty() : tensor<4x8xf32>
  %r = shard.all_reduce %p on @grid grid_axes = [0] : tensor<4x8xf32> -> tensor<4x8xf32>
  %sq = linalg.generic {indexing_maps = [#id, #id], iterator_types = ["parallel", "parallel"]}
      ins(%r : tensor<4x8xf32>) outs(%e : tensor<4x8xf32>) {
  ^bb0(%x: f32, %o: f32):
    %m = arith.mulf %x, %x : f32
    linalg.yield %m : f32
  } -> tensor<4x8xf32>
  %r2 = shard.all_reduce %q on @grid grid_axes = [0] : tensor<4x8xf32> -> tensor<4x8xf32>
  %sc = linalg.generic {indexing_maps = [#id, #col, #id], iterator_types = ["parallel", "parallel"]}
      ins(%r2, %w : tensor<4x8xf32>, tensor<8xf32>) outs(%e : tensor<4x8xf32>) {
  ^bb0(%x: f32, %y: f32, %o: f32):
    %m = arith.mulf %x, %y : f32
    linalg.yield %m : f32
  } -> tensor<4x8xf32>
  return %sq, %sc : tensor<4x8xf32>, tensor<4x8xf32>
}

// -----

#id = affine_map<(d0, d1) -> (d0, d1)>
#row = affine_map<(d0, d1) -> (d0)>

// The same under sequence parallelism: each expert's result is
// reduce-scattered over tokens and scaled by this rank's slice of the
// replicated routing weight (computed after the all_slice). The slice's
// computation is redone once on the whole weight, the scales move before
// the reduce-scatters, and one reduce-scatter of the sum remains, no
// all_slice.
shard.grid @grid(shape = 2)
// CHECK-LABEL: func.func @experts_sp(
// CHECK-SAME: %[[P0:[^:]+]]: tensor<4x8xf32>, %[[P1:[^:]+]]: tensor<4x8xf32>, %[[W:[^:]+]]: tensor<4xf32>
// CHECK-NOT: shard.all_slice
// CHECK: %[[W2:.*]] = linalg.generic {{.*}} ins(%[[W]] : tensor<4xf32>)
// CHECK-NOT: ins(%[[W]]
// CHECK: %[[S0:.*]] = linalg.generic {{.*}} ins(%[[P0]], %[[W2]] : tensor<4x8xf32>, tensor<4xf32>)
// CHECK: %[[S1:.*]] = linalg.generic {{.*}} ins(%[[P1]], %[[W2]] : tensor<4x8xf32>, tensor<4xf32>)
// CHECK: %[[SUM:.*]] = linalg.generic {{.*}} ins(%[[S0]], %[[S1]] : tensor<4x8xf32>, tensor<4x8xf32>)
// CHECK: shard.reduce_scatter %[[SUM]] on @grid grid_axes = [0] scatter_axis = 0
// CHECK-NOT: shard.
func.func @experts_sp(%p0: tensor<4x8xf32>, %p1: tensor<4x8xf32>,
                      %w: tensor<4xf32>) -> tensor<2x8xf32> {
  %e = tensor.empty() : tensor<2x8xf32>
  %e1 = tensor.empty() : tensor<2xf32>
  %ws = shard.all_slice %w on @grid grid_axes = [0] slice_axis = 0 : tensor<4xf32> -> tensor<2xf32>
  %w2 = linalg.generic {indexing_maps = [affine_map<(d0) -> (d0)>, affine_map<(d0) -> (d0)>], iterator_types = ["parallel"]}
      ins(%ws : tensor<2xf32>) outs(%e1 : tensor<2xf32>) {
  ^bb0(%x: f32, %o: f32):
    %m = arith.mulf %x, %x : f32
    linalg.yield %m : f32
  } -> tensor<2xf32>
  %r0 = shard.reduce_scatter %p0 on @grid grid_axes = [0] scatter_axis = 0 : tensor<4x8xf32> -> tensor<2x8xf32>
  %s0 = linalg.generic {indexing_maps = [#id, #row, #id], iterator_types = ["parallel", "parallel"]}
      ins(%r0, %w2 : tensor<2x8xf32>, tensor<2xf32>) outs(%e : tensor<2x8xf32>) {
  ^bb0(%x: f32, %y: f32, %o: f32):
    %m = arith.mulf %x, %y : f32
    linalg.yield %m : f32
  } -> tensor<2x8xf32>
  %r1 = shard.reduce_scatter %p1 on @grid grid_axes = [0] scatter_axis = 0 : tensor<4x8xf32> -> tensor<2x8xf32>
  %s1 = linalg.generic {indexing_maps = [#id, #row, #id], iterator_types = ["parallel", "parallel"]}
      ins(%r1, %w2 : tensor<2x8xf32>, tensor<2xf32>) outs(%e : tensor<2x8xf32>) {
  ^bb0(%x: f32, %y: f32, %o: f32):
    %m = arith.mulf %x, %y : f32
    linalg.yield %m : f32
  } -> tensor<2x8xf32>
  %sum = linalg.generic {indexing_maps = [#id, #id, #id], iterator_types = ["parallel", "parallel"]}
      ins(%s0, %s1 : tensor<2x8xf32>, tensor<2x8xf32>) outs(%e : tensor<2x8xf32>) {
  ^bb0(%x: f32, %y: f32, %o: f32):
    %s = arith.addf %x, %y : f32
    linalg.yield %s : f32
  } -> tensor<2x8xf32>
  return %sum : tensor<2x8xf32>
}
