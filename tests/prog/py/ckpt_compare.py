"""ckpt_compare.py MODE A_DIR B_DIR [PP] - two checkpoint iteration directories
hold the same tensors: every tensor reachable by name from model.h5 and
optim.h5 (external links to pipeline stages' files followed, as a user of
h5py sees them) has the same name and shape in both, and the root attributes
are equal (except the config); MODE exact: the data bit for bit, MODE close:
within 1e-3 of each tensor's largest value. Every tensor's crc32 attribute is
zlib's CRC-32 of its data.

With PP > 1, B_DIR was written by PP pipeline stages: it holds exactly
model.h5, optim.h5 and model.stage-SSS.h5, optim.stage-SSS.h5 for stages
1 .. PP-1; each tensor of those is reached from model.h5 / optim.h5 through
an external link under its own name, with a relative file name, and every
stage's file holds some."""
import os
import sys
import zlib

import h5py
import numpy as np

mode, a, b = sys.argv[1:4]
pp = int(sys.argv[4]) if len(sys.argv) > 4 else 1


def tensors(f):
    """{name: (dataset, link)} for every dataset reachable from the root,
    following external links (visititems does not); link is the
    h5py.ExternalLink it was reached through, or None."""
    out = {}

    def walk(g, prefix):
        for k in g.keys():
            name = prefix + k
            link = g.get(k, getlink=True)
            o = g.get(k)
            assert o is not None, "%s: %s is a dangling link %r" % (f.filename, name, link)
            if isinstance(o, h5py.Group):
                assert not isinstance(link, h5py.ExternalLink), (f.filename, name, "links to a group")
                walk(o, name + "/")
            else:
                out[name] = (o, link if isinstance(link, h5py.ExternalLink) else None)

    walk(f, "")
    return out


worst, count, linked = 0.0, 0, 0
stage_files = set()
for fn in ("model.h5", "optim.h5"):
    fa, fb = h5py.File(os.path.join(a, fn), "r"), h5py.File(os.path.join(b, fn), "r")
    ta, tb = tensors(fa), tensors(fb)
    na, nb = sorted(ta), sorted(tb)
    assert na == nb, (fn, sorted(set(na) ^ set(nb)))
    for n in na:
        x, y = ta[n][0][()], tb[n][0][()]
        assert x.shape == y.shape, (n, x.shape, y.shape)
        for d, v in ((ta[n][0], x), (tb[n][0], y)):
            assert int(d.attrs["crc32"]) == zlib.crc32(v.tobytes()), (d.file.filename, n, "crc32")
            if v.ndim >= 1 and v.size:  # the per-block checksums of row reads
                R = int(d.attrs["crc32_block_rows"])
                blocks = [zlib.crc32(v[i:i + R].tobytes()) for i in range(0, v.shape[0], R)]
                assert blocks == [int(c) for c in d.attrs["crc32_blocks"]], (d.file.filename, n, "crc32_blocks")
        if mode == "exact":
            assert np.array_equal(x, y), n
        else:
            d = np.abs(x - y).max() / max(np.abs(x).max(), 1e-12)
            worst = max(worst, d)
            assert d < 1e-3, (n, d)
        link = tb[n][1]
        if link is not None:
            linked += 1
            stem = fn[: -len(".h5")]
            assert link.filename.startswith(stem + ".stage-") and "/" not in link.filename, (n, link.filename)
            assert link.path == "/" + n, (n, link.path)
            stage_files.add(link.filename)
        count += 1
    ka, kb = dict(fa.attrs), dict(fb.attrs)
    if fn == "model.h5":
        iteration = kb["iteration"]
    assert sorted(ka) == sorted(kb), (fn, sorted(ka), sorted(kb))
    if mode == "exact":
        for k in ka:
            if k != "config":
                assert ka[k] == kb[k], (fn, k, ka[k], kb[k])
    fa.close()
    fb.close()

if pp > 1:
    want = {"model.h5", "optim.h5"}
    for s in range(1, pp):
        want |= {"model.stage-%03d.h5" % s, "optim.stage-%03d.h5" % s}
    have = set(os.listdir(b))
    assert have == want, ("files", sorted(have ^ want))
    assert stage_files == want - {"model.h5", "optim.h5"}, ("linked files", sorted(stage_files))
    for s in range(1, pp):
        for stem in ("model", "optim"):
            with h5py.File(os.path.join(b, "%s.stage-%03d.h5" % (stem, s)), "r") as f:
                assert f.attrs["pipeline_stage"] == s and f.attrs["iteration"] == iteration, (stem, s)
    extra = "; %d of them through external links into %d stage files" % (linked, len(stage_files))
else:
    extra = "" if not linked else "; %d through external links" % linked
print("%d tensors agree (%s; worst relative difference %.1e%s)" % (count, mode, worst, extra))
