// RUN: tp-opt %s | tp-opt | FileCheck %s

// A grid's role is a typed attribute that round-trips (passes find the
// tensor-parallel and the pipeline grid by it, whatever the grids are
// called: tp-offset-vocab-lookups.mlir @grid_by_role).
// CHECK: shard.grid @stages(shape = 2) {tp.grid_role = #tp.grid_role<pipeline>}
// CHECK: shard.grid @ranks(shape = 4) {tp.grid_role = #tp.grid_role<tensor>}
shard.grid @stages(shape = 2) {tp.grid_role = #tp.grid_role<pipeline>}
shard.grid @ranks(shape = 4) {tp.grid_role = #tp.grid_role<tensor>}
