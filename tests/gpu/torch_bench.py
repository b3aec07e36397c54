#!/usr/bin/env python3
"""torch_bench.py - the PyTorch peer of tests/gpu/bench.sh: the same model
shapes trained on the same GPU machine, in the same run, with PyTorch
eager (bf16 autocast over fp32 weights, fused AdamW, flash attention through
scaled_dot_product_attention), timed the same way, with the same FLOPs count
as train's --log-throughput (gpt_flops_per_iteration in
lib/model/gpt_config.c, Megatron's formula), printed in bench.sh's columns:

    torch <model> | micro-batch | ms/iteration | tokens/s | TFLOP/s | MFU | peak MB

Usage: torch_bench.py MODEL[=MB]... where MODEL is a name of bench.sh's table
(gpt2-124m, gpt2-350m, gpt2-1.5b, llama3-1b, llama3-3b) or "tiny" (a dry run
on the CPU: BENCH_DEVICE=cpu), and MB the micro-batch to try first (bench.sh
passes the one megac ran, so both sides run the same size; smaller ones of
the list follow when it does not fit). TORCH_COMPILE=1 adds torch.compile
(slower to start). Mock data: random tokens, as train's --mock-data.
"""
import math
import os
import sys
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

PEAK = 989e12  # dense bf16 peak of an H100/H200: the MFU yardstick

# name: (layers, hidden, heads, query groups, ffn, seq, llama-style, micro-batches to try)
# (bench.sh's lists: from the second-largest size that fits an H200)
MODELS = {
    "gpt2-124m": (12, 768, 12, 12, 3072, 1024, False, [16, 8, 4]),
    "gpt2-350m": (24, 1024, 16, 16, 4096, 1024, False, [8, 4, 2]),
    "gpt2-1.5b": (48, 1600, 25, 25, 6400, 1024, False, [4, 2, 1]),
    "llama3-1b": (16, 2048, 32, 8, 8192, 2048, True, [4, 2, 1]),
    "llama3-3b": (28, 3072, 24, 8, 8192, 4096, True, [2, 1]),
    "tiny": (2, 64, 4, 4, 256, 64, False, [4, 2]),  # bench.sh's BENCH_TINY model
}
VOCAB = 50304  # GPT-2's 50257 padded to a multiple of 128, as train pads it


def flops_per_iteration(L, h, a, g, f, s, swiglu, batch):
    """gpt_flops_per_iteration (lib/model/gpt_config.c), dense layers."""
    k = h // a
    Q, KV = k * a, k * g
    F_ = 3 if swiglu else 2
    tokens, sq = batch * s, batch * s * s
    mlp = 6 * h * (f * F_ * L)
    attn = 6 * (h * (Q + KV + KV) + Q * h) * L
    logits = 6 * h * VOCAB
    return tokens * (mlp + attn + logits) + sq * 6 * Q * L


class RMSNorm(nn.Module):
    def __init__(self, h, eps=1e-5):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(h))
        self.eps = eps

    def forward(self, x):
        xf = x.float()
        return (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + self.eps)).type_as(x) * self.weight


def rope(x, cos, sin):  # x [b, heads, s, k]; Megatron's non-interleaved halves
    x1, x2 = x.chunk(2, dim=-1)
    return x * cos + torch.cat((-x2, x1), dim=-1) * sin


class Block(nn.Module):
    def __init__(self, h, a, g, f, llama):
        super().__init__()
        self.a, self.g, self.k, self.llama = a, g, h // a, llama
        norm = (lambda: RMSNorm(h)) if llama else (lambda: nn.LayerNorm(h))
        self.ln1, self.ln2 = norm(), norm()
        self.qkv = nn.Linear(h, (a + 2 * g) * self.k, bias=not llama)
        self.proj = nn.Linear(a * self.k, h, bias=not llama)
        self.fc1 = nn.Linear(h, 2 * f if llama else f, bias=not llama)
        self.fc2 = nn.Linear(f, h, bias=not llama)

    def forward(self, x, cos, sin):
        b, s, _ = x.shape
        q, kk, v = self.qkv(self.ln1(x)).split([self.a * self.k, self.g * self.k, self.g * self.k], dim=-1)
        q = q.view(b, s, self.a, self.k).transpose(1, 2)
        kk = kk.view(b, s, self.g, self.k).transpose(1, 2)
        v = v.view(b, s, self.g, self.k).transpose(1, 2)
        if self.llama:
            q, kk = rope(q, cos, sin), rope(kk, cos, sin)
        if self.g != self.a:
            kk = kk.repeat_interleave(self.a // self.g, dim=1)
            v = v.repeat_interleave(self.a // self.g, dim=1)
        if hasattr(F, "scaled_dot_product_attention"):
            y = F.scaled_dot_product_attention(q, kk, v, is_causal=True)
        else:  # old PyTorch (the CPU dry run)
            att = (q @ kk.transpose(-1, -2)) / math.sqrt(self.k)
            att = att.masked_fill(torch.ones(s, s, dtype=torch.bool, device=x.device).triu(1), float("-inf"))
            y = att.softmax(-1) @ v
        x = x + self.proj(y.transpose(1, 2).reshape(b, s, self.a * self.k))
        hmid = self.fc1(self.ln2(x))
        if self.llama:
            g1, u = hmid.chunk(2, dim=-1)
            hmid = F.silu(g1) * u
        else:
            hmid = F.gelu(hmid)
        return x + self.fc2(hmid)


class GPT(nn.Module):
    def __init__(self, L, h, a, g, f, s, llama):
        super().__init__()
        self.llama = llama
        self.emb = nn.Embedding(VOCAB, h)
        self.pos = None if llama else nn.Embedding(s, h)
        self.blocks = nn.ModuleList(Block(h, a, g, f, llama) for _ in range(L))
        self.norm = RMSNorm(h) if llama else nn.LayerNorm(h)
        self.head = nn.Linear(h, VOCAB, bias=False)
        if not llama:
            self.head.weight = self.emb.weight  # tied, as GPT-2
        k = h // a
        inv = 1.0 / (500000.0 ** (torch.arange(0, k, 2).float() / k))
        ang = torch.outer(torch.arange(s).float(), inv)
        ang = torch.cat((ang, ang), dim=-1)
        self.register_buffer("cos", ang.cos(), persistent=False)
        self.register_buffer("sin", ang.sin(), persistent=False)

    def forward(self, tok, labels):
        x = self.emb(tok)
        if self.pos is not None:
            x = x + self.pos.weight[: tok.shape[1]]
        for blk in self.blocks:
            x = blk(x, self.cos, self.sin)
        logits = self.head(self.norm(x))
        return F.cross_entropy(logits.float().view(-1, VOCAB), labels.reshape(-1))


def bench(name, dev, first=None, iters=8):
    L, h, a, g, f, s, llama, mbs = MODELS[name]
    if first:
        mbs = [first] + [m for m in mbs if m < first]
    for mb in mbs:
        model = opt = None
        try:
            torch.manual_seed(1)
            model = GPT(L, h, a, g, f, s, llama).to(dev)
            fused = {"fused": True} if dev == "cuda" else {}
            opt = torch.optim.AdamW(model.parameters(), lr=1e-4, weight_decay=0.1, **fused)
            step = model
            if os.environ.get("TORCH_COMPILE") == "1":
                step = torch.compile(model)
            tok = torch.randint(0, VOCAB, (mb, s + 1), device=dev)
            if dev == "cuda":
                torch.cuda.reset_peak_memory_stats()
            times = []
            for _ in range(iters):
                if dev == "cuda":
                    torch.cuda.synchronize()
                t0 = time.perf_counter()
                with torch.autocast(device_type=dev, dtype=torch.bfloat16):
                    loss = step(tok[:, :-1], tok[:, 1:])
                loss.backward()
                opt.step()
                opt.zero_grad(set_to_none=True)
                if dev == "cuda":
                    torch.cuda.synchronize()
                times.append(time.perf_counter() - t0)
            t = sorted(times[2:])[len(times[2:]) // 2]  # the median after two warm-up steps
            fl = flops_per_iteration(L, h, a, g, f, s, llama, mb)
            peak = torch.cuda.max_memory_allocated() / 2**20 if dev == "cuda" else 0
            print("torch %s | %d | %.1f | %.0f | %.1f | %.1f%% | %.0f"
                  % (name, mb, t * 1e3, mb * s / t, fl / t / 1e12, 100 * fl / t / PEAK, peak), flush=True)
            return
        except torch.cuda.OutOfMemoryError if dev == "cuda" else MemoryError:
            print("# torch %s micro-batch %d: out of memory" % (name, mb), flush=True)
        finally:
            del model, opt
            if dev == "cuda":
                torch.cuda.empty_cache()
    print("torch %s | none of the micro-batch sizes %s ran" % (name, mbs), flush=True)


def main():
    dev = os.environ.get("BENCH_DEVICE", "cuda")
    if dev == "cuda" and not torch.cuda.is_available():
        print("# torch_bench: no CUDA device; skipped")
        return 0
    if dev == "cuda":
        torch.backends.cuda.matmul.allow_tf32 = True
    print("# torch %s on %s%s" % (torch.__version__, torch.cuda.get_device_name() if dev == "cuda" else "cpu",
                                   ", torch.compile" if os.environ.get("TORCH_COMPILE") == "1" else ", eager"))
    for arg in sys.argv[1:] or ["gpt2-124m"]:
        name, _, mb = arg.partition("=")
        if name not in MODELS or (mb and not mb.isdigit()):
            print("torch_bench: unknown model %s (have: %s; MODEL=MB picks the first micro-batch)"
                  % (arg, ", ".join(MODELS)), file=sys.stderr)
            return 2
        bench(name, dev, int(mb) if mb else None)
    return 0


if __name__ == "__main__":
    sys.exit(main())
