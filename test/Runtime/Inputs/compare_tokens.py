"""compare_tokens.py GOT.npy REFERENCE.npy: prints whether the generated
tokens equal the reference's first columns (the reference may run longer:
transformers' generate() output for more new tokens)."""
import sys

import numpy as np

got, ref = np.load(sys.argv[1]), np.load(sys.argv[2])
same = got.shape[0] == ref.shape[0] and got.shape[1] <= ref.shape[1] and \
    np.array_equal(got, ref[:, :got.shape[1]])
print("tokens %s %s" % (list(got.shape), "equal" if same else "DIFFER"))
if not same:
    print("got\n%s\nreference\n%s" % (got, ref))
    sys.exit(1)
