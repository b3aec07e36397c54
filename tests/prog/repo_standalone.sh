# repo_standalone.sh - the repository stands alone and has a short front door:
#   - no file of the repository (tracked, or untracked but not ignored: what a
#     commit would hold) refers to files outside it or to the development
#     process: design-note and specification files that are not in the
#     repository, a sibling "shared" folder, the numbers of issues and
#     tickets, absolute paths of the machine it was written on. Megatron's
#     own files, our docs/ pages and public URLs are what a reader can open;
#   - README.md is under 200 lines;
#   - docs/README.md lists every page of docs/.
# Files come from git when this is a checkout (CI runs in a clone), else from
# find. The patterns below are written so that this file does not match them
# (a character class around one letter), and a planted file proves that the
# scan finds what it should.
. tests/prog_lib.sh
W=$(new_tmp repo_standalone)

# one extended regular expression per kind of reference, with its name
PATTERNS="a specification file of the development notes|sp[e]c/
a specification file of the development notes|(gpt-datas[e]t|indexed-datas[e]t|memory-formul[a]|parallel-stat[e]|training-arg[s]|text-generation-serve[r])\.md
a section of a specification|[Ss]pe[c] (§|section [0-9])
the design notes|DESI[G]N
the development notes|(METHO[D]|KIND[S])\.md
the shared folder|\.\./shar[e]d|(^|[^_[:alnum:]/.-])shar[e]d/
an issue number|[Ii]ssu[e]s? #?[0-9]
a ticket number|[Tt]icke[t]s? #?[0-9]|\([#][0-9]+\)
an absolute path of the development machine|/wor[k]/"

# list_files OUT: the repository's files, one per line
list_files() {
	if git rev-parse --is-inside-work-tree >/dev/null 2>&1; then
		git -c core.quotePath=off ls-files --cached --others --exclude-standard >"$1.all"
	else
		find . -path ./.git -prune -o -path ./build -prune -o -name __pycache__ -prune -o -type f -print |
			sed 's|^\./||' | grep -v '^bin/[^/]*$' >"$1.all"
		grep -x 'bin/README.md' <"$1.all" >/dev/null || { [ -f bin/README.md ] && echo bin/README.md >>"$1.all"; }
	fi
	# files deleted in the work tree but still in the index are gone
	while IFS= read -r f; do [ -f "$f" ] && printf '%s\n' "$f"; done <"$1.all" >"$1"
}

# scan LIST REPORT: every line of the files in LIST that matches a pattern,
# as "file:line: text  [what]" in REPORT; returns 0 when there is none
scan() {
	: >"$2"
	echo "$PATTERNS" | while IFS='|' read -r what re; do
		# binary files (-I) are data, not text a reader follows
		tr '\n' '\0' <"$1" | xargs -0 grep -nIHE -e "$re" -- 2>/dev/null |
			cut -c1-200 | sed "s/\$/  [$what]/" >>"$2"
	done
	# a line that matches several patterns is reported once
	sort -t: -k1,1 -k2,2n -u "$2" >"$2.sorted" && mv "$2.sorted" "$2"
	[ ! -s "$2" ]
}

# the scan itself: a planted file holding one reference of each kind is caught
mkdir -p "$W/plant"
{
	echo "see spe""c/checkpoint.md section 3"
	echo "as DESI""GN decision 4 says"
	echo "copied from ../sha""red/notes"
	echo "as sha""red/notes/probe.md found"
	echo "fixed in iss""ue 7, and (#""12)"
	echo "built in /wo""rk/main"
	echo "the formula of memory-form""ula.md"
} >"$W/plant/planted.md"
echo "$W/plant/planted.md" >"$W/plant.list"
if ! scan "$W/plant.list" "$W/plant.report" && [ "$(wc -l <"$W/plant.report")" -ge 7 ] &&
	[ "$(cut -d: -f2 "$W/plant.report" | sort -u | wc -l)" -eq 7 ]; then
	ok "the scan finds a planted reference of each kind"
else
	notok "the scan missed planted references (found $(wc -l <"$W/plant.report") of 7 lines)"
	show "$W/plant.report" 10
fi

list_files "$W/files"
n=$(wc -l <"$W/files")
if [ "$n" -gt 100 ] && grep -qx README.md "$W/files" && grep -qx 'tests/prog/repo_standalone.sh' "$W/files"; then
	ok "the repository's files: $n"
else
	notok "the repository's files: only $n, or README.md or this test missing from the list"
fi

if scan "$W/files" "$W/report"; then
	ok "no file refers to files outside the repository or to tickets"
else
	notok "$(wc -l <"$W/report") line(s) refer to files outside the repository or to tickets; cite Megatron's file and function, a page of docs/, or nothing"
	sed 's/^/#   /' "$W/report" | head -n 60
fi

lines=$(wc -l <README.md)
if [ "$lines" -lt 200 ]; then
	ok "README.md is short: $lines lines"
else
	notok "README.md has $lines lines (fewer than 200 wanted: move the details to docs/)"
fi

missing=""
for f in docs/*.md; do
	b=${f#docs/}
	[ "$b" = README.md ] && continue
	grep -qF "]($b" docs/README.md || missing="$missing $b"
done
if [ -z "$missing" ]; then
	ok "docs/README.md links every page of docs/"
else
	notok "docs/README.md does not link:$missing"
fi
