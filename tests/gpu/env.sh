# env.sh - sourced (from the repository root) by the GPU machine scripts
# (measure.sh, run.sh; bench.sh and train_parity.sh when run alone). It
#   1. unpacks the GPU kit of tests/gpu/pack.sh (build/gpu-kit/kit.tar.xz, or
#      $MEGAC_KIT/kit.tar.xz) once, beside it in build/gpu-kit.unpacked/ (a
#      private folder, never /); without a kit, our normal build (bin/,
#      build/gpu/, build/tests/) is used as it is;
#   2. finds the python3 that has torch (tests/gpu/torch_python.sh: the one on
#      PATH on the GPU machine) as MEGAC_PYTHON, for the PyTorch peers;
#   3. finds the CUDA libraries our programs need (the kit's cuda-libs.txt:
#      libcublasLt, libcublas, libcudart, libnccl) in $CUDA_HOME/lib64
#      (default /usr/local/cuda), else in the nvidia-* wheels of that python's
#      site-packages (searched, not named: CUDA 13 puts cuBLAS and cudart in
#      nvidia/cu13/lib, CUDA 12 in nvidia/<pkg>/lib, NCCL is in
#      nvidia/nccl/lib), else where the system's loader finds them;
#   4. writes wrappers that run our programs with the kit's libraries and
#      CUDA's first on LD_LIBRARY_PATH, for those programs alone: MEGAC_BIN,
#      MEGAC_GPU and MEGAC_TESTS name the wrappers' folders (bin/, gpu/,
#      tests/). LD_LIBRARY_PATH itself is never changed here, so python,
#      torch, nvidia-smi and the tools keep the machine's own libraries;
# and defines what the scripts share: elapsed (seconds since START), say (a
# line to the terminal and $OUT/summary.txt), machine_info (the GPU, driver,
# CPU, kit, python, CUDA libraries, and any library our programs miss),
# megac_ldd (ldd of a program as its wrapper runs it) and bundle_out (all of
# $OUT but the summaries into one logs.tar.gz: a few files to bring back).
# Returns non-zero, with a line on stderr, when the kit cannot be unpacked.
# MEGAC_KIT_UNPACK=python unpacks with python's tarfile even where xz exists.

megac_env_fail() {
	echo "env.sh: $*" >&2
	return 1
}

MEGAC_KIT=${MEGAC_KIT:-$PWD/build/gpu-kit}
MEGAC_KIT=${MEGAC_KIT%/}
case "$MEGAC_KIT" in /*) ;; *) MEGAC_KIT=$PWD/$MEGAC_KIT ;; esac
case "$MEGAC_KIT" in *"'"*) megac_env_fail "a quote in the kit's path: $MEGAC_KIT" || return 1 ;; esac
MEGAC_KIT_ROOT=$MEGAC_KIT.unpacked
MEGAC_PYTHON=${MEGAC_PYTHON:-$(sh tests/gpu/torch_python.sh 2>/dev/null)}
export MEGAC_PYTHON

# 1. the kit, unpacked once per kit.tar.xz (a stamp holds its checksum)
if [ -f "$MEGAC_KIT/kit.tar.xz" ]; then
	megac_sum=$(cksum <"$MEGAC_KIT/kit.tar.xz")
	if [ "$(cat "$MEGAC_KIT_ROOT/.stamp" 2>/dev/null)" != "$megac_sum" ]; then
		rm -rf "$MEGAC_KIT_ROOT"
		mkdir -p "$MEGAC_KIT_ROOT" || megac_env_fail "cannot create $MEGAC_KIT_ROOT" || return 1
		if command -v xz >/dev/null && [ "${MEGAC_KIT_UNPACK:-}" != python ]; then
			xz -dc "$MEGAC_KIT/kit.tar.xz" | tar -xf - -C "$MEGAC_KIT_ROOT"
		else # no xz-utils: python's tarfile reads xz (any python3 will do)
			"${MEGAC_PYTHON:-python3}" -c 'import sys, tarfile
t = tarfile.open(sys.argv[1], "r:xz")
t.extractall(sys.argv[2], **({"filter": "tar"} if hasattr(tarfile, "tar_filter") else {}))' \
				"$MEGAC_KIT/kit.tar.xz" "$MEGAC_KIT_ROOT"
		fi
		if [ $? -ne 0 ] || [ ! -d "$MEGAC_KIT_ROOT/bin" ]; then
			rm -rf "$MEGAC_KIT_ROOT"
			megac_env_fail "cannot unpack $MEGAC_KIT/kit.tar.xz (damaged? pack it again: sh tests/gpu/pack.sh)" || return 1
		fi
		echo "$megac_sum" >"$MEGAC_KIT_ROOT/.stamp"
	fi
	megac_real=$MEGAC_KIT_ROOT
	megac_lib=$MEGAC_KIT_ROOT/lib
	megac_cuda_names=$(cat "$MEGAC_KIT_ROOT/cuda-libs.txt" 2>/dev/null)
else # no kit: the normal build, its libraries the machine's own
	megac_real=
	megac_lib=
	megac_cuda_names=
fi
[ -n "$megac_cuda_names" ] || megac_cuda_names="libcublasLt.so.13 libcublas.so.13 libcudart.so.13 libnccl.so.2"

# 3. the CUDA libraries: "soname folder" lines in MEGAC_CUDA_FOUND ("soname -"
# when the system's loader finds it, "soname ?" when nothing does)
megac_wheel_dirs=
if [ -n "$MEGAC_PYTHON" ]; then
	megac_wheel_dirs=$("$MEGAC_PYTHON" -c 'import os, sys
for p in sys.path:
    d = os.path.join(p or ".", "nvidia")
    if os.path.isdir(d):
        print(os.path.abspath(d))' 2>/dev/null)
fi
MEGAC_CUDA_FOUND=
megac_cuda_path=
for megac_n in $megac_cuda_names; do
	megac_d=
	for megac_c in "${CUDA_HOME:-/usr/local/cuda}/lib64" "${CUDA_HOME:-/usr/local/cuda}/targets/x86_64-linux/lib"; do
		if [ -e "$megac_c/$megac_n" ]; then
			megac_d=$megac_c
			break
		fi
	done
	if [ -z "$megac_d" ] && [ -n "$megac_wheel_dirs" ]; then
		# nvidia/cu13/lib/X, nvidia/<pkg>/lib/X: three levels under nvidia/
		megac_f=$(echo "$megac_wheel_dirs" | while read -r megac_w; do
			find "$megac_w" -maxdepth 3 -name "$megac_n" 2>/dev/null
		done | sort | head -n 1)
		[ -n "$megac_f" ] && megac_d=$(dirname "$megac_f")
	fi
	if [ -z "$megac_d" ]; then
		if ldconfig -p 2>/dev/null | grep -q "^[[:space:]]*$megac_n "; then megac_d=-; else megac_d='?'; fi
	fi
	MEGAC_CUDA_FOUND="$MEGAC_CUDA_FOUND$megac_n $megac_d
"
	case "$megac_d" in
	- | '?') ;;
	*) case ":$megac_cuda_path:" in *":$megac_d:"*) ;; *) megac_cuda_path=${megac_cuda_path:+$megac_cuda_path:}$megac_d ;; esac ;;
	esac
done
case "$megac_cuda_path" in *"'"*) megac_env_fail "a quote in a CUDA library folder: $megac_cuda_path" || return 1 ;; esac
# what our programs get first on LD_LIBRARY_PATH, before the caller's own
MEGAC_LD_PATH=$megac_lib${megac_lib:+${megac_cuda_path:+:}}$megac_cuda_path

# 4. the wrappers: MEGAC_KIT_ROOT/run/{bin,gpu,tests}/NAME
megac_wrap() { # REAL WRAPPER
	{
		echo '#!/bin/sh'
		echo "# made by tests/gpu/env.sh: $(basename "$1") with the GPU kit's libraries and CUDA's first"
		echo "LD_LIBRARY_PATH='$MEGAC_LD_PATH'\${LD_LIBRARY_PATH:+:\$LD_LIBRARY_PATH}"
		echo 'export LD_LIBRARY_PATH'
		echo "exec '$1' \"\$@\""
	} >"$2" && chmod +x "$2"
}
rm -rf "$MEGAC_KIT_ROOT/run"
for megac_k in bin gpu tests; do
	if [ -n "$megac_real" ]; then
		megac_from=$megac_real/$megac_k
	else
		case "$megac_k" in bin) megac_from=$PWD/bin ;; *) megac_from=$PWD/build/$megac_k ;; esac
	fi
	mkdir -p "$MEGAC_KIT_ROOT/run/$megac_k" || megac_env_fail "cannot create $MEGAC_KIT_ROOT/run" || return 1
	for megac_p in "$megac_from"/*; do
		[ -f "$megac_p" ] && [ -x "$megac_p" ] || continue
		case "$megac_p" in *"'"*) continue ;; esac
		megac_wrap "$megac_p" "$MEGAC_KIT_ROOT/run/$megac_k/$(basename "$megac_p")" ||
			megac_env_fail "cannot write the wrappers in $MEGAC_KIT_ROOT/run" || return 1
	done
done
MEGAC_BIN=$MEGAC_KIT_ROOT/run/bin
MEGAC_GPU=$MEGAC_KIT_ROOT/run/gpu
MEGAC_TESTS=$MEGAC_KIT_ROOT/run/tests
export MEGAC_BIN MEGAC_GPU MEGAC_TESTS
export OMPI_MCA_mpi_yield_when_idle=1

elapsed() { echo $(($(date +%s) - START)); }
say() { echo "$*" | tee -a "$OUT/summary.txt"; }

# megac_ldd WRAPPER: ldd of the program behind a wrapper, with its library path
megac_ldd() {
	_real=$(sed -n "s/^exec '\(.*\)' \"\$@\"$/\1/p" "$1")
	LD_LIBRARY_PATH="$MEGAC_LD_PATH${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" ldd "${_real:-$1}"
}

# machine_info: what a reader of the results needs to know about the machine
machine_info() {
	date -u
	timeout 10 nvidia-smi -L
	timeout 10 nvidia-smi --query-gpu=driver_version,memory.total,clocks.max.sm --format=csv
	echo "cpus: $(nproc), $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2)"
	for _f in avx2 fma; do # the kit is built for x86-64-v3 (GNUmakefile's ARCH)
		grep -qw $_f /proc/cpuinfo || echo "WARNING: the CPU lacks $_f; programs built with -march=x86-64-v3 die (SIGILL)"
	done
	if [ -n "$megac_real" ]; then
		echo "kit: $MEGAC_KIT_ROOT"
		sed -n '1,4p' "$MEGAC_KIT_ROOT/MANIFEST"
	else
		echo "no kit ($MEGAC_KIT/kit.tar.xz): the normal build, bin/ and build/"
	fi
	echo "python with torch: ${MEGAC_PYTHON:-none}"
	echo "CUDA libraries (- : the system's loader finds it; ? : nowhere):"
	printf '%s' "$MEGAC_CUDA_FOUND" | sed 's/^/  /'
	echo "our programs' library path: $MEGAC_LD_PATH"
	echo "LD_LIBRARY_PATH (everything else's): ${LD_LIBRARY_PATH:-}"
	for _f in "$MEGAC_BIN"/* "$MEGAC_GPU"/*; do
		[ -f "$_f" ] || continue
		_miss=$(megac_ldd "$_f" 2>&1 | grep -i 'not found' | tr -s ' \t' ' ')
		echo "ldd $(basename "$_f"): ${_miss:-every library found}"
	done
}

# bundle_out: every file of $OUT but summary.txt, bench.txt and machine.txt
# into $OUT/logs.tar.gz (a few files to bring back, whatever the run wrote)
bundle_out() {
	(
		_list=$(mktemp) || exit 0
		cd "$OUT" || exit 0
		find . -mindepth 1 -maxdepth 1 ! -name summary.txt ! -name bench.txt ! -name machine.txt \
			! -name logs.tar.gz | sed 's|^\./||' >"$_list"
		if [ -s "$_list" ]; then
			tar -czf logs.tar.gz -T "$_list" && xargs rm -rf <"$_list"
		fi
		rm -f "$_list"
	)
}
