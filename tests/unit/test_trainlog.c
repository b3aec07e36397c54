/*
 * test_trainlog.c - train's log text against Python's own str.format with
 * the format specs of Megatron's training_log / evaluate_and_print_results,
 * for several value sets (optional fields on and off, big and tiny numbers,
 * NaN), and the timestamp and print_datetime shapes.
 */
#include "test.h"

#include <math.h>

#include "base/sbuf.h"
#include "train/trainlog.h"

static const char *g_dir;

/* The line without its " [timestamp]" prefix. */
static const char *after_stamp(const char *line)
{
	const char *p = strchr(line, ']');
	return p ? p + 1 : line;
}

static void test_iteration_lines(void)
{
	static const double mtp_sums[2] = { 32.4, 31.5 };
	struct trainlog_iter cases[] = {
		{ 1, 10000, 512, 0, 812.3456, 123.44, 1.5e-4, 512, 4.1234567, 1.0, 0.98765, NAN, 0, 0, false, false,
		  false, 0, 0, 0, 0, false, 0, 0, NULL, 0 },
		{ 100, 500000, 51200, 1024, 0.04, -1, NAN, 8, -1, 65536.0, NAN, 12.3456, 3, 1, false, false, false, 0, 0,
		  0, 0, false, 0, 0, NULL, 0 },
		{ 123456789, 123456789, 99999999999LL, 0, 1e6, 1e-3, 1e-12, 99999, 1e-9, 4294967296.0, 1234.5678,
		  NAN, 999, 1000, false, false, false, 0, 0, 0, 0, false, 0, 0, NULL, 0 },
		/* MoE: Megatron's loss names after lm loss, in its order */
		{ 7, 20, 28, 0, 61.3, -1, 1.872724e-3, 4, 10.80476, 1.0, 1.3, NAN, 0, 0, true, true, true, 0.0, 1.19,
		  1.93684, 0, false, 0, 0, NULL, 0 },
		/* multi-token prediction: "mtp_K loss" after the MoE losses, the sums over the advanced iterations */
		{ 7, 20, 28, 0, 61.3, -1, 1.872724e-3, 4, 10.80476, 1.0, 1.3, NAN, 0, 0, true, true, false, 0.0, 1.19,
		  0, 0, false, 0, 2, mtp_sums, 3 },
	};
	int n = (int)(sizeof(cases) / sizeof(cases[0]));
	/* Python: the same fields through Megatron's format specs */
	char *want = test_python(g_dir,
		"import math\n"
		"cases = [\n"
		" (1, 10000, 512, 0, 812.3456, 123.44, 1.5e-4, 512, 4.1234567, 1.0, 0.98765, None, 0, 0),\n"
		" (100, 500000, 51200, 1024, 0.04, None, None, 8, None, 65536.0, None, 12.3456, 3, 1),\n"
		" (123456789, 123456789, 99999999999, 0, 1e6, 1e-3, 1e-12, 99999, 1e-9, 4294967296.0, 1234.5678, None, 999, 1000),\n"
		" (7, 20, 28, 0, 61.3, None, 1.872724e-3, 4, 10.80476, 1.0, 1.3, None, 0, 0,\n"
		"  {'load_balancing_loss': 0.0, 'seq_load_balancing_loss': 1.19, 'z_loss': 1.93684}),\n"
		" (7, 20, 28, 0, 61.3, None, 1.872724e-3, 4, 10.80476, 1.0, 1.3, None, 0, 0,\n"
		"  {'load_balancing_loss': 0.0, 'seq_load_balancing_loss': 1.19, 'mtp_1 loss': 32.4 / 3,\n"
		"   'mtp_2 loss': 31.5 / 3}),\n"
		"]\n",
		"for (it, ti, cs, sk, ms, tf, lr, bs, loss, scale, gn, pn, ski, nan, *moe) in cases:\n"
		"    s = ' iteration {:8d}/{:8d} |'.format(it, ti)\n"
		"    s += ' consumed samples: {:12d} |'.format(cs)\n"
		"    if sk > 0: s += ' skipped samples: {:12d} |'.format(sk)\n"
		"    s += ' elapsed time per iteration (ms): {:.1f} |'.format(ms)\n"
		"    if tf is not None: s += f' throughput per GPU (TFLOP/s/GPU): {tf:.1f} |'\n"
		"    if lr is not None: s += f' learning rate: {lr:.6E} |'\n"
		"    s += f' global batch size: {bs:5d} |'\n"
		"    if loss is not None and loss >= 0.0: s += ' {}: {:.6E} |'.format('lm loss', loss)\n"
		"    for k, v in (moe[0].items() if moe else []): s += ' {}: {:.6E} |'.format(k, v)\n"
		"    s += f' loss scale: {scale:.1f} |'\n"
		"    if gn is not None: s += f' grad norm: {gn:.3f} |'\n"
		"    if pn is not None: s += f' params norm: {pn:.3f} |'\n"
		"    s += ' number of skipped iterations: {:3d} |'.format(ski)\n"
		"    s += ' number of nan iterations: {:3d} |'.format(nan)\n"
		"    print(s)\n");
	CHECK(want != NULL);
	if (!want)
		return;
	char *line = want;
	for (int i = 0; i < n; i++) {
		char *nl = strchr(line, '\n');
		CHECK(nl != NULL);
		if (!nl)
			break;
		*nl = 0;
		struct sbuf sb = SBUF_INIT;
		trainlog_iteration_line(&sb, &cases[i]);
		CHECK_STR(after_stamp(sb.buf), line);
		/* " [YYYY-MM-DD HH:MM:SS.ffffff]" */
		CHECK(sb.len > 29 && sb.buf[0] == ' ' && sb.buf[1] == '[' && sb.buf[12] == ' ' && sb.buf[21] == '.' &&
		      sb.buf[28] == ']');
		sbuf_release(&sb);
		line = nl + 1;
	}
	free(want);
}

/* megac's one addition, after Megatron's fields: the time to finish. */
static void test_eta(void)
{
	struct trainlog_iter it = { .iteration = 10, .train_iters = 100, .elapsed_ms = 41.4, .lm_loss = -1,
				    .tflops = -1, .learning_rate = NAN, .grad_norm = NAN, .params_norm = NAN,
				    .eta_s = 3723.4 };
	struct sbuf sb = SBUF_INIT;
	trainlog_iteration_line(&sb, &it);
	const char *tail = " number of nan iterations:   0 | time to finish: 1:02:03 |";
	CHECK(sb.len > strlen(tail) && !strcmp(sb.buf + sb.len - strlen(tail), tail));
	sbuf_reset(&sb);
	/* --log-num-zeros-in-grad: after the grad norm, as Megatron's f'{int}' */
	it.grad_norm = 1.25;
	it.num_zeros_on = true;
	it.num_zeros = 1234;
	trainlog_iteration_line(&sb, &it);
	CHECK(strstr(sb.buf, " grad norm: 1.250 | num zeros: 1234 | number of skipped") != NULL);
	sbuf_reset(&sb);
	it.num_zeros = NAN; /* a skipped iteration */
	trainlog_iteration_line(&sb, &it);
	CHECK(!strstr(sb.buf, "num zeros"));
	sbuf_reset(&sb);
	it.eta_s = 0; /* the last iteration: nothing */
	trainlog_iteration_line(&sb, &it);
	CHECK(!strstr(sb.buf, "time to finish"));
	sbuf_release(&sb);
}

static void test_eval_and_memory_lines(void)
{
	double losses[] = { 3.456789, 25.0, 0.0, NAN };
	char *want = test_python(g_dir, "import math\nlosses = [3.456789, 25.0, 0.0, float('nan')]\n",
		"for v in losses:\n"
		"    s = ' validation loss at {} | '.format('iteration 1000')\n"
		"    s += '{} value: {:.6E} | '.format('lm loss', v)\n"
		"    s += '{} PPL: {:.6E} | '.format('lm loss', math.exp(min(20, v)))\n"
		"    print('-' * (len(s) + 1)); print(s); print('-' * (len(s) + 1))\n"
		"print('[Rank 0] (after 7 iterations) memory (MB) | allocated: {:.2f} | max allocated: {:.2f} | '\n"
		"      'reserved: {:.2f} | max reserved: {:.2f}'.format(123456789 / 2**20, 987654321 / 2**20,\n"
		"      123456789 / 2**20, 987654321 / 2**20))\n");
	CHECK(want != NULL);
	if (!want)
		return;
	struct sbuf got = SBUF_INIT;
	for (size_t i = 0; i < sizeof(losses) / sizeof(losses[0]); i++)
		trainlog_eval_lines(&got, "iteration 1000", losses[i]);
	trainlog_memory_line(&got, 0, 7, 123456789, 987654321);
	sbuf_addch(&got, '\n');
	/* Python prints nan as "NAN" under {:.6E} and C's %E prints "NAN" too */
	CHECK_STR(got.buf, want);
	sbuf_release(&got);
	free(want);

	struct sbuf dt = SBUF_INIT;
	trainlog_datetime(&dt, "exiting program at iteration 3");
	CHECK(!strncmp(dt.buf, "[exiting program at iteration 3] datetime: ", 43));
	CHECK(dt.len == 43 + 26 + 1 && dt.buf[dt.len - 1] == ' ');
	sbuf_release(&dt);
}

int main(void)
{
	g_dir = test_tmpdir("trainlog");
	RUN(test_iteration_lines);
	RUN(test_eta);
	RUN(test_eval_and_memory_lines);
	return test_summary();
}
