"""hf_same.py A B - two Hugging Face folders hold the same tensors (names,
dtypes, shapes, values bit for bit) and their config.json files agree on
every key A has, but for keys B adds. Prints "N tensors bitwise".
The .safetensors files are read as the format lays them out (an 8-byte
little-endian header length, a JSON header of each tensor's dtype, shape and
byte range, then the bytes), so that no framework need be imported."""
import json
import os
import struct
import sys


def tensors(d):
    """name -> (dtype, shape, bytes) over every .safetensors file of folder d."""
    out = {}
    for f in sorted(os.listdir(d)):
        if f.endswith(".safetensors"):
            with open(os.path.join(d, f), "rb") as fh:
                n = struct.unpack("<Q", fh.read(8))[0]
                head = json.loads(fh.read(n))
                data = fh.read()
            for k, v in head.items():
                if k != "__metadata__":
                    lo, hi = v["data_offsets"]
                    assert 0 <= lo <= hi <= len(data), (f, k, v["data_offsets"], len(data))
                    out[k] = (v["dtype"], tuple(v["shape"]), data[lo:hi])
    return out


a, b = tensors(sys.argv[1]), tensors(sys.argv[2])
assert sorted(a) == sorted(b), sorted(set(a) ^ set(b))
for k in a:
    assert a[k] == b[k], (k, a[k][:2], b[k][:2])
ca, cb = (json.load(open(os.path.join(d, "config.json"))) for d in sys.argv[1:3])
keys = ("architectures", "model_type", "hidden_size", "num_attention_heads", "num_key_value_heads",
        "head_dim", "intermediate_size", "num_hidden_layers", "rope_theta", "rope_scaling",
        "tie_word_embeddings", "use_sliding_window", "rms_norm_eps", "attention_bias")
diff = {k: (ca[k], cb.get(k)) for k in keys if k in ca and ca[k] != cb.get(k)}
assert not diff, diff
print("%d tensors bitwise" % len(a))
