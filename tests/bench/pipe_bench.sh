#!/bin/sh
# pipe_bench.sh - `make bench`: where the time of one training iteration goes
# on 8 CPU ranks: compute (forward and backward passes), exposed
# communication (pipeline sends, gradient all-reduces) and the pipeline bubble
# (waiting for a neighbouring stage), from train's own --timing-log-level 2
# timers on every rank, for data parallelism (no bubble) and pipelines of
# 4 and 8 stages with 8 and 32 micro-batches, interleaved and not, beside the
# bubble fraction theory predicts: (p-1)/(m+p-1) for 1F1B and
# (p-1)/(v*m+p-1) for the interleaved schedule with v chunks per rank.
#
# The ranks share this machine's cores: with fewer than 8 cores they take
# turns, and waiting for a neighbour includes waiting for a core. So beside
# the measured split the script replays the schedule with each rank's
# measured forward and backward pass times on dedicated cores (the bubble a
# machine with a core per rank would show for these stage times), which is
# what the theory's equal-stage formula approximates.
set -eu
cd "$(dirname "$0")/../.."
[ -n "${SKIP_BUILD:-}" ] || make --no-print-directory all >/dev/null
W=build/bench-pipe
rm -rf "$W"
mkdir -p "$W"
export OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=1 OMPI_MCA_mpi_yield_when_idle=1
MPI="mpirun --allow-run-as-root --oversubscribe -np 8"
ITERS=${ITERS:-6}
echo "machine: $(nproc) CPUs, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'); 8 ranks, 1 thread each"
# 16 layers of hidden 128, sequence 128, a 1024-token vocabulary (so that the
# last stage's logits do not outweigh its layers), no dropout
MODEL="--num-layers 16 --hidden-size 128 --num-attention-heads 4 --seq-length 128 --max-position-embeddings 128"
MODEL="$MODEL --micro-batch-size 1 --lr 1e-4 --mock-data --tokenizer-type NullTokenizer --vocab-size 1023"
MODEL="$MODEL --hidden-dropout 0 --attention-dropout 0 --eval-iters 0 --eval-interval 100000"
MODEL="$MODEL --train-iters $ITERS --log-interval $((ITERS / 2)) --timing-log-level 2 --timing-log-option all"

printf '%-22s %4s %4s %7s | %8s %8s %8s %8s | %8s %8s %9s\n' layout m v "ms/it" compute comm bubble other \
	replayed theory "stage max/min"
bench() { # name pp vpp gbs
	name=$1 pp=$2 vpp=$3 gbs=$4
	flags="--pipeline-model-parallel-size $pp --global-batch-size $gbs --data-cache-path $W/cache"
	[ "$vpp" -gt 1 ] && flags="$flags --num-virtual-stages-per-pipeline-rank $vpp"
	$MPI bin/train $MODEL $flags >"$W/$name.log" 2>"$W/$name.err"
	/usr/bin/python3 - "$W/$name.log" "$name" "$pp" "$vpp" "$gbs" <<'PYEOF'
import re, sys
log, name, p, v, gbs = sys.argv[1], sys.argv[2], *map(int, sys.argv[3:])
text = open(log).read()
# the last report: iteration time of the interval, then every rank's timers
ms = float(re.findall(r"elapsed time per iteration \(ms\): ([0-9.]+)", text)[-1])
block = text.rsplit("times across ranks (ms):", 1)[1]
timers, cur = {}, None
for line in block.splitlines()[1:]:
    m = re.match(r"  (\S+):$", line)
    if m:
        cur = timers.setdefault(m.group(1), {})
        continue
    m = re.match(r"\s+rank\s+(\d+): ([0-9.]+)", line)
    if m and cur is not None:
        cur[int(m.group(1))] = float(m.group(2))
    elif line and not line.startswith(" "):
        break
def mean(*names):
    return sum(sum(timers.get(n, {}).values()) for n in names) / 8.0
compute = mean("forward-compute", "backward-compute")
comm = mean("forward-send", "backward-send", "all-grads-sync", "embedding-grads-all-reduce", "params-all-gather")
bubble = mean("forward-recv", "backward-recv")
other = ms - compute - comm - bubble
dp = 8 // p
m = gbs // dp
theory = (p - 1) / (v * m + p - 1) if p > 1 else 0.0

# Megatron's order of passes on pipeline rank r (lib/train/pp_sched.c)
def schedule(r):
    total = m * v
    if v == 1:
        table = [(i, 0) for i in range(m)]
        warm = p - r - 1
    else:
        table = []
        for lo in range(0, m, p):
            hi = min(m, lo + p)
            table += [(i, c) for c in range(v) for i in range(lo, hi)]
        warm = (p - r - 1) * 2 + (v - 1) * p
    warm = min(warm, total)
    F = lambda k: ("F", table[k][1], table[k][0])
    B = lambda k: ("B", v - 1 - table[k][1], table[k][0])
    ops = [F(k) for k in range(warm)]
    for k in range(total - warm):
        ops += [F(k + warm), B(k)]
    return ops + [B(k) for k in range(total - warm, total)]

# replay on dedicated cores: a pass starts when its rank is free and its input
# (the previous stage's forward, the next stage's backward) is done
def replay(equal=False):
    stage = [r * (8 // p) for r in range(p)]  # world ranks of one pipeline (pp is the outermost axis)
    def per_pass(name, r):
        return timers.get(name, {}).get(r, 0.0) / (m * v)
    fwd = [1.0 if equal else per_pass("forward-compute", rr) for rr in stage]
    bwd = [2.0 if equal else per_pass("backward-compute", rr) for rr in stage]
    ops = [schedule(r) for r in range(p)]
    done, pc, free = {}, [0] * p, [0.0] * p
    while any(pc[r] < len(ops[r]) for r in range(p)):
        moved = False
        for r in range(p):
            if pc[r] == len(ops[r]):
                continue
            kind, c, i = ops[r][pc[r]]
            if kind == "F":
                dep = (("F", r - 1, c, i) if r > 0 else ("F", p - 1, c - 1, i)) if (r, c) != (0, 0) else None
            else:
                dep = (("B", r + 1, c, i) if r < p - 1 else ("B", 0, c + 1, i)) if (r, c) != (p - 1, v - 1) else None
            if dep is not None and dep not in done:
                continue
            start = max(free[r], done[dep] if dep else 0.0)
            free[r] = start + (fwd[r] if kind == "F" else bwd[r])
            done[(kind, r, c, i)] = free[r]
            pc[r] += 1
            moved = True
        assert moved, "the replay deadlocked"
    span = max(free)
    busy = [fwd[r] + bwd[r] for r in range(p)]
    return sum(span - (m * v) * busy[r] for r in range(p)) / (p * span), max(busy) / max(min(busy), 1e-9)

rep, imbalance = replay() if p > 1 else (0.0, 1.0)
# the replay itself: with equal stages it must give the theory's fraction
assert p == 1 or abs(replay(equal=True)[0] - theory) < 1e-9, (replay(equal=True), theory)
print("%-22s %4d %4d %7.1f | %7.1f%% %7.1f%% %7.1f%% %7.1f%% | %7.1f%% %7.1f%% %9.2f" % (
    name, m, v, ms, 100 * compute / ms, 100 * comm / ms, 100 * bubble / ms, 100 * other / ms,
    100 * rep, 100 * theory, imbalance))
PYEOF
}
bench "DP8" 1 1 8
bench "PP8" 8 1 8
bench "PP8" 8 1 32
bench "PP8 interleaved" 8 2 8
bench "PP4 x DP2" 4 1 16
bench "PP4 x DP2 interleaved" 4 2 16
