# cuda_resources.sh - ptxas's resource report of the CUDA kernels (no
# spills in the hot kernels). The build keeps nvcc -Xptxas -v's report
# beside each CUDA object (<object>.ptxas); tests/gpu/ptxas_report.sh turns
# them into a table (make cuda-report) and fails when a kernel spills. Checks:
# every CUDA object has its report, and no kernel of any arch spills (skipped
# when the build has no CUDA); the parser catches a spilling kernel in a
# synthetic report, names it and not its clean neighbours, and refuses a
# file with no kernels (these need no CUDA and run in every build).
. tests/prog_lib.sh
W=$(new_tmp cuda_resources)
R=tests/gpu/ptxas_report.sh
CU=${MEGAC_BUILD:?}/lib/kernels/cuda

# --- the parser against a synthetic report (as nvcc 13's ptxas -v writes it)
cat >"$W/synthetic.o.ptxas" <<'EOF'
ptxas info    : 0 bytes gmem
ptxas info    : Compiling entry function '_Z5cleanPf' for 'sm_80'
ptxas info    : Function properties for _Z5cleanPf
    0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
ptxas info    : Used 10 registers, used 1 barriers, 256 bytes smem, 360 bytes cmem[0]
ptxas info    : Compile time = 1.294 ms
ptxas info    : Compiling entry function '_Z12spill_kernelILi64EEvPfPKf' for 'sm_80'
ptxas info    : Function properties for _Z12spill_kernelILi64EEvPfPKf
    0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
ptxas info    : Used 96 registers, used 0 barriers, 368 bytes cmem[0]
ptxas info    : Compile time = 17.301 ms
ptxas info    : 0 bytes gmem
ptxas info    : Compiling entry function '_Z5cleanPf' for 'sm_90'
ptxas info    : Function properties for _Z5cleanPf
    0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
ptxas info    : Used 12 registers, used 1 barriers, 256 bytes smem
ptxas info    : Compile time = 1.863 ms
ptxas info    : Compiling entry function '_Z12spill_kernelILi64EEvPfPKf' for 'sm_90'
ptxas info    : Function properties for _Z12spill_kernelILi64EEvPfPKf
    392 bytes stack frame, 444 bytes spill stores, 472 bytes spill loads
ptxas info    : Used 255 registers, used 0 barriers, 392 bytes cumulative stack size
ptxas info    : Compile time = 11.327 ms
ptxas info    : Function properties for _Z6helperf
    0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
EOF
sh "$R" "$W/synthetic.o.ptxas" >"$W/synthetic.txt" 2>"$W/synthetic.err"
rc=$?
# the table's spilling row: source arch regs stack spill_st spill_ld smem cmem0 kernel
row=$(awk '$2 == "sm_90" && $9 == "spill_kernel<64>" { print $3, $4, $5, $6, $7 }' "$W/synthetic.txt")
if [ $rc -eq 1 ] && grep -q 'spill_kernel<64> sm_90 (synthetic): 444 bytes spill stores, 472 bytes spill loads' "$W/synthetic.err" &&
	! grep -q 'sm_80' "$W/synthetic.err" && ! grep -q 'clean' "$W/synthetic.err" &&
	[ "$row" = "255 392 444 472 0" ] && [ "$(grep -c '^synthetic ' "$W/synthetic.txt")" -eq 5 ]; then
	ok "ptxas_report.sh fails on a spilling kernel and names it: $(grep 'spill_kernel' "$W/synthetic.err" | sed 's/^ *//')"
else
	notok "ptxas_report.sh on a synthetic report with a spilling kernel (exit $rc, wanted 1 naming spill_kernel<64> sm_90 alone; its table row: '$row')"
	show "$W/synthetic.err"
	show "$W/synthetic.txt" 12
fi
# without the spill the same report passes, the clean rows as they were
sed 's/392 bytes stack frame, 444 bytes spill stores, 472 bytes spill loads/0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads/' \
	"$W/synthetic.o.ptxas" >"$W/clean.o.ptxas"
if sh "$R" "$W/clean.o.ptxas" >"$W/clean.txt" 2>"$W/clean.err" &&
	grep -q '^clean  *sm_80  *10  *0  *0  *0  *256  *360  *clean$' "$W/clean.txt" &&
	grep -q '^clean  *sm_90  *-  *0  *0  *0  *-  *-  *helper \[function\]$' "$W/clean.txt"; then
	ok "ptxas_report.sh passes the same report without the spill (registers, smem, cmem[0], device functions read)"
else
	notok "ptxas_report.sh on the report without the spill"
	show "$W/clean.err"
	show "$W/clean.txt" 12
fi
printf 'ptxas info    : 0 bytes gmem\n' >"$W/empty.o.ptxas"
sh "$R" "$W/empty.o.ptxas" >"$W/empty.txt" 2>"$W/empty.err"
rc=$?
if [ $rc -eq 2 ] && grep -q 'no kernels' "$W/empty.err"; then
	ok "ptxas_report.sh refuses a report with no kernels (exit 2)"
else
	notok "ptxas_report.sh on a report with no kernels (exit $rc, wanted 2)"
	show "$W/empty.err"
fi

# --- the build's own kernels
set -- "$CU"/*.o
if [ ! -f "$1" ]; then
	ok "cuda resources of the build's kernels # SKIP no CUDA in this build"
	exit 0
fi
missing=
for o in "$@"; do
	[ -f "$o.ptxas" ] || missing="$missing $(basename "$o")"
done
if [ -z "$missing" ]; then
	ok "every CUDA object has its ptxas report ($#: $(for o in "$@"; do basename "$o"; done | tr '\n' ' '| sed 's/ $//'))"
else
	notok "CUDA objects without a ptxas report (built before the build kept them):$missing; 'make cuda-report' (same BUILD=) compiles them again"
fi
set -- "$CU"/*.o.ptxas
if [ -f "$1" ]; then
	sh "$R" "$@" >"$W/report.txt" 2>"$W/report.err"
	rc=$?
	n=$(awk 'NR > 1 && $2 ~ /^sm_/' "$W/report.txt" | wc -l)
	archs=$(awk 'NR > 1 && $2 ~ /^sm_/ { print $2 }' "$W/report.txt" | sort -u | tr '\n' ' ' | sed 's/ $//')
	if [ $rc -eq 0 ] && [ "$n" -gt 0 ]; then
		ok "no CUDA kernel spills: $n kernel x arch rows ($archs), 0 bytes spill stores and loads"
	else
		notok "ptxas_report.sh over the build's reports (exit $rc: 1 = spills, 2 = no kernels read; $n rows; table in $W/report.txt)"
		show "$W/report.err" 20
	fi
fi
