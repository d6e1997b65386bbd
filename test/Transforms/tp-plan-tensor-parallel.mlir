// RUN: tp-opt %s -split-input-file --tp-plan-tensor-parallel=devices=2 | FileCheck %s

// The functions below are importer output (tp-translate --import-onnx of
// small models, weights retagged tp.input -> tp.weight), trimmed to the ops
// each plan decision depends on.

// An MLP, MatMul -> Add(bias) -> Relu -> MatMul -> Add: w1 and its bias
// split on the output dim (column), w2 on the contracting dim (row); the
// second bias is added after the all-reduce, so it stays whole, as do the
// activation input and the result.
#bsh = affine_map<(d0, d1, d2, d3) -> (d0, d1, d3)>
#ho = affine_map<(d0, d1, d2, d3) -> (d3, d2)>
#bso = affine_map<(d0, d1, d2, d3) -> (d0, d1, d2)>
#id = affine_map<(d0, d1, d2) -> (d0, d1, d2)>
#last = affine_map<(d0, d1, d2) -> (d2)>
// CHECK: shard.grid @grid(shape = 2) {tp.grid_role = #tp.grid_role<tensor>}
// CHECK-LABEL: func.func @mlp(
// CHECK-SAME: %arg0: tensor<2x16x64xf32> {tp.input = "x"}
// CHECK-SAME: tp.layout = #tp.layout<role = column, dim = 1, block = 0>, tp.weight = "w1"}
// CHECK-SAME: tp.layout = #tp.layout<role = bias, dim = 0, block = 0>, tp.weight = "b1"}
// CHECK-SAME: tp.layout = #tp.layout<role = row, dim = 0, block = 0>, tp.weight = "w2"}
// CHECK-SAME: %arg4: tensor<64xf32> {tp.weight = "b2"})
// CHECK: %[[S1:.*]] = shard.sharding @grid split_axes = {{\[\[}}], [0]] : !shard.sharding
// CHECK-NEXT: %[[W1:.*]] = shard.shard %arg1 to %[[S1]] annotate_for_users : tensor<64x256xf32>
// CHECK: %[[S2:.*]] = shard.sharding @grid split_axes = {{\[\[}}0]] : !shard.sharding
// CHECK-NEXT: %[[W2:.*]] = shard.shard %arg3 to %[[S2]] annotate_for_users : tensor<256x64xf32>
// CHECK: %[[SB1:.*]] = shard.sharding @grid split_axes = {{\[\[}}0]] : !shard.sharding
// CHECK-NEXT: %[[B1:.*]] = shard.shard %arg2 to %[[SB1]] annotate_for_users : tensor<256xf32>
// CHECK: %[[SX:.*]] = shard.sharding @grid split_axes = {{\[\[}}]] : !shard.sharding
// CHECK-NEXT: %[[X:.*]] = shard.shard %arg0 to %[[SX]] annotate_for_users : tensor<2x16x64xf32>
// CHECK: %[[SB2:.*]] = shard.sharding @grid split_axes = {{\[\[}}]] : !shard.sharding
// CHECK-NEXT: %[[B2:.*]] = shard.shard %arg4 to %[[SB2]] annotate_for_users : tensor<64xf32>
// CHECK: linalg.generic {{.*}} ins(%[[X]], %[[W1]] :
// CHECK: linalg.generic {{.*}} ins(%{{.*}}, %[[B1]] :
// CHECK: linalg.generic {{.*}} ins(%{{.*}}, %[[W2]] :
// CHECK: %[[Y:.*]] = linalg.generic {{.*}} ins(%{{.*}}, %[[B2]] :
// CHECK: %[[SY:.*]] = shard.sharding @grid split_axes = {{\[\[}}]] : !shard.sharding
// CHECK-NEXT: %[[R:.*]] = shard.shard %[[Y]] to %[[SY]] annotate_for_users : tensor<2x16x64xf32>
// CHECK-NEXT: return %[[R]]
// CHECK-NOT: tp.replicated
func.func @mlp(%arg0: tensor<2x16x64xf32> {tp.input = "x"}, %arg1: tensor<64x256xf32> {tp.weight = "w1"}, %arg2: tensor<256xf32> {tp.weight = "b1"}, %arg3: tensor<256x64xf32> {tp.weight = "w2"}, %arg4: tensor<64xf32> {tp.weight = "b2"}) -> (tensor<2x16x64xf32> {tp.output = "y"}) {
  %cst = arith.constant 0.000000e+00 : f32
  %0 = tensor.empty() : tensor<2x16x256xf32>
  %1 = linalg.fill ins(%cst : f32) outs(%0 : tensor<2x16x256xf32>) -> tensor<2x16x256xf32>
  %2 = linalg.generic {indexing_maps = [#bsh, #ho, #bso], iterator_types = ["parallel", "parallel", "parallel", "reduction"]} ins(%arg0, %arg1 : tensor<2x16x64xf32>, tensor<64x256xf32>) outs(%1 : tensor<2x16x256xf32>) {
  ^bb0(%in: f32, %in_1: f32, %out: f32):
    %12 = arith.mulf %in, %in_1 : f32
    %13 = arith.addf %out, %12 : f32
    linalg.yield %13 : f32
  } -> tensor<2x16x256xf32>
  %3 = tensor.empty() : tensor<2x16x256xf32>
  %4 = linalg.generic {indexing_maps = [#id, #last, #id], iterator_types = ["parallel", "parallel", "parallel"]} ins(%2, %arg2 : tensor<2x16x256xf32>, tensor<256xf32>) outs(%3 : tensor<2x16x256xf32>) {
  ^bb0(%in: f32, %in_1: f32, %out: f32):
    %12 = arith.addf %in, %in_1 : f32
    linalg.yield %12 : f32
  } -> tensor<2x16x256xf32>
  %5 = tensor.empty() : tensor<2x16x256xf32>
  %6 = linalg.generic {indexing_maps = [#id, #id], iterator_types = ["parallel", "parallel", "parallel"]} ins(%4 : tensor<2x16x256xf32>) outs(%5 : tensor<2x16x256xf32>) {
  ^bb0(%in: f32, %out: f32):
    %12 = arith.maximumf %in, %cst : f32
    linalg.yield %12 : f32
  } -> tensor<2x16x256xf32>
  %7 = tensor.empty() : tensor<2x16x64xf32>
  %8 = linalg.fill ins(%cst : f32) outs(%7 : tensor<2x16x64xf32>) -> tensor<2x16x64xf32>
  %9 = linalg.generic {indexing_maps = [#bsh, #ho, #bso], iterator_types = ["parallel", "parallel", "parallel", "reduction"]} ins(%6, %arg3 : tensor<2x16x256xf32>, tensor<256x64xf32>) outs(%8 : tensor<2x16x64xf32>) {
  ^bb0(%in: f32, %in_1: f32, %out: f32):
    %12 = arith.mulf %in, %in_1 : f32
    %13 = arith.addf %out, %12 : f32
    linalg.yield %13 : f32
  } -> tensor<2x16x64xf32>
  %10 = tensor.empty() : tensor<2x16x64xf32>
  %11 = linalg.generic {indexing_maps = [#id, #last, #id], iterator_types = ["parallel", "parallel", "parallel"]} ins(%9, %arg4 : tensor<2x16x64xf32>, tensor<64xf32>) outs(%10 : tensor<2x16x64xf32>) {
  ^bb0(%in: f32, %in_1: f32, %out: f32):
    %12 = arith.addf %in, %in_1 : f32
    linalg.yield %12 : f32
  } -> tensor<2x16x64xf32>
  return %11 : tensor<2x16x64xf32>
}

// -----

// Attention with separate Q, K and V projections (4 heads of 16): the split
// follows each projection through the heads reshape and transposes and the
// activation x activation contractions (which contract the head dim, not
// the heads), back through the merge of the heads into the contracting dim
// of the output projection. Q, K, V are column (with Q's bias), the output
// projection is row.
#bsh = affine_map<(d0, d1, d2, d3) -> (d0, d1, d3)>
#ho = affine_map<(d0, d1, d2, d3) -> (d3, d2)>
#bso = affine_map<(d0, d1, d2, d3) -> (d0, d1, d2)>
#id = affine_map<(d0, d1, d2) -> (d0, d1, d2)>
#last = affine_map<(d0, d1, d2) -> (d2)>
#lhs = affine_map<(d0, d1, d2, d3, d4) -> (d0, d1, d2, d4)>
#rhs = affine_map<(d0, d1, d2, d3, d4) -> (d0, d1, d4, d3)>
#out = affine_map<(d0, d1, d2, d3, d4) -> (d0, d1, d2, d3)>
// CHECK: shard.grid @grid(shape = 2) {tp.grid_role = #tp.grid_role<tensor>}
// CHECK-LABEL: func.func @attention(
// CHECK-SAME: %arg0: tensor<2x16x64xf32> {tp.input = "x"}
// CHECK-SAME: tp.layout = #tp.layout<role = column, dim = 1, block = 0>, tp.weight = "wq"}
// CHECK-SAME: tp.layout = #tp.layout<role = bias, dim = 0, block = 0>, tp.weight = "bq"}
// CHECK-SAME: tp.layout = #tp.layout<role = column, dim = 1, block = 0>, tp.weight = "wk"}
// CHECK-SAME: tp.layout = #tp.layout<role = column, dim = 1, block = 0>, tp.weight = "wv"}
// CHECK-SAME: tp.layout = #tp.layout<role = row, dim = 0, block = 0>, tp.weight = "wo"}
// CHECK-SAME: %arg6: tensor<64xf32> {tp.weight = "bo"})
// CHECK-DAG: shard.shard %arg1 to %[[SQ:[^ ]*]] annotate_for_users
// CHECK-DAG: %[[SQ]] = shard.sharding @grid split_axes = {{\[\[}}], [0]]
// CHECK-DAG: shard.shard %arg2 to %[[SBQ:[^ ]*]] annotate_for_users
// CHECK-DAG: %[[SBQ]] = shard.sharding @grid split_axes = {{\[\[}}0]]
// CHECK-DAG: shard.shard %arg3 to %[[SK:[^ ]*]] annotate_for_users
// CHECK-DAG: %[[SK]] = shard.sharding @grid split_axes = {{\[\[}}], [0]]
// CHECK-DAG: shard.shard %arg4 to %[[SV:[^ ]*]] annotate_for_users
// CHECK-DAG: %[[SV]] = shard.sharding @grid split_axes = {{\[\[}}], [0]]
// CHECK-DAG: shard.shard %arg5 to %[[SO:[^ ]*]] annotate_for_users
// CHECK-DAG: %[[SO]] = shard.sharding @grid split_axes = {{\[\[}}0]]
// CHECK-DAG: shard.shard %arg6 to %[[SBO:[^ ]*]] annotate_for_users
// CHECK-DAG: %[[SBO]] = shard.sharding @grid split_axes = {{\[\[}}]]
// CHECK-NOT: tp.replicated
func.func @attention(%arg0: tensor<2x16x64xf32> {tp.input = "x"}, %arg1: tensor<64x64xf32> {tp.weight = "wq"}, %arg2: tensor<64xf32> {tp.weight = "bq"}, %arg3: tensor<64x64xf32> {tp.weight = "wk"}, %arg4: tensor<64x64xf32> {tp.weight = "wv"}, %arg5: tensor<64x64xf32> {tp.weight = "wo"}, %arg6: tensor<64xf32> {tp.weight = "bo"}) -> (tensor<2x16x64xf32> {tp.output = "y"}) {
  %cst = arith.constant 0.000000e+00 : f32
  %0 = tensor.empty() : tensor<2x16x64xf32>
  %1 = linalg.fill ins(%cst : f32) outs(%0 : tensor<2x16x64xf32>) -> tensor<2x16x64xf32>
  %2 = linalg.generic {indexing_maps = [#bsh, #ho, #bso], iterator_types = ["parallel", "parallel", "parallel", "reduction"]} ins(%arg0, %arg1 : tensor<2x16x64xf32>, tensor<64x64xf32>) outs(%1 : tensor<2x16x64xf32>) {
  ^bb0(%in: f32, %in_0: f32, %out: f32):
    %m = arith.mulf %in, %in_0 : f32
    %a = arith.addf %out, %m : f32
    linalg.yield %a : f32
  } -> tensor<2x16x64xf32>
  %3 = linalg.generic {indexing_maps = [#id, #last, #id], iterator_types = ["parallel", "parallel", "parallel"]} ins(%2, %arg2 : tensor<2x16x64xf32>, tensor<64xf32>) outs(%0 : tensor<2x16x64xf32>) {
  ^bb0(%in: f32, %in_0: f32, %out: f32):
    %a = arith.addf %in, %in_0 : f32
    linalg.yield %a : f32
  } -> tensor<2x16x64xf32>
  %q4 = tensor.expand_shape %3 [[0], [1], [2, 3]] output_shape [2, 16, 4, 16] : tensor<2x16x64xf32> into tensor<2x16x4x16xf32>
  %e0 = tensor.empty() : tensor<2x4x16x16xf32>
  %q = linalg.transpose ins(%q4 : tensor<2x16x4x16xf32>) outs(%e0 : tensor<2x4x16x16xf32>) permutation = [0, 2, 1, 3]
  %4 = linalg.generic {indexing_maps = [#bsh, #ho, #bso], iterator_types = ["parallel", "parallel", "parallel", "reduction"]} ins(%arg0, %arg3 : tensor<2x16x64xf32>, tensor<64x64xf32>) outs(%1 : tensor<2x16x64xf32>) {
  ^bb0(%in: f32, %in_0: f32, %out: f32):
    %m = arith.mulf %in, %in_0 : f32
    %a = arith.addf %out, %m : f32
    linalg.yield %a : f32
  } -> tensor<2x16x64xf32>
  %k4 = tensor.expand_shape %4 [[0], [1], [2, 3]] output_shape [2, 16, 4, 16] : tensor<2x16x64xf32> into tensor<2x16x4x16xf32>
  %e1 = tensor.empty() : tensor<2x4x16x16xf32>
  %kt = linalg.transpose ins(%k4 : tensor<2x16x4x16xf32>) outs(%e1 : tensor<2x4x16x16xf32>) permutation = [0, 2, 3, 1]
  %5 = linalg.generic {indexing_maps = [#bsh, #ho, #bso], iterator_types = ["parallel", "parallel", "parallel", "reduction"]} ins(%arg0, %arg4 : tensor<2x16x64xf32>, tensor<64x64xf32>) outs(%1 : tensor<2x16x64xf32>) {
  ^bb0(%in: f32, %in_0: f32, %out: f32):
    %m = arith.mulf %in, %in_0 : f32
    %a = arith.addf %out, %m : f32
    linalg.yield %a : f32
  } -> tensor<2x16x64xf32>
  %v4 = tensor.expand_shape %5 [[0], [1], [2, 3]] output_shape [2, 16, 4, 16] : tensor<2x16x64xf32> into tensor<2x16x4x16xf32>
  %e2 = tensor.empty() : tensor<2x4x16x16xf32>
  %v = linalg.transpose ins(%v4 : tensor<2x16x4x16xf32>) outs(%e2 : tensor<2x4x16x16xf32>) permutation = [0, 2, 1, 3]
  %e3 = tensor.empty() : tensor<2x4x16x16xf32>
  %z = linalg.fill ins(%cst : f32) outs(%e3 : tensor<2x4x16x16xf32>) -> tensor<2x4x16x16xf32>
  %scores = linalg.generic {indexing_maps = [#lhs, #rhs, #out], iterator_types = ["parallel", "parallel", "parallel", "parallel", "reduction"]} ins(%q, %kt : tensor<2x4x16x16xf32>, tensor<2x4x16x16xf32>) outs(%z : tensor<2x4x16x16xf32>) {
  ^bb0(%in: f32, %in_0: f32, %out: f32):
    %m = arith.mulf %in, %in_0 : f32
    %a = arith.addf %out, %m : f32
    linalg.yield %a : f32
  } -> tensor<2x4x16x16xf32>
  %ctx = linalg.generic {indexing_maps = [#lhs, #rhs, #out], iterator_types = ["parallel", "parallel", "parallel", "parallel", "reduction"]} ins(%scores, %v : tensor<2x4x16x16xf32>, tensor<2x4x16x16xf32>) outs(%z : tensor<2x4x16x16xf32>) {
  ^bb0(%in: f32, %in_0: f32, %out: f32):
    %m = arith.mulf %in, %in_0 : f32
    %a = arith.addf %out, %m : f32
    linalg.yield %a : f32
  } -> tensor<2x4x16x16xf32>
  %e4 = tensor.empty() : tensor<2x16x4x16xf32>
  %ct = linalg.transpose ins(%ctx : tensor<2x4x16x16xf32>) outs(%e4 : tensor<2x16x4x16xf32>) permutation = [0, 2, 1, 3]
  %merged = tensor.collapse_shape %ct [[0], [1], [2, 3]] : tensor<2x16x4x16xf32> into tensor<2x16x64xf32>
  %6 = linalg.generic {indexing_maps = [#bsh, #ho, #bso], iterator_types = ["parallel", "parallel", "parallel", "reduction"]} ins(%merged, %arg5 : tensor<2x16x64xf32>, tensor<64x64xf32>) outs(%1 : tensor<2x16x64xf32>) {
  ^bb0(%in: f32, %in_0: f32, %out: f32):
    %m = arith.mulf %in, %in_0 : f32
    %a = arith.addf %out, %m : f32
    linalg.yield %a : f32
  } -> tensor<2x16x64xf32>
  %7 = linalg.generic {indexing_maps = [#id, #last, #id], iterator_types = ["parallel", "parallel", "parallel"]} ins(%6, %arg6 : tensor<2x16x64xf32>, tensor<64xf32>) outs(%0 : tensor<2x16x64xf32>) {
  ^bb0(%in: f32, %in_0: f32, %out: f32):
    %a = arith.addf %in, %in_0 : f32
    linalg.yield %a : f32
  } -> tensor<2x16x64xf32>
  return %7 : tensor<2x16x64xf32>
}

// -----

// An LM head: a weight contraction whose output reaches the function result
// is split on its output dim and gathered at the result (column-gathered):
// the value returned is annotated split where it is made, the result
// itself whole.
#bsh = affine_map<(d0, d1, d2, d3) -> (d0, d1, d3)>
#ho = affine_map<(d0, d1, d2, d3) -> (d3, d2)>
#bso = affine_map<(d0, d1, d2, d3) -> (d0, d1, d2)>
// CHECK-LABEL: func.func @lm_head(
// CHECK-SAME: tp.layout = #tp.layout<role = column_gathered, dim = 1, block = 0>, tp.weight = "wlm"}
// CHECK: %[[S:.*]] = shard.sharding @grid split_axes = {{\[\[}}], [0]] : !shard.sharding
// CHECK-NEXT: shard.shard %arg1 to %[[S]] annotate_for_users : tensor<64x128xf32>
// CHECK: %[[Y:.*]] = linalg.generic
// CHECK: %[[SS:.*]] = shard.sharding @grid split_axes = {{\[\[}}], [], [0]] : !shard.sharding
// CHECK-NEXT: %[[YS:.*]] = shard.shard %[[Y]] to %[[SS]] : tensor<2x16x128xf32>
// CHECK: %[[SY:.*]] = shard.sharding @grid split_axes = {{\[\[}}]] : !shard.sharding
// CHECK-NEXT: %[[R:.*]] = shard.shard %[[YS]] to %[[SY]] annotate_for_users : tensor<2x16x128xf32>
// CHECK-NEXT: return %[[R]]
func.func @lm_head(%arg0: tensor<2x16x64xf32> {tp.input = "x"}, %arg1: tensor<64x128xf32> {tp.weight = "wlm"}) -> (tensor<2x16x128xf32> {tp.output = "y"}) {
  %cst = arith.constant 0.000000e+00 : f32
  %0 = tensor.empty() : tensor<2x16x128xf32>
  %1 = linalg.fill ins(%cst : f32) outs(%0 : tensor<2x16x128xf32>) -> tensor<2x16x128xf32>
  %2 = linalg.generic {indexing_maps = [#bsh, #ho, #bso], iterator_types = ["parallel", "parallel", "parallel", "reduction"]} ins(%arg0, %arg1 : tensor<2x16x64xf32>, tensor<64x128xf32>) outs(%1 : tensor<2x16x128xf32>) {
  ^bb0(%in: f32, %in_0: f32, %out: f32):
    %m = arith.mulf %in, %in_0 : f32
    %a = arith.addf %out, %m : f32
    linalg.yield %a : f32
  } -> tensor<2x16x128xf32>
  return %2 : tensor<2x16x128xf32>
}

// -----

// ReduceSum over the output dim of a contraction, into one entry per row
// (a softmax's statistics, a loss over a split vocabulary): each rank sums
// its columns and one all-reduce of the small result completes it. The
// weight splits as a gathered column; the sum reads its operand split.
#bsh = affine_map<(d0, d1, d2, d3) -> (d0, d1, d3)>
#ho = affine_map<(d0, d1, d2, d3) -> (d3, d2)>
#bso = affine_map<(d0, d1, d2, d3) -> (d0, d1, d2)>
#in = affine_map<(d0, d1, d2) -> (d0, d1, d2)>
#red = affine_map<(d0, d1, d2) -> (d0, d1)>
// CHECK-LABEL: func.func @reduce_over_output_dim(
// CHECK-SAME: %arg1: tensor<64x256xf32> {tp.layout = #tp.layout<role = column_gathered, dim = 1, block = 0>, tp.weight = "w"})
// CHECK: %[[P:.*]] = linalg.generic
// CHECK: %[[S:.*]] = shard.sharding @grid split_axes = {{\[\[}}], [], [0]] : !shard.sharding
// CHECK: %[[A:.*]] = shard.shard %[[P]] to %[[S]] annotate_for_users : tensor<2x16x256xf32>
// CHECK: linalg.generic {{.*}} ins(%[[A]] : tensor<2x16x256xf32>)
func.func @reduce_over_output_dim(%arg0: tensor<2x16x64xf32> {tp.input = "x"}, %arg1: tensor<64x256xf32> {tp.weight = "w"}) -> (tensor<2x16xf32> {tp.output = "y"}) {
  %cst = arith.constant 0.000000e+00 : f32
  %0 = tensor.empty() : tensor<2x16x256xf32>
  %1 = linalg.fill ins(%cst : f32) outs(%0 : tensor<2x16x256xf32>) -> tensor<2x16x256xf32>
  %2 = linalg.generic {indexing_maps = [#bsh, #ho, #bso], iterator_types = ["parallel", "parallel", "parallel", "reduction"]} ins(%arg0, %arg1 : tensor<2x16x64xf32>, tensor<64x256xf32>) outs(%1 : tensor<2x16x256xf32>) {
  ^bb0(%in: f32, %in_0: f32, %out: f32):
    %m = arith.mulf %in, %in_0 : f32
    %a = arith.addf %out, %m : f32
    linalg.yield %a : f32
  } -> tensor<2x16x256xf32>
  %3 = tensor.empty() : tensor<2x16xf32>
  %4 = linalg.fill ins(%cst : f32) outs(%3 : tensor<2x16xf32>) -> tensor<2x16xf32>
  %5 = linalg.generic {indexing_maps = [#in, #red], iterator_types = ["parallel", "parallel", "reduction"]} ins(%2 : tensor<2x16x256xf32>) outs(%4 : tensor<2x16xf32>) {
  ^bb0(%in: f32, %out: f32):
    %a = arith.addf %out, %in : f32
    linalg.yield %a : f32
  } -> tensor<2x16xf32>
  return %5 : tensor<2x16xf32>
}

// -----

// An embedding table read inside an op body (Gather) cannot be annotated
// for that use, so it stays whole; the tied LM head that contracts with it
// is left replicated and says why. The MLP in between splits as usual.
#ids = affine_map<(d0, d1, d2) -> (d0, d1)>
#emb = affine_map<(d0, d1, d2) -> (d0, d1, d2)>
#bsh = affine_map<(d0, d1, d2, d3) -> (d0, d1, d3)>
#ho = affine_map<(d0, d1, d2, d3) -> (d3, d2)>
#bso = affine_map<(d0, d1, d2, d3) -> (d0, d1, d2)>
#oh = affine_map<(d0, d1, d2, d3) -> (d2, d3)>
// CHECK-LABEL: func.func @embedding(
// CHECK-SAME: %arg1: tensor<100x64xf32> {tp.weight = "emb"}
// CHECK-SAME: tp.layout = #tp.layout<role = column, dim = 1, block = 0>, tp.weight = "w1"}
// CHECK-SAME: tp.layout = #tp.layout<role = row, dim = 0, block = 0>, tp.weight = "w2"}
// CHECK-DAG: %[[E:.*]] = shard.shard %arg1 to %[[S:[^ ]*]] annotate_for_users : tensor<100x64xf32>
// CHECK-DAG: %[[S]] = shard.sharding @grid split_axes = {{\[\[}}]] : !shard.sharding
// CHECK: tensor.extract %[[E]]
// CHECK: linalg.generic {{.*}} ins(%{{.*}}, %[[E]] :
// CHECK-SAME: tp.replicated = "weight 'emb' is also read inside an op body"
func.func @embedding(%arg0: tensor<2x16xi64> {tp.input = "ids"}, %arg1: tensor<100x64xf32> {tp.weight = "emb"}, %arg2: tensor<64x256xf32> {tp.weight = "w1"}, %arg3: tensor<256x64xf32> {tp.weight = "w2"}) -> (tensor<2x16x100xf32> {tp.output = "y"}) {
  %cst = arith.constant 0.000000e+00 : f32
  %0 = tensor.empty() : tensor<2x16x64xf32>
  %1 = linalg.generic {indexing_maps = [#ids, #emb], iterator_types = ["parallel", "parallel", "parallel"]} ins(%arg0 : tensor<2x16xi64>) outs(%0 : tensor<2x16x64xf32>) {
  ^bb0(%in: i64, %out: f32):
    %c100 = arith.constant 100 : index
    %c0 = arith.constant 0 : index
    %i = linalg.index 2 : index
    %16 = arith.index_cast %in : i64 to index
    %17 = arith.cmpi slt, %16, %c0 : index
    %18 = arith.addi %16, %c100 : index
    %19 = arith.select %17, %18, %16 : index
    %extracted = tensor.extract %arg1[%19, %i] : tensor<100x64xf32>
    linalg.yield %extracted : f32
  } -> tensor<2x16x64xf32>
  %2 = tensor.empty() : tensor<2x16x256xf32>
  %3 = linalg.fill ins(%cst : f32) outs(%2 : tensor<2x16x256xf32>) -> tensor<2x16x256xf32>
  %4 = linalg.generic {indexing_maps = [#bsh, #ho, #bso], iterator_types = ["parallel", "parallel", "parallel", "reduction"]} ins(%1, %arg2 : tensor<2x16x64xf32>, tensor<64x256xf32>) outs(%3 : tensor<2x16x256xf32>) {
  ^bb0(%in: f32, %in_0: f32, %out: f32):
    %m = arith.mulf %in, %in_0 : f32
    %a = arith.addf %out, %m : f32
    linalg.yield %a : f32
  } -> tensor<2x16x256xf32>
  %5 = tensor.empty() : tensor<2x16x64xf32>
  %6 = linalg.fill ins(%cst : f32) outs(%5 : tensor<2x16x64xf32>) -> tensor<2x16x64xf32>
  %7 = linalg.generic {indexing_maps = [#bsh, #ho, #bso], iterator_types = ["parallel", "parallel", "parallel", "reduction"]} ins(%4, %arg3 : tensor<2x16x256xf32>, tensor<256x64xf32>) outs(%6 : tensor<2x16x64xf32>) {
  ^bb0(%in: f32, %in_0: f32, %out: f32):
    %m = arith.mulf %in, %in_0 : f32
    %a = arith.addf %out, %m : f32
    linalg.yield %a : f32
  } -> tensor<2x16x64xf32>
  %8 = tensor.empty() : tensor<2x16x100xf32>
  %9 = linalg.fill ins(%cst : f32) outs(%8 : tensor<2x16x100xf32>) -> tensor<2x16x100xf32>
  %10 = linalg.generic {indexing_maps = [#bsh, #oh, #bso], iterator_types = ["parallel", "parallel", "parallel", "reduction"]} ins(%7, %arg1 : tensor<2x16x64xf32>, tensor<100x64xf32>) outs(%9 : tensor<2x16x100xf32>) {
  ^bb0(%in: f32, %in_0: f32, %out: f32):
    %m = arith.mulf %in, %in_0 : f32
    %a = arith.addf %out, %m : f32
    linalg.yield %a : f32
  } -> tensor<2x16x100xf32>
  return %10 : tensor<2x16x100xf32>
}

// -----

// 3 heads do not divide over 2 devices: the split of the projection's
// output dim would land on the heads dim of the reshape, so it stays whole.
#bsh = affine_map<(d0, d1, d2, d3) -> (d0, d1, d3)>
#ho = affine_map<(d0, d1, d2, d3) -> (d3, d2)>
#bso = affine_map<(d0, d1, d2, d3) -> (d0, d1, d2)>
// CHECK-LABEL: func.func @heads_not_divisible(
// CHECK-SAME: %arg1: tensor<48x48xf32> {tp.weight = "wq"})
// CHECK-DAG: shard.shard %arg1 to %[[S:[^ ]*]] annotate_for_users : tensor<48x48xf32>
// CHECK-DAG: %[[S]] = shard.sharding @grid split_axes = {{\[\[}}]] : !shard.sharding
// CHECK: linalg.generic
// CHECK-SAME: tp.replicated = "its output dim cannot stay split: 'tensor.expand_shape' splits dim 2 into {{.*}}size 3{{.*}}, which 2 devices do not divide
func.func @heads_not_divisible(%arg0: tensor<2x16x48xf32> {tp.input = "x"}, %arg1: tensor<48x48xf32> {tp.weight = "wq"}) -> (tensor<2x16x3x16xf32> {tp.output = "q"}) {
  %cst = arith.constant 0.000000e+00 : f32
  %0 = tensor.empty() : tensor<2x16x48xf32>
  %1 = linalg.fill ins(%cst : f32) outs(%0 : tensor<2x16x48xf32>) -> tensor<2x16x48xf32>
  %2 = linalg.generic {indexing_maps = [#bsh, #ho, #bso], iterator_types = ["parallel", "parallel", "parallel", "reduction"]} ins(%arg0, %arg1 : tensor<2x16x48xf32>, tensor<48x48xf32>) outs(%1 : tensor<2x16x48xf32>) {
  ^bb0(%in: f32, %in_0: f32, %out: f32):
    %m = arith.mulf %in, %in_0 : f32
    %a = arith.addf %out, %m : f32
    linalg.yield %a : f32
  } -> tensor<2x16x48xf32>
  %3 = tensor.expand_shape %2 [[0], [1], [2, 3]] output_shape [2, 16, 3, 16] : tensor<2x16x48xf32> into tensor<2x16x3x16xf32>
  return %3 : tensor<2x16x3x16xf32>
}

// -----

// A column contraction whose output feeds both a row-parallel contraction
// and a function result has no single place to end its split: w1 stays
// whole, and w2, no longer anyone's row partner, is planned on its own as a
// gathered column (its output is the first result).
#bsh = affine_map<(d0, d1, d2, d3) -> (d0, d1, d3)>
#ho = affine_map<(d0, d1, d2, d3) -> (d3, d2)>
#bso = affine_map<(d0, d1, d2, d3) -> (d0, d1, d2)>
// CHECK-LABEL: func.func @row_and_result(
// CHECK-SAME: %arg1: tensor<64x256xf32> {tp.weight = "w1"}
// CHECK-SAME: tp.layout = #tp.layout<role = column_gathered, dim = 1, block = 0>, tp.weight = "w2"})
// CHECK: linalg.generic
// CHECK-SAME: ins(%{{.*}}, %{{.*}} : tensor<2x16x64xf32>, tensor<64x256xf32>)
// CHECK-SAME: tp.replicated = "its output reaches both a row-parallel contraction and a function result"
func.func @row_and_result(%arg0: tensor<2x16x64xf32> {tp.input = "x"}, %arg1: tensor<64x256xf32> {tp.weight = "w1"}, %arg2: tensor<256x64xf32> {tp.weight = "w2"}) -> (tensor<2x16x64xf32> {tp.output = "y"}, tensor<2x16x256xf32> {tp.output = "h"}) {
  %cst = arith.constant 0.000000e+00 : f32
  %0 = tensor.empty() : tensor<2x16x256xf32>
  %1 = linalg.fill ins(%cst : f32) outs(%0 : tensor<2x16x256xf32>) -> tensor<2x16x256xf32>
  %2 = linalg.generic {indexing_maps = [#bsh, #ho, #bso], iterator_types = ["parallel", "parallel", "parallel", "reduction"]} ins(%arg0, %arg1 : tensor<2x16x64xf32>, tensor<64x256xf32>) outs(%1 : tensor<2x16x256xf32>) {
  ^bb0(%in: f32, %in_0: f32, %out: f32):
    %m = arith.mulf %in, %in_0 : f32
    %a = arith.addf %out, %m : f32
    linalg.yield %a : f32
  } -> tensor<2x16x256xf32>
  %3 = tensor.empty() : tensor<2x16x64xf32>
  %4 = linalg.fill ins(%cst : f32) outs(%3 : tensor<2x16x64xf32>) -> tensor<2x16x64xf32>
  %5 = linalg.generic {indexing_maps = [#bsh, #ho, #bso], iterator_types = ["parallel", "parallel", "parallel", "reduction"]} ins(%2, %arg2 : tensor<2x16x256xf32>, tensor<256x64xf32>) outs(%4 : tensor<2x16x64xf32>) {
  ^bb0(%in: f32, %in_0: f32, %out: f32):
    %m = arith.mulf %in, %in_0 : f32
    %a = arith.addf %out, %m : f32
    linalg.yield %a : f32
  } -> tensor<2x16x64xf32>
  return %5, %2 : tensor<2x16x64xf32>, tensor<2x16x256xf32>
}

// -----

// A causal depthwise Conv1d inside an MLP (torch's Pad + Conv with one
// channel a group): the pad only pads the sequence, so the column split of
// the channels passes it; the convolution reads the channels as d2 + d3, d3
// over a group of one channel, outside its window (d1 + d4), so it keeps
// them split too (tp.split_loop), with its filters split on the channel
// dim; w2 is row-parallel.
#bsh = affine_map<(d0, d1, d2, d3) -> (d0, d1, d3)>
#ho = affine_map<(d0, d1, d2, d3) -> (d3, d2)>
#bso = affine_map<(d0, d1, d2, d3) -> (d0, d1, d2)>
#win = affine_map<(d0, d1, d2, d3, d4) -> (d0, d1 + d4, d2 + d3)>
#filt = affine_map<(d0, d1, d2, d3, d4) -> (d2, d3, d4)>
#out = affine_map<(d0, d1, d2, d3, d4) -> (d0, d1, d2)>
// CHECK-LABEL: func.func @mlp_causal_conv(
// CHECK-SAME: tp.layout = #tp.layout<role = column, dim = 1, block = 0>, tp.weight = "w1"}
// CHECK-SAME: tp.layout = #tp.layout<role = bias, dim = 0, block = 0>, tp.weight = "conv"}
// CHECK-SAME: tp.layout = #tp.layout<role = row, dim = 0, block = 0>, tp.weight = "w2"}
// CHECK: tensor.pad %{{.*}} low[0, 2, 0] high[0, 0, 0]
// CHECK: linalg.generic
// CHECK-SAME: tp.split_loop = 2 : i64
// CHECK-NOT: tp.replicated
func.func @mlp_causal_conv(%arg0: tensor<2x16x64xf32> {tp.input = "x"}, %arg1: tensor<64x256xf32> {tp.weight = "w1"}, %arg2: tensor<256x1x3xf32> {tp.weight = "conv"}, %arg3: tensor<256x64xf32> {tp.weight = "w2"}) -> (tensor<2x16x64xf32> {tp.output = "y"}) {
  %cst = arith.constant 0.000000e+00 : f32
  %0 = tensor.empty() : tensor<2x16x256xf32>
  %1 = linalg.fill ins(%cst : f32) outs(%0 : tensor<2x16x256xf32>) -> tensor<2x16x256xf32>
  %2 = linalg.generic {indexing_maps = [#bsh, #ho, #bso], iterator_types = ["parallel", "parallel", "parallel", "reduction"]} ins(%arg0, %arg1 : tensor<2x16x64xf32>, tensor<64x256xf32>) outs(%1 : tensor<2x16x256xf32>) {
  ^bb0(%in: f32, %in_1: f32, %out: f32):
    %m = arith.mulf %in, %in_1 : f32
    %a = arith.addf %out, %m : f32
    linalg.yield %a : f32
  } -> tensor<2x16x256xf32>
  %padded = tensor.pad %2 low[0, 2, 0] high[0, 0, 0] {
  ^bb0(%i: index, %j: index, %k: index):
    tensor.yield %cst : f32
  } : tensor<2x16x256xf32> to tensor<2x18x256xf32>
  %c = linalg.fill ins(%cst : f32) outs(%0 : tensor<2x16x256xf32>) -> tensor<2x16x256xf32>
  %3 = linalg.generic {indexing_maps = [#win, #filt, #out], iterator_types = ["parallel", "parallel", "parallel", "reduction", "reduction"]} ins(%padded, %arg2 : tensor<2x18x256xf32>, tensor<256x1x3xf32>) outs(%c : tensor<2x16x256xf32>) {
  ^bb0(%in: f32, %in_1: f32, %out: f32):
    %m = arith.mulf %in, %in_1 : f32
    %a = arith.addf %out, %m : f32
    linalg.yield %a : f32
  } -> tensor<2x16x256xf32>
  %4 = tensor.empty() : tensor<2x16x64xf32>
  %5 = linalg.fill ins(%cst : f32) outs(%4 : tensor<2x16x64xf32>) -> tensor<2x16x64xf32>
  %6 = linalg.generic {indexing_maps = [#bsh, #ho, #bso], iterator_types = ["parallel", "parallel", "parallel", "reduction"]} ins(%3, %arg3 : tensor<2x16x256xf32>, tensor<256x64xf32>) outs(%5 : tensor<2x16x64xf32>) {
  ^bb0(%in: f32, %in_1: f32, %out: f32):
    %m = arith.mulf %in, %in_1 : f32
    %a = arith.addf %out, %m : f32
    linalg.yield %a : f32
  } -> tensor<2x16x64xf32>
  return %6 : tensor<2x16x64xf32>
}

// -----

// Padding on the split dim itself (the hidden dim of an MLP) would put the
// padding inside one rank's part: the split cannot pass, and w1 stays
// whole.
#bsh = affine_map<(d0, d1, d2, d3) -> (d0, d1, d3)>
#ho = affine_map<(d0, d1, d2, d3) -> (d3, d2)>
#bso = affine_map<(d0, d1, d2, d3) -> (d0, d1, d2)>
// CHECK-LABEL: func.func @pad_split_dim(
// CHECK-SAME: %arg1: tensor<64x256xf32> {tp.weight = "w1"}
// CHECK: linalg.generic
// CHECK-SAME: tp.replicated = "its output dim cannot stay split: 'tensor.pad' pads the split dim 2"
func.func @pad_split_dim(%arg0: tensor<2x16x64xf32> {tp.input = "x"}, %arg1: tensor<64x256xf32> {tp.weight = "w1"}, %arg2: tensor<258x64xf32> {tp.weight = "w2"}) -> (tensor<2x16x64xf32> {tp.output = "y"}) {
  %cst = arith.constant 0.000000e+00 : f32
  %0 = tensor.empty() : tensor<2x16x256xf32>
  %1 = linalg.fill ins(%cst : f32) outs(%0 : tensor<2x16x256xf32>) -> tensor<2x16x256xf32>
  %2 = linalg.generic {indexing_maps = [#bsh, #ho, #bso], iterator_types = ["parallel", "parallel", "parallel", "reduction"]} ins(%arg0, %arg1 : tensor<2x16x64xf32>, tensor<64x256xf32>) outs(%1 : tensor<2x16x256xf32>) {
  ^bb0(%in: f32, %in_1: f32, %out: f32):
    %m = arith.mulf %in, %in_1 : f32
    %a = arith.addf %out, %m : f32
    linalg.yield %a : f32
  } -> tensor<2x16x256xf32>
  %padded = tensor.pad %2 low[0, 0, 1] high[0, 0, 1] {
  ^bb0(%i: index, %j: index, %k: index):
    tensor.yield %cst : f32
  } : tensor<2x16x256xf32> to tensor<2x16x258xf32>
  %4 = tensor.empty() : tensor<2x16x64xf32>
  %5 = linalg.fill ins(%cst : f32) outs(%4 : tensor<2x16x64xf32>) -> tensor<2x16x64xf32>
  %6 = linalg.generic {indexing_maps = [#bsh, #ho, #bso], iterator_types = ["parallel", "parallel", "parallel", "reduction"]} ins(%padded, %arg2 : tensor<2x16x258xf32>, tensor<258x64xf32>) outs(%5 : tensor<2x16x64xf32>) {
  ^bb0(%in: f32, %in_1: f32, %out: f32):
    %m = arith.mulf %in, %in_1 : f32
    %a = arith.addf %out, %m : f32
    linalg.yield %a : f32
  } -> tensor<2x16x64xf32>
  return %6 : tensor<2x16x64xf32>
}

// -----

// An LM head tied to the embedding table reads it transposed (tp-compile
// --train imports the export's transposed copy as a transpose of the table,
// here generalized). The table splits by vocabulary; the transpose is
// planned as the head's weight, split on its dim 1, the same rows of the
// table: no gather of the table, the logits stay split by vocabulary.
#ids = affine_map<(d0, d1, d2, d3) -> (d0, d1)>
#table = affine_map<(d0, d1, d2, d3) -> (d3, d2)>
#bso = affine_map<(d0, d1, d2, d3) -> (d0, d1, d2)>
#bsh = affine_map<(d0, d1, d2, d3) -> (d0, d1, d3)>
#ho = affine_map<(d0, d1, d2, d3) -> (d3, d2)>
#t_in = affine_map<(d0, d1) -> (d1, d0)>
#t_out = affine_map<(d0, d1) -> (d0, d1)>
// CHECK-LABEL: func.func @tied_head(
// CHECK-SAME: tp.layout = #tp.layout<role = vocab, dim = 0, block = 0>, tp.weight = "wte"}
// CHECK: %[[T:.*]] = linalg.generic {{.*}} ins(%{{.*}} : tensor<256x64xf32>) {{.*}} attrs =  {tp.layout = #tp.layout<role = column_gathered, dim = 1, block = 1>}
// CHECK-NEXT: ^bb0
// CHECK-NEXT: linalg.yield
// CHECK-NEXT: } -> tensor<64x256xf32>
// CHECK-NEXT: %[[S:.*]] = shard.sharding @grid split_axes = {{\[\[}}], [0]] : !shard.sharding
// CHECK-NEXT: %[[TS:.*]] = shard.shard %[[T]] to %[[S]] annotate_for_users : tensor<64x256xf32>
// CHECK: linalg.generic {{.*}} ins(%{{.*}}, %[[TS]] : tensor<2x16x64xf32>, tensor<64x256xf32>)
func.func @tied_head(%x: tensor<2x16xi64> {tp.input = "input_ids"}, %wte: tensor<256x64xf32> {tp.weight = "wte"}) -> (tensor<2x16x256xf32> {tp.output = "logits"}) {
  %cst = arith.constant 0.000000e+00 : f32
  %e0 = tensor.empty() : tensor<2x16x64xf32>
  %f0 = linalg.fill ins(%cst : f32) outs(%e0 : tensor<2x16x64xf32>) -> tensor<2x16x64xf32>
  %h = linalg.generic {indexing_maps = [#ids, #table, #bso], iterator_types = ["parallel", "parallel", "parallel", "reduction"]} ins(%x, %wte : tensor<2x16xi64>, tensor<256x64xf32>) outs(%f0 : tensor<2x16x64xf32>) attrs = {tp.embedding = 256 : i64} {
  ^bb0(%in: i64, %in_1: f32, %out: f32):
    %i = arith.index_cast %in : i64 to index
    %j = linalg.index 3 : index
    %eq = arith.cmpi eq, %i, %j : index
    %v = arith.select %eq, %in_1, %cst : f32
    %s = arith.addf %out, %v : f32
    linalg.yield %s : f32
  } -> tensor<2x16x64xf32>
  %et = tensor.empty() : tensor<64x256xf32>
  %t = linalg.generic {indexing_maps = [#t_in, #t_out], iterator_types = ["parallel", "parallel"]} ins(%wte : tensor<256x64xf32>) outs(%et : tensor<64x256xf32>) {
  ^bb0(%in: f32, %out: f32):
    linalg.yield %in : f32
  } -> tensor<64x256xf32>
  %e1 = tensor.empty() : tensor<2x16x256xf32>
  %f1 = linalg.fill ins(%cst : f32) outs(%e1 : tensor<2x16x256xf32>) -> tensor<2x16x256xf32>
  %logits = linalg.generic {indexing_maps = [#bsh, #ho, #bso], iterator_types = ["parallel", "parallel", "parallel", "reduction"]} ins(%h, %t : tensor<2x16x64xf32>, tensor<64x256xf32>) outs(%f1 : tensor<2x16x256xf32>) {
  ^bb0(%in: f32, %in_1: f32, %out: f32):
    %m = arith.mulf %in, %in_1 : f32
    %a = arith.addf %out, %m : f32
    linalg.yield %a : f32
  } -> tensor<2x16x256xf32>
  return %logits : tensor<2x16x256xf32>
}

// -----

// One MLP's weights applied twice (ALBERT shares one layer's weights among
// all its layers): each use splits them alike, so they split once (column
// and row, the block of the first use) and neither use is replicated.
#bsh = affine_map<(d0, d1, d2, d3) -> (d0, d1, d3)>
#ho = affine_map<(d0, d1, d2, d3) -> (d3, d2)>
#bso = affine_map<(d0, d1, d2, d3) -> (d0, d1, d2)>
#id = affine_map<(d0, d1, d2) -> (d0, d1, d2)>
// CHECK-LABEL: func.func @shared_weights(
// CHECK-SAME: tp.layout = #tp.layout<role = column, dim = 1, block = 0>, tp.weight = "w1"}
// CHECK-SAME: tp.layout = #tp.layout<role = row, dim = 0, block = 0>, tp.weight = "w2"}
// CHECK-NOT: tp.replicated
func.func @shared_weights(%x: tensor<2x16x64xf32> {tp.input = "x"}, %w1: tensor<64x256xf32> {tp.weight = "w1"}, %w2: tensor<256x64xf32> {tp.weight = "w2"}) -> (tensor<2x16x64xf32> {tp.output = "y"}) {
  %cst = arith.constant 0.000000e+00 : f32
  %e1 = tensor.empty() : tensor<2x16x256xf32>
  %f1 = linalg.fill ins(%cst : f32) outs(%e1 : tensor<2x16x256xf32>) -> tensor<2x16x256xf32>
  %e2 = tensor.empty() : tensor<2x16x64xf32>
  %f2 = linalg.fill ins(%cst : f32) outs(%e2 : tensor<2x16x64xf32>) -> tensor<2x16x64xf32>
  %h1 = linalg.generic {indexing_maps = [#bsh, #ho, #bso], iterator_types = ["parallel", "parallel", "parallel", "reduction"]} ins(%x, %w1 : tensor<2x16x64xf32>, tensor<64x256xf32>) outs(%f1 : tensor<2x16x256xf32>) {
  ^bb0(%in: f32, %in_1: f32, %out: f32):
    %m = arith.mulf %in, %in_1 : f32
    %a = arith.addf %out, %m : f32
    linalg.yield %a : f32
  } -> tensor<2x16x256xf32>
  %y1 = linalg.generic {indexing_maps = [#bsh, #ho, #bso], iterator_types = ["parallel", "parallel", "parallel", "reduction"]} ins(%h1, %w2 : tensor<2x16x256xf32>, tensor<256x64xf32>) outs(%f2 : tensor<2x16x64xf32>) {
  ^bb0(%in: f32, %in_1: f32, %out: f32):
    %m = arith.mulf %in, %in_1 : f32
    %a = arith.addf %out, %m : f32
    linalg.yield %a : f32
  } -> tensor<2x16x64xf32>
  %r1 = linalg.generic {indexing_maps = [#id, #id, #id], iterator_types = ["parallel", "parallel", "parallel"]} ins(%x, %y1 : tensor<2x16x64xf32>, tensor<2x16x64xf32>) outs(%e2 : tensor<2x16x64xf32>) {
  ^bb0(%in: f32, %in_1: f32, %out: f32):
    %a = arith.addf %in, %in_1 : f32
    linalg.yield %a : f32
  } -> tensor<2x16x64xf32>
  %h2 = linalg.generic {indexing_maps = [#bsh, #ho, #bso], iterator_types = ["parallel", "parallel", "parallel", "reduction"]} ins(%r1, %w1 : tensor<2x16x64xf32>, tensor<64x256xf32>) outs(%f1 : tensor<2x16x256xf32>) {
  ^bb0(%in: f32, %in_1: f32, %out: f32):
    %m = arith.mulf %in, %in_1 : f32
    %a = arith.addf %out, %m : f32
    linalg.yield %a : f32
  } -> tensor<2x16x256xf32>
  %y2 = linalg.generic {indexing_maps = [#bsh, #ho, #bso], iterator_types = ["parallel", "parallel", "parallel", "reduction"]} ins(%h2, %w2 : tensor<2x16x256xf32>, tensor<256x64xf32>) outs(%f2 : tensor<2x16x64xf32>) {
  ^bb0(%in: f32, %in_1: f32, %out: f32):
    %m = arith.mulf %in, %in_1 : f32
    %a = arith.addf %out, %m : f32
    linalg.yield %a : f32
  } -> tensor<2x16x64xf32>
  return %y2 : tensor<2x16x64xf32>
}

// -----

// A projection whose row-parallel partner would not end a block
// (MobileBERT's bottleneck, w0, read through an elementwise NoNorm by the
// feed-forward's first projection w1): paired, w1 would all-reduce and w2
// run whole. w1 starts a block of its own that ends at a sum (w2, then the
// residual add), so w0 stays whole and w1, w2 split as column and row: one
// all-reduce, at the block's end.
#bsh = affine_map<(d0, d1, d2, d3) -> (d0, d1, d3)>
#ho = affine_map<(d0, d1, d2, d3) -> (d3, d2)>
#bso = affine_map<(d0, d1, d2, d3) -> (d0, d1, d2)>
#id = affine_map<(d0, d1, d2) -> (d0, d1, d2)>
#last = affine_map<(d0, d1, d2) -> (d2)>
// CHECK-LABEL: func.func @bottleneck_then_block(
// CHECK-SAME: %arg1: tensor<64x32xf32> {tp.weight = "w0"}
// CHECK-SAME: tp.layout = #tp.layout<role = column, dim = 1, block = 0>, tp.weight = "w1"}
// CHECK-SAME: tp.layout = #tp.layout<role = row, dim = 0, block = 0>, tp.weight = "w2"}
// CHECK: linalg.generic {{.*}}tp.replicated = "row-parallel partners of it that do not end a block start blocks of their own: they split as columns instead"
func.func @bottleneck_then_block(%x: tensor<2x16x64xf32> {tp.input = "x"}, %w0: tensor<64x32xf32> {tp.weight = "w0"}, %scale: tensor<32xf32> {tp.weight = "scale"}, %w1: tensor<32x128xf32> {tp.weight = "w1"}, %w2: tensor<128x64xf32> {tp.weight = "w2"}) -> (tensor<2x16x64xf32> {tp.output = "y"}) {
  %cst = arith.constant 0.000000e+00 : f32
  %e0 = tensor.empty() : tensor<2x16x32xf32>
  %f0 = linalg.fill ins(%cst : f32) outs(%e0 : tensor<2x16x32xf32>) -> tensor<2x16x32xf32>
  %b = linalg.generic {indexing_maps = [#bsh, #ho, #bso], iterator_types = ["parallel", "parallel", "parallel", "reduction"]} ins(%x, %w0 : tensor<2x16x64xf32>, tensor<64x32xf32>) outs(%f0 : tensor<2x16x32xf32>) {
  ^bb0(%in: f32, %in_1: f32, %out: f32):
    %m = arith.mulf %in, %in_1 : f32
    %a = arith.addf %out, %m : f32
    linalg.yield %a : f32
  } -> tensor<2x16x32xf32>
  %n = linalg.generic {indexing_maps = [#id, #last, #id], iterator_types = ["parallel", "parallel", "parallel"]} ins(%b, %scale : tensor<2x16x32xf32>, tensor<32xf32>) outs(%e0 : tensor<2x16x32xf32>) {
  ^bb0(%in: f32, %in_1: f32, %out: f32):
    %m = arith.mulf %in, %in_1 : f32
    linalg.yield %m : f32
  } -> tensor<2x16x32xf32>
  %e1 = tensor.empty() : tensor<2x16x128xf32>
  %f1 = linalg.fill ins(%cst : f32) outs(%e1 : tensor<2x16x128xf32>) -> tensor<2x16x128xf32>
  %h = linalg.generic {indexing_maps = [#bsh, #ho, #bso], iterator_types = ["parallel", "parallel", "parallel", "reduction"]} ins(%n, %w1 : tensor<2x16x32xf32>, tensor<32x128xf32>) outs(%f1 : tensor<2x16x128xf32>) {
  ^bb0(%in: f32, %in_1: f32, %out: f32):
    %m = arith.mulf %in, %in_1 : f32
    %a = arith.addf %out, %m : f32
    linalg.yield %a : f32
  } -> tensor<2x16x128xf32>
  %e2 = tensor.empty() : tensor<2x16x64xf32>
  %f2 = linalg.fill ins(%cst : f32) outs(%e2 : tensor<2x16x64xf32>) -> tensor<2x16x64xf32>
  %o = linalg.generic {indexing_maps = [#bsh, #ho, #bso], iterator_types = ["parallel", "parallel", "parallel", "reduction"]} ins(%h, %w2 : tensor<2x16x128xf32>, tensor<128x64xf32>) outs(%f2 : tensor<2x16x64xf32>) {
  ^bb0(%in: f32, %in_1: f32, %out: f32):
    %m = arith.mulf %in, %in_1 : f32
    %a = arith.addf %out, %m : f32
    linalg.yield %a : f32
  } -> tensor<2x16x64xf32>
  %r = linalg.generic {indexing_maps = [#id, #id, #id], iterator_types = ["parallel", "parallel", "parallel"]} ins(%x, %o : tensor<2x16x64xf32>, tensor<2x16x64xf32>) outs(%e2 : tensor<2x16x64xf32>) {
  ^bb0(%in: f32, %in_1: f32, %out: f32):
    %a = arith.addf %in, %in_1 : f32
    linalg.yield %a : f32
  } -> tensor<2x16x64xf32>
  return %r : tensor<2x16x64xf32>
}

// -----

// The same bottleneck read by a second contraction (wk) that runs whole
// whatever its input: its output dim is contracted with another whole
// activation, the input (a multi-query K head, which every query head
// reads). It
// neither ends nor starts a block, and paired with w0 as a row it would
// add an all-reduce: w0 stays whole, w1 and w2 make the block, and wk runs
// whole.
#bsh = affine_map<(d0, d1, d2, d3) -> (d0, d1, d3)>
#ho = affine_map<(d0, d1, d2, d3) -> (d3, d2)>
#bso = affine_map<(d0, d1, d2, d3) -> (d0, d1, d2)>
#id = affine_map<(d0, d1, d2) -> (d0, d1, d2)>
#last = affine_map<(d0, d1, d2) -> (d2)>
#qk = affine_map<(d0, d1, d2, d3) -> (d0, d2, d3)>
// CHECK-LABEL: func.func @bottleneck_then_whole(
// CHECK-SAME: %arg1: tensor<64x32xf32> {tp.weight = "w0"}
// CHECK-SAME: tp.layout = #tp.layout<role = column, dim = 1, block = 0>, tp.weight = "w1"}
// CHECK-SAME: tp.layout = #tp.layout<role = row, dim = 0, block = 0>, tp.weight = "w2"}
// CHECK-SAME: %arg5: tensor<32x64xf32> {tp.weight = "wk"}
// CHECK: linalg.generic {{.*}}tp.replicated = "row-parallel partners of it that do not end a block start blocks of their own: they split as columns instead"
// CHECK: linalg.generic {{.*}}tp.replicated = "its output dim cannot stay split: {{.*}}contracts the split dim with another activation
func.func @bottleneck_then_whole(%x: tensor<2x16x64xf32> {tp.input = "x"}, %w0: tensor<64x32xf32> {tp.weight = "w0"}, %scale: tensor<32xf32> {tp.weight = "scale"}, %w1: tensor<32x128xf32> {tp.weight = "w1"}, %w2: tensor<128x64xf32> {tp.weight = "w2"}, %wk: tensor<32x64xf32> {tp.weight = "wk"}) -> (tensor<2x16x64xf32> {tp.output = "y"}, tensor<2x16x16xf32> {tp.output = "s"}) {
  %cst = arith.constant 0.000000e+00 : f32
  %e0 = tensor.empty() : tensor<2x16x32xf32>
  %f0 = linalg.fill ins(%cst : f32) outs(%e0 : tensor<2x16x32xf32>) -> tensor<2x16x32xf32>
  %b = linalg.generic {indexing_maps = [#bsh, #ho, #bso], iterator_types = ["parallel", "parallel", "parallel", "reduction"]} ins(%x, %w0 : tensor<2x16x64xf32>, tensor<64x32xf32>) outs(%f0 : tensor<2x16x32xf32>) {
  ^bb0(%in: f32, %in_1: f32, %out: f32):
    %m = arith.mulf %in, %in_1 : f32
    %a = arith.addf %out, %m : f32
    linalg.yield %a : f32
  } -> tensor<2x16x32xf32>
  %n = linalg.generic {indexing_maps = [#id, #last, #id], iterator_types = ["parallel", "parallel", "parallel"]} ins(%b, %scale : tensor<2x16x32xf32>, tensor<32xf32>) outs(%e0 : tensor<2x16x32xf32>) {
  ^bb0(%in: f32, %in_1: f32, %out: f32):
    %m = arith.mulf %in, %in_1 : f32
    linalg.yield %m : f32
  } -> tensor<2x16x32xf32>
  %e1 = tensor.empty() : tensor<2x16x128xf32>
  %f1 = linalg.fill ins(%cst : f32) outs(%e1 : tensor<2x16x128xf32>) -> tensor<2x16x128xf32>
  %h = linalg.generic {indexing_maps = [#bsh, #ho, #bso], iterator_types = ["parallel", "parallel", "parallel", "reduction"]} ins(%n, %w1 : tensor<2x16x32xf32>, tensor<32x128xf32>) outs(%f1 : tensor<2x16x128xf32>) {
  ^bb0(%in: f32, %in_1: f32, %out: f32):
    %m = arith.mulf %in, %in_1 : f32
    %a = arith.addf %out, %m : f32
    linalg.yield %a : f32
  } -> tensor<2x16x128xf32>
  %e2 = tensor.empty() : tensor<2x16x64xf32>
  %f2 = linalg.fill ins(%cst : f32) outs(%e2 : tensor<2x16x64xf32>) -> tensor<2x16x64xf32>
  %o = linalg.generic {indexing_maps = [#bsh, #ho, #bso], iterator_types = ["parallel", "parallel", "parallel", "reduction"]} ins(%h, %w2 : tensor<2x16x128xf32>, tensor<128x64xf32>) outs(%f2 : tensor<2x16x64xf32>) {
  ^bb0(%in: f32, %in_1: f32, %out: f32):
    %m = arith.mulf %in, %in_1 : f32
    %a = arith.addf %out, %m : f32
    linalg.yield %a : f32
  } -> tensor<2x16x64xf32>
  %r = linalg.generic {indexing_maps = [#id, #id, #id], iterator_types = ["parallel", "parallel", "parallel"]} ins(%x, %o : tensor<2x16x64xf32>, tensor<2x16x64xf32>) outs(%e2 : tensor<2x16x64xf32>) {
  ^bb0(%in: f32, %in_1: f32, %out: f32):
    %a = arith.addf %in, %in_1 : f32
    linalg.yield %a : f32
  } -> tensor<2x16x64xf32>
  %k = linalg.generic {indexing_maps = [#bsh, #ho, #bso], iterator_types = ["parallel", "parallel", "parallel", "reduction"]} ins(%n, %wk : tensor<2x16x32xf32>, tensor<32x64xf32>) outs(%f2 : tensor<2x16x64xf32>) {
  ^bb0(%in: f32, %in_1: f32, %out: f32):
    %m = arith.mulf %in, %in_1 : f32
    %a = arith.addf %out, %m : f32
    linalg.yield %a : f32
  } -> tensor<2x16x64xf32>
  %e3 = tensor.empty() : tensor<2x16x16xf32>
  %f3 = linalg.fill ins(%cst : f32) outs(%e3 : tensor<2x16x16xf32>) -> tensor<2x16x16xf32>
  %s = linalg.generic {indexing_maps = [#bsh, #qk, #bso], iterator_types = ["parallel", "parallel", "parallel", "reduction"]} ins(%k, %x : tensor<2x16x64xf32>, tensor<2x16x64xf32>) outs(%f3 : tensor<2x16x16xf32>) {
  ^bb0(%in: f32, %in_1: f32, %out: f32):
    %m = arith.mulf %in, %in_1 : f32
    %a = arith.addf %out, %m : f32
    linalg.yield %a : f32
  } -> tensor<2x16x16xf32>
  return %r, %s : tensor<2x16x64xf32>, tensor<2x16x16xf32>
}

// -----

// A norm over all of a column-parallel projection's features (OLMo 2's Q
// and K norms: RMS over heads * head_dim), between it and its row-parallel
// partner, which ends the block at the residual add: the projection stays
// split, its mean of squares is summed on each rank's part and completed by
// one all-reduce of a value per token (the reduction reads its input
// split), and the norm's weight splits with the features.
#bsh = affine_map<(d0, d1, d2, d3) -> (d0, d1, d3)>
#ho = affine_map<(d0, d1, d2, d3) -> (d3, d2)>
#bso = affine_map<(d0, d1, d2, d3) -> (d0, d1, d2)>
#id = affine_map<(d0, d1, d2) -> (d0, d1, d2)>
#last = affine_map<(d0, d1, d2) -> (d2)>
#row = affine_map<(d0, d1, d2) -> (d0, d1)>
// CHECK-LABEL: func.func @norm_across_heads(
// CHECK-SAME: tp.layout = #tp.layout<role = column, dim = 1, block = 0>, tp.weight = "wq"}
// CHECK-SAME: tp.layout = #tp.layout<role = bias, dim = 0, block = 0>, tp.weight = "norm"}
// CHECK-SAME: tp.layout = #tp.layout<role = row, dim = 0, block = 0>, tp.weight = "wo"}
// CHECK-NOT: tp.replicated
// CHECK: return
func.func @norm_across_heads(%x: tensor<2x16x64xf32> {tp.input = "x"}, %wq: tensor<64x32xf32> {tp.weight = "wq"}, %norm: tensor<32xf32> {tp.weight = "norm"}, %wo: tensor<32x64xf32> {tp.weight = "wo"}) -> (tensor<2x16x64xf32> {tp.output = "y"}) {
  %cst = arith.constant 0.000000e+00 : f32
  %n = arith.constant 3.200000e+01 : f32
  %e0 = tensor.empty() : tensor<2x16x32xf32>
  %f0 = linalg.fill ins(%cst : f32) outs(%e0 : tensor<2x16x32xf32>) -> tensor<2x16x32xf32>
  %q = linalg.generic {indexing_maps = [#bsh, #ho, #bso], iterator_types = ["parallel", "parallel", "parallel", "reduction"]} ins(%x, %wq : tensor<2x16x64xf32>, tensor<64x32xf32>) outs(%f0 : tensor<2x16x32xf32>) {
  ^bb0(%in: f32, %in_1: f32, %out: f32):
    %m = arith.mulf %in, %in_1 : f32
    %a = arith.addf %out, %m : f32
    linalg.yield %a : f32
  } -> tensor<2x16x32xf32>
  %es = tensor.empty() : tensor<2x16xf32>
  %fs = linalg.fill ins(%cst : f32) outs(%es : tensor<2x16xf32>) -> tensor<2x16xf32>
  %ss = linalg.generic {indexing_maps = [#id, #row], iterator_types = ["parallel", "parallel", "reduction"]} ins(%q : tensor<2x16x32xf32>) outs(%fs : tensor<2x16xf32>) {
  ^bb0(%in: f32, %out: f32):
    %m = arith.mulf %in, %in : f32
    %a = arith.addf %out, %m : f32
    linalg.yield %a : f32
  } -> tensor<2x16xf32>
  %qn = linalg.generic {indexing_maps = [#id, #row, #last, #id], iterator_types = ["parallel", "parallel", "parallel"]} ins(%q, %ss, %norm : tensor<2x16x32xf32>, tensor<2x16xf32>, tensor<32xf32>) outs(%e0 : tensor<2x16x32xf32>) {
  ^bb0(%in: f32, %in_1: f32, %in_2: f32, %out: f32):
    %mean = arith.divf %in_1, %n : f32
    %r = math.rsqrt %mean : f32
    %m = arith.mulf %in, %r : f32
    %w = arith.mulf %m, %in_2 : f32
    linalg.yield %w : f32
  } -> tensor<2x16x32xf32>
  %e2 = tensor.empty() : tensor<2x16x64xf32>
  %f2 = linalg.fill ins(%cst : f32) outs(%e2 : tensor<2x16x64xf32>) -> tensor<2x16x64xf32>
  %o = linalg.generic {indexing_maps = [#bsh, #ho, #bso], iterator_types = ["parallel", "parallel", "parallel", "reduction"]} ins(%qn, %wo : tensor<2x16x32xf32>, tensor<32x64xf32>) outs(%f2 : tensor<2x16x64xf32>) {
  ^bb0(%in: f32, %in_1: f32, %out: f32):
    %m = arith.mulf %in, %in_1 : f32
    %a = arith.addf %out, %m : f32
    linalg.yield %a : f32
  } -> tensor<2x16x64xf32>
  %r = linalg.generic {indexing_maps = [#id, #id, #id], iterator_types = ["parallel", "parallel", "parallel"]} ins(%x, %o : tensor<2x16x64xf32>, tensor<2x16x64xf32>) outs(%e2 : tensor<2x16x64xf32>) {
  ^bb0(%in: f32, %in_1: f32, %out: f32):
    %a = arith.addf %in, %in_1 : f32
    linalg.yield %a : f32
  } -> tensor<2x16x64xf32>
  return %r : tensor<2x16x64xf32>
}

// -----

// The same norm on a residual stream that a contraction would split: its
// output (x2) is normed, then read by the next block's projection (w3),
// which does not end a block at a sum. Split, the stream would reach the
// next block's readers as rows: w1 stays whole.
#bsh = affine_map<(d0, d1, d2, d3) -> (d0, d1, d3)>
#ho = affine_map<(d0, d1, d2, d3) -> (d3, d2)>
#bso = affine_map<(d0, d1, d2, d3) -> (d0, d1, d2)>
#id = affine_map<(d0, d1, d2) -> (d0, d1, d2)>
#row = affine_map<(d0, d1, d2) -> (d0, d1)>
// CHECK-LABEL: func.func @norm_of_stream(
// CHECK-SAME: %arg1: tensor<64x64xf32> {tp.weight = "w1"}
// CHECK: tp.replicated = "its output reaches both a reduction over its output dim and row-parallel contractions that do not end a block at a sum"
func.func @norm_of_stream(%x: tensor<2x16x64xf32> {tp.input = "x"}, %w1: tensor<64x64xf32> {tp.weight = "w1"}, %w3: tensor<64x128xf32> {tp.weight = "w3"}) -> (tensor<2x16x128xf32> {tp.output = "y"}) {
  %cst = arith.constant 0.000000e+00 : f32
  %n = arith.constant 6.400000e+01 : f32
  %e0 = tensor.empty() : tensor<2x16x64xf32>
  %f0 = linalg.fill ins(%cst : f32) outs(%e0 : tensor<2x16x64xf32>) -> tensor<2x16x64xf32>
  %s = linalg.generic {indexing_maps = [#bsh, #ho, #bso], iterator_types = ["parallel", "parallel", "parallel", "reduction"]} ins(%x, %w1 : tensor<2x16x64xf32>, tensor<64x64xf32>) outs(%f0 : tensor<2x16x64xf32>) {
  ^bb0(%in: f32, %in_1: f32, %out: f32):
    %m = arith.mulf %in, %in_1 : f32
    %a = arith.addf %out, %m : f32
    linalg.yield %a : f32
  } -> tensor<2x16x64xf32>
  %es = tensor.empty() : tensor<2x16xf32>
  %fs = linalg.fill ins(%cst : f32) outs(%es : tensor<2x16xf32>) -> tensor<2x16xf32>
  %ss = linalg.generic {indexing_maps = [#id, #row], iterator_types = ["parallel", "parallel", "reduction"]} ins(%s : tensor<2x16x64xf32>) outs(%fs : tensor<2x16xf32>) {
  ^bb0(%in: f32, %out: f32):
    %m = arith.mulf %in, %in : f32
    %a = arith.addf %out, %m : f32
    linalg.yield %a : f32
  } -> tensor<2x16xf32>
  %sn = linalg.generic {indexing_maps = [#id, #row, #id], iterator_types = ["parallel", "parallel", "parallel"]} ins(%s, %ss : tensor<2x16x64xf32>, tensor<2x16xf32>) outs(%e0 : tensor<2x16x64xf32>) {
  ^bb0(%in: f32, %in_1: f32, %out: f32):
    %mean = arith.divf %in_1, %n : f32
    %r = math.rsqrt %mean : f32
    %m = arith.mulf %in, %r : f32
    linalg.yield %m : f32
  } -> tensor<2x16x64xf32>
  %e3 = tensor.empty() : tensor<2x16x128xf32>
  %f3 = linalg.fill ins(%cst : f32) outs(%e3 : tensor<2x16x128xf32>) -> tensor<2x16x128xf32>
  %h = linalg.generic {indexing_maps = [#bsh, #ho, #bso], iterator_types = ["parallel", "parallel", "parallel", "reduction"]} ins(%sn, %w3 : tensor<2x16x64xf32>, tensor<64x128xf32>) outs(%f3 : tensor<2x16x128xf32>) {
  ^bb0(%in: f32, %in_1: f32, %out: f32):
    %m = arith.mulf %in, %in_1 : f32
    %a = arith.addf %out, %m : f32
    linalg.yield %a : f32
  } -> tensor<2x16x128xf32>
  return %h : tensor<2x16x128xf32>
}

// -----

// A sandwich norm (Gemma 2's, OLMo 2's post-block norm): the MLP's second
// contraction is normed, written out op by op, before the residual add.
// It still ends the block at that sum: fc1 and fc2 pair, the all-reduce
// comes before the norm. The projection after the sum (a bottleneck's up
// projection) does not take fc2 as a column of its own, which would leave
// fc1 whole and all-reduce the norm's statistics.
#bsh = affine_map<(d0, d1, d2, d3) -> (d0, d1, d3)>
#ho = affine_map<(d0, d1, d2, d3) -> (d3, d2)>
#bso = affine_map<(d0, d1, d2, d3) -> (d0, d1, d2)>
#id = affine_map<(d0, d1, d2) -> (d0, d1, d2)>
#last = affine_map<(d0, d1, d2) -> (d2)>
#row = affine_map<(d0, d1, d2) -> (d0, d1)>
// CHECK-LABEL: func.func @sandwich_norm(
// CHECK-SAME: tp.layout = #tp.layout<role = column, dim = 1, block = 0>, tp.weight = "fc1"}
// CHECK-SAME: tp.layout = #tp.layout<role = row, dim = 0, block = 0>, tp.weight = "fc2"}
// CHECK-SAME: %arg3: tensor<32xf32> {tp.weight = "gamma"}
// CHECK-NOT: tp.replicated = "row-parallel partners
// CHECK: return
func.func @sandwich_norm(%x: tensor<2x16x32xf32> {tp.input = "x"}, %fc1: tensor<32x128xf32> {tp.weight = "fc1"}, %fc2: tensor<128x32xf32> {tp.weight = "fc2"}, %gamma: tensor<32xf32> {tp.weight = "gamma"}, %up: tensor<32x64xf32> {tp.weight = "up"}, %stream: tensor<2x16x64xf32> {tp.input = "stream"}) -> (tensor<2x16x64xf32> {tp.output = "y"}) {
  %cst = arith.constant 0.000000e+00 : f32
  %n = arith.constant 3.200000e+01 : f32
  %e1 = tensor.empty() : tensor<2x16x128xf32>
  %f1 = linalg.fill ins(%cst : f32) outs(%e1 : tensor<2x16x128xf32>) -> tensor<2x16x128xf32>
  %h = linalg.generic {indexing_maps = [#bsh, #ho, #bso], iterator_types = ["parallel", "parallel", "parallel", "reduction"]} ins(%x, %fc1 : tensor<2x16x32xf32>, tensor<32x128xf32>) outs(%f1 : tensor<2x16x128xf32>) {
  ^bb0(%in: f32, %in_1: f32, %out: f32):
    %m = arith.mulf %in, %in_1 : f32
    %a = arith.addf %out, %m : f32
    linalg.yield %a : f32
  } -> tensor<2x16x128xf32>
  %hr = linalg.generic {indexing_maps = [#id, #id], iterator_types = ["parallel", "parallel", "parallel"]} ins(%h : tensor<2x16x128xf32>) outs(%e1 : tensor<2x16x128xf32>) {
  ^bb0(%in: f32, %out: f32):
    %r = arith.maximumf %in, %cst : f32
    linalg.yield %r : f32
  } -> tensor<2x16x128xf32>
  %e0 = tensor.empty() : tensor<2x16x32xf32>
  %f0 = linalg.fill ins(%cst : f32) outs(%e0 : tensor<2x16x32xf32>) -> tensor<2x16x32xf32>
  %y = linalg.generic {indexing_maps = [#bsh, #ho, #bso], iterator_types = ["parallel", "parallel", "parallel", "reduction"]} ins(%hr, %fc2 : tensor<2x16x128xf32>, tensor<128x32xf32>) outs(%f0 : tensor<2x16x32xf32>) {
  ^bb0(%in: f32, %in_1: f32, %out: f32):
    %m = arith.mulf %in, %in_1 : f32
    %a = arith.addf %out, %m : f32
    linalg.yield %a : f32
  } -> tensor<2x16x32xf32>
  %es = tensor.empty() : tensor<2x16xf32>
  %fs = linalg.fill ins(%cst : f32) outs(%es : tensor<2x16xf32>) -> tensor<2x16xf32>
  %sum = linalg.generic {indexing_maps = [#id, #row], iterator_types = ["parallel", "parallel", "reduction"]} ins(%y : tensor<2x16x32xf32>) outs(%fs : tensor<2x16xf32>) {
  ^bb0(%in: f32, %out: f32):
    %a = arith.addf %out, %in : f32
    linalg.yield %a : f32
  } -> tensor<2x16xf32>
  %c = linalg.generic {indexing_maps = [#id, #row, #id], iterator_types = ["parallel", "parallel", "parallel"]} ins(%y, %sum : tensor<2x16x32xf32>, tensor<2x16xf32>) outs(%e0 : tensor<2x16x32xf32>) {
  ^bb0(%in: f32, %in_1: f32, %out: f32):
    %mean = arith.divf %in_1, %n : f32
    %s = arith.subf %in, %mean : f32
    linalg.yield %s : f32
  } -> tensor<2x16x32xf32>
  %ss = linalg.generic {indexing_maps = [#id, #row], iterator_types = ["parallel", "parallel", "reduction"]} ins(%c : tensor<2x16x32xf32>) outs(%fs : tensor<2x16xf32>) {
  ^bb0(%in: f32, %out: f32):
    %m = arith.mulf %in, %in : f32
    %a = arith.addf %out, %m : f32
    linalg.yield %a : f32
  } -> tensor<2x16xf32>
  %cn = linalg.generic {indexing_maps = [#id, #row, #id], iterator_types = ["parallel", "parallel", "parallel"]} ins(%c, %ss : tensor<2x16x32xf32>, tensor<2x16xf32>) outs(%e0 : tensor<2x16x32xf32>) {
  ^bb0(%in: f32, %in_1: f32, %out: f32):
    %var = arith.divf %in_1, %n : f32
    %r = math.rsqrt %var : f32
    %m = arith.mulf %in, %r : f32
    linalg.yield %m : f32
  } -> tensor<2x16x32xf32>
  %cw = linalg.generic {indexing_maps = [#id, #last, #id], iterator_types = ["parallel", "parallel", "parallel"]} ins(%cn, %gamma : tensor<2x16x32xf32>, tensor<32xf32>) outs(%e0 : tensor<2x16x32xf32>) {
  ^bb0(%in: f32, %in_1: f32, %out: f32):
    %m = arith.mulf %in, %in_1 : f32
    linalg.yield %m : f32
  } -> tensor<2x16x32xf32>
  %cb = linalg.generic {indexing_maps = [#id, #id], iterator_types = ["parallel", "parallel", "parallel"]} ins(%cw : tensor<2x16x32xf32>) outs(%e0 : tensor<2x16x32xf32>) {
  ^bb0(%in: f32, %out: f32):
    %a = arith.addf %in, %n : f32
    linalg.yield %a : f32
  } -> tensor<2x16x32xf32>
  %r = linalg.generic {indexing_maps = [#id, #id, #id], iterator_types = ["parallel", "parallel", "parallel"]} ins(%x, %cb : tensor<2x16x32xf32>, tensor<2x16x32xf32>) outs(%e0 : tensor<2x16x32xf32>) {
  ^bb0(%in: f32, %in_1: f32, %out: f32):
    %a = arith.addf %in, %in_1 : f32
    linalg.yield %a : f32
  } -> tensor<2x16x32xf32>
  %e2 = tensor.empty() : tensor<2x16x64xf32>
  %f2 = linalg.fill ins(%cst : f32) outs(%e2 : tensor<2x16x64xf32>) -> tensor<2x16x64xf32>
  %u = linalg.generic {indexing_maps = [#bsh, #ho, #bso], iterator_types = ["parallel", "parallel", "parallel", "reduction"]} ins(%r, %up : tensor<2x16x32xf32>, tensor<32x64xf32>) outs(%f2 : tensor<2x16x64xf32>) {
  ^bb0(%in: f32, %in_1: f32, %out: f32):
    %m = arith.mulf %in, %in_1 : f32
    %a = arith.addf %out, %m : f32
    linalg.yield %a : f32
  } -> tensor<2x16x64xf32>
  %o = linalg.generic {indexing_maps = [#id, #id, #id], iterator_types = ["parallel", "parallel", "parallel"]} ins(%stream, %u : tensor<2x16x64xf32>, tensor<2x16x64xf32>) outs(%e2 : tensor<2x16x64xf32>) {
  ^bb0(%in: f32, %in_1: f32, %out: f32):
    %a = arith.addf %in, %in_1 : f32
    linalg.yield %a : f32
  } -> tensor<2x16x64xf32>
  return %o : tensor<2x16x64xf32>
}

// -----

// The same bottleneck read by a contraction (wk) whose 3 heads the 2
// devices do not divide (K heads that tp-pad-attention-heads and
// tp-repeat-kv-heads, before the plan, could neither pad nor repeat): it
// runs whole on these devices whatever its input, as the multi-query head
// above does, so w0 stays whole and w1, w2 make the block.
#bsh = affine_map<(d0, d1, d2, d3) -> (d0, d1, d3)>
#ho = affine_map<(d0, d1, d2, d3) -> (d3, d2)>
#bso = affine_map<(d0, d1, d2, d3) -> (d0, d1, d2)>
#id = affine_map<(d0, d1, d2) -> (d0, d1, d2)>
#last = affine_map<(d0, d1, d2) -> (d2)>
// CHECK-LABEL: func.func @bottleneck_then_uneven(
// CHECK-SAME: %arg1: tensor<64x32xf32> {tp.weight = "w0"}
// CHECK-SAME: tp.layout = #tp.layout<role = column, dim = 1, block = 0>, tp.weight = "w1"}
// CHECK-SAME: tp.layout = #tp.layout<role = row, dim = 0, block = 0>, tp.weight = "w2"}
// CHECK-SAME: %arg5: tensor<32x6xf32> {tp.weight = "wk"}
// CHECK: linalg.generic {{.*}}tp.replicated = "row-parallel partners of it that do not end a block start blocks of their own: they split as columns instead"
func.func @bottleneck_then_uneven(%x: tensor<2x16x64xf32> {tp.input = "x"}, %w0: tensor<64x32xf32> {tp.weight = "w0"}, %scale: tensor<32xf32> {tp.weight = "scale"}, %w1: tensor<32x128xf32> {tp.weight = "w1"}, %w2: tensor<128x64xf32> {tp.weight = "w2"}, %wk: tensor<32x6xf32> {tp.weight = "wk"}) -> (tensor<2x16x64xf32> {tp.output = "y"}, tensor<2x16x3x2xf32> {tp.output = "k"}) {
  %cst = arith.constant 0.000000e+00 : f32
  %e0 = tensor.empty() : tensor<2x16x32xf32>
  %f0 = linalg.fill ins(%cst : f32) outs(%e0 : tensor<2x16x32xf32>) -> tensor<2x16x32xf32>
  %b = linalg.generic {indexing_maps = [#bsh, #ho, #bso], iterator_types = ["parallel", "parallel", "parallel", "reduction"]} ins(%x, %w0 : tensor<2x16x64xf32>, tensor<64x32xf32>) outs(%f0 : tensor<2x16x32xf32>) {
  ^bb0(%in: f32, %in_1: f32, %out: f32):
    %m = arith.mulf %in, %in_1 : f32
    %a = arith.addf %out, %m : f32
    linalg.yield %a : f32
  } -> tensor<2x16x32xf32>
  %n = linalg.generic {indexing_maps = [#id, #last, #id], iterator_types = ["parallel", "parallel", "parallel"]} ins(%b, %scale : tensor<2x16x32xf32>, tensor<32xf32>) outs(%e0 : tensor<2x16x32xf32>) {
  ^bb0(%in: f32, %in_1: f32, %out: f32):
    %m = arith.mulf %in, %in_1 : f32
    linalg.yield %m : f32
  } -> tensor<2x16x32xf32>
  %e1 = tensor.empty() : tensor<2x16x128xf32>
  %f1 = linalg.fill ins(%cst : f32) outs(%e1 : tensor<2x16x128xf32>) -> tensor<2x16x128xf32>
  %h = linalg.generic {indexing_maps = [#bsh, #ho, #bso], iterator_types = ["parallel", "parallel", "parallel", "reduction"]} ins(%n, %w1 : tensor<2x16x32xf32>, tensor<32x128xf32>) outs(%f1 : tensor<2x16x128xf32>) {
  ^bb0(%in: f32, %in_1: f32, %out: f32):
    %m = arith.mulf %in, %in_1 : f32
    %a = arith.addf %out, %m : f32
    linalg.yield %a : f32
  } -> tensor<2x16x128xf32>
  %e2 = tensor.empty() : tensor<2x16x64xf32>
  %f2 = linalg.fill ins(%cst : f32) outs(%e2 : tensor<2x16x64xf32>) -> tensor<2x16x64xf32>
  %o = linalg.generic {indexing_maps = [#bsh, #ho, #bso], iterator_types = ["parallel", "parallel", "parallel", "reduction"]} ins(%h, %w2 : tensor<2x16x128xf32>, tensor<128x64xf32>) outs(%f2 : tensor<2x16x64xf32>) {
  ^bb0(%in: f32, %in_1: f32, %out: f32):
    %m = arith.mulf %in, %in_1 : f32
    %a = arith.addf %out, %m : f32
    linalg.yield %a : f32
  } -> tensor<2x16x64xf32>
  %r = linalg.generic {indexing_maps = [#id, #id, #id], iterator_types = ["parallel", "parallel", "parallel"]} ins(%x, %o : tensor<2x16x64xf32>, tensor<2x16x64xf32>) outs(%e2 : tensor<2x16x64xf32>) {
  ^bb0(%in: f32, %in_1: f32, %out: f32):
    %a = arith.addf %in, %in_1 : f32
    linalg.yield %a : f32
  } -> tensor<2x16x64xf32>
  %e3 = tensor.empty() : tensor<2x16x6xf32>
  %f3 = linalg.fill ins(%cst : f32) outs(%e3 : tensor<2x16x6xf32>) -> tensor<2x16x6xf32>
  %k = linalg.generic {indexing_maps = [#bsh, #ho, #bso], iterator_types = ["parallel", "parallel", "parallel", "reduction"]} ins(%n, %wk : tensor<2x16x32xf32>, tensor<32x6xf32>) outs(%f3 : tensor<2x16x6xf32>) {
  ^bb0(%in: f32, %in_1: f32, %out: f32):
    %m = arith.mulf %in, %in_1 : f32
    %a = arith.addf %out, %m : f32
    linalg.yield %a : f32
  } -> tensor<2x16x6xf32>
  %kh = tensor.expand_shape %k [[0], [1], [2, 3]] output_shape [2, 16, 3, 2] : tensor<2x16x6xf32> into tensor<2x16x3x2xf32>
  return %r, %kh : tensor<2x16x64xf32>, tensor<2x16x3x2xf32>
}
