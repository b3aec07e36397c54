# chat_template.sh - lib/data/chat_template.c against jinja2: every published
# chat template under tests/fixtures/chat_templates/ rendered for the same
# conversations (tests/prog/py/chat_template_ref.py convs: with and without a
# system message, multi-turn, empty and null content, unicode, quotes and
# backslashes, <think> blocks, tools and tool calls, add_generation_prompt
# both ways) by tests/tools/megac_chat_template and by transformers 4.49's
# own compiled template in tests/py-env.sh's environment; the texts must be
# byte-identical, and ours must fail exactly where jinja2 raises.
. tests/prog_lib.sh
W=$(new_tmp chat_template)
OUT_LOG=$W/out.log
ERR=$W/err.log
TOOL=$MEGAC_BUILD/tools/megac_chat_template
# strftime_now's clock, the same on both sides
export MEGAC_TEMPLATE_DATE="2025-03-14"

hf_env "$W/pyenv.log"
[ "$HF" = false ] && exit 1
REF=tests/prog/py/chat_template_ref.py

setup "the test conversations" "$HF" $REF convs "$W/convs.jsonl"
# one python for every template: importing transformers is most of the time
setup "jinja2's renders" "$HF" $REF render "$W" "$W/convs.jsonl" tests/fixtures/chat_templates/*.jinja
for t in tests/fixtures/chat_templates/*.jinja; do
	n=$(basename "$t" .jinja)
	if ! "$TOOL" "$t" "$W/convs.jsonl" >"$W/$n.ours" 2>"$W/$n.err"; then
		notok "$n: megac_chat_template failed"
		show "$W/$n.err"
		continue
	fi
	if "$HF" $REF compare "$n" "$W/$n.ours" "$W/$n.ref" >"$W/$n.cmp" 2>&1; then
		ok "$(tail -n 1 "$W/$n.cmp")"
	else
		notok "$n: differs from jinja2"
		show "$W/$n.cmp" 12
	fi
done

# a template outside the subset is refused at parse time, naming line and column
printf 'line one\n{%% macro m() %%}x{%% endmacro %%}\n' >"$W/macro.jinja"
expect_fail "a macro is refused naming its line and column" "macro.jinja:2:1: statement 'macro' is not supported" \
	"$TOOL" "$W/macro.jinja" "$W/convs.jsonl"
