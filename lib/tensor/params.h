/*
 * params.h - the flat parameter registry (docs/design.md, "The flat
 * parameter registry"). Every parameter of this rank lives in one
 * contiguous fp32 buffer and its gradient in a
 * second buffer with the same layout; each named tensor is a view carrying
 * its Megatron Core name, its global (unsharded) shape, how tensor
 * parallelism splits it, and flags. The optimizer, grad norm, checkpointing,
 * resharding and HF conversion all walk this list; none keeps its own.
 */
#ifndef MEGAC_TENSOR_PARAMS_H
#define MEGAC_TENSOR_PARAMS_H

#include <stddef.h>
#include <stdint.h>

#define PARAM_NAME_MAX 96
#define PARAM_MAX_DIM 2
#define PARAM_MAX_PIECES 5

enum param_flags {
	PARAM_NO_WD = 1 << 0, /* weight-decay multiplier 0 (biases and 1-D tensors) */
	PARAM_TIED = 1 << 1,  /* also used as the output layer (tied embeddings) */
	PARAM_SP = 1 << 3,    /* replicated, but its gradient comes from a sequence shard (norms under SP) */
	PARAM_SHARED = 1 << 4, /* a copy of a tensor another pipeline stage owns (the last stage's tied
				* embedding): left out of norms and checkpoints, Megatron's param.shared */
	PARAM_EXPERT = 1 << 5, /* one expert's (a MoE layer's experts split over expert parallelism):
				* kept after all the others in the flat buffers, reduced over the
				* expert-data-parallel group */
	PARAM_EMB_OR_OUT = 1 << 6, /* the word embeddings or the output layer (Megatron's
				    * is_embedding_or_output_parameter: --decoupled-lr) */
	PARAM_TP_SUM = 1 << 7, /* replicated, but each TP rank's gradient covers its own heads only:
				* summed over TP with or without SP (q_layernorm, k_layernorm) */
};

enum param_init {
	PARAM_INIT_NORMAL, /* N(0, std) */
	PARAM_INIT_ZERO,
	PARAM_INIT_ONE,
	/* the Mamba-2 mixer's (MambaMixer's initialisation, docs/mamba.md) */
	PARAM_INIT_UNIFORM, /* U(-std, std): conv1d's weight and bias (kaiming_uniform, a = sqrt 5) */
	PARAM_INIT_A_LOG,   /* log(A), A ~ U(1, 16) */
	PARAM_INIT_DT_BIAS, /* softplus^-1(dt), dt = exp(U(log 0.001, log 0.1)) clamped to >= 1e-4 */
};

struct param {
	char name[PARAM_NAME_MAX]; /* decoder.layers.3.self_attention.linear_qkv.weight */
	int ndim;
	int64_t shape[PARAM_MAX_DIM];   /* global shape */
	int tp_axis;                    /* -1 replicated, else the axis TP splits */
	/* The pieces along tp_axis that TP splits one by one: a rank's slice is
	 * its share of each piece, in order (one piece: a contiguous range;
	 * SwiGLU's fc1 [gate; up]: two equal ones; the Mamba mixer's in_proj
	 * [z; x; B; C; dt]: five) */
	int npieces;
	int64_t piece[PARAM_MAX_PIECES]; /* their global lengths, summing to shape[tp_axis] */
	int64_t local_shape[PARAM_MAX_DIM];
	int tp_size, tp_rank;           /* the group that splits it, this rank's share (1, 0 replicated) */
	size_t offset;                  /* into the flat buffers, in elements */
	size_t numel;                   /* local element count */
	unsigned flags;
	enum param_init init;
	float init_std;
};

struct param_registry {
	struct param *p;
	int n, cap;
	size_t total;  /* local elements */
	float *data;   /* [total], backend memory: the fp32 (master) parameters */
	float *grad;   /* [total], same layout */
};

/* Register a tensor; returns its index. Offsets are assigned in call order.
 * Its properties (flags) are the caller's to declare: nothing is inferred
 * from the name.
 * Names must be unique (BUG otherwise). Shapes are global; tp_size/tp_rank
 * give the local slice along tp_axis (which must divide evenly), one
 * contiguous range of it. */
int params_add(struct param_registry *r, const char *name, int ndim, const int64_t *shape,
	       int tp_axis, int tp_size, int tp_rank, unsigned flags, enum param_init init,
	       float init_std);
/* The same, with tp_axis made of npieces pieces of the given global
 * lengths (summing to shape[tp_axis], each divisible by tp_size), which TP
 * splits one by one. */
int params_add_pieces(struct param_registry *r, const char *name, int ndim, const int64_t *shape,
		      int tp_axis, int npieces, const int64_t *pieces, int tp_size, int tp_rank,
		      unsigned flags, enum param_init init, float init_std);
/* Piece i of the slice TP rank `rank` holds (same local shape as p's):
 * the run of *len indices along tp_axis that starts at *local in the
 * slice and at *global in the global tensor. A replicated tensor is one
 * piece, the whole of axis 0. This is the one definition of where a
 * slice sits; the functions below and every reader and writer of
 * slices follow it. */
void params_piece(const struct param *p, int rank, int i, int64_t *local, int64_t *global, int64_t *len);
/* Where local element e of p sits in the global tensor: row and column (a
 * 1-D tensor is one column). */
void params_global_pos(const struct param *p, size_t e, int64_t *row, int64_t *col);
/* The same for the slice TP rank `rank` holds (same local shape). */
void params_global_pos_rank(const struct param *p, int rank, size_t e, int64_t *row, int64_t *col);

/* Reassign offsets: first the tensors without `flags`, then those with
 * any of them, each part in registration order. Returns where the second
 * part begins. Before the buffers are allocated. */
size_t params_move_last(struct param_registry *r, unsigned flags);

/* Index of a name, or -1. */
int params_find(const struct param_registry *r, const char *name);
void params_free(struct param_registry *r);

#endif
