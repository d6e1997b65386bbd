// RUN: tp-opt %s --tp-differentiate | FileCheck %s

// A Gather from a weight at computed (here constant) indices reads the
// table inside the body (tensor.extract). It becomes a sum over the
// gathered dim of the row whose position equals the index, with the table
// an operand: the hidden dim, indexed by a loop itself, stays that loop.
// The rule for generics then gives the table's gradient, a scatter-add:
// dy summed over the positions that read each row.
// CHECK-LABEL: func.func @main(
// CHECK-SAME: -> (tensor<f32> {tp.output = "loss"}, tensor<5x4xf32> {tp.output = "grad.table"})
// The gather as a sum over the table's 5 rows (a new reduction loop):
// CHECK: %[[ROWS:.*]] = linalg.generic {{.*}} iterator_types = ["parallel", "parallel", "reduction"]} ins(%{{.*}}, %arg1 : tensor<3xi64>, tensor<5x4xf32>)
// CHECK: linalg.index 2
// CHECK: arith.cmpi eq
// CHECK: arith.select
// CHECK-NOT: tensor.extract
// The table's gradient: its rows and columns parallel, the 3 positions
// summed.
// CHECK: %[[G:.*]] = linalg.generic {{.*}} iterator_types = ["parallel", "parallel", "reduction"]} {{.*}} outs(%{{.*}} : tensor<5x4xf32>) attrs = {tp.backward}
// CHECK: return %{{.*}}, %[[G]]
#ids = affine_map<(d0, d1) -> (d0)>
#id = affine_map<(d0, d1) -> (d0, d1)>
#all = affine_map<(d0, d1) -> ()>
func.func @main(%x: tensor<3x4xf32> {tp.input = "x"}, %table: tensor<5x4xf32> {tp.weight = "table"}) -> (tensor<f32> {tp.output = "loss"}) {
  %ids = arith.constant dense<[4, 0, 4]> : tensor<3xi64>
  %e0 = tensor.empty() : tensor<3x4xf32>
  %rows = linalg.generic {indexing_maps = [#ids, #id], iterator_types = ["parallel", "parallel"]} ins(%ids : tensor<3xi64>) outs(%e0 : tensor<3x4xf32>) {
  ^bb0(%i: i64, %o: f32):
    %col = linalg.index 1 : index
    %row = arith.index_cast %i : i64 to index
    %v = tensor.extract %table[%row, %col] : tensor<5x4xf32>
    linalg.yield %v : f32
  } -> tensor<3x4xf32>
  %zero = arith.constant 0.0 : f32
  %e1 = tensor.empty() : tensor<f32>
  %f1 = linalg.fill ins(%zero : f32) outs(%e1 : tensor<f32>) -> tensor<f32>
  %l = linalg.generic {indexing_maps = [#id, #id, #all], iterator_types = ["reduction", "reduction"]} ins(%rows, %x : tensor<3x4xf32>, tensor<3x4xf32>) outs(%f1 : tensor<f32>) {
  ^bb0(%a: f32, %b: f32, %o: f32):
    %m = arith.mulf %a, %b : f32
    %s = arith.addf %o, %m : f32
    linalg.yield %s : f32
  } -> tensor<f32>
  return %l : tensor<f32>
}
