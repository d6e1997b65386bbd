// RUN: tp-opt %s --tp-split-fused-weights --split-input-file | FileCheck %s
// The pass's old name still runs it.
// RUN: tp-opt %s --tp-localize-fused-weights --split-input-file | FileCheck %s

// A fused [8, 12] weight read as three projections of 4 columns (and its
// bias as three pieces): each piece becomes its own argument, in place of
// the fused one, holding its range of the initializer.
// CHECK-LABEL: func.func @fused(
// CHECK-SAME: %[[X:[^:]*]]: tensor<2x8xf32> {tp.input = "x"},
// CHECK-SAME: %[[Q:[^:]*]]: tensor<8x4xf32> {tp.layout = #tp.layout<role = replicated, dim = 1, slice = [0, 4]>, tp.weight = "qkv"},
// CHECK-SAME: %[[K:[^:]*]]: tensor<8x4xf32> {tp.layout = #tp.layout<role = replicated, dim = 1, slice = [4, 4]>, tp.weight = "qkv"},
// CHECK-SAME: %[[V:[^:]*]]: tensor<8x4xf32> {tp.layout = #tp.layout<role = replicated, dim = 1, slice = [8, 4]>, tp.weight = "qkv"},
// CHECK-SAME: %[[BQ:[^:]*]]: tensor<4xf32> {tp.layout = #tp.layout<role = replicated, dim = 0, slice = [0, 4]>, tp.weight = "qkv.bias"},
// CHECK-SAME: %{{[^:]*}}: tensor<4xf32> {tp.layout = #tp.layout<role = replicated, dim = 0, slice = [4, 4]>, tp.weight = "qkv.bias"},
// CHECK-SAME: %[[BV:[^:]*]]: tensor<4xf32> {tp.layout = #tp.layout<role = replicated, dim = 0, slice = [8, 4]>, tp.weight = "qkv.bias"})
// CHECK-NOT: tensor.extract_slice
// CHECK: return %[[Q]], %[[K]], %[[V]], %[[BQ]], %[[BV]]
func.func @fused(%x: tensor<2x8xf32> {tp.input = "x"},
                 %w: tensor<8x12xf32> {tp.weight = "qkv"},
                 %b: tensor<12xf32> {tp.weight = "qkv.bias"})
    -> (tensor<8x4xf32>, tensor<8x4xf32>, tensor<8x4xf32>, tensor<4xf32>, tensor<4xf32>) {
  %q = tensor.extract_slice %w[0, 0] [8, 4] [1, 1] : tensor<8x12xf32> to tensor<8x4xf32>
  %k = tensor.extract_slice %w[0, 4] [8, 4] [1, 1] : tensor<8x12xf32> to tensor<8x4xf32>
  %v = tensor.extract_slice %w[0, 8] [8, 4] [1, 1] : tensor<8x12xf32> to tensor<8x4xf32>
  %bq = tensor.extract_slice %b[0] [4] [1] : tensor<12xf32> to tensor<4xf32>
  %bk = tensor.extract_slice %b[4] [4] [1] : tensor<12xf32> to tensor<4xf32>
  %bv = tensor.extract_slice %b[8] [4] [1] : tensor<12xf32> to tensor<4xf32>
  return %q, %k, %v, %bq, %bv : tensor<8x4xf32>, tensor<8x4xf32>, tensor<8x4xf32>, tensor<4xf32>, tensor<4xf32>
}

// -----

// Pieces of different sizes, along dim 0, read in any order, one of them
// twice: one argument per range, in offset order.
// CHECK-LABEL: func.func @uneven_pieces(
// CHECK-SAME: %[[A:[^:]*]]: tensor<2x8xf32> {tp.layout = #tp.layout<role = replicated, dim = 0, slice = [0, 2]>, tp.weight = "w"},
// CHECK-SAME: %[[B:[^:]*]]: tensor<4x8xf32> {tp.layout = #tp.layout<role = replicated, dim = 0, slice = [2, 4]>, tp.weight = "w"})
// CHECK: return %[[B]], %[[A]], %[[A]]
func.func @uneven_pieces(%w: tensor<6x8xf32> {tp.weight = "w"}) -> (tensor<4x8xf32>, tensor<2x8xf32>, tensor<2x8xf32>) {
  %b = tensor.extract_slice %w[2, 0] [4, 8] [1, 1] : tensor<6x8xf32> to tensor<4x8xf32>
  %a = tensor.extract_slice %w[0, 0] [2, 8] [1, 1] : tensor<6x8xf32> to tensor<2x8xf32>
  %a2 = tensor.extract_slice %w[0, 0] [2, 8] [1, 1] : tensor<6x8xf32> to tensor<2x8xf32>
  return %b, %a, %a2 : tensor<4x8xf32>, tensor<2x8xf32>, tensor<2x8xf32>
}

// -----

// Slices that do not tile the dim (a causal mask cut to the sequence; one
// piece beside a whole read), cut two dims or cut different dims leave the
// weight whole: every byte must have one place.
// CHECK-LABEL: func.func @negative(
// CHECK-SAME: tensor<8x12xf32> {tp.weight = "gap"}
// CHECK-SAME: tensor<8x12xf32> {tp.weight = "two_dims"}
// CHECK-SAME: tensor<8x12xf32> {tp.weight = "different_dims"}
// CHECK-SAME: tensor<8x12xf32> {tp.weight = "other_use"}
// CHECK-SAME: tensor<8x12xf32> {tp.layout = #tp.layout<role = column, dim = 1>, tp.weight = "planned"}
// CHECK-COUNT-10: tensor.extract_slice
func.func @negative(%gap: tensor<8x12xf32> {tp.weight = "gap"},
                    %two: tensor<8x12xf32> {tp.weight = "two_dims"},
                    %diff: tensor<8x12xf32> {tp.weight = "different_dims"},
                    %other: tensor<8x12xf32> {tp.weight = "other_use"},
                    %planned: tensor<8x12xf32> {tp.layout = #tp.layout<role = column, dim = 1>, tp.weight = "planned"})
    -> (tensor<8x4xf32>, tensor<8x4xf32>, tensor<4x12xf32>, tensor<4x6xf32>, tensor<4x6xf32>, tensor<8x4xf32>, tensor<4x12xf32>, tensor<8x6xf32>, tensor<8x12xf32>, tensor<8x6xf32>, tensor<8x6xf32>) {
  %g0 = tensor.extract_slice %gap[0, 0] [8, 4] [1, 1] : tensor<8x12xf32> to tensor<8x4xf32>
  %g1 = tensor.extract_slice %gap[0, 8] [8, 4] [1, 1] : tensor<8x12xf32> to tensor<8x4xf32>
  %t0 = tensor.extract_slice %two[0, 0] [4, 12] [1, 1] : tensor<8x12xf32> to tensor<4x12xf32>
  %t1 = tensor.extract_slice %two[4, 0] [4, 6] [1, 1] : tensor<8x12xf32> to tensor<4x6xf32>
  %t2 = tensor.extract_slice %two[4, 6] [4, 6] [1, 1] : tensor<8x12xf32> to tensor<4x6xf32>
  %d0 = tensor.extract_slice %diff[0, 0] [8, 4] [1, 1] : tensor<8x12xf32> to tensor<8x4xf32>
  %d1 = tensor.extract_slice %diff[4, 0] [4, 12] [1, 1] : tensor<8x12xf32> to tensor<4x12xf32>
  %o0 = tensor.extract_slice %other[0, 0] [8, 6] [1, 1] : tensor<8x12xf32> to tensor<8x6xf32>
  %p0 = tensor.extract_slice %planned[0, 0] [8, 6] [1, 1] : tensor<8x12xf32> to tensor<8x6xf32>
  %p1 = tensor.extract_slice %planned[0, 6] [8, 6] [1, 1] : tensor<8x12xf32> to tensor<8x6xf32>
  return %g0, %g1, %t0, %t1, %t2, %d0, %d1, %o0, %other, %p0, %p1 : tensor<8x4xf32>, tensor<8x4xf32>, tensor<4x12xf32>, tensor<4x6xf32>, tensor<4x6xf32>, tensor<8x4xf32>, tensor<4x12xf32>, tensor<8x6xf32>, tensor<8x12xf32>, tensor<8x6xf32>, tensor<8x6xf32>
}

// -----

// One initializer that the export shares between a fused projection's bias
// (read as three pieces) and another bias of its length (read whole): the
// pieces get their arguments and the whole read keeps the fused one, so
// the planner splits each with its own block.
// CHECK-LABEL: func.func @shared_with_whole_read(
// CHECK-SAME: %[[W:[^:]*]]: tensor<12xf32> {tp.weight = "zeros"},
// CHECK-SAME: %[[P0:[^:]*]]: tensor<4xf32> {tp.layout = #tp.layout<role = replicated, dim = 0, slice = [0, 4]>, tp.weight = "zeros"},
// CHECK-SAME: %{{[^:]*}}: tensor<4xf32> {tp.layout = #tp.layout<role = replicated, dim = 0, slice = [4, 4]>, tp.weight = "zeros"},
// CHECK-SAME: %[[P2:[^:]*]]: tensor<4xf32> {tp.layout = #tp.layout<role = replicated, dim = 0, slice = [8, 4]>, tp.weight = "zeros"})
// CHECK-NOT: tensor.extract_slice
// CHECK: return %[[P0]], %[[P2]], %[[W]]
func.func @shared_with_whole_read(%b: tensor<12xf32> {tp.weight = "zeros"})
    -> (tensor<4xf32>, tensor<4xf32>, tensor<12xf32>) {
  %bq = tensor.extract_slice %b[0] [4] [1] : tensor<12xf32> to tensor<4xf32>
  %bk = tensor.extract_slice %b[4] [4] [1] : tensor<12xf32> to tensor<4xf32>
  %bv = tensor.extract_slice %b[8] [4] [1] : tensor<12xf32> to tensor<4xf32>
  return %bq, %bv, %b : tensor<4xf32>, tensor<4xf32>, tensor<12xf32>
}

// -----

// Nothing to do without arguments or a body.
// CHECK-LABEL: func.func private @declaration(tensor<8x12xf32> {tp.weight = "w"})
// CHECK-LABEL: func.func @no_arguments()
func.func private @declaration(tensor<8x12xf32> {tp.weight = "w"})
func.func @no_arguments() {
  return
}
