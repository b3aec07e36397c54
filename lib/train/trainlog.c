/*
 * trainlog.c - see trainlog.h. Python's format specs map onto printf's:
 * {:8d} -> %8lld, {:.6E} -> %.6E (both print at least two exponent
 * digits), {:.1f} -> %.1f.
 */
#include "train/trainlog.h"

#include <math.h>
#include <stdio.h>
#include <sys/time.h>
#include <time.h>

void trainlog_now(char out[TRAINLOG_TIME_MAX])
{
	struct timeval tv;
	struct tm tm;
	char when[32];
	gettimeofday(&tv, NULL);
	localtime_r(&tv.tv_sec, &tm);
	strftime(when, sizeof(when), "%Y-%m-%d %H:%M:%S", &tm);
	snprintf(out, TRAINLOG_TIME_MAX, "%s.%06ld", when, (long)tv.tv_usec);
}

void trainlog_datetime(struct sbuf *out, const char *what)
{
	char now[TRAINLOG_TIME_MAX];
	trainlog_now(now);
	sbuf_addf(out, "[%s] datetime: %s ", what, now);
}

void trainlog_iteration_line(struct sbuf *out, const struct trainlog_iter *it)
{
	char now[TRAINLOG_TIME_MAX];
	trainlog_now(now);
	sbuf_addf(out, " [%s]", now);
	sbuf_addf(out, " iteration %8lld/%8lld |", (long long)it->iteration, (long long)it->train_iters);
	sbuf_addf(out, " consumed samples: %12lld |", (long long)it->consumed_samples);
	if (it->skipped_samples > 0)
		sbuf_addf(out, " skipped samples: %12lld |", (long long)it->skipped_samples);
	sbuf_addf(out, " elapsed time per iteration (ms): %.1f |", it->elapsed_ms);
	if (it->tflops >= 0)
		sbuf_addf(out, " throughput per GPU (TFLOP/s/GPU): %.1f |", it->tflops);
	if (!isnan(it->learning_rate))
		sbuf_addf(out, " learning rate: %.6E |", it->learning_rate);
	sbuf_addf(out, " global batch size: %5lld |", (long long)it->global_batch_size);
	if (it->lm_loss >= 0.0)
		sbuf_addf(out, " lm loss: %.6E |", it->lm_loss);
	if (it->moe_lb_on)
		sbuf_addf(out, " load_balancing_loss: %.6E |", it->moe_lb);
	if (it->moe_seq_on)
		sbuf_addf(out, " seq_load_balancing_loss: %.6E |", it->moe_seq_lb);
	if (it->moe_z_on)
		sbuf_addf(out, " z_loss: %.6E |", it->moe_z);
	for (int k = 0; it->mtp_div > 0 && k < it->mtp; k++)
		sbuf_addf(out, " mtp_%d loss: %.6E |", k + 1, it->mtp_loss[k] / it->mtp_div);
	sbuf_addf(out, " loss scale: %.1f |", it->loss_scale);
	if (!isnan(it->grad_norm))
		sbuf_addf(out, " grad norm: %.3f |", it->grad_norm);
	if (it->num_zeros_on && !isnan(it->num_zeros))
		sbuf_addf(out, " num zeros: %lld |", (long long)it->num_zeros);
	if (!isnan(it->params_norm))
		sbuf_addf(out, " params norm: %.3f |", it->params_norm);
	sbuf_addf(out, " number of skipped iterations: %3d |", it->skipped_iters);
	sbuf_addf(out, " number of nan iterations: %3d |", it->nan_iters);
	if (it->eta_s > 0) {
		long long s = (long long)(it->eta_s + 0.5);
		sbuf_addf(out, " time to finish: %lld:%02lld:%02lld |", s / 3600, s / 60 % 60, s % 60);
	}
}

void trainlog_eval_lines(struct sbuf *out, const char *prefix, double lm_loss)
{
	struct sbuf text = SBUF_INIT;
	sbuf_addf(&text, " validation loss at %s | ", prefix);
	sbuf_addf(&text, "lm loss value: %.6E | ", lm_loss);
	sbuf_addf(&text, "lm loss PPL: %.6E | ", exp(fmin(20.0, lm_loss)));
	size_t dashes = text.len + 1;
	for (size_t i = 0; i < dashes; i++)
		sbuf_addch(out, '-');
	sbuf_addch(out, '\n');
	sbuf_addstr(out, text.buf);
	sbuf_addch(out, '\n');
	for (size_t i = 0; i < dashes; i++)
		sbuf_addch(out, '-');
	sbuf_addch(out, '\n');
	sbuf_release(&text);
}

void trainlog_memory_split_line(struct sbuf *out, int rank, const struct trainlog_mem_split *s)
{
	double mb = 1024.0 * 1024.0, state = (double)(s->params + s->grads + s->optimizer);
	double rest = s->peak > state ? (double)s->peak - state : 0;
	sbuf_addf(out,
		  "[Rank %d] memory split (MB) | parameters (%s): %.2f | gradients (fp32): %.2f | optimizer state: %.2f "
		  "| activations and workspaces: %.2f | bytes per parameter before activations: %.3f",
		  rank, s->dtype, s->params / mb, s->grads / mb, s->optimizer / mb, rest / mb,
		  s->nparams ? state / (double)s->nparams : 0.0);
	if (s->sharding)
		sbuf_addf(out, " | of the rest, Megatron-FSDP's buffers: %.2f (%.3f bytes per parameter)", s->sharding / mb,
			  s->nparams ? (double)s->sharding / (double)s->nparams : 0.0);
}

void trainlog_memory_line(struct sbuf *out, int rank, int64_t iteration, size_t allocated, size_t max_allocated)
{
	/* megac's allocator caches nothing, so reserved equals allocated. */
	double mb = 1024.0 * 1024.0;
	sbuf_addf(out,
		  "[Rank %d] (after %lld iterations) memory (MB) | allocated: %.2f | max allocated: %.2f | "
		  "reserved: %.2f | max reserved: %.2f",
		  rank, (long long)iteration, allocated / mb, max_allocated / mb, allocated / mb,
		  max_allocated / mb);
}
