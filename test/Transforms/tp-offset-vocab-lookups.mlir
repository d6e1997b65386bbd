// RUN: tp-opt %s -split-input-file --pass-pipeline='builtin.module(func.func(tp-offset-vocab-lookups))' -verify-diagnostics | FileCheck %s

// A rank holding 4 of 8 table rows matches ids against its own rows: the
// vocabulary index gets rank * 4.
// CHECK-LABEL: func.func @split_lookup(
// CHECK: %[[RANK:.+]] = shard.process_multi_index on @grid axes = [0] : index
// CHECK: %[[ROWS:.+]] = arith.constant 4 : index
// CHECK: %[[FIRST:.+]] = arith.muli %[[RANK]], %[[ROWS]] : index
// CHECK: linalg.generic
// CHECK: %[[V:.+]] = linalg.index 2 : index
// CHECK: %[[GLOBAL:.+]] = arith.addi %[[V]], %[[FIRST]] : index
// CHECK: arith.cmpi eq, %{{.+}}, %[[GLOBAL]] : index
#ids = affine_map<(d0, d1, d2) -> (d0)>
#tab = affine_map<(d0, d1, d2) -> (d2, d1)>
#out = affine_map<(d0, d1, d2) -> (d0, d1)>
module {
  shard.grid @grid(shape = 2)
  func.func @split_lookup(%ids: tensor<3xi64>, %table: tensor<4x8xf32>, %init: tensor<3x8xf32>) -> tensor<3x8xf32> {
    %0 = linalg.generic {indexing_maps = [#ids, #tab, #out], iterator_types = ["parallel", "parallel", "reduction"]} ins(%ids, %table : tensor<3xi64>, tensor<4x8xf32>) outs(%init : tensor<3x8xf32>) attrs = {tp.embedding = 8 : i64} {
    ^bb0(%id: i64, %row: f32, %acc: f32):
      %i = arith.index_cast %id : i64 to index
      %v = linalg.index 2 : index
      %hit = arith.cmpi eq, %i, %v : index
      %zero = arith.constant 0.0 : f32
      %t = arith.select %hit, %row, %zero : f32
      %s = arith.addf %acc, %t : f32
      linalg.yield %s : f32
    } -> tensor<3x8xf32>
    return %0 : tensor<3x8xf32>
  }
}

// -----

// The tensor-parallel grid is found by its role, not its name: beside a
// pipeline grid listed first, the rank comes from @ranks.
// CHECK-LABEL: func.func @grid_by_role(
// CHECK: shard.process_multi_index on @ranks axes = [0] : index
#ids = affine_map<(d0, d1, d2) -> (d0)>
#tab = affine_map<(d0, d1, d2) -> (d2, d1)>
#out = affine_map<(d0, d1, d2) -> (d0, d1)>
module {
  shard.grid @stages(shape = 2) {tp.grid_role = #tp.grid_role<pipeline>}
  shard.grid @ranks(shape = 2) {tp.grid_role = #tp.grid_role<tensor>}
  func.func @grid_by_role(%ids: tensor<3xi64>, %table: tensor<4x8xf32>, %init: tensor<3x8xf32>) -> tensor<3x8xf32> {
    %0 = linalg.generic {indexing_maps = [#ids, #tab, #out], iterator_types = ["parallel", "parallel", "reduction"]} ins(%ids, %table : tensor<3xi64>, tensor<4x8xf32>) outs(%init : tensor<3x8xf32>) attrs = {tp.embedding = 8 : i64} {
    ^bb0(%id: i64, %row: f32, %acc: f32):
      %i = arith.index_cast %id : i64 to index
      %v = linalg.index 2 : index
      %hit = arith.cmpi eq, %i, %v : index
      %zero = arith.constant 0.0 : f32
      %t = arith.select %hit, %row, %zero : f32
      %s = arith.addf %acc, %t : f32
      linalg.yield %s : f32
    } -> tensor<3x8xf32>
    return %0 : tensor<3x8xf32>
  }
}

// -----

// A table that is not split is left alone.
#ids = affine_map<(d0, d1, d2) -> (d0)>
#tab = affine_map<(d0, d1, d2) -> (d2, d1)>
#out = affine_map<(d0, d1, d2) -> (d0, d1)>
module {
  shard.grid @grid(shape = 2)
  // CHECK-LABEL: func.func @whole_table(
  // CHECK-NOT: shard.process_multi_index
  func.func @whole_table(%ids: tensor<3xi64>, %table: tensor<8x8xf32>, %init: tensor<3x8xf32>) -> tensor<3x8xf32> {
    %0 = linalg.generic {indexing_maps = [#ids, #tab, #out], iterator_types = ["parallel", "parallel", "reduction"]} ins(%ids, %table : tensor<3xi64>, tensor<8x8xf32>) outs(%init : tensor<3x8xf32>) attrs = {tp.embedding = 8 : i64} {
    ^bb0(%id: i64, %row: f32, %acc: f32):
      %v = linalg.index 2 : index
      linalg.yield %row : f32
    } -> tensor<3x8xf32>
    return %0 : tensor<3x8xf32>
  }
}

// -----

// negative_: a split table with no grid to place the shards.
#ids = affine_map<(d0, d1, d2) -> (d0)>
#tab = affine_map<(d0, d1, d2) -> (d2, d1)>
#out = affine_map<(d0, d1, d2) -> (d0, d1)>
module {
  func.func @negative_no_grid(%ids: tensor<3xi64>, %table: tensor<4x8xf32>, %init: tensor<3x8xf32>) -> tensor<3x8xf32> {
    // expected-error @below {{embedding table of 8 rows is split into 4-row shards without a 1-D tensor-parallel grid to place them}}
    %0 = linalg.generic {indexing_maps = [#ids, #tab, #out], iterator_types = ["parallel", "parallel", "reduction"]} ins(%ids, %table : tensor<3xi64>, tensor<4x8xf32>) outs(%init : tensor<3x8xf32>) attrs = {tp.embedding = 8 : i64} {
    ^bb0(%id: i64, %row: f32, %acc: f32):
      linalg.yield %row : f32
    } -> tensor<3x8xf32>
    return %0 : tensor<3x8xf32>
  }
}
