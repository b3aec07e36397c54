/*
 * ssm.cu - the CUDA backend of the Mamba-2 mixer's ops (ops.h, section
 * "Mamba-2 (SSD) mixer"; docs/mamba.md has the math): the causal depthwise
 * convolution with SiLU, the SSD selective scan and the gated, grouped
 * RMSNorm, forward beside backward, the same semantics as cpu_ssm.c. All
 * six are fp32 in and out, so the bf16/fp16 tables take these very
 * functions (they copy the fp32 table).
 *
 * ssm_conv: one thread per output element; the backward forms g = dout *
 * silu'(pre) once in scratch, then dx (one thread per element, the W taps
 * in the CPU's order) and the parameter grads per block of ROWS rows and
 * (tap, channel), the blocks summed in order in double (cpu_reduce_blocks).
 *
 * gated_rmsnorm: one warp per (row, group), the sum of squares in double
 * as the CPU takes it. The backward's dw partials (per ROWS rows, then the
 * blocks in order) run before dy is written, since dy may alias dout.
 *
 * ssd_scan, the recurrence s_t = exp(d_t A) s_{t-1} + d_t x_t B_t^T,
 * y_t = s_t C_t + D x_t, step by step (not the chunked matrix form):
 *  - forward: one block per (sample, head, slice of SCAN_ROWS channels p),
 *    one warp per state row s[p, :], the lanes over the state size N, the
 *    row in shared memory; y_t[p] is a warp sum. Rows are independent, so
 *    no barrier: B * H * P / 4 blocks of T sequential steps.
 *  - backward: one block per (sample, head), warp w owning rows p = w
 *    (mod warps), lane l the columns k = l (mod 32), so every state and
 *    adjoint element has one owning thread throughout. The block first
 *    runs the forward keeping the state at every chunk start (checkpoints
 *    in scratch), then from the last chunk to the first recomputes the
 *    chunk's states into scratch and sweeps it backwards with the adjoint
 *    G = dL/ds in shared memory (cpu_ssd_scan_backward's algorithm and
 *    memory: (T/chunk + chunk) P N floats per (sample, head), here all of
 *    them at once in scratch; every state comes from the same chain of
 *    scan_step from state_in, so the results do not depend on chunk at
 *    all). The sums over p of a step (dB, dC, and the
 *    scalars of ddt and dA) go through per-warp slots in shared memory,
 *    added in warp order after a barrier (two barriers a step). dB and dC
 *    are written per head and summed over the heads of a group in head
 *    order by a second kernel; the per-head parameter grads per (sample,
 *    head) in double, summed over the samples in order by a third.
 * No float atomics anywhere: results are bit-identical run to run. They
 * differ from the CPU's in the order of the sums over k and p only.
 * Shared memory over the 48 KB default (in the backward a head's state of
 * more than about 10000 values, in the forward N > 3072) moves to scratch
 * instead, per block. Scratch of the backward: B H (T/chunk + chunk) P N
 * floats of states and 2 B T H N of per-head dB and dC.
 *
 * What a faster scan would do: the chunked SSD form (mamba_ssm's: within
 * a chunk y = (L o C B^T) x as matrix products on the tensor cores, the
 * chunk states passed between chunks by a short scan), which makes the
 * sequential part T/chunk steps instead of T; the state in registers; and
 * in the backward more blocks per head (slices of P with the sums over p
 * across blocks) and no per-step barriers. This version is the reference
 * shape: correct for every size, parallel over samples, heads (and rows of
 * the state in the forward).
 *
 * Compiled with -fmad=false (GNUmakefile) like ops.cu, so that the
 * elementwise parts round as the CPU twins do.
 */
#include "common.cuh"

/* ---- shared helpers ---- */

/* cpu_ssm.c's sigmoidf_, on the CPU's expf (common.cuh) */
static __device__ __forceinline__ float ssm_sigmoid(float x)
{
	return 1.0f / (1.0f + megac_expf(-x));
}

/* torch's softplus (beta 1, threshold 20) and its derivative */
static __device__ __forceinline__ float ssm_softplus(float v)
{
	return v > 20.0f ? v : log1pf(expf(v));
}

static __device__ __forceinline__ float ssm_softplus_grad(float v)
{
	return v > 20.0f ? 1.0f : 1.0f / (1.0f + expf(-v));
}

/* The default shared memory of a block; a kernel that would need more keeps
 * those values in scratch instead (no opt-in). */
#define SSM_SMEM (48 * 1024)

/* ---- causal depthwise conv1d + SiLU over [B,T,C] ---- */

/* pre[b,t,c] = bias[c] + sum_j w[c,j] xe[b, t-(W-1)+j, c], j in order */
static __device__ __forceinline__ float conv_pre(const float *x, const float *hist, const float *w,
						 const float *bias, int b, int t, int c, int T, int C, int W)
{
	float pre = bias ? bias[c] : 0.0f;
	const float *wc = w + (size_t)c * W;
	for (int j = 0; j < W; j++) {
		const int tt = t - (W - 1) + j;
		float v;
		if (tt >= 0)
			v = x[((size_t)b * T + tt) * C + c];
		else if (hist)
			v = hist[((size_t)b * (W - 1) + (W - 1) + tt) * C + c];
		else
			continue;
		pre += wc[j] * v;
	}
	return pre;
}

__global__ void ssm_conv_forward_kernel(float *out, const float *x, const float *hist, const float *w,
					const float *bias, int B, int T, int C, int W)
{
	GRID_STRIDE(i, (size_t)B * T * C) {
		const int c = (int)(i % C);
		const size_t r = i / C;
		const float p = conv_pre(x, hist, w, bias, (int)(r / T), (int)(r % T), c, T, C, W);
		out[i] = p * ssm_sigmoid(p);
	}
}

/* g = dout * silu'(pre), silu'(p) = s (1 + p (1 - s)) */
__global__ void ssm_conv_grad_kernel(float *g, const float *dout, const float *x, const float *hist, const float *w,
				     const float *bias, int B, int T, int C, int W)
{
	GRID_STRIDE(i, (size_t)B * T * C) {
		const int c = (int)(i % C);
		const size_t r = i / C;
		const float p = conv_pre(x, hist, w, bias, (int)(r / T), (int)(r % T), c, T, C, W);
		const float s = ssm_sigmoid(p);
		g[i] = dout[i] * (s * (1.0f + p * (1.0f - s)));
	}
}

/* dx[b,t,c] = sum_j w[c,j] g[b, t+(W-1)-j, c], j from W-1 down (the CPU's order) */
__global__ void ssm_conv_dx_kernel(float *dx, const float *g, const float *w, int B, int T, int C, int W)
{
	GRID_STRIDE(i, (size_t)B * T * C) {
		const int c = (int)(i % C);
		const size_t r = i / C;
		const int t = (int)(r % T);
		float o = 0.0f;
		for (int j = W - 1; j >= 0; j--) {
			const int to = t + (W - 1) - j;
			if (to >= T)
				continue;
			o += w[(size_t)c * W + j] * g[(r - t + to) * C + c];
		}
		dx[i] = o;
	}
}

/* part[blk][j*C + c] = sum over the block's rows of g xe (tap j < W), and
 * part[blk][W*C + c] = sum of g (the bias); rows in order within a block */
__global__ void ssm_conv_partial_kernel(float *part, const float *g, const float *x, const float *hist, int B, int T,
					int C, int W, int nblk)
{
	const int tiles = (C + THREADS - 1) / THREADS;
	const int blk = blockIdx.x / tiles, c = (blockIdx.x % tiles) * THREADS + threadIdx.x;
	const int rows = B * T;
	if (blk >= nblk || c >= C)
		return;
	const int r0 = blk * ROWS, r1 = r0 + ROWS < rows ? r0 + ROWS : rows;
	float *pb = part + (size_t)blk * (W + 1) * C;
	for (int j = 0; j < W; j++) {
		float acc = 0.0f;
		for (int r = r0; r < r1; r++) {
			const int b = r / T, tt = r % T - (W - 1) + j;
			float v;
			if (tt >= 0)
				v = x[((size_t)b * T + tt) * C + c];
			else if (hist)
				v = hist[((size_t)b * (W - 1) + (W - 1) + tt) * C + c];
			else
				continue;
			acc += g[(size_t)r * C + c] * v;
		}
		pb[(size_t)j * C + c] = acc;
	}
	float acc = 0.0f;
	for (int r = r0; r < r1; r++)
		acc += g[(size_t)r * C + c];
	pb[(size_t)W * C + c] = acc;
}

/* the blocks in order, in double: dw[c*W + j] += sum part[.][j*C + c],
 * dbias[c] += sum part[.][W*C + c] */
__global__ void ssm_conv_reduce_kernel(float *dw, float *dbias, const float *part, int nblk, int C, int W)
{
	const size_t stride = (size_t)(W + 1) * C;
	GRID_STRIDE(i, stride) {
		const int j = (int)(i / C), c = (int)(i % C);
		float *dst = j < W ? (dw ? dw + (size_t)c * W + j : NULL) : (dbias ? dbias + c : NULL);
		if (!dst)
			continue;
		double acc = 0.0;
		for (int b = 0; b < nblk; b++)
			acc += part[(size_t)b * stride + i];
		*dst += (float)acc;
	}
}

static void conv_check(int W)
{
	if (W < 1 || W > 64)
		CUDA_BUG("ssm_conv: kernel width outside [1, 64]");
}

static void cuda_ssm_conv_forward(float *out, const float *x, const float *hist, const float *w, const float *bias,
				  int B, int T, int C, int W)
{
	conv_check(W);
	const size_t n = (size_t)B * T * C;
	if (!n)
		return;
	launch<ssm_conv_forward_kernel>(grid_for(n), THREADS, 0, out, x, hist, w, bias, B, T, C, W);
	KERNEL_CHECK();
}

static void cuda_ssm_conv_backward(float *dx, float *dw, float *dbias, const float *dout, const float *x,
				   const float *hist, const float *w, const float *bias, int B, int T, int C, int W)
{
	conv_check(W);
	const size_t n = (size_t)B * T * C;
	if (!bias)
		dbias = NULL; /* no bias, no grad (the CPU's rule) */
	if (!n || (!dx && !dw && !dbias))
		return;
	const int rows = B * T, nblk = (rows + ROWS - 1) / ROWS, tiles = (C + THREADS - 1) / THREADS;
	const size_t stride = (size_t)(W + 1) * C;
	const bool params = dw || dbias;
	float *g = (float *)scratch_alloc((n + (params ? (size_t)nblk * stride : 0)) * sizeof(float));
	launch<ssm_conv_grad_kernel>(grid_for(n), THREADS, 0, g, dout, x, hist, w, bias, B, T, C, W);
	KERNEL_CHECK();
	if (dx) {
		launch<ssm_conv_dx_kernel>(grid_for(n), THREADS, 0, dx, (const float *)g, w, B, T, C, W);
		KERNEL_CHECK();
	}
	if (params) {
		float *part = g + n;
		launch<ssm_conv_partial_kernel>(grid_blocks((size_t)nblk * tiles), THREADS, 0, part, (const float *)g,
						x, hist, B, T, C, W, nblk);
		KERNEL_CHECK();
		launch<ssm_conv_reduce_kernel>(grid_for(stride), THREADS, 0, dw, dbias, (const float *)part, nblk, C,
					       W);
		KERNEL_CHECK();
	}
	scratch_free(g);
}

/* ---- the SSD selective scan ---- */

#define SCAN_ROWS 4  /* state rows (channels p) per forward block, one warp each */
#define SCAN_WARPS 8 /* warps of a backward block (fewer when P is smaller) */

/* one element of one step: s' = a s + (d x_p) B_k; the forward and the
 * backward's recomputation share it */
static __device__ __forceinline__ float scan_step(float s, float a, float dxp, float bk)
{
	return a * s + dxp * bk;
}

/*
 * Block (bh, slice), warp w: row p = slice * SCAN_ROWS + w of head h of
 * sample b, its N values in shared memory (or at gstate in scratch). No
 * block barrier: a warp past P leaves at once.
 */
__global__ void ssd_scan_forward_kernel(float *y, float *state_out, const float *x, const float *dt,
					const float *dt_bias, const float *A_log, const float *Bm, const float *Cm,
					const float *D, const float *state_in, float *gstate, int T, int H, int P,
					int G, int N)
{
	const int nslice = (P + SCAN_ROWS - 1) / SCAN_ROWS;
	const int bh = blockIdx.x / nslice, w = threadIdx.x / WARP, lane = threadIdx.x % WARP;
	const int p = (blockIdx.x % nslice) * SCAN_ROWS + w;
	if (p >= P)
		return;
	const int b = bh / H, h = bh % H, g = h / (H / G);
	const size_t so = ((size_t)bh * P + p) * N;
	float *s = gstate ? gstate + so : DYN_SMEM(float) + (size_t)w * N;
	for (int k = lane; k < N; k += WARP)
		s[k] = state_in ? state_in[so + k] : 0.0f; /* state_in may be state_out: read before written */
	const float A = -expf(A_log[h]), Dh = D ? D[h] : 0.0f, dtb = dt_bias[h];
	for (int t = 0; t < T; t++) {
		const size_t ih = ((size_t)b * T + t) * H + h, ig = ((size_t)b * T + t) * G + g;
		const float d = ssm_softplus(dt[ih] + dtb), a = expf(d * A);
		const float xp = x[ih * P + p], dxp = d * xp;
		const float *Bt = Bm + ig * N, *Ct = Cm + ig * N;
		float acc = 0.0f;
		for (int k = lane; k < N; k += WARP) {
			const float v = scan_step(s[k], a, dxp, Bt[k]);
			s[k] = v;
			acc += v * Ct[k];
		}
		acc = warp_sum(acc);
		if (lane == 0)
			y[ih * P + p] = acc + Dh * xp;
	}
	if (state_out)
		for (int k = lane; k < N; k += WARP)
			state_out[so + k] = s[k];
}

/*
 * The backward of one (sample, head) per block (see the top of the file).
 * Scratch: starts[nck][P][N] (the state before each chunk), hs[L][P][N]
 * (the chunk's states s_t), both this block's; dBp, dCp [B,T,H,N] (this
 * head's dB_t, dC_t, or NULL: not wanted); part[bh][3] (sums over t of
 * ddt, dA_log, dD). Shared (or at gsm + bh * sm_floats in scratch):
 * dyx/xu/al per warp (doubles), then G[P][N], then dB and dC per warp
 * [warps][N].
 */
__global__ void ssd_scan_backward_kernel(float *dx, float *ddt, float *dBp, float *dCp, double *part, float *dstate_in,
					 float *ckpt, float *hst, float *gsm, size_t sm_floats, const float *dy,
					 const float *dstate_out, const float *x, const float *dt, const float *dt_bias,
					 const float *A_log, const float *Bm, const float *Cm, const float *D,
					 const float *state_in, int T, int H, int P, int G, int N, int L, int nck)
{
	const int bh = blockIdx.x, b = bh / H, h = bh % H, g = h / (H / G);
	const int nw = blockDim.x / WARP, w = threadIdx.x / WARP, lane = threadIdx.x % WARP;
	const size_t PN = (size_t)P * N;
	float *sm = gsm ? gsm + (size_t)bh * sm_floats : DYN_SMEM(float);
	double *sc = (double *)sm;
	float *Gs = sm + 2 * 3 * nw, *dBw = Gs + PN, *dCw = dBw + (size_t)nw * N;
	float *starts = ckpt + (size_t)bh * nck * PN, *hs = hst + (size_t)bh * L * PN;
	const float A = -expf(A_log[h]), Dh = D ? D[h] : 0.0f, dtb = dt_bias[h];

	/* the forward again, keeping each chunk's starting state; every
	 * element is read and written by its owner only, so no barrier */
	for (int p = w; p < P; p += nw)
		for (int k = lane; k < N; k += WARP)
			starts[(size_t)p * N + k] = state_in ? state_in[(size_t)bh * PN + (size_t)p * N + k] : 0.0f;
	for (int c = 0; c + 1 < nck; c++) {
		float *s = starts + (size_t)(c + 1) * PN;
		const float *s0 = starts + (size_t)c * PN;
		for (int t = c * L; t < (c + 1) * L; t++) {
			const size_t ih = ((size_t)b * T + t) * H + h, ig = ((size_t)b * T + t) * G + g;
			const float d = ssm_softplus(dt[ih] + dtb), a = expf(d * A);
			const float *Bt = Bm + ig * N;
			const float *src = t == c * L ? s0 : s;
			for (int p = w; p < P; p += nw) {
				const float dxp = d * x[ih * P + p];
				for (int k = lane; k < N; k += WARP)
					s[(size_t)p * N + k] = scan_step(src[(size_t)p * N + k], a, dxp, Bt[k]);
			}
		}
	}
	for (int p = w; p < P; p += nw)
		for (int k = lane; k < N; k += WARP)
			Gs[(size_t)p * N + k] = dstate_out ? dstate_out[(size_t)bh * PN + (size_t)p * N + k] : 0.0f;

	double acc_dtb = 0.0, acc_dA = 0.0, acc_D = 0.0; /* thread 0's */
	for (int c = nck - 1; c >= 0; c--) {
		const int t0 = c * L, t1 = t0 + L < T ? t0 + L : T;
		for (int t = t0; t < t1; t++) { /* the chunk's states */
			const size_t ih = ((size_t)b * T + t) * H + h, ig = ((size_t)b * T + t) * G + g;
			const float d = ssm_softplus(dt[ih] + dtb), a = expf(d * A);
			const float *Bt = Bm + ig * N;
			const float *src = t == t0 ? starts + (size_t)c * PN : hs + (size_t)(t - t0 - 1) * PN;
			float *dst = hs + (size_t)(t - t0) * PN;
			for (int p = w; p < P; p += nw) {
				const float dxp = d * x[ih * P + p];
				for (int k = lane; k < N; k += WARP)
					dst[(size_t)p * N + k] = scan_step(src[(size_t)p * N + k], a, dxp, Bt[k]);
			}
		}
		for (int t = t1 - 1; t >= t0; t--) {
			const size_t ih = ((size_t)b * T + t) * H + h, ig = ((size_t)b * T + t) * G + g;
			const float v = dt[ih] + dtb, d = ssm_softplus(v), a = expf(d * A);
			const float *Bt = Bm + ig * N, *Ct = Cm + ig * N;
			const float *st = hs + (size_t)(t - t0) * PN;
			const float *sprev = t > t0 ? st - PN : starts + (size_t)c * PN;
			float *dBr = dBw + (size_t)w * N, *dCr = dCw + (size_t)w * N;
			for (int k = lane; k < N; k += WARP)
				dBr[k] = 0.0f, dCr[k] = 0.0f;
			double xu = 0.0, dal = 0.0, dyx = 0.0;
			for (int p = w; p < P; p += nw) {
				const float dyp = dy[ih * P + p], xp = x[ih * P + p];
				float *Gp = Gs + (size_t)p * N;
				const float *sp = st + (size_t)p * N, *pp = sprev + (size_t)p * N;
				float u = 0.0f, al = 0.0f;
				for (int k = lane; k < N; k += WARP) {
					const float gk = Gp[k] + dyp * Ct[k]; /* dL/ds_t[p,k] */
					u += gk * Bt[k];
					al += gk * pp[k];
					dBr[k] += gk * xp;
					dCr[k] += dyp * sp[k];
					Gp[k] = a * gk;
				}
				u = warp_sum(u);
				al = warp_sum(al);
				if (dx && lane == 0)
					dx[ih * P + p] = Dh * dyp + d * u;
				xu += (double)xp * u;
				dal += al;
				dyx += (double)dyp * xp;
			}
			if (lane == 0) {
				sc[3 * w + 0] = xu;
				sc[3 * w + 1] = dal;
				sc[3 * w + 2] = dyx;
			}
			__syncthreads();
			for (int k = threadIdx.x; k < N; k += blockDim.x) { /* the sums over p, warps in order */
				float sB = 0.0f, sC = 0.0f;
				for (int i = 0; i < nw; i++) {
					sB += dBw[(size_t)i * N + k];
					sC += dCw[(size_t)i * N + k];
				}
				if (dBp)
					dBp[ih * N + k] = d * sB;
				if (dCp)
					dCp[ih * N + k] = sC;
			}
			if (threadIdx.x == 0) {
				double sxu = 0.0, sal = 0.0, syx = 0.0;
				for (int i = 0; i < nw; i++) {
					sxu += sc[3 * i + 0];
					sal += sc[3 * i + 1];
					syx += sc[3 * i + 2];
				}
				const double dd = sxu + sal * a * A;
				const float gdt = (float)(dd * ssm_softplus_grad(v));
				if (ddt)
					ddt[ih] = gdt;
				acc_dtb += gdt;
				acc_dA += sal * a * d;
				acc_D += syx;
			}
			__syncthreads(); /* the slots are read before the next step clears them */
		}
	}
	if (dstate_in)
		for (int p = w; p < P; p += nw)
			for (int k = lane; k < N; k += WARP)
				dstate_in[(size_t)bh * PN + (size_t)p * N + k] = Gs[(size_t)p * N + k];
	if (threadIdx.x == 0) {
		part[(size_t)bh * 3 + 0] = acc_dtb;
		part[(size_t)bh * 3 + 1] = acc_dA * A;
		part[(size_t)bh * 3 + 2] = acc_D;
	}
}

/* dBm[b,t,g,k] = sum over the group's heads, in order, of dBp[b,t,h,k] (overwrites) */
__global__ void ssd_scan_group_kernel(float *dst, const float *part, int B, int T, int H, int G, int N)
{
	const int hpg = H / G;
	GRID_STRIDE(i, (size_t)B * T * G * N) {
		const int k = (int)(i % N);
		const size_t btg = i / N, bt = btg / G;
		const int g = (int)(btg % G);
		float acc = 0.0f;
		for (int h = g * hpg; h < (g + 1) * hpg; h++)
			acc += part[(bt * H + h) * N + k];
		dst[i] = acc;
	}
}

/* the per-head parameter grads: the samples' sums in order, in double, added */
__global__ void ssd_scan_params_kernel(float *ddt_bias, float *dA_log, float *dD, const double *part, int B, int H)
{
	const int h = blockIdx.x * blockDim.x + threadIdx.x;
	if (h >= H)
		return;
	double s[3] = { 0.0, 0.0, 0.0 };
	for (int b = 0; b < B; b++)
		for (int i = 0; i < 3; i++)
			s[i] += part[((size_t)b * H + h) * 3 + i];
	if (ddt_bias)
		ddt_bias[h] += (float)s[0];
	if (dA_log)
		dA_log[h] += (float)s[1];
	if (dD)
		dD[h] += (float)s[2];
}

static void scan_check(int T, int H, int P, int G, int N, int chunk)
{
	if (T < 1 || H < 1 || P < 1 || G < 1 || N < 1 || H % G || chunk < 1)
		CUDA_BUG("ssd_scan: bad shape (T, H, P, G, N, chunk must be positive and H % G 0)");
}

static void cuda_ssd_scan_forward(float *y, float *state_out, const float *x, const float *dt, const float *dt_bias,
				  const float *A_log, const float *Bm, const float *Cm, const float *D,
				  const float *state_in, int B, int T, int H, int P, int G, int N, int chunk)
{
	scan_check(T, H, P, G, N, chunk);
	if (B < 1)
		return;
	const size_t smem = (size_t)SCAN_ROWS * N * sizeof(float);
	float *gstate = NULL;
	if (smem > SSM_SMEM)
		gstate = (float *)scratch_alloc((size_t)B * H * P * N * sizeof(float));
	const int nslice = (P + SCAN_ROWS - 1) / SCAN_ROWS;
	launch<ssd_scan_forward_kernel>(grid_blocks((size_t)B * H * nslice), SCAN_ROWS * WARP, gstate ? 0 : smem, y,
					state_out, x, dt, dt_bias, A_log, Bm, Cm, D, state_in, gstate, T, H, P, G, N);
	KERNEL_CHECK();
	if (gstate)
		scratch_free(gstate);
}

static void cuda_ssd_scan_backward(float *dx, float *ddt, float *ddt_bias, float *dA_log, float *dBm, float *dCm,
				   float *dD, float *dstate_in, const float *dy, const float *dstate_out,
				   const float *x, const float *dt, const float *dt_bias, const float *A_log,
				   const float *Bm, const float *Cm, const float *D, const float *state_in, int B,
				   int T, int H, int P, int G, int N, int chunk)
{
	scan_check(T, H, P, G, N, chunk);
	if (B < 1)
		return;
	if (!D)
		dD = NULL;
	const int L = chunk < T ? chunk : T, nck = (T + L - 1) / L, nw = P < SCAN_WARPS ? P : SCAN_WARPS;
	const size_t BH = (size_t)B * H, PN = (size_t)P * N, BTHN = (size_t)B * T * H * N;
	/* shared: 3 doubles per warp, G, dB and dC per warp (a multiple of 4 floats) */
	size_t sm_floats = 2 * 3 * (size_t)nw + PN + 2 * (size_t)nw * N;
	sm_floats = (sm_floats + 3) & ~(size_t)3;
	const bool in_smem = sm_floats * sizeof(float) <= SSM_SMEM;
	/* scratch: part (doubles) and the shared slots first (8-byte aligned), then the float arrays */
	const size_t n_part = BH * 3 * 2, n_gsm = in_smem ? 0 : BH * sm_floats, n_ckpt = BH * nck * PN;
	const size_t n_hs = BH * L * PN, n_dB = dBm ? BTHN : 0, n_dC = dCm ? BTHN : 0;
	float *buf = (float *)scratch_alloc((n_part + n_gsm + n_ckpt + n_hs + n_dB + n_dC) * sizeof(float));
	double *part = (double *)buf;
	float *gsm = buf + n_part, *ckpt = gsm + n_gsm, *hst = ckpt + n_ckpt, *dBp = hst + n_hs, *dCp = dBp + n_dB;
	launch<ssd_scan_backward_kernel>(grid_blocks(BH), nw * WARP, in_smem ? sm_floats * sizeof(float) : 0, dx, ddt,
					 dBm ? dBp : NULL, dCm ? dCp : NULL, part, dstate_in, ckpt, hst,
					 in_smem ? NULL : gsm, sm_floats, dy, dstate_out, x, dt, dt_bias, A_log, Bm, Cm,
					 D, state_in, T, H, P, G, N, L, nck);
	KERNEL_CHECK();
	const size_t nBG = (size_t)B * T * G * N;
	if (dBm) {
		launch<ssd_scan_group_kernel>(grid_for(nBG), THREADS, 0, dBm, (const float *)dBp, B, T, H, G, N);
		KERNEL_CHECK();
	}
	if (dCm) {
		launch<ssd_scan_group_kernel>(grid_for(nBG), THREADS, 0, dCm, (const float *)dCp, B, T, H, G, N);
		KERNEL_CHECK();
	}
	if (ddt_bias || dA_log || dD) {
		launch<ssd_scan_params_kernel>((H + THREADS - 1) / THREADS, THREADS, 0, ddt_bias, dA_log, dD,
					       (const double *)part, B, H);
		KERNEL_CHECK();
	}
	scratch_free(buf);
}

/* ---- gated, grouped RMSNorm: out = g rstd w, g = y silu(z) ---- */

#define GN_WARPS (THREADS / WARP) /* (row, group) items per block, one warp each */

__global__ void gated_rmsnorm_forward_kernel(float *out, float *rstd, const float *y, const float *z, const float *w,
					     int N, int C, int ngroups, float eps)
{
	const size_t item = (size_t)blockIdx.x * GN_WARPS + threadIdx.x / WARP;
	const int lane = threadIdx.x % WARP, cg = C / ngroups;
	if (item >= (size_t)N * ngroups)
		return;
	const int k = (int)(item % ngroups);
	const size_t o = (item / ngroups) * C + (size_t)k * cg;
	double sq = 0.0;
	for (int c = lane; c < cg; c += WARP) { /* out may be y: each value read, then written, by one lane */
		const float gv = z ? y[o + c] * (z[o + c] * ssm_sigmoid(z[o + c])) : y[o + c];
		out[o + c] = gv;
		sq += (double)gv * gv;
	}
	sq = warp_sumd(sq);
	const float s = 1.0f / sqrtf((float)(sq / cg) + eps);
	for (int c = lane; c < cg; c += WARP)
		out[o + c] = out[o + c] * s * w[(size_t)k * cg + c];
	if (lane == 0)
		rstd[item] = s;
}

/*
 * Per group, with r = rstd (cpu_gated_rmsnorm_backward):
 *   dg_c = r (dout_c w_c - g_c r^2 mean_group(dout w g))
 *   dy = dg silu(z),  dz = dg y silu'(z)
 * dy may be dout: each lane reads its values before it writes them.
 */
__global__ void gated_rmsnorm_backward_kernel(float *dy, float *dz, const float *dout, const float *y, const float *z,
					      const float *w, const float *rstd, int N, int C, int ngroups)
{
	const size_t item = (size_t)blockIdx.x * GN_WARPS + threadIdx.x / WARP;
	const int lane = threadIdx.x % WARP, cg = C / ngroups;
	if (item >= (size_t)N * ngroups)
		return;
	const int k = (int)(item % ngroups);
	const size_t o = (item / ngroups) * C + (size_t)k * cg;
	const float *wg = w + (size_t)k * cg;
	const float r = rstd[item];
	float sum = 0.0f;
	for (int c = lane; c < cg; c += WARP) {
		const float gv = z ? y[o + c] * (z[o + c] * ssm_sigmoid(z[o + c])) : y[o + c];
		sum += dout[o + c] * wg[c] * gv;
	}
	sum = warp_sum(sum);
	const float kk = r * r * (sum / cg);
	for (int c = lane; c < cg; c += WARP) {
		const float zc = z ? z[o + c] : 0.0f, s = ssm_sigmoid(zc), sl = zc * s;
		const float yc = y[o + c], gv = z ? yc * sl : yc;
		const float dg = r * (dout[o + c] * wg[c] - gv * kk);
		if (dz)
			dz[o + c] = dg * yc * (s * (1.0f + zc * (1.0f - s)));
		if (dy)
			dy[o + c] = z ? dg * sl : dg;
	}
}

/* dw partials per ROWS-row block: part[blk][c] = sum_n dout (g r), rows in order */
__global__ void gated_rmsnorm_partial_kernel(float *part, const float *dout, const float *y, const float *z,
					     const float *rstd, int N, int C, int ngroups, int nblk)
{
	const int tiles = (C + THREADS - 1) / THREADS;
	const int blk = blockIdx.x / tiles, c = (blockIdx.x % tiles) * THREADS + threadIdx.x;
	if (blk >= nblk || c >= C)
		return;
	const int n0 = blk * ROWS, n1 = n0 + ROWS < N ? n0 + ROWS : N, k = c / (C / ngroups);
	float pw = 0.0f;
	for (int n = n0; n < n1; n++) {
		const size_t i = (size_t)n * C + c;
		const float gv = z ? y[i] * (z[i] * ssm_sigmoid(z[i])) : y[i];
		pw += dout[i] * (gv * rstd[(size_t)n * ngroups + k]);
	}
	part[(size_t)blk * C + c] = pw;
}

/* dw[c] += sum over blocks, in order, in double (cpu_reduce_blocks) */
__global__ void gated_rmsnorm_reduce_kernel(float *dw, const float *part, int nblk, int C)
{
	const int c = blockIdx.x * blockDim.x + threadIdx.x;
	if (c >= C)
		return;
	double acc = 0.0;
	for (int b = 0; b < nblk; b++)
		acc += part[(size_t)b * C + c];
	dw[c] += (float)acc;
}

static void gnorm_check(int C, int ngroups)
{
	if (ngroups < 1 || C % ngroups)
		CUDA_BUG("gated_rmsnorm: the channels do not split into the groups");
}

static void cuda_gated_rmsnorm_forward(float *out, float *rstd, const float *y, const float *z, const float *w, int N,
				       int C, int ngroups, float eps)
{
	gnorm_check(C, ngroups);
	const size_t items = (size_t)N * ngroups;
	if (N < 1 || C < 1)
		return;
	launch<gated_rmsnorm_forward_kernel>(grid_blocks((items + GN_WARPS - 1) / GN_WARPS), THREADS, 0, out, rstd, y,
					     z, w, N, C, ngroups, eps);
	KERNEL_CHECK();
}

static void cuda_gated_rmsnorm_backward(float *dy, float *dz, float *dw, const float *dout, const float *y,
					const float *z, const float *w, const float *rstd, int N, int C, int ngroups)
{
	gnorm_check(C, ngroups);
	if (N < 1 || C < 1)
		return;
	if (!z)
		dz = NULL;
	if (dw) { /* first: dy may overwrite dout */
		const int nblk = (N + ROWS - 1) / ROWS, tiles = (C + THREADS - 1) / THREADS;
		float *part = (float *)scratch_alloc((size_t)nblk * C * sizeof(float));
		launch<gated_rmsnorm_partial_kernel>(grid_blocks((size_t)nblk * tiles), THREADS, 0, part, dout, y, z,
						     rstd, N, C, ngroups, nblk);
		KERNEL_CHECK();
		launch<gated_rmsnorm_reduce_kernel>(tiles, THREADS, 0, dw, (const float *)part, nblk, C);
		KERNEL_CHECK();
		scratch_free(part);
	}
	if (dy || dz) {
		const size_t items = (size_t)N * ngroups;
		launch<gated_rmsnorm_backward_kernel>(grid_blocks((items + GN_WARPS - 1) / GN_WARPS), THREADS, 0, dy,
						      dz, dout, y, z, w, rstd, N, C, ngroups);
		KERNEL_CHECK();
	}
}

/* ---- into the table ---- */

void cuda_ssm_fill(struct kops *t)
{
	t->ssm_conv_forward = cuda_ssm_conv_forward;
	t->ssm_conv_backward = cuda_ssm_conv_backward;
	t->ssd_scan_forward = cuda_ssd_scan_forward;
	t->ssd_scan_backward = cuda_ssd_scan_backward;
	t->gated_rmsnorm_forward = cuda_gated_rmsnorm_forward;
	t->gated_rmsnorm_backward = cuda_gated_rmsnorm_backward;
}
