// RUN: tp-opt %s -split-input-file -verify-diagnostics | FileCheck %s

// CHECK-LABEL: func.func @update
// CHECK: tp.cache_update %{{.+}} into %{{.+}}[%{{.+}}] dim = 2 : tensor<2x3x1x4xf32> into tensor<2x3x16x4xf32>, tensor<i64>
func.func @update(%new: tensor<2x3x1x4xf32>, %cache: tensor<2x3x16x4xf32>,
                  %pos: tensor<i64>) -> tensor<2x3x16x4xf32> {
  %0 = tp.cache_update %new into %cache[%pos] dim = 2 : tensor<2x3x1x4xf32> into tensor<2x3x16x4xf32>, tensor<i64>
  return %0 : tensor<2x3x16x4xf32>
}

// -----

func.func @bad_dim(%new: tensor<2x3x1x4xf32>, %cache: tensor<2x3x16x4xf32>,
                   %pos: tensor<i64>) -> tensor<2x3x16x4xf32> {
  // expected-error @+1 {{dim 4 is outside the cache's rank 4}}
  %0 = tp.cache_update %new into %cache[%pos] dim = 4 : tensor<2x3x1x4xf32> into tensor<2x3x16x4xf32>, tensor<i64>
  return %0 : tensor<2x3x16x4xf32>
}

// -----

func.func @bad_heads(%new: tensor<2x2x1x4xf32>, %cache: tensor<2x3x16x4xf32>,
                     %pos: tensor<i64>) -> tensor<2x3x16x4xf32> {
  // expected-error @+1 {{does not fit cache 'tensor<2x3x16x4xf32>' on dim 1}}
  %0 = tp.cache_update %new into %cache[%pos] dim = 2 : tensor<2x2x1x4xf32> into tensor<2x3x16x4xf32>, tensor<i64>
  return %0 : tensor<2x3x16x4xf32>
}

// -----

func.func @too_many(%new: tensor<2x3x17x4xf32>, %cache: tensor<2x3x16x4xf32>,
                    %pos: tensor<i64>) -> tensor<2x3x16x4xf32> {
  // expected-error @+1 {{on dim 2}}
  %0 = tp.cache_update %new into %cache[%pos] dim = 2 : tensor<2x3x17x4xf32> into tensor<2x3x16x4xf32>, tensor<i64>
  return %0 : tensor<2x3x16x4xf32>
}
