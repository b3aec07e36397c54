"""st_rename.py SRC.safetensors OUT.safetensors PREFIX [BUFFER]: a copy of a
safetensors file with PREFIX removed from the front of every tensor name (as
OpenAI's GPT-2 files name them: wte.weight, h.0.attn.c_attn.weight), and with
BUFFER given, an extra float32 [1, 1, 4, 4] tensor of that name (the attn.bias
causal-mask buffers of older GPT-2 files). Written by hand, independently of lib/ckpt."""
import json
import struct
import sys

src, out, prefix = sys.argv[1:4]
buffer = sys.argv[4] if len(sys.argv) > 4 else None
raw = open(src, "rb").read()
n = struct.unpack("<Q", raw[:8])[0]
hdr = json.loads(raw[8:8 + n])
data = raw[8 + n:]
new, blob = {}, b""
for k, v in hdr.items():
    if k == "__metadata__":
        new[k] = v
        continue
    b = data[v["data_offsets"][0]:v["data_offsets"][1]]
    name = k[len(prefix):] if k.startswith(prefix) else k
    new[name] = dict(v, data_offsets=[len(blob), len(blob) + len(b)])
    blob += b
if buffer:
    new[buffer] = {"dtype": "F32", "shape": [1, 1, 4, 4], "data_offsets": [len(blob), len(blob) + 64]}
    blob += struct.pack("<16f", *([1.0] * 16))
h = json.dumps(new).encode()
h += b" " * (-len(h) % 8)
open(out, "wb").write(struct.pack("<Q", len(h)) + h + blob)
