"""peer_train.py - the PyTorch peer of `make bench`'s training benchmark.

The same GPT as megac's train builds for the benchmark shapes (pre-norm
LayerNorm, fused QKV, tanh-GELU MLP, learned positions, tied embeddings over
the padded vocabulary, no dropout), trained with torch.optim.AdamW on random
tokens, with the same thread count. Prints one line:
    ms_per_step=<mean over the timed steps> tokens_per_s=<...> maxrss_kb=<...>
Run by Debian's /usr/bin/python3 (torch from python3-torch).
"""
import argparse
import math
import resource
import time

import torch
import torch.nn.functional as F

p = argparse.ArgumentParser()
p.add_argument("--layers", type=int, required=True)
p.add_argument("--hidden", type=int, required=True)
p.add_argument("--heads", type=int, required=True)
p.add_argument("--seq", type=int, required=True)
p.add_argument("--batch", type=int, required=True)
p.add_argument("--vocab", type=int, default=50304)
p.add_argument("--threads", type=int, default=1)
p.add_argument("--warmup", type=int, default=2)
p.add_argument("--steps", type=int, default=5)
a = p.parse_args()
torch.set_num_threads(a.threads)
torch.manual_seed(0)


class Block(torch.nn.Module):
    def __init__(self, h, nh):
        super().__init__()
        self.nh = nh
        self.ln1 = torch.nn.LayerNorm(h)
        self.qkv = torch.nn.Linear(h, 3 * h)
        self.proj = torch.nn.Linear(h, h)
        self.ln2 = torch.nn.LayerNorm(h)
        self.fc1 = torch.nn.Linear(h, 4 * h)
        self.fc2 = torch.nn.Linear(4 * h, h)

    def forward(self, x, mask):
        B, T, C = x.shape
        q, k, v = self.qkv(self.ln1(x)).view(B, T, self.nh, 3, C // self.nh).unbind(3)
        q, k, v = (t.transpose(1, 2) for t in (q, k, v))
        att = (q @ k.transpose(-1, -2)) / math.sqrt(C // self.nh)
        att = att.masked_fill(mask, float("-inf")).softmax(-1)
        y = (att @ v).transpose(1, 2).reshape(B, T, C)
        x = x + self.proj(y)
        return x + self.fc2(F.gelu(self.fc1(self.ln2(x)), approximate="tanh"))


class GPT(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.wte = torch.nn.Embedding(a.vocab, a.hidden)
        self.wpe = torch.nn.Embedding(a.seq, a.hidden)
        self.blocks = torch.nn.ModuleList(Block(a.hidden, a.heads) for _ in range(a.layers))
        self.lnf = torch.nn.LayerNorm(a.hidden)
        for prm in self.parameters():
            if prm.dim() == 2:
                torch.nn.init.normal_(prm, std=0.02)

    def forward(self, tok):
        T = tok.shape[1]
        mask = torch.triu(torch.ones(T, T, dtype=torch.bool), 1)
        x = self.wte(tok) + self.wpe(torch.arange(T))
        for b in self.blocks:
            x = b(x, mask)
        return self.lnf(x) @ self.wte.weight.t()


model = GPT()
opt = torch.optim.AdamW(model.parameters(), lr=1e-4, weight_decay=0.1)
times = []
for step in range(a.warmup + a.steps):
    tok = torch.randint(0, 50257, (a.batch, a.seq + 1))
    t0 = time.perf_counter()
    logits = model(tok[:, :-1])
    loss = F.cross_entropy(logits.reshape(-1, a.vocab), tok[:, 1:].reshape(-1))
    opt.zero_grad(set_to_none=True)
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    opt.step()
    times.append(time.perf_counter() - t0)
ms = 1000 * sum(times[a.warmup:]) / a.steps
print("ms_per_step=%.1f tokens_per_s=%.0f maxrss_kb=%d" % (
    ms, a.batch * a.seq / (ms / 1000), resource.getrusage(resource.RUSAGE_SELF).ru_maxrss))
