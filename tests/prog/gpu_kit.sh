# gpu_kit.sh - a CPU dry run of the GPU kit (tests/gpu/pack.sh, env.sh,
# kit_check.sh, measure.sh, tests/gpu/README.md): what a run on a GPU machine
# needs must be right before the GPU's time is spent on it.
#
# It does not build the real kit: pack.sh's sm_90 build takes minutes (1.5 on
# two cores, more on CI's one) and its xz -6 another minute, against the
# seconds a test may cost here. It runs pack.sh's own code instead on the
# programs the normal build already has (KIT_NOBUILD=1: $MEGAC_BIN and
# $MEGAC_BUILD, sm_80 + sm_90 fatbins) at xz -0. Both make that kit LARGER
# than the real one (the programs carry a second architecture; xz -0
# compresses less than -6: about 34 against 23 MiB here), so its size bounds the
# real kit's from above; the libraries, the checks and the carry line are the
# same code. About 20 s, most of it xz. Checked:
#   - pack.sh ends with one "carry: PATH... (N MiB)" line: at most 8 paths,
#     each git-ignored, and with the tree (tracked and not-ignored files)
#     at most 60 MiB, as measured here;
#   - every packed program resolves ALL its shared libraries from the kit, the
#     CUDA libraries, or the allow-list of kit_check.sh (glibc, libstdc++,
#     libgcc_s, libgomp, each justified there), followed NEEDED entry by NEEDED
#     entry with readelf in the kit alone, so this machine's /usr/lib (where
#     our Debian libraries live) cannot hide a missing one; nothing of glibc
#     or of the GCC runtime inside; and the check fails a kit without them;
#   - the kit's train, unpacked and run through env.sh's wrapper, trains and
#     saves a checkpoint, and the loader loads nothing from outside the kit,
#     CUDA and the allow-list (LD_DEBUG=libs: dlopen'ed libraries too);
#   - measure.sh's stages' timeouts are literal numbers adding up to <= 540 s;
#   - env.sh finds cuBLAS, cudart and NCCL in fake CUDA 13 (nvidia/cu13/lib,
#     nvidia/nccl/lib) and CUDA 12 (nvidia/<pkg>/lib) wheel layouts of the
#     site-packages of the python3 with torch, unpacks with python's tarfile
#     where asked, puts the kit's libraries and CUDA's first for our programs
#     and leaves LD_LIBRARY_PATH alone for everything else (python3 sees it
#     unchanged);
#   - no script of tests/gpu (nor train_reference.sh) names a fixed python.
# Skipped without CUDA (nvcc absent: no GPU programs to pack) and outside a git
# checkout (pack.sh measures the tree with git).
. tests/prog_lib.sh
TOP=$PWD
if ! command -v nvcc >/dev/null || [ ! -x "$MEGAC_BUILD/gpu/parity" ]; then
	ok "gpu kit # SKIP no CUDA in this build (nvcc absent): no GPU programs to pack"
	exit 0
fi
if ! git rev-parse --is-inside-work-tree >/dev/null 2>&1; then
	ok "gpu kit # SKIP not a git checkout: pack.sh measures the tree with git"
	exit 0
fi
W=$(new_tmp gpu_kit)
case "$W" in
"$TOP"/*) ;;
*) mkdir -p build/tmp && W=$(mktemp -d "$TOP/build/tmp/gpu_kit.XXXXXX") ;; # the kit must be inside the checkout
esac
KIT=$W/kit

# 1. pack.sh on the normal build's programs; the unit tests when they are built
unit=1
for c in tests/unit/*.c; do
	[ -x "$MEGAC_BUILD/tests/$(basename "$c" .c)" ] || unit=0
done
t0=$(date +%s)
KIT_NOBUILD=1 KIT_BUILD=$MEGAC_BUILD KIT_BIN=$BIN KIT_XZ=0 KIT_UNIT=$unit KIT_OUT=$KIT \
	sh tests/gpu/pack.sh >"$W/pack.out" 2>"$W/pack.err"
rc=$?
if [ $rc -eq 0 ] && [ -f "$KIT/kit.tar.xz" ]; then
	ok "pack.sh packs the normal build's programs$([ $unit = 1 ] && echo ' and unit tests') ($(($(date +%s) - t0)) s at xz -0)"
else
	notok "pack.sh (exit $rc)"
	show "$W/pack.err" 12
	exit 1
fi

# 2. the carry line and what would travel
line=$(tail -n 1 "$W/pack.out")
paths=$(echo "$line" | sed -n 's/^carry: \(.*\) (\([0-9]*\) MiB)$/\1/p')
n=$(echo "$line" | sed -n 's/^carry: .* (\([0-9]*\) MiB)$/\1/p')
if [ -n "$paths" ] && [ -n "$n" ] && [ "$(grep -c '^carry: ' "$W/pack.out")" -eq 1 ]; then
	ok "pack.sh ends with one carry line: $line"
else
	notok "pack.sh's last line is not 'carry: PATH... (N MiB)': $line"
fi
count=0
bad=
bytes=0
for p in $paths; do
	count=$((count + 1))
	if [ ! -e "$p" ]; then
		bad="$bad $p(missing)"
	elif ! git check-ignore -q "$p"; then
		bad="$bad $p(not ignored)"
	else
		bytes=$((bytes + $(find "$p" -type f -print0 | xargs -0 stat -c %s | awk '{ s += $1 } END { printf "%.0f", s }')))
	fi
done
tree=$(git ls-files -z --cached --others --exclude-standard | xargs -0 stat -c %s 2>/dev/null | awk '{ s += $1 } END { printf "%.0f", s }')
total=$((bytes + tree))
mib=$(awk -v b="$total" 'BEGIN { printf "%.1f", b / 1048576 }')
if [ "$count" -ge 1 ] && [ "$count" -le 8 ] && [ -z "$bad" ] && [ "$total" -le $((60 * 1048576)) ] &&
	[ "${n:-0}" -ge "${mib%.*}" ]; then
	ok "the kit travels: $count carry path(s), git-ignored; with the tree $mib MiB <= 60 (an upper bound: sm_80 too, xz -0)"
else
	notok "the kit's carry: $count path(s)$bad; with the tree $mib MiB (limit 60; the line says ${n:-?})"
fi

# 3. unpacked as on the GPU machine, every library resolved from the kit, CUDA or the allow-list
ROOT=$KIT.unpacked
if (MEGAC_KIT=$KIT . tests/gpu/env.sh) >"$W/env.log" 2>&1 && [ -x "$ROOT/bin/train" ] && [ -x "$ROOT/gpu/parity" ]; then
	ok "env.sh unpacks the kit into $(basename "$ROOT")/ beside it"
else
	notok "env.sh does not unpack the kit"
	show "$W/env.log"
	exit 1
fi
if sh tests/gpu/kit_check.sh "$ROOT" >"$W/check.log" 2>&1; then
	ok "every packed program resolves all its libraries (readelf, in the kit alone): $(tail -n 1 "$W/check.log" | cut -c 12-)"
else
	notok "the kit's programs miss libraries, or it carries glibc/GCC pieces"
	show "$W/check.log" 20
fi
# the check is not fooled by this machine's /usr/lib: a kit without its libraries fails
mkdir -p "$W/bare/lib" "$W/bare/bin"
cp "$ROOT/bin/train" "$W/bare/bin/"
if ! sh tests/gpu/kit_check.sh "$W/bare" >"$W/bare.log" 2>&1 && grep -q '^libmpi.so.40: needed by bin/train' "$W/bare.log"; then
	ok "kit_check.sh fails a kit without its libraries ($(grep -c 'needed by' "$W/bare.log") missing, libmpi.so.40 among them)"
else
	notok "kit_check.sh passes a kit without its libraries"
	show "$W/bare.log"
fi

# 4. the kit's train through its wrapper: trains, saves, loads nothing from outside
cat >"$W/run.sh" <<'EOF'
MEGAC_KIT=$1
. tests/gpu/env.sh || exit 1
echo "LIBPATH $MEGAC_LD_PATH"
LD_DEBUG=libs "$MEGAC_BIN/train" --mock-data --tokenizer-type NullTokenizer --vocab-size 512 --num-layers 1 \
	--hidden-size 32 --num-attention-heads 2 --seq-length 32 --max-position-embeddings 32 --micro-batch-size 1 \
	--global-batch-size 1 --lr 1e-3 --train-iters 2 --log-interval 1 --eval-interval 1000 --eval-iters 0 \
	--data-cache-path "$2/cache" --save "$2/ck" --save-interval 2 --device cpu
EOF
OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=1 sh "$W/run.sh" "$KIT" "$W" >"$W/train.log" 2>&1
rc=$?
outside=$(KIT_CHECK_LIB=1 && . tests/gpu/kit_check.sh && sed -n 's/.*calling init: \(.*\)$/\1/p' "$W/train.log" | sort -u |
	while read -r l; do
		case "$l" in "$ROOT/lib/"*) continue ;; esac
		n=${l##*/}
		kit_allowed "$n" || kit_cuda "$n" || echo "$l"
	done)
if [ $rc -eq 0 ] && grep -q 'saved checkpoint at iteration *2' "$W/train.log" &&
	grep -q "calling init: $ROOT/lib/libhdf5_openmpi" "$W/train.log" && [ -z "$outside" ]; then
	ok "the kit's train runs through env.sh's wrapper: 2 iterations and a checkpoint, every library from the kit, CUDA or the allow-list"
else
	notok "the kit's train through its wrapper (exit $rc)${outside:+; loaded from outside the kit: $(echo $outside)}"
	grep -v 'calling\|find library\|trying file\|search path\|^ *[0-9]*: *$' "$W/train.log" | tail -n 8 | sed 's/^/#   /'
fi

# 5. measure.sh: every stage under a literal timeout, at most 540 s in all
code=$(sed 's/#.*//' tests/gpu/measure.sh)
sum=$(echo "$code" | grep -o 'timeout [0-9][0-9]*' | awk '{ s += $2 } END { print s + 0 }')
stages=$(echo "$code" | grep -o 'timeout [0-9][0-9]*' | wc -l)
loose=$(echo "$code" | grep 'timeout ' | grep -v 'timeout [0-9][0-9]* ')
if [ "$sum" -gt 0 ] && [ "$sum" -le 540 ] && [ -z "$loose" ]; then
	ok "measure.sh: $stages stages under timeouts adding up to $sum s (<= 540)"
else
	notok "measure.sh's timeouts add up to $sum s (limit 540)${loose:+; not a literal limit: $loose}"
fi

# 6. env.sh with fake wheels: CUDA 13 and CUDA 12 layouts, python's tarfile, the path kept from python
# fakekit DIR SONAME...: a kit whose "train" prints the LD_LIBRARY_PATH it gets
fakekit() {
	_d=$1
	shift
	mkdir -p "$_d.src/bin" "$_d.src/gpu" "$_d.src/lib" "$_d"
	printf '#!/bin/sh\nprintf "%%s\\n" "${LD_LIBRARY_PATH:-}"\n' >"$_d.src/bin/train"
	chmod +x "$_d.src/bin/train"
	: >"$_d.src/lib/libfake.so.1"
	printf '%s\n' "$@" >"$_d.src/cuda-libs.txt"
	tar -C "$_d.src" -cJf "$_d/kit.tar.xz" .
}
# fakesp DIR FILE...: a site-packages with empty libraries and a torch package
fakesp() {
	_d=$1
	shift
	mkdir -p "$_d/torch"
	: >"$_d/torch/__init__.py"
	for _f in "$@"; do
		mkdir -p "$(dirname "$_d/$_f")"
		: >"$_d/$_f"
	done
}
# fakeenv KIT SITE [VAR=VALUE...]: source env.sh there; print what it found
# and the LD_LIBRARY_PATH that our program, python3 and the shell see
fakeenv() {
	_k=$1
	_s=$2
	shift 2
	env CUDA_HOME="$W/no-cuda" PYTHONPATH="$_s" MEGAC_PYTHON= MEGAC_KIT="$_k" LD_LIBRARY_PATH=/the/callers "$@" \
		sh -c '. tests/gpu/env.sh || exit 1
		printf "%s" "$MEGAC_CUDA_FOUND"
		echo "program $("$MEGAC_BIN/train")"
		echo "python $(python3 -c "import os; print(os.environ.get(\"LD_LIBRARY_PATH\", \"\"))")"
		echo "torch-python $("$MEGAC_PYTHON" -c "import os; print(os.environ.get(\"LD_LIBRARY_PATH\", \"\"))")"
		echo "shell $LD_LIBRARY_PATH"' 2>&1
}
# wheels ID NAME KIT SITE UNPACK FILE...: env.sh finds the CUDA libraries at
# SITE/FILE (in cuda-libs.txt's order) and scopes the path to our programs
wheels() {
	_id=$1
	_name=$2
	_k=$3
	_s=$4
	_u=$5
	shift 5
	want=
	dirs=
	for _f in "$@"; do
		want="$want $_s/$(dirname "$_f")"
		case ":$dirs:" in *":$_s/$(dirname "$_f"):"*) ;; *) dirs="$dirs:$_s/$(dirname "$_f")" ;; esac
	done
	fakeenv "$_k" "$_s" MEGAC_KIT_UNPACK="$_u" >"$W/$_id.log"
	found=$(grep '^lib' "$W/$_id.log" | awk '{ printf " %s", $2 }')
	if [ "$found" = "$want" ] && grep -qxF "program $_k.unpacked/lib$dirs:/the/callers" "$W/$_id.log" &&
		grep -qx 'python /the/callers' "$W/$_id.log" && grep -qx 'torch-python /the/callers' "$W/$_id.log" &&
		grep -qx 'shell /the/callers' "$W/$_id.log"; then
		ok "env.sh, $_name: finds cuBLAS, cudart and NCCL in the torch python's site-packages, our programs get them first; python3 and the shell keep LD_LIBRARY_PATH as it was"
	else
		notok "env.sh, $_name"
		sed 's/^/#   /' "$W/$_id.log"
		echo "#   wanted:$want; program $_k.unpacked/lib$dirs:/the/callers"
	fi
}
fakekit "$W/fk13" libcublasLt.so.13 libcublas.so.13 libcudart.so.13 libnccl.so.2
fakesp "$W/sp13" nvidia/cu13/lib/libcublasLt.so.13 nvidia/cu13/lib/libcublas.so.13 nvidia/cu13/lib/libcudart.so.13 \
	nvidia/nccl/lib/libnccl.so.2 nvidia/cu13/lib/libnvrtc.so.13
wheels cu13 "CUDA 13 wheels (nvidia/cu13/lib, nvidia/nccl/lib)" "$W/fk13" "$W/sp13" "" nvidia/cu13/lib/libcublasLt.so.13 \
	nvidia/cu13/lib/libcublas.so.13 nvidia/cu13/lib/libcudart.so.13 nvidia/nccl/lib/libnccl.so.2
fakekit "$W/fk12" libcublasLt.so.12 libcublas.so.12 libcudart.so.12 libnccl.so.2
fakesp "$W/sp12" nvidia/cublas/lib/libcublasLt.so.12 nvidia/cublas/lib/libcublas.so.12 \
	nvidia/cuda_runtime/lib/libcudart.so.12 nvidia/nccl/lib/libnccl.so.2
wheels cu12 "CUDA 12 wheels (nvidia/<pkg>/lib), unpacked by python's tarfile" "$W/fk12" "$W/sp12" python \
	nvidia/cublas/lib/libcublasLt.so.12 nvidia/cublas/lib/libcublas.so.12 nvidia/cuda_runtime/lib/libcudart.so.12 \
	nvidia/nccl/lib/libnccl.so.2

# 7. no fixed python in the GPU scripts
fixed=$(grep -n '/usr/bin/python\|/opt/torch' tests/gpu/*.sh tests/gpu/*.py tests/prog/train_reference.sh |
	grep -v ':[0-9]*: *#' | grep -v '^tests/gpu/torch_python.sh:')
if [ -z "$fixed" ]; then
	ok "the GPU scripts name no fixed python (tests/gpu/torch_python.sh finds the one with torch)"
else
	notok "a fixed python in the GPU scripts: $fixed"
fi
rm -rf "$KIT" "$ROOT" "$W/bare" "$W/cache" "$W/ck" # 150 MB of kit and mock-data caches
