# torch_pickle.py - the PyTorch side of tests/prog/torch_pickle.sh.
#
#   torch_pickle.py make DIR        DIR/full.pt (a state dict like Megatron's
#                                   model_optim_rng.pt), DIR/plain.pt (without
#                                   Namespace and numpy, for weights_only) and
#                                   DIR/evil.pt (a pickle calling os.system)
#   torch_pickle.py dump DIR NAME   compare DIR/NAME.json (our reader's dump)
#                                   with torch.load(DIR/NAME.pt)
#   torch_pickle.py load DIR NAME WEIGHTS_ONLY
#                                   torch.load(DIR/NAME.out.pt) (our writer's)
#                                   equals torch.load(DIR/NAME.pt)
import argparse
import collections
import io
import json
import math
import os
import pickle
import random
import sys
import zipfile

import numpy as np
import torch


def state(plain):
    torch.manual_seed(1)
    w = torch.randn(4, 6)
    base = torch.arange(24, dtype=torch.float32)
    model = collections.OrderedDict()
    model["embedding.word_embeddings.weight"] = w
    model["decoder.layers.0.self_attention.linear_qkv.weight"] = torch.randn(6, 4).to(torch.bfloat16)
    model["decoder.layers.0.mlp.linear_fc1.weight"] = torch.randn(3, 5).half()
    model["decoder.layers.0.counts"] = torch.tensor([1, -2, 3 << 40], dtype=torch.int64)
    model["transposed"] = w.t()  # non-contiguous view of w's storage
    model["half_a"] = base[:12].view(3, 4)  # two tensors sharing one storage
    model["half_b"] = base[12:]
    model["column"] = base.view(4, 6)[:, 2]
    model["empty"] = torch.zeros(0, 3)
    model["scalar"] = torch.tensor(2.5)
    model["_extra_state"] = None
    optim = {
        "state": {0: {"exp_avg": torch.zeros(4, 6), "exp_avg_sq": torch.ones(4, 6), "step": 7}},
        "param_groups": [{"lr": 1e-4, "betas": (0.9, 0.95), "eps": 1e-8, "weight_decay": 0.1, "params": [0, 1],
                          "nesterov": False, "name": None}],
    }
    sd = {
        "model": model,
        "optimizer": {"optimizer": optim, "fp32_from_fp16_params": [[w.clone()]]},
        "opt_param_scheduler": {"max_lr": 3e-4, "num_steps": 800, "decay_style": "cosine"},
        "iteration": 100,
        "checkpoint_version": 3.0,
        "num_floating_point_operations_so_far": 123456789012345,
        "big": -(1 << 62),
        "text": "héllo \u4e16\u754c \U0001f600",
        "floats": [0.0, -0.0, 1e300, float("inf"), -1.5e-310],
        "bools": (True, False),
        "nested": {(1, "a"): [{}], 2: set(), "fs": frozenset([3])},
    }
    if not plain:
        random.seed(3)
        np.random.seed(5)
        sd["args"] = argparse.Namespace(num_layers=2, hidden_size=64, lr=3e-4, tokenizer_type="GPT2BPETokenizer",
                                        data_path=["1.0", "corpus_text_document"], seed=1234, load=None,
                                        bf16=True, fp16=False, params_dtype=torch.bfloat16, ratio=0.5)
        sd["rng_state"] = [{
            "random_rng_state": random.getstate(),
            "np_rng_state": np.random.get_state(),
            "torch_rng_state": torch.get_rng_state(),
            "np_scalar": np.float64(0.25),
            "np_int": np.int64(-9),
        }]
        sd["bytes"] = b"\x00\x01\xff latin \x80"
        sd["param"] = torch.nn.Parameter(torch.ones(2, 2))
        sd["size"] = torch.Size([3, 4])
    return sd


def enc(v):
    """The JSON encoding of tests/tools/megac_torch_pickle.c."""
    if v is None or isinstance(v, (bool, str)):
        return v
    if isinstance(v, (int, np.integer)):
        return int(v)
    if isinstance(v, (float, np.floating)):
        v = float(v)
        return v if math.isfinite(v) else {"float": "nan" if v != v else ("inf" if v > 0 else "-inf")}
    if isinstance(v, bytearray):
        return {"bytearray": bytes(v).hex()}
    if isinstance(v, bytes):
        return {"bytes": v.hex()}
    if isinstance(v, list):
        return [enc(x) for x in v]
    if isinstance(v, torch.Size):
        return {"tuple": [int(x) for x in v]}
    if isinstance(v, tuple):
        return {"tuple": [enc(x) for x in v]}
    if isinstance(v, (set, frozenset)):
        return {"frozenset" if isinstance(v, frozenset) else "set": sorted((enc(x) for x in v), key=json.dumps)}
    if isinstance(v, collections.OrderedDict):
        return {"odict": [[enc(k), enc(x)] for k, x in v.items()]}
    if isinstance(v, dict):
        return {"dict": [[enc(k), enc(x)] for k, x in v.items()]}
    if isinstance(v, torch.dtype):
        return {"global": str(v)}
    if isinstance(v, argparse.Namespace):
        return {"object": "argparse.Namespace", "args": None, "state": {"dict": [[k, enc(x)] for k, x in vars(v).items()]}}
    if isinstance(v, np.ndarray):
        return {"ndarray": {"dtype": v.dtype.str, "shape": list(v.shape), "data": v.tobytes().hex()}}
    if isinstance(v, torch.Tensor):
        t = v.detach()
        raw = t.contiguous().view(torch.uint8) if t.numel() and t.dim() else None
        data = t.contiguous().numpy().tobytes() if t.dtype != torch.bfloat16 else \
            t.contiguous().view(torch.int16).numpy().tobytes()
        del raw
        return {"tensor": {"dtype": str(t.dtype).replace("torch.", ""), "shape": list(t.shape),
                           "stride": list(t.stride()), "offset": t.storage_offset(),
                           "requires_grad": v.requires_grad, "parameter": isinstance(v, torch.nn.Parameter),
                           "data": data.hex()}}
    raise TypeError(type(v))


def strip(j):
    """Our dump without what torch does not say (storage keys), sets sorted."""
    if isinstance(j, list):
        return [strip(x) for x in j]
    if isinstance(j, dict):
        if "tensor" in j:
            t = dict(j["tensor"])
            t.pop("storage", None)
            return {"tensor": t}
        if "set" in j or "frozenset" in j:
            k = "set" if "set" in j else "frozenset"
            return {k: sorted((strip(x) for x in j[k]), key=json.dumps)}
        return {k: strip(x) for k, x in j.items()}
    return j


def diff(a, b, path="$"):
    if type(a) != type(b):
        return f"{path}: {json.dumps(a)[:200]} != {json.dumps(b)[:200]}"
    if isinstance(a, dict):
        if a.keys() != b.keys():
            return f"{path}: keys {sorted(a)} != {sorted(b)}"
        for k in a:
            d = diff(a[k], b[k], f"{path}.{k}")
            if d:
                return d
        return None
    if isinstance(a, list):
        if len(a) != len(b):
            return f"{path}: {len(a)} items != {len(b)}"
        for i, (x, y) in enumerate(zip(a, b)):
            d = diff(x, y, f"{path}[{i}]")
            if d:
                return d
        return None
    if isinstance(a, float) and a == b and math.copysign(1, a) == math.copysign(1, b):
        return None
    return None if a == b else f"{path}: {json.dumps(a)[:200]} != {json.dumps(b)[:200]}"


def find_tensor(j, name):
    for k, v in j["dict"]:
        if k == "model":
            for kk, vv in v["odict"]:
                if kk == name:
                    return vv["tensor"]
    raise KeyError(name)


class Evil:
    def __reduce__(self):
        return (os.system, ("echo pwned > /dev/null",))


def main():
    cmd, d = sys.argv[1], sys.argv[2]
    if cmd == "make":
        torch.save(state(False), os.path.join(d, "full.pt"))
        torch.save(state(True), os.path.join(d, "plain.pt"))
        # evil.pt: torch.save's container around a pickle that calls os.system
        buf = io.BytesIO()
        torch.save({"x": 1}, buf)
        with zipfile.ZipFile(io.BytesIO(buf.getvalue())) as z, \
                zipfile.ZipFile(os.path.join(d, "evil.pt"), "w") as out:
            for i in z.infolist():
                data = z.read(i)
                if i.filename.endswith("/data.pkl"):
                    data = pickle.dumps({"x": Evil()}, protocol=2)
                out.writestr(i, data)
        # evil2.pt: GLOBAL 'os system' written by hand
        with zipfile.ZipFile(os.path.join(d, "evil2.pt"), "w") as out:
            out.writestr("evil2/data.pkl", b"\x80\x02cos\nsystem\nX\x02\x00\x00\x00id\x85R.")
            out.writestr("evil2/version", b"3\n")
        # weights.pt: what torch 1.13's weights_only loader takes (tensors, ints, str; no floats)
        torch.save({"model": state(True)["model"], "iteration": 100, "name": "x"}, os.path.join(d, "weights.pt"))
        # a protocol 4 pickle of plain data (STACK_GLOBAL, MEMOIZE, FRAME, sets)
        buf = io.BytesIO()
        torch.save(state(True), buf, pickle_protocol=4)
        open(os.path.join(d, "proto4.pt"), "wb").write(buf.getvalue())
        return
    if cmd == "check":
        # several checks in one interpreter (torch's import is the slow part):
        # each spec dump:NAME or load:NAME:W; a TAP line for each
        bad = 0  # noqa: F841
        for spec in sys.argv[3:]:
            parts = spec.split(":")
            label = ("read %s.pt" if parts[0] == "dump" else "write %s.out.pt") % parts[1]
            if parts[0] == "load":
                label += " (weights_only=%s)" % parts[2]
            try:
                print("ok - %s: %s" % (label, check(parts[0], d, parts[1], parts[2:])))
            except (SystemExit, Exception) as e:  # noqa: BLE001 - every failure is reported, then the next case
                print("not ok - %s\n#   %s" % (label, e))
                bad += 1
        sys.exit(0)  # the failures are the "not ok" lines; a crash exits non-zero
    print(check(cmd, d, sys.argv[3], sys.argv[4:]))


def check(cmd, d, name, rest):
    """One dump or load check; its one-line result, or SystemExit with the reason."""
    ref = torch.load(os.path.join(d, name + ".pt"))
    if cmd == "dump":
        ours = json.load(open(os.path.join(d, name + ".json")))
        d1 = diff(strip(ours), enc(ref))
        if d1:
            sys.exit("reader differs: " + d1)
        # the views of one storage share it in our tree too
        keys = {n: find_tensor(ours, n)["storage"] for n in ("half_a", "half_b", "column", "transposed",
                                                               "embedding.word_embeddings.weight")}
        if not (keys["half_a"] == keys["half_b"] == keys["column"]) or \
                keys["transposed"] != keys["embedding.word_embeddings.weight"] or keys["half_a"] == keys["transposed"]:
            sys.exit(f"storage sharing lost: {keys}")
        return f"{len(json.dumps(ours))} bytes of JSON equal torch.load's values"
    elif cmd == "load":
        weights_only = rest[0] == "1"
        out = torch.load(os.path.join(d, name + ".out.pt"), weights_only=weights_only) if weights_only else \
            torch.load(os.path.join(d, name + ".out.pt"))
        d1 = diff(enc(out), enc(ref))
        if d1:
            sys.exit("written file differs: " + d1)
        m = out["model"]
        if "half_a" in m and m["half_a"].storage().data_ptr() != m["half_b"].storage().data_ptr():
            sys.exit("written file: half_a and half_b no longer share a storage")
        with zipfile.ZipFile(os.path.join(d, name + ".out.pt")) as z:
            bad = [i.filename for i in z.infolist() if i.compress_type != 0]
            names = [i.filename for i in z.infolist()]
            if bad or names[0] != name + ".out/data.pkl" or z.read(name + ".out/version") != b"3\n":
                sys.exit(f"zip layout: {names}")
            raw = open(os.path.join(d, name + ".out.pt"), "rb").read()
            for i in z.infolist():
                nlen, xlen = int.from_bytes(raw[i.header_offset + 26:i.header_offset + 28], "little"), \
                    int.from_bytes(raw[i.header_offset + 28:i.header_offset + 30], "little")
                start = i.header_offset + 30 + nlen + xlen
                if "/data/" in i.filename and start % 64:
                    sys.exit(f"{i.filename} starts at byte {start}, not 64-byte aligned")
        return (f"torch.load{' (weights_only)' if weights_only else ''} gives the same values, storages shared, "
                f"members stored and aligned")
    sys.exit("unknown check " + cmd)


if __name__ == "__main__":
    main()
