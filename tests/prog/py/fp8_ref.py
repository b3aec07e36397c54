"""fp8_ref.py - lib/kernels/fp8.h's casts and the CPU fp8_quantize against
independent references: ml_dtypes' float8_e4m3fn and float8_e5m2 for the
casts, and a numpy transcription of the scale rules (fp8.h, rules 4 to 8)
for the quantization. megac's side comes from tests/tools/megac_fp8cast.

  fp8_ref.py classes TOOL DIR
      Every bit-pattern class at once (a few million patterns): each fp32
      exponent with mantissas on a grid that holds every tie and the
      patterns one and two ulps either side of it, for both formats, in
      their normal and subnormal ranges; fp32 subnormals; the overflow
      boundaries; NaNs with many payloads, infinities and signed zeros;
      random patterns. Prints how many patterns matched.

  fp8_ref.py range TOOL FIRST COUNT
      The patterns FIRST .. FIRST + COUNT - 1 (all 2^32 in chunks under
      make check-long).

  fp8_ref.py quant TOOL DIR
      Random blocks through every scaling (GIVEN, AMAX with and without
      pow2, MX), both formats, transposed or not, short last blocks, blocks
      that are zero or hold a NaN or an Inf: codes, dequantization scales and
      the amax bit for bit.

The rules held to: fp8_from_f32_nosat is exactly ml_dtypes' cast (NaN
bits included); fp8_from_f32 is ml_dtypes' cast of np.clip(x, -max, max),
except that every NaN gives the canonical 0x7f (rule 1). Exit status 1 with
the first mismatches on stderr when anything differs.
"""
import os
import subprocess
import sys

import ml_dtypes
import numpy as np

F8 = {"e4m3": ml_dtypes.float8_e4m3fn, "e5m2": ml_dtypes.float8_e5m2}
FMAX = {"e4m3": np.float32(448.0), "e5m2": np.float32(57344.0)}
BF16_MAX = np.uint32(0x7F7F0000).view(np.float32)


def ref_cast(x, f, sat):
    """x float32 -> the codes (uint8) of format f, saturating or not."""
    with np.errstate(invalid="ignore", over="ignore"):
        if not sat:
            return x.astype(F8[f]).view(np.uint8)
        m = FMAX[f]
        q = np.clip(x, -m, m).astype(F8[f]).view(np.uint8)
        q[np.isnan(x)] = 0x7F
        return q


def ref_casts(x):
    """[n, 4] uint8: e4m3 sat, e4m3 nosat, e5m2 sat, e5m2 nosat."""
    out = np.empty((x.size, 4), np.uint8)
    for k in range(4):
        out[:, k] = ref_cast(x, ("e4m3", "e5m2")[k // 2], k % 2 == 0)
    return out


NAMES = ("e4m3 saturating", "e4m3 not saturating", "e5m2 saturating", "e5m2 not saturating")


def compare(u, got, what):
    """u: the uint32 patterns; got: the tool's [n, 4] bytes."""
    x = u.view(np.float32)
    g = np.ascontiguousarray(got).view("<u4").ravel()
    w = np.zeros(u.size, np.uint32)
    for k in range(4):
        w |= ref_cast(x, ("e4m3", "e5m2")[k // 2], k % 2 == 0).astype(np.uint32) << np.uint32(8 * k)
    bad = np.nonzero(g != w)[0]
    if bad.size:
        want = ref_casts(x)
        for i in bad[:12]:
            for k in range(4):
                if got[i, k] != want[i, k]:
                    sys.stderr.write("%s: %08x %s: megac %02x, reference %02x\n"
                                     % (what, u[i], NAMES[k], got[i, k], want[i, k]))
        sys.stderr.write("%s: %d of %d patterns differ\n" % (what, bad.size, u.size))
        return False
    return True


def run_cast(tool, path_in, path_out, u):
    u.tofile(path_in)
    subprocess.run([tool, "cast", path_in, path_out], check=True)
    got = np.fromfile(path_out, np.uint8).reshape(-1, 4)
    assert got.shape[0] == u.size, (got.shape, u.size)
    return got


def pattern_classes(rng):
    parts = []
    # every exponent and sign x a mantissa grid: bits 15..22 free, the low
    # bits 0, +-1, +-2 (ties of both formats sit at bits 19 and 20 in the
    # normal range and higher ones in the subnormal range, all on the grid),
    # plus random mantissas
    grid = (np.arange(256, dtype=np.int64) << 15)[:, None] + np.array([0, 1, 2, -1, -2], np.int64)[None, :]
    grid = grid.ravel()
    grid = grid[(grid >= 0) & (grid < (1 << 23))]
    mant = np.unique(np.concatenate([grid, rng.integers(0, 1 << 23, 600)])).astype(np.uint32)
    exps = np.arange(0, 256, dtype=np.uint32)
    base = (exps[:, None] << 23) | mant[None, :]
    parts.append(base.ravel())
    parts.append(base.ravel() | np.uint32(0x80000000))
    # fp32 subnormals, the edges and random ones
    parts.append(np.array([1, 2, 3, 0x400000, 0x3FFFFF, 0x7FFFFF, 0x800000], np.uint32))
    parts.append(rng.integers(1, 1 << 23, 20000, dtype=np.uint32))
    # around every fp8 value (and the overflow boundaries): +-3 fp32 ulps
    vals = []
    for f in ("e4m3", "e5m2"):
        v = np.arange(256, dtype=np.uint8).view(F8[f]).astype(np.float32)
        v = v[np.isfinite(v)]
        sv = np.unique(np.abs(v))
        mids = (sv[:-1].astype(np.float64) + sv[1:]) / 2
        vals += [v, mids.astype(np.float32), np.float32([464, 480, 61440, 65536, 57344 * 2])]
    vals = np.abs(np.concatenate(vals)).view(np.uint32).astype(np.int64)
    near = (vals[:, None] + np.arange(-3, 4)[None, :]).ravel()
    near = near[(near >= 0) & (near < 0x7F800000)].astype(np.uint32)
    parts += [near, near | np.uint32(0x80000000)]
    # NaNs (payloads, quiet and signalling), infinities, zeros
    pay = np.concatenate([np.array([1, 2, 0x3FFFFF, 0x400000, 0x400001, 0x7FFFFF], np.uint32),
                          rng.integers(1, 1 << 23, 2000, dtype=np.uint32)])
    nans = np.uint32(0x7F800000) | pay
    parts += [nans, nans | np.uint32(0x80000000), np.array([0x7F800000, 0xFF800000, 0, 0x80000000], np.uint32)]
    # random patterns
    parts.append(rng.integers(0, 1 << 32, 1 << 20, dtype=np.uint64).astype(np.uint32))
    return np.unique(np.concatenate(parts))


def cmd_classes(tool, d):
    rng = np.random.default_rng(20251202)
    u = pattern_classes(rng)
    got = run_cast(tool, os.path.join(d, "classes.f32"), os.path.join(d, "classes.u8"), u)
    if not compare(u, got, "classes"):
        return 1
    print("%d patterns (every exponent x ties +-2 ulps, subnormals, overflow, NaN/Inf/-0, random) "
          "as ml_dtypes %s" % (u.size, ml_dtypes.__version__))
    return 0


def cmd_range(tool, first, count):
    chunk = 1 << 24
    p = subprocess.Popen([tool, "range", str(first), str(count), "-"], stdout=subprocess.PIPE)
    ok = True
    s = first
    while s < first + count:
        n = min(chunk, first + count - s)
        buf = p.stdout.read(4 * n)
        got = np.frombuffer(buf, np.uint8).reshape(-1, 4)
        if got.shape[0] != n:
            sys.stderr.write("range: the tool stopped at %#x\n" % s)
            ok = False
            break
        u = np.arange(s, s + n, dtype=np.uint64).astype(np.uint32)
        if not compare(u, got, "range"):
            ok = False
            break
        s += n
    p.stdout.close()
    if p.wait() != 0:
        ok = False
    if not ok:
        return 1
    print("all %d patterns from %#x as ml_dtypes %s" % (count, first, ml_dtypes.__version__))
    return 0


# ---- the scale rules, transcribed ----

def f32(x):
    return np.float32(x)


def scale_from_amax(amax, fmax, pow2):
    """TE's compute_scale_from_amax, epsilon 0 (rule 4)."""
    amax = f32(amax)
    if not np.isfinite(amax) or amax <= 0:
        return f32(1.0)
    with np.errstate(over="ignore"):
        s = f32(fmax) / amax
    if np.isinf(s):
        s = BF16_MAX
    if pow2:
        s = (np.array([s], np.float32).view(np.uint32) & np.uint32(0xFF800000)).view(np.float32)[0]
    return f32(s)


def e8m0_from(v):
    """TE's float_to_e8m0 (rule 5)."""
    v = f32(v)
    if np.isnan(v):
        return 0xFF
    if np.isinf(v):
        return 0xFE
    if v == 0:
        return 0
    b = int(np.array([v], np.float32).view(np.uint32)[0]) & 0x7FFFFFFF
    e, m = b >> 23, b & 0x7FFFFF
    if m > 0 and e != 0xFE and not (e == 0 and m <= 0x400000):
        e += 1
    return e


def bits_f32(b):
    return np.array([b], np.uint32).view(np.float32)[0]


def e8m0_rcp(e):
    if e == 255:
        return bits_f32(0x7FFFFFFF)
    if e == 254:
        return bits_f32(0x00400000)
    return bits_f32((254 - e) << 23)


def e8m0_to_f32(e):
    if e == 255:
        return bits_f32(0x7FFFFFFF)
    if e == 0:
        return bits_f32(0x00400000)
    return bits_f32(e << 23)


def ref_quant(fmt, how, pow2, x, br, bc, scale):
    """x: [R, C] float32 (already transposed). Codes, sinv [nbr, nbc], amax."""
    R, C = x.shape
    nbr, nbc = -(-R // br), -(-C // bc)
    q = np.empty((R, C), np.uint8)
    sinv = np.empty((nbr, nbc), np.float32)
    with np.errstate(invalid="ignore", over="ignore"):
        for i in range(nbr):
            for j in range(nbc):
                blk = x[i * br:(i + 1) * br, j * bc:(j + 1) * bc]
                am = np.max(np.abs(blk)) if blk.size else f32(0)
                if how == "given":
                    s, si = f32(scale), f32(1.0) / f32(scale)
                elif how == "amax":
                    s = scale_from_amax(am, FMAX[fmt], pow2)
                    si = f32(1.0) / s
                else:
                    e = e8m0_from(f32(am) * (f32(1.0) / FMAX[fmt]))
                    s, si = e8m0_rcp(e), e8m0_to_f32(e)
                prod = (blk * s).astype(np.float32)
                q[i * br:(i + 1) * br, j * bc:(j + 1) * bc] = ref_cast(prod.ravel(), fmt, True).reshape(blk.shape)
                sinv[i, j] = si
        amax = np.max(np.abs(x)) if x.size else f32(0)
    return q, sinv, f32(amax)


def quant_input(rng, rows, cols, spread):
    x = (rng.uniform(-1, 1, (rows, cols)) * np.exp2(rng.integers(-spread, spread + 1, (rows, cols)))).astype(np.float32)
    x[rng.random((rows, cols)) < 0.01] = 0
    return x


def cmd_quant(tool, d):
    rng = np.random.default_rng(7)
    shapes = [(37, 300, 16, 128), (256, 256, 128, 128), (64, 384, 1, 128), (130, 70, 1, 32), (3, 129, 1, 128),
              (200, 33, 128, 128), (1, 1, 1, 1)]
    cases = 0
    bad = 0
    for (R, C, br, bc) in shapes:
        for fmt in ("e4m3", "e5m2"):
            for how, pow2 in (("given", 0), ("amax", 0), ("amax", 1), ("mx", 0)):
                for tr in (0, 1):
                    x = quant_input(rng, R, C, 14)
                    if R * C >= 64 and how != "given":
                        # a zero block, a NaN, an Inf, an amax whose quotient overflows
                        x[:min(br, R), :min(bc, C)] = 0
                        x[R - 1, C - 1] = np.nan
                        x[R // 2, 0] = -np.inf
                    scale = 37.3 if pow2 == 0 else 32.0
                    bbr, bbc = (R, C) if how == "given" else (br, bc)
                    xin = x.T.copy() if tr else x
                    pin, pout = os.path.join(d, "q.f32"), os.path.join(d, "q.out")
                    xin.tofile(pin)
                    subprocess.run([tool, "quant", fmt, how, str(pow2), str(tr), str(R), str(C), str(bbr), str(bbc),
                                    repr(scale), pin, pout], check=True)
                    raw = np.fromfile(pout, np.uint8)
                    nb = (-(-R // bbr)) * (-(-C // bbc))
                    q = raw[:R * C].reshape(R, C)
                    sinv = raw[R * C:R * C + 4 * nb].view(np.float32).reshape(-(-R // bbr), -(-C // bbc))
                    amax = raw[R * C + 4 * nb:].view(np.float32)
                    rq, rs, ra = ref_quant(fmt, how, pow2, x, bbr, bbc, np.float32(scale))
                    same = (np.array_equal(q, rq) and np.array_equal(sinv.view(np.uint32), rs.view(np.uint32))
                            and amax.size == 1 and (amax[0] == ra or (np.isnan(amax[0]) and np.isnan(ra))))
                    cases += 1
                    if not same:
                        bad += 1
                        sys.stderr.write("quant %s %s pow2 %d transpose %d %dx%d blocks %dx%d differs\n"
                                         % (fmt, how, pow2, tr, R, C, bbr, bbc))
                        w = np.argwhere(q != rq)[:4]
                        for r, c in w:
                            sys.stderr.write("  q[%d,%d] %02x, reference %02x (x %r)\n" % (r, c, q[r, c], rq[r, c],
                                                                                        x[r, c]))
                        w = np.argwhere(sinv.view(np.uint32) != rs.view(np.uint32))[:4]
                        for i, j in w:
                            sys.stderr.write("  sinv[%d,%d] %r, reference %r\n" % (i, j, sinv[i, j], rs[i, j]))
                        sys.stderr.write("  amax %r, reference %r\n" % (amax, ra))
    if bad:
        return 1
    print("%d quantizations (given, amax, amax pow2, mx; e4m3, e5m2; transposed or not) bit for bit" % cases)
    return 0


def main():
    if len(sys.argv) == 4 and sys.argv[1] == "classes":
        return cmd_classes(sys.argv[2], sys.argv[3])
    if len(sys.argv) == 5 and sys.argv[1] == "range":
        return cmd_range(sys.argv[2], int(sys.argv[3], 0), int(sys.argv[4], 0))
    if len(sys.argv) == 4 and sys.argv[1] == "quant":
        return cmd_quant(sys.argv[2], sys.argv[3])
    sys.stderr.write(__doc__)
    return 2


if __name__ == "__main__":
    sys.exit(main())
