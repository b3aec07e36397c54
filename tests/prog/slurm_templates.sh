# slurm_templates.sh - the GPU templates of examples/slurm/ as written: each
# template's flag lists (MODEL, LAYOUT, RUN, CKPT, taken from the script
# with its four arguments filled in) are accepted by report_memory with the
# template's world size (#SBATCH --nodes x --ntasks-per-node), whose layout
# checks (heads and groups over TP, layers over PP, experts over EP, the
# batch over DP) pass, and the tokenizer flags a template gives read a
# stand-in of the tokenizer it names (preprocess_data on a small corpus):
# the Mixtral template's SentencePiece tokenizer.model, the others'
# tokenizer.json. The jobs themselves need GPU nodes and are not run.
. tests/prog_lib.sh
W=$(new_tmp slurm_templates)
OUT_LOG=$W/out.log
ERR=$W/err.log
export OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=1
xz -dc $FIX/tokenizers/qwen3/tokenizer.json.xz >"$W/qwen.json"
xz -dc $FIX/tokenizers/gpt2/tokenizer.json.xz >"$W/gpt2.json"
printf '{"text": "In the beginning God created the heaven and the earth."}\n' >"$W/corpus.jsonl"

# (no pathname expansion: DeepSeek-V3's --moe-layer-freq expression holds * and [)
set -f
for t in llama3_8b_8nodes mixtral_8x7b qwen2.5_7b deepseek_v3; do
	f=examples/slurm/$t.sbatch
	case $t in
	mixtral*) TOKENIZER=$FIX/tokenizers/spm/llama.model ;;
	qwen* | deepseek*) TOKENIZER=$W/qwen.json ;;
	*) TOKENIZER=$W/gpt2.json ;;
	esac
	CHECKOUT=$PWD WORK=$W/$t DATA=$W/${t}_text_document
	TRAIN_ITERS=$(sed -n 's/^TRAIN_ITERS=//p' "$f")
	MODEL="" LAYOUT="" RUN="" CKPT=""
	eval "$(grep -E '^(MODEL|LAYOUT|RUN|CKPT)=' "$f")"
	nodes=$(sed -n 's/^#SBATCH --nodes=//p' "$f")
	per=$(sed -n 's/^#SBATCH --ntasks-per-node=//p' "$f")
	if [ -z "$MODEL" ] || [ -z "$LAYOUT" ] || [ -z "$RUN" ] || [ -z "$CKPT" ] || [ -z "$nodes" ] || [ -z "$per" ]; then
		notok "$t: the template's flag lists and #SBATCH sizes"
		continue
	fi
	# shellcheck disable=SC2086 # the flag lists split into words
	expect_ok "$t: report_memory takes its flags as written (world $((nodes * per)))" \
		$BIN/report_memory $MODEL $LAYOUT $RUN $CKPT --world-size $((nodes * per))
	tokflags=$(echo "$MODEL" | grep -o -- '--tokenizer-type [^ ]* --tokenizer-model [^ ]*')
	# shellcheck disable=SC2086
	expect_ok "$t: its tokenizer flags read the tokenizer ($(echo "$tokflags" | cut -d' ' -f2))" \
		$BIN/preprocess_data --input "$W/corpus.jsonl" --output-prefix "$W/$t" $tokflags --append-eod \
		--workers 1 --log-interval 0
done
