"""make_big_index.py PREFIX N: a synthetic indexed dataset of N documents
(lengths 1..1999 from numpy's default_rng(5), about 1000 tokens each), written
in Megatron's indexed-dataset layout (docs/formats.md) with a sparse .bin (the tokens are never read
when building indices). For timing build_gpt_index on a large corpus."""
import sys

import numpy as np

prefix, n = sys.argv[1], int(sys.argv[2])
sizes = np.random.default_rng(5).integers(1, 2000, size=n, dtype=np.int32)
ptr = np.zeros(n, dtype=np.int64)
ptr[1:] = np.cumsum(sizes[:-1].astype(np.int64) * 2)
with open(prefix + ".idx", "wb") as f:
    f.write(b"MMIDIDX\x00\x00" + (1).to_bytes(8, "little") + bytes([8]))
    f.write(n.to_bytes(8, "little") + (n + 1).to_bytes(8, "little"))
    f.write(sizes.tobytes() + ptr.tobytes() + np.arange(n + 1, dtype=np.int64).tobytes())
with open(prefix + ".bin", "wb") as f:
    f.truncate(int(sizes.sum()) * 2)
print(int(sizes.sum()))
