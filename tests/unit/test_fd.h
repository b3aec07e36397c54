/*
 * test_fd.h - finite-difference gradient checks for the op tests
 * (test_ops.c, test_ssm.c): a loss L = sum(out * R) for a fixed random R,
 * recomputed by the op's forward after each nudge of an input, against
 * the backward's gradient. Include after test.h.
 */
#ifndef MEGAC_TEST_FD_H
#define MEGAC_TEST_FD_H

#include <math.h>
#include <stddef.h>
#include <stdio.h>

struct fd {
	void (*forward)(void *ctx); /* recomputes out from the current inputs */
	void *ctx;
	const float *out, *R;
	size_t nout;
};

static inline double fd_loss(const struct fd *f)
{
	f->forward(f->ctx);
	double L = 0.0;
	for (size_t i = 0; i < f->nout; i++)
		L += (double)f->out[i] * f->R[i];
	return L;
}

/* ||g_fd - grad|| / ||g_fd|| for dL/dx[0..n), central differences with
 * step h (the step actually taken, after fp32 rounding of x +- h). */
static inline double fd_relerr(const struct fd *f, float *x, size_t n, const float *grad, float h)
{
	double d2 = 0.0, g2 = 0.0;
	for (size_t i = 0; i < n; i++) {
		const float x0 = x[i];
		x[i] = x0 + h;
		const double xp = x[i], Lp = fd_loss(f);
		x[i] = x0 - h;
		const double xm = x[i], Lm = fd_loss(f);
		x[i] = x0;
		const double g = (Lp - Lm) / (xp - xm);
		d2 += (g - grad[i]) * (g - grad[i]);
		g2 += g * g;
	}
	f->forward(f->ctx);
	return sqrt(d2 / (g2 > 1e-30 ? g2 : 1e-30));
}

#define FD_TOL 1e-2
#define CHECK_GRAD(f, x, n, grad, h)                                                              \
	do {                                                                                      \
		double e_ = fd_relerr(f, x, n, grad, h);                                          \
		if (!(e_ < FD_TOL)) {                                                             \
			printf("#   %s:%d: %s: relative error %.3g against finite differences\n", \
			       __FILE__, __LINE__, #grad, e_);                                     \
			t_checks_failed++;                                                        \
		}                                                                                 \
	} while (0)

#endif
