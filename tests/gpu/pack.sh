#!/bin/sh
# pack.sh - build for the H200 (sm_90) and gather the shared libraries the
# programs need into build/gpu-libs/, for tests/gpu/run.sh on the device machine.
# The CUDA libraries are the machine's; so is libnccl (218 MB, beyond what a
# run can carry): run.sh finds it.
set -eu
cd "$(dirname "$0")/../.."
make --no-print-directory -j"$(nproc)" CUDA_ARCH="-gencode arch=compute_90,code=sm_90" all \
	$(ls tests/unit/*.c | sed 's|tests/unit/\(.*\)\.c|build/tests/\1|') build/gpu/parity build/gpu/nccl build/gpu/attn_bench >/dev/null
rm -rf build/gpu-libs
mkdir -p build/gpu-libs
for f in bin/* build/tests/* build/gpu/*; do
	[ -x "$f" ] && [ -f "$f" ] || continue
	ldd "$f" 2>/dev/null | awk '/=> \// { print $3 }'
done | sort -u | grep -v -e '/libc\.so' -e '/libm\.so' -e '/libpthread' -e '/libdl\.so' -e '/ld-linux' \
	-e '/libcuda' -e '/libcudart' -e '/libcublas' -e '/libnccl' | while read -r lib; do cp -L "$lib" build/gpu-libs/; done
du -sh build/gpu-libs bin build/tests build/gpu | sed 's/^/packed: /'
