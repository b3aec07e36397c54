# ckpt_guard.sh - checkpoints that protect runs (what a reliability review
# and a new user's first runs found): files of two
# iterations in one checkpoint are refused naming both, and the run falls
# back to the older iteration; a lost tracker resumes from the newest
# iteration instead of training over them; an empty or garbage tracker is
# shown as it is; ckpt_convert records whether it wrote optimizer state;
# partial checkpoints of killed saves are reported with their size and
# removed when their writer is dead; a --train-iters 0 checkpoint resumes
# with the flags' schedule; schedule and vocabulary-padding refusals name
# the values and the flag that fixes them; every model field that changes
# the math is compared on --load, all differences in one message; the
# tokenizer travels inside the checkpoint (text_gen_server refuses another
# one and uses the recorded one when given none, the Hugging Face export
# loads in AutoTokenizer); checkpoints without the new records still load.
. tests/prog_lib.sh
train_test_begin ckpt_guard

BASE="--num-layers 2 --hidden-size 32 --num-attention-heads 4 --seq-length 32 --max-position-embeddings 32"
BASE="$BASE --micro-batch-size 2 --global-batch-size 4 --lr 1e-3 --lr-decay-style cosine --lr-warmup-iters 2"
BASE="$BASE --data-path $W/kjv_text_document --split 98,2,0 --eval-interval 1000 --eval-iters 1 --log-interval 1"
BASE="$BASE --seed 1234 $GPT2 --data-cache-path $W/cache"
LL="--position-embedding-type rope --rotary-base 1000000 --normalization RMSNorm --norm-epsilon 1e-6 --swiglu"
LL="$LL --disable-bias-linear --untie-embeddings-and-output-weights"
T="$BIN/train $BASE $LL"
C=$BIN/ckpt_convert
tail_same() { $PY tests/prog/py/compare_metrics.py tail "$@" >"$W/cmp.log" 2>&1; }
# attr FILE NAME: a root attribute of an HDF5 file, as h5py reads it
attr() { $PY -c 'import h5py, sys; v = h5py.File(sys.argv[1], "r").attrs[sys.argv[2]]; print(v.decode() if isinstance(v, bytes) else v)' "$1" "$2"; }
# clean ERR: the message holds no control bytes but newlines (no memory shown)
clean() { ! LC_ALL=C grep -q '[^[:print:][:space:]]' "$1"; }

setup "8 iterations, saving at 4 and 8" sh -c "$T --train-iters 8 --save $W/ck --save-interval 4 \
	--metrics-file $W/straight.jsonl >$W/straight.log 2>&1"

# ---- model.h5 of iteration 4 inside iteration 8
cp -r "$W/ck" "$W/mix"
cp "$W/mix/iter_0000004/model.h5" "$W/mix/iter_0000008/model.h5"
if $T --train-iters 8 --load "$W/mix" --metrics-file "$W/mix.jsonl" >"$W/mix.log" 2>&1 &&
	grep -q "iter_0000008/model.h5' records iteration 4 but '.*iter_0000008/optim.h5' records iteration 8" "$W/mix.log" &&
	grep -q "iteration 8 is damaged (see above); falling back to iteration 4" "$W/mix.log" &&
	tail_same "$W/straight.jsonl" "$W/mix.jsonl" 5 8; then
	ok "model.h5 of iteration 4 in iteration 8: both files and iterations named, fell back to 4, losses 5-8 as the straight run's ($(cat "$W/cmp.log"))"
else
	notok "model.h5 and optim.h5 of different iterations"
	show "$W/mix.log" 4
fi
expect_fail "text_gen_server refuses the mixed iteration" "iter_0000008/model.h5' records iteration 4 but lies in the directory of iteration 8" \
	timeout 60 $BIN/text_gen_server --load "$W/mix" --port 0
expect_fail "ckpt_convert refuses it" "records iteration 4 but" $C --load "$W/mix" --save "$W/mixout"
[ ! -e "$W/mixout" ] && ok "... writing nothing" || notok "ckpt_convert left $W/mixout"

# ---- a lost tracker: the newest iteration, not training over them
cp -r "$W/ck" "$W/lost"
rm "$W/lost/latest_checkpointed_iteration.txt"
rm -r "$W/lost/iter_0000008"
if $T --train-iters 8 --load "$W/lost" --save "$W/lost" --save-interval 4 --metrics-file "$W/lost.jsonl" \
	>"$W/lost.log" 2>&1 && grep -q "no latest_checkpointed_iteration.txt, but iteration directories: resuming from the newest, iteration 4" "$W/lost.log" &&
	tail_same "$W/straight.jsonl" "$W/lost.jsonl" 5 8 && cmp -s "$W/lost/iter_0000004/model.h5" "$W/ck/iter_0000004/model.h5" &&
	[ "$(cat "$W/lost/latest_checkpointed_iteration.txt")" = 8 ]; then
	ok "no tracker: warned, resumed from iteration 4 (left as it was), trained 5-8 as the straight run, tracker 8 ($(cat "$W/cmp.log"))"
else
	notok "a lost tracker"
	show "$W/lost.log" 4
fi

# ---- empty and garbage trackers, shown as they are
cp -r "$W/ck" "$W/te"
: >"$W/te/latest_checkpointed_iteration.txt"
for prog in "$T --train-iters 8" "timeout 60 $BIN/text_gen_server --port 0" "$C --save $W/teout"; do
	name=$(basename "$(echo "${prog#timeout 60 }" | cut -d' ' -f1)")
	# shellcheck disable=SC2086
	expect_fail "$name: an empty tracker is refused, naming it" "te/latest_checkpointed_iteration.txt' is empty: expected an iteration number or 'release'" \
		$prog --load "$W/te"
	clean "$ERR" && ok "$name: ... with no bytes of memory in the message" || notok "$name: control bytes in: $(cat -v "$ERR")"
done
printf 'garbage\001\n' >"$W/te/latest_checkpointed_iteration.txt"
expect_fail "a garbage tracker is shown byte for byte" "found \"garbage\\x01\\x0a\"" $T --train-iters 8 --load "$W/te"

# ---- ckpt_convert says and records what optimizer state it wrote
expect_ok "convert --no-optim" $C --load "$W/ck" --save "$W/noopt" --no-optim
[ "$(attr "$W/noopt/iter_0000008/model.h5" optimizer_state_saved)" = 0 ] &&
	ok "... records optimizer_state_saved = 0" || notok "--no-optim records optimizer_state_saved $(attr "$W/noopt/iter_0000008/model.h5" optimizer_state_saved)"
expect_fail "train --load of it says what to do" "holds no optimizer state" $T --train-iters 10 --load "$W/noopt"
grep -q -- "give --no-load-optim" "$ERR" && ok "... (give --no-load-optim)" || notok "... no advice: $(cat "$ERR")"
expect_ok "... and loads with --no-load-optim" $T --train-iters 9 --load "$W/noopt" --no-load-optim
expect_ok "convert a source without optimizer state" $C --load "$W/noopt" --save "$W/noopt2"
if grep -q "holds no optimizer state (no optim.h5): the converted checkpoint has none either" "$ERR" &&
	[ "$(attr "$W/noopt2/iter_0000008/model.h5" optimizer_state_saved)" = 0 ]; then
	ok "... says so, and records optimizer_state_saved = 0"
else
	notok "converting a source without optimizer state"
	show "$ERR"
fi
cp -r "$W/ck" "$W/lostopt"
rm "$W/lostopt/iter_0000008/optim.h5"
expect_fail "a source that lost its optim.h5 is refused" "optim.h5' is missing, although model.h5 records optimizer state" \
	$C --load "$W/lostopt" --save "$W/lostoptout"
[ ! -e "$W/lostoptout" ] && ok "... writing nothing" || notok "ckpt_convert left $W/lostoptout"
expect_ok "... and converts the weights alone with --no-optim" $C --load "$W/lostopt" --save "$W/lostoptout" --no-optim

# ---- partial checkpoints of killed saves
MEGAC_FAULT_KILL_SAVE=8 $T --train-iters 8 --save "$W/kill" --save-interval 4 >"$W/kill.log" 2>&1
rc=$?
part=$(ls -A "$W/kill" | grep '^\.iter_0000008\.tmp-')
# one left by a writer on another host: reported, never removed from here
mkdir -p "$W/kill/.iter_0000099.tmp-77-0"
head -c 5000 /dev/zero >"$W/kill/.iter_0000099.tmp-77-0/model.h5"
printf 'host other-node.example\npid 77\nstart 1\npidns pid:[1]\nboot x\n' >"$W/kill/.iter_0000099.tmp-77-0/.writer"
if [ $rc -eq 137 ] && [ -n "$part" ] && $T --train-iters 8 --load "$W/kill" --save "$W/kill" --save-interval 4 \
	--metrics-file "$W/kill.jsonl" >"$W/kill2.log" 2>&1 &&
	grep -q "kill/$part' is a partial checkpoint ([0-9.]* [kM]B in [0-9]* files) left by a save that did not finish (pid [0-9]* on this host, no longer running): removed it" "$W/kill2.log" &&
	grep -q "\.iter_0000099\.tmp-77-0' is a checkpoint being saved, or a partial one (5000 bytes in 1 file) .*other-node.example.*left alone" "$W/kill2.log" &&
	[ ! -e "$W/kill/$part" ] && [ -d "$W/kill/.iter_0000099.tmp-77-0" ] && tail_same "$W/straight.jsonl" "$W/kill.jsonl" 5 8; then
	ok "the killed save's partial checkpoint is reported with its size and removed; another host's is reported and kept"
else
	notok "partial checkpoints (kill exit $rc, '$part')"
	show "$W/kill2.log" 4
	ls -A "$W/kill" | sed 's/^/#   /'
fi

# ---- a checkpoint of iteration 0 takes its schedule from the flags
setup "--train-iters 0 --save" $T --train-iters 0 --save "$W/zero"
setup "6 iterations from scratch" $T --train-iters 6 --metrics-file "$W/six.jsonl"
if $T --train-iters 6 --load "$W/zero" --metrics-file "$W/zero.jsonl" >"$W/zero.log" 2>&1 &&
	$PY tests/prog/py/compare_metrics.py same "$W/six.jsonl" "$W/zero.jsonl" 6 >"$W/cmp.log" 2>&1; then
	ok "resuming the --train-iters 0 checkpoint trains as from scratch ($(cat "$W/cmp.log"))"
else
	notok "resuming a --train-iters 0 checkpoint"
	show "$W/zero.log" 3
	show "$W/cmp.log" 3
fi

# ---- schedule refusals: only what changes something, with both values
expect_ok "more --train-iters with a constant weight decay and the same decay length" \
	$T --train-iters 12 --lr-decay-iters 8 --load "$W/ck"
grep -q "iteration       12/      12" "$OUT_LOG" && ok "... trains to iteration 12" || notok "... did not train to 12"
expect_fail "a longer decay names both lengths" "the decay length: 32 samples in the checkpoint, 48 from the flags" \
	$T --train-iters 12 --load "$W/ck"
grep -q -- "--override-opt-param-scheduler .* or --use-checkpoint-opt-param-scheduler" "$ERR" &&
	ok "... and the flags that choose" || notok "... without the flags: $(cat "$ERR")"
WD="--weight-decay-incr-style linear --start-weight-decay 0.01 --end-weight-decay 0.1"
setup "4 iterations with a linear weight-decay ramp" $T $WD --train-iters 4 --save "$W/wd" --save-interval 4
expect_fail "with a ramping weight decay its length matters" \
	"the weight-decay ramp length: 16 samples in the checkpoint, 32 from the flags" \
	$T $WD --train-iters 8 --lr-decay-iters 4 --load "$W/wd"
expect_ok "... --use-checkpoint-opt-param-scheduler keeps the checkpoint's" \
	$T $WD --train-iters 8 --lr-decay-iters 4 --load "$W/wd" --use-checkpoint-opt-param-scheduler

# ---- the padded vocabulary at another TP: the divisor that fixes it, and it does
expect_fail "TP2 pads the vocabulary otherwise: both sizes and the fix" \
	"a padded vocabulary (the embedding's rows): 50304 in the checkpoint, 50432 from the flags" \
	$MPI -np 2 $T --tensor-model-parallel-size 2 --train-iters 8 --load "$W/ck"
d=$(sed -n 's/.*--make-vocab-size-divisible-by \([0-9]*\) pads it as the checkpoint does at TP 2.*/\1/p' "$ERR" | head -n 1)
if [ -n "$d" ] && $MPI -np 2 $T --tensor-model-parallel-size 2 --make-vocab-size-divisible-by "$d" --train-iters 8 \
	--load "$W/ck" --ckpt-step 4 --metrics-file "$W/tp2.jsonl" >"$W/tp2.log" 2>&1 &&
	tail_same "$W/straight.jsonl" "$W/tp2.jsonl" 5 8; then
	ok "the suggested --make-vocab-size-divisible-by $d resumes as TP2 with the TP1 run's losses ($(cat "$W/cmp.log"))"
else
	notok "the suggested divisor ('$d')"
	show "$W/tp2.log" 3
fi

# ---- every model field that changes the math, all at once
NOLL="--position-embedding-type rope --disable-bias-linear --untie-embeddings-and-output-weights"
expect_fail "a resume with the default RoPE base, epsilon, norm and MLP is refused" "holds another model than the flags describe (5 differences)" \
	$BIN/train $BASE $NOLL --train-iters 8 --load "$W/ck"
if grep -q -- "--rotary-base: 1000000 in the checkpoint, 10000 from the flags" "$ERR" &&
	grep -q -- "--norm-epsilon: 1e-06 in the checkpoint, 1e-05 from the flags" "$ERR" &&
	grep -q -- "--normalization: RMSNorm in the checkpoint, LayerNorm from the flags" "$ERR" &&
	grep -q -- "--swiglu: on in the checkpoint, off from the flags" "$ERR" &&
	grep -q -- "--ffn-hidden-size: 64 in the checkpoint, 128 from the flags" "$ERR" && [ "$(grep -c error "$ERR")" = 1 ]; then
	ok "... in one message naming each field with both values"
else
	notok "... the message"
	show "$ERR"
fi
expect_fail "--finetune is no way around it" "--rotary-base: 1000000 in the checkpoint" \
	$BIN/train $BASE $LL --rotary-base 500000 --train-iters 8 --load "$W/ck" --finetune
expect_ok "another dropout is training's choice" $T --hidden-dropout 0 --train-iters 9 --lr-decay-iters 8 --load "$W/ck"
grep -q -- "--hidden-dropout: 0.1 in the checkpoint, 0 from the flags" "$ERR" && ok "... and is said" ||
	notok "... not said: $(cat "$ERR")"

# ---- the tokenizer inside the checkpoint
if $PY - "$W/ck/iter_0000008/model.h5" "$GPT2_VOCAB" "$GPT2_MERGES" >"$W/tok.log" 2>&1 <<'EOF'; then
import h5py, json, sys
a = h5py.File(sys.argv[1], "r").attrs
rec = json.loads(a["tokenizer"])
assert rec["tokenizer_type"] == "GPT2BPETokenizer" and rec["vocab_size"] == 50257, rec
assert a["tokenizer_file.vocab.json"] == open(sys.argv[2], "rb").read(), "vocab.json differs"
assert a["tokenizer_file.merges.txt"] == open(sys.argv[3], "rb").read(), "merges.txt differs"
cfg = json.loads(a["config"])
assert cfg["rotary_base"] == 1000000 and abs(cfg["norm_epsilon"] - 1e-6) < 1e-12, cfg
EOF
	ok "model.h5 records the tokenizer (type, size, vocab.json and merges.txt byte for byte) and the whole config"
else
	notok "the tokenizer record"
	show "$W/tok.log"
fi
# greedy answer of a server: serve NAME DIR [FLAGS...] -> $W/NAME.txt
serve() {
	_name=$1
	_dir=$2
	shift 2
	_port=$(free_port)
	mkdir -p "$W/stmp"
	TMPDIR=$W/stmp $BIN/text_gen_server --load "$_dir" --port "$_port" --inference-max-seq-length 32 "$@" \
		>"$W/$_name.srv" 2>&1 &
	_pid=$!
	$PY - "$_port" >"$W/$_name.txt" 2>>"$W/$_name.srv" <<'EOF'
import json, sys, urllib.request
sys.path.insert(0, "tests/prog/py")
from tap import wait_health
base = "http://127.0.0.1:%s" % sys.argv[1]
wait_health(base)
req = urllib.request.Request(base + "/api", data=json.dumps({"prompts": ["In the beginning God"], "tokens_to_generate": 6,
                             "top_k": 1}).encode(), method="PUT", headers={"Content-Type": "application/json"})
print(json.loads(urllib.request.urlopen(req, timeout=60).read())["text"][0])
EOF
	_rc=$?
	ls -A "$W/stmp" >"$W/$_name.tmpls" # what the server keeps while it runs
	kill -TERM $_pid 2>/dev/null
	wait $_pid
	return $_rc
}
mkdir -p "$W/moved"
cp -r "$W/ck" "$W/moved/elsewhere"
if serve flags "$W/ck" $GPT2 && serve recorded "$W/moved/elsewhere" &&
	grep -q "no tokenizer flags: using the tokenizer .* records (GPT2BPETokenizer, 50257 tokens" "$W/recorded.srv" &&
	[ -n "$(tr -d ' \n' <"$W/flags.txt")" ] && cmp -s "$W/flags.txt" "$W/recorded.txt"; then
	ok "a moved checkpoint served without tokenizer flags answers as with them: '$(cat "$W/recorded.txt")'"
else
	notok "serving with the recorded tokenizer"
	show "$W/recorded.srv" 3
fi
[ -s "$W/recorded.tmpls" ] && [ -z "$(ls -A "$W/stmp")" ] && ok "... and removed its temporary tokenizer files" ||
	notok "the server left its tokenizer folder behind: $(ls -A "$W/stmp")"
expect_fail "another tokenizer is refused" "does not fit this tokenizer: it was trained with a GPT2BPETokenizer, the flags give a NullTokenizer" \
	timeout 60 $BIN/text_gen_server --load "$W/ck" --port 0 --tokenizer-type NullTokenizer --vocab-size 1000
grep -q "the tokenizer has 1000 tokens (padded as the checkpoint pads, to a multiple of 128: 1024), the model's vocabulary 50257 (padded to 50304)" "$ERR" &&
	ok "... naming both vocabularies, padded and not" || notok "... message: $(cat "$ERR")"

# ---- checkpoints written before these records still load
cp -r "$W/ck" "$W/old"
$PY - "$W/old/iter_0000004" <<'EOF'
import h5py, sys
with h5py.File(sys.argv[1] + "/model.h5", "r+") as f:
    for k in list(f.attrs):
        if k.startswith("tokenizer"):
            del f.attrs[k]
with h5py.File(sys.argv[1] + "/optim.h5", "r+") as f:
    del f.attrs["iteration"]
EOF
if $T --train-iters 8 --load "$W/old" --ckpt-step 4 --metrics-file "$W/old.jsonl" >"$W/old.log" 2>&1 &&
	tail_same "$W/straight.jsonl" "$W/old.jsonl" 5 8; then
	ok "a checkpoint without the tokenizer record and optim.h5's iteration resumes exactly ($(cat "$W/cmp.log"))"
else
	notok "an older checkpoint"
	show "$W/old.log" 3
fi
echo 4 >"$W/old/latest_checkpointed_iteration.txt"
serve oldflags "$W/old" $GPT2 && [ -s "$W/oldflags.txt" ] && ok "... serves with tokenizer flags" ||
	{ notok "... serving it with tokenizer flags"; show "$W/oldflags.srv" 3; }
expect_fail "... and without them says which to give" "records no tokenizer (it was saved before megac kept one): give the tokenizer flags it was trained with (--tokenizer-type GPT2BPETokenizer" \
	timeout 60 $BIN/text_gen_server --load "$W/old" --port 0

# ---- the Hugging Face export carries the recorded tokenizer
expect_ok "export a Llama-style model without tokenizer flags" $C --load "$W/ck" --save "$W/hf" --to hf
hf_env "$W/pyenv.log"
if "$HF" - "$W/hf" "$GPT2_VOCAB" "$GPT2_MERGES" >"$W/hf.log" 2>&1 <<'EOF'; then
import json, sys
from transformers import AutoTokenizer, GPT2TokenizerFast
cfg = json.load(open(sys.argv[1] + "/config.json"))
assert cfg["architectures"] == ["LlamaForCausalLM"] and cfg["eos_token_id"] == 50256 and cfg["bos_token_id"] == 50256, cfg
t = AutoTokenizer.from_pretrained(sys.argv[1])
ref = GPT2TokenizerFast(vocab_file=sys.argv[2], merges_file=sys.argv[3])
text = "In the beginning God created the heaven and the earth.<|endoftext|>"
assert t(text)["input_ids"] == ref(text)["input_ids"], (t(text)["input_ids"], ref(text)["input_ids"])
assert t.eos_token == "<|endoftext|>", t.eos_token
print(type(t).__name__)
EOF
	ok "AutoTokenizer loads the export's tokenizer ($(tail -n 1 "$W/hf.log")) with GPT-2's ids; config.json has eos/bos 50256"
else
	notok "the export's tokenizer in transformers"
	show "$W/hf.log"
fi
expect_ok "import the export" $C --load "$W/hf" --from hf --save "$W/hfback"
if [ "$(attr "$W/hfback/iter_0000000/model.h5" optimizer_state_saved)" = 0 ] &&
	attr "$W/hfback/iter_0000000/model.h5" tokenizer | grep -q '"tokenizer_type": "GPT2BPETokenizer"'; then
	ok "... records no optimizer state and the folder's tokenizer"
else
	notok "the import's records"
fi
