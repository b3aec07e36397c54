/*
 * profile.h - where a training step's time goes, op by op (the
 * measurements order the speed work). kops_profile_wrap() gives an op table
 * whose every op calls the wrapped table's and times it: on a GPU it waits
 * for the device before and after each op (a 4-byte copy back), so each op's
 * time is its own, at the price of a gap per op; then calls, milliseconds per
 * iteration, share of the total, and for the ops whose work is counted
 * TFLOP/s (linear layers, attention) or GB/s (the elementwise ones, the
 * fewest bytes they must move).
 *
 * train wraps its table when MEGAC_PROFILE_OPS is set (not "0"), resets the
 * counts after the first iteration and prints the table at the end.
 *
 * One profile per process: the wrappers are plain function pointers of
 * struct kops, so their state is this module's (set once by wrap, counted
 * by the one thread that runs the ops).
 */
#ifndef MEGAC_KERNELS_PROFILE_H
#define MEGAC_KERNELS_PROFILE_H

#include <stdint.h>
#include <stdio.h>

#include "ops.h"

/* the wrapping table (one per process: a second call returns the first's) */
const struct kops *kops_profile_wrap(const struct kops *base);

/* whether a table is being profiled */
int kops_profile_active(void);

/* forget what was counted so far (train: after the first iteration, so
 * set-up and first-call work stay out) */
void kops_profile_reset(void);

/* the table, per iteration over `iterations` since the last reset, headed
 * with the rank that ran them */
void kops_profile_report(FILE *f, int64_t iterations, int rank);

#endif
