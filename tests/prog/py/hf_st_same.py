"""hf_st_same.py A B [--skip KEY,...] - hf_same.py without torch: the safetensors files of
two Hugging Face folders hold the same tensors (names, dtypes, shapes and
bytes), read straight from the format (an 8-byte little-endian header
length, a JSON header of name -> dtype, shape, data_offsets, the data), and
config.json agrees on every key of A that B has too, but for those the
export writes as its own (torch_dtype, transformers_version, the token
ids) and the keys --skip names. Prints
"N tensors bitwise, K config keys equal"."""
import json
import os
import struct
import sys


def tensors(d):
    out = {}
    for f in sorted(os.listdir(d)):
        if not f.endswith(".safetensors"):
            continue
        with open(os.path.join(d, f), "rb") as h:
            n = struct.unpack("<Q", h.read(8))[0]
            head = json.loads(h.read(n))
            data = h.read()
        for k, v in head.items():
            if k == "__metadata__":
                continue
            b, e = v["data_offsets"]
            out[k] = (v["dtype"], v["shape"], data[b:e])
    return out


args = sys.argv[1:]
extra = set()
if len(args) == 4 and args[2] == "--skip":
    extra = set(args[3].split(","))
    args = args[:2]
assert len(args) == 2, "usage: hf_st_same.py A B [--skip KEY,...]"
a, b = tensors(args[0]), tensors(args[1])
assert sorted(a) == sorted(b), sorted(set(a) ^ set(b))
for k in a:
    assert a[k][:2] == b[k][:2], (k, a[k][:2], b[k][:2])
    assert a[k][2] == b[k][2], "%s: the values differ" % k
ca, cb = (json.load(open(os.path.join(d, "config.json"))) for d in args)
# the export's own: its dtype and writer, and the token ids, which it takes
# from a tokenizer (a checkpoint without one exports them as null)
skip = {"torch_dtype", "transformers_version", "_name_or_path", "bos_token_id", "eos_token_id"} | extra
diff = {k: (ca[k], cb[k]) for k in ca if k in cb and k not in skip and ca[k] != cb[k]}
assert not diff, diff
print("%d tensors bitwise, %d config keys equal" % (len(a), len([k for k in ca if k in cb and k not in skip])))
