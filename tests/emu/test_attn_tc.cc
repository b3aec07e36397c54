/*
 * test_attn_tc.cc - the tensor-core flash attention (lib/kernels/cuda/
 * attn_tc.cuh) run in the thread-block emulator (emu.h) against the CPU
 * twin, kops_cpu()->attention_block_forward/backward: the kernel's own
 * source, its fragment layouts, masks, merges, dropout and barriers, checked
 * on a machine without a GPU. Inputs are rounded to the half format first
 * (as the model holds most of them in --bf16/--fp16), so what differs from
 * the CPU is P and dS rounded to halves before their products, and the
 * order of the sums.
 */
#include "attn_tc.cuh"

extern "C" {
#include "kernels/ops.h"
}
#include "test.h"

#include <math.h>
#include <stdlib.h>
#include <vector>

namespace {

struct rng {
	uint64_t s;
	float uniform(void) /* [-1, 1) */
	{
		s = s * 6364136223846793005ULL + 1442695040888963407ULL;
		return (float)((s >> 40) * (1.0 / (1 << 23))) - 1.0f;
	}
};

float round_half(float x, int kind)
{
	return kind == 0 ? emu_bf16_to_f32(emu_f32_to_bf16(x)) : emu_f16_to_f32(emu_f32_to_f16(x));
}

std::vector<float> rand_half(size_t n, float scale, int kind, rng &r)
{
	std::vector<float> x(n);
	for (auto &e : x)
		e = round_half(scale * r.uniform(), kind);
	return x;
}

struct fwd_case {
	const char *name;
	int B, Tq, Tk, a, g, k, S;
	std::vector<int32_t> qpos, kpos;
	int accumulate;
	float p;                      /* dropout */
	std::vector<int32_t> kpos0;   /* accumulate: the first block's keys (empty: 0 .. kpos[0]-1) */
	int window = -1;              /* sliding window (ops.h); -1: none */
	std::vector<int32_t> doc{};   /* document ids [B, S] (ops.h); empty: none */
	const int32_t *docp(void) const
	{
		return doc.empty() ? NULL : doc.data();
	}
};

const uint64_t SEED = 1234, OFFSET = 77;

tc_drop drop_of(const fwd_case &c)
{
	tc_drop d;
	d.p = c.p;
	d.ks = c.p > 0.0f ? 1.0f / (1.0f - c.p) : 1.0f;
	d.seed = SEED;
	d.offset = OFFSET;
	d.B = c.B;
	d.S = c.S;
	return d;
}

/* x converted to halves by the kernels' own conversion kernel, emulated */
template <class H> std::vector<uint16_t> to_half(const std::vector<float> &x)
{
	std::vector<uint16_t> h(x.size(), 0xffff);
	const size_t n4 = x.size() / 4;
	CHECK_INT(emu_launch(dim3{ 3, 1, 1 }, dim3{ 256, 1, 1 }, 0, 0,
			     [&] { attn_tc_half_kernel<H>((uint32_t *)h.data(), x.data(), n4); }),
		  0);
	return h;
}

template <class H, int KD, int WQ, bool WG = false>
int launch(const fwd_case &c, float *out, float *lse, const std::vector<float> &qv, const std::vector<float> &kv,
	   const std::vector<float> &vv, int order)
{
	const std::vector<uint16_t> qh = to_half<H>(qv), kh = to_half<H>(kv), vh = to_half<H>(vv);
	const uint16_t *q = qh.data(), *kk = kh.data(), *v = vh.data();
	const int ntile = (c.Tq + 16 * WQ - 1) / (16 * WQ);
	const float scale = 1.0f / sqrtf((float)c.k);
	return emu_launch(dim3{(unsigned)(c.B * c.a * ntile), 1, 1}, dim3{32 * WQ, 1, 1}, tc_fwd_smem<KD, WQ, WG>(),
			  order, [&] {
				  attn_tc_fwd_kernel<H, KD, WQ, WG>(out, lse, q, kk, v, c.qpos.data(), c.kpos.data(),
								c.docp(), c.S, c.Tq, c.Tk, c.a, c.g, scale, c.window,
								c.accumulate, drop_of(c));
			  });
}

/* max |x - y|, over max |y| when rel: -1 when the infinities or NaNs differ */
double max_diff(const std::vector<float> &x, const std::vector<float> &y, bool rel, double floor = 1e-30)
{
	double d = 0, m = floor;
	for (size_t i = 0; i < x.size(); i++) {
		if (isinf(y[i]) || isinf(x[i])) {
			if (x[i] != y[i])
				return -1;
			continue;
		}
		if (isnan(x[i]) || isnan(y[i]))
			return -1;
		d = fmax(d, fabs((double)x[i] - y[i]));
		m = fmax(m, fabs((double)y[i]));
	}
	return rel ? d / m : d;
}

double rel_diff(const std::vector<float> &x, const std::vector<float> &y)
{
	return max_diff(x, y, true);
}

double abs_diff(const std::vector<float> &x, const std::vector<float> &y)
{
	return max_diff(x, y, false);
}

/*
 * Runs one case: the CPU op and the emulated kernel (both thread orders) on
 * the same inputs; for accumulate, both merge into the state the CPU left
 * after a first block of keys (kpos0 before this block's). Checks out within
 * tol of max |out|, lse within 2e-5 absolute, and the four emulator orders
 * (emu.h) bit-equal.
 */
template <class H, int KD, int WQ, bool WG = false> void run_case(const fwd_case &c, double tol)
{
	const int kind = H::kind;
	rng r{ 0x5eed0000ULL + (uint64_t)c.Tq * 131 + (uint64_t)c.Tk };
	const size_t nq = (size_t)c.B * c.a * c.Tq * c.k, nkv = (size_t)c.B * c.g * c.Tk * c.k;
	std::vector<float> q = rand_half(nq, 2.0f, kind, r), kk = rand_half(nkv, 2.0f, kind, r),
			   v = rand_half(nkv, 1.0f, kind, r);
	const size_t no = (size_t)c.B * c.Tq * c.a * c.k, nl = (size_t)c.B * c.a * c.Tq;
	std::vector<float> out0(no, NAN), lse0(nl, NAN);
	const struct kops *cpu = kops_cpu();
	const float scale = 1.0f / sqrtf((float)c.k);
	if (c.accumulate) {
		/* a first block of keys, the state to merge into: positions 0 .. kpos[0]-1 or kpos0 */
		std::vector<int32_t> p1 = c.kpos0;
		if (p1.empty())
			for (int i = 0; i < c.kpos[0]; i++)
				p1.push_back(i);
		const int T1 = (int)p1.size();
		std::vector<float> k1 = rand_half((size_t)c.B * c.g * T1 * c.k, 2.0f, kind, r),
				   v1 = rand_half((size_t)c.B * c.g * T1 * c.k, 1.0f, kind, r);
		cpu->attention_block_forward(out0.data(), lse0.data(), q.data(), k1.data(), v1.data(), c.qpos.data(),
					     p1.data(), c.docp(), c.B, c.Tq, T1, c.a, c.g, c.k, c.S, scale, c.window,
					     0.0f, 0, 0, 0);
	}
	std::vector<float> ref_out = out0, ref_lse = lse0;
	cpu->attention_block_forward(ref_out.data(), ref_lse.data(), q.data(), kk.data(), v.data(), c.qpos.data(),
				     c.kpos.data(), c.docp(), c.B, c.Tq, c.Tk, c.a, c.g, c.k, c.S, scale, c.window,
				     c.p, SEED, OFFSET, c.accumulate);
	std::vector<float> out[4] = { out0, out0, out0, out0 }, lse[4] = { lse0, lse0, lse0, lse0 };
	for (int order = 0; order < 4; order++)
		CHECK_INT((launch<H, KD, WQ, WG>(c, out[order].data(), lse[order].data(), q, kk, v,
					     order)),
			  0);
	const double dout = rel_diff(out[0], ref_out), dlse = abs_diff(lse[0], ref_lse);
	char win[32] = "";
	if (c.window >= 0)
		snprintf(win, sizeof win, ", window %d", c.window);
	printf("#   %s (%s, head dim %d, %d warps%s%s%s%s): out %.2e of max |out| (tolerance %.0e), lse %.2e\n",
	       c.name, kind ? "fp16" : "bf16", c.k, WQ, WG ? ", wgmma" : "", c.p > 0 ? ", dropout" : "", win,
	       c.doc.empty() ? "" : ", documents", dout, tol, dlse);
	CHECK(dout >= 0 && dout <= tol);
	CHECK(dlse >= 0 && dlse <= 2e-5);
	for (int order = 1; order < 4; order++) {
		CHECK(memcmp(out[0].data(), out[order].data(), no * sizeof(float)) == 0);
		CHECK(memcmp(lse[0].data(), lse[order].data(), nl * sizeof(float)) == 0);
	}
}

std::vector<int32_t> iota(int n, int from, int step)
{
	std::vector<int32_t> p(n);
	for (int i = 0; i < n; i++)
		p[i] = from + i * step;
	return p;
}

/* causal self-attention on positions 0..T-1, as training calls it */
fwd_case self_case(const char *name, int B, int T, int a, int g, int k)
{
	return fwd_case{ name, B, T, T, a, g, k, T, iota(T, 0, 1), iota(T, 0, 1), 0, 0.0f, {} };
}

void test_self_bf16_64(void)
{
	/* 100 rows: one full 64-row tile and a ragged one; GQA 4 heads on 2 groups */
	run_case<tc_bf16, 64, 8>(self_case("causal, T 100, GQA 4/2", 2, 100, 4, 2, 64), 5e-3);
	run_case<tc_bf16, 64, 4>(self_case("causal, T 100, GQA 4/2", 2, 100, 4, 2, 64), 5e-3);
}

void test_self_fp16_128(void)
{
	run_case<tc_f16, 128, 8>(self_case("causal, T 80", 1, 80, 2, 1, 128), 1e-3);
}

void test_self_bf16_128_long(void)
{
	/* three key tiles, the last ragged; 8 warps per block */
	run_case<tc_bf16, 128, 8>(self_case("causal, T 300", 1, 300, 2, 2, 128), 5e-3);
	run_case<tc_bf16, 128, 4>(self_case("causal, T 150", 1, 150, 2, 2, 128), 5e-3);
}

/* a block of context parallelism: queries of one chunk against keys of
 * another, positions with gaps, rows that see none of the keys (out 0, lse
 * -inf) and, merged, rows that keep the old state */
void test_block_positions(void)
{
	fwd_case c{ "block: strided positions", 1, 70, 90, 2, 1, 64, 400, iota(70, 5, 5), iota(90, 20, 3), 0, 0.0f, {} };
	run_case<tc_bf16, 64, 8>(c, 5e-3);
	c.name = "block: merged into an earlier block's state";
	c.accumulate = 1;
	run_case<tc_bf16, 64, 4>(c, 5e-3);
	/* every key in every query's future: the whole-tile early exit */
	fwd_case f{ "block: all keys in the future", 1, 40, 30, 2, 2, 64, 400, iota(40, 0, 1), iota(30, 100, 1), 0, 0.0f, {} };
	run_case<tc_f16, 64, 4>(f, 1e-3);
	f.accumulate = 1;
	f.name = "block: all keys in the future, merged";
	run_case<tc_f16, 64, 4>(f, 1e-3);
}

/* the comparison can fail: a kernel given the keys of another head group
 * is far outside the tolerance */
void test_detects_wrong_inputs(void)
{
	fwd_case c = self_case("wrong group", 1, 64, 2, 2, 64);
	rng r{ 7 };
	const size_t n = (size_t)2 * 64 * 64;
	std::vector<float> q = rand_half(n, 2.0f, 0, r), kk = rand_half(n, 2.0f, 0, r), v = rand_half(n, 1.0f, 0, r);
	std::vector<float> ref(n), lref(128), out(n, NAN), lout(128, NAN);
	kops_cpu()->attention_block_forward(ref.data(), lref.data(), q.data(), kk.data(), v.data(), c.qpos.data(),
		 c.kpos.data(), NULL, 1, 64, 64, 2, 2, 64, 64, 0.125f, -1, 0.0f, 0, 0, 0);
	std::vector<float> v2(v);
	for (size_t i = 0; i < n / 2; i++) /* swap the two groups' values */
		std::swap(v2[i], v2[i + n / 2]);
	CHECK_INT((launch<tc_bf16, 64, 4>(c, out.data(), lout.data(), q, kk, v2, 0)), 0);
	CHECK(rel_diff(out, ref) > 0.1);
}

/*
 * The backward: rowdot, dq and dkv kernels in the emulator (four orders)
 * against the CPU's attention_block_backward, on the CPU forward's out and
 * lse (all four emulator orders); the grads start from random values (the
 * op adds), NULL grads skip.
 */
template <class H, int KD, bool WG = false> void run_bwd_case(const fwd_case &c, double tol, int nul)
{
	const int kind = H::kind;
	rng r{ 0xbacc0000ULL + (uint64_t)c.Tq * 7 + (uint64_t)c.Tk };
	const size_t nq = (size_t)c.B * c.a * c.Tq * c.k, nkv = (size_t)c.B * c.g * c.Tk * c.k;
	const size_t nl = (size_t)c.B * c.a * c.Tq;
	std::vector<float> q = rand_half(nq, 2.0f, kind, r), kk = rand_half(nkv, 2.0f, kind, r),
			   v = rand_half(nkv, 1.0f, kind, r), dout = rand_half(nq, 1.0f, kind, r);
	std::vector<float> out(nq), lse(nl);
	const struct kops *cpu = kops_cpu();
	const float scale = 1.0f / sqrtf((float)c.k);
	cpu->attention_block_forward(out.data(), lse.data(), q.data(), kk.data(), v.data(), c.qpos.data(),
				     c.kpos.data(), c.docp(), c.B, c.Tq, c.Tk, c.a, c.g, c.k, c.S, scale, c.window,
				     c.p, SEED, OFFSET, 0);
	for (auto &x : out) /* the model holds out in the half format */
		x = round_half(x, kind);
	std::vector<float> g0q(nq), g0k(nkv), g0v(nkv);
	for (auto *g : { &g0q, &g0k, &g0v })
		for (auto &x : *g)
			x = r.uniform();
	std::vector<float> rq = g0q, rk = g0k, rv = g0v;
	cpu->attention_block_backward(nul & 1 ? NULL : rq.data(), nul & 2 ? NULL : rk.data(), nul & 4 ? NULL : rv.data(),
				      dout.data(), out.data(), lse.data(), q.data(), kk.data(), v.data(), c.qpos.data(),
				      c.kpos.data(), c.docp(), c.B, c.Tq, c.Tk, c.a, c.g, c.k, c.S, scale, c.window,
				      c.p, SEED, OFFSET);
	std::vector<float> eq[4] = { g0q, g0q, g0q, g0q }, ek[4] = { g0k, g0k, g0k, g0k }, ev[4] = { g0v, g0v, g0v, g0v };
	const std::vector<uint16_t> qh = to_half<H>(q), kh = to_half<H>(kk), vh = to_half<H>(v), oh = to_half<H>(dout);
	for (int order = 0; order < 4; order++) {
		std::vector<float> dr(nl, NAN);
		const bool need_dr = (nul & 3) != 3; /* attn_tc.cu computes Dr only for dq or dk */
		const int ntq = (c.Tq + 63) / 64, ntk = (c.Tk + 63) / 64;
		if (need_dr)
			CHECK_INT(emu_launch(dim3{ (unsigned)((nl + 3) / 4), 1, 1 }, dim3{ 128, 1, 1 }, 0, order,
					     [&] {
						     attn_tc_rowdot_kernel<KD>(dr.data(), dout.data(), out.data(),
									       c.qpos.data(), c.kpos.data(), c.B, c.Tq,
									       c.a);
					     }),
				  0);
		if (!(nul & 1))
			CHECK_INT(emu_launch(dim3{ (unsigned)(c.B * c.a * ntq), 1, 1 }, dim3{ 128, 1, 1 },
					     tc_dq_smem<KD, WG>(), order,
					     [&] {
						     attn_tc_dq_kernel<H, KD, WG>(eq[order].data(), oh.data(), lse.data(),
									      dr.data(), qh.data(), kh.data(), vh.data(),
									      c.qpos.data(), c.kpos.data(), c.docp(),
									      c.S, c.Tq, c.Tk, c.a, c.g, scale,
									      c.window, drop_of(c));
					     }),
				  0);
		if ((nul & 6) != 6)
			CHECK_INT(emu_launch(dim3{ (unsigned)(c.B * c.g * ntk), 1, 1 }, dim3{ 128, 1, 1 },
					     tc_dkv_smem<KD, WG>(), order,
					     [&] {
						     attn_tc_dkv_kernel<H, KD, WG>(nul & 2 ? NULL : ek[order].data(),
									       nul & 4 ? NULL : ev[order].data(),
									       oh.data(), lse.data(),
									       need_dr ? dr.data() : NULL, qh.data(),
									       kh.data(), vh.data(), c.qpos.data(),
									       c.kpos.data(), c.docp(), c.S, c.Tq,
									       c.Tk, c.a, c.g, scale, c.window,
									       drop_of(c));
					     }),
				  0);
	}
	/* the comparison is on what the op added, relative to its largest value */
	auto added = [](const std::vector<float> &x, const std::vector<float> &x0) {
		std::vector<float> d(x.size());
		for (size_t i = 0; i < x.size(); i++)
			d[i] = x[i] - x0[i];
		return d;
	};
	/* relative to each gradient's own largest value, but never to less
	 * than 1e-3 of the largest of the three: where one is zero in exact
	 * arithmetic (dq and dk with one key: the softmax of one score is
	 * constant) both sides hold rounding noise whose ratio means nothing */
	const std::vector<float> aq = added(rq, g0q), ak = added(rk, g0k), av = added(rv, g0v);
	double big = 0;
	for (const std::vector<float> *g : { &aq, &ak, &av })
		for (float x : *g)
			big = fmax(big, fabs((double)x));
	const double fl = fmax(1e-3 * big, 1e-30);
	const double e_q = max_diff(added(eq[0], g0q), aq, true, fl), e_k = max_diff(added(ek[0], g0k), ak, true, fl),
		     e_v = max_diff(added(ev[0], g0v), av, true, fl);
	char win[32] = "";
	if (c.window >= 0)
		snprintf(win, sizeof win, ", window %d", c.window);
	printf("#   %s backward (%s, head dim %d%s%s%s%s%s%s%s): dq %.2e, dk %.2e, dv %.2e of their max "
	       "(tolerance %.0e)\n",
	       c.name, kind ? "fp16" : "bf16", c.k, WG ? ", wgmma" : "", c.p > 0 ? ", dropout" : "", win,
	       c.doc.empty() ? "" : ", documents", nul & 1 ? ", dq NULL" : "", nul & 2 ? ", dk NULL" : "",
	       nul & 4 ? ", dv NULL" : "", e_q, e_k, e_v, tol);
	CHECK(nul & 1 ? eq[0] == g0q : e_q >= 0 && e_q <= tol);
	CHECK(nul & 2 ? ek[0] == g0k : e_k >= 0 && e_k <= tol);
	CHECK(nul & 4 ? ev[0] == g0v : e_v >= 0 && e_v <= tol);
	for (int order = 1; order < 4; order++)
		CHECK(eq[0] == eq[order] && ek[0] == ek[order] && ev[0] == ev[order]);
}

void test_bwd_self(void)
{
	run_bwd_case<tc_bf16, 64>(self_case("causal, T 100, GQA 4/2", 2, 100, 4, 2, 64), 1e-2, 0);
	run_bwd_case<tc_f16, 128>(self_case("causal, T 150", 1, 150, 2, 1, 128), 2e-3, 0);
	run_bwd_case<tc_bf16, 128>(self_case("causal, T 70, GQA 4/1", 1, 70, 4, 1, 128), 1e-2, 0);
}

void test_bwd_block(void)
{
	fwd_case c{ "block: strided positions", 1, 70, 90, 2, 1, 64, 400, iota(70, 5, 5), iota(90, 20, 3), 0, 0.0f, {} };
	run_bwd_case<tc_bf16, 64>(c, 1e-2, 0);
	run_bwd_case<tc_bf16, 64>(c, 1e-2, 1);
	run_bwd_case<tc_bf16, 64>(c, 1e-2, 2);
	run_bwd_case<tc_bf16, 64>(c, 1e-2, 4);
	fwd_case f{ "block: all keys in the future", 1, 40, 30, 2, 2, 64, 400, iota(40, 0, 1), iota(30, 100, 1), 0, 0.0f, {} };
	run_bwd_case<tc_f16, 64>(f, 2e-3, 0);
}

/* dropout 0.1 with ops.h's counters: the masks are the CPU's (a wrong
 * counter drops other probabilities, far outside the tolerance) */
void test_dropout(void)
{
	fwd_case c = self_case("causal, T 100, GQA 4/2", 2, 100, 4, 2, 64);
	c.p = 0.1f;
	run_case<tc_bf16, 64, 4>(c, 5e-3);
	run_bwd_case<tc_bf16, 64>(c, 1e-2, 0);
	fwd_case d{ "block: strided positions", 1, 70, 90, 2, 1, 128, 400, iota(70, 5, 5), iota(90, 20, 3), 1, 0.2f, {} };
	run_case<tc_f16, 128, 8>(d, 1e-3);
	d.accumulate = 0;
	run_bwd_case<tc_f16, 128>(d, 2e-3, 0);
}

/* the edges: one query and one key; rows whose running state saw no key
 * (lse -inf) merging their first keys; backward with a single grad wanted */
void test_edges(void)
{
	run_case<tc_bf16, 64, 4>(self_case("T 1", 1, 1, 2, 1, 64), 5e-3);
	run_bwd_case<tc_bf16, 64>(self_case("T 1", 1, 1, 2, 1, 64), 1e-2, 0);
	fwd_case m{ "merge into rows that saw nothing", 1, 40, 10, 2, 1, 128, 64, iota(40, 0, 1), iota(10, 0, 1),
		    1, 0.0f, iota(10, 20, 1) };
	run_case<tc_bf16, 128, 8>(m, 5e-3);
	fwd_case c{ "block: strided positions", 2, 70, 90, 4, 2, 64, 400, iota(70, 5, 5), iota(90, 20, 3), 0, 0.0f, {} };
	for (int nul : { 3, 5, 6 }) /* dv only, dk only, dq only */
		run_bwd_case<tc_bf16, 64>(c, 1e-2, nul);
}

/* the wgmma forward (attn_wg.cu, sm_90a): the same cases through the
 * emulator's warpgroup products, two warpgroups a block and one */
void test_wgmma_forward(void)
{
	run_case<tc_bf16, 64, 8, true>(self_case("causal, T 100, GQA 4/2", 2, 100, 4, 2, 64), 5e-3);
	run_case<tc_f16, 128, 8, true>(self_case("causal, T 300", 1, 300, 2, 1, 128), 1e-3);
	run_case<tc_bf16, 128, 4, true>(self_case("causal, T 150", 1, 150, 2, 2, 128), 5e-3);
	fwd_case c{ "block: strided positions", 1, 70, 90, 2, 1, 64, 400, iota(70, 5, 5), iota(90, 20, 3), 1, 0.1f, {} };
	run_case<tc_bf16, 64, 8, true>(c, 5e-3);
	fwd_case m{ "merge into rows that saw nothing", 1, 40, 10, 2, 1, 128, 64, iota(40, 0, 1), iota(10, 0, 1),
		    1, 0.0f, iota(10, 20, 1) };
	run_case<tc_f16, 128, 8, true>(m, 1e-3);
	fwd_case f{ "block: all keys in the future", 1, 40, 30, 2, 2, 64, 400, iota(40, 0, 1), iota(30, 100, 1), 0, 0.0f, {} };
	run_case<tc_bf16, 64, 8, true>(f, 5e-3);
}

/* the wgmma backward: dq and dkv kernels, one warpgroup a block */
void test_wgmma_backward(void)
{
	run_bwd_case<tc_bf16, 64, true>(self_case("causal, T 100, GQA 4/2", 2, 100, 4, 2, 64), 1e-2, 0);
	run_bwd_case<tc_f16, 128, true>(self_case("causal, T 150", 1, 150, 2, 1, 128), 2e-3, 0);
	fwd_case c{ "block: strided positions", 1, 70, 90, 2, 1, 128, 400, iota(70, 5, 5), iota(90, 20, 3), 0, 0.2f, {} };
	run_bwd_case<tc_bf16, 128, true>(c, 1e-2, 0);
	c.p = 0.0f;
	for (int nul : { 3, 5, 6 })
		run_bwd_case<tc_bf16, 128, true>(c, 1e-2, nul);
}

/*
 * Sliding windows (ops.h's window L: a query at position p sees the keys at
 * p-L..p). Windows smaller than, equal to and crossing the 64- and
 * 128-query blocks (and the 64-key tiles; 32 at head dim 128 in the
 * backward), so that blocks skip leading key tiles, start mid-tile and mask
 * both edges in one tile; self-attention as the flash path calls it (the
 * causal diagonal in every block), and blocks of context parallelism as ring
 * attention calls them: load-balanced chunks (rank 1 of 2 holds chunks 1
 * and 2 of 4), the diagonal block and the one against chunks 0 and 3 (no
 * diagonal: only the window's edge, rows that see nothing, query tiles and
 * key tiles wholly outside), strided positions, and a merge.
 */
fwd_case win_case(const char *name, int B, int T, int a, int g, int k, int L)
{
	fwd_case c = self_case(name, B, T, a, g, k);
	c.window = L;
	return c;
}

std::vector<int32_t> chunks(int S, int nch, int ca, int cb)
{
	std::vector<int32_t> p;
	const int len = S / nch;
	for (int i = 0; i < S; i++) {
		const int ch = i / len < nch ? i / len : nch - 1;
		if (ch == ca || ch == cb)
			p.push_back(i);
	}
	return p;
}

/* rank 1 of CP 2 over S = 512: queries in chunks 1, 2 of 4; keys the same
 * (diag) or chunks 0, 3 */
fwd_case cp_case(const char *name, bool diag, int k, int L, int accumulate)
{
	std::vector<int32_t> q = chunks(512, 4, 1, 2), kp = diag ? q : chunks(512, 4, 0, 3);
	fwd_case c{ name, 1, (int)q.size(), (int)kp.size(), 2, 1, k, 512, q, kp, accumulate, 0.0f, {} };
	c.window = L;
	if (accumulate) { /* the state: the other chunks' keys */
		std::vector<int32_t> other;
		for (int i = 0, j = 0; i < 512; i++) {
			if (j < (int)kp.size() && kp[j] == i)
				j++;
			else
				other.push_back(i);
		}
		c.kpos0 = other;
	}
	return c;
}

void test_window_forward(void)
{
	for (int L : { 0, 40, 63, 64, 100, 128, 200 }) { /* 8 warps: blocks of 128 queries */
		fwd_case c = win_case("window, T 300, GQA 4/2", 1, 300, 4, 2, 64, L);
		run_case<tc_bf16, 64, 8>(c, 5e-3);
	}
	for (int L : { 16, 64, 65 }) { /* 4 warps: blocks of 64 */
		fwd_case c = win_case("window, T 200", 2, 200, 2, 1, 64, L);
		run_case<tc_f16, 64, 4>(c, 1e-3);
	}
	for (int L : { 100, 128 }) {
		fwd_case c = win_case("window, T 300", 1, 300, 2, 1, 128, L);
		run_case<tc_f16, 128, 8>(c, 1e-3);
	}
	run_case<tc_bf16, 128, 4>(win_case("window, T 150, GQA 4/1", 1, 150, 4, 1, 128, 50), 5e-3);
	fwd_case s{ "block: strided positions", 1, 70, 90, 2, 1, 64, 400, iota(70, 5, 5), iota(90, 20, 3), 0, 0.0f, {} };
	s.window = 30;
	run_case<tc_bf16, 64, 8>(s, 5e-3);
	s.accumulate = 1;
	s.name = "block: strided positions, merged";
	run_case<tc_bf16, 64, 4>(s, 5e-3);
	run_case<tc_bf16, 64, 8>(cp_case("CP: diagonal block", true, 64, 100, 0), 5e-3);
	run_case<tc_bf16, 64, 8>(cp_case("CP: block of chunks 0, 3, merged", false, 64, 100, 1), 5e-3);
	run_case<tc_f16, 128, 8>(cp_case("CP: diagonal block, merged", true, 128, 70, 1), 1e-3);
	run_case<tc_f16, 128, 4>(cp_case("CP: block of chunks 0, 3", false, 128, 150, 0), 1e-3);
	fwd_case d = win_case("window, T 200, GQA 4/2", 1, 200, 4, 2, 64, 70);
	d.p = 0.1f;
	run_case<tc_bf16, 64, 8>(d, 5e-3);
}

void test_window_backward(void)
{
	/* not window 0: each row's P is 1 on its own key, dS = dP - Dr is 0 but
	 * for rounding, and dq, dk are noise on both sides */
	for (int L : { 1, 31, 40, 64, 100, 128, 200 }) {
		fwd_case c = win_case("window, T 300, GQA 4/2", 1, 300, 4, 2, 64, L);
		run_bwd_case<tc_bf16, 64>(c, 1e-2, 0);
	}
	for (int L : { 32, 50 }) {
		fwd_case c = win_case("window, T 150", 1, 150, 2, 1, 128, L);
		run_bwd_case<tc_f16, 128>(c, 2e-3, 0);
	}
	run_bwd_case<tc_bf16, 128>(win_case("window, T 130, GQA 4/1", 1, 130, 4, 1, 128, 64), 1e-2, 0);
	fwd_case s{ "block: strided positions", 1, 70, 90, 2, 1, 64, 400, iota(70, 5, 5), iota(90, 20, 3), 0, 0.0f, {} };
	s.window = 30;
	for (int nul : { 0, 3, 5, 6 })
		run_bwd_case<tc_bf16, 64>(s, 1e-2, nul);
	run_bwd_case<tc_bf16, 64>(cp_case("CP: diagonal block", true, 64, 100, 0), 1e-2, 0);
	run_bwd_case<tc_f16, 64>(cp_case("CP: block of chunks 0, 3", false, 64, 100, 0), 2e-3, 0);
	run_bwd_case<tc_bf16, 128>(cp_case("CP: block of chunks 0, 3", false, 128, 150, 0), 1e-2, 0);
	fwd_case d = win_case("window, T 200, GQA 4/2", 1, 200, 4, 2, 64, 70);
	d.p = 0.1f;
	run_bwd_case<tc_bf16, 64>(d, 1e-2, 0);
}

/* the wgmma kernels under a window: the same masks and skips, warpgroup products */
void test_window_wgmma(void)
{
	for (int L : { 40, 128 }) {
		run_case<tc_bf16, 64, 8, true>(win_case("window, T 300, GQA 4/2", 1, 300, 4, 2, 64, L), 5e-3);
		run_bwd_case<tc_bf16, 64, true>(win_case("window, T 300, GQA 4/2", 1, 300, 4, 2, 64, L), 1e-2, 0);
	}
	run_case<tc_f16, 128, 4, true>(win_case("window, T 150", 1, 150, 2, 1, 128, 50), 1e-3);
	run_bwd_case<tc_f16, 128, true>(win_case("window, T 150", 1, 150, 2, 1, 128, 50), 2e-3, 0);
	run_case<tc_bf16, 128, 8, true>(cp_case("CP: block of chunks 0, 3, merged", false, 128, 100, 1), 5e-3);
	fwd_case s{ "block: strided positions", 1, 70, 90, 2, 1, 128, 400, iota(70, 5, 5), iota(90, 20, 3), 0, 0.2f, {} };
	s.window = 30;
	run_bwd_case<tc_bf16, 128, true>(s, 1e-2, 0);
	run_bwd_case<tc_bf16, 64, true>(cp_case("CP: diagonal block", true, 64, 100, 0), 1e-2, 0);
}

/*
 * Document masks (ops.h's doc: a query sees only keys of its own document,
 * packed sequences). Each sample's documents start at the positions given
 * (its first at 0); ids count up, or with cycle > 0 repeat modulo cycle, so
 * that documents apart share an id (ids are compared, never ordered).
 * Boundaries inside a 64-key tile and on tile edges (64, 128), a one-token
 * document, grouped K/V, with and without windows and dropout; blocks of
 * ring attention (strided and chunked positions, merges) where whole
 * documents of queries see no key of the block (out 0, lse -inf).
 */
std::vector<int32_t> doc_ids(const std::vector<std::vector<int>> &starts, int S, int cycle)
{
	std::vector<int32_t> d;
	for (const auto &st : starts) {
		int id = -1;
		size_t j = 0;
		for (int p = 0; p < S; p++) {
			if (j < st.size() && st[j] == p) {
				id++;
				j++;
			}
			d.push_back(cycle > 0 ? id % cycle : id);
		}
	}
	return d;
}

/* self-attention on 0..T-1 with documents: two samples, boundaries mid-tile
 * and on tile edges (sample 1: a one-token document at 128) */
fwd_case doc_case(const char *name, int B, int T, int a, int g, int k, int L, int cycle)
{
	fwd_case c = win_case(name, B, T, a, g, k, L);
	std::vector<std::vector<int>> st = { { 0, 37, 64, 150 }, { 0, 1, 128, 129, 191 } };
	st.resize(B);
	c.doc = doc_ids(st, T, cycle);
	return c;
}

/* the strided block of context parallelism (queries 5..350, keys 20..287 of
 * S = 400): the documents from 290 and 330 hold queries but no key */
fwd_case doc_block_case(int k, int L, int accumulate)
{
	fwd_case c{ "documents: strided block", 1, 70, 90, 2, 1, k, 400, iota(70, 5, 5), iota(90, 20, 3),
		    accumulate, 0.0f, {} };
	c.window = L;
	c.doc = doc_ids({ { 0, 50, 128, 200, 290, 330 } }, 400, 0);
	return c;
}

/* CP rank 1 of 2 (chunks 1, 2 of 4 over S = 512) with documents across the
 * chunk edges */
fwd_case doc_cp_case(const char *name, bool diag, int k, int L, int accumulate)
{
	fwd_case c = cp_case(name, diag, k, L, accumulate);
	c.doc = doc_ids({ { 0, 100, 128, 200, 300, 384, 450 } }, 512, 3);
	return c;
}

void test_doc_forward(void)
{
	run_case<tc_bf16, 64, 8>(doc_case("documents, T 200, GQA 4/2", 2, 200, 4, 2, 64, -1, 0), 5e-3);
	run_case<tc_bf16, 64, 4>(doc_case("documents, T 200, GQA 4/2, ids repeat", 2, 200, 4, 2, 64, -1, 2), 5e-3);
	run_case<tc_f16, 128, 8>(doc_case("documents, T 200", 2, 200, 2, 1, 128, -1, 0), 1e-3);
	run_case<tc_bf16, 128, 4>(doc_case("documents, T 200, GQA 4/1", 1, 200, 4, 1, 128, 50, 0), 5e-3);
	run_case<tc_bf16, 64, 8>(doc_case("documents, T 200, GQA 4/2", 2, 200, 4, 2, 64, 70, 0), 5e-3);
	run_case<tc_bf16, 64, 8>(doc_block_case(64, -1, 0), 5e-3);
	run_case<tc_f16, 64, 4>(doc_block_case(64, 30, 1), 1e-3);
	run_case<tc_bf16, 128, 8>(doc_block_case(128, -1, 1), 5e-3);
	run_case<tc_bf16, 64, 8>(doc_cp_case("documents, CP: diagonal block", true, 64, -1, 0), 5e-3);
	run_case<tc_f16, 128, 4>(doc_cp_case("documents, CP: block of chunks 0, 3, merged", false, 128, -1, 1), 1e-3);
	fwd_case d = doc_case("documents, T 200, GQA 4/2", 2, 200, 4, 2, 64, -1, 0);
	d.p = 0.1f;
	run_case<tc_bf16, 64, 4>(d, 5e-3);
}

void test_doc_backward(void)
{
	run_bwd_case<tc_bf16, 64>(doc_case("documents, T 200, GQA 4/2", 2, 200, 4, 2, 64, -1, 0), 1e-2, 0);
	run_bwd_case<tc_bf16, 64>(doc_case("documents, T 200, GQA 4/2, ids repeat", 2, 200, 4, 2, 64, -1, 2), 1e-2, 0);
	run_bwd_case<tc_f16, 128>(doc_case("documents, T 200", 2, 200, 2, 1, 128, -1, 0), 2e-3, 0);
	run_bwd_case<tc_bf16, 128>(doc_case("documents, T 200, GQA 4/1", 1, 200, 4, 1, 128, 50, 0), 1e-2, 0);
	run_bwd_case<tc_bf16, 64>(doc_case("documents, T 200, GQA 4/2", 2, 200, 4, 2, 64, 70, 0), 1e-2, 0);
	for (int nul : { 0, 3, 5, 6 })
		run_bwd_case<tc_bf16, 64>(doc_block_case(64, -1, 0), 1e-2, nul);
	run_bwd_case<tc_f16, 128>(doc_block_case(128, 30, 0), 2e-3, 0);
	run_bwd_case<tc_bf16, 64>(doc_cp_case("documents, CP: diagonal block", true, 64, -1, 0), 1e-2, 0);
	run_bwd_case<tc_f16, 128>(doc_cp_case("documents, CP: block of chunks 0, 3", false, 128, -1, 0), 2e-3, 0);
	fwd_case d = doc_case("documents, T 200, GQA 4/2", 2, 200, 4, 2, 64, -1, 0);
	d.p = 0.1f;
	run_bwd_case<tc_bf16, 64>(d, 1e-2, 0);
}

/* the wgmma kernels with documents */
void test_doc_wgmma(void)
{
	run_case<tc_bf16, 64, 8, true>(doc_case("documents, T 200, GQA 4/2", 2, 200, 4, 2, 64, -1, 0), 5e-3);
	run_case<tc_f16, 128, 4, true>(doc_case("documents, T 200", 2, 200, 2, 1, 128, 70, 2), 1e-3);
	run_case<tc_bf16, 128, 8, true>(doc_block_case(128, -1, 1), 5e-3);
	run_bwd_case<tc_bf16, 64, true>(doc_case("documents, T 200, GQA 4/2", 2, 200, 4, 2, 64, -1, 0), 1e-2, 0);
	run_bwd_case<tc_f16, 128, true>(doc_case("documents, T 200", 2, 200, 2, 1, 128, 70, 2), 2e-3, 0);
	fwd_case b = doc_block_case(128, -1, 0);
	b.p = 0.2f;
	run_bwd_case<tc_bf16, 128, true>(b, 1e-2, 0);
}

} // namespace

int main(void)
{
	RUN(test_self_bf16_64);
	RUN(test_self_fp16_128);
	RUN(test_self_bf16_128_long);
	RUN(test_block_positions);
	RUN(test_detects_wrong_inputs);
	RUN(test_bwd_self);
	RUN(test_bwd_block);
	RUN(test_dropout);
	RUN(test_edges);
	RUN(test_wgmma_forward);
	RUN(test_wgmma_backward);
	RUN(test_window_forward);
	RUN(test_window_backward);
	RUN(test_window_wgmma);
	RUN(test_doc_forward);
	RUN(test_doc_backward);
	RUN(test_doc_wgmma);
	return test_summary();
}
