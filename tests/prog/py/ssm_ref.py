"""ssm_ref.py - PyTorch references for the Mamba-2 mixer ops (ops.h, "Mamba-2
(SSD) mixer"; docs/mamba.md), run by tests/prog/ssm_ops.sh with the system
python (torch 1.13, numpy).

    ssm_ref.py TOOL DIR

Writes random float32 inputs to DIR as .npy, runs TOOL (tests/tools/megac_ssm)
on them, and compares what it wrote (DIR/c_*.npy) with references computed
here in float64 with torch autograd:

  conv  torch's depthwise conv1d (groups = channels, W - 1 zeros of left
        padding, the first T outputs) and SiLU, as Megatron's mixer and
        transformers' Mamba2 torch_forward apply it to xBC;
  scan  the recurrence s_t = exp(d_t A) s_{t-1} + d_t x_t B_t^T,
        y_t = s_t C_t + D x_t, d_t = softplus(dt_t + dt_bias), step by step;
        and, as a second reference for the forward, the chunked SSD form of
        transformers' Mamba2Mixer.torch_forward (segment sums, diagonal
        blocks, chunk states, inter-chunk recurrence), transcribed below with
        an initial state and with mamba_ssm's head-to-group map (head h reads
        group h // (H // G)), for several chunk lengths: the two references
        must agree to 1e-10 first;
  norm  mamba_ssm's gated RMSNorm with norm_before_gate False, grouped:
        g = y * silu(z), each of the groups normalised by its own RMS.

Each comparison is max |ours - ref| / max |ref| over the tensor, which must be
below 1e-5 (fp32 against float64). Prints one line per
tensor and a summary last line; exits 1 on any failure.
"""
import os
import subprocess
import sys

import numpy as np
import torch
import torch.nn.functional as F

torch.set_num_threads(1)
TOL = 1e-5


def save(d, name, a):
    np.save(os.path.join(d, name + ".npy"), np.ascontiguousarray(a, dtype=np.float32))


def load_c(d, name):
    return np.load(os.path.join(d, "c_" + name + ".npy"))


def t64(a, grad=False):
    return torch.tensor(np.asarray(a, dtype=np.float64), requires_grad=grad)


# ---- the references ----


def conv_ref(x, w, b):
    """x [B,T,C], w [C,W], b [C] -> silu(causal depthwise conv) [B,T,C]"""
    T, C, W = x.shape[1], x.shape[2], w.shape[1]
    pre = F.conv1d(x.transpose(1, 2), w[:, None, :], b, padding=W - 1, groups=C)[..., :T]
    return F.silu(pre).transpose(1, 2)


def scan_recurrence(x, dt, dt_bias, A_log, Bm, Cm, D, s0):
    """the recurrence, step by step: y [B,T,H,P], final state [B,H,P,N]"""
    Bsz, T, H, P = x.shape
    G = Bm.shape[2]
    A = -torch.exp(A_log)
    d = F.softplus(dt + dt_bias)  # [B,T,H]
    Bh = Bm.repeat_interleave(H // G, dim=2)  # head h -> group h // (H/G)
    Ch = Cm.repeat_interleave(H // G, dim=2)
    s = s0
    ys = []
    for t in range(T):
        a = torch.exp(d[:, t] * A)  # [B,H]
        s = a[..., None, None] * s + (d[:, t, :, None] * x[:, t])[..., None] * Bh[:, t, :, None, :]
        ys.append((s * Ch[:, t, :, None, :]).sum(-1) + D[:, None] * x[:, t])
    return torch.stack(ys, dim=1), s


def segment_sum(v):
    """[..., L] -> [..., L, L]: out[i, j] = sum_{j < k <= i} v[k] (i >= j), -inf above"""
    L = v.size(-1)
    v = v[..., None].expand(*v.size(), L)
    v = v.masked_fill(~torch.tril(torch.ones(L, L, dtype=torch.bool), diagonal=-1), 0)
    ss = torch.cumsum(v, dim=-2)
    return ss.masked_fill(~torch.tril(torch.ones(L, L, dtype=torch.bool), diagonal=0), -torch.inf)


def scan_chunked(x, dt, dt_bias, A_log, Bm, Cm, D, s0, L):
    """transformers 4.49's Mamba2Mixer.torch_forward SSD math (no cache, no
    clamp), with an initial state and mamba_ssm's head-to-group map"""
    Bsz, T, H, P = x.shape
    G = Bm.shape[2]
    pad = (L - T % L) % L
    A = -torch.exp(A_log)
    d = F.softplus(dt + dt_bias)
    Bh = Bm.repeat_interleave(H // G, dim=2)
    Ch = Cm.repeat_interleave(H // G, dim=2)
    D_res = D[:, None] * F.pad(x, (0, 0, 0, 0, 0, pad))
    xd = x * d[..., None]
    Ad = A * d  # [B,T,H]

    def chunks(t):
        t = F.pad(t, (0, 0, 0, 0, 0, pad) if t.dim() == 4 else (0, 0, 0, pad))
        return t.reshape(t.shape[0], -1, L, *t.shape[2:])

    xd, Ad, Bc, Cc = chunks(xd), chunks(Ad), chunks(Bh), chunks(Ch)
    Ad = Ad.permute(0, 3, 1, 2)  # [B,H,c,L]
    A_cum = torch.cumsum(Ad, dim=-1)
    # 1. the diagonal blocks
    Lmat = torch.exp(segment_sum(Ad))  # [B,H,c,L,L]
    Gm = (Cc[:, :, :, None, :, :] * Bc[:, :, None, :, :, :]).sum(-1)  # [B,c,l,s,H]
    M = (Gm[..., None] * Lmat.permute(0, 2, 3, 4, 1)[..., None]).sum(-1)
    Y_diag = (M[..., None] * xd[:, :, None]).sum(3)
    # 2. each chunk's own state
    decay_states = torch.exp(A_cum[:, :, :, -1:] - A_cum)
    B_decay = Bc * decay_states.permute(0, -2, -1, 1)[..., None]
    states = (B_decay[..., None, :] * xd[..., None]).sum(dim=2)  # [B,c,H,P,N]
    # 3. the recurrence between chunks, from the initial state
    states = torch.cat([s0[:, None], states], dim=1)
    decay_chunk = torch.exp(segment_sum(F.pad(A_cum[:, :, :, -1], (1, 0)))).transpose(1, 3)
    new_states = (decay_chunk[..., None, None] * states[:, :, None, ...]).sum(dim=1)
    states, final = new_states[:, :-1], new_states[:, -1]
    # 4. state -> output
    C_times_states = Cc[..., None, :] * states[:, :, None, ...]
    Y_off = C_times_states.sum(-1) * torch.exp(A_cum).permute(0, 2, 3, 1)[..., None]
    y = (Y_diag + Y_off).reshape(Bsz, -1, H, P) + D_res
    return y[:, :T], final


def gated_norm_ref(y, z, w, groups, eps):
    g = y * F.silu(z)
    R, C = g.shape
    gg = g.reshape(R, groups, C // groups)
    out = gg * torch.rsqrt(gg.pow(2).mean(-1, keepdim=True) + eps)
    return out.reshape(R, C) * w


# ---- the comparison ----

failures = []
worst = 0.0


def compare(d, name, ref):
    global worst
    ours = load_c(d, name).astype(np.float64)
    ref = ref.detach().numpy() if torch.is_tensor(ref) else ref
    if ours.shape != ref.shape:
        print("%-12s shape %s, want %s" % (name, ours.shape, ref.shape))
        failures.append(name)
        return
    m = np.abs(ref).max()
    e = np.abs(ours - ref).max() / (m if m > 0 else 1.0)
    ok = bool(e < TOL)
    worst = max(worst, e)
    print("%-12s max error / max %.2e  %s" % (name, e, "ok" if ok else "FAILED"))
    if not ok:
        failures.append(name)


def main():
    tool, d = sys.argv[1], sys.argv[2]
    rng = np.random.default_rng(20250611)
    f32 = lambda a: np.asarray(a, dtype=np.float32)
    # conv: xBC-like channels (x, B and C of a small mixer), W = 4
    Bsz, T, Cc, W = 2, 37, 24, 4
    conv = dict(conv_x=rng.standard_normal((Bsz, T, Cc)), conv_w=rng.uniform(-0.5, 0.5, (Cc, W)),
                conv_b=rng.uniform(-0.5, 0.5, Cc), conv_dout=rng.standard_normal((Bsz, T, Cc)))
    # scan: Megatron's initialisation ranges (dt in [1e-3, 0.1] through
    # dt_bias, A in [1, 16]), random raw dt around 0
    H, P, G, N, CHUNK = 4, 8, 2, 16, 16
    dt0 = np.exp(rng.uniform(np.log(1e-3), np.log(0.1), H))
    scan = dict(x=rng.standard_normal((Bsz, T, H, P)), dt=0.5 * rng.standard_normal((Bsz, T, H)),
                dt_bias=dt0 + np.log(-np.expm1(-dt0)), A_log=np.log(rng.uniform(1, 16, H)),
                Bm=rng.standard_normal((Bsz, T, G, N)), Cm=rng.standard_normal((Bsz, T, G, N)),
                D=1.0 + 0.1 * rng.standard_normal(H), state_in=rng.standard_normal((Bsz, H, P, N)),
                dy=rng.standard_normal((Bsz, T, H, P)), dstate_out=rng.standard_normal((Bsz, H, P, N)))
    # norm: d_inner = H * P channels in 2 groups, eps as Megatron's mixer
    R, Cn, groups, eps = Bsz * T, H * P, 2, 1e-5
    norm = dict(norm_y=rng.standard_normal((R, Cn)), norm_z=2 * rng.standard_normal((R, Cn)),
                norm_w=1 + 0.2 * rng.standard_normal(Cn), norm_dout=rng.standard_normal((R, Cn)),
                norm_groups=np.array([groups]), norm_eps=np.array([eps]))
    for k, v in {**conv, **scan, **norm}.items():
        save(d, k, v)
        # the references read the float32 values the tool reads
        if k in conv:
            conv[k] = f32(v)
        elif k in scan:
            scan[k] = f32(v)
        else:
            norm[k] = f32(v)
    subprocess.run([tool, d, str(CHUNK)], check=True)

    # conv
    x, w, b = t64(conv["conv_x"], True), t64(conv["conv_w"], True), t64(conv["conv_b"], True)
    out = conv_ref(x, w, b)
    (out * t64(conv["conv_dout"])).sum().backward()
    compare(d, "conv_out", out)
    compare(d, "conv_dx", x.grad)
    compare(d, "conv_dw", w.grad)
    compare(d, "conv_db", b.grad)

    # scan
    names = ["x", "dt", "dt_bias", "A_log", "Bm", "Cm", "D", "state_in"]
    ins = [t64(scan[n], True) for n in names]
    y, s1 = scan_recurrence(*ins)
    with torch.no_grad():
        for L in (1, 5, 16, 64):
            yc, sc = scan_chunked(*[t.detach() for t in ins], L)
            e = max((yc - y).abs().max().item(), (sc - s1).abs().max().item())
            print("chunked SSD form, chunk %2d, against the recurrence: %.1e" % (L, e))
            if not e < 1e-10:
                failures.append("chunked form, chunk %d" % L)
    ((y * t64(scan["dy"])).sum() + (s1 * t64(scan["dstate_out"])).sum()).backward()
    compare(d, "y", y)
    compare(d, "state_out", s1)
    for n, g in zip(["dx", "ddt", "ddt_bias", "dA_log", "dBm", "dCm", "dD", "dstate_in"], ins):
        compare(d, n, g.grad)

    # norm
    yv, zv, wv = t64(norm["norm_y"], True), t64(norm["norm_z"], True), t64(norm["norm_w"], True)
    out = gated_norm_ref(yv, zv, wv, groups, float(norm["norm_eps"][0]))
    (out * t64(norm["norm_dout"])).sum().backward()
    compare(d, "norm_out", out)
    compare(d, "norm_dy", yv.grad)
    compare(d, "norm_dz", zv.grad)
    compare(d, "norm_dw", wv.grad)

    if failures:
        print("FAILED: " + ", ".join(failures))
        sys.exit(1)
    print("all tensors within %.0e of torch in float64 (worst %.2e)" % (TOL, worst))


if __name__ == "__main__":
    main()
