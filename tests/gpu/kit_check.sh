#!/bin/sh
# kit_check.sh - does every program of an unpacked GPU kit find ALL its shared
# libraries on the GPU machine? Each NEEDED entry of ROOT/bin/*, ROOT/gpu/*
# and ROOT/tests/*, followed recursively through the libraries it names, must
# be a library of the kit (ROOT/lib), a CUDA library (tests/gpu/env.sh finds
# those there: /usr/local/cuda or the python wheels), or on the allow-list
# below of what that machine surely has. The entries are read with readelf -d
# and looked up in ROOT/lib alone, never in this machine's /usr/lib, where our
# Debian libraries are installed: plain ldd would find them there and pass a
# kit that fails on the GPU machine. Also refused: any piece of glibc or of the GCC
# runtime inside the kit (the GPU machine's newer copies must be used).
#   sh tests/gpu/kit_check.sh ROOT
# prints one line per problem, then a summary line; exit 1 on any problem.
#   sh tests/gpu/kit_check.sh --list ROOT
# prints "lib NAME", "cuda NAME" and "missing NAME NEEDER" lines (pack.sh).
# Sourced with KIT_CHECK_LIB=1: only the functions, for pack.sh.
set -u

# kit_allowed NAME: on the GPU machine for sure, never packed.
kit_allowed() {
	case "$1" in
	# glibc (Ubuntu 24.04 there: 2.39; we build on Debian 12's 2.36). Symbol
	# versioning keeps it backward compatible, and its parts must come from
	# one build: a 2.36 librt or libresolv beside a 2.39 libc needs
	# GLIBC_PRIVATE symbols that may be gone.
	ld-linux-x86-64.so.2 | libc.so.6 | libm.so.6 | libmvec.so.1 | libpthread.so.0 | libdl.so.2 | \
		librt.so.1 | libresolv.so.2 | libnsl.so.1 | libutil.so.1 | libanl.so.1) return 0 ;;
	# the GCC runtime: libgcc_s and libstdc++ are Priority: required on Ubuntu
	# (apt itself needs them), and GCC 13/14's copies there are backward
	# compatible with GCC 12's; libgomp comes with gcc (gcc-13 -> libgcc-13-dev
	# -> libgomp1), which the GPU machine's nvcc needs as its host compiler (nvcc
	# builds and runs CUDA C++ there). PyTorch's python stack uses
	# the same copies, so shipping older ones would also risk it.
	libstdc++.so.6 | libgcc_s.so.1 | libgomp.so.1) return 0 ;;
	esac
	return 1
}

# kit_cuda NAME: a CUDA toolkit library, found on the GPU machine by env.sh (in
# /usr/local/cuda/lib64 or PyTorch's nvidia-* wheels), never packed
# (libcublasLt alone is 540 MB).
kit_cuda() {
	case "$1" in
	libcublas.so.* | libcublasLt.so.* | libcudart.so.* | libnccl.so.* | libcufft.so.* | libcurand.so.* | \
		libcusparse.so.* | libcusolver.so.* | libnvrtc.so.* | libnvJitLink.so.*) return 0 ;;
	esac
	return 1
}

# kit_needed FILE: its NEEDED entries, one per line (none for a script)
kit_needed() { readelf -d "$1" 2>/dev/null | sed -n 's/.*(NEEDED).*\[\(.*\)\]$/\1/p'; }

# kit_walk ROOT: "lib NAME" (found in ROOT/lib), "cuda NAME", "allowed NAME"
# and "missing NAME NEEDER" lines, every name once, for the programs of ROOT
# and, recursively, the kit libraries they need
kit_walk() (
	cd "$1" || exit 1
	todo=
	for f in bin/* gpu/* tests/*; do
		[ -f "$f" ] && todo="$todo $f"
	done
	seen=" "
	set -f
	while [ -n "$todo" ]; do
		# shellcheck disable=SC2086 # names and kit paths hold no blanks
		set -- $todo
		f=$1
		shift
		todo="$*"
		for n in $(kit_needed "$f"); do
			case "$seen" in *" $n "*) continue ;; esac
			seen="$seen$n "
			if kit_allowed "$n"; then
				echo "allowed $n"
			elif kit_cuda "$n"; then
				echo "cuda $n"
			elif [ -f "lib/$n" ]; then
				echo "lib $n"
				todo="$todo lib/$n"
			else
				echo "missing $n $f"
			fi
		done
	done
)

[ -n "${KIT_CHECK_LIB:-}" ] && return 0

list=
if [ "${1:-}" = --list ]; then
	list=1
	shift
fi
if [ $# -ne 1 ] || [ ! -d "$1" ]; then
	echo "usage: sh tests/gpu/kit_check.sh [--list] ROOT   (ROOT: an unpacked kit, with bin/ gpu/ lib/)" >&2
	exit 2
fi
command -v readelf >/dev/null || { echo "kit_check.sh: needs readelf (binutils)" >&2; exit 2; }
ROOT=$1
if [ -n "$list" ]; then
	kit_walk "$ROOT"
	exit
fi

walk=$(kit_walk "$ROOT") || exit 1
bad=0
progs=$(find "$ROOT/bin" "$ROOT/gpu" "$ROOT/tests" -type f 2>/dev/null | wc -l)
if [ "$progs" -eq 0 ]; then
	echo "$ROOT holds no programs (bin/, gpu/, tests/)"
	bad=1
fi
echo "$walk" | while read -r what name needer; do
	[ "$what" = missing ] && echo "$name: needed by $needer; not in the kit's lib/, not a CUDA library, not on the allow-list"
done
echo "$walk" | grep -q '^missing ' && bad=1
for f in "$ROOT"/lib/*; do
	[ -e "$f" ] || continue
	n=$(basename "$f")
	if kit_allowed "$n"; then
		echo "lib/$n: part of glibc or the GCC runtime; the GPU machine's own copy must be used"
		bad=1
	elif kit_cuda "$n"; then
		echo "lib/$n: a CUDA library; the GPU machine's own copy must be used"
		bad=1
	elif [ -L "$f" ] || [ ! -f "$f" ]; then
		echo "lib/$n: not a plain file"
		bad=1
	elif ! echo "$walk" | grep -qx "lib $n"; then
		echo "lib/$n: needed by no program of the kit (a stray file, $(wc -c <"$f") bytes)"
		bad=1
	fi
done
if [ $bad -eq 0 ]; then
	echo "kit_check: $progs programs resolve every library: $(echo "$walk" | grep -c '^lib ') from the kit," \
		"CUDA's $(echo "$walk" | sed -n 's/^cuda //p' | tr '\n' ' ')and the GPU machine's$(echo "$walk" | sed -n 's/^allowed / /p' | tr -d '\n')"
fi
exit $bad
