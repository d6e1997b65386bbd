// Tensor-parallel attention block in the ONNX importer's form: column-parallel
// Q/K/V, row-parallel output projection. The head split must travel through
// the [B,S,H*D] <-> [B,S,H,D] reshapes without communication, leaving the
// out-projection all-reduce as the only collective. Softmax keeps the
// reduction as keepdims (expand_shape) and feeds the broadcasting generics
// through a collapse_shape: upstream's linalg model cannot shard the
// importer's constant broadcast maps like (d0, d1, d2, 0).
//
// RUN: tp-opt %s --pass-pipeline='builtin.module(func.func(sharding-propagation,shard-partition,canonicalize))' 2>&1 | FileCheck %s --check-prefix=TP2
// RUN: sed 's/@grid(shape = 2)/@grid(shape = 4)/' %s | tp-opt --pass-pipeline='builtin.module(func.func(sharding-propagation,shard-partition,canonicalize))' 2>&1 | FileCheck %s --check-prefix=TP4
// 4 heads do not split over 8 devices: the heads stay whole and Q/K/V are
// gathered before the reshape instead.
// RUN: sed 's/@grid(shape = 2)/@grid(shape = 8)/' %s | tp-opt --pass-pipeline='builtin.module(func.func(sharding-propagation,shard-partition,canonicalize))' 2>&1 | FileCheck %s --check-prefix=TP8

// TP2-NOT: warning
// TP2-LABEL: func.func @attention(
// TP2-SAME: %{{.*}}: tensor<2x16x64xf32>, %{{.*}}: tensor<64x32xf32>, %{{.*}}: tensor<64x32xf32>, %{{.*}}: tensor<64x32xf32>, %{{.*}}: tensor<32x64xf32>)
// TP2-NOT: shard.all_gather
// TP2-NOT: shard.all_reduce
// TP2-NOT: shard.all_to_all
// TP2-NOT: shard.all_slice
// TP2-COUNT-3: tensor.expand_shape {{.*}} output_shape [2, 16, 2, 16] : tensor<2x16x32xf32> into tensor<2x16x2x16xf32>
// TP2: } -> tensor<2x2x16x16xf32>
// TP2: math.exp
// TP2: tensor.collapse_shape {{.*}} : tensor<2x16x2x16xf32> into tensor<2x16x32xf32>
// TP2-NOT: shard.all_gather
// TP2: shard.all_reduce {{.*}} on @grid grid_axes = [0] : tensor<2x16x64xf32> -> tensor<2x16x64xf32>
// TP2-NOT: shard.all
// TP2: return

// TP4-NOT: warning
// TP4-LABEL: func.func @attention(
// TP4-SAME: %{{.*}}: tensor<2x16x64xf32>, %{{.*}}: tensor<64x16xf32>, %{{.*}}: tensor<64x16xf32>, %{{.*}}: tensor<64x16xf32>, %{{.*}}: tensor<16x64xf32>)
// TP4-NOT: shard.all
// TP4-COUNT-3: tensor.expand_shape {{.*}} output_shape [2, 16, 1, 16] : tensor<2x16x16xf32> into tensor<2x16x1x16xf32>
// TP4: } -> tensor<2x1x16x16xf32>
// TP4: tensor.collapse_shape {{.*}} : tensor<2x16x1x16xf32> into tensor<2x16x16xf32>
// TP4-NOT: shard.all_gather
// TP4: shard.all_reduce {{.*}} : tensor<2x16x64xf32> -> tensor<2x16x64xf32>
// TP4-NOT: shard.all
// TP4: return

// TP8: warning: split of source dim 2 (size 4) on grid axes [0] cannot pass through this reshape; the value is replicated around it
// TP8-LABEL: func.func @attention(
// TP8-SAME: tensor<64x8xf32>
// TP8-COUNT-3: shard.all_gather {{.*}} gather_axis = 2 : tensor<2x16x8xf32> -> tensor<2x16x64xf32>
// TP8: tensor.expand_shape {{.*}} : tensor<2x16x64xf32> into tensor<2x16x4x16xf32>
// TP8: tensor.collapse_shape {{.*}} : tensor<2x16x4x16xf32> into tensor<2x16x64xf32>
// TP8: shard.all_slice {{.*}} slice_axis = 2 : tensor<2x16x64xf32> -> tensor<2x16x8xf32>
// TP8: shard.all_reduce {{.*}} : tensor<2x16x64xf32> -> tensor<2x16x64xf32>
// TP8-NOT: shard.all
// TP8: return

#map = affine_map<(d0, d1, d2, d3) -> (d0, d1, d3)>
#map1 = affine_map<(d0, d1, d2, d3) -> (d3, d2)>
#map2 = affine_map<(d0, d1, d2, d3) -> (d0, d1, d2)>
#map3 = affine_map<(d0, d1, d2, d3, d4) -> (d0, d1, d2, d4)>
#map4 = affine_map<(d0, d1, d2, d3, d4) -> (d0, d1, d4, d3)>
#map5 = affine_map<(d0, d1, d2, d3, d4) -> (d0, d1, d2, d3)>
#map6 = affine_map<(d0, d1, d2, d3) -> (d0, d1, d2, d3)>
module {
  shard.grid @grid(shape = 2)
  func.func @attention(%arg0: tensor<2x16x64xf32>, %arg1: tensor<64x64xf32>, %arg2: tensor<64x64xf32>, %arg3: tensor<64x64xf32>, %arg4: tensor<64x64xf32>) -> (tensor<2x16x64xf32>) {
    %s_col = shard.sharding @grid split_axes = [[], [0]] : !shard.sharding
    %s_row = shard.sharding @grid split_axes = [[0]] : !shard.sharding
    %s_rep = shard.sharding @grid split_axes = [[]] : !shard.sharding
    %x = shard.shard %arg0 to %s_rep annotate_for_users : tensor<2x16x64xf32>
    %wq = shard.shard %arg1 to %s_col annotate_for_users : tensor<64x64xf32>
    %wk = shard.shard %arg2 to %s_col annotate_for_users : tensor<64x64xf32>
    %wv = shard.shard %arg3 to %s_col annotate_for_users : tensor<64x64xf32>
    %wo = shard.shard %arg4 to %s_row annotate_for_users : tensor<64x64xf32>
    %0 = tensor.empty() : tensor<2x16x64xf32>
    %cst = arith.constant 0.000000e+00 : f32
    %1 = linalg.fill ins(%cst : f32) outs(%0 : tensor<2x16x64xf32>) -> tensor<2x16x64xf32>
    %2 = linalg.generic {indexing_maps = [#map, #map1, #map2], iterator_types = ["parallel", "parallel", "parallel", "reduction"]} ins(%x, %wq : tensor<2x16x64xf32>, tensor<64x64xf32>) outs(%1 : tensor<2x16x64xf32>) {
    ^bb0(%in: f32, %in_14: f32, %out: f32):
      %34 = arith.mulf %in, %in_14 : f32
      %35 = arith.addf %out, %34 : f32
      linalg.yield %35 : f32
    } -> tensor<2x16x64xf32>
    %3 = tensor.empty() : tensor<2x16x64xf32>
    %cst_0 = arith.constant 0.000000e+00 : f32
    %4 = linalg.fill ins(%cst_0 : f32) outs(%3 : tensor<2x16x64xf32>) -> tensor<2x16x64xf32>
    %5 = linalg.generic {indexing_maps = [#map, #map1, #map2], iterator_types = ["parallel", "parallel", "parallel", "reduction"]} ins(%x, %wk : tensor<2x16x64xf32>, tensor<64x64xf32>) outs(%4 : tensor<2x16x64xf32>) {
    ^bb0(%in: f32, %in_14: f32, %out: f32):
      %34 = arith.mulf %in, %in_14 : f32
      %35 = arith.addf %out, %34 : f32
      linalg.yield %35 : f32
    } -> tensor<2x16x64xf32>
    %6 = tensor.empty() : tensor<2x16x64xf32>
    %cst_1 = arith.constant 0.000000e+00 : f32
    %7 = linalg.fill ins(%cst_1 : f32) outs(%6 : tensor<2x16x64xf32>) -> tensor<2x16x64xf32>
    %8 = linalg.generic {indexing_maps = [#map, #map1, #map2], iterator_types = ["parallel", "parallel", "parallel", "reduction"]} ins(%x, %wv : tensor<2x16x64xf32>, tensor<64x64xf32>) outs(%7 : tensor<2x16x64xf32>) {
    ^bb0(%in: f32, %in_14: f32, %out: f32):
      %34 = arith.mulf %in, %in_14 : f32
      %35 = arith.addf %out, %34 : f32
      linalg.yield %35 : f32
    } -> tensor<2x16x64xf32>
    %expanded = tensor.expand_shape %2 [[0], [1], [2, 3]] output_shape [2, 16, 4, 16] : tensor<2x16x64xf32> into tensor<2x16x4x16xf32>
    %expanded_2 = tensor.expand_shape %5 [[0], [1], [2, 3]] output_shape [2, 16, 4, 16] : tensor<2x16x64xf32> into tensor<2x16x4x16xf32>
    %expanded_3 = tensor.expand_shape %8 [[0], [1], [2, 3]] output_shape [2, 16, 4, 16] : tensor<2x16x64xf32> into tensor<2x16x4x16xf32>
    %9 = tensor.empty() : tensor<2x4x16x16xf32>
    %transposed = linalg.transpose ins(%expanded : tensor<2x16x4x16xf32>) outs(%9 : tensor<2x4x16x16xf32>) permutation = [0, 2, 1, 3] 
    %10 = tensor.empty() : tensor<2x4x16x16xf32>
    %transposed_4 = linalg.transpose ins(%expanded_2 : tensor<2x16x4x16xf32>) outs(%10 : tensor<2x4x16x16xf32>) permutation = [0, 2, 3, 1] 
    %11 = tensor.empty() : tensor<2x4x16x16xf32>
    %transposed_5 = linalg.transpose ins(%expanded_3 : tensor<2x16x4x16xf32>) outs(%11 : tensor<2x4x16x16xf32>) permutation = [0, 2, 1, 3] 
    %12 = tensor.empty() : tensor<2x4x16x16xf32>
    %cst_6 = arith.constant 0.000000e+00 : f32
    %13 = linalg.fill ins(%cst_6 : f32) outs(%12 : tensor<2x4x16x16xf32>) -> tensor<2x4x16x16xf32>
    %14 = linalg.generic {indexing_maps = [#map3, #map4, #map5], iterator_types = ["parallel", "parallel", "parallel", "parallel", "reduction"]} ins(%transposed, %transposed_4 : tensor<2x4x16x16xf32>, tensor<2x4x16x16xf32>) outs(%13 : tensor<2x4x16x16xf32>) {
    ^bb0(%in: f32, %in_14: f32, %out: f32):
      %34 = arith.mulf %in, %in_14 : f32
      %35 = arith.addf %out, %34 : f32
      linalg.yield %35 : f32
    } -> tensor<2x4x16x16xf32>
    %15 = tensor.empty() : tensor<2x4x16xf32>
    %cst_7 = arith.constant 0xFF800000 : f32
    %16 = linalg.fill ins(%cst_7 : f32) outs(%15 : tensor<2x4x16xf32>) -> tensor<2x4x16xf32>
    %17 = linalg.generic {indexing_maps = [#map6, #map2], iterator_types = ["parallel", "parallel", "parallel", "reduction"]} ins(%14 : tensor<2x4x16x16xf32>) outs(%16 : tensor<2x4x16xf32>) {
    ^bb0(%in: f32, %out: f32):
      %34 = arith.maximumf %out, %in : f32
      linalg.yield %34 : f32
    } -> tensor<2x4x16xf32>
    %expanded_8 = tensor.expand_shape %17 [[0], [1], [2, 3]] output_shape [2, 4, 16, 1] : tensor<2x4x16xf32> into tensor<2x4x16x1xf32>
    %expanded_8_c = tensor.collapse_shape %expanded_8 [[0], [1], [2, 3]] : tensor<2x4x16x1xf32> into tensor<2x4x16xf32>
    %18 = tensor.empty() : tensor<2x4x16x16xf32>
    %19 = linalg.generic {indexing_maps = [#map6, #map2, #map6], iterator_types = ["parallel", "parallel", "parallel", "parallel"]} ins(%14, %expanded_8_c : tensor<2x4x16x16xf32>, tensor<2x4x16xf32>) outs(%18 : tensor<2x4x16x16xf32>) {
    ^bb0(%in: f32, %in_14: f32, %out: f32):
      %34 = arith.subf %in, %in_14 : f32
      linalg.yield %34 : f32
    } -> tensor<2x4x16x16xf32>
    %20 = tensor.empty() : tensor<2x4x16x16xf32>
    %21 = linalg.generic {indexing_maps = [#map6, #map6], iterator_types = ["parallel", "parallel", "parallel", "parallel"]} ins(%19 : tensor<2x4x16x16xf32>) outs(%20 : tensor<2x4x16x16xf32>) {
    ^bb0(%in: f32, %out: f32):
      %34 = math.exp %in : f32
      linalg.yield %34 : f32
    } -> tensor<2x4x16x16xf32>
    %22 = tensor.empty() : tensor<2x4x16xf32>
    %cst_9 = arith.constant 0.000000e+00 : f32
    %23 = linalg.fill ins(%cst_9 : f32) outs(%22 : tensor<2x4x16xf32>) -> tensor<2x4x16xf32>
    %24 = linalg.generic {indexing_maps = [#map6, #map2], iterator_types = ["parallel", "parallel", "parallel", "reduction"]} ins(%21 : tensor<2x4x16x16xf32>) outs(%23 : tensor<2x4x16xf32>) {
    ^bb0(%in: f32, %out: f32):
      %34 = arith.addf %out, %in : f32
      linalg.yield %34 : f32
    } -> tensor<2x4x16xf32>
    %expanded_10 = tensor.expand_shape %24 [[0], [1], [2, 3]] output_shape [2, 4, 16, 1] : tensor<2x4x16xf32> into tensor<2x4x16x1xf32>
    %expanded_10_c = tensor.collapse_shape %expanded_10 [[0], [1], [2, 3]] : tensor<2x4x16x1xf32> into tensor<2x4x16xf32>
    %25 = tensor.empty() : tensor<2x4x16x16xf32>
    %26 = linalg.generic {indexing_maps = [#map6, #map2, #map6], iterator_types = ["parallel", "parallel", "parallel", "parallel"]} ins(%21, %expanded_10_c : tensor<2x4x16x16xf32>, tensor<2x4x16xf32>) outs(%25 : tensor<2x4x16x16xf32>) {
    ^bb0(%in: f32, %in_14: f32, %out: f32):
      %34 = arith.divf %in, %in_14 : f32
      linalg.yield %34 : f32
    } -> tensor<2x4x16x16xf32>
    %27 = tensor.empty() : tensor<2x4x16x16xf32>
    %cst_11 = arith.constant 0.000000e+00 : f32
    %28 = linalg.fill ins(%cst_11 : f32) outs(%27 : tensor<2x4x16x16xf32>) -> tensor<2x4x16x16xf32>
    %29 = linalg.generic {indexing_maps = [#map3, #map4, #map5], iterator_types = ["parallel", "parallel", "parallel", "parallel", "reduction"]} ins(%26, %transposed_5 : tensor<2x4x16x16xf32>, tensor<2x4x16x16xf32>) outs(%28 : tensor<2x4x16x16xf32>) {
    ^bb0(%in: f32, %in_14: f32, %out: f32):
      %34 = arith.mulf %in, %in_14 : f32
      %35 = arith.addf %out, %34 : f32
      linalg.yield %35 : f32
    } -> tensor<2x4x16x16xf32>
    %30 = tensor.empty() : tensor<2x16x4x16xf32>
    %transposed_12 = linalg.transpose ins(%29 : tensor<2x4x16x16xf32>) outs(%30 : tensor<2x16x4x16xf32>) permutation = [0, 2, 1, 3] 
    %heads_merged = tensor.collapse_shape %transposed_12 [[0], [1], [2, 3]] : tensor<2x16x4x16xf32> into tensor<2x16x64xf32>
    %31 = tensor.empty() : tensor<2x16x64xf32>
    %cst_13 = arith.constant 0.000000e+00 : f32
    %32 = linalg.fill ins(%cst_13 : f32) outs(%31 : tensor<2x16x64xf32>) -> tensor<2x16x64xf32>
    %33 = linalg.generic {indexing_maps = [#map, #map1, #map2], iterator_types = ["parallel", "parallel", "parallel", "reduction"]} ins(%heads_merged, %wo : tensor<2x16x64xf32>, tensor<64x64xf32>) outs(%32 : tensor<2x16x64xf32>) {
    ^bb0(%in: f32, %in_14: f32, %out: f32):
      %34 = arith.mulf %in, %in_14 : f32
      %35 = arith.addf %out, %34 : f32
      linalg.yield %35 : f32
    } -> tensor<2x16x64xf32>
    return %33 : tensor<2x16x64xf32>
  }
}
