"""megatron_ckpt_check.py - a legacy Megatron checkpoint (ckpt_convert --to
megatron) read with torch.load and put together again by Megatron's own
tensor-parallel rules, written out here independently of megac:

    megatron_ckpt_check.py MEGATRON_DIR MEGAC_DIR TP PP DTYPE

- every rank file iter_N/mp_rank_TT[_PPP]/model_optim_rng.pt loads with
  torch.load and holds args (an argparse.Namespace whose TP/PP sizes are the
  layout's), checkpoint_version 3.0 and the iteration;
- the shards joined along Megatron's split dimension (rows of the column-
  parallel linear_qkv, linear_fc1 -- each rank's [gate; up] halves for
  SwiGLU -- the word embeddings and output layer; columns of the row-parallel
  linear_proj and linear_fc2; the rest replicated and equal on every rank),
  the layers renumbered by stage, equal megac's global tensors (h5py), cast
  to DTYPE; vocabulary rows past megac's are zero;
- every Transformer Engine module has an empty uint8 _extra_state;
- with tied embeddings and PP > 1, the last stage's output_layer.weight is
  the first stage's word embeddings.
"""
import argparse
import glob
import os
import re
import sys

import h5py
import numpy as np
import torch

mdir, cdir, tp, pp, dtype = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), sys.argv[5]
it = open(os.path.join(mdir, "latest_checkpointed_iteration.txt")).read().strip()
cit = open(os.path.join(cdir, "latest_checkpointed_iteration.txt")).read().strip()
idir = os.path.join(mdir, "iter_%07d" % int(it))
files = sorted(glob.glob(os.path.join(idir, "mp_rank_*", "model_optim_rng.pt")))
assert len(files) == tp * pp, files

ROWS = ("linear_qkv.weight", "linear_qkv.bias", "linear_fc1.weight", "linear_fc1.bias",
        "word_embeddings.weight", "output_layer.weight")
COLS = ("linear_proj.weight", "linear_fc2.weight")
TE = ("linear_qkv", "linear_proj", "linear_fc1", "linear_fc2", "core_attention")

sd = {}
for t in range(tp):
    for s in range(pp):
        name = "mp_rank_%02d" % t + ("_%03d" % s if pp > 1 else "")
        sd[t, s] = torch.load(os.path.join(idir, name, "model_optim_rng.pt"), map_location="cpu")
        st = sd[t, s]
        assert isinstance(st["args"], argparse.Namespace)
        a = st["args"]
        assert a.tensor_model_parallel_size == tp and a.pipeline_model_parallel_size == pp, vars(a)
        assert st["checkpoint_version"] == 3.0 and st["iteration"] == int(it), (st["checkpoint_version"], st["iteration"])

args = sd[0, 0]["args"]
L = args.num_layers
per = L // pp
swiglu = args.swiglu
want_dt = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}[dtype]

# the global tensors, joined from the shards
glob_t = {}
extra = 0
for s in range(pp):
    keys = sd[0, s]["model"].keys()
    for t in range(tp):
        assert sd[t, s]["model"].keys() == keys, "rank files of a stage hold other names"
    for k in keys:
        shards = [sd[t, s]["model"][k] for t in range(tp)]
        if k.endswith("._extra_state"):
            mod = k.split(".")[-2]
            assert mod in TE, k
            for x in shards:
                assert x.dtype == torch.uint8 and x.numel() == 0, (k, x)
            extra += 1
            continue
        for x in shards:
            assert x.dtype == want_dt, (k, x.dtype)
        g = re.sub(r"^decoder\.layers\.(\d+)\.", lambda m: "decoder.layers.%d." % (int(m.group(1)) + s * per), k)
        if k == "output_layer.weight" and s == pp - 1 and not args.untie_embeddings_and_output_weights:
            g = "tied output_layer.weight"
        if k.endswith(ROWS):
            if k.endswith("linear_fc1.weight") and swiglu or k.endswith("linear_fc1.bias") and swiglu:
                halves = [torch.chunk(x, 2, dim=0) for x in shards]
                full = torch.cat([h[0] for h in halves] + [h[1] for h in halves], dim=0)
            else:
                full = torch.cat(shards, dim=0)
        elif k.endswith(COLS):
            full = torch.cat(shards, dim=1)
        else:
            for x in shards[1:]:
                assert torch.equal(x, shards[0]), "replicated %s differs between TP ranks" % k
            full = shards[0]
        assert g not in glob_t, g
        glob_t[g] = full.float().numpy()

# every layer's modules have their extra state: 5 per layer
assert extra == 5 * L, (extra, L)

with h5py.File(os.path.join(cdir, "iter_%07d" % int(cit), "model.h5"), "r") as f:
    names = [n for n in f.keys()]
    seen = 0
    for n in names:
        ref = f[n][()]
        if f[n].attrs["dtype"].decode() != "float32":
            continue
        ref = torch.from_numpy(np.ascontiguousarray(ref)).to(want_dt).float().numpy()
        got = glob_t.get(n)
        assert got is not None, "megac's %s is not in the Megatron checkpoint" % n
        rows = ref.shape[0]
        assert got.shape[1:] == ref.shape[1:] and got.shape[0] >= rows, (n, got.shape, ref.shape)
        assert np.array_equal(got[:rows], ref), "%s differs" % n
        assert not got[rows:].any(), "%s: the padding rows are not zero" % n
        seen += 1
    tied = glob_t.get("tied output_layer.weight")
    if tied is not None:
        assert np.array_equal(tied, glob_t["embedding.word_embeddings.weight"]), "the tied copy differs"
    extra_names = set(glob_t) - set(names) - {"tied output_layer.weight"}
    assert not extra_names, extra_names
print("%d rank files, %d tensors equal megac's, %d extra states" % (len(files), seen, extra))
