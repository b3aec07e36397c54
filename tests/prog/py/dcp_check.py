"""dcp_check.py DCP_DIR MEGAC_CKPT_DIR ITER NUM_LAYERS

An independent reader of a torch_dist folder that megac wrote (PyTorch
Distributed Checkpoint), with Debian's python3, NumPy, h5py and torch 1.13
(which has no torch.distributed.checkpoint): .metadata is unpickled with
Python's own pickle, each class it names mapped to a plain record (only the
classes PyTorch's DCP metadata uses are accepted); each chunk is loaded with
torch.load from its bytes in the .distcp file; the global tensors are
assembled from their chunks (which must cover them exactly once), the stacked
decoder.layers.* split per layer, and every tensor compared bit for bit with
megac's model.h5 of the same iteration (rounded to DCP_DTYPE when
that is bfloat16 or float16), and Adam's state (optimizer.state.exp_avg,
exp_avg_sq, and fp32_param for a 16-bit export) with its optim.h5 exactly. Also checks metadata.json, the common
state (args, iteration) and the _extra_state objects of each layer.
Prints a one-line summary; exits non-zero on any difference.
"""
import io
import json
import os
import pickle
import sys

import h5py
import numpy as np
import torch

ALLOWED = {
    "torch.distributed.checkpoint.metadata": {"Metadata", "TensorStorageMetadata", "BytesStorageMetadata",
                                               "TensorProperties", "ChunkStorageMetadata", "MetadataIndex",
                                               "StorageMeta", "_MEM_FORMAT_ENCODING"},
    "torch.distributed.checkpoint.filesystem": {"_StorageInfo"},
    "torch.serialization": {"_get_layout"},
    "torch": {"Size", "float32", "bfloat16", "float16"},
}


class Record:
    def __init__(self, *args):
        self.args = args
        self.state = None

    def __setstate__(self, state):
        self.state = state

    def __getattr__(self, name):
        st = self.__dict__.get("state")
        if isinstance(st, dict) and name in st:
            return st[name]
        raise AttributeError(name)


class Reader(pickle.Unpickler):
    def find_class(self, module, name):
        if name not in ALLOWED.get(module, ()):
            raise pickle.UnpicklingError("unexpected global %s.%s" % (module, name))
        if module == "torch" and name == "Size":
            return torch.Size
        if module == "torch":
            return getattr(torch, name)
        return type(name, (Record,), {"cls": module + "." + name})


def main():
    d, ckpt, it, L = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
    with open(os.path.join(d, "metadata.json")) as f:
        mj = json.load(f)
    assert mj["sharded_backend"] == "torch_dist", mj
    with open(os.path.join(d, ".metadata"), "rb") as f:
        meta = Reader(f).load()
    assert meta.cls.endswith(".Metadata"), meta.cls
    sdm, sd = meta.state_dict_metadata, meta.storage_data
    where = {}
    for k, v in sd.items():
        assert k.cls.endswith("MetadataIndex") and v.cls.endswith("_StorageInfo")
        where[(k.fqn, None if k.offset is None else tuple(k.offset))] = v
    blobs = {}

    def blob(info):
        if info.relative_path not in blobs:
            with open(os.path.join(d, info.relative_path), "rb") as f:
                blobs[info.relative_path] = f.read()
        b = blobs[info.relative_path]
        assert info.offset + info.length <= len(b)
        return torch.load(io.BytesIO(b[info.offset:info.offset + info.length]))

    tensors, objects = {}, {}
    for fqn, m in sdm.items():
        if m.cls.endswith("BytesStorageMetadata"):
            objects[fqn] = blob(where[(fqn, None)])
            continue
        assert m.cls.endswith("TensorStorageMetadata"), m.cls
        props = m.properties.state
        dtype = props[0]
        assert props[1].args == ("torch.strided",) and props[2] is False, props
        size = tuple(m.size)
        out = torch.empty(size, dtype=dtype)
        seen = torch.zeros(size, dtype=torch.int32)
        for ch in m.chunks:
            off, sz = tuple(ch.offsets), tuple(ch.sizes)
            t = blob(where[(fqn, off)])
            assert t.dtype == dtype and tuple(t.shape) == sz, (fqn, t.dtype, t.shape, sz)
            sl = tuple(slice(o, o + s) for o, s in zip(off, sz))
            out[sl] = t
            seen[sl] += 1
        assert bool((seen == 1).all()), "chunks of %s do not cover it once" % fqn
        tensors[fqn] = out
    # the common state and the extra states
    cs = objects.pop("common_state/shard_0_1")
    assert isinstance(cs, list) and len(cs) == 1, type(cs)
    cs = cs[0]
    assert cs["iteration"] == it and cs["checkpoint_version"] == 3.0, cs.keys()
    args = cs["args"]
    assert args.num_layers == L and args.ckpt_format == "torch_dist", (args.num_layers, args.ckpt_format)
    for k, v in objects.items():
        assert "_extra_state/shard_" in k and v == [None], (k, v)
    n_extra = len(objects)
    # split the stacked layers and compare with megac's tensors
    flat = {}
    for fqn, t in tensors.items():
        pre, dl, rest = fqn.partition("decoder.layers.")
        if dl and pre in ("", "optimizer.state.exp_avg.", "optimizer.state.exp_avg_sq.",
                          "optimizer.state.fp32_param.") and not rest[0].isdigit():
            assert t.shape[0] == L, (fqn, t.shape)
            for l in range(L):
                flat["%sdecoder.layers.%d.%s" % (pre, l, rest)] = t[l]
        else:
            flat[fqn] = t
    h = h5py.File(os.path.join(ckpt, "iter_%07d" % it, "model.h5"), "r")
    names = []
    h.visititems(lambda n, o: names.append(n) if isinstance(o, h5py.Dataset) else None)
    want = {}
    for n in names:
        key = n.replace("/", ".")
        if key.startswith("model."):
            key = key[len("model."):]
        want[key] = h[n][()]
    # Adam's state (when megac's checkpoint has optim.h5): the moments and a
    # 16-bit export's fp32 master weights, fp32 and exact
    fp32 = {}
    opath = os.path.join(ckpt, "iter_%07d" % it, "optim.h5")
    if any(k.startswith("optimizer.state.") for k in flat):
        o = h5py.File(opath, "r")
        for kind in ("exp_avg", "exp_avg_sq"):
            for k in want:
                fp32["optimizer.state.%s.%s" % (kind, k)] = o["%s/%s" % (kind, k)][()]
        if dtype_name != "float32":
            for k in want:
                fp32["optimizer.state.fp32_param." + k] = want[k]
        for k, w in fp32.items():
            assert k in flat, k
            got = flat.pop(k).numpy()
            if got.shape != w.shape:  # the vocabulary padded for the target layout
                assert not got[w.shape[0]:].any(), k
                got = got[:w.shape[0]]
            assert got.dtype == np.float32 and np.array_equal(got, w), k
    missing = sorted(set(want) - set(flat))
    extra = sorted(set(flat) - set(want))
    assert not missing and not extra, ("missing", missing[:5], "extra", extra[:5])
    worst = 0
    for k, w in want.items():
        got = flat[k].float().numpy()
        if got.shape != w.shape:  # a vocabulary padded for the target layout
            assert got.shape[1:] == w.shape[1:] and got.shape[0] >= w.shape[0], (k, got.shape, w.shape)
            assert not got[w.shape[0]:].any(), k
            got = got[:w.shape[0]]
        ref = torch.from_numpy(np.ascontiguousarray(w, dtype=np.float32)).to(getattr(torch, dtype_name))
        assert np.array_equal(got, ref.float().numpy()), k
        worst = max(worst, float(np.abs(got - w).max() / (np.abs(w).max() + 1e-30)))
    print("%d tensors (%d stacked over %d layers)%s, %d extra states, args and iteration %d check out%s" %
          (len(flat), sum(1 for f in tensors if f.startswith("decoder.layers.")), L,
           ", %d of Adam's state" % len(fp32) if fp32 else "", n_extra, it,
           "" if dtype_name == "float32" else "; each megac's rounded to %s, worst relative %.2g" % (dtype_name, worst)))


dtype_name = os.environ.get("DCP_DTYPE", "float32")
if __name__ == "__main__":
    main()
