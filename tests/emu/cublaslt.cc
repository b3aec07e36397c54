/*
 * cublaslt.cc - the emulated device's cuBLASLt (cuda/cublasLt.h): matmul
 * descriptors, matrix layouts, preferences, the heuristic and
 * cublasLtMatmul, with the checks cuBLASLt documents (attribute sizes,
 * shapes consistent with the transposes, leading dimensions, supported
 * type and compute-type combinations, in-place C == D only with equal
 * layouts, the bias epilogue's vector) and some it leaves to luck: every
 * matrix must lie inside one device allocation, and the pointers of a call
 * must be at least as aligned as the ones the algorithm was chosen for
 * (the preference's MIN_ALIGNMENT, 256 bytes by default).
 *
 * Arithmetic: inputs converted to fp32 (exactly, from bf16/fp16; rounded
 * to TF32, nearest with ties away from zero, under CUBLAS_COMPUTE_32F_FAST_TF32),
 * multiplied with fp32 accumulation by OpenBLAS's sgemm, then
 * D = alpha op(A) op(B) + beta C, plus the bias of the row (BIAS epilogue),
 * rounded to D's type. A product of two bf16 or fp16 values is exact in
 * fp32, so only the order of the sums differs from the tensor cores'.
 * Epilogues other than DEFAULT and BIAS are refused (NOT_SUPPORTED) with a
 * message: the emulator would have to learn them first.
 *
 * FP8 (A and B in CUDA_R_8F_E4M3 / CUDA_R_8F_E5M2, decoded here on their
 * own, not with lib/kernels/fp8.h, so a mistake there shows): D = alpha *
 * scaleA * scaleB * op(A) op(B) + beta C with the scales read from the
 * device floats of CUDA_R_8F_*'s A/B_SCALE_POINTER when the product runs (1
 * when unset), and AMAX_D_POINTER, when set, receiving max |D|. What real
 * cuBLASLt refuses on Ada and Hopper is refused too: E5M2 times E5M2, any
 * layout but "TN" (TRANSA = T, TRANSB = N), an FP8 operand beside a
 * non-FP8 one, K or a leading dimension of A/B not a multiple of 16 bytes,
 * rows of D (m) or its leading dimension not 16 bytes, a scale or amax
 * pointer with non-FP8 inputs. The emulator has fp32 C and D only for FP8
 * and no FP8 bias epilogue (cuBLASLt takes a bf16 bias there); FAST_ACCUM is
 * accepted and changes nothing (the sums are fp32 either way here).
 */
#include "device.h"

#include <cublasLt.h>

#include <cblas.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include <string>
#include <vector>

extern "C" {
#include "ckpt/dtype.h"
}

struct emu_lt_handle {
	int magic;
};
struct emu_lt_desc {
	int32_t compute, scale, pointer_mode, ta, tb, tc, fill, bias_type;
	uint32_t epi;
	const void *bias;
	int64_t bias_stride;
	const void *scale_a, *scale_b; /* FP8: device floats, or NULL (1) */
	void *amax_d;
	int8_t fast_accum;
};
struct emu_lt_layout {
	int32_t type, order, batch;
	uint64_t rows, cols;
	int64_t ld, stride;
};
struct emu_lt_pref {
	uint64_t ws;
	uint32_t red, align[4];
};

namespace {

const uint64_t ALGO_MAGIC = 0x656d752d6c74616cull;

cublasStatus_t bad(cublasStatus_t s, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
cublasStatus_t bad(cublasStatus_t s, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	fprintf(stderr, "emu: cuBLASLt: ");
	vfprintf(stderr, fmt, ap);
	fprintf(stderr, "\n");
	va_end(ap);
	return s;
}

size_t elem_size(int t)
{
	switch (t) {
	case CUDA_R_32F: return 4;
	case CUDA_R_16F: case CUDA_R_16BF: return 2;
	case CUDA_R_8F_E4M3: case CUDA_R_8F_E5M2: return 1;
	default: return 0;
	}
}

const char *type_name(int t)
{
	switch (t) {
	case CUDA_R_32F: return "fp32";
	case CUDA_R_16F: return "fp16";
	case CUDA_R_16BF: return "bf16";
	case CUDA_R_8F_E4M3: return "fp8 E4M3";
	case CUDA_R_8F_E5M2: return "fp8 E5M2";
	default: return "an unsupported type";
	}
}

bool is_fp8(int t)
{
	return t == CUDA_R_8F_E4M3 || t == CUDA_R_8F_E5M2;
}

/* an FP8 code's value: E4M3 (bias 7, no infinities, S.1111.111 NaN) or E5M2 (bias 15, IEEE-like) */
float fp8_value(uint8_t q, int type)
{
	const bool e4 = type == CUDA_R_8F_E4M3;
	const int mbits = e4 ? 3 : 2, bias = e4 ? 7 : 15, emax = e4 ? 15 : 31;
	const int e = (q & 0x7f) >> mbits, m = q & ((1 << mbits) - 1);
	const float sign = q & 0x80 ? -1.0f : 1.0f;
	if (e4 && (q & 0x7f) == 0x7f)
		return NAN;
	if (!e4 && e == emax)
		return m ? NAN : sign * INFINITY;
	if (e == 0)
		return sign * ldexpf((float)m, 1 - bias - mbits);
	return sign * ldexpf((float)((1 << mbits) + m), e - bias - mbits);
}

/* a setter's buffer must be exactly the attribute's size */
template <class T> cublasStatus_t set(T *dst, const void *buf, size_t size, const char *what)
{
	if (!buf || size != sizeof(T))
		return bad(CUBLAS_STATUS_INVALID_VALUE, "%s takes %zu bytes, given %zu", what, sizeof(T), size);
	memcpy(dst, buf, sizeof(T));
	return CUBLAS_STATUS_SUCCESS;
}

/* the shape of the product, checked: m x n = D, k summed */
cublasStatus_t check(const emu_lt_desc *d, const emu_lt_layout *a, const emu_lt_layout *b,
		     const emu_lt_layout *c, const emu_lt_layout *dd, uint64_t *m, uint64_t *n, uint64_t *k)
{
	if (!d || !a || !b || !c || !dd)
		return bad(CUBLAS_STATUS_INVALID_VALUE, "a NULL descriptor or layout");
	if (d->compute != CUBLAS_COMPUTE_32F && d->compute != CUBLAS_COMPUTE_32F_FAST_TF32)
		return bad(CUBLAS_STATUS_NOT_SUPPORTED, "compute type %d: the emulator has CUBLAS_COMPUTE_32F and "
			   "CUBLAS_COMPUTE_32F_FAST_TF32", d->compute);
	if (d->scale != CUDA_R_32F)
		return bad(CUBLAS_STATUS_NOT_SUPPORTED, "scale type %d with a 32F compute type (32F is required)",
			   d->scale);
	if (d->pointer_mode != 0)
		return bad(CUBLAS_STATUS_NOT_SUPPORTED, "pointer mode %d: the emulator has host alpha/beta",
			   d->pointer_mode);
	if ((d->ta != CUBLAS_OP_N && d->ta != CUBLAS_OP_T) || (d->tb != CUBLAS_OP_N && d->tb != CUBLAS_OP_T) ||
	    d->tc != CUBLAS_OP_N)
		return bad(CUBLAS_STATUS_INVALID_VALUE, "transposes A %d, B %d, C %d (N or T for A and B, N for C)",
			   d->ta, d->tb, d->tc);
	if (d->epi != CUBLASLT_EPILOGUE_DEFAULT && d->epi != CUBLASLT_EPILOGUE_BIAS)
		return bad(CUBLAS_STATUS_NOT_SUPPORTED, "epilogue %u: the emulator has DEFAULT and BIAS", d->epi);
	const emu_lt_layout *all[4] = { a, b, c, dd };
	const char *names = "ABCD";
	for (int i = 0; i < 4; i++) {
		if (all[i]->order != CUBLASLT_ORDER_COL)
			return bad(CUBLAS_STATUS_NOT_SUPPORTED, "matrix %c in order %d (the emulator has COL)", names[i],
				   all[i]->order);
		if (all[i]->ld < (int64_t)(all[i]->rows ? all[i]->rows : 1))
			return bad(CUBLAS_STATUS_INVALID_VALUE, "matrix %c: ld %lld below its %llu rows", names[i],
				   (long long)all[i]->ld, (unsigned long long)all[i]->rows);
		if (all[i]->batch != a->batch)
			return bad(CUBLAS_STATUS_INVALID_VALUE, "batch counts differ (A %d, %c %d)", a->batch, names[i],
				   all[i]->batch);
	}
	*m = dd->rows;
	*n = dd->cols;
	*k = d->ta == CUBLAS_OP_N ? a->cols : a->rows;
	const uint64_t am = d->ta == CUBLAS_OP_N ? a->rows : a->cols;
	const uint64_t bk = d->tb == CUBLAS_OP_N ? b->rows : b->cols, bn = d->tb == CUBLAS_OP_N ? b->cols : b->rows;
	if (am != *m || bk != *k || bn != *n || c->rows != *m || c->cols != *n)
		return bad(CUBLAS_STATUS_INVALID_VALUE,
			   "shapes do not multiply: op(A) %llu x %llu, op(B) %llu x %llu, C %llu x %llu, D %llu x %llu",
			   (unsigned long long)am, (unsigned long long)*k, (unsigned long long)bk, (unsigned long long)bn,
			   (unsigned long long)c->rows, (unsigned long long)c->cols, (unsigned long long)*m,
			   (unsigned long long)*n);
	if (is_fp8(a->type) || is_fp8(b->type)) {
		if (!is_fp8(a->type) || !is_fp8(b->type))
			return bad(CUBLAS_STATUS_NOT_SUPPORTED, "A in %s and B in %s (FP8 takes both in FP8)",
				   type_name(a->type), type_name(b->type));
		if (a->type == CUDA_R_8F_E5M2 && b->type == CUDA_R_8F_E5M2)
			return bad(CUBLAS_STATUS_NOT_SUPPORTED, "A and B both in fp8 E5M2 (not an FP8 matmul cuBLASLt has)");
		if (d->ta != CUBLAS_OP_T || d->tb != CUBLAS_OP_N)
			return bad(CUBLAS_STATUS_NOT_SUPPORTED, "FP8 with TRANSA %s, TRANSB %s: FP8 takes the \"TN\" layout "
				   "(TRANSA = T, TRANSB = N)", d->ta == CUBLAS_OP_N ? "N" : "T", d->tb == CUBLAS_OP_N ? "N" : "T");
		if (d->compute != CUBLAS_COMPUTE_32F)
			return bad(CUBLAS_STATUS_NOT_SUPPORTED, "FP8 with compute type %d (CUBLAS_COMPUTE_32F)", d->compute);
		if (c->type != CUDA_R_32F || dd->type != CUDA_R_32F)
			return bad(CUBLAS_STATUS_NOT_SUPPORTED, "FP8 with C in %s and D in %s (the emulator has fp32 C and D)",
				   type_name(c->type), type_name(dd->type));
		if (d->epi != CUBLASLT_EPILOGUE_DEFAULT)
			return bad(CUBLAS_STATUS_NOT_SUPPORTED, "FP8 with epilogue %u (the emulator has DEFAULT; cuBLASLt "
				   "takes a bf16 bias with an fp32 D)", d->epi);
		if (*k % 16 || a->ld % 16 || b->ld % 16 || *m % 4 || dd->ld % 4 || c->ld % 4)
			return bad(CUBLAS_STATUS_NOT_SUPPORTED,
				   "FP8 with k %llu, lda %lld, ldb %lld, m %llu, ldc %lld, ldd %lld: k, lda and ldb must "
				   "be multiples of 16 bytes, m and the fp32 leading dimensions of C and D of 4 values",
				   (unsigned long long)*k, (long long)a->ld, (long long)b->ld, (unsigned long long)*m,
				   (long long)c->ld, (long long)dd->ld);
		return CUBLAS_STATUS_SUCCESS;
	}
	if (d->scale_a || d->scale_b || d->amax_d)
		return bad(CUBLAS_STATUS_INVALID_VALUE, "an A/B scale or AMAX_D pointer with %s inputs (FP8 only)",
			   type_name(a->type));
	if (a->type != b->type || !elem_size(a->type))
		return bad(CUBLAS_STATUS_NOT_SUPPORTED, "A in %s and B in %s (both fp32, fp16 or bf16)",
			   type_name(a->type), type_name(b->type));
	if (c->type != dd->type || (dd->type != CUDA_R_32F && dd->type != a->type))
		return bad(CUBLAS_STATUS_NOT_SUPPORTED, "C in %s and D in %s with A and B in %s (C and D alike, fp32 or "
			   "the inputs' type)", type_name(c->type), type_name(dd->type), type_name(a->type));
	if (d->compute == CUBLAS_COMPUTE_32F_FAST_TF32 && a->type != CUDA_R_32F)
		return bad(CUBLAS_STATUS_NOT_SUPPORTED, "CUBLAS_COMPUTE_32F_FAST_TF32 with %s inputs", type_name(a->type));
	if (d->epi == CUBLASLT_EPILOGUE_BIAS && d->bias_type != -1 && d->bias_type != dd->type)
		return bad(CUBLAS_STATUS_NOT_SUPPORTED, "a bias in %s with D in %s", type_name(d->bias_type),
			   type_name(dd->type));
	return CUBLAS_STATUS_SUCCESS;
}

unsigned align_of(const void *p)
{
	uintptr_t a = (uintptr_t)p;
	unsigned al = 256;
	while (al > 1 && (a & (al - 1)))
		al >>= 1;
	return al;
}

/* the bytes a column-major matrix spans from its first element */
size_t span(const emu_lt_layout *l)
{
	if (!l->rows || !l->cols)
		return 0;
	return ((size_t)(l->cols - 1) * (size_t)l->ld + l->rows) * elem_size(l->type);
}

float load(const void *base, int type, size_t i)
{
	switch (type) {
	case CUDA_R_32F: return ((const float *)base)[i];
	case CUDA_R_16BF: return ckpt_bf16_to_f32(((const uint16_t *)base)[i]);
	case CUDA_R_8F_E4M3: case CUDA_R_8F_E5M2: return fp8_value(((const uint8_t *)base)[i], type);
	default: return ckpt_f16_to_f32(((const uint16_t *)base)[i]);
	}
}

void store(void *base, int type, size_t i, float x)
{
	switch (type) {
	case CUDA_R_32F: ((float *)base)[i] = x; break;
	case CUDA_R_16BF: ((uint16_t *)base)[i] = ckpt_f32_to_bf16(x); break;
	default: ((uint16_t *)base)[i] = ckpt_f32_to_f16(x); break;
	}
}

/* cvt.rna.tf32.f32: 10 mantissa bits, nearest, ties away from zero */
float to_tf32(float x)
{
	uint32_t u;
	memcpy(&u, &x, 4);
	if ((u & 0x7f800000u) == 0x7f800000u)
		return x;
	u = (u + 0x1000u) & 0xffffe000u;
	memcpy(&x, &u, 4);
	return x;
}

/* a stored matrix as packed fp32 (ld = rows) */
std::vector<float> unpack(const void *p, const emu_lt_layout *l, bool tf32)
{
	std::vector<float> v((size_t)l->rows * l->cols);
	for (uint64_t j = 0; j < l->cols; j++)
		for (uint64_t i = 0; i < l->rows; i++) {
			float x = load(p, l->type, (size_t)j * l->ld + i);
			v[(size_t)j * l->rows + i] = tf32 ? to_tf32(x) : x;
		}
	return v;
}

struct call {
	emu_lt_desc d;
	emu_lt_layout a, b, c, dd;
	float alpha, beta;
	const void *A, *B, *C;
	void *D;
	uint64_t m, n, k;
};

void run(const call &x)
{
	const bool tf32 = x.d.compute == CUBLAS_COMPUTE_32F_FAST_TF32;
	const int batch = x.a.batch > 0 ? x.a.batch : 1;
	for (int bi = 0; bi < batch; bi++) {
		const char *A = (const char *)x.A + (size_t)bi * x.a.stride * elem_size(x.a.type);
		const char *B = (const char *)x.B + (size_t)bi * x.b.stride * elem_size(x.b.type);
		const char *C = (const char *)x.C + (size_t)bi * x.c.stride * elem_size(x.c.type);
		char *D = (char *)x.D + (size_t)bi * x.dd.stride * elem_size(x.dd.type);
		std::vector<float> a = unpack(A, &x.a, tf32), b = unpack(B, &x.b, tf32);
		std::vector<float> d((size_t)x.m * x.n, 0.0f);
		if (x.beta != 0.0f)
			d = unpack(C, &x.c, false);
		float alpha = x.alpha; /* FP8: alpha * scaleA * scaleB, read now (device floats) */
		if (x.d.scale_a)
			alpha *= *(const float *)x.d.scale_a;
		if (x.d.scale_b)
			alpha *= *(const float *)x.d.scale_b;
		if (x.m && x.n && x.k)
			cblas_sgemm(CblasColMajor, x.d.ta == CUBLAS_OP_N ? CblasNoTrans : CblasTrans,
				    x.d.tb == CUBLAS_OP_N ? CblasNoTrans : CblasTrans, (int)x.m, (int)x.n, (int)x.k,
				    alpha, a.data(), (int)(x.a.rows ? x.a.rows : 1), b.data(),
				    (int)(x.b.rows ? x.b.rows : 1), x.beta, d.data(), (int)(x.m ? x.m : 1));
		else
			for (float &e : d)
				e *= x.beta;
		if (x.d.epi == CUBLASLT_EPILOGUE_BIAS) {
			const char *bias = (const char *)x.d.bias + (size_t)bi * x.d.bias_stride * elem_size(x.dd.type);
			for (uint64_t j = 0; j < x.n; j++)
				for (uint64_t i = 0; i < x.m; i++)
					d[(size_t)j * x.m + i] += load(bias, x.dd.type, i);
		}
		for (uint64_t j = 0; j < x.n; j++)
			for (uint64_t i = 0; i < x.m; i++)
				store(D, x.dd.type, (size_t)j * x.dd.ld + i, d[(size_t)j * x.m + i]);
		if (x.d.amax_d) { /* max |D|, a NaN winning */
			float am = 0.0f;
			for (float e : d)
				am = fabsf(e) > am || e != e ? fabsf(e) : am;
			*(float *)x.d.amax_d = am;
		}
	}
}

} // namespace

extern "C" const char *cublasLtGetStatusName(cublasStatus_t s)
{
	switch (s) {
	case CUBLAS_STATUS_SUCCESS: return "CUBLAS_STATUS_SUCCESS";
	case CUBLAS_STATUS_NOT_INITIALIZED: return "CUBLAS_STATUS_NOT_INITIALIZED";
	case CUBLAS_STATUS_ALLOC_FAILED: return "CUBLAS_STATUS_ALLOC_FAILED";
	case CUBLAS_STATUS_INVALID_VALUE: return "CUBLAS_STATUS_INVALID_VALUE";
	case CUBLAS_STATUS_ARCH_MISMATCH: return "CUBLAS_STATUS_ARCH_MISMATCH";
	case CUBLAS_STATUS_EXECUTION_FAILED: return "CUBLAS_STATUS_EXECUTION_FAILED";
	case CUBLAS_STATUS_NOT_SUPPORTED: return "CUBLAS_STATUS_NOT_SUPPORTED";
	default: return "CUBLAS_STATUS_INTERNAL_ERROR";
	}
}

extern "C" const char *cublasLtGetStatusString(cublasStatus_t s)
{
	switch (s) {
	case CUBLAS_STATUS_SUCCESS: return "success";
	case CUBLAS_STATUS_NOT_INITIALIZED: return "the library was not initialized";
	case CUBLAS_STATUS_ALLOC_FAILED: return "the resource allocation failed";
	case CUBLAS_STATUS_INVALID_VALUE: return "an invalid numeric value was used as an argument";
	case CUBLAS_STATUS_ARCH_MISMATCH: return "an absent device architectural feature is required";
	case CUBLAS_STATUS_EXECUTION_FAILED: return "the GPU program failed to execute";
	case CUBLAS_STATUS_NOT_SUPPORTED: return "the functionality requested is not supported";
	default: return "an internal operation failed";
	}
}

extern "C" cublasStatus_t cublasLtCreate(cublasLtHandle_t *h)
{
	int n = 0;
	if (cudaGetDeviceCount(&n) != cudaSuccess || n <= 0) {
		cudaGetLastError();
		return CUBLAS_STATUS_NOT_INITIALIZED;
	}
	*h = new emu_lt_handle{ 1 };
	return CUBLAS_STATUS_SUCCESS;
}

extern "C" cublasStatus_t cublasLtDestroy(cublasLtHandle_t h)
{
	delete h;
	return CUBLAS_STATUS_SUCCESS;
}

extern "C" cublasStatus_t cublasLtMatmulDescCreate(cublasLtMatmulDesc_t *d, cublasComputeType_t compute,
						   cudaDataType_t scale)
{
	emu_lt_desc *x = new emu_lt_desc();
	x->compute = compute;
	x->scale = scale;
	x->ta = x->tb = x->tc = CUBLAS_OP_N;
	x->epi = CUBLASLT_EPILOGUE_DEFAULT;
	x->bias_type = -1;
	*d = x;
	return CUBLAS_STATUS_SUCCESS;
}

extern "C" cublasStatus_t cublasLtMatmulDescDestroy(cublasLtMatmulDesc_t d)
{
	delete d;
	return CUBLAS_STATUS_SUCCESS;
}

extern "C" cublasStatus_t cublasLtMatmulDescSetAttribute(cublasLtMatmulDesc_t d, cublasLtMatmulDescAttributes_t attr,
							 const void *buf, size_t size)
{
	if (!d)
		return bad(CUBLAS_STATUS_INVALID_VALUE, "MatmulDescSetAttribute on a NULL descriptor");
	switch (attr) {
	case CUBLASLT_MATMUL_DESC_COMPUTE_TYPE: return set(&d->compute, buf, size, "CUBLASLT_MATMUL_DESC_COMPUTE_TYPE");
	case CUBLASLT_MATMUL_DESC_SCALE_TYPE: return set(&d->scale, buf, size, "CUBLASLT_MATMUL_DESC_SCALE_TYPE");
	case CUBLASLT_MATMUL_DESC_POINTER_MODE: return set(&d->pointer_mode, buf, size, "CUBLASLT_MATMUL_DESC_POINTER_MODE");
	case CUBLASLT_MATMUL_DESC_TRANSA: return set(&d->ta, buf, size, "CUBLASLT_MATMUL_DESC_TRANSA");
	case CUBLASLT_MATMUL_DESC_TRANSB: return set(&d->tb, buf, size, "CUBLASLT_MATMUL_DESC_TRANSB");
	case CUBLASLT_MATMUL_DESC_TRANSC: return set(&d->tc, buf, size, "CUBLASLT_MATMUL_DESC_TRANSC");
	case CUBLASLT_MATMUL_DESC_FILL_MODE: return set(&d->fill, buf, size, "CUBLASLT_MATMUL_DESC_FILL_MODE");
	case CUBLASLT_MATMUL_DESC_EPILOGUE: return set(&d->epi, buf, size, "CUBLASLT_MATMUL_DESC_EPILOGUE");
	case CUBLASLT_MATMUL_DESC_BIAS_POINTER: return set(&d->bias, buf, size, "CUBLASLT_MATMUL_DESC_BIAS_POINTER");
	case CUBLASLT_MATMUL_DESC_BIAS_BATCH_STRIDE:
		return set(&d->bias_stride, buf, size, "CUBLASLT_MATMUL_DESC_BIAS_BATCH_STRIDE");
	case CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE: return set(&d->bias_type, buf, size, "CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE");
	case CUBLASLT_MATMUL_DESC_A_SCALE_POINTER: return set(&d->scale_a, buf, size, "CUBLASLT_MATMUL_DESC_A_SCALE_POINTER");
	case CUBLASLT_MATMUL_DESC_B_SCALE_POINTER: return set(&d->scale_b, buf, size, "CUBLASLT_MATMUL_DESC_B_SCALE_POINTER");
	case CUBLASLT_MATMUL_DESC_AMAX_D_POINTER: return set(&d->amax_d, buf, size, "CUBLASLT_MATMUL_DESC_AMAX_D_POINTER");
	case CUBLASLT_MATMUL_DESC_FAST_ACCUM: return set(&d->fast_accum, buf, size, "CUBLASLT_MATMUL_DESC_FAST_ACCUM");
	default: return bad(CUBLAS_STATUS_NOT_SUPPORTED, "matmul descriptor attribute %d", (int)attr);
	}
}

extern "C" cublasStatus_t cublasLtMatrixLayoutCreate(cublasLtMatrixLayout_t *l, cudaDataType type, uint64_t rows,
						     uint64_t cols, int64_t ld)
{
	if (!elem_size(type))
		return bad(CUBLAS_STATUS_NOT_SUPPORTED, "a matrix layout of type %d (the emulator has fp32, fp16, bf16, fp8)",
			   (int)type);
	*l = new emu_lt_layout{ type, CUBLASLT_ORDER_COL, 1, rows, cols, ld, 0 };
	return CUBLAS_STATUS_SUCCESS;
}

extern "C" cublasStatus_t cublasLtMatrixLayoutDestroy(cublasLtMatrixLayout_t l)
{
	delete l;
	return CUBLAS_STATUS_SUCCESS;
}

extern "C" cublasStatus_t cublasLtMatrixLayoutSetAttribute(cublasLtMatrixLayout_t l,
							   cublasLtMatrixLayoutAttribute_t attr, const void *buf,
							   size_t size)
{
	if (!l)
		return bad(CUBLAS_STATUS_INVALID_VALUE, "MatrixLayoutSetAttribute on a NULL layout");
	switch (attr) {
	case CUBLASLT_MATRIX_LAYOUT_ORDER: return set(&l->order, buf, size, "CUBLASLT_MATRIX_LAYOUT_ORDER");
	case CUBLASLT_MATRIX_LAYOUT_ROWS: return set(&l->rows, buf, size, "CUBLASLT_MATRIX_LAYOUT_ROWS");
	case CUBLASLT_MATRIX_LAYOUT_COLS: return set(&l->cols, buf, size, "CUBLASLT_MATRIX_LAYOUT_COLS");
	case CUBLASLT_MATRIX_LAYOUT_LD: return set(&l->ld, buf, size, "CUBLASLT_MATRIX_LAYOUT_LD");
	case CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT: return set(&l->batch, buf, size, "CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT");
	case CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET:
		return set(&l->stride, buf, size, "CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET");
	default: return bad(CUBLAS_STATUS_NOT_SUPPORTED, "matrix layout attribute %d", (int)attr);
	}
}

extern "C" cublasStatus_t cublasLtMatmulPreferenceCreate(cublasLtMatmulPreference_t *p)
{
	*p = new emu_lt_pref{ 0, CUBLASLT_REDUCTION_SCHEME_MASK, { 256, 256, 256, 256 } };
	return CUBLAS_STATUS_SUCCESS;
}

extern "C" cublasStatus_t cublasLtMatmulPreferenceDestroy(cublasLtMatmulPreference_t p)
{
	delete p;
	return CUBLAS_STATUS_SUCCESS;
}

extern "C" cublasStatus_t cublasLtMatmulPreferenceSetAttribute(cublasLtMatmulPreference_t p,
							       cublasLtMatmulPreferenceAttributes_t attr,
							       const void *buf, size_t size)
{
	if (!p)
		return bad(CUBLAS_STATUS_INVALID_VALUE, "MatmulPreferenceSetAttribute on a NULL preference");
	cublasStatus_t s;
	switch (attr) {
	case CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES:
		return set(&p->ws, buf, size, "CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES");
	case CUBLASLT_MATMUL_PREF_REDUCTION_SCHEME_MASK:
		return set(&p->red, buf, size, "CUBLASLT_MATMUL_PREF_REDUCTION_SCHEME_MASK");
	case CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES:
	case CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES:
	case CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES:
	case CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES: {
		uint32_t *dst = &p->align[attr - CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES];
		s = set(dst, buf, size, "CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_*_BYTES");
		if (s == CUBLAS_STATUS_SUCCESS && (*dst == 0 || (*dst & (*dst - 1))))
			return bad(CUBLAS_STATUS_INVALID_VALUE, "a minimum alignment of %u bytes (a power of two)", *dst);
		return s;
	}
	default: return bad(CUBLAS_STATUS_NOT_SUPPORTED, "matmul preference attribute %d", (int)attr);
	}
}

extern "C" cublasStatus_t cublasLtMatmulAlgoGetHeuristic(cublasLtHandle_t h, cublasLtMatmulDesc_t d,
							 cublasLtMatrixLayout_t a, cublasLtMatrixLayout_t b,
							 cublasLtMatrixLayout_t c, cublasLtMatrixLayout_t dd,
							 cublasLtMatmulPreference_t pref, int requested,
							 cublasLtMatmulHeuristicResult_t results[], int *returned)
{
	*returned = 0;
	if (!h || !pref || requested <= 0 || !results)
		return bad(CUBLAS_STATUS_INVALID_VALUE, "AlgoGetHeuristic without a handle, a preference or room for results");
	uint64_t m, n, k;
	cublasStatus_t s = check(d, a, b, c, dd, &m, &n, &k);
	if (s != CUBLAS_STATUS_SUCCESS)
		return s;
	for (int i = 0; i < 4 && is_fp8(a->type); i++)
		if (pref->align[i] < 16)
			return bad(CUBLAS_STATUS_NOT_SUPPORTED, "FP8 with a minimum alignment of %u bytes for %c (FP8 "
				   "kernels want 16)", pref->align[i], "ABCD"[i]);
	memset(&results[0], 0, sizeof results[0]);
	results[0].algo.data[0] = ALGO_MAGIC;
	for (int i = 0; i < 4; i++)
		results[0].algo.data[1 + i] = pref->align[i];
	results[0].algo.data[5] = (uint64_t)d->compute;
	results[0].workspaceSize = 0;
	results[0].state = CUBLAS_STATUS_SUCCESS;
	results[0].wavesCount = 1.0f;
	*returned = 1;
	return CUBLAS_STATUS_SUCCESS;
}

extern "C" cublasStatus_t cublasLtMatmul(cublasLtHandle_t h, cublasLtMatmulDesc_t d, const void *alpha, const void *A,
					 cublasLtMatrixLayout_t adesc, const void *B, cublasLtMatrixLayout_t bdesc,
					 const void *beta, const void *C, cublasLtMatrixLayout_t cdesc, void *D,
					 cublasLtMatrixLayout_t ddesc, const cublasLtMatmulAlgo_t *algo, void *workspace,
					 size_t workspace_bytes, cudaStream_t stream)
{
	if (!h || !alpha || !beta)
		return bad(CUBLAS_STATUS_INVALID_VALUE, "cublasLtMatmul without a handle, alpha or beta");
	call x;
	cublasStatus_t s = check(d, adesc, bdesc, cdesc, ddesc, &x.m, &x.n, &x.k);
	if (s != CUBLAS_STATUS_SUCCESS)
		return s;
	if (algo && algo->data[0] != ALGO_MAGIC)
		return bad(CUBLAS_STATUS_INVALID_VALUE, "an algorithm that no heuristic returned");
	if (algo && (int32_t)algo->data[5] != d->compute)
		return bad(CUBLAS_STATUS_INVALID_VALUE, "an algorithm chosen for another compute type");
	const void *ptrs[4] = { A, B, C, D };
	const char *names = "ABCD";
	for (int i = 0; algo && i < 4; i++)
		if (align_of(ptrs[i]) < algo->data[1 + i])
			return bad(CUBLAS_STATUS_INVALID_VALUE,
				   "matrix %c at %p is aligned to %u bytes, and the algorithm was chosen for %llu-byte "
				   "alignment (CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_%c_BYTES)",
				   names[i], ptrs[i], align_of(ptrs[i]), (unsigned long long)algo->data[1 + i], names[i]);
	if (C == D && (cdesc->ld != ddesc->ld || cdesc->stride != ddesc->stride))
		return bad(CUBLAS_STATUS_INVALID_VALUE, "in place (C == D) with different C and D layouts");
	if (workspace_bytes && !emu::device_range(workspace, workspace_bytes, NULL))
		emu::fatal("cublasLtMatmul: the workspace (%zu bytes at %p) is not inside one device allocation",
			   workspace_bytes, workspace);
	x.d = *d;
	x.a = *adesc;
	x.b = *bdesc;
	x.c = *cdesc;
	x.dd = *ddesc;
	x.alpha = *(const float *)alpha;
	x.beta = *(const float *)beta;
	x.A = A;
	x.B = B;
	x.C = C;
	x.D = D;
	if (d->epi == CUBLASLT_EPILOGUE_BIAS && !d->bias)
		return bad(CUBLAS_STATUS_INVALID_VALUE, "the BIAS epilogue without CUBLASLT_MATMUL_DESC_BIAS_POINTER");
	/* every matrix inside one device allocation, each batch */
	const int batch = x.a.batch > 0 ? x.a.batch : 1;
	const emu_lt_layout *ls[4] = { &x.a, &x.b, &x.c, &x.dd };
	for (int i = 0; i < 4; i++) {
		if (i == 2 && x.beta == 0.0f && C != D)
			continue; /* C is not read */
		const size_t es = elem_size(ls[i]->type);
		const size_t bytes = span(ls[i]) + (size_t)(batch - 1) * (size_t)ls[i]->stride * es;
		if (bytes) {
			char what[32];
			snprintf(what, sizeof what, "matrix %c", names[i]);
			emu::need_device_range(ptrs[i], bytes, "cublasLtMatmul", what);
		}
	}
	const void *fp8p[3] = { d->scale_a, d->scale_b, d->amax_d };
	const char *fp8n[3] = { "the A scale", "the B scale", "AMAX_D" };
	for (int i = 0; i < 3; i++)
		if (fp8p[i])
			emu::need_device_range(fp8p[i], sizeof(float), "cublasLtMatmul", fp8n[i]);
	if (d->epi == CUBLASLT_EPILOGUE_BIAS)
		emu::need_device_range(d->bias,
				       ((size_t)x.m + (size_t)(batch - 1) * (size_t)d->bias_stride) * elem_size(x.dd.type),
				       "cublasLtMatmul", "the bias vector");
	emu::enqueue(stream, emu::ITEM_COMPUTE, [x] { run(x); return true; },
		     [x] {
			     return "cublasLtMatmul " + std::to_string(x.m) + " x " + std::to_string(x.n) + " x " +
				    std::to_string(x.k);
		     });
	return CUBLAS_STATUS_SUCCESS;
}
