"""mamba_ref.py - an independent PyTorch reference of Megatron-LM's hybrid Mamba models.

Written from a reading of Megatron-LM's HybridStack, MambaLayer and MambaMixer (and
mamba_ssm's chunked SSD scan, which Megatron's mixer calls), not from megac's C code. The
data pipeline, the learning-rate schedule, AdamW, the grad norm, the attention and the MLP
are torch_ref.py's (this file imports it and swaps in the hybrid model), so the two
references agree on everything but the layers that are new here.

Modes
  mamba_ref.py TRAIN-FLAGS... --ref-model M.h5 [--ref-out OUT.jsonl]
      torch_ref.py's training mode for a hybrid model: one JSON line per iteration
      ("lm loss", "grad norm", "learning rate"). Takes --hybrid-layer-pattern (or
      --hybrid-override-pattern), --mamba-state-dim, --mamba-head-dim, --mamba-num-groups and
      --mamba-num-heads, Megatron's flags with Megatron's defaults, and
      --position-embedding-type none (no position table and no RoPE; Megatron's usual choice
      for hybrid models).
  mamba_ref.py --self-test
      The chunked scan against the step-by-step recurrence (float64), chunk lengths 1, 5 and
      the whole sequence.
  mamba_ref.py generate MODEL-FLAGS... --ref-model M.h5 --prompts P.json --max-new N
               --vocab V --gen-out OUT.json [--and MODEL-FLAGS... ...]
      Greedy continuation by full recomputation: every new token from a forward pass over the
      whole sequence so far (no cache, no state carried between passes), in float64 (or
      --ref-dtype). P.json: [[id, ...], ...]; V: the unpadded vocabulary (the tokens and
      log-probs are over the first V logits, as a server's). OUT.json: [{"tokens": the N
      generated, "logprobs": log p of each prompt token from the second, then of each
      generated one}, ...], the form of tests/tools/megac_generate. The prompts run as one
      batch, padded at the end (every layer is causal, so a sequence's positions do not see
      the padding). --and: another model and its prompts, in the same process.

The model (Megatron's HybridStack with the TE spec, one rank):
  - pattern characters: M a MambaLayer, * a TransformerLayer with self-attention only, - one
    with an MLP only, E one with a MoE layer only (torch_ref.py's MoE, --num-experts and the
    router flags; the E layers are the MoE layers); each one pre-norm residual block (the
    norm fused into the first linear layer: mixer.in_proj.layer_norm_weight,
    self_attention.linear_qkv.layer_norm_weight, mlp.linear_fc1.layer_norm_weight; an E
    layer's is pre_mlp_layernorm); the final norm is decoder.final_norm;
  - the mixer: zxBCdt = in_proj(norm(x)), split [d_inner, d_inner + 2GN, H]; xBC through a
    depthwise causal conv1d (W = 4 taps, bias) and SiLU; x [H heads of P], B and C [G groups
    of N]; dt = softplus(dt + dt_bias), A = -exp(A_log); y = SSD scan + D x (head h reads
    group h // (H / G)); y gated by silu(z) and RMS-normalised per group of d_inner / G
    channels (eps 1e-5) times norm.weight; out_proj;
  - megac stores conv1d.weight [C, 1, W] without its unit axis, as [C, W] (docs/mamba.md):
    this reference reads it so and restores the axis for torch's conv1d.
"""
import math
import os
import sys

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import torch_ref as R  # noqa: E402

HYBRID_FLAGS = {"--hybrid-layer-pattern": str, "--hybrid-override-pattern": str, "--mamba-state-dim": int,
                "--mamba-head-dim": int, "--mamba-num-groups": int, "--mamba-num-heads": int}


def split_flags(argv):
    """The hybrid flags (Megatron's defaults) and the rest, for torch_ref's parser."""
    got = {"--mamba-state-dim": 128, "--mamba-head-dim": 64, "--mamba-num-groups": 8}
    rest = []
    i = 0
    while i < len(argv):
        a = argv[i]
        name = a.split("=")[0]
        if a == "--spec":  # the hybrid stack's spec: this file's model
            i += 1
            while i < len(argv) and not argv[i].startswith("--"):
                i += 1
            continue
        if a == "--position-embedding-type" and i + 1 < len(argv) and argv[i + 1] == "none":
            got["none"] = True  # no position embedding at all (torch_ref's parser has no such choice)
            i += 2
            continue
        if name in HYBRID_FLAGS:
            if "=" in a:
                val = a.split("=", 1)[1]
            else:
                i += 1
                val = argv[i]
            got[name] = HYBRID_FLAGS[name](val)
        else:
            rest.append(a)
        i += 1
    return got, rest


HYB = {}  # the hybrid flags of the run being set up (model_config reads them)


def hybrid_config(args, vocab_padded=None):
    pat = HYB.get("--hybrid-layer-pattern") or HYB.get("--hybrid-override-pattern")
    if not pat or any(ch not in "M*-E" for ch in pat):
        R.die("give --hybrid-layer-pattern of M, *, - and E only")
    if args.num_layers is None:
        args.num_layers = len(pat)
    c = base_model_config(args, vocab_padded)
    if HYB.get("none"):
        c.pos = "none"
    c.pattern = pat
    c.L = len(pat)  # Megatron: the pattern sets the number of layers (and --num-layers may be left out)
    if ("E" in pat) != bool(c.E):
        R.die("MoE layers (E) and --num-experts go together")
    if c.E:  # the MoE layers are the pattern's E layers (--moe-layer-freq does not apply)
        c.moe_pattern = [1 if ch == "E" else 0 for ch in pat]
    c.N, c.Pd, c.G = HYB["--mamba-state-dim"], HYB["--mamba-head-dim"], HYB["--mamba-num-groups"]
    c.H = HYB.get("--mamba-num-heads") or 2 * c.h // c.Pd
    c.di = c.H * c.Pd
    c.W = 4
    if c.H % c.G:
        R.die("the heads must be divisible by --mamba-num-groups")
    return c


def hybrid_param_shapes(c):
    out = [("embedding.word_embeddings.weight", (c.V, c.h))]
    if c.pos == "learned_absolute":
        out.append(("embedding.position_embeddings.weight", (c.P, c.h)))
    ln_bias = c.norm == "LayerNorm"
    for n, kind in enumerate(c.pattern):
        pre = "decoder.layers.%d." % n
        if kind == "*":
            out.extend(R.attention_param_shapes(c, pre, ln_bias))
        elif kind == "-":
            shapes = R.layer_param_shapes(c, pre, False)
            out.extend(s for s in shapes if ".mlp." in s[0])
        elif kind == "E":  # the pre-MLP norm and the MoE layer of a transformer layer
            shapes = R.layer_param_shapes(c, pre, True)
            out.extend(s for s in shapes if ".mlp." in s[0] or ".pre_mlp_layernorm." in s[0])
        else:
            m = pre + "mixer."
            C = c.di + 2 * c.G * c.N
            out.append((m + "in_proj.layer_norm_weight", (c.h,)))
            if ln_bias:
                out.append((m + "in_proj.layer_norm_bias", (c.h,)))
            out += [(m + "in_proj.weight", (2 * c.di + 2 * c.G * c.N + c.H, c.h)),
                    (m + "conv1d.weight", (C, c.W)), (m + "conv1d.bias", (C,)), (m + "dt_bias", (c.H,)),
                    (m + "A_log", (c.H,)), (m + "D", (c.H,)), (m + "norm.weight", (c.di,)),
                    (m + "out_proj.weight", (c.h, c.di))]
    out.append(("decoder.final_norm.weight", (c.h,)))
    if ln_bias:
        out.append(("decoder.final_norm.bias", (c.h,)))
    if c.untie:
        out.append(("output_layer.weight", (c.V, c.h)))
    return out


def ssd_chunked(x, dt, A, Bm, Cm, chunk):
    """mamba_ssm's chunked SSD (ssd_minimal's math): x [b, T, H, P], dt [b, T, H] (after
    softplus), A [H], Bm and Cm [b, T, H, N] (already per head). Within a chunk the masked
    quadratic form; between chunks the state [b, H, P, N] carried by exp of the chunk's
    summed dt A."""
    b, T, H, P = x.shape
    N = Bm.shape[-1]
    state = x.new_zeros(b, H, P, N)
    ys = []
    for t0 in range(0, T, chunk):
        t1 = min(T, t0 + chunk)
        xc, dc, Bc, Cc = x[:, t0:t1], dt[:, t0:t1], Bm[:, t0:t1], Cm[:, t0:t1]
        L = t1 - t0
        cum = torch.cumsum(dc * A, dim=1)  # [b, L, H]
        seg = cum[:, :, None, :] - cum[:, None, :, :]  # [b, i, j, H]: cum_i - cum_j
        causal = torch.tril(torch.ones(L, L, dtype=torch.bool))
        decay = torch.exp(seg.masked_fill(~causal[None, :, :, None], float("-inf")))
        cb = torch.einsum("bihn,bjhn->bijh", Cc, Bc)
        y = torch.einsum("bijh,bijh,bjh,bjhp->bihp", decay, cb, dc, xc)
        y = y + torch.einsum("bihn,bhpn,bih->bihp", Cc, state, torch.exp(cum))  # the carried state
        last = cum[:, -1:, :]  # [b, 1, H]
        w = torch.exp(last - cum) * dc  # [b, L, H]
        state = state * torch.exp(last[:, 0, :])[:, :, None, None] + torch.einsum("bjh,bjhp,bjhn->bhpn", w, xc, Bc)
        ys.append(y)
    return torch.cat(ys, dim=1)


def ssd_recurrence(x, dt, A, Bm, Cm):
    b, T, H, P = x.shape
    s = x.new_zeros(b, H, P, Bm.shape[-1])
    ys = []
    for t in range(T):
        a = torch.exp(dt[:, t] * A)  # [b, H]
        s = s * a[:, :, None, None] + torch.einsum("bh,bhp,bhn->bhpn", dt[:, t], x[:, t], Bm[:, t])
        ys.append(torch.einsum("bhpn,bhn->bhp", s, Cm[:, t]))
    return torch.stack(ys, dim=1)


def mixer(hn, P, m, c):
    b, T, _ = hn.shape
    GN, C = c.G * c.N, c.di + 2 * c.G * c.N
    zxbcdt = F.linear(hn, P[m + "in_proj.weight"])
    z, xbc, dt = torch.split(zxbcdt, [c.di, C, c.H], dim=-1)
    w = P[m + "conv1d.weight"].view(C, 1, c.W)  # Megatron's shape
    xbc = F.conv1d(xbc.transpose(1, 2), w, P[m + "conv1d.bias"], padding=c.W - 1, groups=C)[..., :T]
    xbc = F.silu(xbc).transpose(1, 2)
    x, Bm, Cm = torch.split(xbc, [c.di, GN, GN], dim=-1)
    x = x.reshape(b, T, c.H, c.Pd)
    rep = c.H // c.G  # head h reads group h // (H / G)
    Bm = Bm.reshape(b, T, c.G, c.N).repeat_interleave(rep, dim=2)
    Cm = Cm.reshape(b, T, c.G, c.N).repeat_interleave(rep, dim=2)
    dt = F.softplus(dt + P[m + "dt_bias"])
    A = -torch.exp(P[m + "A_log"])
    y = ssd_chunked(x, dt, A, Bm, Cm, 128)
    y = y + x * P[m + "D"][:, None]
    y = y.reshape(b, T, c.di)
    g = (y * F.silu(z)).reshape(b, T, c.G, c.di // c.G)
    g = g * torch.rsqrt(g.pow(2).mean(-1, keepdim=True) + 1e-5)
    y = g.reshape(b, T, c.di) * P[m + "norm.weight"]
    return F.linear(y, P[m + "out_proj.weight"])


def hybrid_forward(P, c, batch, moe_log=None, logits_only=False, rows=None, **_):
    tokens = batch["tokens"]
    x = F.embedding(tokens, P["embedding.word_embeddings.weight"])
    if c.pos == "learned_absolute":
        x = x + F.embedding(batch["position_ids"], P["embedding.position_embeddings.weight"])
    rope = R.rope_cos_sin(c, tokens.shape[1], x.dtype) if c.pos == "rope" else None
    mask = batch["attention_mask"]
    for n, kind in enumerate(c.pattern):
        pre = "decoder.layers.%d." % n
        if kind == "M":
            m = pre + "mixer."
            x = x + mixer(R.norm(x, P[m + "in_proj.layer_norm_weight"], P.get(m + "in_proj.layer_norm_bias"), c),
                          P, m, c)
        elif kind == "*":
            a = pre + "self_attention."
            hn = R.norm(x, P[a + "linear_qkv.layer_norm_weight"], P.get(a + "linear_qkv.layer_norm_bias"), c)
            x = x + R.attention(hn, P, a, c, rope, mask)
        elif kind == "E":
            hn = R.norm(x, P[pre + "pre_mlp_layernorm.weight"], P.get(pre + "pre_mlp_layernorm.bias"), c)
            x = x + R.moe_layer(hn, P, pre + "mlp.", c, moe_log)
        else:
            m = pre + "mlp."
            hn = R.norm(x, P[m + "linear_fc1.layer_norm_weight"], P.get(m + "linear_fc1.layer_norm_bias"), c)
            x = x + R.mlp(hn, P, m, c)
    if rows is not None:  # the logits of one position of each sample, rows[i] of sample i: [b, V]
        x = x[torch.arange(x.shape[0]), rows]
    x = R.norm(x, P["decoder.final_norm.weight"], P.get("decoder.final_norm.bias"), c)
    w_out = P["output_layer.weight"] if c.untie else P["embedding.word_embeddings.weight"]
    logits = F.linear(x, w_out)
    if logits_only:
        return logits
    V = logits.shape[-1]
    return F.cross_entropy(logits.reshape(-1, V), batch["labels"].reshape(-1), reduction="none").view(tokens.shape)


base_model_config = R.model_config
base_step_objective = R.step_objective


def hybrid_step_objective(P, c, micro_batches, forward=None, backward=True, moe_log=None, mtp_log=None):
    return base_step_objective(P, c, micro_batches, forward=hybrid_forward, backward=backward, moe_log=moe_log,
                               mtp_log=mtp_log)


def self_test():
    g = torch.Generator().manual_seed(5)
    b, T, H, P, N = 2, 13, 4, 3, 5
    x = torch.randn(b, T, H, P, generator=g, dtype=torch.float64)
    dt = F.softplus(torch.randn(b, T, H, generator=g, dtype=torch.float64))
    A = -torch.exp(torch.randn(H, generator=g, dtype=torch.float64))
    Bm = torch.randn(b, T, H, N, generator=g, dtype=torch.float64)
    Cm = torch.randn(b, T, H, N, generator=g, dtype=torch.float64)
    ref = ssd_recurrence(x, dt, A, Bm, Cm)
    bad = 0
    for chunk in (1, 5, T):
        d = float((ssd_chunked(x, dt, A, Bm, Cm, chunk) - ref).abs().max())
        good = d < 1e-12
        bad += not good
        print("%s - chunked scan (chunk %d) equals the recurrence (max |difference| %.1e)" % (
            "ok" if good else "not ok", chunk, d))
    sys.exit(1 if bad else 0)


def take_flag(argv, name):
    i = argv.index(name) if name in argv else R.die("give " + name)
    val = argv[i + 1]
    del argv[i:i + 2]
    return val


def generate(argv):
    import json
    prompts = json.load(open(take_flag(argv, "--prompts")))
    max_new, V = int(take_flag(argv, "--max-new")), int(take_flag(argv, "--vocab"))
    out_path = take_flag(argv, "--gen-out")
    args = R.parse_args(argv)
    import h5py
    with h5py.File(args.ref_model, "r") as f:
        Vp = f["embedding.word_embeddings.weight"].shape[0]
    c = R.model_config(args, Vp)
    dtype = torch.float64 if args.ref_dtype == "float64" else torch.float32
    P, _ = R.load_model(args.ref_model, c, dtype)
    seqs = [list(p) for p in prompts]
    lps = [[] for _ in prompts]
    with torch.no_grad():
        for step in range(max_new + 1):
            lens = [len(q) for q in seqs]
            T = max(lens)
            tokens = torch.tensor([q + [0] * (T - len(q)) for q in seqs])
            batch = {"tokens": tokens, "position_ids": torch.arange(T).expand(len(seqs), T),
                     "attention_mask": torch.triu(torch.ones(T, T, dtype=torch.bool), 1).expand(len(seqs), T, T)}
            if step == 0:  # the prompts' own log-probs, from their second token
                lp = torch.log_softmax(hybrid_forward(P, c, batch, logits_only=True)[:, :, :V], dim=-1)
                for i, q in enumerate(seqs):
                    lps[i] += [float(lp[i, t, q[t + 1]]) for t in range(len(q) - 1)]
                last = lp[torch.arange(len(seqs)), torch.tensor(lens) - 1]
            else:
                rows = torch.tensor(lens) - 1
                last = torch.log_softmax(hybrid_forward(P, c, batch, logits_only=True, rows=rows)[:, :V], dim=-1)
            if step == max_new:
                break
            for i, q in enumerate(seqs):
                tok = int(torch.argmax(last[i]))  # the first maximum, as the server's greedy choice
                lps[i].append(float(last[i, tok]))
                q.append(tok)
    out = [{"tokens": q[len(p):], "logprobs": lp} for p, q, lp in zip(prompts, seqs, lps)]
    json.dump(out, open(out_path, "w"))


def main(argv):
    if argv == ["--self-test"]:
        self_test()
    if argv[:1] == ["generate"]:
        jobs, job = [], []
        for a in argv[1:] + ["--and"]:
            if a == "--and":
                jobs.append(job)
                job = []
            else:
                job.append(a)
        for job in jobs:
            hyb, rest = split_flags(job)
            HYB.clear()
            HYB.update(hyb)
            R.model_config = hybrid_config
            R.param_shapes = hybrid_param_shapes
            generate(rest)
        return
    hyb, rest = split_flags(argv)
    HYB.clear()
    HYB.update(hyb)
    R.model_config = hybrid_config
    R.param_shapes = hybrid_param_shapes
    R.step_objective = hybrid_step_objective
    args = R.parse_args(rest)
    R.train(args)


if __name__ == "__main__":
    main(sys.argv[1:])
