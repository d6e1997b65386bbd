"""Prints a func.func of N elementwise negations in a line (argv[1])."""
import sys

n = int(sys.argv[1])
print("#id = affine_map<(d0) -> (d0)>")
print('func.func @main(%x: tensor<8xf32> {tp.input = "x"}) -> '
      '(tensor<8xf32> {tp.output = "y"}) {')
print("  %empty = tensor.empty() : tensor<8xf32>")
prev = "%x"
for i in range(n):
    print(f"  %v{i} = linalg.generic {{indexing_maps = [#id, #id], "
          f'iterator_types = ["parallel"]}} ins({prev} : tensor<8xf32>) '
          "outs(%empty : tensor<8xf32>) {")
    print("  ^bb0(%a: f32, %o: f32):")
    print("    %r = arith.negf %a : f32")
    print("    linalg.yield %r : f32")
    print("  } -> tensor<8xf32>")
    prev = f"%v{i}"
print(f"  return {prev} : tensor<8xf32>")
print("}")
