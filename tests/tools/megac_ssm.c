/*
 * megac_ssm.c - a test tool: the CPU backend's Mamba-2 mixer ops
 * (ops.h, "Mamba-2 (SSD) mixer") on .npy files, for the PyTorch reference
 * of tests/prog/ssm_ops.sh (tests/prog/py/ssm_ref.py).
 *
 *   megac_ssm DIR CHUNK
 *	reads DIR's float32 inputs (shapes from the files):
 *	  conv:  conv_x [B,T,C], conv_w [C,W], conv_b [C], conv_dout [B,T,C]
 *	  scan:  x [B,T,H,P], dt [B,T,H], dt_bias [H], A_log [H], Bm [B,T,G,N],
 *	         Cm [B,T,G,N], D [H], state_in [B,H,P,N], dy [B,T,H,P],
 *	         dstate_out [B,H,P,N]
 *	  norm:  norm_y [R,Cn], norm_z [R,Cn], norm_w [Cn], norm_dout [R,Cn],
 *	         norm_groups [1] (float, the group count), norm_eps [1]
 *	and writes each op's outputs and gradients as DIR/c_<name>.npy:
 *	conv_out, conv_dx, conv_dw, conv_db; y, state_out, dx, ddt, ddt_bias,
 *	dA_log, dBm, dCm, dD, dstate_in; norm_out, norm_dy, norm_dz, norm_dw.
 *	Parameter grads start from zero (the ops accumulate into them).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/error.h"
#include "base/xalloc.h"
#include "data/npy.h"
#include "kernels/ops.h"

static const char *dir;

struct arr {
	float *v;
	int ndim;
	uint64_t shape[8];
	size_t n;
};

/* DIR/name.npy, float32 with ndim dimensions, copied out */
static struct arr load(const char *name, int ndim)
{
	char path[4096];
	snprintf(path, sizeof path, "%s/%s.npy", dir, name);
	struct npy_array a;
	if (npy_load(path, &a))
		die("cannot load '%s'", path);
	if (a.dtype != NPY_F4 || a.ndim != ndim)
		die("'%s': want float32 with %d dimensions", path, ndim);
	struct arr r = { .ndim = ndim, .n = a.count };
	memcpy(r.shape, a.shape, (size_t)ndim * sizeof(uint64_t));
	r.v = xmalloc((a.count ? a.count : 1) * sizeof(float));
	memcpy(r.v, a.data, a.count * sizeof(float));
	npy_close(&a);
	return r;
}

static void save(const char *name, const float *v, int ndim, const uint64_t *shape)
{
	char path[4096];
	snprintf(path, sizeof path, "%s/c_%s.npy", dir, name);
	if (npy_save(path, NPY_F4, ndim, shape, v))
		die("cannot write '%s'", path);
}

static void same_shape(const struct arr *a, const struct arr *b, const char *what)
{
	if (a->ndim != b->ndim || memcmp(a->shape, b->shape, (size_t)a->ndim * sizeof(uint64_t)))
		die("%s: shapes differ", what);
}

static void run_conv(const struct kops *k)
{
	struct arr x = load("conv_x", 3), w = load("conv_w", 2), b = load("conv_b", 1), d = load("conv_dout", 3);
	const int B = (int)x.shape[0], T = (int)x.shape[1], C = (int)x.shape[2], W = (int)w.shape[1];
	if ((int)w.shape[0] != C || (int)b.shape[0] != C)
		die("conv: weight or bias does not match %d channels", C);
	same_shape(&x, &d, "conv_dout");
	float *out = xcalloc(x.n, sizeof(float)), *dx = xcalloc(x.n, sizeof(float));
	float *dw = xcalloc(w.n, sizeof(float)), *db = xcalloc(b.n, sizeof(float));
	k->ssm_conv_forward(out, x.v, NULL, w.v, b.v, B, T, C, W);
	k->ssm_conv_backward(dx, dw, db, d.v, x.v, NULL, w.v, b.v, B, T, C, W);
	save("conv_out", out, 3, x.shape);
	save("conv_dx", dx, 3, x.shape);
	save("conv_dw", dw, 2, w.shape);
	save("conv_db", db, 1, b.shape);
	free(x.v), free(w.v), free(b.v), free(d.v), free(out), free(dx), free(dw), free(db);
}

static void run_scan(const struct kops *k, int chunk)
{
	struct arr x = load("x", 4), dt = load("dt", 3), dtb = load("dt_bias", 1), Al = load("A_log", 1);
	struct arr Bm = load("Bm", 4), Cm = load("Cm", 4), D = load("D", 1), s0 = load("state_in", 4);
	struct arr dy = load("dy", 4), ds = load("dstate_out", 4);
	const int B = (int)x.shape[0], T = (int)x.shape[1], H = (int)x.shape[2], P = (int)x.shape[3];
	const int G = (int)Bm.shape[2], N = (int)Bm.shape[3];
	same_shape(&x, &dy, "dy");
	same_shape(&Bm, &Cm, "Cm");
	same_shape(&s0, &ds, "dstate_out");
	if ((int)dt.shape[2] != H || (int)s0.shape[1] != H || (int)s0.shape[2] != P || (int)s0.shape[3] != N ||
	    (int)dtb.n != H || (int)Al.n != H || (int)D.n != H)
		die("scan: inputs of inconsistent shapes");
	float *y = xcalloc(x.n, sizeof(float)), *s1 = xcalloc(s0.n, sizeof(float));
	float *dx = xcalloc(x.n, sizeof(float)), *ddt = xcalloc(dt.n, sizeof(float));
	float *ddtb = xcalloc(H, sizeof(float)), *dAl = xcalloc(H, sizeof(float)), *dD = xcalloc(H, sizeof(float));
	float *dB = xcalloc(Bm.n, sizeof(float)), *dC = xcalloc(Cm.n, sizeof(float));
	float *ds0 = xcalloc(s0.n, sizeof(float));
	k->ssd_scan_forward(y, s1, x.v, dt.v, dtb.v, Al.v, Bm.v, Cm.v, D.v, s0.v, B, T, H, P, G, N, chunk);
	k->ssd_scan_backward(dx, ddt, ddtb, dAl, dB, dC, dD, ds0, dy.v, ds.v, x.v, dt.v, dtb.v, Al.v, Bm.v, Cm.v, D.v,
			     s0.v, B, T, H, P, G, N, chunk);
	save("y", y, 4, x.shape);
	save("state_out", s1, 4, s0.shape);
	save("dx", dx, 4, x.shape);
	save("ddt", ddt, 3, dt.shape);
	save("ddt_bias", ddtb, 1, dtb.shape);
	save("dA_log", dAl, 1, Al.shape);
	save("dBm", dB, 4, Bm.shape);
	save("dCm", dC, 4, Cm.shape);
	save("dD", dD, 1, D.shape);
	save("dstate_in", ds0, 4, s0.shape);
	struct arr *all[] = { &x, &dt, &dtb, &Al, &Bm, &Cm, &D, &s0, &dy, &ds };
	for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
		free(all[i]->v);
	free(y), free(s1), free(dx), free(ddt), free(ddtb), free(dAl), free(dD), free(dB), free(dC), free(ds0);
}

static void run_norm(const struct kops *k)
{
	struct arr y = load("norm_y", 2), z = load("norm_z", 2), w = load("norm_w", 1), d = load("norm_dout", 2);
	struct arr ng = load("norm_groups", 1), eps = load("norm_eps", 1);
	const int R = (int)y.shape[0], C = (int)y.shape[1], groups = (int)ng.v[0];
	same_shape(&y, &z, "norm_z");
	same_shape(&y, &d, "norm_dout");
	if ((int)w.n != C)
		die("norm: weight does not match %d channels", C);
	float *out = xcalloc(y.n, sizeof(float)), *rstd = xcalloc((size_t)R * groups, sizeof(float));
	float *dy = xcalloc(y.n, sizeof(float)), *dz = xcalloc(y.n, sizeof(float)), *dw = xcalloc(C, sizeof(float));
	k->gated_rmsnorm_forward(out, rstd, y.v, z.v, w.v, R, C, groups, eps.v[0]);
	k->gated_rmsnorm_backward(dy, dz, dw, d.v, y.v, z.v, w.v, rstd, R, C, groups);
	save("norm_out", out, 2, y.shape);
	save("norm_dy", dy, 2, y.shape);
	save("norm_dz", dz, 2, y.shape);
	save("norm_dw", dw, 1, w.shape);
	free(y.v), free(z.v), free(w.v), free(d.v), free(ng.v), free(eps.v);
	free(out), free(rstd), free(dy), free(dz), free(dw);
}

int main(int argc, char **argv)
{
	log_init("megac_ssm", 0, 1);
	if (argc != 3)
		die("usage: megac_ssm DIR CHUNK");
	dir = argv[1];
	const int chunk = atoi(argv[2]);
	if (chunk < 1)
		die("CHUNK must be a positive number, not '%s'", argv[2]);
	const struct kops *k = kops_cpu();
	run_conv(k);
	run_scan(k, chunk);
	run_norm(k);
	return 0;
}
