#!/bin/sh
# ptxas_report.sh FILES... - ptxas's resource report (nvcc -Xptxas -v, kept
# beside each CUDA object as <object>.ptxas by the build) as a table, one line
# per kernel and architecture: the source, sm_XX, registers, stack frame,
# spill stores and loads, static shared memory and cmem[0] bytes ("-" where
# ptxas does not print one), then the demangled name (template arguments
# kept, parameter lists dropped). Device functions that ptxas compiled on
# their own (not inlined) are listed too, marked "[function]".
#
# Exit status: 0 when no kernel spills; 1 when any kernel or function has
# spill stores or spill loads (every kernel here is hot: none may spill),
# naming them on stderr; 2 when a file is missing or no kernel is found.
set -u
if [ $# -eq 0 ]; then
	echo "usage: sh tests/gpu/ptxas_report.sh OBJECT.o.ptxas..." >&2
	exit 2
fi
for f in "$@"; do
	if [ ! -r "$f" ]; then
		echo "ptxas_report: cannot read $f" >&2
		exit 2
	fi
done

# a demangler: cu++filt (the CUDA toolkit's) when there is one, else GNU
# c++filt (the same Itanium mangling); -p drops the parameter lists
DEM=
for d in cu++filt "${CUDA_HOME:-/usr/local/cuda}/bin/cu++filt" /usr/local/cuda/bin/cu++filt c++filt; do
	if command -v "$d" >/dev/null 2>&1 && echo _Z1fi | "$d" -p >/dev/null 2>&1; then
		DEM=$d
		break
	fi
done

T=$(mktemp -d "${TMPDIR:-/tmp}/ptxas_report.XXXXXX") || exit 2
trap 'rm -rf "$T"' EXIT
trap 'exit 2' HUP INT TERM

# pass 1: one tab-separated record per (kernel or function, arch):
# src arch regs stack spill_st spill_ld smem cmem kind mangled
for f in "$@"; do
	src=$(basename "$f" .ptxas)
	src=${src%.o}
	awk -v src="$src" -v q="'" -v OFS='\t' '
	function num(s) { sub(/^[^0-9]*/, "", s); return s + 0 }
	# a section is one ptxas run (one arch); functions that are not entries
	# carry no arch of their own: they take the arch of their section
	function flush(   i) {
		for (i = 1; i <= npend; i++) {
			split(pend[i], p, "\t")
			print src, (sec_arch != "" ? sec_arch : "sm_?"), "-", p[2], p[3], p[4], "-", "-", "function", p[1]
		}
		npend = 0
		sec_arch = ""
	}
	function emit() {
		if (cur == "") return
		if (cur_entry)
			print src, cur_arch, regs, stack, sst, sld, smem, cmem, "kernel", cur
		else
			pend[++npend] = cur "\t" stack "\t" sst "\t" sld
		cur = ""
	}
	/^ptxas info *: [0-9]+ bytes gmem/ { emit(); flush(); next }
	/^ptxas info *: Compiling entry function / {
		emit()
		# Compiling entry function "NAME" for "sm_XX" (in single quotes)
		split($0, qs, q)
		name = qs[2]
		arch = qs[4]
		entry_name = name
		entry_arch = arch
		sec_arch = arch
		next
	}
	/^ptxas info *: Function properties for / {
		emit()
		cur = $0
		sub(/^ptxas info *: Function properties for /, "", cur)
		sub(/[ \t\r]+$/, "", cur)
		cur_entry = (cur == entry_name)
		cur_arch = entry_arch
		regs = "-"; stack = 0; sst = 0; sld = 0; smem = 0; cmem = "-"
		if (!cur_entry) { entry_name = "" }
		next
	}
	/^[ \t]*[0-9]+ bytes stack frame/ {
		n = split($0, fs, ",")
		for (i = 1; i <= n; i++) {
			if (fs[i] ~ /bytes stack frame/) stack = num(fs[i])
			else if (fs[i] ~ /bytes spill stores/) sst = num(fs[i])
			else if (fs[i] ~ /bytes spill loads/) sld = num(fs[i])
		}
		next
	}
	/^ptxas info *: Used [0-9]+ registers/ {
		line = $0
		sub(/^ptxas info *: /, "", line)
		n = split(line, fs, ",")
		for (i = 1; i <= n; i++) {
			if (fs[i] ~ /registers/) regs = num(fs[i])
			else if (fs[i] ~ /bytes smem/) smem = num(fs[i])
			else if (fs[i] ~ /bytes cmem\[0\]/) cmem = num(fs[i])
		}
		emit()
		entry_name = ""
		next
	}
	END { emit(); flush() }
	' "$f" || exit 2
done >"$T/rows"

if [ ! -s "$T/rows" ]; then
	echo "ptxas_report: no kernels in $* (not ptxas -v output?)" >&2
	exit 2
fi

# pass 2: demangle the names in one go, in the rows' order
cut -f 10 "$T/rows" >"$T/mangled"
if [ -n "$DEM" ]; then "$DEM" -p <"$T/mangled" >"$T/names"; else cp "$T/mangled" "$T/names"; fi
if [ "$(wc -l <"$T/names")" -ne "$(wc -l <"$T/rows")" ]; then cp "$T/mangled" "$T/names"; fi
paste "$T/rows" "$T/names" >"$T/all"

# pass 3: the table, each kernel's architectures together, in ptxas's order;
# the spilling ones on stderr
awk -F '\t' '
BEGIN { w = length("source") }
{
	key = $1 "\t" $10
	if (!(key in seen)) seen[key] = ++nk
	k = seen[key]
	nr = ++nrow[k]
	r = k SUBSEP nr
	for (i = 1; i <= 8; i++) f[r, i] = $i
	name[r] = $11 ($9 == "function" ? " [function]" : "")
	if (length($1) > w) w = length($1)
	if ($5 + 0 > 0 || $6 + 0 > 0) {
		bad = bad sprintf("  %s %s (%s): %d bytes spill stores, %d bytes spill loads\n", $11, $2, $1, $5, $6)
		nbad++
	}
	nrows++
}
END {
	fmt = "%-" w "s %-6s %5s %6s %9s %9s %7s %6s  %s\n"
	printf fmt, "source", "arch", "regs", "stack", "spill_st", "spill_ld", "smem", "cmem0", "kernel"
	for (k = 1; k <= nk; k++)
		for (j = 1; j <= nrow[k]; j++) {
			r = k SUBSEP j
			printf fmt, f[r, 1], f[r, 2], f[r, 3], f[r, 4], f[r, 5], f[r, 6], f[r, 7], f[r, 8], name[r]
		}
	printf "%d kernels/functions x arch, %d with spills\n", nrows, nbad
	if (nbad) {
		printf "ptxas_report: %d kernel(s) spill registers to local memory:\n%s", nbad, bad > "/dev/stderr"
		exit 1
	}
}' "$T/all"
