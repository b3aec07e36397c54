"""torch_ref.py - an independent PyTorch reference of Megatron-LM's GPT pretraining math.

Written from the specs in shared/spec (training-args.md, checkpoint.md, gpt-dataset.md,
indexed-dataset.md), not from megac's C code, so that `train` can be compared against it.
Run with Debian's /usr/bin/python3 (torch, numpy, h5py).

Modes
  torch_ref.py TRAIN-FLAGS... --ref-model M.h5 [--dump-grads DIR] [--ref-save OUT.h5]
      Trains on the train split exactly as Megatron (TP=PP=DP=1, fp32, no dropout) would and
      prints one JSON line per iteration on stdout:
        {"iteration": 1, "lm loss": 10.83, "grad norm": 1.93, "learning rate": 0.0001}
      "lm loss" = sum(loss*mask)/sum(mask) over the global batch; "grad norm" = L2 norm of
      all gradients before clipping; "learning rate" = lr(iteration*gbs), the value
      Megatron's log line for that iteration shows (the LR of the next iteration).
      --dump-grads DIR writes the iteration-1 gradients (before clipping) as DIR/<name>.npy.
      --ref-save OUT.h5 writes the weights after the last iteration, same names as --ref-model.
  torch_ref.py MODEL-FLAGS... TOKENIZER-FLAGS... --write-init-model OUT.h5 [--seed N]
      Writes a random Megatron-style initial model (N(0,std); linear_proj/linear_fc2 with
      std/sqrt(2L); biases 0; norms 1/0) with the padded vocabulary of the tokenizer flags.
  torch_ref.py --self-test
      Checks the reference against itself and the specs on tiny synthetic inputs: the .idx
      reader and sample assembly (spec worked examples), the LR schedule, AdamW against
      torch.optim.AdamW, a second unfused per-head formulation of the whole forward
      (fused QKV per query group, GQA, RoPE, masks, SwiGLU), and gradients against central
      finite differences in float64. Prints "ok - ..." lines; exits 1 on any failure.

Flags are Megatron's (argparse, no abbreviations); flags that do not change the math are
ignored and listed on stderr; flags that would change it but are not implemented here
are refused. --hidden-dropout 0 --attention-dropout 0 must be given (Megatron defaults 0.1).
Reference-only flags: --ref-model, --ref-save, --dump-grads, --write-init-model, --eod-id,
--pad-id, --ref-dtype float32|float64 (the whole computation in float64), --ref-causal-only,
--self-test. TORCH_REF_VERBOSE=1 prints the measured differences of every self-test check.

Semantics worth knowing:
- A line is printed for every iteration whatever --log-interval is (Megatron averages
  "lm loss" over the logging interval; compare with --log-interval 1).
- --reset-attention-mask applies the dataset's document mask in attention (Megatron's
  local transformer implementation). Megatron's default Transformer-Engine layers use
  attn_mask_type=causal and ignore that mask (NVIDIA/Megatron-LM issue 2357);
  --ref-causal-only reproduces that behaviour.
- Any data-parallel size gives the same gradient as DP=1 with the same micro-batch size
  (the global batch's micro-batches are the same contiguous blocks of mbs samples).
"""
import argparse
import glob
import json
import math
import os
import sys
import tempfile

import numpy as np
import torch
import torch.nn.functional as F

LEGACY_SPLIT = "969, 30, 1"


def die(msg):
    sys.stderr.write("torch_ref.py: " + msg + "\n")
    sys.exit(2)


# --------------------------------------------------------------------------- flags

def str2bool_flag(p, name, **kw):
    p.add_argument(name, action="store_true", **kw)


def build_parser():
    p = argparse.ArgumentParser(prog="torch_ref.py", allow_abbrev=False, add_help=True)
    a = p.add_argument
    # model
    a("--num-layers", type=int)
    a("--hidden-size", type=int)
    a("--ffn-hidden-size", type=int)
    a("--num-attention-heads", type=int)
    a("--kv-channels", type=int)
    str2bool_flag(p, "--group-query-attention")
    a("--num-query-groups", type=int, default=1)
    a("--seq-length", type=int)
    a("--max-position-embeddings", type=int)
    a("--position-embedding-type", default="learned_absolute", choices=["learned_absolute", "rope"])
    a("--rotary-base", type=int, default=10000)
    a("--rotary-percent", type=float, default=1.0)
    a("--normalization", default="LayerNorm", choices=["LayerNorm", "RMSNorm"])
    a("--norm-epsilon", type=float, default=1e-5)
    str2bool_flag(p, "--swiglu")
    str2bool_flag(p, "--disable-bias-linear")
    str2bool_flag(p, "--add-qkv-bias")
    str2bool_flag(p, "--no-bias-gelu-fusion")
    str2bool_flag(p, "--untie-embeddings-and-output-weights")
    a("--init-method-std", type=float, default=0.02)
    a("--embedding-init-method-std", type=float, default=None)
    a("--hidden-dropout", type=float, default=0.1)
    a("--attention-dropout", type=float, default=0.1)
    a("--make-vocab-size-divisible-by", type=int, default=128)
    a("--tensor-model-parallel-size", type=int, default=1)
    # training
    a("--micro-batch-size", type=int)
    a("--global-batch-size", type=int)
    a("--train-iters", type=int)
    a("--exit-interval", type=int)
    a("--optimizer", default="adam")
    a("--lr", type=float)
    a("--min-lr", type=float, default=0.0)
    a("--lr-decay-style", default="linear", choices=["constant", "linear", "cosine", "inverse-square-root", "WSD"])
    a("--lr-wsd-decay-style", default="exponential", choices=["exponential", "linear", "cosine", "minus_sqrt"])
    a("--lr-wsd-decay-iters", type=int)
    a("--lr-warmup-iters", type=int, default=0)
    a("--lr-warmup-fraction", type=float)
    a("--lr-warmup-init", type=float, default=0.0)
    a("--lr-decay-iters", type=int)
    a("--weight-decay", type=float, default=0.01)
    a("--weight-decay-incr-style", default="constant")
    a("--adam-beta1", type=float, default=0.9)
    a("--adam-beta2", type=float, default=0.999)
    a("--adam-eps", type=float, default=1e-8)
    a("--clip-grad", type=float, default=1.0)
    str2bool_flag(p, "--eod-mask-loss")
    str2bool_flag(p, "--reset-position-ids")
    str2bool_flag(p, "--reset-attention-mask")
    str2bool_flag(p, "--no-create-attention-mask-in-dataloader")
    a("--seed", type=int, default=1234)
    # data
    a("--data-path", nargs="+")
    a("--data-cache-path")
    a("--split")
    # tokenizer (only for the EOD / pad ids and the vocabulary size)
    a("--tokenizer-type")
    a("--vocab-file")
    a("--merge-file")
    a("--tokenizer-model")
    a("--vocab-size", type=int)
    a("--null-tokenizer-eod-id", type=int)
    a("--null-tokenizer-pad-id", type=int, default=-1)
    # reference-only
    a("--ref-model")
    a("--ref-save")
    a("--dump-grads")
    a("--write-init-model")
    a("--eod-id", type=int)
    a("--pad-id", type=int)
    a("--ref-dtype", default="float32", choices=["float32", "float64"])
    str2bool_flag(p, "--ref-causal-only")
    str2bool_flag(p, "--self-test")
    return p


# flags that change the math and are not implemented here: refused rather than ignored
REFUSED = {
    "--fp16", "--bf16", "--apply-layernorm-1p", "--qk-layernorm", "--rotary-interleaved",
    "--use-rope-scaling", "--rotary-seq-len-interpolation-factor", "--squared-relu",
    "--quick-geglu", "--apply-residual-connection-post-layernorm", "--calculate-per-token-loss",
    "--decoupled-lr", "--decoupled-min-lr", "--train-samples", "--lr-decay-samples",
    "--lr-warmup-samples", "--lr-wsd-decay-samples", "--start-weight-decay", "--end-weight-decay",
    "--num-experts", "--mock-data", "--train-data-path", "--valid-data-path", "--test-data-path",
    "--data-args-path", "--per-split-data-args-path", "--dataloader-inter-document-masking",
    "--step-batch-size-schedule", "--mtp-num-layers", "--multi-latent-attention", "--load",
    "--finetune", "--pretrained-checkpoint", "--padded-vocab-size", "--no-pad-vocab-size",
    "--init-method-xavier-uniform", "--sft", "--apply-query-key-layer-scaling",
    "--embedding-multiplier", "--window-size",
}


def parse_args(argv):
    args, rest = build_parser().parse_known_args(argv)
    bad = [r.split("=")[0] for r in rest if r.split("=")[0] in REFUSED]
    if bad:
        die("not implemented by the reference (would change the math): " + " ".join(bad))
    ignored = [r for r in rest if r.startswith("--")]
    if ignored:
        sys.stderr.write("torch_ref.py: ignoring " + " ".join(ignored) + "\n")
    return args


class Cfg:
    """Resolved model configuration (Megatron's derived defaults applied)."""


def model_config(args, vocab_padded=None):
    c = Cfg()
    for name in ("num_layers", "hidden_size", "num_attention_heads", "seq_length"):
        if getattr(args, name) is None:
            die("--" + name.replace("_", "-") + " is required")
    c.L, c.h, c.a, c.S = args.num_layers, args.hidden_size, args.num_attention_heads, args.seq_length
    if args.kv_channels is None and c.h % c.a:
        die("--hidden-size must be divisible by --num-attention-heads (or give --kv-channels)")
    c.k = args.kv_channels if args.kv_channels is not None else c.h // c.a
    c.g = args.num_query_groups if args.group_query_attention else c.a
    if c.a % c.g:
        die("--num-attention-heads must be divisible by --num-query-groups")
    c.m = c.a // c.g
    c.swiglu = args.swiglu
    if args.ffn_hidden_size is not None:
        c.f = args.ffn_hidden_size
    elif c.swiglu:
        c.f = int((4 * c.h * 2 / 3) / 64) * 64
    else:
        c.f = 4 * c.h
    c.bias = not args.disable_bias_linear
    c.qkv_bias = c.bias or args.add_qkv_bias
    # bias-GELU fusion (tanh approximation) is on by default; validate_args turns it off
    # without biases, and --no-bias-gelu-fusion turns it off too: then exact erf GELU.
    c.gelu = "tanh" if (c.bias and not args.no_bias_gelu_fusion) else "erf"
    c.pos = args.position_embedding_type
    if args.max_position_embeddings is None:
        die("--max-position-embeddings is required")
    c.P = args.max_position_embeddings
    if c.pos == "learned_absolute" and c.P < c.S:
        die("--max-position-embeddings must be >= --seq-length")
    c.rotary_base = args.rotary_base
    c.rot = int(c.k * args.rotary_percent)
    if c.pos == "rope" and (c.rot % 2 or c.rot <= 0):
        die("the rotary dimension int(kv_channels*rotary_percent) must be even and positive")
    c.norm = args.normalization
    c.eps = args.norm_epsilon
    c.untie = args.untie_embeddings_and_output_weights
    c.V = vocab_padded
    return c


# --------------------------------------------------------------------------- indexed dataset

DTYPES = {1: np.uint8, 2: np.int8, 3: np.int16, 4: np.int32, 5: np.int64, 6: np.float64,
          7: np.float32, 8: np.uint16}


class IndexedDataset:
    """PREFIX.idx / PREFIX.bin read with numpy (indexed-dataset.md §3-§5)."""

    def __init__(self, prefix):
        idx = np.fromfile(prefix + ".idx", dtype=np.uint8)
        if idx[:9].tobytes() != b"MMIDIDX\x00\x00":
            die(prefix + ".idx: bad magic")
        version = int(idx[9:17].view("<u8")[0])
        if version != 1:
            die(prefix + ".idx: version %d" % version)
        self.dtype = np.dtype(DTYPES[int(idx[17])]).newbyteorder("<")
        n = int(idx[18:26].view("<u8")[0])
        d1 = int(idx[26:34].view("<u8")[0])
        o = 34
        self.lengths = idx[o:o + 4 * n].view("<i4")
        o += 4 * n
        self.pointers = idx[o:o + 8 * n].view("<i8")
        o += 8 * n
        self.doc_indices = idx[o:o + 8 * d1].view("<i8")
        if len(self.doc_indices) != d1 or self.doc_indices[-1] != n:
            die(prefix + ".idx: document indices do not end at the sequence count")
        self.bin = np.memmap(prefix + ".bin", dtype=self.dtype, mode="r")

    def get(self, i, offset=0, length=None):
        if length is None:
            length = int(self.lengths[i]) - offset
        start = int(self.pointers[i]) // self.dtype.itemsize + offset
        return np.asarray(self.bin[start:start + length])


# --------------------------------------------------------------------------- GPT samples

def find_train_cache(args, prefix, num_samples):
    """The train split's GPTDataset index caches (gpt-dataset.md §8): in --data-cache-path,
    else PREFIX/cache/GPTDataset_indices; among the <md5>-GPTDataset-train-description.txt
    files there, the one whose description names this dataset, index_split "train", our
    seed, seq length, raw --split string and train_iters*gbs samples."""
    cache = args.data_cache_path or os.path.join(prefix, "cache", "GPTDataset_indices")
    split = args.split if args.split is not None else LEGACY_SPLIT
    found, seen = [], []
    for desc in sorted(glob.glob(os.path.join(cache, "*-GPTDataset-train-description.txt"))):
        try:
            d = json.load(open(desc))
        except ValueError:
            continue
        seen.append("%s (%s, %s samples, seq %s, seed %s, split %r)" % (
            os.path.basename(desc), d.get("dataset_path"), d.get("num_samples"),
            d.get("sequence_length"), d.get("random_seed"), d.get("split")))
        path = d.get("dataset_path", "")
        same_path = path == prefix or os.path.realpath(path) == os.path.realpath(prefix)
        if (d.get("class") == "GPTDataset" and d.get("index_split") == "train" and same_path
                and d.get("num_samples") == num_samples and d.get("random_seed") == args.seed
                and d.get("sequence_length") == args.seq_length and d.get("split") == split):
            found.append(desc[:-len("description.txt")])
    if len(found) != 1:
        die("%s train index cache for %s (seq %d, seed %d, split %r, %d samples) in %s; seen: %s" % (
            "no" if not found else "more than one", prefix, args.seq_length, args.seed, split,
            num_samples, cache, "; ".join(seen) or "nothing"))
    base = found[0]
    out = {}
    for part in ("document_index", "sample_index", "shuffle_index"):
        f = base + part + ".npy"
        if not os.path.isfile(f):
            die("missing " + f)
        out[part] = np.load(f, mmap_mode="r")
    return out


def ltor_masks(tokens, eod, reset_position_ids, reset_attention_mask, eod_mask_loss):
    """Loss mask, position ids and attention mask (True = masked) from the input tokens
    (gpt-dataset.md §6.1), written from the spec's table."""
    S = len(tokens)
    loss_mask = np.ones(S, dtype=np.float32)
    if eod_mask_loss:
        loss_mask[tokens == eod] = 0.0
    pos = np.arange(S, dtype=np.int64)
    doc = np.zeros(S, dtype=np.int64)  # document number of each position
    if reset_position_ids or reset_attention_mask:
        start = 0
        d = 0
        for i in range(S):
            doc[i] = d
            if reset_position_ids:
                pos[i] = i - start
            if tokens[i] == eod:
                start, d = i + 1, d + 1
    q = np.arange(S)[:, None]
    kk = np.arange(S)[None, :]
    masked = kk > q
    if reset_attention_mask:
        masked = masked | (doc[:, None] != doc[None, :])
    return loss_mask, pos, masked


class GPTSamples:
    def __init__(self, ds, index, S, eod, pad, reset_position_ids, reset_attention_mask, eod_mask_loss):
        self.ds, self.S, self.eod, self.pad = ds, S, eod, pad
        self.doc = index["document_index"]
        self.sample = index["sample_index"]
        self.shuffle = index["shuffle_index"]
        self.flags = (reset_position_ids, reset_attention_mask, eod_mask_loss)

    def __len__(self):
        return len(self.shuffle)

    def text(self, k):
        j = int(self.shuffle[k])
        p0, o0 = (int(v) for v in self.sample[j])
        p1, o1 = (int(v) for v in self.sample[j + 1])
        if p0 == p1:
            parts = [self.ds.get(int(self.doc[p0]), o0, o1 - o0 + 1)]
        else:
            parts = [self.ds.get(int(self.doc[p0]), o0)]
            parts += [self.ds.get(int(self.doc[p])) for p in range(p0 + 1, p1)]
            parts.append(self.ds.get(int(self.doc[p1]), 0, o1 + 1))
        text = np.concatenate(parts).astype(np.int64)
        if len(text) < self.S + 1:
            if self.pad is None:
                die("sample %d is short and the tokenizer has no pad id" % k)
            text = np.concatenate([text, np.full(self.S + 1 - len(text), self.pad, np.int64)])
        return text

    def __getitem__(self, k):
        text = self.text(k)
        tokens, labels = text[:-1].copy(), text[1:].copy()
        loss_mask, pos, masked = ltor_masks(tokens, self.eod, *self.flags)
        if self.pad is not None:
            loss_mask[labels == self.pad] = 0.0
            tokens[tokens == self.pad] = 0
            labels[labels == self.pad] = 0
        return {"tokens": tokens, "labels": labels, "loss_mask": loss_mask,
                "position_ids": pos, "attention_mask": masked}


def collate(samples):
    return {key: torch.from_numpy(np.stack([s[key] for s in samples])) for key in samples[0]}


# --------------------------------------------------------------------------- tokenizer ids

def tokenizer_ids(args):
    """(vocab_size, eod, pad) from the tokenizer flags; any may be None when unknown.
    pad None = no pad masking (GPT-2: the tokenizer has no pad)."""
    t = args.tokenizer_type
    vocab = eod = None
    pad = None
    if t == "GPT2BPETokenizer" and args.vocab_file:
        enc = json.load(open(args.vocab_file, encoding="utf-8"))
        vocab, eod = len(enc), enc.get("<|endoftext|>")
    elif t == "NullTokenizer" and args.vocab_size is not None:
        vocab = args.vocab_size
        eod = args.null_tokenizer_eod_id if args.null_tokenizer_eod_id is not None else vocab - 1
        pad = args.null_tokenizer_pad_id
        if pad == eod:
            pad = -1  # a pad colliding with a special id is replaced by -1 (never in data)
    elif t == "HuggingFaceTokenizer" and args.tokenizer_model:
        d = args.tokenizer_model
        tj = os.path.join(d, "tokenizer.json") if os.path.isdir(d) else d
        cj = os.path.join(os.path.dirname(tj), "tokenizer_config.json")
        tok = json.load(open(tj, encoding="utf-8"))
        ids = dict(tok.get("model", {}).get("vocab", {}) or {})
        for at in tok.get("added_tokens", []):
            ids[at["content"]] = at["id"]
        vocab = len(set(ids.values()))
        conf = json.load(open(cj, encoding="utf-8")) if os.path.isfile(cj) else {}

        def tid(key):
            v = conf.get(key)
            if isinstance(v, dict):
                v = v.get("content")
            return ids.get(v) if v is not None else None
        eod = tid("eos_token")
        if eod is None:
            eod = tid("sep_token")
        pad = tid("pad_token")
        # MegatronTokenizerText has no special_tokens_dict, so the dataset's collision
        # check compares the pad id with eos and eod only
        if pad is not None and pad in (tid("eos_token"), eod):
            pad = -1
    if args.eod_id is not None:
        eod = args.eod_id
    if args.pad_id is not None:
        pad = args.pad_id
    return vocab, eod, pad


# --------------------------------------------------------------------------- model

def param_shapes(c):
    """Megatron Core TE-spec names and global shapes, in registration order."""
    out = [("embedding.word_embeddings.weight", (c.V, c.h))]
    if c.pos == "learned_absolute":
        out.append(("embedding.position_embeddings.weight", (c.P, c.h)))
    ln_bias = c.norm == "LayerNorm"
    for n in range(c.L):
        pre = "decoder.layers.%d." % n
        out.append((pre + "self_attention.linear_qkv.layer_norm_weight", (c.h,)))
        if ln_bias:
            out.append((pre + "self_attention.linear_qkv.layer_norm_bias", (c.h,)))
        out.append((pre + "self_attention.linear_qkv.weight", ((c.a + 2 * c.g) * c.k, c.h)))
        if c.qkv_bias:
            out.append((pre + "self_attention.linear_qkv.bias", ((c.a + 2 * c.g) * c.k,)))
        out.append((pre + "self_attention.linear_proj.weight", (c.h, c.a * c.k)))
        if c.bias:
            out.append((pre + "self_attention.linear_proj.bias", (c.h,)))
        out.append((pre + "mlp.linear_fc1.layer_norm_weight", (c.h,)))
        if ln_bias:
            out.append((pre + "mlp.linear_fc1.layer_norm_bias", (c.h,)))
        f1 = 2 * c.f if c.swiglu else c.f
        out.append((pre + "mlp.linear_fc1.weight", (f1, c.h)))
        if c.bias:
            out.append((pre + "mlp.linear_fc1.bias", (f1,)))
        out.append((pre + "mlp.linear_fc2.weight", (c.h, c.f)))
        if c.bias:
            out.append((pre + "mlp.linear_fc2.bias", (c.h,)))
    out.append(("decoder.final_layernorm.weight", (c.h,)))
    if ln_bias:
        out.append(("decoder.final_layernorm.bias", (c.h,)))
    if c.untie:
        out.append(("output_layer.weight", (c.V, c.h)))
    return out


class TanhGeluFn(torch.autograd.Function):
    """Megatron's fused bias-GELU: tanh approximation forward, and its own backward
    formula (constant 0.1070322243), training-args.md §1.1."""

    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return x * 0.5 * (1.0 + torch.tanh(0.79788456 * x * (1 + 0.044715 * x * x)))

    @staticmethod
    def backward(ctx, g):
        (x,) = ctx.saved_tensors
        t = torch.tanh(0.79788456 * x * (1 + 0.044715 * x * x))
        ff = 0.5 * x * ((1 - t * t) * (0.79788456 + 0.1070322243 * x * x)) + 0.5 * (1 + t)
        return ff * g


def norm(x, w, b, c):
    if c.norm == "RMSNorm":
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + c.eps) * w
    return F.layer_norm(x, (x.shape[-1],), w, b, c.eps)


def rope_cos_sin(c, S, dtype):
    """cos/sin [S, rot] of the rotate-half RoPE; frequencies in fp32 as Megatron computes
    them: inv_freq = 1/(base**(arange(0,d,2)/d)), positions 0..S-1, cat(freqs, freqs)."""
    d = c.rot
    inv_freq = 1.0 / (c.rotary_base ** (torch.arange(0, d, 2, dtype=torch.float32) / d))
    freqs = torch.outer(torch.arange(S, dtype=torch.float32), inv_freq)
    emb = torch.cat((freqs, freqs), dim=-1)
    return torch.cos(emb).to(dtype), torch.sin(emb).to(dtype)


def apply_rope(t, cos, sin, d):
    """t [b, s, heads, k]; rotate the first d channels of every head."""
    rot, rest = t[..., :d], t[..., d:]
    x1, x2 = rot[..., : d // 2], rot[..., d // 2:]
    rotated = torch.cat((-x2, x1), dim=-1)
    cos, sin = cos[None, :, None, :], sin[None, :, None, :]
    return torch.cat((rot * cos + rotated * sin, rest), dim=-1)


def attention(x, P, pre, c, rope, mask):
    """Fused-QKV self-attention. x [b, s, h] (already normed); mask [b, s, s] True = masked."""
    b, s, _ = x.shape
    qkv = F.linear(x, P[pre + "linear_qkv.weight"], P.get(pre + "linear_qkv.bias"))
    qkv = qkv.view(b, s, c.g, (c.m + 2) * c.k)           # rows grouped per query group
    q = qkv[..., : c.m * c.k].reshape(b, s, c.a, c.k)     # head G*m + j
    kt = qkv[..., c.m * c.k:(c.m + 1) * c.k]              # [b, s, g, k]
    v = qkv[..., (c.m + 1) * c.k:]
    if rope is not None:
        q = apply_rope(q, rope[0], rope[1], c.rot)
        kt = apply_rope(kt, rope[0], rope[1], c.rot)
    kt = kt.repeat_interleave(c.m, dim=2)                 # query head i uses group i // m
    v = v.repeat_interleave(c.m, dim=2)
    scores = torch.einsum("bqhd,bkhd->bhqk", q, kt) * (1.0 / math.sqrt(c.k))
    scores = scores.masked_fill(mask[:, None, :, :], float("-inf"))
    probs = torch.softmax(scores, dim=-1)
    ctx = torch.einsum("bhqk,bkhd->bqhd", probs, v).reshape(b, s, c.a * c.k)
    return F.linear(ctx, P[pre + "linear_proj.weight"], P.get(pre + "linear_proj.bias"))


def mlp(x, P, pre, c):
    y = F.linear(x, P[pre + "linear_fc1.weight"], P.get(pre + "linear_fc1.bias"))
    if c.swiglu:
        gate, up = torch.chunk(y, 2, dim=-1)
        y = F.silu(gate) * up
    elif c.gelu == "tanh":
        y = TanhGeluFn.apply(y)
    else:
        y = F.gelu(y)
    return F.linear(y, P[pre + "linear_fc2.weight"], P.get(pre + "linear_fc2.bias"))


def gpt_forward(P, c, batch, attention_fn=attention, mlp_fn=mlp):
    """Per-token cross-entropy [b, s] over the full padded vocabulary."""
    tokens = batch["tokens"]
    x = F.embedding(tokens, P["embedding.word_embeddings.weight"])
    if c.pos == "learned_absolute":
        x = x + F.embedding(batch["position_ids"], P["embedding.position_embeddings.weight"])
    rope = rope_cos_sin(c, tokens.shape[1], x.dtype) if c.pos == "rope" else None
    mask = batch["attention_mask"]
    if getattr(c, "causal_only", False):
        S = tokens.shape[1]
        mask = torch.triu(torch.ones(S, S, dtype=torch.bool), 1).expand(tokens.shape[0], S, S)
    for n in range(c.L):
        pre = "decoder.layers.%d." % n
        a = pre + "self_attention."
        hn = norm(x, P[a + "linear_qkv.layer_norm_weight"], P.get(a + "linear_qkv.layer_norm_bias"), c)
        x = x + attention_fn(hn, P, a, c, rope, mask)
        m = pre + "mlp."
        hn = norm(x, P[m + "linear_fc1.layer_norm_weight"], P.get(m + "linear_fc1.layer_norm_bias"), c)
        x = x + mlp_fn(hn, P, m, c)
    x = norm(x, P["decoder.final_layernorm.weight"], P.get("decoder.final_layernorm.bias"), c)
    w_out = P["output_layer.weight"] if c.untie else P["embedding.word_embeddings.weight"]
    logits = F.linear(x, w_out)
    V = logits.shape[-1]
    return F.cross_entropy(logits.reshape(-1, V), batch["labels"].reshape(-1), reduction="none").view(tokens.shape)


def step_objective(P, c, micro_batches, forward=gpt_forward, backward=True):
    """Megatron's train step objective: each micro-batch contributes
    (sum(loss*mask) / max(1, sum(mask))) / M; backward per micro-batch, grads accumulate.
    Returns (objective, sum(loss*mask) over the batch, sum(mask))."""
    M = len(micro_batches)
    obj, lsum, ntok = 0.0, 0.0, 0.0
    for mb in micro_batches:
        losses = forward(P, c, mb)
        mask = mb["loss_mask"].to(losses.dtype)
        s = torch.sum(losses.reshape(-1) * mask.reshape(-1))
        nt = float(mask.sum().item())
        o = s / max(1.0, nt) / M
        if backward:
            o.backward()
        obj += float(o.item())
        lsum += float(s.item())
        ntok += nt
    return obj, lsum, ntok


# --------------------------------------------------------------------------- optimizer

class LRSchedule:
    """Megatron's OptimizerParamScheduler learning rate (training-args.md §4); steps = samples."""

    def __init__(self, args, gbs):
        self.max, self.min, self.init = args.lr, args.min_lr, args.lr_warmup_init
        self.style, self.wsd_style = args.lr_decay_style, args.lr_wsd_decay_style
        self.D = (args.lr_decay_iters if args.lr_decay_iters is not None else args.train_iters) * gbs
        if args.lr_warmup_fraction is not None:
            self.W = args.lr_warmup_fraction * self.D
        else:
            self.W = args.lr_warmup_iters * gbs
        self.A = (args.lr_wsd_decay_iters or 0) * gbs
        if self.D <= 0:
            die("LR decay steps must be > 0")
        if self.W >= self.D:
            die("LR warmup steps must be < decay steps")
        if self.min > self.max or self.init > self.max:
            die("--min-lr and --lr-warmup-init must be <= --lr")
        if self.style == "WSD" and self.A <= 0:
            die("WSD needs --lr-wsd-decay-iters")

    def __call__(self, n):
        if self.W > 0 and n <= self.W:
            return self.init + ((self.max - self.init) * float(n) / float(self.W))
        if self.style == "constant":
            return self.max
        if n > self.D:
            return self.min
        if self.style == "inverse-square-root":
            return max(self.min, self.max * max(self.W, 1) ** 0.5 / (max(n, 1) ** 0.5))
        ratio = float(n - self.W) / float(self.D - self.W)
        if self.style == "linear":
            coeff = 1.0 - ratio
        elif self.style == "cosine":
            coeff = 0.5 * (math.cos(math.pi * ratio) + 1.0)
        else:  # WSD
            s0 = self.D - self.A
            if n <= s0:
                coeff = 1.0
            else:
                r = float(n - s0) / float(self.A)
                coeff = {"linear": lambda: 1.0 - r, "cosine": lambda: 0.5 * (math.cos(math.pi * r) + 1.0),
                         "exponential": lambda: 2.0 * math.pow(0.5, r) - 1.0,
                         "minus_sqrt": lambda: 1.0 - math.sqrt(r)}[self.wsd_style]()
        return self.min + coeff * (self.max - self.min)


def no_weight_decay(name, shape):
    return name.endswith(".bias") or len(shape) == 1


class AdamW:
    """torch.optim.AdamW's single-tensor update, written out; per-parameter weight decay
    multiplier 0 for biases and 1-D tensors (Megatron's default param groups)."""

    def __init__(self, P, names, b1, b2, eps):
        self.P, self.names, self.b1, self.b2, self.eps = P, names, b1, b2, eps
        self.m = {n: torch.zeros_like(P[n]) for n in names}
        self.v = {n: torch.zeros_like(P[n]) for n in names}
        self.t = 0

    @torch.no_grad()
    def step(self, lr, wd):
        self.t += 1
        bc1 = 1 - self.b1 ** self.t
        bc2 = 1 - self.b2 ** self.t
        for n in self.names:
            p, g, m, v = self.P[n], self.P[n].grad, self.m[n], self.v[n]
            decay = 0.0 if no_weight_decay(n, p.shape) else wd
            p.mul_(1 - lr * decay)
            m.mul_(self.b1).add_(g, alpha=1 - self.b1)
            v.mul_(self.b2).addcmul_(g, g, value=1 - self.b2)
            denom = (v.sqrt() / math.sqrt(bc2)).add_(self.eps)
            p.addcdiv_(m, denom, value=-(lr / bc1))


def grad_norm(P, names):
    return math.sqrt(sum(float(P[n].grad.double().pow(2).sum()) for n in names))


# --------------------------------------------------------------------------- model files

def load_model(path, c, dtype):
    import h5py
    shapes = param_shapes(c)
    want = dict(shapes)
    P = {}
    with h5py.File(path, "r") as f:
        have = set(k for k in f.keys() if not k.endswith("_extra_state"))
        missing = [n for n in want if n not in have]
        extra = sorted(have - set(want))
        if missing or extra:
            die("%s does not match the model flags: missing %s; unexpected %s" % (
                path, missing or "none", extra or "none"))
        for n, shape in shapes:
            a = np.asarray(f[n])
            if tuple(a.shape) != tuple(shape):
                die("%s: %s has shape %s, the flags give %s" % (path, n, a.shape, shape))
            P[n] = torch.from_numpy(a.astype(np.float32)).to(dtype).requires_grad_(True)
    return P, [n for n, _ in shapes]


def save_model(path, P, names):
    import h5py
    tmp = path + ".tmp"
    with h5py.File(tmp, "w") as f:
        for n in names:
            f.create_dataset(n, data=P[n].detach().to(torch.float32).numpy())
    os.replace(tmp, path)


def init_model(c, std, emb_std, seed, dtype=torch.float32):
    g = torch.Generator().manual_seed(seed)
    P = {}
    names = []
    for n, shape in param_shapes(c):
        names.append(n)
        if n.endswith("layer_norm_weight") or n == "decoder.final_layernorm.weight":
            t = torch.ones(shape, dtype=dtype)
        elif n.endswith("bias"):
            t = torch.zeros(shape, dtype=dtype)
        else:
            s = std
            if n.startswith("embedding."):
                s = emb_std
            elif n.endswith("linear_proj.weight") or n.endswith("linear_fc2.weight"):
                s = std / math.sqrt(2.0 * c.L)
            t = (torch.randn(shape, generator=g, dtype=torch.float64) * s).to(dtype)
        P[n] = t.requires_grad_(True)
    return P, names


def padded_vocab(vocab, args):
    mult = args.make_vocab_size_divisible_by * args.tensor_model_parallel_size
    return int(math.ceil(vocab / mult)) * mult


# --------------------------------------------------------------------------- training

def train(args):
    if args.hidden_dropout != 0 or args.attention_dropout != 0:
        die("the reference has no dropout: pass --hidden-dropout 0 --attention-dropout 0")
    if args.optimizer != "adam":
        die("only --optimizer adam is implemented")
    if args.weight_decay_incr_style != "constant":
        die("only --weight-decay-incr-style constant is implemented")
    if args.reset_attention_mask and args.no_create_attention_mask_in_dataloader:
        die("--reset-attention-mask requires the attention mask to be created")
    for name in ("micro_batch_size", "train_iters", "lr", "data_path", "ref_model"):
        if getattr(args, name) is None:
            die("--" + name.replace("_", "-") + " is required")
    if len(args.data_path) != 1:
        die("--data-path: one dataset prefix without weight only")
    dtype = torch.float64 if args.ref_dtype == "float64" else torch.float32
    mbs = args.micro_batch_size
    gbs = args.global_batch_size or mbs
    if gbs % mbs:
        die("--global-batch-size must be divisible by --micro-batch-size")
    M = gbs // mbs

    import h5py
    with h5py.File(args.ref_model, "r") as f:
        if "embedding.word_embeddings.weight" not in f:
            die(args.ref_model + ": no embedding.word_embeddings.weight")
        V = f["embedding.word_embeddings.weight"].shape[0]
    c = model_config(args, V)
    c.causal_only = args.ref_causal_only
    P, names = load_model(args.ref_model, c, dtype)

    _, eod, pad = tokenizer_ids(args)
    if eod is None and (args.eod_mask_loss or args.reset_position_ids or args.reset_attention_mask):
        die("the EOD id is unknown: give tokenizer flags or --eod-id")
    prefix = args.data_path[0]
    ds = IndexedDataset(prefix)
    index = find_train_cache(args, prefix, args.train_iters * gbs)
    samples = GPTSamples(ds, index, args.seq_length, eod, pad, args.reset_position_ids,
                         args.reset_attention_mask, args.eod_mask_loss)
    if len(samples) < args.train_iters * gbs:
        die("the train split has %d samples, %d needed" % (len(samples), args.train_iters * gbs))

    sched = LRSchedule(args, gbs)
    opt = AdamW(P, names, args.adam_beta1, args.adam_beta2, args.adam_eps)
    n = 0
    for it in range(args.train_iters):
        lr = sched(n)
        for name in names:
            P[name].grad = None
        mbs_list = []
        for mi in range(M):
            first = it * gbs + mi * mbs
            b = collate([samples[k] for k in range(first, first + mbs)])
            b["tokens"], b["labels"] = b["tokens"].long(), b["labels"].long()
            mbs_list.append(b)
        _, lsum, ntok = step_objective(P, c, mbs_list)
        lm_loss = lsum / ntok if ntok > 0 else float("nan")
        gn = grad_norm(P, names)
        if args.dump_grads and it == 0:
            os.makedirs(args.dump_grads, exist_ok=True)
            for name in names:
                np.save(os.path.join(args.dump_grads, name + ".npy"), P[name].grad.to(torch.float32).numpy())
        if args.clip_grad > 0:
            coeff = args.clip_grad / (gn + 1.0e-6)
            if coeff < 1.0:
                with torch.no_grad():
                    for name in names:
                        P[name].grad.mul_(coeff)
        opt.step(lr, args.weight_decay)
        n += gbs
        print(json.dumps({"iteration": it + 1, "lm loss": lm_loss, "grad norm": gn,
                          "learning rate": sched(n)}), flush=True)
        if args.exit_interval and (it + 1) % args.exit_interval == 0:
            break
    if args.ref_save:
        save_model(args.ref_save, P, names)


def write_init_model(args):
    vocab, _, _ = tokenizer_ids(args)
    if vocab is None:
        die("--write-init-model needs tokenizer flags that give the vocabulary size")
    c = model_config(args, padded_vocab(vocab, args))
    std = args.init_method_std
    emb_std = args.embedding_init_method_std if args.embedding_init_method_std is not None else std
    P, names = init_model(c, std, emb_std, args.seed)
    save_model(args.write_init_model, P, names)
    sys.stderr.write("torch_ref.py: wrote %s (padded vocab %d, %d tensors, %d parameters)\n" % (
        args.write_init_model, c.V, len(names), sum(P[n].numel() for n in names)))


# --------------------------------------------------------------------------- self-test

FAILS = []


def check(good, what, detail=""):
    """A TAP-style line; the detail (what was measured) on failure or with TORCH_REF_VERBOSE."""
    print(("ok - " if good else "not ok - ") + what)
    if not good:
        FAILS.append(what)
    if detail != "" and (not good or os.environ.get("TORCH_REF_VERBOSE")):
        print("#   " + str(detail).replace("\n", "\n#   "))


def write_idx(prefix, docs, dtype_code=8):
    """A text .bin/.idx pair, one sequence per document (indexed-dataset.md §3)."""
    dt = np.dtype(DTYPES[dtype_code])
    lengths = np.array([len(d) for d in docs], dtype="<i4")
    pointers = np.concatenate([[0], np.cumsum(lengths[:-1].astype(np.int64) * dt.itemsize)]).astype("<i8")
    doc_idx = np.arange(len(docs) + 1, dtype="<i8")
    with open(prefix + ".bin", "wb") as f:
        for d in docs:
            f.write(np.asarray(d, dtype=dt).tobytes())
    with open(prefix + ".idx", "wb") as f:
        f.write(b"MMIDIDX\x00\x00" + np.array([1], "<u8").tobytes() + bytes([dtype_code]))
        f.write(np.array([len(docs), len(docs) + 1], "<u8").tobytes())
        f.write(lengths.tobytes() + pointers.tobytes() + doc_idx.tobytes())


def selftest_data(tmp):
    # indexed-dataset.md §7: the 82-byte worked example
    hexdump = ("4d4d4944494458000001000000000000000802000000000000000300000000000000030000000300"
               "0000000000000000000006000000000000000000000000000000010000000000000002000000"
               "00000000")
    p = os.path.join(tmp, "ex")
    open(p + ".idx", "wb").write(bytes.fromhex(hexdump))
    open(p + ".bin", "wb").write(bytes.fromhex("883ce30350c4d001da0c50c4"))
    ds = IndexedDataset(p)
    good = (list(ds.lengths) == [3, 3] and list(ds.pointers) == [0, 6] and list(ds.doc_indices) == [0, 1, 2]
            and ds.dtype == np.dtype("<u2") and list(ds.get(1)) == [464, 3290, 50256]
            and list(ds.get(0, 1, 1)) == [995])
    check(good, "the .idx reader reads the spec's worked example")

    # gpt-dataset.md §10: samples from the spec's doc/sample/shuffle indices
    docs = [[100, 101, 102, 103, 0], [200, 201, 0], [300, 301, 302, 303, 304, 305, 0], [400, 401, 402, 0]]
    p = os.path.join(tmp, "g")
    write_idx(p, docs)
    ds = IndexedDataset(p)
    idx3 = {"document_index": np.array([0, 1, 2, 3], np.int32),
            "sample_index": np.array([[0, 0], [0, 4], [2, 0], [2, 4], [3, 1]], np.int32),
            "shuffle_index": np.array([1, 2, 3, 0], np.uint32)}
    s = GPTSamples(ds, idx3, 4, 0, None, False, False, False)
    got = [list(s.text(k)) for k in range(4)]
    want = [[0, 200, 201, 0, 300], [300, 301, 302, 303, 304], [304, 305, 0, 400, 401], [100, 101, 102, 103, 0]]
    check(got == want, "samples of the spec's N=3 example", got)
    idx6 = {"document_index": np.array([0, 1, 2, 3, 1, 2, 3, 0], np.int32),
            "sample_index": np.array([[0, 0], [0, 4], [2, 0], [2, 4], [3, 1], [4, 1], [5, 2], [5, 6], [6, 3], [7, 3]], np.int32),
            "shuffle_index": np.array([0, 2, 3, 1, 4, 8, 7, 6, 5], np.uint32)}
    s = GPTSamples(ds, idx6, 4, 0, None, False, False, False)
    got = [list(s.text(k)) for k in (0, 4, 8)]
    want = [[100, 101, 102, 103, 0], [401, 402, 0, 200, 201], [201, 0, 300, 301, 302]]
    check(got == want, "samples of the spec's N=6 example", got)
    s = GPTSamples(ds, idx3, 4, 0, None, True, True, True)
    x = s[0]
    good = (list(x["tokens"]) == [0, 200, 201, 0] and list(x["labels"]) == [200, 201, 0, 300]
            and list(x["loss_mask"]) == [0, 1, 1, 0] and list(x["position_ids"]) == [0, 0, 1, 2])
    am = x["attention_mask"]  # docs by position: 0 | 1 1 1 (EOD at 0 and 3)
    want_am = np.array([[0, 1, 1, 1], [1, 0, 1, 1], [1, 0, 0, 1], [1, 0, 0, 0]], bool)
    check(good and (am == want_am).all(), "EOD loss mask, position reset and document attention mask",
          (x, am.astype(int)))
    # a pad id that occurs in the data: masked in the loss, replaced by 0
    s = GPTSamples(ds, idx3, 4, 0, 201, False, False, False)
    x = s[0]
    check(list(x["loss_mask"]) == [1, 0, 1, 1] and list(x["tokens"]) == [0, 200, 0, 0]
          and list(x["labels"]) == [200, 0, 0, 300], "pad id masking and replacement", x)


def selftest_schedule():
    a = build_parser().parse_args(["--lr", "1e-3", "--min-lr", "1e-4", "--train-iters", "10",
                                   "--lr-warmup-iters", "2", "--lr-decay-style", "cosine"])
    s = LRSchedule(a, 4)
    vals = [s(n) for n in (0, 4, 8, 24, 40, 41)]
    want = [0.0, 5e-4, 1e-3, 1e-4 + 0.5 * (math.cos(math.pi * 0.5) + 1) * 9e-4, 1e-4, 1e-4]
    check(all(abs(x - y) < 1e-15 for x, y in zip(vals, want)), "cosine schedule with warmup", vals)
    a = build_parser().parse_args(["--lr", "1e-3", "--train-iters", "10", "--lr-decay-iters", "5"])
    s = LRSchedule(a, 2)
    vals = [s(n) for n in (0, 2, 10, 12)]
    check(all(abs(x - y) < 1e-15 for x, y in zip(vals, [1e-3, 8e-4, 0.0, 0.0])), "linear decay to min", vals)
    a = build_parser().parse_args(["--lr", "1e-3", "--train-iters", "10", "--lr-decay-style", "WSD",
                                   "--lr-wsd-decay-iters", "4", "--lr-wsd-decay-style", "linear"])
    s = LRSchedule(a, 1)
    vals = [s(n) for n in (6, 7, 10)]
    check(all(abs(x - y) < 1e-15 for x, y in zip(vals, [1e-3, 7.5e-4, 0.0])), "WSD linear anneal", vals)


def selftest_adamw():
    torch.manual_seed(0)
    w = torch.randn(5, 3)
    b = torch.randn(5)
    P = {"x.weight": w.clone().requires_grad_(True), "x.bias": b.clone().requires_grad_(True)}
    ref_w, ref_b = w.clone().requires_grad_(True), b.clone().requires_grad_(True)
    opt = AdamW(P, ["x.weight", "x.bias"], 0.9, 0.95, 1e-8)
    topt = torch.optim.AdamW([{"params": [ref_w], "weight_decay": 0.1},
                              {"params": [ref_b], "weight_decay": 0.0}],
                             lr=1e-2, betas=(0.9, 0.95), eps=1e-8, foreach=False)
    for step in range(3):
        gw, gb = torch.randn(5, 3), torch.randn(5)
        P["x.weight"].grad, P["x.bias"].grad = gw.clone(), gb.clone()
        ref_w.grad, ref_b.grad = gw.clone(), gb.clone()
        lr = 1e-2 * (step + 1)
        for grp in topt.param_groups:
            grp["lr"] = lr
        opt.step(lr, 0.1)
        topt.step()
    d = max(float((P["x.weight"] - ref_w).abs().max()), float((P["x.bias"] - ref_b).abs().max()))
    check(d == 0.0, "AdamW equals torch.optim.AdamW (bias exempt from decay)", d)


# ---- a second, unfused formulation of the forward (per head, per query position)

def alt_norm(x, w, b, c):
    if c.norm == "RMSNorm":
        return x / torch.sqrt((x * x).mean(-1, keepdim=True) + c.eps) * w
    mu = x.mean(-1, keepdim=True)
    var = ((x - mu) ** 2).mean(-1, keepdim=True)
    return (x - mu) / torch.sqrt(var + c.eps) * w + b


def alt_attention(x, P, pre, c, rope_unused, mask):
    b, s, _ = x.shape
    W = P[pre + "linear_qkv.weight"]
    bias = P.get(pre + "linear_qkv.bias")
    blk = (c.m + 2) * c.k

    def rows(r0):
        w = W[r0:r0 + c.k]
        return x @ w.t() + (bias[r0:r0 + c.k] if bias is not None else 0)

    def rotate(t):  # t [b, s, k]: pairs (i, i + d/2) turned by pos * base^(-2i/d), float64 angles
        if c.pos != "rope":
            return t
        d = c.rot
        out = t.clone()
        for pos in range(s):
            for i in range(d // 2):
                th = pos * c.rotary_base ** (-2.0 * i / d)
                z = torch.complex(t[:, pos, i].double(), t[:, pos, i + d // 2].double()) * complex(math.cos(th), math.sin(th))
                out[:, pos, i] = z.real.to(t.dtype)
                out[:, pos, i + d // 2] = z.imag.to(t.dtype)
        return out

    heads = []
    for i in range(c.a):
        G, j = i // c.m, i % c.m
        q = rotate(rows(G * blk + j * c.k))
        kk = rotate(rows(G * blk + c.m * c.k))
        v = rows(G * blk + (c.m + 1) * c.k)
        out = torch.zeros_like(q)
        for bi in range(b):
            for t in range(s):
                allowed = [u for u in range(s) if not mask[bi, t, u]]
                sc = torch.stack([torch.dot(q[bi, t], kk[bi, u]) for u in allowed]) / math.sqrt(c.k)
                pr = torch.exp(sc - sc.max())
                pr = pr / pr.sum()
                out[bi, t] = sum(pr[n] * v[bi, u] for n, u in enumerate(allowed))
        heads.append(out)
    ctx = torch.cat(heads, dim=-1)
    y = ctx @ P[pre + "linear_proj.weight"].t()
    if pre + "linear_proj.bias" in P:
        y = y + P[pre + "linear_proj.bias"]
    return y


def alt_mlp(x, P, pre, c):
    W = P[pre + "linear_fc1.weight"]
    bias = P.get(pre + "linear_fc1.bias")
    if c.swiglu:
        gate = x @ W[: c.f].t() + (bias[: c.f] if bias is not None else 0)
        up = x @ W[c.f:].t() + (bias[c.f:] if bias is not None else 0)
        y = gate / (1 + torch.exp(-gate)) * up
    else:
        y = x @ W.t() + (bias if bias is not None else 0)
        if c.gelu == "tanh":
            y = 0.5 * y * (1 + torch.tanh(math.sqrt(2 / math.pi) * (y + 0.044715 * y ** 3)))
        else:
            y = 0.5 * y * (1 + torch.erf(y / math.sqrt(2)))
    y = y @ P[pre + "linear_fc2.weight"].t()
    if pre + "linear_fc2.bias" in P:
        y = y + P[pre + "linear_fc2.bias"]
    return y


def alt_forward(P, c, batch):
    tokens = batch["tokens"]
    x = P["embedding.word_embeddings.weight"][tokens]
    if c.pos == "learned_absolute":
        x = x + P["embedding.position_embeddings.weight"][batch["position_ids"]]
    mask = batch["attention_mask"]
    for n in range(c.L):
        a = "decoder.layers.%d.self_attention." % n
        x = x + alt_attention(alt_norm(x, P[a + "linear_qkv.layer_norm_weight"],
                                       P.get(a + "linear_qkv.layer_norm_bias"), c), P, a, c, None, mask)
        m = "decoder.layers.%d.mlp." % n
        x = x + alt_mlp(alt_norm(x, P[m + "linear_fc1.layer_norm_weight"],
                                 P.get(m + "linear_fc1.layer_norm_bias"), c), P, m, c)
    x = alt_norm(x, P["decoder.final_layernorm.weight"], P.get("decoder.final_layernorm.bias"), c)
    w = P["output_layer.weight"] if c.untie else P["embedding.word_embeddings.weight"]
    logits = x @ w.t()
    lse = torch.log(torch.exp(logits - logits.max(-1, keepdim=True).values).sum(-1)) + logits.max(-1).values
    return lse - logits.gather(-1, batch["labels"].unsqueeze(-1)).squeeze(-1)


SELFTEST_CONFIGS = [
    ("GPT-2 style: learned positions, LayerNorm, tanh GELU with biases, tied",
     "--num-layers 2 --hidden-size 16 --num-attention-heads 4 --seq-length 8 --max-position-embeddings 10"),
    ("Llama style: RoPE, RMSNorm, SwiGLU, GQA 4/2, no biases, untied, EOD masks",
     "--num-layers 2 --hidden-size 16 --num-attention-heads 4 --group-query-attention --num-query-groups 2 "
     "--seq-length 8 --max-position-embeddings 8 --position-embedding-type rope --normalization RMSNorm "
     "--swiglu --ffn-hidden-size 24 --disable-bias-linear --untie-embeddings-and-output-weights "
     "--eod-mask-loss --reset-position-ids --reset-attention-mask"),
    ("erf GELU without biases, RoPE on half the head, kv-channels 8, MQA, QKV bias, masks",
     "--num-layers 1 --hidden-size 12 --num-attention-heads 3 --kv-channels 8 --group-query-attention "
     "--num-query-groups 1 --seq-length 8 --max-position-embeddings 8 --position-embedding-type rope "
     "--rotary-percent 0.5 --rotary-base 100 --disable-bias-linear --add-qkv-bias --ffn-hidden-size 20 "
     "--eod-mask-loss --reset-position-ids --reset-attention-mask"),
]


def synthetic_batches(c, args, gen, eod, n_micro, mbs):
    out = []
    for _ in range(n_micro):
        rows = []
        for _ in range(mbs):
            text = torch.randint(0, c.V - 3, (c.S + 1,), generator=gen).numpy()  # never the padding rows
            text[torch.randint(0, c.S + 1, (2,), generator=gen).numpy()] = eod
            tokens, labels = text[:-1].astype(np.int64), text[1:].astype(np.int64)
            lm, pos, am = ltor_masks(tokens, eod, args.reset_position_ids, args.reset_attention_mask, args.eod_mask_loss)
            rows.append({"tokens": tokens, "labels": labels, "loss_mask": lm, "position_ids": pos, "attention_mask": am})
        out.append(collate(rows))
    return out


def selftest_model():
    for ci, (what, flags) in enumerate(SELFTEST_CONFIGS):
        args = build_parser().parse_args(flags.split())
        c = model_config(args, 40)
        gen = torch.Generator().manual_seed(100 + ci)
        P64, names = init_model(c, 0.3, 0.5, 7 + ci, torch.float64)
        with torch.no_grad():  # make norms and biases non-trivial
            for n in names:
                if P64[n].dim() == 1:
                    P64[n].add_(torch.randn(P64[n].shape, generator=gen, dtype=torch.float64) * 0.2)
        batches = synthetic_batches(c, args, gen, 5, 2, 2)

        # (c) the fused formulation against the per-head loop, float64 and float32
        with torch.no_grad():
            a = torch.cat([gpt_forward(P64, c, b).reshape(-1) for b in batches])
            b = torch.cat([alt_forward(P64, c, b).reshape(-1) for b in batches])
            d64 = float((a - b).abs().max())
            P32 = {n: t.detach().float() for n, t in P64.items()}
            a32 = torch.cat([gpt_forward(P32, c, b).reshape(-1) for b in batches]).double()
            d32 = float((a32 - b).abs().max())
        check(d64 < 1e-6 and d32 < 1e-4, "forward = per-head unfused forward: " + what,
              "max |diff| float64 %.3g, float32 %.3g" % (d64, d32))

        # (d) gradients of the train-step objective against central finite differences
        for n in names:
            P64[n].grad = None
        step_objective(P64, c, batches)
        grads = {n: P64[n].grad.clone() for n in names}
        worst, where = 0.0, ""
        eps = 1e-6
        with torch.no_grad():
            for n in names:
                flat = P64[n].view(-1)
                picks = torch.randint(0, flat.numel(), (4,), generator=gen).tolist()
                if n == "embedding.word_embeddings.weight":  # also a padding row: output grad only
                    picks.append(flat.numel() - 1)
                for i in picks:
                    old = float(flat[i])
                    flat[i] = old + eps
                    fp = step_objective(P64, c, batches, backward=False)[0]
                    flat[i] = old - eps
                    fm = step_objective(P64, c, batches, backward=False)[0]
                    flat[i] = old
                    num = (fp - fm) / (2 * eps)
                    ana = float(grads[n].view(-1)[i])
                    err = abs(num - ana) / max(1e-3, abs(num), abs(ana))
                    if err > worst:
                        worst, where = err, "%s[%d]: analytic %.9g, numeric %.9g" % (n, i, ana, num)
        check(worst < 1e-5, "gradients = finite differences (float64): " + what,
              "worst relative error %.3g at %s" % (worst, where))
        if ci == 0:
            # the objective is the mean of micro-batch token means; the log is the token mean
            obj, lsum, ntok = step_objective(P64, c, batches, backward=False)
            with torch.no_grad():
                means = []
                for bt in batches:
                    l = gpt_forward(P64, c, bt)
                    means.append(float((l * bt["loss_mask"]).sum() / bt["loss_mask"].sum()))
            check(abs(obj - sum(means) / len(means)) < 1e-12, "objective = mean of micro-batch token means",
                  (obj, means))
    x = torch.randn(50, dtype=torch.float64, requires_grad=True)
    check(torch.autograd.gradcheck(TanhGeluFn.apply, (x,), raise_exception=False), "fused tanh-GELU backward passes gradcheck")


def self_test():
    torch.set_num_threads(1)
    torch.use_deterministic_algorithms(True)
    with tempfile.TemporaryDirectory() as tmp:
        selftest_data(tmp)
    selftest_schedule()
    selftest_adamw()
    selftest_model()
    print("# %d failed" % len(FAILS))
    return 1 if FAILS else 0


def main(argv):
    args = parse_args(argv)
    torch.set_num_threads(1)
    torch.use_deterministic_algorithms(True)
    if args.self_test:
        return self_test()
    if args.write_init_model:
        write_init_model(args)
        return 0
    train(args)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
