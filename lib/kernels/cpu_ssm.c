/*
 * cpu_ssm.c - CPU backend (ops.h) of the Mamba-2 mixer's own ops: the
 * causal depthwise convolution with SiLU over xBC, the SSD selective scan,
 * and the gated, grouped RMSNorm; forward beside backward (docs/mamba.md
 * has the math and the derivations).
 *
 * The scan runs the recurrence itself, step by step, one (sample, head) per
 * task: s_t = exp(d_t A) s_{t-1} + d_t x_t B_t^T, y_t = s_t C_t + D x_t. On
 * a CPU that is the cheapest exact form (3 P N multiply-adds a step and
 * head); the chunked SSD form of mamba_ssm is the same sums regrouped for
 * matrix units, and tests/prog/ssm_ops.sh checks the two agree. Backward
 * walks time in reverse with the adjoint of the state, G_t = dL/ds_t,
 * which needs s_{t-1} at every step: it runs the forward once keeping the
 * state at each chunk start, then, chunk by chunk from the last, recomputes
 * the chunk's states from its start (the same code as forward, so the very
 * same bits) and sweeps it backwards. Memory: (T/chunk + chunk) P N floats
 * a task, and results do not depend on the chunk length at all.
 *
 * Gradients summed over several tasks (B and C over the heads of a group,
 * the per-head parameters over the batch) are owned by one task or summed
 * in a fixed order afterwards, so results are bit-identical for any
 * OMP_NUM_THREADS, like cpu_nn.c's.
 */
#include "kernels/cpu.h"
#include "kernels/ops.h"
#include "base/error.h"
#include "base/xalloc.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* Row blocks of the parameter-grad reductions (cpu_nn.c's CPU_ROWS). */
#define SSM_ROWS 32

static inline float sigmoidf_(float x)
{
	return 1.0f / (1.0f + cpu_expf(-x));
}

/* ---- causal depthwise conv1d + SiLU over [B,T,C] ---- */

/* The W input rows a step reads: src[j] is xe[b, t-(W-1)+j] (x, the
 * history, or NULL for the zeros before it). */
static void conv_sources(const float **src, const float *x, const float *hist, int b, int t, int T, int C, int W)
{
	for (int j = 0; j < W; j++) {
		int tt = t - (W - 1) + j;
		if (tt >= 0)
			src[j] = x + ((size_t)b * T + tt) * C;
		else if (hist)
			src[j] = hist + ((size_t)b * (W - 1) + (W - 1) + tt) * C;
		else
			src[j] = NULL;
	}
}

/* wt[j*C + c] = w[c*W + j]: the taps tap-major, so the loops over channels
 * read them contiguously (a copy of C*W floats per call) */
static float *conv_taps(const float *w, int C, int W)
{
	float *wt = xmalloc((size_t)C * W * sizeof(float));
	for (int c = 0; c < C; c++)
		for (int j = 0; j < W; j++)
			wt[(size_t)j * C + c] = w[(size_t)c * W + j];
	return wt;
}

/* pre[c] = bias[c] + sum_j w[c,j] src[j][c], j in order (wt: conv_taps) */
static void conv_pre(float *pre, const float *const *src, const float *wt, const float *bias, int C, int W)
{
	if (bias)
		memcpy(pre, bias, (size_t)C * sizeof(float));
	else
		memset(pre, 0, (size_t)C * sizeof(float));
	for (int j = 0; j < W; j++) {
		const float *s = src[j], *wj = wt + (size_t)j * C;
		if (!s)
			continue;
#pragma omp simd
		for (int c = 0; c < C; c++)
			pre[c] += wj[c] * s[c];
	}
}

void cpu_ssm_conv_forward(float *out, const float *x, const float *hist, const float *w, const float *bias, int B,
			  int T, int C, int W)
{
	if (W < 1 || W > 64)
		BUG("ssm_conv: kernel width %d outside [1, 64]", W);
	const int rows = B * T;
	float *wt = conv_taps(w, C, W);
#pragma omp parallel for schedule(static) if ((size_t)rows * C * W >= CPU_PAR_MIN)
	for (int r = 0; r < rows; r++) {
		const float *src[64];
		float *o = out + (size_t)r * C;
		conv_sources(src, x, hist, r / T, r % T, T, C, W);
		conv_pre(o, src, wt, bias, C, W);
#pragma omp simd
		for (int c = 0; c < C; c++)
			o[c] = o[c] * sigmoidf_(o[c]);
	}
	free(wt);
}

/*
 * With g = dout * silu'(pre), silu'(p) = s (1 + p (1 - s)), s = sigmoid(p):
 *   dx[b,t,c] = sum_j w[c,j] g[b, t+(W-1)-j, c]   (terms past T-1 are none)
 *   dw[c,j]  += sum_{b,t} g[b,t,c] xe[b, t-(W-1)+j, c],  dbias[c] += sum g
 * g is formed once for all rows; the parameter grads are summed per block of
 * rows ([W][C] taps then [C] bias, block by block) and the blocks added in
 * order (cpu_reduce_blocks).
 */
void cpu_ssm_conv_backward(float *dx, float *dw, float *dbias, const float *dout, const float *x, const float *hist,
			   const float *w, const float *bias, int B, int T, int C, int W)
{
	if (W < 1 || W > 64)
		BUG("ssm_conv: kernel width %d outside [1, 64]", W);
	const int rows = B * T;
	const size_t n = (size_t)rows * C;
	float *g = xmalloc(n * sizeof(float)), *wt = conv_taps(w, C, W);
#pragma omp parallel for schedule(static) if (n * W >= CPU_PAR_MIN)
	for (int r = 0; r < rows; r++) {
		const float *src[64];
		float *gr = g + (size_t)r * C;
		const float *d = dout + (size_t)r * C;
		conv_sources(src, x, hist, r / T, r % T, T, C, W);
		conv_pre(gr, src, wt, bias, C, W);
#pragma omp simd
		for (int c = 0; c < C; c++) {
			float p = gr[c], s = sigmoidf_(p);
			gr[c] = d[c] * (s * (1.0f + p * (1.0f - s)));
		}
	}
	if (dx) {
#pragma omp parallel for schedule(static) if (n * W >= CPU_PAR_MIN)
		for (int r = 0; r < rows; r++) {
			const int t = r % T;
			float *o = dx + (size_t)r * C;
			memset(o, 0, (size_t)C * sizeof(float));
			for (int j = W - 1; j >= 0; j--) { /* the output step t + (W-1) - j reads x_t through tap j */
				int to = t + (W - 1) - j;
				if (to >= T)
					continue;
				const float *gr = g + (size_t)(r - t + to) * C, *wj = wt + (size_t)j * C;
#pragma omp simd
				for (int c = 0; c < C; c++)
					o[c] += wj[c] * gr[c];
			}
		}
	}
	if (dw || dbias) {
		const size_t stride = (size_t)(W + 1) * C;
		const int nblk = (rows + SSM_ROWS - 1) / SSM_ROWS;
		float *part = xmalloc((size_t)nblk * stride * sizeof(float));
		float *sum = xcalloc(stride, sizeof(float));
#pragma omp parallel for schedule(static) if (n * W >= CPU_PAR_MIN)
		for (int blk = 0; blk < nblk; blk++) {
			float *pw = part + (size_t)blk * stride, *pb = pw + (size_t)W * C;
			memset(pw, 0, stride * sizeof(float));
			const int r1 = (blk + 1) * SSM_ROWS < rows ? (blk + 1) * SSM_ROWS : rows;
			for (int r = blk * SSM_ROWS; r < r1; r++) {
				const float *src[64];
				const float *gr = g + (size_t)r * C;
				conv_sources(src, x, hist, r / T, r % T, T, C, W);
				for (int j = 0; j < W; j++) {
					const float *s = src[j];
					float *pj = pw + (size_t)j * C;
					if (!s)
						continue;
#pragma omp simd
					for (int c = 0; c < C; c++)
						pj[c] += gr[c] * s[c];
				}
#pragma omp simd
				for (int c = 0; c < C; c++)
					pb[c] += gr[c];
			}
		}
		cpu_reduce_blocks(sum, part, nblk, (int)stride, stride);
		for (int c = 0; dw && c < C; c++)
			for (int j = 0; j < W; j++)
				dw[(size_t)c * W + j] += sum[(size_t)j * C + c];
		for (int c = 0; dbias && bias && c < C; c++)
			dbias[c] += sum[(size_t)W * C + c];
		free(part);
		free(sum);
	}
	free(g);
	free(wt);
}

/* ---- the SSD selective scan ---- */

/* torch's softplus (beta 1, threshold 20) and its derivative */
static inline float softplus_(float v)
{
	return v > 20.0f ? v : log1pf(expf(v));
}

static inline float softplus_grad(float v)
{
	return v > 20.0f ? 1.0f : 1.0f / (1.0f + expf(-v));
}

/* One step of one head's state s[P,N]: s = a s + (d x) B^T. The forward and
 * the backward's recomputation both come here, so they agree bit for bit. */
static inline void scan_step(float *s, float a, float d, const float *xt, const float *Bt, int P, int N)
{
	for (int p = 0; p < P; p++) {
		float *sp = s + (size_t)p * N;
		const float dxp = d * xt[p];
#pragma omp simd
		for (int k = 0; k < N; k++)
			sp[k] = a * sp[k] + dxp * Bt[k];
	}
}

/* The scan's shapes, and where step t of (b, h) finds its inputs. */
struct scan_dims {
	int B, T, H, P, G, N;
};

static inline size_t at_bth(const struct scan_dims *s, int b, int t, int h)
{
	return ((size_t)b * s->T + t) * s->H + h;
}

static inline size_t at_btg(const struct scan_dims *s, int b, int t, int g)
{
	return ((size_t)b * s->T + t) * s->G + g;
}

static void scan_check(int T, int H, int P, int G, int N, int chunk)
{
	if (T < 1 || H < 1 || P < 1 || G < 1 || N < 1 || H % G || chunk < 1)
		BUG("ssd_scan: bad shape T=%d H=%d P=%d G=%d N=%d chunk=%d (H %% G must be 0)", T, H, P, G, N, chunk);
}

void cpu_ssd_scan_forward(float *y, float *state_out, const float *x, const float *dt, const float *dt_bias,
			  const float *A_log, const float *Bm, const float *Cm, const float *D, const float *state_in,
			  int B, int T, int H, int P, int G, int N, int chunk)
{
	scan_check(T, H, P, G, N, chunk);
	const struct scan_dims sd = { B, T, H, P, G, N };
	const size_t PN = (size_t)P * N;
#pragma omp parallel for schedule(static) if ((size_t)B * T * H * PN >= CPU_PAR_MIN)
	for (int bh = 0; bh < B * H; bh++) {
		const int b = bh / H, h = bh % H, g = h / (H / G);
		const float A = -expf(A_log[h]), Dh = D ? D[h] : 0.0f;
		float *s = state_out ? state_out + (size_t)bh * PN : xmalloc(PN * sizeof(float));
		if (!state_in)
			memset(s, 0, PN * sizeof(float));
		else if (state_in != state_out) /* the same buffer: the state advances in place */
			memcpy(s, state_in + (size_t)bh * PN, PN * sizeof(float));
		for (int t = 0; t < T; t++) {
			const float d = softplus_(dt[at_bth(&sd, b, t, h)] + dt_bias[h]);
			const float a = expf(d * A);
			const float *xt = x + at_bth(&sd, b, t, h) * P;
			const float *Bt = Bm + at_btg(&sd, b, t, g) * N, *Ct = Cm + at_btg(&sd, b, t, g) * N;
			float *yt = y + at_bth(&sd, b, t, h) * P;
			scan_step(s, a, d, xt, Bt, P, N);
			for (int p = 0; p < P; p++) {
				const float *sp = s + (size_t)p * N;
				float acc = 0.0f;
#pragma omp simd reduction(+ : acc)
				for (int k = 0; k < N; k++)
					acc += sp[k] * Ct[k];
				yt[p] = acc + Dh * xt[p];
			}
		}
		if (!state_out)
			free(s);
	}
}

/*
 * The adjoint, per (b, h), from G = dstate_out (or 0) at the end, t down
 * to 0, with d, a = exp(d A) and v = dt + dt_bias of step t:
 *   G     += dy_t C_t^T                         (G is now dL/ds_t)
 *   dC_t  += dy_t^T s_t        (over p; summed over the group's heads)
 *   u_p    = sum_n G[p,n] B_t[n]
 *   dx_t   = D dy_t + d u
 *   dB_t  += d G^T x_t         (over p; summed over the group's heads)
 *   dd     = sum_p x_t[p] u_p + (sum G . s_{t-1}) a A
 *   ddt_t  = dd softplus'(v),  ddt_bias += ddt_t
 *   dA    += (sum G . s_{t-1}) a d,  dD += dy_t . x_t
 *   G      = a G                                 (dL/ds_{t-1} before step t-1's own term)
 * and dstate_in = G after step 0. dA_log = A dA.
 */
void cpu_ssd_scan_backward(float *dx, float *ddt, float *ddt_bias, float *dA_log, float *dBm, float *dCm, float *dD,
			   float *dstate_in, const float *dy, const float *dstate_out, const float *x, const float *dt,
			   const float *dt_bias, const float *A_log, const float *Bm, const float *Cm, const float *D,
			   const float *state_in, int B, int T, int H, int P, int G, int N, int chunk)
{
	scan_check(T, H, P, G, N, chunk);
	const struct scan_dims sd = { B, T, H, P, G, N };
	const size_t PN = (size_t)P * N;
	const int hpg = H / G, L = chunk < T ? chunk : T, nck = (T + L - 1) / L;
	/* per (b, h): the parameter grads' partial sums, added over b in order below */
	double *part = xcalloc((size_t)B * H * 3, sizeof(double));
#pragma omp parallel for schedule(static) if ((size_t)B * T * H * PN >= CPU_PAR_MIN)
	for (int bg = 0; bg < B * G; bg++) {
		const int b = bg / G, g = bg % G;
		float *starts = xmalloc((size_t)nck * PN * sizeof(float)); /* the state before each chunk */
		float *hs = xmalloc((size_t)L * PN * sizeof(float));        /* s_t of the chunk at hand */
		float *Gs = xmalloc(PN * sizeof(float));
		float *dBh = xmalloc((size_t)N * sizeof(float));
		for (int t = 0; t < T; t++) { /* this task owns the group's B and C grads */
			if (dBm)
				memset(dBm + at_btg(&sd, b, t, g) * N, 0, (size_t)N * sizeof(float));
			if (dCm)
				memset(dCm + at_btg(&sd, b, t, g) * N, 0, (size_t)N * sizeof(float));
		}
		for (int h = g * hpg; h < (g + 1) * hpg; h++) {
			const size_t bh = (size_t)b * H + h;
			const float A = -expf(A_log[h]), Dh = D ? D[h] : 0.0f;
			double acc_dA = 0.0, acc_dtb = 0.0, acc_D = 0.0;
			/* forward again, keeping each chunk's starting state */
			if (state_in)
				memcpy(starts, state_in + bh * PN, PN * sizeof(float));
			else
				memset(starts, 0, PN * sizeof(float));
			for (int c = 0; c + 1 < nck; c++) {
				float *s = starts + (size_t)(c + 1) * PN;
				memcpy(s, starts + (size_t)c * PN, PN * sizeof(float));
				for (int t = c * L; t < (c + 1) * L; t++) {
					const float d = softplus_(dt[at_bth(&sd, b, t, h)] + dt_bias[h]);
					scan_step(s, expf(d * A), d, x + at_bth(&sd, b, t, h) * P,
						  Bm + at_btg(&sd, b, t, g) * N, P, N);
				}
			}
			if (dstate_out)
				memcpy(Gs, dstate_out + bh * PN, PN * sizeof(float));
			else
				memset(Gs, 0, PN * sizeof(float));
			for (int c = nck - 1; c >= 0; c--) {
				const int t0 = c * L, t1 = t0 + L < T ? t0 + L : T;
				for (int t = t0; t < t1; t++) { /* the chunk's states */
					float *s = hs + (size_t)(t - t0) * PN;
					memcpy(s, t == t0 ? starts + (size_t)c * PN : s - PN, PN * sizeof(float));
					const float d = softplus_(dt[at_bth(&sd, b, t, h)] + dt_bias[h]);
					scan_step(s, expf(d * A), d, x + at_bth(&sd, b, t, h) * P,
						  Bm + at_btg(&sd, b, t, g) * N, P, N);
				}
				for (int t = t1 - 1; t >= t0; t--) {
					const float v = dt[at_bth(&sd, b, t, h)] + dt_bias[h];
					const float d = softplus_(v), a = expf(d * A);
					const size_t ih = at_bth(&sd, b, t, h), ig = at_btg(&sd, b, t, g);
					const float *xt = x + ih * P, *dyt = dy + ih * P;
					const float *Bt = Bm + ig * N, *Ct = Cm + ig * N;
					const float *st = hs + (size_t)(t - t0) * PN;
					const float *sprev = t > t0 ? st - PN : starts + (size_t)c * PN;
					float *dCt = dCm ? dCm + ig * N : NULL, *dxt = dx ? dx + ih * P : NULL;
					double dal = 0.0, xu = 0.0, dyx = 0.0;
					memset(dBh, 0, (size_t)N * sizeof(float));
					for (int p = 0; p < P; p++) {
						float *Gp = Gs + (size_t)p * N;
						const float *sp = st + (size_t)p * N, *pp = sprev + (size_t)p * N;
						const float dyp = dyt[p], xp = xt[p];
						float u = 0.0f, al = 0.0f;
#pragma omp simd reduction(+ : u, al)
						for (int k = 0; k < N; k++) {
							float gk = Gp[k] + dyp * Ct[k];
							u += gk * Bt[k];
							al += gk * pp[k];
							dBh[k] += gk * xp;
							Gp[k] = a * gk;
						}
						if (dCt) {
#pragma omp simd
							for (int k = 0; k < N; k++)
								dCt[k] += dyp * sp[k];
						}
						if (dxt)
							dxt[p] = Dh * dyp + d * u;
						xu += (double)xp * u;
						dal += al;
						dyx += (double)dyp * xp;
					}
					if (dBm) {
						float *dBt = dBm + ig * N;
#pragma omp simd
						for (int k = 0; k < N; k++)
							dBt[k] += d * dBh[k];
					}
					const double dd = xu + dal * a * A;
					const float gdt = (float)(dd * softplus_grad(v));
					if (ddt)
						ddt[ih] = gdt;
					acc_dtb += gdt;
					acc_dA += dal * a * d;
					acc_D += dyx;
				}
			}
			if (dstate_in)
				memcpy(dstate_in + bh * PN, Gs, PN * sizeof(float));
			part[bh * 3 + 0] = acc_dtb;
			part[bh * 3 + 1] = acc_dA * A;
			part[bh * 3 + 2] = acc_D;
		}
		free(starts), free(hs), free(Gs), free(dBh);
	}
	for (int h = 0; h < H; h++) {
		double s[3] = { 0.0, 0.0, 0.0 };
		for (int b = 0; b < B; b++)
			for (int i = 0; i < 3; i++)
				s[i] += part[((size_t)b * H + h) * 3 + i];
		if (ddt_bias)
			ddt_bias[h] += (float)s[0];
		if (dA_log)
			dA_log[h] += (float)s[1];
		if (dD && D)
			dD[h] += (float)s[2];
	}
	free(part);
}

/* ---- gated, grouped RMSNorm: out = g rstd w, g = y silu(z) ---- */

static void gnorm_check(int C, int ngroups)
{
	if (ngroups < 1 || C % ngroups)
		BUG("gated_rmsnorm: %d channels do not split into %d groups", C, ngroups);
}

void cpu_gated_rmsnorm_forward(float *out, float *rstd, const float *y, const float *z, const float *w, int N, int C,
			       int ngroups, float eps)
{
	gnorm_check(C, ngroups);
	const int cg = C / ngroups;
#pragma omp parallel for schedule(static) if ((size_t)N * C >= CPU_PAR_MIN)
	for (int n = 0; n < N; n++) {
		const float *yr = y + (size_t)n * C, *zr = z ? z + (size_t)n * C : NULL;
		float *o = out + (size_t)n * C;
		if (zr) {
#pragma omp simd
			for (int c = 0; c < C; c++)
				o[c] = yr[c] * (zr[c] * sigmoidf_(zr[c]));
		} else if (o != yr) {
			memcpy(o, yr, (size_t)C * sizeof(float));
		}
		for (int k = 0; k < ngroups; k++) {
			float *og = o + (size_t)k * cg;
			const float *wg = w + (size_t)k * cg;
			double sq = 0.0;
#pragma omp simd reduction(+ : sq)
			for (int c = 0; c < cg; c++)
				sq += (double)og[c] * og[c];
			const float s = 1.0f / sqrtf((float)(sq / cg) + eps);
#pragma omp simd
			for (int c = 0; c < cg; c++)
				og[c] = og[c] * s * wg[c];
			rstd[(size_t)n * ngroups + k] = s;
		}
	}
}

/*
 * Per group, with r = rstd (cpu_rmsnorm_backward's derivation on g):
 *   dg_c = r (dout_c w_c - g_c r^2 mean_group(dout w g)),  dw += dout g r
 *   dy = dg silu(z),  dz = dg y silu'(z),  silu'(z) = s (1 + z (1 - s))
 */
void cpu_gated_rmsnorm_backward(float *dy, float *dz, float *dw, const float *dout, const float *y, const float *z,
				const float *w, const float *rstd, int N, int C, int ngroups)
{
	gnorm_check(C, ngroups);
	const int cg = C / ngroups, nblk = (N + SSM_ROWS - 1) / SSM_ROWS;
	float *part = dw ? xmalloc((size_t)nblk * C * sizeof(float)) : NULL;
#pragma omp parallel for schedule(static) if ((size_t)N * C >= CPU_PAR_MIN)
	for (int blk = 0; blk < nblk; blk++) {
		float *pw = part ? part + (size_t)blk * C : NULL;
		if (pw)
			memset(pw, 0, (size_t)C * sizeof(float));
		const int n1 = (blk + 1) * SSM_ROWS < N ? (blk + 1) * SSM_ROWS : N;
		for (int n = blk * SSM_ROWS; n < n1; n++) {
			for (int k = 0; k < ngroups; k++) {
				const size_t o = (size_t)n * C + (size_t)k * cg;
				const float *yr = y + o, *zr = z ? z + o : NULL, *d = dout + o;
				const float *wg = w + (size_t)k * cg;
				const float r = rstd[(size_t)n * ngroups + k];
				float sum = 0.0f;
#pragma omp simd reduction(+ : sum)
				for (int c = 0; c < cg; c++) {
					float gv = zr ? yr[c] * (zr[c] * sigmoidf_(zr[c])) : yr[c];
					sum += d[c] * wg[c] * gv;
				}
				if (pw) {
					float *pg = pw + (size_t)k * cg;
#pragma omp simd
					for (int c = 0; c < cg; c++) {
						float gv = zr ? yr[c] * (zr[c] * sigmoidf_(zr[c])) : yr[c];
						pg[c] += d[c] * (gv * r);
					}
				}
				const float kk = r * r * (sum / cg);
				float *dyr = dy ? dy + o : NULL, *dzr = dz && zr ? dz + o : NULL;
				if (!dyr && !dzr)
					continue;
#pragma omp simd
				for (int c = 0; c < cg; c++) {
					const float zc = zr ? zr[c] : 0.0f, s = sigmoidf_(zc), sl = zc * s;
					const float gv = zr ? yr[c] * sl : yr[c];
					const float dg = r * (d[c] * wg[c] - gv * kk);
					if (dzr)
						dzr[c] = dg * yr[c] * (s * (1.0f + zc * (1.0f - s)));
					if (dyr)
						dyr[c] = zr ? dg * sl : dg;
				}
			}
		}
	}
	if (dw)
		cpu_reduce_blocks(dw, part, nblk, C, (size_t)C);
	free(part);
}
