// RUN: tp-opt %s | tp-opt | FileCheck %s

// #tp.layout prints what it was given, omitting the block when there is
// none; slice and padding go together on one dim.
// CHECK-LABEL: func.func @layouts(
// CHECK-SAME: tensor<8x4xf32> {tp.layout = #tp.layout<role = column, dim = 1, block = 0>, tp.weight = "a"}
// CHECK-SAME: tensor<8x2xf32> {tp.layout = #tp.layout<role = column, dim = 1, block = 3, slice = [4, 4]>, tp.weight = "b"}
// CHECK-SAME: tensor<8x4xf32> {tp.layout = #tp.layout<role = replicated, dim = 1, slice = [8, 4]>, tp.weight = "b"}
// CHECK-SAME: tensor<3x8xf32> {tp.layout = #tp.layout<role = vocab, dim = 0, block = 0, padded = [10, 12]>, tp.weight = "c"}
// CHECK-SAME: tensor<8x3xf32> {tp.layout = #tp.layout<role = column_gathered, dim = 1, slice = [0, 5], padded = [5, 6]>, tp.weight = "d"}
// CHECK-SAME: tensor<4xf32> {tp.layout = #tp.layout<role = propagated, dim = 0>, tp.weight = "e"}
func.func @layouts(
    %a: tensor<8x4xf32> {tp.weight = "a", tp.layout = #tp.layout<dim = 1, role = column, block = 0>},
    %b0: tensor<8x2xf32> {tp.weight = "b", tp.layout = #tp.layout<role = column, dim = 1, block = 3, slice = [4, 4]>},
    %b1: tensor<8x4xf32> {tp.weight = "b", tp.layout = #tp.layout<role = replicated, dim = 1, block = -1, slice = [8, 4]>},
    %c: tensor<3x8xf32> {tp.weight = "c", tp.layout = #tp.layout<role = vocab, dim = 0, block = 0, padded = [10, 12]>},
    %d: tensor<8x3xf32> {tp.weight = "d", tp.layout = #tp.layout<role = column_gathered, dim = 1, padded = [5, 6], slice = [0, 5]>},
    %e: tensor<4xf32> {tp.weight = "e", tp.layout = #tp.layout<role = propagated, dim = 0>}) {
  return
}

// The plan's layout of a pad of a weight, before partition.
// CHECK-LABEL: func.func @on_op(
// CHECK: tensor.pad
// CHECK: } {tp.layout = #tp.layout<role = row, dim = 0, block = 2>}
func.func @on_op(%w: tensor<10x8xf32> {tp.weight = "w"}) -> tensor<12x8xf32> {
  %zero = arith.constant 0.0 : f32
  %p = tensor.pad %w low[0, 0] high[2, 0] {
  ^bb0(%i: index, %j: index):
    tensor.yield %zero : f32
  } {tp.layout = #tp.layout<role = row, dim = 0, block = 2>} : tensor<10x8xf32> to tensor<12x8xf32>
  return %p : tensor<12x8xf32>
}
