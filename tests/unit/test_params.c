/*
 * test_params.c - lib/tensor/params: where a tensor-parallel rank's slice
 * sits in the global tensor (params_piece, params_global_pos[_rank]) for a
 * tensor cut into pieces along its split axis. The expected rows are
 * written out by hand from Megatron's layouts: SwiGLU's fc1 [gate; up]
 * (each rank holds [gate_r; up_r]) and the Mamba mixer's in_proj
 * [z; x; B; C; dt] (each rank holds [z_r; x_r; B_r; C_r; dt_r]), plus, for
 * several shapes, that the ranks' slices cover the global tensor exactly
 * once.
 */
#include "tensor/params.h"
#include "test.h"

/* the global rows (or, for tp_axis 1, columns) of the local ones of rank
 * `rank`, read off params_global_pos_rank */
static void global_index(const struct param *p, int rank, int64_t *out)
{
	int64_t lrows = p->local_shape[0], lcols = p->ndim == 2 ? p->local_shape[1] : 1;
	int64_t n = p->tp_axis == 1 ? lcols : lrows;
	for (int64_t i = 0; i < n; i++) {
		int64_t row, col;
		size_t e = p->tp_axis == 1 ? (size_t)i : (size_t)(i * lcols);
		params_global_pos_rank(p, rank, e, &row, &col);
		out[i] = p->tp_axis == 1 ? col : row;
		CHECK_INT(p->tp_axis == 1 ? row : col, 0);
	}
}

static void check_index(const struct param *p, int rank, const int64_t *want, int n)
{
	int64_t got[64];
	global_index(p, rank, got);
	for (int i = 0; i < n; i++)
		CHECK_INT(got[i], want[i]);
}

/* Megatron's in_proj at TP2: d_inner 4 (z, x), G N 2 (B, C), H 2 (dt) */
static void test_mamba_in_proj(void)
{
	struct param_registry reg = { 0 };
	int64_t shape[2] = { 14, 3 }, pieces[5] = { 4, 4, 2, 2, 2 };
	for (int r = 0; r < 2; r++) {
		char name[16];
		snprintf(name, sizeof(name), "in_proj.%d", r);
		int i = params_add_pieces(&reg, name, 2, shape, 0, 5, pieces, 2, r, 0, PARAM_INIT_NORMAL, 1);
		CHECK_INT(reg.p[i].local_shape[0], 7);
		CHECK_INT(reg.p[i].numel, 21);
		CHECK_INT(reg.p[i].tp_rank, r);
	}
	/* rank 0: z 0 1, x 4 5, B 8, C 10, dt 12; rank 1: z 2 3, x 6 7, B 9, C 11, dt 13 */
	int64_t want0[7] = { 0, 1, 4, 5, 8, 10, 12 }, want1[7] = { 2, 3, 6, 7, 9, 11, 13 };
	check_index(&reg.p[0], 0, want0, 7);
	check_index(&reg.p[0], 1, want1, 7);
	check_index(&reg.p[1], 1, want1, 7);
	/* params_global_pos: the rank the tensor was registered for */
	int64_t row, col;
	params_global_pos(&reg.p[1], 2 * 3 + 1, &row, &col); /* local row 2 (x's first), column 1 */
	CHECK_INT(row, 6);
	CHECK_INT(col, 1);
	params_global_pos(&reg.p[0], 6 * 3 + 2, &row, &col);
	CHECK_INT(row, 12);
	CHECK_INT(col, 2);
	/* the pieces' runs */
	int64_t local, global, len;
	params_piece(&reg.p[1], 1, 3, &local, &global, &len); /* C of rank 1 */
	CHECK_INT(local, 5);
	CHECK_INT(global, 11);
	CHECK_INT(len, 1);
	params_piece(&reg.p[1], 0, 1, &local, &global, &len); /* x of rank 0 */
	CHECK_INT(local, 2);
	CHECK_INT(global, 4);
	CHECK_INT(len, 2);
	params_free(&reg);
}

/* SwiGLU's fc1 [gate; up] of f = 6 at TP3, and its bias */
static void test_glu(void)
{
	struct param_registry reg = { 0 };
	int64_t shape[2] = { 12, 2 }, halves[2] = { 6, 6 };
	params_add_pieces(&reg, "fc1", 2, shape, 0, 2, halves, 3, 1, 0, PARAM_INIT_NORMAL, 1);
	params_add_pieces(&reg, "fc1.bias", 1, shape, 0, 2, halves, 3, 2, PARAM_NO_WD, PARAM_INIT_ZERO, 0);
	int64_t want1[4] = { 2, 3, 8, 9 }, want2[4] = { 4, 5, 10, 11 }, want0[4] = { 0, 1, 6, 7 };
	check_index(&reg.p[0], 1, want1, 4);
	check_index(&reg.p[0], 0, want0, 4);
	check_index(&reg.p[1], 2, want2, 4);
	int64_t row, col;
	params_global_pos(&reg.p[1], 3, &row, &col);
	CHECK_INT(row, 11);
	CHECK_INT(col, 0);
	params_free(&reg);
}

/* pieces along the columns, one piece, and replicated */
static void test_columns_and_plain(void)
{
	struct param_registry reg = { 0 };
	int64_t shape[2] = { 2, 10 }, pieces[3] = { 4, 2, 4 };
	params_add_pieces(&reg, "cols", 2, shape, 1, 3, pieces, 2, 1, 0, PARAM_INIT_NORMAL, 1);
	int64_t want[5] = { 2, 3, 5, 8, 9 };
	check_index(&reg.p[0], 1, want, 5);
	int64_t row, col;
	params_global_pos(&reg.p[0], 5 + 2, &row, &col); /* local row 1, column 2 */
	CHECK_INT(row, 1);
	CHECK_INT(col, 5);
	/* params_add: one piece, a contiguous range */
	int64_t rshape[2] = { 8, 2 };
	int i = params_add(&reg, "rows", 2, rshape, 0, 4, 3, 0, PARAM_INIT_NORMAL, 1);
	CHECK_INT(reg.p[i].npieces, 1);
	int64_t wrows[2] = { 6, 7 };
	check_index(&reg.p[i], 3, wrows, 2);
	/* replicated: every rank holds the whole tensor, rows in order */
	int64_t nshape[1] = { 5 };
	int n = params_add(&reg, "norm", 1, nshape, -1, 4, 2, PARAM_NO_WD, PARAM_INIT_ONE, 0);
	CHECK_INT(reg.p[n].numel, 5);
	CHECK_INT(reg.p[n].tp_rank, 0);
	int64_t wn[5] = { 0, 1, 2, 3, 4 };
	check_index(&reg.p[n], 3, wn, 5);
	int64_t local, global, len;
	params_piece(&reg.p[n], 1, 0, &local, &global, &len);
	CHECK_INT(local, 0);
	CHECK_INT(global, 0);
	CHECK_INT(len, 5);
	params_free(&reg);
}

/* The slices of all ranks cover every global element exactly once. */
static void test_cover(void)
{
	struct {
		int ndim, axis, n, tp;
		int64_t shape[2], pieces[PARAM_MAX_PIECES];
	} cases[] = {
		{ 2, 0, 5, 2, { 28, 3 }, { 8, 8, 4, 4, 4 } },
		{ 2, 0, 5, 4, { 28, 3 }, { 8, 8, 4, 4, 4 } },
		{ 2, 0, 3, 2, { 16, 4 }, { 8, 4, 4 } },
		{ 1, 0, 3, 4, { 16, 0 }, { 8, 4, 4 } },
		{ 2, 1, 2, 2, { 3, 12 }, { 6, 6 } },
		{ 2, 0, 1, 4, { 8, 5 }, { 8 } },
	};
	for (size_t k = 0; k < sizeof(cases) / sizeof(cases[0]); k++) {
		struct param_registry reg = { 0 };
		int tp = cases[k].tp;
		for (int r = 0; r < tp; r++) {
			char name[16];
			snprintf(name, sizeof(name), "t%d", r);
			params_add_pieces(&reg, name, cases[k].ndim, cases[k].shape, cases[k].axis, cases[k].n,
					  cases[k].pieces, tp, r, 0, PARAM_INIT_NORMAL, 1);
		}
		int64_t cols = cases[k].ndim == 2 ? cases[k].shape[1] : 1;
		size_t total = (size_t)(cases[k].shape[0] * cols);
		int *seen = calloc(total, sizeof(int));
		for (int r = 0; r < tp; r++) {
			const struct param *p = &reg.p[r];
			CHECK_INT(p->numel * (size_t)tp, total);
			for (size_t e = 0; e < p->numel; e++) {
				int64_t row, col;
				params_global_pos(p, e, &row, &col);
				if (row < 0 || row >= cases[k].shape[0] || col < 0 || col >= cols) {
					CHECK(!"out of the global tensor");
					continue;
				}
				seen[row * cols + col]++;
			}
		}
		int bad = 0;
		for (size_t i = 0; i < total; i++)
			bad += seen[i] != 1;
		if (bad)
			printf("#   case %zu: %d global elements not held exactly once\n", k, bad);
		CHECK_INT(bad, 0);
		free(seen);
		params_free(&reg);
	}
}

int main(void)
{
	RUN(test_mamba_in_proj);
	RUN(test_glu);
	RUN(test_columns_and_plain);
	RUN(test_cover);
	return test_summary();
}
