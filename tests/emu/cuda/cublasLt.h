/*
 * cublasLt.h - the emulated build's stand-in for cuBLASLt (tests/emu/
 * cublaslt.cc; make emu): the matmul API that lib/kernels/cuda/gemm.cu
 * calls, with cuBLASLt's names, attribute types and sizes, and its
 * documented semantics: D = alpha op(A) op(B) + beta C (+ bias per row of D)
 * on column-major matrices, optionally batched with strides; inputs fp32,
 * bf16 or fp16 multiplied with fp32 accumulation (CUBLAS_COMPUTE_32F; the
 * _FAST_TF32 compute type rounds fp32 inputs to TF32 first), outputs
 * rounded to D's type; FP8 inputs (E4M3, E5M2, not both E5M2) in the "TN"
 * layout with per-tensor A/B scales, fp32 C and D. Plain C.
 */
#ifndef MEGAC_EMU_CUBLASLT_H
#define MEGAC_EMU_CUBLASLT_H

#include <stddef.h>
#include <stdint.h>

#include "cuda_runtime.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum {
	CUBLAS_STATUS_SUCCESS = 0,
	CUBLAS_STATUS_NOT_INITIALIZED = 1,
	CUBLAS_STATUS_ALLOC_FAILED = 3,
	CUBLAS_STATUS_INVALID_VALUE = 7,
	CUBLAS_STATUS_ARCH_MISMATCH = 8,
	CUBLAS_STATUS_MAPPING_ERROR = 11,
	CUBLAS_STATUS_EXECUTION_FAILED = 13,
	CUBLAS_STATUS_INTERNAL_ERROR = 14,
	CUBLAS_STATUS_NOT_SUPPORTED = 15
} cublasStatus_t;

typedef enum { CUBLAS_OP_N = 0, CUBLAS_OP_T = 1, CUBLAS_OP_C = 2 } cublasOperation_t;

typedef enum {
	CUBLAS_COMPUTE_16F = 64,
	CUBLAS_COMPUTE_32F = 68,
	CUBLAS_COMPUTE_32F_FAST_16F = 74,
	CUBLAS_COMPUTE_32F_FAST_16BF = 75,
	CUBLAS_COMPUTE_32F_FAST_TF32 = 77,
	CUBLAS_COMPUTE_64F = 70
} cublasComputeType_t;

typedef enum cudaDataType_t {
	CUDA_R_32F = 0,
	CUDA_R_64F = 1,
	CUDA_R_16F = 2,
	CUDA_R_8I = 3,
	CUDA_R_32I = 10,
	CUDA_R_16BF = 14,
	CUDA_R_8F_E4M3 = 28,
	CUDA_R_8F_E5M2 = 29
} cudaDataType_t, cudaDataType;

typedef struct emu_lt_handle *cublasLtHandle_t;
typedef struct emu_lt_desc *cublasLtMatmulDesc_t;
typedef struct emu_lt_layout *cublasLtMatrixLayout_t;
typedef struct emu_lt_pref *cublasLtMatmulPreference_t;

typedef struct {
	uint64_t data[8];
} cublasLtMatmulAlgo_t;

typedef struct {
	cublasLtMatmulAlgo_t algo;
	size_t workspaceSize;
	cublasStatus_t state;
	float wavesCount;
	int reserved[4];
} cublasLtMatmulHeuristicResult_t;

typedef enum {
	CUBLASLT_MATMUL_DESC_COMPUTE_TYPE = 0, /* int32 */
	CUBLASLT_MATMUL_DESC_SCALE_TYPE = 1,   /* int32 */
	CUBLASLT_MATMUL_DESC_POINTER_MODE = 2, /* int32 */
	CUBLASLT_MATMUL_DESC_TRANSA = 3,       /* int32 (cublasOperation_t) */
	CUBLASLT_MATMUL_DESC_TRANSB = 4,       /* int32 */
	CUBLASLT_MATMUL_DESC_TRANSC = 5,       /* int32 */
	CUBLASLT_MATMUL_DESC_FILL_MODE = 6,    /* int32 */
	CUBLASLT_MATMUL_DESC_EPILOGUE = 7,     /* uint32 (cublasLtEpilogue_t) */
	CUBLASLT_MATMUL_DESC_BIAS_POINTER = 8, /* void * */
	CUBLASLT_MATMUL_DESC_BIAS_BATCH_STRIDE = 10, /* int64 */
	CUBLASLT_MATMUL_DESC_A_SCALE_POINTER = 17,   /* const void * (device, compute type: fp32) */
	CUBLASLT_MATMUL_DESC_B_SCALE_POINTER = 18,   /* const void * */
	CUBLASLT_MATMUL_DESC_AMAX_D_POINTER = 21,    /* void * (device fp32) */
	CUBLASLT_MATMUL_DESC_FAST_ACCUM = 25,        /* int8 */
	CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE = 26     /* int32 (cudaDataType) */
} cublasLtMatmulDescAttributes_t;

typedef enum {
	CUBLASLT_EPILOGUE_DEFAULT = 1,
	CUBLASLT_EPILOGUE_RELU = 2,
	CUBLASLT_EPILOGUE_BIAS = 4,
	CUBLASLT_EPILOGUE_RELU_BIAS = 6,
	CUBLASLT_EPILOGUE_GELU = 32,
	CUBLASLT_EPILOGUE_GELU_BIAS = 36,
	CUBLASLT_EPILOGUE_BGRADA = 256,
	CUBLASLT_EPILOGUE_BGRADB = 512
} cublasLtEpilogue_t;

typedef enum {
	CUBLASLT_MATRIX_LAYOUT_TYPE = 0,                 /* uint32 */
	CUBLASLT_MATRIX_LAYOUT_ORDER = 1,                /* int32 */
	CUBLASLT_MATRIX_LAYOUT_ROWS = 2,                 /* uint64 */
	CUBLASLT_MATRIX_LAYOUT_COLS = 3,                 /* uint64 */
	CUBLASLT_MATRIX_LAYOUT_LD = 4,                   /* int64 */
	CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT = 5,          /* int32 */
	CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET = 6  /* int64 */
} cublasLtMatrixLayoutAttribute_t;

typedef enum { CUBLASLT_ORDER_COL = 0, CUBLASLT_ORDER_ROW = 1 } cublasLtOrder_t;

typedef enum {
	CUBLASLT_MATMUL_PREF_SEARCH_MODE = 0,
	CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES = 1, /* uint64 */
	CUBLASLT_MATMUL_PREF_REDUCTION_SCHEME_MASK = 3, /* uint32 */
	CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES = 5, /* uint32 */
	CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES = 6,
	CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES = 7,
	CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES = 8
} cublasLtMatmulPreferenceAttributes_t;

typedef enum {
	CUBLASLT_REDUCTION_SCHEME_NONE = 0,
	CUBLASLT_REDUCTION_SCHEME_INPLACE = 1,
	CUBLASLT_REDUCTION_SCHEME_COMPUTE_TYPE = 2,
	CUBLASLT_REDUCTION_SCHEME_OUTPUT_TYPE = 4,
	CUBLASLT_REDUCTION_SCHEME_MASK = 7
} cublasLtReductionScheme_t;

const char *cublasLtGetStatusString(cublasStatus_t s);
const char *cublasLtGetStatusName(cublasStatus_t s);
cublasStatus_t cublasLtCreate(cublasLtHandle_t *h);
cublasStatus_t cublasLtDestroy(cublasLtHandle_t h);
cublasStatus_t cublasLtMatmulDescCreate(cublasLtMatmulDesc_t *d, cublasComputeType_t compute, cudaDataType_t scale);
cublasStatus_t cublasLtMatmulDescDestroy(cublasLtMatmulDesc_t d);
cublasStatus_t cublasLtMatmulDescSetAttribute(cublasLtMatmulDesc_t d, cublasLtMatmulDescAttributes_t attr,
					      const void *buf, size_t size);
cublasStatus_t cublasLtMatrixLayoutCreate(cublasLtMatrixLayout_t *l, cudaDataType type, uint64_t rows,
					  uint64_t cols, int64_t ld);
cublasStatus_t cublasLtMatrixLayoutDestroy(cublasLtMatrixLayout_t l);
cublasStatus_t cublasLtMatrixLayoutSetAttribute(cublasLtMatrixLayout_t l, cublasLtMatrixLayoutAttribute_t attr,
						const void *buf, size_t size);
cublasStatus_t cublasLtMatmulPreferenceCreate(cublasLtMatmulPreference_t *p);
cublasStatus_t cublasLtMatmulPreferenceDestroy(cublasLtMatmulPreference_t p);
cublasStatus_t cublasLtMatmulPreferenceSetAttribute(cublasLtMatmulPreference_t p,
						    cublasLtMatmulPreferenceAttributes_t attr, const void *buf,
						    size_t size);
cublasStatus_t cublasLtMatmulAlgoGetHeuristic(cublasLtHandle_t h, cublasLtMatmulDesc_t d, cublasLtMatrixLayout_t a,
					      cublasLtMatrixLayout_t b, cublasLtMatrixLayout_t c,
					      cublasLtMatrixLayout_t dd, cublasLtMatmulPreference_t pref,
					      int requested, cublasLtMatmulHeuristicResult_t results[], int *returned);
cublasStatus_t cublasLtMatmul(cublasLtHandle_t h, cublasLtMatmulDesc_t d, const void *alpha, const void *A,
			      cublasLtMatrixLayout_t adesc, const void *B, cublasLtMatrixLayout_t bdesc,
			      const void *beta, const void *C, cublasLtMatrixLayout_t cdesc, void *D,
			      cublasLtMatrixLayout_t ddesc, const cublasLtMatmulAlgo_t *algo, void *workspace,
			      size_t workspace_bytes, cudaStream_t stream);

#ifdef __cplusplus
}
#endif

#endif
