/*
 * test_ring_attn.c - context-parallel ring attention (model/ring_attn.c) and
 * its per-block kernels (attention_block_forward/backward, cpu_attn_block.c).
 *
 * Run alone (as tests/run.sh does):
 *  - the block ops against a plain double-precision loop on scattered
 *    global positions (GQA, a row that sees no key, dropout with the global
 *    counters): forward over all keys at once and merged over a partition of
 *    the keys, backward summed over the same partition;
 *  - ring attention on a one-rank group equals attention_forward/backward
 *    on the same inputs, with and without dropout;
 *  - ring attention's gradients against central finite differences;
 *  - the argument checks and the buffers returned to their pool.
 * Under mpirun (tests/prog/ring_attn.sh, 2 and 4 ranks): every rank builds
 * the same full sequence, runs the one-rank attention on it, runs ring
 * attention on its two chunks, and compares its rows of out, dq, dk and dv;
 * the cp group's byte counter must equal ring_attn.h's formula. Each rank
 * prints its own lines ("rank R: ..."); rank 0 adds one for the whole group.
 */
#include "base/error.h"
#include "base/xalloc.h"
#include "dist/dist.h"
#include "kernels/ops.h"
#include "model/ring_attn.h"
#include "tensor/mem.h"
#include "test.h"

#include <math.h>

static const struct kops *ops;

/* ---- helpers ---- */

/* splitmix64: the test's own inputs, the same on every rank */
static uint64_t rng;
static uint64_t next_u64(void)
{
	uint64_t z = (rng += 0x9e3779b97f4a7c15ULL);
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
	return z ^ (z >> 31);
}

/* n values uniform in [-s, s) */
static float *randv(size_t n, float s)
{
	float *x = xmalloc(n * sizeof(float));
	for (size_t i = 0; i < n; i++)
		x[i] = s * (2.0f * (float)(next_u64() >> 40) * 0x1p-24f - 1.0f);
	return x;
}

/* max |x - ref| <= rtol * max |ref| (and no NaN); reports the worst element */
static int close_rel(const char *what, const float *x, const double *ref, size_t n, double rtol)
{
	double mag = 0, worst = 0;
	size_t wi = 0;
	for (size_t i = 0; i < n; i++)
		mag = fabs(ref[i]) > mag ? fabs(ref[i]) : mag;
	for (size_t i = 0; i < n; i++) {
		double d = fabs((double)x[i] - ref[i]);
		if (!(d <= worst)) /* NaN too */
			worst = d, wi = i;
	}
	if (worst <= rtol * mag)
		return 1;
	printf("#   %s: |diff| %.3g at %zu (%.8g vs %.8g), max |ref| %.3g, rtol %g\n", what, worst, wi,
	       x[wi], ref[wi], mag, rtol);
	return 0;
}

static double *to_double(const float *x, size_t n)
{
	double *d = xmalloc(n * sizeof(double));
	for (size_t i = 0; i < n; i++)
		d[i] = x[i];
	return d;
}

static int close_rel_f(const char *what, const float *x, const float *ref, size_t n, double rtol)
{
	double *d = to_double(ref, n);
	int ok = close_rel(what, x, d, n, rtol);
	free(d);
	return ok;
}

/* ---- the block ops against a double reference ---- */

struct blk_case {
	int B, Tq, Tk, a, g, k, S;
	float scale, p;
	uint64_t seed, off;
	int32_t *qpos, *kpos;
	float *q, *kk, *v, *dout;
	int window; /* sliding window, -1: none */
	int32_t *doc; /* document ids [B, S] of the global positions, NULL: no mask */
};

/*
 * Straight from ops.h, in double: query tq sees key tk when kpos <= qpos
 * (and, with a sliding window, kpos >= qpos - window; with document ids,
 * the same id at both positions), softmax, dropout from kops_uniform at the global counter, O = (P*M) V;
 * backward by the plain chain rule (dP = dO.v * M, dS = P (dP - sum P dP)).
 * lse is -inf for a row that sees nothing (its out and grads are 0).
 */
static void blk_reference(const struct blk_case *c, double *out, double *lse, double *dq,
			  double *dk, double *dv)
{
	const int B = c->B, Tq = c->Tq, Tk = c->Tk, a = c->a, g = c->g, k = c->k, m = a / g;
	const size_t nq = (size_t)B * a * Tq * k, nkv = (size_t)B * g * Tk * k;
	memset(out, 0, nq * sizeof(double));
	memset(dq, 0, nq * sizeof(double));
	memset(dk, 0, nkv * sizeof(double));
	memset(dv, 0, nkv * sizeof(double));
	double *s = xmalloc((size_t)Tk * sizeof(double)), *mk = xmalloc((size_t)Tk * sizeof(double));
	double *dp = xmalloc((size_t)Tk * sizeof(double));
	for (int b = 0; b < B; b++)
		for (int h = 0; h < a; h++)
			for (int tq = 0; tq < Tq; tq++) {
				const float *qr = c->q + (((size_t)b * a + h) * Tq + tq) * k;
				const float *dor = c->dout + ((size_t)b * Tq + tq) * a * k + (size_t)h * k;
				double *o = out + ((size_t)b * Tq + tq) * a * k + (size_t)h * k;
				double mx = -INFINITY, sum = 0;
				int n = 0;
				while (n < Tk && c->kpos[n] <= c->qpos[tq])
					n++;
				int lo = 0; /* the sliding window's first key */
				while (c->window >= 0 && lo < n && c->kpos[lo] < c->qpos[tq] - c->window)
					lo++;
				int nv = 0; /* keys seen */
				for (int tk = lo; tk < n; tk++) {
					const float *kr = c->kk + (((size_t)b * g + h / m) * Tk + tk) * k;
					const int32_t *D = c->doc ? c->doc + (size_t)b * c->S : NULL;
					double d = 0;
					for (int i = 0; i < k; i++)
						d += (double)qr[i] * kr[i];
					s[tk] = d * c->scale;
					if (D && D[c->kpos[tk]] != D[c->qpos[tq]]) {
						s[tk] = -INFINITY; /* another document: prob 0 */
						continue;
					}
					nv++;
					mx = s[tk] > mx ? s[tk] : mx;
				}
				lse[((size_t)b * a + h) * Tq + tq] = -INFINITY;
				if (!nv)
					continue;
				for (int tk = lo; tk < n; tk++)
					sum += exp(s[tk] - mx);
				lse[((size_t)b * a + h) * Tq + tq] = mx + log(sum);
				for (int tk = lo; tk < n; tk++) {
					s[tk] = exp(s[tk] - mx) / sum;
					mk[tk] = 1;
					if (c->p > 0) {
						uint64_t ctr = c->off + (((uint64_t)h * B + b) * c->S + c->qpos[tq]) * c->S +
							       c->kpos[tk];
						mk[tk] = kops_uniform(c->seed, ctr) >= c->p ? 1.0 / (1.0 - c->p) : 0;
					}
					const float *vr = c->v + (((size_t)b * g + h / m) * Tk + tk) * k;
					for (int i = 0; i < k; i++)
						o[i] += s[tk] * mk[tk] * vr[i];
				}
				double D = 0;
				for (int tk = lo; tk < n; tk++) {
					const float *vr = c->v + (((size_t)b * g + h / m) * Tk + tk) * k;
					double d = 0;
					for (int i = 0; i < k; i++)
						d += (double)dor[i] * vr[i];
					dp[tk] = d * mk[tk];
					D += s[tk] * dp[tk];
				}
				for (int tk = lo; tk < n; tk++) {
					const size_t kr = (((size_t)b * g + h / m) * Tk + tk) * k;
					const double ds = s[tk] * (dp[tk] - D);
					for (int i = 0; i < k; i++) {
						dv[kr + i] += s[tk] * mk[tk] * dor[i];
						dq[(((size_t)b * a + h) * Tq + tq) * k + i] += c->scale * ds * c->kk[kr + i];
						dk[kr + i] += c->scale * ds * qr[i];
					}
				}
			}
	free(s), free(mk), free(dp);
}

/* How many of lse[0..n) differ from ref (-inf where a row sees no key). */
static int lse_bad(const float *lse, const double *ref, size_t n)
{
	int bad = 0;
	for (size_t i = 0; i < n; i++)
		bad += isinf(ref[i]) ? !(isinf(lse[i]) && lse[i] < 0) : !(fabs(lse[i] - ref[i]) < 1e-5 * (1 + fabs(ref[i])));
	return bad;
}

/* Rows of kk (or dk) [B,g,Tk,k] for the key indices sel[0..n) into [B,g,n,k]
 * (gather), or back (scatter, adding). */
static void kv_rows(float *part, float *full, const int *sel, int n, const struct blk_case *c,
		    int scatter)
{
	for (int bg = 0; bg < c->B * c->g; bg++)
		for (int j = 0; j < n; j++) {
			float *pr = part + ((size_t)bg * n + j) * c->k;
			float *fr = full + ((size_t)bg * c->Tk + sel[j]) * c->k;
			for (int i = 0; i < c->k; i++) {
				if (scatter)
					fr[i] += pr[i];
				else
					pr[i] = fr[i];
			}
		}
}

/* Document ids of B samples of S positions: docs 1, documents that end at
 * random places (increasing ids, as packed sequences); 2, random ids 0..2
 * (any ids will do, and rows that see nothing in a block are many). */
static int32_t *doc_ids(int B, int S, int docs)
{
	int32_t *d = xmalloc((size_t)B * S * sizeof(int32_t));
	for (int b = 0; b < B; b++)
		for (int t = 0, id = 0; t < S; t++) {
			if (docs == 1 && t && next_u64() % 9 == 0)
				id++;
			d[(size_t)b * S + t] = docs == 1 ? id : (int32_t)(next_u64() % 3);
		}
	return d;
}

/* Positions: two runs for the queries (as a CP rank's two chunks, plus
 * position 0 alone, which sees no key: keys start at 1), a random sorted
 * subset of [1, S) for the keys. docs: no document mask (0) or doc_ids'. */
static void blk_case_d(int B, int a, int g, int k, int S, int run, float p, int window, int docs)
{
	struct blk_case c = { .B = B, .a = a, .g = g, .k = k, .S = S, .scale = 1.0f / sqrtf((float)k),
			      .p = p, .seed = 77, .off = 1000003, .window = window };
	c.doc = docs ? doc_ids(B, S, docs) : NULL;
	c.qpos = xmalloc((size_t)S * sizeof(int32_t));
	c.kpos = xmalloc((size_t)S * sizeof(int32_t));
	c.qpos[c.Tq++] = 0;
	for (int t = 0; t < run; t++)
		c.qpos[c.Tq++] = S / 4 + t;
	for (int t = 0; t < run; t++)
		c.qpos[c.Tq++] = S - run + t;
	for (int t = 1; t < S; t++)
		if (next_u64() % 10 < 6)
			c.kpos[c.Tk++] = t;
	const int Tq = c.Tq, Tk = c.Tk;
	const size_t nq = (size_t)B * a * Tq * k, nkv = (size_t)B * g * Tk * k, nl = (size_t)B * a * Tq;
	c.q = randv(nq, 1.5f), c.kk = randv(nkv, 1.5f), c.v = randv(nkv, 1), c.dout = randv(nq, 1);
	double *ro = xmalloc(nq * sizeof(double)), *rl = xmalloc(nl * sizeof(double));
	double *rdq = xmalloc(nq * sizeof(double)), *rdk = xmalloc(nkv * sizeof(double)),
	       *rdv = xmalloc(nkv * sizeof(double));
	blk_reference(&c, ro, rl, rdq, rdk, rdv);

	/* all keys in one call */
	float *out = xmalloc(nq * sizeof(float)), *lse = xmalloc(nl * sizeof(float));
	ops->attention_block_forward(out, lse, c.q, c.kk, c.v, c.qpos, c.kpos, c.doc, B, Tq, Tk, a, g, k, S,
				     c.scale, c.window, p, c.seed, c.off, 0);
	CHECK(close_rel("out, one block", out, ro, nq, 1e-5));
	CHECK_INT(lse_bad(lse, rl, nl), 0);

	/* the keys dealt into three parts (each still in order), merged */
	int *part_of = xmalloc((size_t)Tk * sizeof(int)), *sel = xmalloc((size_t)Tk * sizeof(int));
	for (int j = 0; j < Tk; j++)
		part_of[j] = (int)(next_u64() % 3);
	float *out2 = xmalloc(nq * sizeof(float)), *lse2 = xmalloc(nl * sizeof(float));
	float *dq = xcalloc(nq, sizeof(float)), *dk = xcalloc(nkv, sizeof(float)), *dv = xcalloc(nkv, sizeof(float));
	float *pk = xmalloc(nkv * sizeof(float)), *pv = xmalloc(nkv * sizeof(float));
	float *pdk = xmalloc(nkv * sizeof(float)), *pdv = xmalloc(nkv * sizeof(float));
	int32_t *ppos = xmalloc((size_t)Tk * sizeof(int32_t));
	for (int pass = 0; pass < 2; pass++) /* 0: forward, 1: backward, part by part */
		for (int part = 0; part < 3; part++) {
			int n = 0;
			for (int j = 0; j < Tk; j++)
				if (part_of[j] == part)
					ppos[n] = c.kpos[j], sel[n++] = j;
			kv_rows(pk, c.kk, sel, n, &c, 0);
			kv_rows(pv, c.v, sel, n, &c, 0);
			if (pass == 0) {
				ops->attention_block_forward(out2, lse2, c.q, pk, pv, c.qpos, ppos, c.doc, B, Tq, n, a,
							     g,
							     k, S, c.scale, c.window, p, c.seed, c.off, part > 0);
				continue;
			}
			memset(pdk, 0, nkv * sizeof(float));
			memset(pdv, 0, nkv * sizeof(float));
			ops->attention_block_backward(dq, pdk, pdv, c.dout, out, lse, c.q, pk, pv, c.qpos,
						      ppos, c.doc, B, Tq, n, a, g, k, S, c.scale, c.window, p, c.seed,
						      c.off);
			kv_rows(pdk, dk, sel, n, &c, 1);
			kv_rows(pdv, dv, sel, n, &c, 1);
		}
	CHECK(close_rel("out, three blocks merged", out2, ro, nq, 1e-5));
	CHECK_INT(lse_bad(lse2, rl, nl), 0);
	CHECK(close_rel("dq", dq, rdq, nq, 1e-5));
	CHECK(close_rel("dk", dk, rdk, nkv, 1e-5));
	CHECK(close_rel("dv", dv, rdv, nkv, 1e-5));

	/* backward adds: a second call on all keys doubles every grad */
	float *dq2 = xmalloc(nq * sizeof(float)), *dk2 = xmalloc(nkv * sizeof(float)), *dv2 = xmalloc(nkv * sizeof(float));
	memcpy(dq2, dq, nq * sizeof(float));
	memcpy(dk2, dk, nkv * sizeof(float));
	memcpy(dv2, dv, nkv * sizeof(float));
	ops->attention_block_backward(dq2, dk2, dv2, c.dout, out, lse, c.q, c.kk, c.v, c.qpos, c.kpos, c.doc,
				      B, Tq, Tk, a, g, k, S, c.scale, c.window, p, c.seed, c.off);
	for (size_t i = 0; i < nq; i++)
		rdq[i] *= 2;
	for (size_t i = 0; i < nkv; i++)
		rdk[i] *= 2, rdv[i] *= 2;
	CHECK(close_rel("dq accumulated", dq2, rdq, nq, 1e-5));
	CHECK(close_rel("dk accumulated", dk2, rdk, nkv, 1e-5));
	CHECK(close_rel("dv accumulated", dv2, rdv, nkv, 1e-5));

	free(c.qpos), free(c.kpos), free(c.q), free(c.kk), free(c.v), free(c.dout);
	free(ro), free(rl), free(rdq), free(rdk), free(rdv), free(out), free(lse), free(part_of), free(sel);
	free(out2), free(lse2), free(dq), free(dk), free(dv), free(pk), free(pv), free(pdk), free(pdv);
	free(ppos), free(dq2), free(dk2), free(dv2), free(c.doc);
}

static void blk_case_w(int B, int a, int g, int k, int S, int run, float p, int window)
{
	blk_case_d(B, a, g, k, S, run, p, window, 0);
}

static void blk_case(int B, int a, int g, int k, int S, int run, float p)
{
	blk_case_w(B, a, g, k, S, run, p, -1);
}

static void test_block_ops(void)
{
	blk_case(2, 4, 2, 5, 40, 6, 0.0f);   /* GQA */
	blk_case(2, 4, 2, 5, 40, 6, 0.3f);   /* dropout */
	blk_case(1, 3, 3, 4, 300, 40, 0.0f); /* 81 query rows: two row blocks */
	blk_case(1, 2, 1, 4, 300, 40, 0.2f); /* MQA, dropout, two row blocks */
	blk_case_w(2, 4, 2, 5, 40, 6, 0.3f, 4);    /* sliding window, dropout */
	blk_case_w(1, 3, 3, 4, 300, 40, 0.0f, 50); /* window across row blocks */
	blk_case_w(1, 2, 1, 4, 300, 40, 0.2f, 1);  /* window 1: two keys at most */
	blk_case_d(2, 4, 2, 5, 40, 6, 0.0f, -1, 1);    /* documents (packed sequences) */
	blk_case_d(2, 4, 2, 5, 40, 6, 0.3f, -1, 2);    /* any ids, dropout */
	blk_case_d(1, 3, 3, 4, 300, 40, 0.2f, -1, 1);  /* documents across row blocks, dropout */
	blk_case_d(1, 2, 1, 4, 300, 40, 0.0f, 30, 1);  /* documents and a window */
}

/* ---- ring attention on one rank equals attention_forward/backward ---- */

static struct dist_group one_rank = { .name = "context-parallel", .size = 1 };

static void one_rank_case_d(int B, int S, int a, int g, int k, float p, int w, int docs)
{
	const float scale = 1.0f / sqrtf((float)k);
	const uint64_t seed = 5, off = 123456789;
	const size_t nq = (size_t)B * a * S * k, nkv = (size_t)B * g * S * k;
	struct mem_pool mem;
	mem_pool_init(&mem, ops);
	struct ring_attn r;
	CHECK_INT(ring_attn_init(&r, &mem, &one_rank, B, S, a, g, k), 0);
	for (int j = 0; j < S; j++)
		CHECK_INT(ring_attn_global_pos(&r, j), j);
	float *q = randv(nq, 1.5f), *kk = randv(nkv, 1.5f), *v = randv(nkv, 1), *dout = randv(nq, 1);
	float *out = xmalloc(nq * sizeof(float)), *probs = xmalloc((size_t)B * a * S * S * sizeof(float));
	float *dq = xmalloc(nq * sizeof(float)), *dk = xmalloc(nkv * sizeof(float)), *dv = xmalloc(nkv * sizeof(float));
	int32_t *doc = docs ? doc_ids(B, S, docs) : NULL;
	ops->attention_forward(out, probs, q, kk, v, doc, B, S, a, g, k, scale, w, p, seed, off);
	ops->attention_backward(dq, dk, dv, dout, q, kk, v, probs, B, S, a, g, k, scale, p, seed, off);
	/* the ring's outputs start as garbage: everything must be written */
	float *rout = randv(nq, 9), *lse = randv((size_t)B * a * S, 9);
	float *rdq = randv(nq, 9), *rdk = randv(nkv, 9), *rdv = randv(nkv, 9);
	ring_attn_forward(&r, rout, lse, q, kk, v, doc, scale, w, p, seed, off);
	ring_attn_backward(&r, rdq, rdk, rdv, dout, rout, lse, q, kk, v, doc, scale, w, p, seed, off);
	CHECK(close_rel_f("out", rout, out, nq, 1e-5));
	CHECK(close_rel_f("dq", rdq, dq, nq, 1e-5));
	CHECK(close_rel_f("dk", rdk, dk, nkv, 1e-5));
	CHECK(close_rel_f("dv", rdv, dv, nkv, 1e-5));
	CHECK_INT(one_rank.bytes, 0);
	ring_attn_free(&r);
	CHECK_INT(mem.cur, 0);
	CHECK_INT(mem.count, 0);
	free(q), free(kk), free(v), free(dout), free(out), free(probs), free(dq), free(dk), free(dv);
	free(rout), free(lse), free(rdq), free(rdk), free(rdv), free(doc);
}

static void one_rank_case_w(int B, int S, int a, int g, int k, float p, int w)
{
	one_rank_case_d(B, S, a, g, k, p, w, 0);
}

static void one_rank_case(int B, int S, int a, int g, int k, float p)
{
	one_rank_case_w(B, S, a, g, k, p, -1);
}

static void test_one_rank(void)
{
	one_rank_case_w(2, 150, 4, 2, 8, 0.2f, 70); /* sliding window (probs path = block path) */
	one_rank_case_w(1, 10, 2, 2, 4, 0.0f, 3);
	one_rank_case(2, 150, 4, 2, 8, 0.0f); /* GQA, three row blocks */
	one_rank_case(2, 150, 4, 2, 8, 0.2f); /* dropout */
	one_rank_case(1, 10, 2, 2, 4, 0.1f);
	one_rank_case_d(2, 150, 4, 2, 8, 0.2f, -1, 1); /* documents (--reset-attention-mask), dropout */
	one_rank_case_d(2, 150, 4, 2, 8, 0.0f, 40, 1); /* documents and a window */
}

/* ---- finite differences ---- */

struct fd_case {
	struct ring_attn *r;
	int B, S, a, g, k;
	float scale, p;
	float *q, *kk, *v, *out, *lse, *R;
};

/* L = sum(out * R) in double from the fp32 forward */
static double fd_loss(struct fd_case *c)
{
	ring_attn_forward(c->r, c->out, c->lse, c->q, c->kk, c->v, NULL, c->scale, -1, c->p, 3, 17);
	double L = 0;
	for (size_t i = 0; i < (size_t)c->B * c->S * c->a * c->k; i++)
		L += (double)c->out[i] * c->R[i];
	return L;
}

/* ||g_fd - grad|| / ||g_fd|| over x[0..n), central differences */
static double fd_relerr(struct fd_case *c, float *x, size_t n, const float *grad, float h)
{
	double d2 = 0, g2 = 0;
	for (size_t i = 0; i < n; i++) {
		const float x0 = x[i];
		x[i] = x0 + h;
		const double xp = x[i], Lp = fd_loss(c);
		x[i] = x0 - h;
		const double xm = x[i], Lm = fd_loss(c);
		x[i] = x0;
		const double gr = (Lp - Lm) / (xp - xm);
		d2 += (gr - grad[i]) * (gr - grad[i]);
		g2 += gr * gr;
	}
	return sqrt(d2 / (g2 > 1e-30 ? g2 : 1e-30));
}

static void fd_case(float p)
{
	struct mem_pool mem;
	mem_pool_init(&mem, ops);
	struct ring_attn r;
	struct fd_case c = { .r = &r, .B = 1, .S = 8, .a = 2, .g = 1, .k = 4, .scale = 0.5f, .p = p };
	CHECK_INT(ring_attn_init(&r, &mem, &one_rank, c.B, c.S, c.a, c.g, c.k), 0);
	const size_t nq = (size_t)c.B * c.a * c.S * c.k, nkv = (size_t)c.B * c.g * c.S * c.k;
	c.q = randv(nq, 1.5f), c.kk = randv(nkv, 1.5f), c.v = randv(nkv, 1), c.R = randv(nq, 1);
	c.out = xmalloc(nq * sizeof(float)), c.lse = xmalloc((size_t)c.B * c.a * c.S * sizeof(float));
	float *dq = xmalloc(nq * sizeof(float)), *dk = xmalloc(nkv * sizeof(float)), *dv = xmalloc(nkv * sizeof(float));
	fd_loss(&c);
	ring_attn_backward(&r, dq, dk, dv, c.R, c.out, c.lse, c.q, c.kk, c.v, NULL, c.scale, -1, p, 3, 17);
	const double tol = 5e-4; /* measured ~4e-5 (fp32 forwards, h = 1e-2); a wrong term is off by 10% and more */
	double eq = fd_relerr(&c, c.q, nq, dq, 1e-2f), ek = fd_relerr(&c, c.kk, nkv, dk, 1e-2f);
	double ev = fd_relerr(&c, c.v, nkv, dv, 1e-2f);
	if (!(eq < tol && ek < tol && ev < tol))
		printf("#   p %g: relative errors against finite differences: dq %.3g dk %.3g dv %.3g\n", p, eq,
		       ek, ev);
	CHECK(eq < tol && ek < tol && ev < tol);
	ring_attn_free(&r);
	free(c.q), free(c.kk), free(c.v), free(c.R), free(c.out), free(c.lse), free(dq), free(dk), free(dv);
}

static void test_finite_differences(void)
{
	fd_case(0.0f);
	fd_case(0.25f);
}

static void test_init_errors(void)
{
	struct mem_pool mem;
	mem_pool_init(&mem, ops);
	struct ring_attn r;
	struct dist_group four = { .name = "context-parallel", .size = 4, .rank = 1 };
	struct test_capture cap;
	test_capture_begin(&cap, 2);
	int rc1 = ring_attn_init(&r, &mem, &four, 1, 20, 2, 1, 4); /* 20 % 8 */
	int rc2 = ring_attn_init(&r, &mem, &one_rank, 1, 16, 3, 2, 4);
	char *err = test_capture_end(&cap);
	CHECK_INT(rc1, -1);
	CHECK_INT(rc2, -1);
	CHECK(err && strstr(err, "multiple of 2 x the context-parallel size 4"));
	CHECK(err && strstr(err, "3 heads in 2 groups"));
	CHECK_INT(mem.count, 0);
	free(err);
	/* Megatron's chunk placement: rank 1 of 4, S = 24, c = 3: chunks 1 and 6 */
	CHECK_INT(ring_attn_init(&r, &mem, &four, 1, 24, 2, 1, 4), 0);
	static const int expect[6] = { 3, 4, 5, 18, 19, 20 };
	for (int j = 0; j < 6; j++)
		CHECK_INT(ring_attn_global_pos(&r, j), expect[j]);
	ring_attn_free(&r);
	CHECK_INT(mem.cur, 0);
}

/* ---- under mpirun: cp = world ---- */

static struct dist D;

struct mr_case {
	int B, c, a, g, k;
	float p;
	int window; /* sliding window; 0 here means none (-1 to the ops) */
	int docs;   /* document ids (doc_ids), 0: none */
};
static struct mr_case mr;

static void multi_rank_case(void)
{
	struct dist_group *cp = &D.cp;
	const int n = cp->size, B = mr.B, a = mr.a, g = mr.g, k = mr.k, S = 2 * n * mr.c;
	const float scale = 1.0f / sqrtf((float)k);
	const uint64_t seed = 11, off = 99991;
	rng = 0x5eed0000 + (uint64_t)mr.c; /* the same inputs on every rank */
	const size_t nq = (size_t)B * a * S * k, nkv = (size_t)B * g * S * k;
	float *q = randv(nq, 1.5f), *kk = randv(nkv, 1.5f), *v = randv(nkv, 1), *dout = randv(nq, 1);
	float *out = xmalloc(nq * sizeof(float)), *probs = xmalloc((size_t)B * a * S * S * sizeof(float));
	float *dq = xmalloc(nq * sizeof(float)), *dk = xmalloc(nkv * sizeof(float)), *dv = xmalloc(nkv * sizeof(float));
	const int w = mr.window > 0 ? mr.window : -1;
	int32_t *doc = mr.docs ? doc_ids(B, S, mr.docs) : NULL; /* every rank: the whole sequence's */
	ops->attention_forward(out, probs, q, kk, v, doc, B, S, a, g, k, scale, w, mr.p, seed, off);
	ops->attention_backward(dq, dk, dv, dout, q, kk, v, probs, B, S, a, g, k, scale, mr.p, seed, off);

	struct mem_pool mem;
	mem_pool_init(&mem, ops);
	struct ring_attn r;
	CHECK_INT(ring_attn_init(&r, &mem, cp, B, S, a, g, k), 0);
	const int T = r.T;
	CHECK_INT(T, S / n);
	int *gp = xmalloc((size_t)T * sizeof(int));
	for (int j = 0; j < T; j++) {
		gp[j] = ring_attn_global_pos(&r, j);
		CHECK_INT(gp[j], j < mr.c ? cp->rank * mr.c + j : (2 * n - 1 - cp->rank) * mr.c + j - mr.c);
	}
	/* the ranks' positions cover the sequence once */
	double *cover = xcalloc((size_t)S, sizeof(double));
	for (int j = 0; j < T; j++)
		cover[gp[j]] += 1;
	dist_allreduce_sum_f64(cp, cover, (size_t)S);
	int bad = 0;
	for (int t = 0; t < S; t++)
		bad += cover[t] != 1;
	CHECK_INT(bad, 0);

	/* this rank's rows of the inputs and of the one-rank results */
	const size_t lq = (size_t)B * a * T * k, lkv = (size_t)B * g * T * k;
	float *lq_ = xmalloc(lq * sizeof(float)), *lk = xmalloc(lkv * sizeof(float)), *lv = xmalloc(lkv * sizeof(float));
	float *ldout = xmalloc(lq * sizeof(float)), *eout = xmalloc(lq * sizeof(float)), *edq = xmalloc(lq * sizeof(float));
	float *edk = xmalloc(lkv * sizeof(float)), *edv = xmalloc(lkv * sizeof(float));
	for (int j = 0; j < T; j++) {
		const size_t row = (size_t)k * sizeof(float);
		for (int bh = 0; bh < B * a; bh++) {
			memcpy(lq_ + ((size_t)bh * T + j) * k, q + ((size_t)bh * S + gp[j]) * k, row);
			memcpy(edq + ((size_t)bh * T + j) * k, dq + ((size_t)bh * S + gp[j]) * k, row);
		}
		for (int bg = 0; bg < B * g; bg++) {
			memcpy(lk + ((size_t)bg * T + j) * k, kk + ((size_t)bg * S + gp[j]) * k, row);
			memcpy(lv + ((size_t)bg * T + j) * k, v + ((size_t)bg * S + gp[j]) * k, row);
			memcpy(edk + ((size_t)bg * T + j) * k, dk + ((size_t)bg * S + gp[j]) * k, row);
			memcpy(edv + ((size_t)bg * T + j) * k, dv + ((size_t)bg * S + gp[j]) * k, row);
		}
		for (int b = 0; b < B; b++) {
			memcpy(ldout + ((size_t)b * T + j) * a * k, dout + ((size_t)b * S + gp[j]) * a * k, a * row);
			memcpy(eout + ((size_t)b * T + j) * a * k, out + ((size_t)b * S + gp[j]) * a * k, a * row);
		}
	}
	float *rout = randv(lq, 9), *lse = randv((size_t)B * a * T, 9);
	float *rdq = randv(lq, 9), *rdk = randv(lkv, 9), *rdv = randv(lkv, 9);
	const uint64_t b0 = cp->bytes, nbytes = (uint64_t)B * g * k * (S / n) * sizeof(float);
	ring_attn_forward(&r, rout, lse, lq_, lk, lv, doc, scale, w, mr.p, seed, off);
	const uint64_t b1 = cp->bytes;
	ring_attn_backward(&r, rdq, rdk, rdv, ldout, rout, lse, lq_, lk, lv, doc, scale, w, mr.p, seed, off);
	const uint64_t b2 = cp->bytes;
	CHECK(close_rel_f("out", rout, eout, lq, 1e-5));
	CHECK(close_rel_f("dq", rdq, edq, lq, 1e-5));
	CHECK(close_rel_f("dk", rdk, edk, lkv, 1e-5));
	CHECK(close_rel_f("dv", rdv, edv, lkv, 1e-5));
	/* ring_attn.h: forward 8 (cp-1) B g k S/cp, backward twice that */
	CHECK_INT(b1 - b0, 2 * (uint64_t)(n - 1) * nbytes);
	CHECK_INT(b2 - b1, 4 * (uint64_t)(n - 1) * nbytes);
	ring_attn_free(&r);
	CHECK_INT(mem.cur, 0);
	free(q), free(kk), free(v), free(dout), free(out), free(probs), free(dq), free(dk), free(dv);
	free(gp), free(cover), free(lq_), free(lk), free(lv), free(ldout), free(eout), free(edq), free(edk);
	free(edv), free(rout), free(lse), free(rdq), free(rdk), free(rdv), free(doc);
}

static int multi_rank_main(void)
{
	struct dist_layout l = { .world = D.world, .tp = 1, .pp = 1, .cp = D.world, .ep = 1, .etp = 1,
				 .dp = 1, .edp = D.world, .vpp = 1, .sp = false };
	if (dist_setup(&D, &l) < 0)
		die("could not set up the context-parallel group");
	static const struct mr_case cases[] = {
		{ 2, 5, 4, 2, 8, 0.0f, 0, 0 },  /* GQA, odd chunks */
		{ 2, 5, 4, 2, 8, 0.2f, 0, 0 },  /* dropout */
		{ 1, 40, 2, 1, 4, 0.0f, 0, 0 }, /* T = 80: row blocks straddle the chunk boundary */
		{ 1, 40, 2, 1, 4, 0.1f, 0, 0 },
		{ 2, 5, 4, 2, 8, 0.2f, 3, 0 },  /* sliding window, dropout */
		{ 1, 40, 2, 1, 4, 0.0f, 50, 0 }, /* a window across chunks */
		{ 2, 5, 4, 2, 8, 0.2f, 0, 1 },   /* documents ending inside and across chunks, dropout */
		{ 1, 40, 2, 1, 4, 0.0f, 0, 1 },
		{ 1, 40, 2, 1, 4, 0.1f, 30, 2 }, /* any ids, a window */
	};
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		mr = cases[i];
		char name[160];
		snprintf(name, sizeof(name),
			 "rank %d of cp %d: out, dq, dk, dv are the one-rank rows, bytes as documented "
			 "(B %d, chunk %d, heads %d/%d, dropout %g, window %d%s)",
			 D.cp.rank, D.cp.size, mr.B, mr.c, mr.a, mr.g, mr.p, mr.window, mr.docs ? ", documents" : "");
		t_run(name, multi_rank_case);
	}
	double failed = t_tests_failed;
	dist_allreduce_sum_f64(&D.world_g, &failed, 1);
	if (D.rank == 0) {
		printf("%s - cp %d: every rank agrees with the one-rank attention (%g failures)\n",
		       failed ? "not ok" : "ok", D.world, failed);
		fflush(stdout);
	}
	dist_finalize(&D);
	return failed ? 1 : 0;
}

int main(void)
{
	ops = kops_cpu();
	if (dist_init(&D, "test_ring_attn") < 0)
		return 1;
	if (D.world > 1)
		return multi_rank_main();
	rng = 0x853c49e6748fea9bULL;
	RUN(test_block_ops);
	RUN(test_one_rank);
	RUN(test_finite_differences);
	RUN(test_init_errors);
	dist_finalize(&D);
	return test_summary();
}
