/*
 * test_flags.c - the flag tables against Megatron's own argument list.
 *
 * tests/fixtures/megatron_flags.tsv is every option of Megatron-LM's
 * training parser (pretrain_gpt.py --help at the commit docs/flags.md
 * names), dumped from the parser. Every one of them must be implemented by
 * train (a row of args_table.c) or have a row in args_megatron.c, with the
 * number of values Megatron gives it, and the parser must accept or refuse
 * it by name, never call it unknown. docs/flags.md must be what the tables
 * generate.
 */
#include "base/args.h"
#include "base/sbuf.h"
#include "test.h"

#include <stdlib.h>
#include <string.h>

#define FIXTURE "tests/fixtures/megatron_flags.tsv"

struct mflag_fx {
	char name[96];
	char arity[8];
	char choices[1024];
};

static const struct prog_info train_p = { "train", PROG_TRAIN, "summary", "example", 0 };

static struct mflag_fx *fx;
static int nfx;

static void load_fixture(void)
{
	size_t len;
	char *text = test_read_file(FIXTURE, &len);
	if (!text) {
		printf("not ok - cannot read %s\n", FIXTURE);
		exit(1);
	}
	fx = calloc(2000, sizeof(*fx));
	for (char *save = NULL, *line = strtok_r(text, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
		if (line[0] == '#')
			continue;
		char dest[128], ar[8], group[128];
		if (sscanf(line, "%95[^\t]\t%127[^\t]\t%7[^\t]\t%127[^\t]\t%1023[^\t]", fx[nfx].name, dest, ar,
			   group, fx[nfx].choices) < 4)
			continue;
		strcpy(fx[nfx].arity, ar);
		nfx++;
	}
	free(text);
}

static const struct flag_def *train_row(const char *name)
{
	for (size_t i = 0; i < args_table_len; i++)
		if ((args_table[i].progs & PROG_TRAIN) && !strcmp(args_table[i].name, name))
			return &args_table[i];
	return NULL;
}

static const struct megatron_flag *megatron_row(const char *name)
{
	for (size_t i = 0; i < megatron_flags_len; i++)
		if (!strcmp(megatron_flags[i].name, name))
			return &megatron_flags[i];
	return NULL;
}

static const struct mflag_fx *fixture_row(const char *name)
{
	for (int i = 0; i < nfx; i++)
		if (!strcmp(fx[i].name, name))
			return &fx[i];
	return NULL;
}

/* The fixture is Megatron's whole list: hundreds of flags, with the ones
 * scripts use most. */
static void test_fixture_is_whole(void)
{
	CHECK(nfx > 800);
	const char *expect[] = { "--attention-backend", "--num-layers", "--fp8-format", "--manual-gc",
				 "--num-workers", "--sft", "--no-position-embedding", "--wandb-project",
				 "--rampup-batch-size", "--ckpt-format", "--use-checkpoint-args" };
	for (size_t i = 0; i < sizeof(expect) / sizeof(expect[0]); i++)
		CHECK(fixture_row(expect[i]) != NULL);
}

/* Every Megatron flag is train's, or in the Megatron table; never both. */
static void test_every_megatron_flag_has_a_row(void)
{
	int missing = 0, both = 0;
	for (int i = 0; i < nfx; i++) {
		if (!strcmp(fx[i].name, "--help"))
			continue;
		const struct flag_def *d = train_row(fx[i].name);
		const struct megatron_flag *m = megatron_row(fx[i].name);
		if (!d && !m && missing++ < 10)
			printf("# no row for Megatron's %s\n", fx[i].name);
		if (d && m && both++ < 10)
			printf("# %s has rows in both tables\n", fx[i].name);
	}
	CHECK_INT(missing, 0);
	CHECK_INT(both, 0);
}

/* The Megatron table holds only Megatron's flags, once each, each with the
 * number of values Megatron gives it and a reason. */
static void test_megatron_rows_match_megatron(void)
{
	int bad = 0;
	for (size_t i = 0; i < megatron_flags_len; i++) {
		const struct megatron_flag *m = &megatron_flags[i];
		const struct mflag_fx *f = fixture_row(m->name);
		char want[8];
		if (m->arity == MF_LIST)
			strcpy(want, "+");
		else if (m->arity == MF_LIST0)
			strcpy(want, "*");
		else
			snprintf(want, sizeof(want), "%d", m->arity);
		if (!f || strcmp(f->arity, want) || !m->why || !*m->why) {
			if (bad++ < 10)
				printf("# %s: %s (table arity %s, Megatron's %s)\n", m->name,
				       f ? "arity or reason" : "not a Megatron flag", want, f ? f->arity : "-");
		}
		for (size_t j = 0; j < i; j++)
			if (!strcmp(megatron_flags[j].name, m->name) && bad++ < 10)
				printf("# %s twice\n", m->name);
	}
	CHECK_INT(bad, 0);
}

/* train's own rows for Megatron flags take values as Megatron's do. */
static void test_train_rows_arity(void)
{
	int bad = 0;
	for (size_t i = 0; i < args_table_len; i++) {
		const struct flag_def *d = &args_table[i];
		const struct mflag_fx *f = fixture_row(d->name);
		if (!f || !(d->progs & PROG_TRAIN))
			continue;
		bool flag_only = !strcmp(f->arity, "0");
		bool list = !strcmp(f->arity, "+") || !strcmp(f->arity, "*");
		bool ok;
		switch (d->kind) {
		case FK_BOOL:
		case FK_BOOL_NEG:
			ok = flag_only;
			break;
		case FK_STRS:
		case FK_INTS:
			/* megac lists accept one value too; a fixed count is checked by the program */
			ok = list || !strcmp(f->arity, "1") || atoi(f->arity) > 1;
			break;
		case FK_STR:
		case FK_FLOAT:
			/* Megatron's per-layer-type lists of the MoE loss; megac takes one type */
			ok = !strcmp(f->arity, "1") || (list && (!strcmp(d->name, "--moe-router-load-balancing-type") ||
								 !strcmp(d->name, "--moe-aux-loss-coeff")));
			break;
		case FK_UNSUPPORTED:
			ok = flag_only == !d->metavar; /* the parser steps over one value when it has a metavar */
			break;
		default:
			ok = !strcmp(f->arity, "1");
		}
		if (!ok && bad++ < 10)
			printf("# %s: kind %d, Megatron's arity %s\n", d->name, d->kind, f->arity);
	}
	CHECK_INT(bad, 0);
}

/* A Megatron value is never an "invalid choice": train's rows list all of
 * Megatron's choices, and the values megac lacks are refused by name. */
static void test_megatron_choices(void)
{
	int bad = 0, refused = 0;
	for (int i = 0; i < nfx; i++) {
		const struct flag_def *d = train_row(fx[i].name);
		/* --exit-signal: Megatron's choices are signal numbers; megac takes the names */
		if (!d || !fx[i].choices[0] || !strcmp(d->name, "--exit-signal") || d->kind == FK_UNSUPPORTED)
			continue;
		char *copy = strdup(fx[i].choices);
		for (char *save = NULL, *c = strtok_r(copy, "|", &save); c; c = strtok_r(NULL, "|", &save)) {
			bool listed = false;
			if (d->choices) {
				char *ours = strdup(d->choices);
				for (char *s2 = NULL, *o = strtok_r(ours, "|", &s2); o; o = strtok_r(NULL, "|", &s2))
					listed |= !strcmp(o, c);
				free(ours);
			}
			if (!listed && bad++ < 10)
				printf("# %s: Megatron's value '%s' is not among megac's choices\n", d->name, c);
		}
		free(copy);
	}
	CHECK_INT(bad, 0);
	/* and a refused value is refused by name, in the one message */
	struct args a;
	struct test_capture c;
	char *argv[] = { "train", "--position-embedding-type", "mrope", "--tokenizer-type", "BertWordPieceCase",
			 "--moe-router-score-function", "sqrtsoftplus", "--fp4-format", "e2m1", NULL };
	test_capture_begin(&c, 2);
	int r = args_parse(&a, &train_p, 9, argv);
	char *msg = test_capture_end(&c);
	CHECK_INT(r, -1);
	CHECK(msg && strstr(msg, "--position-embedding-type mrope: megac has learned absolute positions, RoPE and "
				 "YaRN"));
	CHECK(msg && strstr(msg, "--tokenizer-type BertWordPieceCase: megac's tokenizers are"));
	CHECK(msg && strstr(msg, "--moe-router-score-function sqrtsoftplus: the sqrtsoftplus router score"));
	CHECK(msg && strstr(msg, "--fp4-format is a Megatron flag that megac does not support"));
	CHECK(msg && !strstr(msg, "invalid choice"));
	refused = msg != NULL;
	CHECK(refused);
	free(msg);
	args_free(&a);
}


/* Each flag of the Megatron table, given with values as Megatron takes
 * them, is accepted (no effect) or refused by name, never "unknown", and
 * its values are not mistaken for stray arguments. */
static void test_every_megatron_row_parses(void)
{
	int bad = 0;
	for (size_t i = 0; i < megatron_flags_len; i++) {
		const struct megatron_flag *m = &megatron_flags[i];
		char *argv[8] = { "train", (char *)m->name };
		int n = m->arity == MF_LIST ? 2 : m->arity == MF_LIST0 ? 0 : m->arity;
		for (int k = 0; k < n; k++)
			argv[2 + k] = "1";
		argv[2 + n] = "--num-layers";
		argv[3 + n] = "2";
		argv[4 + n] = NULL;
		struct args a;
		char *msg;
		int r = parse_capture(&a, &train_p, argv, &msg);
		bool ok;
		if (m->status == MF_NO_EFFECT) {
			char *none = args_no_effect(&a);
			/* only the required model flags are missing */
			ok = none && !strcmp(none, m->name) && a.num_layers == 2 && msg &&
			     !strstr(msg, "unknown") && !strstr(msg, "unexpected");
			free(none);
		} else {
			ok = r < 0 && msg && strstr(msg, m->name) && strstr(msg, m->why) &&
			     strstr(msg, "that megac does not support") && !strstr(msg, "unexpected");
		}
		if (!ok && bad++ < 5)
			printf("# %s: %s\n", m->name, msg ? msg : "(nothing)");
		free(msg);
		args_free(&a);
	}
	CHECK_INT(bad, 0);
}

/* One message for everything; refusals grouped by reason; "did you mean"
 * only for a flag that is not Megatron's. */
static void test_all_problems_in_one_message(void)
{
	struct args a;
	char *msg;
	char *argv[] = { "train", "--fp4-format", "e2m1", "--attention-backend", "fused", "--num-layrs", "2",
			 "--fp4-recipe", "nvfp4", "--seq-length", "4294967296", "--num-workers", "2", "--manual-gc",
			 "--freeze-all-layers", "--ckpt-format", "torch_dcp", "stray", NULL };
	CHECK_INT(parse_capture(&a, &train_p, argv, &msg), -1);
	CHECK(msg && strstr(msg, "problems"));
	CHECK(msg && strstr(msg, "unknown flag '--num-layrs'; did you mean '--num-layers'?"));
	CHECK(msg && strstr(msg, "--seq-length: 4294967296 is out of range"));
	CHECK(msg && strstr(msg, "--fp4-format, --fp4-recipe are Megatron flags that megac does not support: "
				 "FP4 training"));
	CHECK(msg && strstr(msg, "--freeze-all-layers is a Megatron flag that megac does not support"));
	CHECK(msg && strstr(msg, "--ckpt-format torch_dcp: megac writes its own HDF5 checkpoint"));
	CHECK(msg && strstr(msg, "unexpected argument 'stray'"));
	CHECK(msg && strstr(msg, "missing required flag --hidden-size"));
	/* accepted flags are not problems, and their values are not strays */
	CHECK(msg && !strstr(msg, "--attention-backend") && !strstr(msg, "--num-workers") &&
	      !strstr(msg, "'fused'") && !strstr(msg, "--manual-gc"));
	free(msg);
	args_free(&a);
}

static void test_no_effect_line_and_values(void)
{
	struct args a;
	char *msg;
	char *argv[] = { "train", "--num-layers", "2", "--hidden-size", "8", "--num-attention-heads", "2",
			 "--max-position-embeddings", "16", "--seq-length", "16", "--micro-batch-size", "1",
			 "--attention-backend", "auto", "--profile-ranks", "0", "1", "--num-workers=3",
			 "--use-flash-attn", "--override-opt_param-scheduler", "--ckpt-format", "hdf5",
			 "--no-position-embedding", NULL };
	CHECK_INT(parse_capture(&a, &train_p, argv, &msg), 0);
	char *none = args_no_effect(&a);
	CHECK_STR(none, "--use-flash-attn --attention-backend --profile-ranks --num-workers"); /* table order */
	CHECK(a.override_opt_param_scheduler);
	CHECK(!a.add_position_embedding);
	free(none);
	free(msg);
	args_free(&a);
}

/* Integers beyond 32 bits are refused where megac keeps them in an int. */
static void test_integer_ranges(void)
{
	struct args a;
	char *msg;
	char *argv[] = { "train", "--num-layers", "4294967297", "--make-vocab-size-divisible-by", "4294967296",
			 "--train-samples", "4294967296", "--hidden-size", "99999999999999999999", NULL };
	CHECK_INT(parse_capture(&a, &train_p, argv, &msg), -1);
	CHECK(msg && strstr(msg, "--num-layers: 4294967297 is out of range (at most 2147483647)"));
	CHECK(msg && strstr(msg, "--make-vocab-size-divisible-by: 4294967296 is out of range"));
	CHECK(msg && strstr(msg, "--hidden-size: 99999999999999999999 is out of range"));
	CHECK(msg && !strstr(msg, "--train-samples")); /* counts samples: 64-bit */
	CHECK(a.train_samples == 4294967296LL);
	free(msg);
	args_free(&a);
}

/* Other programs do not take Megatron's training flags, and say so. */
static void test_other_programs(void)
{
	static const struct prog_info pp = { "preprocess_data", PROG_PREPROCESS, "s", "e", 0 };
	static const struct prog_info gi = { "build_gpt_index", PROG_GPTINDEX, "s", "e", PROG_TRAIN };
	struct args a;
	char *msg;
	char *argv1[] = { "preprocess_data", "--attention-backend", "flash", NULL };
	CHECK_INT(parse_capture(&a, &pp, argv1, &msg), -1);
	CHECK(msg && strstr(msg, "--attention-backend is a flag of Megatron's training; preprocess_data does not "
				 "take it"));
	free(msg);
	args_free(&a);
	/* build_gpt_index takes a whole train command line and ignores the model's flags */
	char *argv2[] = { "build_gpt_index", "--tokenizer-type", "NullTokenizer", "--fp8-format", "hybrid",
			  "--profile-ranks", "0", "1", "--seq-length", "8", NULL };
	CHECK_INT(parse_capture(&a, &gi, argv2, &msg), 0);
	free(msg);
	args_free(&a);
}

/* docs/flags.md is what the tables generate (make docs/flags.md). */
static void test_flags_doc_current(void)
{
	size_t len;
	char *doc = test_read_file("docs/flags.md", &len);
	CHECK(doc != NULL);
	char *gen = NULL;
	size_t glen = 0;
	FILE *f = open_memstream(&gen, &glen);
	args_write_flags_md(f);
	fclose(f);
	CHECK(doc && glen == len && !memcmp(doc, gen, len));
	if (!doc || glen != len || memcmp(doc, gen, len))
		printf("# docs/flags.md is stale: run make docs/flags.md\n");
	CHECK(gen && strstr(gen, "| `--fp4-format` | refused | FP4 training"));
	CHECK(gen && strstr(gen, "| `--attention-backend` | no effect |"));
	free(doc);
	free(gen);
}

int main(void)
{
	load_fixture();
	RUN(test_fixture_is_whole);
	RUN(test_every_megatron_flag_has_a_row);
	RUN(test_megatron_rows_match_megatron);
	RUN(test_train_rows_arity);
	RUN(test_megatron_choices);
	RUN(test_every_megatron_row_parses);
	RUN(test_all_problems_in_one_message);
	RUN(test_no_effect_line_and_values);
	RUN(test_integer_ranges);
	RUN(test_other_programs);
	RUN(test_flags_doc_current);
	free(fx);
	return test_summary();
}
