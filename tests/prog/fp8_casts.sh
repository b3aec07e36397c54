# fp8_casts.sh - lib/kernels/fp8.h's casts and the CPU fp8_quantize against
# independent references in tests/py-env.sh's environment
# (tests/prog/py/fp8_ref.py, through tests/tools/megac_fp8cast):
# fp8_from_f32_nosat is bit for bit ml_dtypes' float32 -> float8_e4m3fn /
# float8_e5m2, and fp8_from_f32 is ml_dtypes' cast of the value clipped to
# the format's largest (a NaN giving the canonical 0x7f), over every class of
# float bit patterns (a few million; all 2^32 under make check-long); the
# scale rules transcribed in numpy (AMAX with and without pow2, MX, GIVEN)
# give fp8_quantize's codes, dequantization scales and amax bit for bit.
. tests/prog_lib.sh
W=$(new_tmp fp8_casts)
TOOL=$MEGAC_BUILD/tools/megac_fp8cast
export OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=1

hf_env "$W/pyenv.log"
[ "$HF" = false ] && exit 1

# check NAME MODE ARGS...: fp8_ref.py MODE, its last line in the ok line
check() {
	_n=$1
	shift
	if "$HF" tests/prog/py/fp8_ref.py "$@" >"$W/ref.log" 2>&1; then
		ok "$_n: $(tail -n 1 "$W/ref.log")"
	else
		notok "$_n"
		show "$W/ref.log" 16
	fi
}

check "the casts against ml_dtypes on every class of float patterns" classes "$TOOL" "$W"
check "fp8_quantize against the scale rules in numpy" quant "$TOOL" "$W"

if long_only; then
	# all 2^32 patterns, two halves side by side (about 3 minutes on 2 cores)
	"$HF" tests/prog/py/fp8_ref.py range "$TOOL" 0 0x80000000 >"$W/lo.log" 2>&1 &
	lo=$!
	"$HF" tests/prog/py/fp8_ref.py range "$TOOL" 0x80000000 0x80000000 >"$W/hi.log" 2>&1
	rc_hi=$?
	wait $lo
	rc_lo=$?
	if [ $rc_lo -eq 0 ] && [ $rc_hi -eq 0 ]; then
		ok "the casts against ml_dtypes on all 2^32 float patterns"
	else
		notok "the casts against ml_dtypes on all 2^32 float patterns"
		show "$W/lo.log" 12
		show "$W/hi.log" 12
	fi
fi
