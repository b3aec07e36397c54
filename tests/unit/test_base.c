/*
 * test_base.c - lib/base: the flag parser over the shared table, atomic
 * files, sbuf, edit distance, and the device probe.
 */
#include "base/args.h"
#include "base/error.h"
#include "base/sbuf.h"
#include "base/tempfile.h"
#include "kernels/device.h"
#include "test.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <sys/wait.h>

static const struct prog_info pp = { "preprocess_data", PROG_PREPROCESS, "summary", "example", 0 };


static void test_defaults_and_values(void)
{
	struct args a;
	char *msg;
	char *argv[] = { "preprocess_data", "--input", "a.jsonl", "b.jsonl.gz", "-", "--output-prefix=out/x",
			 "--tokenizer-type", "GPT2BPETokenizer", "--workers", "4", "--append-eod",
			 "--json-keys", "text", "title", NULL };
	CHECK_INT(parse_capture(&a, &pp, argv, &msg), 0);
	CHECK_INT(a.input.n, 3);
	CHECK_STR(a.input.v[2], "-");
	CHECK_STR(a.output_prefix, "out/x");
	CHECK_INT(a.workers, 4);
	CHECK(a.append_eod);
	CHECK_INT(a.json_keys.n, 2);
	CHECK_STR(a.json_keys.v[1], "title");
	CHECK_INT(a.log_interval, 1000);           /* Megatron's default */
	CHECK_INT(a.workers_to_check.n, 3);        /* default list "16 32 64" */
	CHECK_INT(a.workers_to_check.v[2], 64);
	CHECK(a.pad_vocab_size);                   /* store_false default true */
	CHECK_STR(a.lang, "english");
	CHECK(args_given(&a, "--workers"));
	CHECK(!args_given(&a, "--log-interval"));
	args_free(&a);
	free(msg);
}

static void test_last_wins_and_negative(void)
{
	struct args a;
	char *msg;
	char *argv[] = { "p", "--input", "x", "--output-prefix", "o", "--tokenizer-type", "NullTokenizer",
			 "--workers", "2", "--workers", "3", "--null-tokenizer-eod-id", "-5", NULL };
	CHECK_INT(parse_capture(&a, &pp, argv, &msg), 0);
	CHECK_INT(a.workers, 3);
	CHECK_INT(a.null_tokenizer_eod_id, -5);
	args_free(&a);
	free(msg);
}

static void test_unknown_flag_suggests(void)
{
	struct args a;
	char *msg;
	char *argv[] = { "p", "--tokenizer-typ", "GPT2BPETokenizer", NULL };
	CHECK_INT(parse_capture(&a, &pp, argv, &msg), -1);
	CHECK(msg && strstr(msg, "unknown flag '--tokenizer-typ'"));
	CHECK(msg && strstr(msg, "did you mean '--tokenizer-type'"));
	args_free(&a);
	free(msg);
}

static void test_bad_values(void)
{
	struct args a;
	char *msg;
	char *argv1[] = { "p", "--workers", "four", NULL };
	CHECK_INT(parse_capture(&a, &pp, argv1, &msg), -1);
	CHECK(msg && strstr(msg, "--workers: expected an integer, got 'four'"));
	args_free(&a);
	free(msg);

	char *argv2[] = { "p", "--tokenizer-type", "GPT2BPETokenizr", NULL };
	CHECK_INT(parse_capture(&a, &pp, argv2, &msg), -1);
	CHECK(msg && strstr(msg, "did you mean 'GPT2BPETokenizer'"));
	args_free(&a);
	free(msg);

	char *argv3[] = { "p", "--append-eod=yes", NULL };
	CHECK_INT(parse_capture(&a, &pp, argv3, &msg), -1);
	CHECK(msg && strstr(msg, "takes no value"));
	args_free(&a);
	free(msg);

	char *argv4[] = { "p", "--output-prefix", NULL };
	CHECK_INT(parse_capture(&a, &pp, argv4, &msg), -1);
	CHECK(msg && strstr(msg, "--output-prefix needs a value"));
	args_free(&a);
	free(msg);

	char *argv5[] = { "p", "stray", NULL };
	CHECK_INT(parse_capture(&a, &pp, argv5, &msg), -1);
	CHECK(msg && strstr(msg, "unexpected argument 'stray'"));
	args_free(&a);
	free(msg);
}

static void test_required_unsupported_other(void)
{
	struct args a;
	char *msg;
	char *argv1[] = { "p", "--input", "x", "--tokenizer-type", "NullTokenizer", NULL };
	CHECK_INT(parse_capture(&a, &pp, argv1, &msg), -1);
	CHECK(msg && strstr(msg, "missing required flag --output-prefix"));
	args_free(&a);
	free(msg);

	char *argv2[] = { "p", "--split-sentences", NULL };
	CHECK_INT(parse_capture(&a, &pp, argv2, &msg), -1);
	CHECK(msg && strstr(msg, "Megatron flag that megac does not support"));
	args_free(&a);
	free(msg);

	char *argv3[] = { "p", "--multimodal", NULL };
	CHECK_INT(parse_capture(&a, &pp, argv3, &msg), -1);
	CHECK(msg && strstr(msg, "belongs to merge_datasets"));
	args_free(&a);
	free(msg);
}

static void test_help(void)
{
	struct args a;
	char *msg;
	struct test_capture c;
	test_capture_begin(&c, 1);
	char *argv[] = { "p", "--help", NULL };
	int r = parse_capture(&a, &pp, argv, &msg);
	char *out = test_capture_end(&c);
	CHECK_INT(r, 1);
	CHECK(out && strstr(out, "--log-interval N"));
	CHECK(out && strstr(out, "(default: 1000)"));
	CHECK(out && strstr(out, "--input PATH..."));
	CHECK(out && !strstr(out, "--multimodal")); /* merge_datasets only */
	free(out);
	free(msg);
	args_free(&a);
}

static void test_edit_distance(void)
{
	CHECK_INT(edit_distance("kitten", "sitting"), 3);
	CHECK_INT(edit_distance("", "abc"), 3);
	CHECK_INT(edit_distance("same", "same"), 0);
}

static void test_afile_commit_and_abort(void)
{
	char *dir = test_tmpdir("afile");
	char path[4200];
	snprintf(path, sizeof(path), "%s/out.txt", dir);
	struct afile af;
	CHECK_INT(afile_open(&af, path), 0);
	fputs("hello", af.fp);
	CHECK(access(path, F_OK) != 0); /* invisible until committed */
	CHECK_INT(afile_commit(&af), 0);
	size_t n;
	char *s = test_read_file(path, &n);
	CHECK_STR(s, "hello");
	free(s);

	CHECK_INT(afile_open(&af, path), 0);
	fputs("other", af.fp);
	afile_abort(&af);
	s = test_read_file(path, &n);
	CHECK_STR(s, "hello"); /* the old file is untouched */
	free(s);
	char cmd[4400];
	snprintf(cmd, sizeof(cmd), "test $(ls -A '%s' | wc -l) -eq 1", dir);
	CHECK_INT(system(cmd), 0); /* no temporary left */
	free(dir);
}

/* A process that dies half-way leaves no temporary file behind. */
static void test_afile_die_cleans_up(void)
{
	char *dir = test_tmpdir("afile_die");
	char path[4200];
	snprintf(path, sizeof(path), "%s/out.bin", dir);
	pid_t pid = fork();
	if (pid == 0) {
		int saved = open("/dev/null", O_WRONLY);
		dup2(saved, 2);
		struct afile af;
		if (afile_open(&af, path) < 0)
			_exit(3);
		fputs("partial", af.fp);
		fflush(af.fp);
		die("simulated failure");
	}
	int st;
	waitpid(pid, &st, 0);
	CHECK(WIFEXITED(st) && WEXITSTATUS(st) == DIE_EXIT_CODE);
	char cmd[4400];
	snprintf(cmd, sizeof(cmd), "test -z \"$(ls -A '%s')\"", dir);
	CHECK_INT(system(cmd), 0);
	free(dir);
}

static void test_sbuf(void)
{
	struct sbuf sb = SBUF_INIT;
	sbuf_addstr(&sb, "a");
	sbuf_add(&sb, "\0b", 2);
	sbuf_addf(&sb, "%d", 42);
	CHECK_INT(sb.len, 5);
	CHECK(!memcmp(sb.buf, "a\0b42", 5));
	CHECK_INT(sb.buf[5], 0);
	sbuf_release(&sb);
	/* a buffer nothing was added to is "" once it has memory, detached or grown */
	char *empty = sbuf_detach(&sb, NULL);
	CHECK_STR(empty, "");
	free(empty);
	sbuf_grow(&sb, 100);
	CHECK_STR(sb.buf, "");
	sbuf_release(&sb);
}

static void test_device_probe(void)
{
	char buf[128];
	int n = device_cuda_count();
	CHECK(n >= 0);
	if (!device_cuda_built())
		CHECK_INT(n, 0);
	if (access("/dev/nvidiactl", F_OK) != 0)
		CHECK_INT(n, 0); /* no driver node: the probe must say "no GPU", not crash */
	CHECK(strlen(device_describe(buf, sizeof(buf))) > 0);
}

/* log_capture: the first error's text lands in the buffer, nothing reaches
 * stderr, and printing resumes afterwards. */
static void test_log_capture(void)
{
	char *dir = test_tmpdir("log_capture");
	char path[4200], why[64];
	snprintf(path, sizeof(path), "%s/stderr", dir);
	int saved = dup(2), fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
	CHECK(saved >= 0 && fd >= 0);
	dup2(fd, 2);
	log_capture(why, sizeof(why));
	CHECK_INT(error("--tensor-model-parallel-size %d does not divide %d heads", 3, 4), -1);
	CHECK_INT(error("a second reason"), -1);
	warning("a warning");
	info("a line");
	log_capture(NULL, 0);
	CHECK(!strcmp(why, "--tensor-model-parallel-size 3 does not divide 4 heads"));
	log_capture(why, 16); /* cut to the buffer */
	error("a reason longer than sixteen bytes");
	log_capture(NULL, 0);
	CHECK(!strcmp(why, "a reason longer"));
	error("printed again");
	fflush(stderr);
	dup2(saved, 2);
	close(saved);
	close(fd);
	struct sbuf sb = SBUF_INIT;
	CHECK_INT(sbuf_read_file(&sb, path), 0);
	CHECK(strstr(sb.buf, "error: printed again\n") && !strstr(sb.buf, "reason") && !strstr(sb.buf, "warning"));
	sbuf_release(&sb);
	free(dir);
}

int main(void)
{
	RUN(test_defaults_and_values);
	RUN(test_last_wins_and_negative);
	RUN(test_unknown_flag_suggests);
	RUN(test_bad_values);
	RUN(test_required_unsupported_other);
	RUN(test_help);
	RUN(test_edit_distance);
	RUN(test_afile_commit_and_abort);
	RUN(test_afile_die_cleans_up);
	RUN(test_sbuf);
	RUN(test_device_probe);
	RUN(test_log_capture);
	return test_summary();
}
