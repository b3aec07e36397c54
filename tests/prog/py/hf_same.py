"""hf_same.py A B - two Hugging Face folders hold the same tensors (names,
dtypes, shapes, values bit for bit) and their config.json files agree on
every key A has, but for keys B adds. Prints "N tensors bitwise"."""
import json
import os
import sys

from safetensors.torch import load_file


def tensors(d):
    out = {}
    for f in sorted(os.listdir(d)):
        if f.endswith(".safetensors"):
            out.update(load_file(os.path.join(d, f)))
    return out


a, b = tensors(sys.argv[1]), tensors(sys.argv[2])
assert sorted(a) == sorted(b), sorted(set(a) ^ set(b))
for k in a:
    assert a[k].dtype == b[k].dtype and a[k].shape == b[k].shape and bool((a[k] == b[k]).all()), k
ca, cb = (json.load(open(os.path.join(d, "config.json"))) for d in sys.argv[1:3])
keys = ("architectures", "model_type", "hidden_size", "num_attention_heads", "num_key_value_heads",
        "head_dim", "intermediate_size", "num_hidden_layers", "rope_theta", "rope_scaling",
        "tie_word_embeddings", "use_sliding_window", "rms_norm_eps", "attention_bias")
diff = {k: (ca[k], cb.get(k)) for k in keys if k in ca and ca[k] != cb.get(k)}
assert not diff, diff
print("%d tensors bitwise" % len(a))
