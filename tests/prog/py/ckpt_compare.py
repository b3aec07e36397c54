"""ckpt_compare.py MODE A_DIR B_DIR - two checkpoint iteration directories
hold the same tensors: model.h5 and optim.h5 with the same dataset names and
shapes, and equal root attributes (except the config); MODE exact: the data
bit for bit, MODE close: within 1e-3 of each tensor's largest value."""
import sys

import h5py
import numpy as np

mode, a, b = sys.argv[1:4]


def datasets(f):
    out = []
    f.visititems(lambda n, o: out.append(n) if isinstance(o, h5py.Dataset) else None)
    return sorted(out)


worst, count = 0.0, 0
for fn in ("model.h5", "optim.h5"):
    fa, fb = h5py.File("%s/%s" % (a, fn), "r"), h5py.File("%s/%s" % (b, fn), "r")
    na, nb = datasets(fa), datasets(fb)
    assert na == nb, (fn, sorted(set(na) ^ set(nb)))
    for n in na:
        x, y = fa[n][()], fb[n][()]
        assert x.shape == y.shape, (n, x.shape, y.shape)
        if mode == "exact":
            assert np.array_equal(x, y), n
        else:
            d = np.abs(x - y).max() / max(np.abs(x).max(), 1e-12)
            worst = max(worst, d)
            assert d < 1e-3, (n, d)
        count += 1
    ka, kb = dict(fa.attrs), dict(fb.attrs)
    assert sorted(ka) == sorted(kb), (fn, sorted(ka), sorted(kb))
    if mode == "exact":
        for k in ka:
            if k != "config":
                assert ka[k] == kb[k], (fn, k, ka[k], kb[k])
print("%d tensors agree (%s; worst relative difference %.1e)" % (count, mode, worst))
