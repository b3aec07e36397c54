# infer_moe.sh - text_gen_server on the training model's own layers: a
# random MixtralForCausalLM (4 experts, top-2, GQA), a random
# Qwen2MoeForCausalLM (QKV biases, a gated shared expert, softmax over all
# experts, a dense layer) and a random GQA Llama
# that transformers writes (tests/prog/py/hf_ref.py make), imported with
# ckpt_convert --from hf, served on loopback (--port 0) with a NullTokenizer
# (prompts are ids); Megatron's PUT /api with top_k 1 and "logprobs": true
# (tests/prog/py/serve_ref.py ask) gives transformers' greedy continuation
# token for token and its log-probs, prompt and generated, within 1e-4 (the
# Mixtral's reference routing checked free of near-ties first); TP2, EP2 and
# TP2 x EP2 servers (mpirun) give the one-rank server's tokens, log-probs
# within 1e-5; the
# emulated CUDA device (make emu: $MEGAC_EMU/bin/text_gen_server --device
# cuda) gives the CPU server's tokens, log-probs within 1e-4, and its kernels
# are what ran (MEGAC_EMU_STATS). Every server is started in the background
# and stopped on exit; a server that does not come up within $UP seconds or
# does not answer within $ASK seconds fails its check.
# shellcheck disable=SC2086 # paths, flag lists and $SV, $MPI are words
. tests/prog_lib.sh
W=$(new_tmp infer_moe)
OUT_LOG=$W/out.log
ERR=$W/err.log
export OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=1 OMPI_MCA_mpi_yield_when_idle=1
MPI="mpirun --allow-run-as-root --oversubscribe"
if [ -n "${MEGAC_SANITIZE:-}" ]; then export ASAN_OPTIONS=detect_leaks=0; fi
SV="/usr/bin/python3 tests/prog/py/serve_ref.py"
UP=30  # seconds a server has to print its port and answer /health
ASK=60 # seconds a request has to come back
# the models' vocabulary: prompts are ids written as text, end of document 999
TOK="--tokenizer-type NullTokenizer --vocab-size 1000"
EOD=999
FAILED=0
notok() {
	FAILED=1
	echo "not ok - $*"
}

# ---- servers: started in the background, stopped (bounded) on exit
SERVERS=""
alive() { _st=$(ps -o stat= -p "$1" 2>/dev/null) && case $_st in Z*) false ;; *) true ;; esac; }
# stop PID [SECONDS]: SIGTERM (a server drains and exits 0), then SIGKILL to
# it and its children (mpirun's ranks) after SECONDS (default 15); RC is its
# exit status
stop() {
	_i=0
	kill -TERM "$1" 2>/dev/null
	while alive "$1" && [ $_i -lt $((${2:-15} * 10)) ]; do
		sleep 0.1
		_i=$((_i + 1))
	done
	if alive "$1"; then
		for _c in $(pgrep -P "$1"); do kill -KILL "$_c" 2>/dev/null; done
		kill -KILL "$1" 2>/dev/null
	fi
	wait "$1" 2>/dev/null
	RC=$?
	SERVERS=$(echo " $SERVERS " | sed "s/ $1 / /")
}
cleanup() { for _p in $SERVERS; do stop "$_p" 5; done; }
trap cleanup EXIT
trap 'exit 1' INT TERM HUP
# serve NAME CMD...: the server CMD (with --port 0) in the background, its
# output in $W/NAME.log; SRV is its pid
serve() {
	_log=$W/$1.log
	shift
	"$@" --port 0 >"$_log" 2>&1 &
	SRV=$!
	SERVERS="$SERVERS $SRV"
}
# ask NAME LOG PID PROMPTS MAX_NEW OUT: the server's greedy answers and
# log-probs into OUT (hf_ref.py generate's form); a check of its own, and
# its status
ask() {
	rm -f "$6"
	if $SV ask "$2" "$3" "$4" "$5" "$6" --up $UP --timeout $ASK >"$W/ask.log" 2>&1; then
		ok "$1 ($(cat "$W/ask.log"))"
	else
		notok "$1"
		show "$W/ask.log" 14
		return 1
	fi
}
# same NAME REF.json GOT.json TOL: the same tokens, log-probs within TOL
same() {
	if [ ! -f "$2" ] || [ ! -f "$3" ]; then
		notok "$1 (no answer to compare: see above)"
	elif $SV same "$2" "$3" "$4" --eod $EOD >"$W/same.log" 2>&1; then
		ok "$1 ($(cat "$W/same.log"))"
	else
		notok "$1"
		show "$W/same.log"
	fi
}
# emu M DEVICE [KERNEL_PREFIX]: the emulated build's server of model M with
# --device DEVICE answers the short request as the CPU server did; its log
# (MEGAC_EMU_STATS=1, printed at exit) lists kernel launches, one of them
# KERNEL_PREFIX..., or none with --device cpu
emu() {
	_d=$2
	serve ${1}_emu_$_d env MEGAC_EMU_STATS=1 $MEGAC_EMU/bin/text_gen_server --load $W/${1}m $TOK --device $_d
	if ! ask "$1: --device $_d, emulated build: the server answers" $W/${1}_emu_$_d.log $SRV $W/pe.json $NE \
		$W/${1}_emu_$_d.json; then
		stop $SRV
		return
	fi
	stop $SRV 30
	[ $RC -eq 0 ] || notok "$1: --device $_d, emulated build: the server exits 0 on SIGTERM (exit $RC)"
	same "$1: --device $_d, emulated build: the CPU server's tokens, log-probs within 1e-4" \
		$W/${1}_cpu_e.json $W/${1}_emu_$_d.json 1e-4
	_log=$W/${1}_emu_$_d.log
	_n=$(grep -c '^emu: launched' "$_log")
	_k=$(grep "^emu: launched .* x ${3:-}" "$_log" | sed 's/.* x //' | sort -u | head -n 5 | tr '\n' ' ' | sed 's/ $//')
	if [ "$_d" = cpu ] && [ "$_n" -eq 0 ]; then
		ok "$1: --device cpu, emulated build: no kernel launched"
	elif [ "$_d" = cpu ]; then
		notok "$1: --device cpu, emulated build: $_n distinct kernels launched ($_k...)"
	elif [ "$_n" -gt 0 ] && [ -n "$_k" ]; then
		ok "$1: --device $_d, emulated build: the model ran on the device ($_n distinct kernels${3:+: $_k})"
	else
		notok "$1: --device $_d, emulated build: the model did not run on the device ($_n distinct kernels \
launched${3:+, none named $3...})"
		show "$_log" 4
	fi
}

hf_env "$W/pyenv.log"
# prompts: 5, 1 (the end-of-document id itself) and 8 ids, 12 new tokens;
# the emulated device gets the first two, 4 new tokens
echo '[[5, 900, 31, 7, 7], [999], [1, 2, 3, 4, 5, 6, 7, 8]]' >$W/p.json
echo '[[5, 900, 31, 7, 7], [999]]' >$W/pe.json
N=12
NE=4
/usr/bin/python3 -c '
import numpy as np
np.save("'"$W"'/ids.npy", np.random.RandomState(1).randint(0, 1000, size=(2, 24)).astype(np.int64))'
# transformers' side, in one process (hf_ref.py batch): the models (2
# layers, hidden 64, 8 heads over 4 key/value groups, 1000 ids; std 0.2, so
# that the greedy choices and the Mixtral's routing are clear-cut rather
# than near-ties, which is checked below), their greedy continuations and
# log-probs, the Mixtral's routing of them, and its logits on $W/ids.npy
SHAPE="--layers 2 --hidden 64 --heads 8 --kv-heads 4 --ffn 96 --vocab 1000 --positions 64 --std 0.2"
setup "transformers: a random MixtralForCausalLM (4 experts, top-2) and LlamaForCausalLM, their answers" \
	$HF tests/prog/py/hf_ref.py batch "make mixtral $W/mx $SHAPE --experts 4 --topk 2 --seed 5" \
	"make llama $W/ll $SHAPE --seed 6" "generate $W/mx $W/p.json $N $W/mx_ref.json --routing $W/mx_routing.json" \
	"generate $W/ll $W/p.json $N $W/ll_ref.json" "logits $W/mx $W/ids.npy $W/mx_hf.npy" \
	"make qwen2_moe $W/qm $SHAPE --experts 4 --topk 2 --moe-ffn 32 --shared-ffn 48 --mlp-only 1 --seed 7" \
	"generate $W/qm $W/p.json $N $W/qm_ref.json --routing $W/qm_routing.json"
for m in mx qm; do
	if $SV routing $W/${m}_routing.json --margin 1e-4 >"$W/routing.log" 2>&1; then
		ok "$m: the reference routes to every expert, no top-k near-ties ($(cat "$W/routing.log"))"
	else
		notok "$m: the reference's routing is degenerate (the comparisons below are then weak)"
		show "$W/routing.log"
	fi
done
for m in mx ll qm; do
	setup "$m: import with ckpt_convert --from hf" $BIN/ckpt_convert --from hf --load $W/$m --save $W/${m}m --verify
done
# the import itself, through the training model's forward (megac_logits):
# a failure below is then the server's, not the conversion's
expect_ok "mx: megac's logits (the training model) on the import" $MEGAC_BUILD/tools/megac_logits $W/mxm \
	$W/ids.npy $W/mx_megac.npy
logits_close "mx: the imported Mixtral's logits equal transformers' (1e-4)" $W/mx_hf.npy $W/mx_megac.npy 1e-4

for m in mx ll qm; do
	# one rank, on the CPU
	serve ${m}_cpu $BIN/text_gen_server --load $W/${m}m $TOK --device cpu
	ask "$m: the CPU server answers" $W/${m}_cpu.log $SRV $W/p.json $N $W/${m}_cpu.json &&
		ask "$m: the CPU server answers the short request" $W/${m}_cpu.log $SRV $W/pe.json $NE $W/${m}_cpu_e.json
	stop $SRV
	same "$m: the CPU server's greedy tokens and log-probs are transformers' (1e-4)" \
		$W/${m}_ref.json $W/${m}_cpu.json 1e-4

	# TP2, EP2 and TP2 x EP2 (the Mixtral; the Qwen2-MoE TP2 x EP2): the one-rank answers
	if [ $m != ll ]; then
		lays="21 12 22"
		[ $m = qm ] && lays="22"
		for lay in $lays; do
			t=${lay%?} e=${lay#?}
			name="TP$t x EP$e"
			serve ${m}_p$lay $MPI -np $((t * e)) $BIN/text_gen_server --load $W/${m}m $TOK --device cpu \
				--tensor-model-parallel-size $t --expert-model-parallel-size $e
			ask "$m: the $name server answers" $W/${m}_p$lay.log $SRV $W/p.json $N $W/${m}_p$lay.json
			stop $SRV
			same "$m: $name gives the one-rank server's tokens, log-probs within 1e-5" \
				$W/${m}_cpu.json $W/${m}_p$lay.json 1e-5
		done
	fi

	# the emulated CUDA device: the CPU server's answers, computed by its
	# kernels (the Mixtral's experts too); for the Llama also --device auto
	# (which takes the emulated GPU) and --device cpu (no kernel at all)
	if [ -z "${MEGAC_EMU:-}" ]; then
		echo "ok - $m: the emulated device's server # SKIP MEGAC_EMU is not set (make emu)"
	elif [ $m != ll ]; then
		emu $m cuda moe_
	else
		for d in cuda auto cpu; do emu ll $d; done
	fi
done

if [ $FAILED = 0 ]; then rm -rf "$W"; else echo "# the files are kept in $W"; fi
