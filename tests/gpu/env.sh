# env.sh - sourced by the device-machine scripts (run.sh, lease.sh): the
# libraries pack.sh carried (build/gpu-libs), and libnccl, cuBLAS and the
# CUDA runtime from PyTorch's wheels where the machine lacks them; and what
# they share: elapsed (seconds since START), say (a line to the terminal and
# $OUT/summary.txt), machine_info (the GPU, driver, CPUs, missing libraries).
export LD_LIBRARY_PATH="$PWD/build/gpu-libs${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
for pkg in nccl cublas cuda_runtime; do
	if ldd bin/train 2>/dev/null | grep -q "lib$(echo $pkg | sed 's/_runtime/rt/').*not found"; then
		d=$(python3 -c "import os, nvidia.$pkg as m; print(os.path.join(list(m.__path__)[0], 'lib'))" 2>/dev/null)
		[ -n "$d" ] && export LD_LIBRARY_PATH="$d:$LD_LIBRARY_PATH"
	fi
done
export OMPI_MCA_mpi_yield_when_idle=1

elapsed() { echo $(($(date +%s) - START)); }
say() { echo "$*" | tee -a "$OUT/summary.txt"; }
machine_info() {
	date -u
	nvidia-smi -L
	nvidia-smi --query-gpu=driver_version,memory.total,clocks.max.sm --format=csv
	nproc
	grep -m1 'model name' /proc/cpuinfo
	echo "LD_LIBRARY_PATH=$LD_LIBRARY_PATH"
	for f in bin/* build/gpu/*; do echo "== ldd $f"; ldd "$f" | grep -i 'not found'; done
}
