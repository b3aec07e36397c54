"""hf_roundtrip.py ORIG.h5 BACK.h5 [CONFIG_JSON] - a megac -> Hugging Face ->
megac round trip gave back every tensor of ORIG bit for bit, with the same
names, shapes and dtypes, except the vocabulary padding rows (HF has none),
which come back as zeros. CONFIG_JSON: keys the round trip's model config
must hold, with their values. Prints "N tensors bitwise"."""
import json
import sys

import h5py
import numpy as np

V = 50257  # the GPT-2 tokenizer's vocabulary, the tests' models'
a, b = h5py.File(sys.argv[1], "r"), h5py.File(sys.argv[2], "r")
assert sorted(a.keys()) == sorted(b.keys()), (sorted(a.keys()), sorted(b.keys()))
for k in a.keys():
    x, y = a[k][()], b[k][()]
    assert x.shape == y.shape and x.dtype == y.dtype, k
    if k in ("embedding.word_embeddings.weight", "output_layer.weight"):
        assert np.array_equal(x[:V], y[:V]) and not y[V:].any(), k
    else:
        assert np.array_equal(x, y), k
if len(sys.argv) > 3:
    want = json.loads(sys.argv[3])
    got = json.loads(b.attrs["config"])
    assert all(got.get(k) == v for k, v in want.items()), ({k: got.get(k) for k in want}, want)
print("%d tensors bitwise" % len(a.keys()))
