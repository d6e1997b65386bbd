// RUN: tp-opt %s -split-input-file --tp-split-fused-projections | FileCheck %s

// A fused QKV projection (GPT-2's c_attn: [2,16,64] x [64,192], bias add,
// then Q, K, V cut out of the output dim) becomes one contraction per slice,
// each reading its slice of the weight and of the bias. The fused
// contraction, its bias add and their inits are gone.
#bsh = affine_map<(d0, d1, d2, d3) -> (d0, d1, d3)>
#ho = affine_map<(d0, d1, d2, d3) -> (d3, d2)>
#bso = affine_map<(d0, d1, d2, d3) -> (d0, d1, d2)>
#id = affine_map<(d0, d1, d2) -> (d0, d1, d2)>
#last = affine_map<(d0, d1, d2) -> (d2)>
// CHECK-LABEL: func.func @fused_qkv(
// CHECK-SAME: %[[X:[^:]*]]: tensor<2x16x64xf32> {tp.input = "x"}, %[[W:[^:]*]]: tensor<64x192xf32> {tp.weight = "c_attn.weight"}, %[[B:[^:]*]]: tensor<192xf32> {tp.weight = "c_attn.bias"})
// CHECK-NOT: tensor<2x16x192xf32>
// CHECK: %[[WQ:.*]] = tensor.extract_slice %[[W]][0, 0] [64, 64] [1, 1] : tensor<64x192xf32> to tensor<64x64xf32>
// CHECK: %[[Q:.*]] = linalg.generic {{.*}} ins(%[[X]], %[[WQ]] : tensor<2x16x64xf32>, tensor<64x64xf32>) outs(%{{.*}} : tensor<2x16x64xf32>)
// CHECK: %[[BQ:.*]] = tensor.extract_slice %[[B]][0] [64] [1] : tensor<192xf32> to tensor<64xf32>
// CHECK: %[[QB:.*]] = linalg.generic {{.*}} ins(%[[Q]], %[[BQ]] : tensor<2x16x64xf32>, tensor<64xf32>)
// CHECK: %[[WK:.*]] = tensor.extract_slice %[[W]][0, 64] [64, 64] [1, 1] : tensor<64x192xf32> to tensor<64x64xf32>
// CHECK: %[[K:.*]] = linalg.generic {{.*}} ins(%[[X]], %[[WK]] : tensor<2x16x64xf32>, tensor<64x64xf32>) outs(%{{.*}} : tensor<2x16x64xf32>)
// CHECK: %[[BK:.*]] = tensor.extract_slice %[[B]][64] [64] [1] : tensor<192xf32> to tensor<64xf32>
// CHECK: %[[KB:.*]] = linalg.generic {{.*}} ins(%[[K]], %[[BK]] : tensor<2x16x64xf32>, tensor<64xf32>)
// CHECK: %[[WV:.*]] = tensor.extract_slice %[[W]][0, 128] [64, 64] [1, 1] : tensor<64x192xf32> to tensor<64x64xf32>
// CHECK: %[[V:.*]] = linalg.generic {{.*}} ins(%[[X]], %[[WV]] : tensor<2x16x64xf32>, tensor<64x64xf32>) outs(%{{.*}} : tensor<2x16x64xf32>)
// CHECK: %[[BV:.*]] = tensor.extract_slice %[[B]][128] [64] [1] : tensor<192xf32> to tensor<64xf32>
// CHECK: %[[VB:.*]] = linalg.generic {{.*}} ins(%[[V]], %[[BV]] : tensor<2x16x64xf32>, tensor<64xf32>)
// CHECK-NOT: tensor<2x16x192xf32>
// CHECK: return %[[QB]], %[[KB]], %[[VB]]
func.func @fused_qkv(%arg0: tensor<2x16x64xf32> {tp.input = "x"}, %arg1: tensor<64x192xf32> {tp.weight = "c_attn.weight"}, %arg2: tensor<192xf32> {tp.weight = "c_attn.bias"}) -> (tensor<2x16x64xf32>, tensor<2x16x64xf32>, tensor<2x16x64xf32>) {
  %cst = arith.constant 0.000000e+00 : f32
  %0 = tensor.empty() : tensor<2x16x192xf32>
  %1 = linalg.fill ins(%cst : f32) outs(%0 : tensor<2x16x192xf32>) -> tensor<2x16x192xf32>
  %2 = linalg.generic {indexing_maps = [#bsh, #ho, #bso], iterator_types = ["parallel", "parallel", "parallel", "reduction"]} ins(%arg0, %arg1 : tensor<2x16x64xf32>, tensor<64x192xf32>) outs(%1 : tensor<2x16x192xf32>) {
  ^bb0(%in: f32, %in_0: f32, %out: f32):
    %m = arith.mulf %in, %in_0 : f32
    %a = arith.addf %out, %m : f32
    linalg.yield %a : f32
  } -> tensor<2x16x192xf32>
  %3 = tensor.empty() : tensor<2x16x192xf32>
  %4 = linalg.generic {indexing_maps = [#id, #last, #id], iterator_types = ["parallel", "parallel", "parallel"]} ins(%2, %arg2 : tensor<2x16x192xf32>, tensor<192xf32>) outs(%3 : tensor<2x16x192xf32>) {
  ^bb0(%in: f32, %in_0: f32, %out: f32):
    %a = arith.addf %in, %in_0 : f32
    linalg.yield %a : f32
  } -> tensor<2x16x192xf32>
  %q = tensor.extract_slice %4[0, 0, 0] [2, 16, 64] [1, 1, 1] : tensor<2x16x192xf32> to tensor<2x16x64xf32>
  %k = tensor.extract_slice %4[0, 0, 64] [2, 16, 64] [1, 1, 1] : tensor<2x16x192xf32> to tensor<2x16x64xf32>
  %v = tensor.extract_slice %4[0, 0, 128] [2, 16, 64] [1, 1, 1] : tensor<2x16x192xf32> to tensor<2x16x64xf32>
  return %q, %k, %v : tensor<2x16x64xf32>, tensor<2x16x64xf32>, tensor<2x16x64xf32>
}

// -----

// One user of the fused output is not a slice (the whole value is also
// returned): the projection is left fused.
#bsh = affine_map<(d0, d1, d2, d3) -> (d0, d1, d3)>
#ho = affine_map<(d0, d1, d2, d3) -> (d3, d2)>
#bso = affine_map<(d0, d1, d2, d3) -> (d0, d1, d2)>
#id = affine_map<(d0, d1, d2) -> (d0, d1, d2)>
#last = affine_map<(d0, d1, d2) -> (d2)>
// CHECK-LABEL: func.func @negative_user_not_a_slice(
// CHECK: %[[P:.*]] = linalg.generic {{.*}} ins(%{{.*}}, %arg1 : tensor<2x16x64xf32>, tensor<64x192xf32>) outs(%{{.*}} : tensor<2x16x192xf32>)
// CHECK: %[[PB:.*]] = linalg.generic {{.*}} ins(%[[P]], %arg2 : tensor<2x16x192xf32>, tensor<192xf32>)
// CHECK: tensor.extract_slice %[[PB]][0, 0, 0] [2, 16, 64]
// CHECK: tensor.extract_slice %[[PB]][0, 0, 64] [2, 16, 64]
// CHECK: tensor.extract_slice %[[PB]][0, 0, 128] [2, 16, 64]
// CHECK-NOT: tensor.extract_slice %arg1
func.func @negative_user_not_a_slice(%arg0: tensor<2x16x64xf32> {tp.input = "x"}, %arg1: tensor<64x192xf32> {tp.weight = "c_attn.weight"}, %arg2: tensor<192xf32> {tp.weight = "c_attn.bias"}) -> (tensor<2x16x64xf32>, tensor<2x16x64xf32>, tensor<2x16x64xf32>, tensor<2x16x192xf32>) {
  %cst = arith.constant 0.000000e+00 : f32
  %0 = tensor.empty() : tensor<2x16x192xf32>
  %1 = linalg.fill ins(%cst : f32) outs(%0 : tensor<2x16x192xf32>) -> tensor<2x16x192xf32>
  %2 = linalg.generic {indexing_maps = [#bsh, #ho, #bso], iterator_types = ["parallel", "parallel", "parallel", "reduction"]} ins(%arg0, %arg1 : tensor<2x16x64xf32>, tensor<64x192xf32>) outs(%1 : tensor<2x16x192xf32>) {
  ^bb0(%in: f32, %in_0: f32, %out: f32):
    %m = arith.mulf %in, %in_0 : f32
    %a = arith.addf %out, %m : f32
    linalg.yield %a : f32
  } -> tensor<2x16x192xf32>
  %3 = tensor.empty() : tensor<2x16x192xf32>
  %4 = linalg.generic {indexing_maps = [#id, #last, #id], iterator_types = ["parallel", "parallel", "parallel"]} ins(%2, %arg2 : tensor<2x16x192xf32>, tensor<192xf32>) outs(%3 : tensor<2x16x192xf32>) {
  ^bb0(%in: f32, %in_0: f32, %out: f32):
    %a = arith.addf %in, %in_0 : f32
    linalg.yield %a : f32
  } -> tensor<2x16x192xf32>
  %q = tensor.extract_slice %4[0, 0, 0] [2, 16, 64] [1, 1, 1] : tensor<2x16x192xf32> to tensor<2x16x64xf32>
  %k = tensor.extract_slice %4[0, 0, 64] [2, 16, 64] [1, 1, 1] : tensor<2x16x192xf32> to tensor<2x16x64xf32>
  %v = tensor.extract_slice %4[0, 0, 128] [2, 16, 64] [1, 1, 1] : tensor<2x16x192xf32> to tensor<2x16x64xf32>
  return %q, %k, %v, %4 : tensor<2x16x64xf32>, tensor<2x16x64xf32>, tensor<2x16x64xf32>, tensor<2x16x192xf32>
}

// -----

// The slices cut the sequence dim, not the output dim: nothing to split.
#bsh = affine_map<(d0, d1, d2, d3) -> (d0, d1, d3)>
#ho = affine_map<(d0, d1, d2, d3) -> (d3, d2)>
#bso = affine_map<(d0, d1, d2, d3) -> (d0, d1, d2)>
#id = affine_map<(d0, d1, d2) -> (d0, d1, d2)>
#last = affine_map<(d0, d1, d2) -> (d2)>
// CHECK-LABEL: func.func @negative_slices_other_dim(
// CHECK: %[[P:.*]] = linalg.generic {{.*}} ins(%{{.*}}, %arg1 : tensor<2x16x64xf32>, tensor<64x192xf32>) outs(%{{.*}} : tensor<2x16x192xf32>)
// CHECK-NOT: tensor.extract_slice %arg1
// CHECK: tensor.extract_slice %{{.*}}[0, 0, 0] [2, 8, 192]
// CHECK: tensor.extract_slice %{{.*}}[0, 8, 0] [2, 8, 192]
func.func @negative_slices_other_dim(%arg0: tensor<2x16x64xf32> {tp.input = "x"}, %arg1: tensor<64x192xf32> {tp.weight = "c_attn.weight"}, %arg2: tensor<192xf32> {tp.weight = "c_attn.bias"}) -> (tensor<2x8x192xf32>, tensor<2x8x192xf32>) {
  %cst = arith.constant 0.000000e+00 : f32
  %0 = tensor.empty() : tensor<2x16x192xf32>
  %1 = linalg.fill ins(%cst : f32) outs(%0 : tensor<2x16x192xf32>) -> tensor<2x16x192xf32>
  %2 = linalg.generic {indexing_maps = [#bsh, #ho, #bso], iterator_types = ["parallel", "parallel", "parallel", "reduction"]} ins(%arg0, %arg1 : tensor<2x16x64xf32>, tensor<64x192xf32>) outs(%1 : tensor<2x16x192xf32>) {
  ^bb0(%in: f32, %in_0: f32, %out: f32):
    %m = arith.mulf %in, %in_0 : f32
    %a = arith.addf %out, %m : f32
    linalg.yield %a : f32
  } -> tensor<2x16x192xf32>
  %3 = tensor.empty() : tensor<2x16x192xf32>
  %4 = linalg.generic {indexing_maps = [#id, #last, #id], iterator_types = ["parallel", "parallel", "parallel"]} ins(%2, %arg2 : tensor<2x16x192xf32>, tensor<192xf32>) outs(%3 : tensor<2x16x192xf32>) {
  ^bb0(%in: f32, %in_0: f32, %out: f32):
    %a = arith.addf %in, %in_0 : f32
    linalg.yield %a : f32
  } -> tensor<2x16x192xf32>
  %s0 = tensor.extract_slice %4[0, 0, 0] [2, 8, 192] [1, 1, 1] : tensor<2x16x192xf32> to tensor<2x8x192xf32>
  %s1 = tensor.extract_slice %4[0, 8, 0] [2, 8, 192] [1, 1, 1] : tensor<2x16x192xf32> to tensor<2x8x192xf32>
  return %s0, %s1 : tensor<2x8x192xf32>, tensor<2x8x192xf32>
}

// -----

// Falcon-7B's multi-query layout: one projection for 4 query heads and one
// K and one V head, viewed as [b, s, 4 + 2, d] and cut on the heads dim
// after the view. Each piece is a contiguous run of the output columns: it
// becomes its own contraction, viewed as the slice was.
#bsh = affine_map<(d0, d1, d2, d3) -> (d0, d1, d3)>
#ho = affine_map<(d0, d1, d2, d3) -> (d3, d2)>
#bso = affine_map<(d0, d1, d2, d3) -> (d0, d1, d2)>
// CHECK-LABEL: func.func @heads_view_kv_tail(
// CHECK-NOT: tensor<2x3x6x4xf32>
// CHECK: %[[WQ:.*]] = tensor.extract_slice %arg1[0, 0] [8, 16] [1, 1] : tensor<8x24xf32> to tensor<8x16xf32>
// CHECK: %[[Q:.*]] = linalg.generic {{.*}} ins(%arg0, %[[WQ]] : tensor<2x3x8xf32>, tensor<8x16xf32>)
// CHECK: %[[QV:.*]] = tensor.expand_shape %[[Q]] {{\[}}[0], [1], [2, 3]] output_shape [2, 3, 4, 4] : tensor<2x3x16xf32> into tensor<2x3x4x4xf32>
// CHECK: %[[WK:.*]] = tensor.extract_slice %arg1[0, 16] [8, 4] [1, 1] : tensor<8x24xf32> to tensor<8x4xf32>
// CHECK: %[[K:.*]] = linalg.generic {{.*}} ins(%arg0, %[[WK]] : tensor<2x3x8xf32>, tensor<8x4xf32>)
// CHECK: %[[KV:.*]] = tensor.expand_shape %[[K]] {{.*}} : tensor<2x3x4xf32> into tensor<2x3x1x4xf32>
// CHECK: %[[WV:.*]] = tensor.extract_slice %arg1[0, 20] [8, 4] [1, 1] : tensor<8x24xf32> to tensor<8x4xf32>
// CHECK: return %[[QV]], %[[KV]], %{{.*}}
func.func @heads_view_kv_tail(%x: tensor<2x3x8xf32> {tp.input = "x"}, %w: tensor<8x24xf32> {tp.weight = "qkv.weight"}) -> (tensor<2x3x4x4xf32>, tensor<2x3x1x4xf32>, tensor<2x3x1x4xf32>) {
  %cst = arith.constant 0.000000e+00 : f32
  %0 = tensor.empty() : tensor<2x3x24xf32>
  %1 = linalg.fill ins(%cst : f32) outs(%0 : tensor<2x3x24xf32>) -> tensor<2x3x24xf32>
  %2 = linalg.generic {indexing_maps = [#bsh, #ho, #bso], iterator_types = ["parallel", "parallel", "parallel", "reduction"]} ins(%x, %w : tensor<2x3x8xf32>, tensor<8x24xf32>) outs(%1 : tensor<2x3x24xf32>) {
  ^bb0(%in: f32, %in_0: f32, %out: f32):
    %m = arith.mulf %in, %in_0 : f32
    %a = arith.addf %out, %m : f32
    linalg.yield %a : f32
  } -> tensor<2x3x24xf32>
  %view = tensor.expand_shape %2 [[0], [1], [2, 3]] output_shape [2, 3, 6, 4] : tensor<2x3x24xf32> into tensor<2x3x6x4xf32>
  %q = tensor.extract_slice %view[0, 0, 0, 0] [2, 3, 4, 4] [1, 1, 1, 1] : tensor<2x3x6x4xf32> to tensor<2x3x4x4xf32>
  %k = tensor.extract_slice %view[0, 0, 4, 0] [2, 3, 1, 4] [1, 1, 1, 1] : tensor<2x3x6x4xf32> to tensor<2x3x1x4xf32>
  %v = tensor.extract_slice %view[0, 0, 5, 0] [2, 3, 1, 4] [1, 1, 1, 1] : tensor<2x3x6x4xf32> to tensor<2x3x1x4xf32>
  return %q, %k, %v : tensor<2x3x4x4xf32>, tensor<2x3x1x4xf32>, tensor<2x3x1x4xf32>
}

// -----

// Cut on the inner dim of a view ([b, s, 2 groups, 3, d]) with more than one
// group: each piece is strided in the output columns, so the projection
// stays fused.
#bsh = affine_map<(d0, d1, d2, d3) -> (d0, d1, d3)>
#ho = affine_map<(d0, d1, d2, d3) -> (d3, d2)>
#bso = affine_map<(d0, d1, d2, d3) -> (d0, d1, d2)>
// CHECK-LABEL: func.func @negative_heads_view_per_group(
// CHECK: tensor.expand_shape {{.*}} into tensor<2x3x2x3x4xf32>
func.func @negative_heads_view_per_group(%x: tensor<2x3x8xf32> {tp.input = "x"}, %w: tensor<8x24xf32> {tp.weight = "qkv.weight"}) -> (tensor<2x3x2x1x4xf32>, tensor<2x3x2x2x4xf32>) {
  %cst = arith.constant 0.000000e+00 : f32
  %0 = tensor.empty() : tensor<2x3x24xf32>
  %1 = linalg.fill ins(%cst : f32) outs(%0 : tensor<2x3x24xf32>) -> tensor<2x3x24xf32>
  %2 = linalg.generic {indexing_maps = [#bsh, #ho, #bso], iterator_types = ["parallel", "parallel", "parallel", "reduction"]} ins(%x, %w : tensor<2x3x8xf32>, tensor<8x24xf32>) outs(%1 : tensor<2x3x24xf32>) {
  ^bb0(%in: f32, %in_0: f32, %out: f32):
    %m = arith.mulf %in, %in_0 : f32
    %a = arith.addf %out, %m : f32
    linalg.yield %a : f32
  } -> tensor<2x3x24xf32>
  %view = tensor.expand_shape %2 [[0], [1], [2, 3, 4]] output_shape [2, 3, 2, 3, 4] : tensor<2x3x24xf32> into tensor<2x3x2x3x4xf32>
  %a = tensor.extract_slice %view[0, 0, 0, 0, 0] [2, 3, 2, 1, 4] [1, 1, 1, 1, 1] : tensor<2x3x2x3x4xf32> to tensor<2x3x2x1x4xf32>
  %b = tensor.extract_slice %view[0, 0, 0, 1, 0] [2, 3, 2, 2, 4] [1, 1, 1, 1, 1] : tensor<2x3x2x3x4xf32> to tensor<2x3x2x2x4xf32>
  return %a, %b : tensor<2x3x2x1x4xf32>, tensor<2x3x2x2x4xf32>
}
