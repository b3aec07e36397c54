/*
 * tp_mappings.c - where the rows of the residual stream live, and the
 * collectives that move them (Megatron Core's tensor_parallel/mappings.py):
 * the sum over tensor-parallel ranks of a row-parallel output (and of a
 * column-parallel input gradient), sequence parallelism's all-gather and
 * reduce-scatter, and dropout drawn by global row so every layout draws the
 * one-rank masks.
 *
 * Sequence parallelism: rank r holds positions [r*S/t, (r+1)*S/t) of every
 * sample: the rows b*S + r*S/t ... of the [B*S, h] activations, stored as
 * [B, S/t, h]. An all-gather rebuilds [B, S, h] before the column-parallel
 * linears; a reduce-scatter sums the row-parallel outputs and keeps this
 * rank's rows (Megatron's gather / reduce-scatter to the sequence-parallel
 * region). MPI moves rank-major blocks, [t][B][S/t][h]; scratch s.perm is
 * where they are reordered.
 */
#include "model/gpt_int.h"

/* Tensor parallelism's conjugate pair (Megatron's reduce_from / copy_to
 * tensor-parallel region): the sum over TP ranks of a row-parallel output in
 * forward, or of a column-parallel input gradient in backward. */
void tp_sum(struct gpt_model *m, float *x, size_t n)
{
	if (m->par.tp) {
		dist_allreduce_sum_f32(m->par.tp, x, n);
		round_half(m, x, n);
	}
}

void sp_gather(struct gpt_model *m, const struct gpt_pass *P, float *full, const float *shard)
{
	int t = m->par.tp_size, B = P->B;
	size_t blk = (size_t)(P->T / t) * m->c.h;
	dist_allgather_equal_f32(m->par.tp, shard, (size_t)B * blk, m->s.perm);
	for (int r = 0; r < t; r++)
		for (int b = 0; b < B; b++)
			m->k->copy(full + ((size_t)b * t + r) * blk, m->s.perm + ((size_t)r * B + b) * blk,
				   blk * sizeof(float));
}

void sp_reduce_scatter(struct gpt_model *m, const struct gpt_pass *P, float *shard, const float *full)
{
	int t = m->par.tp_size, B = P->B;
	size_t blk = (size_t)(P->T / t) * m->c.h;
	for (int r = 0; r < t; r++)
		for (int b = 0; b < B; b++)
			m->k->copy(m->s.perm + ((size_t)r * B + b) * blk, full + ((size_t)b * t + r) * blk,
				   blk * sizeof(float));
	dist_reduce_scatter_equal_f32(m->par.tp, m->s.perm, (size_t)B * blk, shard);
	round_half(m, shard, (size_t)B * blk);
}

/* The dropout counters of this rank's rows: element (row, c) of the whole
 * [B*S, h] tensor is counter row*h + c, so every layout draws the same mask.
 * This rank holds, of each sample, local positions [j0, j1) (all T, or its
 * T/t with SP), stored sample after sample; each run of them that is
 * contiguous in the sequence (CP's two chunks are not) is one call. Without
 * SP or CP that is one call over all rows. res NULL: the mask alone
 * (dropout_backward). */
void seq_dropout(struct gpt_model *m, const struct gpt_pass *P, float *out, const float *res, const float *x,
		 float p, int site)
{
	size_t h = (size_t)m->c.h;
	uint64_t seed = P->sl->drop_seed;
	int T = P->T, rows = m->par.sp ? T / m->par.tp_size : T;
	int j0 = m->par.sp ? m->par.tp_rank * rows : 0, j1 = j0 + rows;
	if (!m->par.sp && !m->par.cp) { /* everything is one run */
		if (res)
			m->k->dropout_add_forward(out, res, x, (size_t)P->Nl * h, p, seed, site_offset(site));
		else
			m->k->dropout_backward(out, x, (size_t)P->Nl * h, p, seed, site_offset(site));
		return;
	}
	for (int b = 0; b < P->B; b++)
		for (int j = j0; j < j1;) {
			int g = gpt_global_pos(m, j), e = j + 1;
			while (e < j1 && gpt_global_pos(m, e) == g + (e - j))
				e++;
			uint64_t first = ((uint64_t)b * (uint64_t)m->c.S + (uint64_t)g) * h;
			size_t o = ((size_t)b * rows + (size_t)(j - j0)) * h, n = (size_t)(e - j) * h;
			if (res)
				m->k->dropout_add_forward(out + o, res + o, x + o, n, p, seed, site_offset(site) + first);
			else
				m->k->dropout_backward(out + o, x + o, n, p, seed, site_offset(site) + first);
			j = e;
		}
}

/* All rows of a norm output kept per sequence shard: gathered into s.gath
 * under SP (forward, and again in backward for the weight gradient). */
const float *seq_full(struct gpt_model *m, const struct gpt_pass *P, const float *ln)
{
	if (!m->par.sp)
		return ln;
	sp_gather(m, P, m->s.gath, ln);
	return m->s.gath;
}

/* A row-parallel linear's output where the residual stream lives: summed
 * over TP (all rows), or reduce-scattered onto this rank's rows with SP.
 * Returns the [Nl, h] result. */
const float *row_parallel(struct gpt_model *m, const struct gpt_pass *P, const float *inp, int w, int b, int IC)
{
	int h = m->c.h, N = P->N;
	linear_fwd(m, m->s.tmp, inp, w, m->par.tp_rank == 0 ? b : -1, N, IC, h); /* replicated bias counted once */
	if (!m->par.sp) {
		tp_sum(m, m->s.tmp, (size_t)N * h);
		return m->s.tmp;
	}
	sp_reduce_scatter(m, P, m->s.shard, m->s.tmp);
	return m->s.shard;
}

/* The input gradient of a column-parallel linear (dln: all rows, this rank's
 * share): summed over TP, or reduce-scattered onto this rank's rows. */
const float *column_input_grad(struct gpt_model *m, const struct gpt_pass *P, float *dln)
{
	if (!m->par.sp) {
		tp_sum(m, dln, (size_t)P->N * m->c.h);
		return dln;
	}
	sp_reduce_scatter(m, P, m->s.shard, dln);
	return m->s.shard;
}

/* The gradient of a row-parallel output for its linear's backward: this
 * rank's rows of dres through the dropout mask, gathered to all rows with SP. */
const float *row_output_grad(struct gpt_model *m, const struct gpt_pass *P, const float *dres, float p, int site)
{
	float *d = m->par.sp ? m->s.shard : m->s.dtmp;
	const float *src = dres;
	if (p > 0) {
		seq_dropout(m, P, d, NULL, dres, p, site);
		src = d;
	}
	if (!m->par.sp)
		return src;
	sp_gather(m, P, m->s.dtmp, src);
	return m->s.dtmp;
}

void gpt_sp_sync_grads(struct gpt_model *m)
{
	if (m->par.tp_size < 2 || !m->reg.grad) /* Megatron-FSDP level >= 2 sums them per unit (gpt.h) */
		return;
	/* the norms under SP; the q/k norms (each rank's heads) always */
	unsigned sum = PARAM_TP_SUM | (m->par.sp ? PARAM_SP : 0);
	for (int i = 0; i < m->reg.n; i++)
		if (m->reg.p[i].flags & sum)
			dist_allreduce_sum_f32(m->par.tp, gpt_grad(m, i), m->reg.p[i].numel);
}

bool qkv_gathered(const struct gpt_model *m)
{
	return m->par.tp && m->c.g < m->par.tp_size;
}

/* Columns [c0, c0 + len) of the gathered fused QKV output (global column
 * order; s.qkv_all holds it as [t][N][C]) for all N rows: into get, or
 * from put, both [N] rows of row floats starting at their column 0. The
 * range crosses at most a few ranks' blocks: one strided copy per block,
 * never one per row. */
static void qkv_cols(struct gpt_model *m, float *get, const float *put, size_t c0, size_t len, size_t row, int N)
{
	size_t C = (size_t)(m->c.a + 2 * m->c.g) * m->c.k / (size_t)m->par.tp_size, F = sizeof(float);
	for (size_t done = 0; done < len;) {
		size_t ch = (c0 + done) / C, off = (c0 + done) % C, run = len - done < C - off ? len - done : C - off;
		float *all = m->s.qkv_all + ch * (size_t)N * C + off;
		if (get)
			m->k->copy_rows(get + done, row * F, all, C * F, run * F, (size_t)N);
		else
			m->k->copy_rows(all, C * F, put + done, row * F, run * F, (size_t)N);
		done += run;
	}
}

/* This rank's query heads and its group's key and value: where they start
 * in the global fused row, and how many columns the query part has. */
static void qkv_mine(const struct gpt_model *m, size_t *q0, size_t *kv0, size_t *nq)
{
	const struct gpt_config *c = &m->c;
	int per = m->par.tp_size / c->g; /* ranks sharing a group */
	size_t group = (size_t)(c->a / c->g + 2) * c->k, base = (size_t)(m->par.tp_rank / per) * group;
	*nq = (size_t)m->lc.a * c->k;
	*q0 = base + (size_t)(m->par.tp_rank % per) * *nq;
	*kv0 = base + (size_t)(c->a / c->g) * c->k;
}

void qkv_gather(struct gpt_model *m, float *out, int N)
{
	size_t C = (size_t)(m->c.a + 2 * m->c.g) * m->c.k / (size_t)m->par.tp_size, q0, kv0, nq;
	size_t row = (size_t)(m->lc.a + 2) * m->c.k;
	qkv_mine(m, &q0, &kv0, &nq);
	dist_allgather_equal_f32(m->par.tp, m->s.qkv_part, (size_t)N * C, m->s.qkv_all);
	qkv_cols(m, out, NULL, q0, nq, row, N);
	qkv_cols(m, out + nq, NULL, kv0, 2 * (size_t)m->c.k, row, N);
}

void qkv_scatter_grad(struct gpt_model *m, const float *dout, int N)
{
	size_t C = (size_t)(m->c.a + 2 * m->c.g) * m->c.k / (size_t)m->par.tp_size, q0, kv0, nq;
	size_t row = (size_t)(m->lc.a + 2) * m->c.k;
	qkv_mine(m, &q0, &kv0, &nq);
	m->k->zero(m->s.qkv_all, (size_t)N * C * (size_t)m->par.tp_size);
	qkv_cols(m, NULL, dout, q0, nq, row, N);
	qkv_cols(m, NULL, dout + nq, kv0, 2 * (size_t)m->c.k, row, N);
	dist_reduce_scatter_equal_f32(m->par.tp, m->s.qkv_all, (size_t)N * C, m->s.qkv_part);
	round_half(m, m->s.qkv_part, (size_t)N * C);
}
