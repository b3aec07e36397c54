# ssm_ops.sh - the CPU backend's Mamba-2 mixer ops (ops.h, "Mamba-2 (SSD)
# mixer") against PyTorch in float64 (tests/prog/py/ssm_ref.py, the system
# python with torch, through tests/tools/megac_ssm): the causal depthwise
# convolution with SiLU against torch's conv1d, the selective scan against
# the step-by-step recurrence and transformers' chunked SSD form (for several
# chunk lengths), the gated grouped RMSNorm against its transcription; every
# output and every gradient, by autograd.
. tests/prog_lib.sh
W=$(new_tmp ssm_ops)
TOOL=$MEGAC_BUILD/tools/megac_ssm
export OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=2

if /usr/bin/python3 tests/prog/py/ssm_ref.py "$TOOL" "$W" >"$W/ref.log" 2>&1; then
	ok "Mamba-2 ops against PyTorch: $(tail -n 1 "$W/ref.log")"
else
	notok "Mamba-2 ops against PyTorch"
	show "$W/ref.log" 30
fi
