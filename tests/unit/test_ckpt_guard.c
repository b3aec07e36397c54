/*
 * test_ckpt_guard.c - what keeps a checkpoint from misleading a run
 * (lib/ckpt, model/gpt_ckpt.c, model/ckpt_tok.c): a tracker that is empty or
 * garbage is refused showing exactly its bytes; a lost tracker gives way to
 * the newest iteration directory (long iteration numbers included); files
 * of one checkpoint that record different iterations are refused, naming
 * both; partial checkpoints of killed saves are reported with their size
 * and removed only when their writer is certainly dead; the recorded model
 * configuration is compared field by field with every difference named;
 * the tokenizer record round-trips with its files and catches damage.
 */
#include "base/error.h"
#include "base/sbuf.h"
#include "ckpt/ckpt.h"
#include "model/ckpt_tok.h"
#include "model/gpt_ckpt.h"
#include "test.h"

#include <dirent.h>
#include <stdlib.h>
#include <string.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>

static char *dir; /* scratch root of this run */

static char *join(const char *a, const char *b)
{
	char *p = malloc(strlen(a) + strlen(b) + 2);
	sprintf(p, "%s/%s", a, b);
	return p;
}

static int exists(const char *path)
{
	struct stat st;
	return stat(path, &st) == 0;
}

static void write_bytes(const char *path, const char *text, size_t n)
{
	FILE *f = fopen(path, "wb");
	if (!f)
		abort();
	fwrite(text, 1, n, f);
	fclose(f);
}

static char *capture_err(struct test_capture *cap)
{
	return test_capture_end(cap);
}

/* A committed iteration holding the files named (each with one tensor and
 * the root attribute "iteration" = its value in its[], or none when < 0). */
static int save_iteration(const char *save, int64_t iteration, const char *const *files, const int64_t *its, int n)
{
	struct ckpt_writer *w = ckpt_begin(save, iteration);
	if (!w)
		return -1;
	float v[4] = { 1, 2, 3, 4 };
	int64_t shape[1] = { 4 };
	for (int i = 0; i < n; i++) {
		int f = ckpt_file_create(w, files[i]);
		ckpt_put_tensor(w, f, "w", CKPT_F32, 1, shape, v);
		if (its[i] >= 0)
			ckpt_put_attr_i64(w, f, NULL, "iteration", its[i]);
	}
	return ckpt_commit(w);
}

/* ---- the tracker -------------------------------------------------------- */

static void test_tracker_messages(void)
{
	char *save = join(dir, "trk");
	mkdir(save, 0777);
	char *tp = join(save, "latest_checkpointed_iteration.txt");
	int64_t it = 7;
	struct test_capture cap;

	/* empty: said so, and nothing but the message (no bytes of memory) */
	write_bytes(tp, "", 0);
	test_capture_begin(&cap, 2);
	CHECK_INT(ckpt_latest(save, &it), -1);
	char *msg = capture_err(&cap);
	CHECK(contains_all(msg, tp, "is empty", "expected an iteration number or 'release'", NULL));
	for (const char *p = msg; p && *p; p++)
		if ((unsigned char)*p < 0x20 && *p != '\n') {
			printf("#   unprintable byte 0x%02x in: %s", (unsigned char)*p, msg);
			CHECK(0);
			break;
		}
	free(msg);
	CHECK_INT(it, 7);

	/* garbage ending in a newline: the bytes as they are, the newline too */
	write_bytes(tp, "garbage\x01\n", 9);
	test_capture_begin(&cap, 2);
	CHECK_INT(ckpt_latest(save, &it), -1);
	msg = capture_err(&cap);
	CHECK(contains_all(msg, tp, "found \"garbage\\x01\\x0a\"", NULL));
	free(msg);

	/* only whitespace */
	write_bytes(tp, " \n", 2);
	test_capture_begin(&cap, 2);
	CHECK_INT(ckpt_latest(save, &it), -1);
	msg = capture_err(&cap);
	CHECK(contains_all(msg, "found \" \\x0a\"", NULL));
	free(msg);
	free(tp);
	free(save);
}

/* No tracker: the newest iteration directory, whatever the number of digits. */
static void test_lost_tracker(void)
{
	char *save = join(dir, "lost");
	const char *files[] = { "model.h5" };
	int64_t its[] = { -1 };
	int64_t it = -5;
	CHECK_INT(ckpt_newest(save, &it), 1); /* no folder */
	CHECK_INT(save_iteration(save, 10, files, its, 1), 0);
	CHECK_INT(save_iteration(save, 12345678, files, its, 1), 0);
	CHECK_INT(save_iteration(save, 200, files, its, 1), 0);
	char *odd = join(save, "iter_00000300"); /* not a name megac writes */
	mkdir(odd, 0777);
	char *tp = join(save, "latest_checkpointed_iteration.txt");
	CHECK_INT(unlink(tp), 0);
	CHECK_INT(ckpt_latest(save, &it), 1);
	CHECK_INT(ckpt_newest(save, &it), 0);
	CHECK_INT(it, 12345678);
	struct test_capture cap;
	test_capture_begin(&cap, 2);
	it = -5;
	struct ckpt_reader *r = ckpt_open_latest(save, &it);
	char *msg = capture_err(&cap);
	CHECK(r != NULL);
	CHECK_INT(it, 12345678);
	CHECK(contains_all(msg, "warning", "no latest_checkpointed_iteration.txt", "newest, iteration 12345678", NULL));
	free(msg);
	ckpt_close(r);

	/* a folder with no iteration at all is still no checkpoint */
	char *empty = join(dir, "lost-empty");
	mkdir(empty, 0777);
	test_capture_begin(&cap, 2);
	r = ckpt_open_latest(empty, &it);
	msg = capture_err(&cap);
	CHECK(r == NULL);
	CHECK(contains_all(msg, "no latest_checkpointed_iteration.txt and no iteration directories", NULL));
	free(msg);
	free(empty);
	free(odd);
	free(tp);
	free(save);
}

/* ---- files of different saves --------------------------------------------- */

static void test_mixed_iterations(void)
{
	char *save = join(dir, "mix");
	const char *files[] = { "model.h5", "optim.h5", "extra.h5" };
	int64_t ok[] = { 20, 20, -1 }, bad[] = { 10, 20, -1 }, moved[] = { 10, 10, -1 };
	CHECK_INT(save_iteration(save, 20, files, ok, 3), 0);
	CHECK_INT(save_iteration(save, 30, files, bad, 3), 0);
	CHECK_INT(save_iteration(save, 40, files, moved, 3), 0);
	struct test_capture cap;

	/* agreeing files, and one that records nothing */
	struct ckpt_reader *r = ckpt_open(save, 20);
	CHECK(ckpt_file_open(r, "model.h5") >= 0);
	CHECK(ckpt_file_open(r, "extra.h5") >= 0);
	CHECK(ckpt_file_open(r, "optim.h5") >= 0);
	CHECK_INT(ckpt_check_iteration(r), 0);
	ckpt_close(r);

	/* model.h5 of iteration 10 beside optim.h5 of 20: both named, both iterations */
	r = ckpt_open(save, 30);
	CHECK(ckpt_file_open(r, "model.h5") >= 0);
	test_capture_begin(&cap, 2);
	CHECK_INT(ckpt_file_open(r, "optim.h5"), -1);
	char *msg = capture_err(&cap);
	CHECK(contains_all(msg, "iter_0000030/model.h5' records iteration 10", "iter_0000030/optim.h5' records iteration 20",
			   NULL));
	free(msg);
	ckpt_close(r);
	/* the other order names them the other way round */
	r = ckpt_open(save, 30);
	CHECK(ckpt_file_open(r, "optim.h5") >= 0);
	test_capture_begin(&cap, 2);
	CHECK_INT(ckpt_file_open(r, "model.h5"), -1);
	msg = capture_err(&cap);
	CHECK(contains_all(msg, "optim.h5' records iteration 20", "model.h5' records iteration 10", NULL));
	free(msg);
	ckpt_close(r);

	/* files that agree with each other but not with their directory */
	r = ckpt_open(save, 40);
	CHECK(ckpt_file_open(r, "model.h5") >= 0);
	CHECK(ckpt_file_open(r, "optim.h5") >= 0);
	test_capture_begin(&cap, 2);
	CHECK_INT(ckpt_check_iteration(r), -1);
	msg = capture_err(&cap);
	CHECK(contains_all(msg, "iter_0000040/model.h5' records iteration 10", "directory of iteration 40", NULL));
	free(msg);
	ckpt_close(r);
	free(save);
}

/* ---- partial checkpoints ---------------------------------------------------- */

struct who {
	char host[256], pidns[64], boot[64];
};

static void who_am_i(struct who *w)
{
	memset(w, 0, sizeof(*w));
	gethostname(w->host, sizeof(w->host) - 1);
	ssize_t k = readlink("/proc/self/ns/pid", w->pidns, sizeof(w->pidns) - 1);
	w->pidns[k > 0 ? k : 0] = 0;
	FILE *f = fopen("/proc/sys/kernel/random/boot_id", "r");
	if (f) {
		if (!fgets(w->boot, sizeof(w->boot), f))
			w->boot[0] = 0;
		fclose(f);
	}
	w->boot[strcspn(w->boot, "\n")] = 0;
}

static unsigned long long start_of(pid_t pid)
{
	char path[64], buf[1024];
	snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
	FILE *f = fopen(path, "r");
	if (!f)
		return 0;
	size_t n = fread(buf, 1, sizeof(buf) - 1, f);
	fclose(f);
	buf[n] = 0;
	char *p = strrchr(buf, ')');
	for (int field = 2; p && field < 22; field++)
		p = strchr(p + 1, ' ');
	return p ? strtoull(p + 1, NULL, 10) : 0;
}

/* A partial transaction "<save>/.iter_NNNNNNN.tmp-<tag>" holding a file of
 * `bytes` bytes and, unless host is NULL, a writer record. */
static char *partial(const char *save, int it, const char *tag, size_t bytes, const char *host, long pid,
		     unsigned long long start, const char *pidns, const char *boot)
{
	char name[128];
	snprintf(name, sizeof(name), ".iter_%07d.tmp-%s", it, tag);
	char *p = join(save, name);
	mkdir(save, 0777);
	mkdir(p, 0777);
	if (bytes) {
		char *f = join(p, "model.h5");
		char *data = calloc(1, bytes);
		write_bytes(f, data, bytes);
		free(data);
		free(f);
	}
	if (host) {
		char *f = join(p, ".writer");
		char text[1024];
		int n = snprintf(text, sizeof(text), "host %s\npid %ld\nstart %llu\npidns %s\nboot %s\n", host, pid, start,
				 pidns, boot);
		write_bytes(f, text, (size_t)n);
		free(f);
	}
	return p;
}

static void test_partial_saves(void)
{
	char *save = join(dir, "partial");
	struct who me;
	who_am_i(&me);
	/* a live process of ours, and a dead one */
	pid_t live = fork();
	if (live == 0) {
		pause();
		_exit(0);
	}
	pid_t dead = fork();
	if (dead == 0)
		_exit(0);
	waitpid(dead, NULL, 0);
	unsigned long long live_start = 0;
	for (int i = 0; i < 100 && !(live_start = start_of(live)); i++)
		usleep(10000);

	char *p_dead = partial(save, 6, "dead", 20000, me.host, dead, 1, me.pidns, me.boot);
	char *p_live = partial(save, 7, "live", 3000, me.host, live, live_start, me.pidns, me.boot);
	char *p_reused = partial(save, 8, "reused", 100, me.host, live, live_start + 12345, me.pidns, me.boot);
	char *p_host = partial(save, 9, "host", 100, "some-other-host.example", dead, 1, me.pidns, me.boot);
	char *p_ns = partial(save, 10, "ns", 100, me.host, dead, 1, "pid:[1]", me.boot);
	char *p_boot = partial(save, 11, "boot", 100, me.host, live, live_start, me.pidns, "another-boot");
	char *p_old = partial(save, 12, "old", 100, NULL, 0, 0, NULL, NULL);
	char *p_old_empty = partial(save, 13, "oldempty", 0, NULL, 0, 0, NULL, NULL);
	char *p_dead_empty = partial(save, 14, "deadempty", 0, me.host, dead, 1, me.pidns, me.boot);

	/* reporting only: everything stays, each said with its size */
	struct test_capture cap;
	test_capture_begin(&cap, 2);
	CHECK_INT(ckpt_sweep(save, false), 0);
	char *msg = capture_err(&cap);
	CHECK(contains_all(msg, p_dead, "20.0 kB in 1 file", "no longer running", p_live, "3000 bytes", "still running",
			   p_host, "some-other-host.example, which cannot be checked", p_ns, "another PID namespace", p_old,
			   "its writer is not recorded", NULL));
	free(msg);
	CHECK(exists(p_dead) && exists(p_live) && exists(p_old) && exists(p_dead_empty) && exists(p_old_empty));

	/* removing: only what a dead writer left (and empty leftovers) */
	test_capture_begin(&cap, 2);
	CHECK_INT(ckpt_sweep(save, true), 5);
	msg = capture_err(&cap);
	CHECK(contains_all(msg, p_dead, "20.0 kB", "removed it", p_reused, "which is now another process's", p_boot,
			   "before it restarted", NULL));
	CHECK(!strstr(msg, p_live) && !strstr(msg, p_host)); /* said once per process */
	free(msg);
	CHECK(!exists(p_dead) && !exists(p_reused) && !exists(p_boot) && !exists(p_old_empty) && !exists(p_dead_empty));
	CHECK(exists(p_live) && exists(p_host) && exists(p_ns) && exists(p_old));

	/* the live writer dies: its partial checkpoint goes at the next sweep */
	kill(live, SIGKILL);
	waitpid(live, NULL, 0);
	test_capture_begin(&cap, 2);
	CHECK_INT(ckpt_sweep(save, true), 1);
	msg = capture_err(&cap);
	CHECK(contains_all(msg, p_live, "3000 bytes", "removed it", NULL));
	free(msg);
	CHECK(!exists(p_live));

	/* this process's own save in progress is neither said nor touched; a
	 * committed iteration keeps no writer record */
	struct ckpt_writer *w = ckpt_begin(save, 20);
	char *own = strdup(ckpt_tmp_dir(w));
	char *rec = join(own, ".writer");
	CHECK(exists(rec));
	test_capture_begin(&cap, 2);
	CHECK_INT(ckpt_sweep(save, true), 0);
	msg = capture_err(&cap);
	CHECK(!strstr(msg, own));
	free(msg);
	CHECK(exists(own));
	int f = ckpt_file_create(w, "model.h5");
	float v[1] = { 1 };
	int64_t shape[1] = { 1 };
	CHECK_INT(ckpt_put_tensor(w, f, "w", CKPT_F32, 1, shape, v), 0);
	CHECK_INT(ckpt_commit(w), 0);
	char *done = join(save, "iter_0000020/.writer");
	CHECK(!exists(done) && !exists(own));
	free(done);
	free(rec);
	free(own);
	free(p_dead), free(p_live), free(p_reused), free(p_host), free(p_ns), free(p_boot), free(p_old);
	free(p_old_empty), free(p_dead_empty);
	free(save);
}

/* ---- the recorded configuration --------------------------------------------- */

static void test_config_diff(void)
{
	const char *ckpt = "{\"num_layers\": 2, \"hidden_size\": 64, \"position_embedding_type\": \"rope\", "
			   "\"rotary_base\": 1000000, \"rotary_percent\": 1.0, \"norm_epsilon\": 9.99999997e-07, "
			   "\"normalization\": \"RMSNorm\", \"swiglu\": true, \"add_bias_linear\": false, "
			   "\"bias_gelu_fusion\": false, \"hidden_dropout\": 0.1, \"seq_length\": 64, "
			   "\"max_position_embeddings\": 64, \"vocab_size\": 1000, \"padded_vocab_size\": 1024, "
			   "\"tokenizer_type\": \"NullTokenizer\", \"fp16\": false, \"some_future_field\": 3}";
	/* the same model: int and real spellings of a number agree; what an
	 * older checkpoint lacks (num_experts, bf16) is not a difference */
	const char *same = "{\"num_layers\": 2, \"hidden_size\": 64, \"position_embedding_type\": \"rope\", "
			   "\"rotary_base\": 1000000.0, \"rotary_percent\": 1, \"norm_epsilon\": 9.99999997e-07, "
			   "\"normalization\": \"RMSNorm\", \"swiglu\": true, \"add_bias_linear\": false, "
			   "\"bias_gelu_fusion\": false, \"hidden_dropout\": 0.1, \"seq_length\": 128, "
			   "\"max_position_embeddings\": 256, \"vocab_size\": 1000, \"padded_vocab_size\": 1024, "
			   "\"tokenizer_type\": \"NullTokenizer\", \"fp16\": false, \"bf16\": false, \"some_future_field\": 3}";
	struct sbuf math = SBUF_INIT, other = SBUF_INIT;
	CHECK_INT(gpt_config_diff(ckpt, same, "x", &math, &other), 0);
	CHECK_INT(math.len + other.len, 0);
	/* every difference at once, each with both values; training-only ones apart */
	const char *flags = "{\"num_layers\": 3, \"hidden_size\": 64, \"position_embedding_type\": \"rope\", "
			    "\"rotary_base\": 10000, \"rotary_percent\": 0.5, \"norm_epsilon\": 1e-05, "
			    "\"normalization\": \"LayerNorm\", \"swiglu\": false, \"add_bias_linear\": true, "
			    "\"bias_gelu_fusion\": true, \"hidden_dropout\": 0.0, \"seq_length\": 64, "
			    "\"max_position_embeddings\": 64, \"vocab_size\": 5, \"padded_vocab_size\": 8, "
			    "\"tokenizer_type\": \"GPT2BPETokenizer\", \"fp16\": false, \"bf16\": true, "
			    "\"num_experts\": 4, \"moe_router_topk\": 2, \"some_future_field\": 4}";
	CHECK_INT(gpt_config_diff(ckpt, flags, "x", &math, &other), 10);
	CHECK(contains_all(math.buf, "--num-layers: 2 in the checkpoint, 3 from the flags",
			   "--rotary-base: 1000000 in the checkpoint, 10000 from the flags",
			   "--rotary-percent: 1 in the checkpoint, 0.5 from the flags",
			   "--norm-epsilon: 1e-06 in the checkpoint, 1e-05 from the flags",
			   "--normalization: RMSNorm in the checkpoint, LayerNorm from the flags",
			   "--swiglu: on in the checkpoint, off from the flags",
			   "--disable-bias-linear: on in the checkpoint, off from the flags",
			   "--tokenizer-type: NullTokenizer in the checkpoint, GPT2BPETokenizer from the flags",
			   "--num-experts: none in the checkpoint, 4 from the flags", "some_future_field: 3 in the checkpoint, 4",
			   NULL));
	/* derived (bias_gelu_fusion with the biases), not the model's math, or the caller's */
	CHECK(!strstr(math.buf, "gelu") && !strstr(math.buf, "vocab") && !strstr(math.buf, "seq") &&
	      !strstr(math.buf, "moe_router_topk") && !strstr(math.buf, "max-position"));
	CHECK(contains_all(other.buf, "--hidden-dropout: 0.1 in the checkpoint, 0 from the flags",
			   "--bf16: off in the checkpoint, on from the flags", NULL));
	sbuf_release(&math);
	sbuf_release(&other);
	/* learned positions: their number is the model's */
	const char *l1 = "{\"position_embedding_type\": \"learned_absolute\", \"max_position_embeddings\": 64, "
			 "\"rotary_base\": 0}";
	const char *l2 = "{\"position_embedding_type\": \"learned_absolute\", \"max_position_embeddings\": 128, "
			 "\"rotary_base\": 10000}";
	CHECK_INT(gpt_config_diff(l1, l2, "x", &math, &other), 1);
	CHECK(contains_all(math.buf, "--max-position-embeddings (learned positions): 64 in the checkpoint, 128", NULL));
	sbuf_release(&math);
	/* the GELU form counts where a GELU runs: not with SwiGLU (an imported Llama) */
	CHECK_INT(gpt_config_diff("{\"swiglu\": false, \"add_bias_linear\": true, \"bias_gelu_fusion\": true}",
				  "{\"swiglu\": false, \"add_bias_linear\": true, \"bias_gelu_fusion\": false}", "x", &math,
				  &other), 1);
	CHECK(contains_all(math.buf, "the GELU (", "): tanh in the checkpoint, erf from the flags", NULL));
	sbuf_release(&math);
	CHECK_INT(gpt_config_diff("{\"swiglu\": true, \"add_bias_linear\": false, \"bias_gelu_fusion\": true}",
				  "{\"swiglu\": true, \"add_bias_linear\": false, \"bias_gelu_fusion\": false}", "x", &math,
				  &other), 0);
	struct test_capture cap;
	test_capture_begin(&cap, 2);
	CHECK_INT(gpt_config_diff("[1]", l2, "'x/model.h5'", &math, &other), -1);
	char *msg = capture_err(&cap);
	CHECK(contains_all(msg, "'x/model.h5'", "not a JSON object", NULL));
	free(msg);
	sbuf_release(&math);
	sbuf_release(&other);
}

/* the RoPE variants: YaRN's settings and --rotary-interleaved are written,
 * read back, and a resume with other values is refused naming each flag */
static void test_rope_record(void)
{
	struct gpt_config c;
	memset(&c, 0, sizeof(c));
	c.L = 2, c.h = 64, c.f = 96, c.a = 4, c.g = 2, c.k = 16, c.S = 32, c.P = 32, c.V = 1000, c.Vp = 1024;
	c.rope = c.yarn = c.rope_interleaved = c.rmsnorm = c.swiglu = true;
	c.rot = 16, c.rotary_base = 10000, c.eps = 1e-5f;
	c.yarn_cfg = rope_yarn_defaults();
	c.yarn_cfg.factor = 4, c.yarn_cfg.original_max_positions = 256, c.yarn_cfg.beta_fast = 16;
	c.yarn_cfg.mscale = 0.9, c.yarn_cfg.mscale_all_dim = 0.5, c.yarn_cfg.round_to_int = false;
	char *j = gpt_config_to_json(&c, 1.0);
	struct gpt_config r;
	CHECK_INT(gpt_config_from_json(&r, j, "x"), 0);
	CHECK(r.rope && r.yarn && r.rope_interleaved && r.rot == 16);
	const struct rope_yarn *ry = &r.yarn_cfg, *cy = &c.yarn_cfg;
	CHECK(ry->factor == cy->factor && ry->original_max_positions == cy->original_max_positions &&
	      ry->beta_fast == cy->beta_fast && ry->beta_slow == cy->beta_slow && ry->mscale == cy->mscale &&
	      ry->mscale_all_dim == cy->mscale_all_dim && ry->round_to_int == cy->round_to_int);
	/* plain RoPE, and another factor, mscale and layout */
	struct gpt_config d = c;
	d.yarn_cfg.factor = 8, d.yarn_cfg.mscale = 1, d.rope_interleaved = false;
	char *jd = gpt_config_to_json(&d, 1.0);
	struct sbuf math = SBUF_INIT, other = SBUF_INIT;
	CHECK_INT(gpt_config_diff(j, jd, "x", &math, &other), 3);
	CHECK(contains_all(math.buf, "--rotary-scaling-factor: 4 in the checkpoint, 8 from the flags",
			   "--mscale: 0.9 in the checkpoint, 1 from the flags",
			   "--rotary-interleaved: on in the checkpoint, off from the flags", NULL));
	sbuf_release(&math);
	d = c;
	d.yarn = false;
	char *jr = gpt_config_to_json(&d, 1.0);
	CHECK(gpt_config_diff(j, jr, "x", &math, &other) >= 1);
	CHECK(contains_all(math.buf, "--position-embedding-type: yarn in the checkpoint, rope from the flags", NULL));
	sbuf_release(&math);
	sbuf_release(&other);
	CHECK_INT(gpt_config_from_json(&r, jr, "x"), 0);
	CHECK(r.rope && !r.yarn && r.rope_interleaved);
	free(j), free(jd), free(jr);
}

/* multi-latent attention's RoPE: --rope-type yarn records its factor and
 * mscales (its other YaRN settings are constants), read back as MLA's; with
 * rope the factor and mscale_all_dim only where they change the softmax
 * scale; a resume with another value or rope type is refused by name */
static void test_mla_rope_record(void)
{
	struct gpt_config c;
	memset(&c, 0, sizeof(c));
	c.L = 2, c.h = 64, c.f = 96, c.a = 4, c.g = 4, c.S = 32, c.P = 32, c.V = 1000, c.Vp = 1024;
	c.rope = c.rmsnorm = c.swiglu = c.mla = c.mla_yarn = true;
	c.q_lora = 20, c.kv_lora = 24, c.qk_head = 12, c.qk_pos = 8, c.v_head = 16, c.k = 20, c.rot = 8;
	c.rotary_base = 10000, c.eps = 1e-5f;
	c.yarn_cfg = rope_yarn_defaults();
	c.yarn_cfg.factor = 40, c.yarn_cfg.mscale = 2, c.yarn_cfg.mscale_all_dim = 0.5;
	char *j = gpt_config_to_json(&c, 1.0);
	struct gpt_config r;
	CHECK_INT(gpt_config_from_json(&r, j, "x"), 0);
	CHECK(r.mla && r.mla_yarn && !r.yarn && r.rot == 8 && r.k == 20);
	CHECK(r.yarn_cfg.factor == 40 && r.yarn_cfg.mscale == 2 && r.yarn_cfg.mscale_all_dim == 0.5 &&
	      r.yarn_cfg.original_max_positions == 4096 && r.yarn_cfg.beta_fast == 32 && r.yarn_cfg.beta_slow == 1 &&
	      r.yarn_cfg.round_to_int);
	struct gpt_config d = c;
	d.yarn_cfg.mscale = 1;
	char *jd = gpt_config_to_json(&d, 1.0);
	struct sbuf math = SBUF_INIT, other = SBUF_INIT;
	CHECK_INT(gpt_config_diff(j, jd, "x", &math, &other), 1);
	CHECK(contains_all(math.buf, "--mscale: 2 in the checkpoint, 1 from the flags", NULL));
	sbuf_release(&math);
	/* rope: the softmax scale's settings stay recorded, the mscale goes */
	d = c;
	d.mla_yarn = false;
	char *jr = gpt_config_to_json(&d, 1.0);
	CHECK(gpt_config_diff(j, jr, "x", &math, &other) >= 2);
	CHECK(contains_all(math.buf, "--rope-type: yarn in the checkpoint, rope from the flags", "--mscale", NULL));
	sbuf_release(&math);
	CHECK_INT(gpt_config_from_json(&r, jr, "x"), 0);
	CHECK(r.mla && !r.mla_yarn && r.yarn_cfg.factor == 40 && r.yarn_cfg.mscale_all_dim == 0.5);
	/* rope with a scale of 1: nothing of YaRN's is written */
	d.yarn_cfg.mscale_all_dim = 0;
	char *j1 = gpt_config_to_json(&d, 1.0);
	CHECK(!strstr(j1, "rotary_scaling_factor") && !strstr(j1, "mscale"));
	CHECK_INT(gpt_config_from_json(&r, j1, "x"), 0);
	CHECK(r.mla && !r.mla_yarn && r.yarn_cfg.factor == 1 && r.yarn_cfg.mscale_all_dim == 0);
	sbuf_release(&other);
	free(j), free(jd), free(jr), free(j1);
}

/* ---- the tokenizer record ------------------------------------------------------ */

static void test_tokenizer_record(void)
{
	struct args a;
	memset(&a, 0, sizeof(a));
	a.tokenizer_type = "GPT2BPETokenizer";
	a.vocab_file = "examples/tokenizers/gpt2/gpt2-vocab.json";
	a.merge_file = "examples/tokenizers/gpt2/gpt2-merges.txt";
	a.vocab_size = a.padded_vocab_size = a.null_tokenizer_eod_id = -1;
	a.pad_vocab_size = true;
	a.make_vocab_size_divisible_by = 128;
	a.tensor_model_parallel_size = 1;
	struct tok_config tc = { .type = a.tokenizer_type, .vocab_file = a.vocab_file, .merge_file = a.merge_file,
				.vocab_size = -1, .null_eod_id = -1 };
	struct tokenizer *tok = tok_load(&tc);
	CHECK(tok != NULL);
	struct ckpt_tok rec, back;
	CHECK_INT(ckpt_tok_from_args(&rec, &a, tok), 0);
	CHECK_INT(rec.nfiles, 2);
	CHECK_INT(rec.vocab_size, 50257);
	CHECK_INT(rec.padding_multiple, 128);

	char *save = join(dir, "tok");
	struct ckpt_writer *w = ckpt_begin(save, 1);
	int f = ckpt_file_create(w, "model.h5");
	CHECK_INT(ckpt_tok_put(w, f, &rec), 0);
	CHECK_INT(ckpt_commit(w), 0);
	struct ckpt_reader *r = ckpt_open(save, 1);
	f = ckpt_file_open(r, "model.h5");
	CHECK_INT(ckpt_tok_get(&back, r, f), 0);
	CHECK_STR(back.type, "GPT2BPETokenizer");
	CHECK_INT(back.vocab_size, 50257);
	CHECK_INT(back.eod, 50256);
	CHECK_INT(back.nfiles, 2);
	/* the files come out as they went in, and load as the same tokenizer */
	char *out = join(dir, "tok-out");
	mkdir(out, 0777);
	struct tok_config tc2;
	CHECK_INT(ckpt_tok_extract(&back, out, "x", &tc2), 0);
	size_t n1 = 0, n2 = 1;
	char *orig = test_read_file(a.vocab_file, &n1), *copy = test_read_file(tc2.vocab_file, &n2);
	CHECK(orig && copy && n1 == n2 && !memcmp(orig, copy, n1));
	free(orig), free(copy);
	struct tokenizer *tok2 = tok_load(&tc2);
	CHECK(tok2 && tok_vocab_size(tok2) == 50257);
	if (tok2)
		tok_free(tok2);

	/* the model it fits, and ones it does not */
	struct gpt_config c;
	memset(&c, 0, sizeof(c));
	c.V = 50257;
	c.Vp = 50304;
	CHECK_INT(ckpt_tok_check(&back, NULL, &c, &a, tok, "'ck'"), 0);
	struct args null_a = a;
	null_a.tokenizer_type = "NullTokenizer";
	null_a.vocab_size = 1000;
	struct tok_config tn = { .type = "NullTokenizer", .vocab_size = 1000, .null_eod_id = -1 };
	struct tokenizer *nt = tok_load(&tn);
	struct test_capture cap;
	test_capture_begin(&cap, 2);
	CHECK_INT(ckpt_tok_check(&back, NULL, &c, &null_a, nt, "'ck'"), -1);
	char *msg = capture_err(&cap);
	CHECK(contains_all(msg, "'ck' does not fit this tokenizer", "trained with a GPT2BPETokenizer",
			   "the flags give a NullTokenizer", "1000 tokens", "1024", "50257 (padded to 50304)", NULL));
	free(msg);
	/* an older checkpoint (no record): its config's type and vocabulary */
	test_capture_begin(&cap, 2);
	CHECK_INT(ckpt_tok_check(NULL, "GPT2BPETokenizer", &c, &null_a, nt, "'ck'"), -1);
	msg = capture_err(&cap);
	CHECK(contains_all(msg, "NullTokenizer", "1000 tokens", NULL));
	free(msg);
	CHECK_INT(ckpt_tok_check(NULL, NULL, &c, &a, tok, "'ck'"), 0);
	tok_free(nt);
	ckpt_tok_free(&back);
	ckpt_close(r);

	/* a checkpoint without a record says so; a damaged file in one is caught */
	w = ckpt_begin(save, 2);
	f = ckpt_file_create(w, "model.h5");
	free(rec.files[1].data);
	rec.files[1].data = strdup("#version: 0.2\nG X\n"); /* recorded under the old crc32 */
	rec.files[1].len = strlen(rec.files[1].data);
	CHECK_INT(ckpt_tok_put(w, f, &rec), 0);
	CHECK_INT(ckpt_commit(w), 0);
	w = ckpt_begin(save, 3);
	f = ckpt_file_create(w, "model.h5");
	CHECK_INT(ckpt_commit(w), 0);
	r = ckpt_open(save, 2);
	f = ckpt_file_open(r, "model.h5");
	test_capture_begin(&cap, 2);
	CHECK_INT(ckpt_tok_get(&back, r, f), -1);
	msg = capture_err(&cap);
	CHECK(contains_all(msg, "iter_0000002/model.h5", "'merges.txt'", "corrupt", NULL));
	free(msg);
	ckpt_close(r);
	r = ckpt_open(save, 3);
	f = ckpt_file_open(r, "model.h5");
	CHECK_INT(ckpt_tok_get(&back, r, f), 1);
	ckpt_close(r);
	ckpt_tok_free(&rec);
	tok_free(tok);
	free(out);
	free(save);
}

int main(void)
{
	log_init("test_ckpt_guard", 0, 1);
	dir = test_tmpdir("ckpt_guard");
	RUN(test_tracker_messages);
	RUN(test_lost_tracker);
	RUN(test_mixed_iterations);
	RUN(test_partial_saves);
	RUN(test_config_diff);
	RUN(test_rope_record);
	RUN(test_mla_rope_record);
	RUN(test_tokenizer_record);
	return test_summary();
}
