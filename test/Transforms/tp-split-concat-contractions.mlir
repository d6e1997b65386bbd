// RUN: tp-opt %s --tp-split-concat-contractions --split-input-file | FileCheck %s

#x3 = affine_map<(d0, d1, d2) -> (d0, d2)>
#w3 = affine_map<(d0, d1, d2) -> (d2, d1)>
#o3 = affine_map<(d0, d1, d2) -> (d0, d1)>

// Two branches' heads ([2, 16] and [1, 16] per token) concatenated, viewed
// as [tokens, 48] and projected by one [48, 8] weight: one contraction per
// branch, each with its rows of the weight, and their sum.
// CHECK-LABEL: func.func @heads_through_view(
// CHECK-SAME: %[[A:[^:]*]]: tensor<4x2x16xf32>, %[[B:[^:]*]]: tensor<4x1x16xf32>, %[[W:[^:]*]]: tensor<48x8xf32>
// CHECK-NOT: tensor.concat
// CHECK: %[[VA:.*]] = tensor.collapse_shape %[[A]] {{\[}}[0], [1, 2]] : tensor<4x2x16xf32> into tensor<4x32xf32>
// CHECK: %[[WA:.*]] = tensor.extract_slice %[[W]][0, 0] [32, 8] [1, 1]
// CHECK: %[[PA:.*]] = linalg.generic {{.*}} ins(%[[VA]], %[[WA]] : tensor<4x32xf32>, tensor<32x8xf32>)
// CHECK: %[[VB:.*]] = tensor.collapse_shape %[[B]] {{\[}}[0], [1, 2]] : tensor<4x1x16xf32> into tensor<4x16xf32>
// CHECK: %[[WB:.*]] = tensor.extract_slice %[[W]][32, 0] [16, 8] [1, 1]
// CHECK: %[[PB:.*]] = linalg.generic {{.*}} ins(%[[VB]], %[[WB]] : tensor<4x16xf32>, tensor<16x8xf32>)
// CHECK: %[[SUM:.*]] = linalg.generic {{.*}} ins(%[[PA]], %[[PB]] : tensor<4x8xf32>, tensor<4x8xf32>)
// CHECK: arith.addf
// CHECK: return %[[SUM]]
func.func @heads_through_view(%a: tensor<4x2x16xf32>, %b: tensor<4x1x16xf32>,
                              %w: tensor<48x8xf32> {tp.weight = "w"}) -> tensor<4x8xf32> {
  %cat = tensor.concat dim(1) %a, %b : (tensor<4x2x16xf32>, tensor<4x1x16xf32>) -> tensor<4x3x16xf32>
  %x = tensor.collapse_shape %cat [[0], [1, 2]] : tensor<4x3x16xf32> into tensor<4x48xf32>
  %zero = arith.constant 0.0 : f32
  %e = tensor.empty() : tensor<4x8xf32>
  %init = linalg.fill ins(%zero : f32) outs(%e : tensor<4x8xf32>) -> tensor<4x8xf32>
  %y = linalg.generic {indexing_maps = [#x3, #w3, #o3], iterator_types = ["parallel", "parallel", "reduction"]}
      ins(%x, %w : tensor<4x48xf32>, tensor<48x8xf32>) outs(%init : tensor<4x8xf32>) {
  ^bb0(%in: f32, %in_w: f32, %out: f32):
    %m = arith.mulf %in, %in_w : f32
    %s = arith.addf %out, %m : f32
    linalg.yield %s : f32
  } -> tensor<4x8xf32>
  return %y : tensor<4x8xf32>
}

// -----

#x3 = affine_map<(d0, d1, d2) -> (d0, d2)>
#w3 = affine_map<(d0, d1, d2) -> (d2, d1)>
#o3 = affine_map<(d0, d1, d2) -> (d0, d1)>

// Three pieces concatenated along the contracted dim itself.
// CHECK-LABEL: func.func @direct(
// CHECK-NOT: tensor.concat
// CHECK-COUNT-3: tensor.extract_slice
// CHECK-NOT: tensor.extract_slice
func.func @direct(%a: tensor<4x8xf32>, %b: tensor<4x8xf32>, %c: tensor<4x16xf32>,
                  %w: tensor<32x8xf32> {tp.weight = "w"}) -> tensor<4x8xf32> {
  %x = tensor.concat dim(1) %a, %b, %c : (tensor<4x8xf32>, tensor<4x8xf32>, tensor<4x16xf32>) -> tensor<4x32xf32>
  %zero = arith.constant 0.0 : f32
  %e = tensor.empty() : tensor<4x8xf32>
  %init = linalg.fill ins(%zero : f32) outs(%e : tensor<4x8xf32>) -> tensor<4x8xf32>
  %y = linalg.generic {indexing_maps = [#x3, #w3, #o3], iterator_types = ["parallel", "parallel", "reduction"]}
      ins(%x, %w : tensor<4x32xf32>, tensor<32x8xf32>) outs(%init : tensor<4x8xf32>) {
  ^bb0(%in: f32, %in_w: f32, %out: f32):
    %m = arith.mulf %in, %in_w : f32
    %s = arith.addf %out, %m : f32
    linalg.yield %s : f32
  } -> tensor<4x8xf32>
  return %y : tensor<4x8xf32>
}

// -----

#x3 = affine_map<(d0, d1, d2) -> (d0, d2)>
#w3 = affine_map<(d0, d1, d2) -> (d2, d1)>
#o3 = affine_map<(d0, d1, d2) -> (d0, d1)>

// Left alone: a concatenation along a dim that is not contracted (tokens),
// one that something else reads too, and one merged inside the contracted
// dim (its pieces would interleave with the weight's rows).
// CHECK-LABEL: func.func @negative(
// CHECK-COUNT-3: tensor.concat
func.func @negative(%a: tensor<2x8xf32>, %b: tensor<2x8xf32>,
                    %p: tensor<4x2x8xf32>, %q: tensor<4x2x8xf32>,
                    %w: tensor<8x8xf32> {tp.weight = "w"},
                    %w2: tensor<16x8xf32> {tp.weight = "w2"},
                    %w3: tensor<32x8xf32> {tp.weight = "w3"})
    -> (tensor<4x8xf32>, tensor<4x8xf32>, tensor<4x16xf32>, tensor<4x8xf32>) {
  %zero = arith.constant 0.0 : f32
  %tokens = tensor.concat dim(0) %a, %b : (tensor<2x8xf32>, tensor<2x8xf32>) -> tensor<4x8xf32>
  %e0 = tensor.empty() : tensor<4x8xf32>
  %i0 = linalg.fill ins(%zero : f32) outs(%e0 : tensor<4x8xf32>) -> tensor<4x8xf32>
  %y0 = linalg.generic {indexing_maps = [#x3, #w3, #o3], iterator_types = ["parallel", "parallel", "reduction"]}
      ins(%tokens, %w : tensor<4x8xf32>, tensor<8x8xf32>) outs(%i0 : tensor<4x8xf32>) {
  ^bb0(%in: f32, %in_w: f32, %out: f32):
    %m = arith.mulf %in, %in_w : f32
    %s = arith.addf %out, %m : f32
    linalg.yield %s : f32
  } -> tensor<4x8xf32>
  %ab = tensor.concat dim(0) %a, %b : (tensor<2x8xf32>, tensor<2x8xf32>) -> tensor<4x8xf32>
  %shared = tensor.collapse_shape %ab [[0, 1]] : tensor<4x8xf32> into tensor<32xf32>
  %wide = tensor.expand_shape %shared [[0, 1]] output_shape [4, 8] : tensor<32xf32> into tensor<4x8xf32>
  %x1 = tensor.concat dim(1) %wide, %wide : (tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<4x16xf32>
  %e1 = tensor.empty() : tensor<4x8xf32>
  %i1 = linalg.fill ins(%zero : f32) outs(%e1 : tensor<4x8xf32>) -> tensor<4x8xf32>
  %y1 = linalg.generic {indexing_maps = [#x3, #w3, #o3], iterator_types = ["parallel", "parallel", "reduction"]}
      ins(%x1, %w2 : tensor<4x16xf32>, tensor<16x8xf32>) outs(%i1 : tensor<4x8xf32>) {
  ^bb0(%in: f32, %in_w: f32, %out: f32):
    %m = arith.mulf %in, %in_w : f32
    %s = arith.addf %out, %m : f32
    linalg.yield %s : f32
  } -> tensor<4x8xf32>
  %inner = tensor.concat dim(2) %p, %q : (tensor<4x2x8xf32>, tensor<4x2x8xf32>) -> tensor<4x2x16xf32>
  %x2 = tensor.collapse_shape %inner [[0], [1, 2]] : tensor<4x2x16xf32> into tensor<4x32xf32>
  %e2 = tensor.empty() : tensor<4x8xf32>
  %i2 = linalg.fill ins(%zero : f32) outs(%e2 : tensor<4x8xf32>) -> tensor<4x8xf32>
  %y2 = linalg.generic {indexing_maps = [#x3, #w3, #o3], iterator_types = ["parallel", "parallel", "reduction"]}
      ins(%x2, %w3 : tensor<4x32xf32>, tensor<32x8xf32>) outs(%i2 : tensor<4x8xf32>) {
  ^bb0(%in: f32, %in_w: f32, %out: f32):
    %m = arith.mulf %in, %in_w : f32
    %s = arith.addf %out, %m : f32
    linalg.yield %s : f32
  } -> tensor<4x8xf32>
  return %y0, %y1, %x1, %y2 : tensor<4x8xf32>, tensor<4x8xf32>, tensor<4x16xf32>, tensor<4x8xf32>
}
