/*
 * megac_fp8cast.c - a test tool: lib/kernels/fp8.h's casts and the CPU
 * fp8_quantize on raw binary files, for the Python references of
 * tests/prog/fp8_casts.sh (ml_dtypes and a numpy transcription of the
 * scale rules). Files are raw little-endian arrays, no header.
 *
 *   megac_fp8cast cast IN.f32 OUT
 *   megac_fp8cast range FIRST COUNT OUT
 *	four bytes per float32 value (of IN, or the bit patterns FIRST ..
 *	FIRST + COUNT - 1): fp8_from_f32 E4M3, fp8_from_f32_nosat E4M3,
 *	fp8_from_f32 E5M2, fp8_from_f32_nosat E5M2. OUT "-" is stdout.
 *   megac_fp8cast quant e4m3|e5m2 given|amax|mx POW2 TRANSPOSE ROWS COLS BR BC SCALE IN.f32 OUT
 *	kops_cpu()->fp8_quantize of IN (ROWS x COLS, or COLS x ROWS when
 *	TRANSPOSE is 1): OUT holds the codes (ROWS x COLS bytes), the blocks'
 *	dequantization scales (float32, ceil(ROWS/BR) x ceil(COLS/BC)) and the
 *	tensor's amax (one float32).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/error.h"
#include "base/xalloc.h"
#include "kernels/fp8.h"
#include "kernels/ops.h"

static void *read_all(const char *path, size_t *len)
{
	FILE *f = fopen(path, "rb");
	if (!f)
		die("cannot open '%s'", path);
	size_t cap = 1 << 20, n = 0;
	char *buf = xmalloc(cap);
	for (;;) {
		size_t got = fread(buf + n, 1, cap - n, f);
		n += got;
		if (n < cap)
			break;
		cap *= 2;
		buf = xrealloc(buf, cap);
	}
	if (ferror(f))
		die("cannot read '%s'", path);
	fclose(f);
	*len = n;
	return buf;
}

static FILE *open_out(const char *path)
{
	FILE *f = strcmp(path, "-") ? fopen(path, "wb") : stdout;
	if (!f)
		die("cannot create '%s'", path);
	return f;
}

static void close_out(FILE *f, const char *path)
{
	if (fflush(f) || ferror(f) || (f != stdout && fclose(f)))
		die("cannot write '%s'", path);
}

static void casts(uint8_t *o, float x)
{
	o[0] = fp8_from_f32(x, KOPS_E4M3);
	o[1] = fp8_from_f32_nosat(x, KOPS_E4M3);
	o[2] = fp8_from_f32(x, KOPS_E5M2);
	o[3] = fp8_from_f32_nosat(x, KOPS_E5M2);
}

static long num(const char *s, const char *what)
{
	char *end;
	long v = strtol(s, &end, 0);
	if (!*s || *end)
		die("%s: '%s' is not a number", what, s);
	return v;
}

static int cmd_cast(int argc, char **argv)
{
	if (argc != 4)
		die("usage: megac_fp8cast cast IN.f32 OUT");
	size_t len;
	float *x = read_all(argv[2], &len);
	size_t n = len / sizeof(float);
	uint8_t *o = xmalloc(4 * n + 1);
#pragma omp parallel for
	for (size_t i = 0; i < n; i++)
		casts(o + 4 * i, x[i]);
	FILE *f = open_out(argv[3]);
	fwrite(o, 4, n, f);
	close_out(f, argv[3]);
	free(x), free(o);
	return 0;
}

static int cmd_range(int argc, char **argv)
{
	if (argc != 5)
		die("usage: megac_fp8cast range FIRST COUNT OUT");
	unsigned long long first = strtoull(argv[2], NULL, 0), count = strtoull(argv[3], NULL, 0);
	if (first + count > (1ULL << 32))
		die("range: the patterns end past 2^32");
	FILE *f = open_out(argv[4]);
	const size_t chunk = 1 << 22;
	uint8_t *o = xmalloc(4 * chunk);
	for (unsigned long long s = 0; s < count; s += chunk) {
		size_t n = count - s < chunk ? (size_t)(count - s) : chunk;
#pragma omp parallel for
		for (size_t i = 0; i < n; i++)
			casts(o + 4 * i, fp8_bits_f32((uint32_t)(first + s + i)));
		fwrite(o, 4, n, f);
	}
	close_out(f, argv[4]);
	free(o);
	return 0;
}

static int cmd_quant(int argc, char **argv)
{
	if (argc != 13)
		die("usage: megac_fp8cast quant e4m3|e5m2 given|amax|mx POW2 TRANSPOSE ROWS COLS BR BC SCALE IN.f32 OUT");
	struct kops_fp8_tensor t = { 0 };
	struct kops_fp8_quant h = { 0 };
	if (!strcmp(argv[2], "e4m3"))
		t.fmt = KOPS_E4M3;
	else if (!strcmp(argv[2], "e5m2"))
		t.fmt = KOPS_E5M2;
	else
		die("quant: format '%s'", argv[2]);
	if (!strcmp(argv[3], "given"))
		h.how = KOPS_FP8_GIVEN;
	else if (!strcmp(argv[3], "amax"))
		h.how = KOPS_FP8_AMAX;
	else if (!strcmp(argv[3], "mx"))
		h.how = KOPS_FP8_MX;
	else
		die("quant: scaling '%s'", argv[3]);
	h.pow2 = num(argv[4], "POW2") != 0;
	h.transpose = num(argv[5], "TRANSPOSE") != 0;
	t.rows = (int)num(argv[6], "ROWS");
	t.cols = (int)num(argv[7], "COLS");
	t.br = (int)num(argv[8], "BR");
	t.bc = (int)num(argv[9], "BC");
	h.scale = strtof(argv[10], NULL);
	if (t.rows < 0 || t.cols < 0 || t.br < 1 || t.bc < 1)
		die("quant: a %d x %d tensor in %d x %d blocks", t.rows, t.cols, t.br, t.bc);
	size_t len, n = (size_t)t.rows * t.cols;
	float *x = read_all(argv[11], &len);
	if (len != n * sizeof(float))
		die("quant: '%s' holds %zu bytes, not %zu float32 values", argv[11], len, n);
	size_t nb = (size_t)((t.rows + t.br - 1) / t.br) * ((t.cols + t.bc - 1) / t.bc);
	t.q = xmalloc(n + 1);
	t.sinv = xmalloc((nb + 1) * sizeof(float));
	float amax = 0; /* raised by the op (ops.h) */
	kops_cpu()->fp8_quantize(&t, x, &h, &amax);
	FILE *f = open_out(argv[12]);
	fwrite(t.q, 1, n, f);
	fwrite(t.sinv, sizeof(float), nb, f);
	fwrite(&amax, sizeof(float), 1, f);
	close_out(f, argv[12]);
	free(x), free(t.q), free(t.sinv);
	return 0;
}

int main(int argc, char **argv)
{
	log_init("megac_fp8cast", 0, 1);
	if (argc >= 2 && !strcmp(argv[1], "cast"))
		return cmd_cast(argc, argv);
	if (argc >= 2 && !strcmp(argv[1], "range"))
		return cmd_range(argc, argv);
	if (argc >= 2 && !strcmp(argv[1], "quant"))
		return cmd_quant(argc, argv);
	die("usage: megac_fp8cast cast|range|quant ... (see tests/tools/megac_fp8cast.c)");
}
