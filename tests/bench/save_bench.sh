#!/bin/sh
# save_bench.sh - `make bench`: what checkpointing costs the training loop:
# the same run of a 29M-parameter model (350 MB
# per checkpoint: fp32 weights and Adam's two moments) without saves, with a
# synchronous save every SAVE_EVERY iterations, and with --async-save, timed
# from the first iteration line to the last (the wall clock, saves included:
# the log's "elapsed time per iteration" leaves save pauses out). Prints
# each run's time per iteration and its ratio to the run without saves; the
# goal is async <= 1.10. The final save happens after the last line, so it
# is not counted in either run. Both save runs write to the same disk
# (build/bench-save; override with SAVE_DIR).
set -eu
cd "$(dirname "$0")/../.."
[ -n "${SKIP_BUILD:-}" ] || make --no-print-directory all >/dev/null
W=build/bench-save
S=${SAVE_DIR:-$W/ckpt}
rm -rf "$W" "$S"
mkdir -p "$W"
export OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=1 OMPI_MCA_mpi_yield_when_idle=1
ITERS=${ITERS:-30}
SAVE_EVERY=${SAVE_EVERY:-10}
echo "machine: $(nproc) CPUs, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'); one training process"
MODEL="--num-layers 4 --hidden-size 512 --num-attention-heads 8 --seq-length 128 --max-position-embeddings 128"
MODEL="$MODEL --micro-batch-size 4 --global-batch-size 4 --lr 1e-4 --mock-data --tokenizer-type NullTokenizer"
MODEL="$MODEL --vocab-size 31999 --eval-iters 0 --eval-interval 100000 --train-iters $ITERS --log-interval 1"
MODEL="$MODEL --data-cache-path $W/cache"

run() { # name flags...
	name=$1
	shift
	rm -rf "$S"
	bin/train $MODEL "$@" >"$W/$name.log" 2>"$W/$name.err"
	/usr/bin/python3 - "$W/$name.log" <<'EOF'
import re, sys, datetime
ts = [datetime.datetime.strptime(m, "%Y-%m-%d %H:%M:%S.%f")
      for m in re.findall(r"^ \[([0-9-]+ [0-9:.]+)\] iteration", open(sys.argv[1]).read(), re.M)]
print("%.1f" % ((ts[-1] - ts[0]).total_seconds() * 1000 / (len(ts) - 1)))
EOF
}

base=$(run none)
sync=$(run sync --save "$S" --save-interval "$SAVE_EVERY")
async=$(run async --save "$S" --save-interval "$SAVE_EVERY" --async-save)
size=$(du -sm "$S/iter_$(printf %07d "$ITERS")" | cut -f1)
saves=$(( (ITERS - 1) / SAVE_EVERY ))
printf '%d iterations, %d saves of %d MB inside the timed span\n' "$ITERS" "$saves" "$size"
printf '%-28s %10s %8s\n' run "ms/iter" ratio
printf '%-28s %10s %8s\n' "no saves" "$base" 1.00
for r in "synchronous saves:$sync" "--async-save:$async"; do
	printf '%-28s %10s %8s\n' "${r%%:*}" "${r#*:}" "$(echo "${r#*:} $base" | awk '{printf "%.2f", $1 / $2}')"
done
echo "$async $base" | awk '{ if ($1 / $2 <= 1.10) print "async-save goal (<= 1.10 x no saves): met"; else print "async-save goal (<= 1.10 x no saves): NOT met" }'
