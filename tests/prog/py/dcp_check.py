"""dcp_check.py [--fsdp] DCP_DIR MEGAC_CKPT_DIR ITER NUM_LAYERS

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

With --fsdp, the folder is Megatron-FSDP's fsdp_dtensor instead (check_fsdp):
no metadata.json; every item of the flattened state dict by its own name,
planner_data giving the nested keys each was flattened from; model.<W><name>
the fp32 weights per layer, <W> the wrappers' "module." (two in a 16-bit run,
DCP_DTYPE), SwiGLU's linear_fc1 as _w (the gate's rows) and _v (the up
projection's); optimizer.state.module.<W><name>.{exp_avg, exp_avg_sq, step}
and optimizer.param_to_group_meta.module.<W><name>.<field> (no weight decay
for 1-D tensors); opt_param_scheduler.<field> equal to optim.h5's.
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
    "pathlib": {"PosixPath"},  # StorageMeta.checkpoint_id of PyTorch's own saves
}


class Record:
    def __init__(self, *args):
        self.args = args
        self.state = None

    def __setstate__(self, state):
        # (a data class with __slots__ pickles (None or its __dict__, its slots))
        if isinstance(state, tuple) and len(state) == 2 and isinstance(state[1], dict):
            state = dict(state[0] or {}, **state[1])
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


def read_dcp(d):
    """The folder's metadata, its global tensors (assembled from chunks that
    must cover each once) and its objects."""
    with open(os.path.join(d, ".metadata"), "rb") as f:
        meta = Reader(f).load()
    assert meta.cls.endswith(".Metadata"), meta.cls
    sdm, sd = meta.state_dict_metadata, meta.storage_data
    where = {}
    for k, v in sd.items():
        assert k.cls.endswith("MetadataIndex") and v.cls.endswith("_StorageInfo")
        off = k.state.get("offset")  # (newer PyTorch leaves a None offset out)
        where[(k.fqn, None if off is None else tuple(off))] = v
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
    return meta, tensors, objects


def megac_tensors(ckpt, it):
    """megac's model.h5 tensors by Megatron's names"""
    h = h5py.File(os.path.join(ckpt, "iter_%07d" % it, "model.h5"), "r")
    names = []
    h.visititems(lambda n, o: names.append(n) if isinstance(o, h5py.Dataset) else None)
    want = {}
    for n in names:
        key = n.replace("/", ".")
        if key.startswith("model."):
            key = key[len("model."):]
        want[key] = h[n][()]
    return want


def unpadded(got, w, k):
    """got without the vocabulary rows a target layout padded (zeros)"""
    if got.shape != w.shape:
        assert got.shape[1:] == w.shape[1:] and got.shape[0] > w.shape[0], (k, got.shape, w.shape)
        assert not got[w.shape[0]:].any(), k
        got = got[:w.shape[0]]
    return got


def check_fsdp(d, ckpt, it, L):
    assert not os.path.exists(os.path.join(d, "metadata.json")), "fsdp_dtensor has no metadata.json"
    meta, tensors, objects = read_dcp(d)
    # planner_data: each item's nested keys, joined with "." as DCP flattens them
    pd = meta.planner_data
    assert isinstance(pd, dict) and set(pd) == set(tensors) | set(objects), "planner_data names other items"
    for fqn, path in pd.items():
        assert isinstance(path, tuple) and ".".join(path) == fqn, (fqn, path)
    w = "module." if dtype_name == "float32" else "module.module."
    args = objects.pop("args")
    assert args.ckpt_format == "fsdp_dtensor" and args.num_layers == L and args.use_megatron_fsdp, args
    assert objects.pop("iteration") == it and objects.pop("checkpoint_version") == 3.0
    objects.pop("num_floating_point_operations_so_far")
    want = megac_tensors(ckpt, it)
    opath = os.path.join(ckpt, "iter_%07d" % it, "optim.h5")
    o = h5py.File(opath, "r") if any(k.startswith("optimizer.") for k in tensors) else None
    n_model = n_optim = n_meta = 0
    for k, x in want.items():
        assert not k.startswith("decoder.layers.") or k.split(".")[2].isdigit(), k  # one item per layer
        glu = k.endswith(("mlp.linear_fc1.weight", "mlp.linear_fc1.bias")) and args.swiglu
        parts = {}
        if glu:  # Megatron-FSDP saves the gate and up halves apart
            for sfx, half in (("_w", x[:x.shape[0] // 2]), ("_v", x[x.shape[0] // 2:])):
                parts[k + sfx] = half
        else:
            parts[k] = x
        for name, ref in parts.items():
            t = tensors.pop("model." + w + name)
            assert t.dtype == torch.float32, (name, t.dtype)
            assert np.array_equal(unpadded(t.numpy(), ref, name), ref), name
            n_model += 1
            if o is None:
                continue
            for kind in ("exp_avg", "exp_avg_sq"):
                m = o["%s/%s" % (kind, k)][()]
                if glu:
                    m = m[:m.shape[0] // 2] if name.endswith("_w") else m[m.shape[0] // 2:]
                t = tensors.pop("optimizer.state.module.%s%s.%s" % (w, name, kind))
                assert t.dtype == torch.float32 and np.array_equal(unpadded(t.numpy(), m, name), m), (name, kind)
                n_optim += 1
            step = tensors.pop("optimizer.state.module.%s%s.step" % (w, name))
            assert step.shape == () and float(step) == float(o.attrs["step"]), (name, step)
        if o is None:
            continue
        pre = "optimizer.param_to_group_meta.module.%s%s." % (w, k)
        g = {f[len(pre):]: objects.pop(f) for f in list(objects) if f.startswith(pre)}
        no_wd = x.ndim == 1 or k.endswith(".bias")
        assert g["weight_decay"] == (0.0 if no_wd else float(o.attrs["start_wd"])), (k, g["weight_decay"])
        assert g["wd_mult"] == (0.0 if no_wd else 1.0) and g["step"] == int(o.attrs["step"]), (k, g)
        assert g["max_lr"] == float(o.attrs["max_lr"]) and g["min_lr"] == float(o.attrs["min_lr"]), (k, g)
        assert tuple(g["betas"]) == (float(o.attrs["adam_beta1"]), float(o.attrs["adam_beta2"])), (k, g)
        assert g["eps"] == float(o.attrs["adam_eps"]), (k, g)
        n_meta += 1
    n_sched = 0
    if o is not None:
        for f in list(objects):
            if f.startswith("opt_param_scheduler."):
                v, ref = objects.pop(f), o.attrs[f[len("opt_param_scheduler."):]]
                assert (v == ref.decode()) if isinstance(v, str) else float(v) == float(ref), (f, v, ref)
                n_sched += 1
        assert n_sched >= 10, n_sched
    assert not tensors and not objects, ("left", sorted(tensors)[:5], sorted(objects)[:5])
    print("%d model tensors (fp32, per layer, %s prefix%s)%s, args and iteration %d check out"
          % (n_model, w, ", SwiGLU halves apart" if args.swiglu else "", ", %d of Adam's moments with their steps, %d parameters' groups, %d scheduler fields"
             % (n_optim, n_meta, n_sched) if o is not None else "", it))


def main():
    if sys.argv[1] == "--fsdp":
        return check_fsdp(sys.argv[2], sys.argv[3], int(sys.argv[4]), int(sys.argv[5]))
    d, ckpt, it, L = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
    with open(os.path.join(d, "metadata.json")) as f:
        mj = json.load(f)
    assert mj["sharded_backend"] == "torch_dist", mj
    meta, tensors, objects = read_dcp(d)
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
    want = megac_tensors(ckpt, it)
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
