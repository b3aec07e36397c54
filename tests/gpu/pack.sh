#!/bin/sh
# pack.sh - the GPU kit: everything a run on a GPU machine needs beyond the
# checkout, for a GPU machine that has CUDA and PyTorch but none of our Debian
# libraries. The checkout's files and the kit (a git-ignored folder of the
# checkout, the "carry" path) are copied there together, and kept small enough
# to copy quickly: 60 MiB in all at most. It
#   1. builds, for the H200 alone (sm_90; attn_wg.cu is sm_90a anyway), into
#      its own folder (make BUILD=build/kit BIN=build/kit/bin: the normal
#      build/ and bin/ are untouched) the programs the GPU scripts run:
#      bin/train and bin/preprocess_data (train_parity.sh, bench.sh,
#      train_reference.sh), gpu/parity, gpu/nccl, gpu/attn_bench, and the
#      unit tests (tests/, run.sh's last step);
#   2. strips them, and gathers the shared libraries they need that the
#      GPU machine lacks (Open MPI, HDF5, OpenBLAS, libarchive with libxml2 and
#      ICU, jansson, pcre2, utf8proc, and what those need), copied from this
#      machine's Debian packages under their sonames; never glibc's pieces
#      nor the GCC runtime (libstdc++, libgcc_s, libgomp: the GPU machine's newer
#      copies are backward compatible) nor the CUDA libraries (the GPU machine has
#      them: env.sh finds them), as tests/gpu/kit_check.sh's lists say;
#   3. checks the result with kit_check.sh (every NEEDED entry resolved from
#      the kit, CUDA, or the allow-list; nothing of glibc or GCC inside);
#   4. writes it as ONE xz-compressed tar, build/gpu-kit/kit.tar.xz (the
#      CUDA fatbins and the libraries shrink 4 to 6 times; the libraries as
#      .so files compress smaller than the Debian .deb files of their
#      packages, and need no network), with a MANIFEST beside it;
#   5. measures what would travel (the kit, plus the files git tracks or
#      would add) and fails above 60 MiB.
# On the GPU machine, tests/gpu/env.sh unpacks the kit once beside it
# (build/gpu-kit.unpacked/, never into /) and runs our programs through
# wrappers that set LD_LIBRARY_PATH for them alone.
# Progress goes to stderr; stdout ends with exactly one line
#   carry: build/gpu-kit (N MiB)
# the paths to copy to the GPU machine beside the checkout, and N the MiB that
# travel in all (those paths plus the tree), at most 60.
#
# Settings (the dry run in tests/prog/gpu_kit.sh uses them):
#   KIT_OUT=DIR     the carried folder, inside the checkout (default build/gpu-kit)
#   KIT_BUILD=DIR   the build folder (default build/kit); KIT_BIN=DIR its programs (default KIT_BUILD/bin)
#   KIT_NOBUILD=1   do not build: pack the programs already in KIT_BUILD and KIT_BIN
#   KIT_XZ=N        xz's level, 0-9 (default 6)
#   KIT_UNIT=0      leave the unit tests out
set -eu
cd "$(dirname "$0")/../.."
TOP=$PWD
KIT_OUT=${KIT_OUT:-build/gpu-kit}
KIT_BUILD=${KIT_BUILD:-build/kit}
KIT_BIN=${KIT_BIN:-$KIT_BUILD/bin}
KIT_XZ=${KIT_XZ:-6}
LIMIT_MIB=60
die() {
	echo "pack.sh: $*" >&2
	exit 1
}
say() { echo "pack: $*" >&2; }

for t in git readelf strip xz tar ldd; do
	command -v $t >/dev/null || die "needs $t on PATH (Debian: git, binutils, xz-utils, tar, libc-bin)"
done
git rev-parse --is-inside-work-tree >/dev/null 2>&1 ||
	die "$TOP is not a git checkout: what travels is the files git tracks, and pack.sh measures them with git"
# the carry path: relative to the checkout, inside it, ignored by git
case "$KIT_OUT" in
/*) rel=${KIT_OUT#"$TOP"/} ;;
*) rel=${KIT_OUT#./} ;;
esac
rel=${rel%/}
case "$rel" in
/* | .. | ../* | */../* | "") die "KIT_OUT=$KIT_OUT must be a folder inside the checkout $TOP (the kit travels as a path of the checkout)" ;;
esac
KIT_OUT=$rel
mkdir -p "$KIT_OUT"
git check-ignore -q "$KIT_OUT" ||
	die "$KIT_OUT is not ignored by git: it would travel twice, as part of the tree and as the kit"

# 1. the programs
UNIT=
if [ "${KIT_UNIT:-1}" != 0 ]; then
	UNIT=$(ls tests/unit/*.c | sed "s|tests/unit/\(.*\)\.c|$KIT_BUILD/tests/\1|")
fi
PROGS="$KIT_BIN/train $KIT_BIN/preprocess_data $KIT_BUILD/gpu/parity $KIT_BUILD/gpu/nccl $KIT_BUILD/gpu/attn_bench"
if [ -z "${KIT_NOBUILD:-}" ]; then
	command -v nvcc >/dev/null || die "nvcc is not on PATH: the kit is the CUDA build (put CUDA 13's bin/ on PATH)"
	make --no-print-directory check-pkgs >&2 || die "missing build packages (make deps)"
	log=$KIT_BUILD/pack-build.log
	mkdir -p "$KIT_BUILD"
	say "building for sm_90 into $KIT_BUILD (log: $log; several minutes the first time)"
	# shellcheck disable=SC2086
	if ! make --no-print-directory -j"$(nproc)" BUILD="$KIT_BUILD" BIN="$KIT_BIN" CUDA=1 \
		CUDA_ARCH="-gencode arch=compute_90,code=sm_90" $PROGS $UNIT >"$log" 2>&1; then
		tail -n 30 "$log" >&2
		die "the build failed (log: $log)"
	fi
fi
STAGE=$KIT_OUT.stage
rm -rf "$STAGE" "$KIT_OUT.unpacked" "$KIT_OUT.sources"
mkdir -p "$STAGE/bin" "$STAGE/gpu" "$STAGE/tests" "$STAGE/lib"
for p in $PROGS $UNIT; do
	[ -f "$p" ] && [ -x "$p" ] || die "$p is missing (KIT_NOBUILD: build it first; else see $KIT_BUILD/pack-build.log)"
	case "$p" in
	"$KIT_BIN"/*) d=bin ;;
	*/gpu/*) d=gpu ;;
	*) d=tests ;;
	esac
	strip -o "$STAGE/$d/$(basename "$p")" "$p" || die "strip $p failed"
done
[ -n "$UNIT" ] || rmdir "$STAGE/tests"

# 2. the libraries: what the loader finds here for each program (ldd),
# less what the GPU machine has (kit_check.sh's lists), copied under the soname
KIT_CHECK_LIB=1 . tests/gpu/kit_check.sh
for f in "$STAGE"/bin/* "$STAGE"/gpu/* "$STAGE"/tests/*; do
	[ -f "$f" ] || continue
	ldd "$f" 2>&1 | awk -v f="${f#"$STAGE"/}" '
		$2 == "=>" && $3 == "not" { print "missing", $1, f; next }
		$2 == "=>" && $3 ~ /^\// { print "found", $1, $3 }'
done | sort -u >"$STAGE/ldd.txt"
while read -r what name path; do
	if kit_allowed "$name" || kit_cuda "$name"; then
		continue
	fi
	[ "$what" = found ] || die "$path needs $name, which this machine lacks too (make deps)"
	cp -L "$path" "$STAGE/lib/$name"
	echo "$name $path" >>"$KIT_OUT.sources"
done <"$STAGE/ldd.txt"
rm -f "$STAGE/ldd.txt"

# 3. the check the GPU machine would make
if ! sh tests/gpu/kit_check.sh "$STAGE" >"$KIT_OUT.check" 2>&1; then
	cat "$KIT_OUT.check" >&2
	die "the kit in $STAGE does not resolve its libraries (above)"
fi
kit_walk "$STAGE" | sed -n 's/^cuda //p' >"$STAGE/cuda-libs.txt"
say "$(tail -n 1 "$KIT_OUT.check")"
rm -f "$KIT_OUT.check"

# the MANIFEST: what is inside and where it came from
{
	echo "megac GPU kit, packed $(date -u '+%Y-%m-%d %H:%M UTC') on $(uname -m) $(. /etc/os-release 2>/dev/null && echo "$PRETTY_NAME")"
	echo "commit $(git rev-parse --short HEAD)$(git diff --quiet HEAD -- 2>/dev/null || echo ' + local changes')"
	if [ -z "${KIT_NOBUILD:-}" ]; then
		echo "built for sm_90 (CUDA_ARCH=-gencode arch=compute_90,code=sm_90) in $KIT_BUILD; $(nvcc --version | sed -n "s/.*release \([0-9.]*\).*/CUDA \1/p")"
	else
		echo "programs of $KIT_BIN and $KIT_BUILD as they were (KIT_NOBUILD: a dry run)"
	fi
	echo "CUDA libraries the GPU machine must have: $(tr '\n' ' ' <"$STAGE/cuda-libs.txt")"
	echo "== programs (stripped)"
	(cd "$STAGE" && find bin gpu tests -type f 2>/dev/null | sort | xargs ls -l | awk '{ print $5, $9 }')
	echo "== libraries (copied from this machine; Debian package)"
	while read -r n src; do
		pkg=$( (dpkg -S "$src" || dpkg -S "$(readlink -f "$src")") 2>/dev/null | head -n 1 | cut -d: -f1)
		echo "$(wc -c <"$STAGE/lib/$n") $n ${pkg:-?}"
	done <"$KIT_OUT.sources"
} >"$STAGE/MANIFEST"
rm -f "$KIT_OUT.sources"

# 4. one compressed tar
say "compressing (xz -$KIT_XZ)"
rm -f "$KIT_OUT"/kit.tar.xz "$KIT_OUT"/MANIFEST
parts="MANIFEST cuda-libs.txt bin gpu lib"
[ -d "$STAGE/tests" ] && parts="$parts tests"
# shellcheck disable=SC2086 # plain names
(cd "$STAGE" && tar --sort=name --owner=0 --group=0 -cf - $parts) |
	xz -"$KIT_XZ" -T0 >"$KIT_OUT/kit.tar.xz.tmp" || die "tar | xz failed"
mv "$KIT_OUT/kit.tar.xz.tmp" "$KIT_OUT/kit.tar.xz"
cp "$STAGE/MANIFEST" "$KIT_OUT/MANIFEST"
rm -rf "$STAGE"
# anything else in the folder would travel too
extra=$(find "$KIT_OUT" -mindepth 1 -maxdepth 1 ! -name kit.tar.xz ! -name MANIFEST)
[ -z "$extra" ] || die "$KIT_OUT holds more than the kit: $extra"

# 5. what travels: the carry paths and the files git tracks or would add
# (tracked, and untracked but not ignored)
bytes() { xargs -0 stat -c %s 2>/dev/null | awk '{ s += $1 } END { printf "%.0f\n", s }'; }
kit_b=$(find "$KIT_OUT" -type f -print0 | bytes)
tree_b=$(git ls-files -z --cached --others --exclude-standard | bytes)
total_b=$((kit_b + tree_b))
mib() { awk -v b="$1" 'BEGIN { printf "%.1f", b / 1048576 }'; }
say "kit $(mib "$kit_b") MiB + tree $(mib "$tree_b") MiB = $(mib "$total_b") MiB of at most $LIMIT_MIB"
[ "$total_b" -le $((LIMIT_MIB * 1048576)) ] ||
	die "$(mib "$total_b") MiB would travel, over the $LIMIT_MIB MiB budget"
echo "carry: $KIT_OUT ($(awk -v b="$total_b" 'BEGIN { n = int(b / 1048576); if (n * 1048576 < b) n++; print n }') MiB)"
