/*
 * flags.c - the command-line parser over args_table (see args.h).
 *
 * Megatron's argparse semantics where they matter to users: `--x V` and
 * `--x=V`; list flags take every following word up to the next flag; the
 * last occurrence of a flag wins; store_true / store_false booleans.
 * Kinder than argparse: no prefix abbreviations (a typo is never silently
 * taken for another flag), an unknown flag names the closest real one, and
 * a flag of another program or a Megatron flag megac lacks says so.
 */
#include "args.h"
#include "error.h"
#include "sbuf.h"
#include "xalloc.h"

#include <errno.h>
#include <stdarg.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#define FIELD(a, d, type) ((type *)((char *)(a) + (d)->off))

size_t edit_distance(const char *a, const char *b)
{
	size_t la = strlen(a), lb = strlen(b);
	size_t *row = xmalloc((lb + 1) * sizeof(*row));
	for (size_t j = 0; j <= lb; j++)
		row[j] = j;
	for (size_t i = 1; i <= la; i++) {
		size_t diag = row[0];
		row[0] = i;
		for (size_t j = 1; j <= lb; j++) {
			size_t up = row[j];
			size_t best = diag + (a[i - 1] != b[j - 1]);
			if (up + 1 < best)
				best = up + 1;
			if (row[j - 1] + 1 < best)
				best = row[j - 1] + 1;
			row[j] = best;
			diag = up;
		}
	}
	size_t d = row[lb];
	free(row);
	return d;
}

/*
 * The problems of one command line, collected so that a user fixes them all
 * in one edit: each is one line; refusals of Megatron flags are kept apart
 * and grouped by reason at the end.
 */
struct problems {
	struct sbuf sb;
	int n;
	const char *refused[1024]; /* names of refused flags, in order given */
	const char *why[1024];     /* their reasons (pointers shared within a feature) */
	int nrefused;
	char *owned[16];           /* labels made for refused values ("--x value") */
	int nowned;
};

static int problem(struct problems *P, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static int problem(struct problems *P, const char *fmt, ...)
{
	char buf[2048];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(buf, sizeof(buf), fmt, ap);
	va_end(ap);
	sbuf_addf(&P->sb, "%s%s", P->n ? "\n  " : "", buf);
	P->n++;
	return -1;
}

static void refuse(struct problems *P, const char *name, const char *why)
{
	if (!why)
		return;
	for (int i = 0; i < P->nrefused; i++)
		if (!strcmp(P->refused[i], name))
			return;
	if (P->nrefused < (int)(sizeof(P->refused) / sizeof(P->refused[0]))) {
		P->refused[P->nrefused] = name;
		P->why[P->nrefused++] = why;
	}
}

/* Megatron's Python ints are unbounded; megac's counts and sizes are C ints
 * (sizes and products of them are checked where they are used), so an
 * integer flag is refused outside the 32-bit range unless it counts samples,
 * bytes or other quantities that may pass 2^31. */
static const char *const int64_flags[] = {
	"--train-samples", "--lr-decay-samples", "--lr-warmup-samples", "--lr-wsd-decay-samples",
	"--max-body-bytes", "--ddp-bucket-size", "--document", "--max-documents", "--seed",
};

static bool int64_flag(const char *flag)
{
	for (size_t i = 0; i < sizeof(int64_flags) / sizeof(int64_flags[0]); i++)
		if (!strcmp(int64_flags[i], flag))
			return true;
	return false;
}

static int parse_int(struct problems *P, const char *flag, const char *s, int64_t *out)
{
	char *end;
	errno = 0;
	long long v = strtoll(s, &end, 10);
	if (!*s || *end || (errno && errno != ERANGE))
		return problem(P, "%s: expected an integer, got '%s'", flag, s);
	if (errno == ERANGE || (!int64_flag(flag) && (v > INT32_MAX || v < INT32_MIN)))
		return problem(P, "%s: %s is out of range (at most %lld)", flag, s,
			       int64_flag(flag) ? (long long)INT64_MAX : (long long)INT32_MAX);
	*out = v;
	return 0;
}

static int parse_float(struct problems *P, const char *flag, const char *s, double *out)
{
	char *end;
	errno = 0;
	double v = strtod(s, &end);
	if (!*s || *end || errno || !isfinite(v))
		return problem(P, "%s: expected a number, got '%s'", flag, s);
	*out = v;
	return 0;
}

static int check_choice(struct problems *P, const struct flag_def *d, const char *v)
{
	if (!d->choices)
		return 0;
	size_t n = strlen(v);
	const char *c = d->choices, *best = NULL;
	size_t bestd = (size_t)-1, bestlen = 0;
	while (*c) {
		const char *bar = strchr(c, '|');
		size_t len = bar ? (size_t)(bar - c) : strlen(c);
		if (len == n && !strncmp(c, v, n))
			return 0;
		char *cand = xstrndup(c, len);
		size_t dist = edit_distance(cand, v);
		free(cand);
		if (dist < bestd) {
			bestd = dist;
			best = c;
			bestlen = len;
		}
		c += len + (bar ? 1 : 0);
	}
	struct sbuf sb = SBUF_INIT;
	for (const char *p = d->choices; *p; p++)
		sbuf_addstr(&sb, *p == '|' ? ", " : (char[]){ *p, 0 });
	if (best && bestd <= 3)
		problem(P, "%s: invalid choice '%s' (did you mean '%.*s'?); choose from %s", d->name, v,
			(int)bestlen, best, sb.buf);
	else
		problem(P, "%s: invalid choice '%s'; choose from %s", d->name, v, sb.buf);
	sbuf_release(&sb);
	return -1;
}

void strlist_free(struct strlist *l)
{
	for (int i = 0; i < l->n; i++)
		free(l->v[i]);
	free(l->v);
	l->v = NULL;
	l->n = 0;
}

static void free_intlist(struct intlist *l)
{
	free(l->v);
	l->v = NULL;
	l->n = 0;
}

/* Store the values vals[0..n) into the field of d. */
static int set_value(struct problems *P, struct args *a, const struct flag_def *d, char **vals, int n)
{
	switch (d->kind) {
	case FK_BOOL:
		*FIELD(a, d, bool) = true;
		return 0;
	case FK_BOOL_NEG:
		*FIELD(a, d, bool) = false;
		return 0;
	case FK_INT:
		return parse_int(P, d->name, vals[0], FIELD(a, d, int64_t));
	case FK_FLOAT:
		return parse_float(P, d->name, vals[0], FIELD(a, d, double));
	case FK_STR: {
		if (check_choice(P, d, vals[0]) < 0)
			return -1;
		char **f = FIELD(a, d, char *);
		free(*f);
		*f = xstrdup(vals[0]);
		return 0;
	}
	case FK_STRS: {
		struct strlist *l = FIELD(a, d, struct strlist);
		strlist_free(l);
		l->v = xcalloc((size_t)n, sizeof(char *));
		for (int i = 0; i < n; i++) {
			if (check_choice(P, d, vals[i]) < 0)
				return -1;
			l->v[l->n++] = xstrdup(vals[i]);
		}
		return 0;
	}
	case FK_INTS: {
		struct intlist *l = FIELD(a, d, struct intlist);
		free_intlist(l);
		l->v = xcalloc((size_t)n, sizeof(int64_t));
		for (int i = 0; i < n; i++) {
			if (parse_int(P, d->name, vals[i], &l->v[i]) < 0)
				return -1;
			l->n++;
		}
		return 0;
	}
	case FK_UNSUPPORTED:
		break;
	}
	BUG("set_value on flag %s of kind %d", d->name, d->kind);
}

static int takes_value(const struct flag_def *d)
{
	return d->kind != FK_BOOL && d->kind != FK_BOOL_NEG;
}

static int is_list(const struct flag_def *d)
{
	return d->kind == FK_STRS || d->kind == FK_INTS;
}

/* Split a default like "16 32 64" into words and store them. */
static void set_default(struct args *a, const struct flag_def *d)
{
	switch (d->kind) {
	case FK_BOOL: /* off, unless it spells out the default of a --no-x twin ("true") */
		*FIELD(a, d, bool) = d->def && !strcmp(d->def, "true");
		return;
	case FK_BOOL_NEG:
		*FIELD(a, d, bool) = true;
		return;
	case FK_UNSUPPORTED:
		return;
	default:
		break;
	}
	if (!d->def)
		return; /* zero-initialised: NULL string, empty list */
	char *copy = xstrdup(d->def);
	char *words[64];
	int n = 0;
	for (char *save = NULL, *w = strtok_r(copy, " ", &save); w && n < 64; w = strtok_r(NULL, " ", &save))
		words[n++] = w;
	struct problems P = { .sb = SBUF_INIT };
	if (set_value(&P, a, d, words, n) < 0)
		BUG("bad default '%s' for %s: %s", d->def, d->name, P.sb.buf);
	free(copy);
}

static const struct flag_def *find_flag(const struct prog_info *p, const char *name, size_t len,
					 const struct flag_def **other)
{
	*other = NULL;
	for (size_t i = 0; i < args_table_len; i++) {
		const struct flag_def *d = &args_table[i];
		if (strlen(d->name) != len || strncmp(d->name, name, len))
			continue;
		if (d->progs & (p->id | p->ignore))
			return d;
		*other = d;
	}
	return NULL;
}

static const char *prog_name_of(unsigned progs)
{
	static const struct { unsigned id; const char *name; } names[] = {
		{ PROG_TRAIN, "train" },
		{ PROG_PREPROCESS, "preprocess_data" },
		{ PROG_MERGE, "merge_datasets" },
		{ PROG_CONVERT, "ckpt_convert" },
		{ PROG_MEMCALC, "report_memory" },
		{ PROG_INFER, "text_gen_server" },
		{ PROG_DATAINFO, "dataset_info" },
		{ PROG_GPTINDEX, "build_gpt_index" },
	};
	for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++)
		if (progs & names[i].id)
			return names[i].name;
	return "another program";
}

static void unknown_flag(struct problems *P, const struct prog_info *p, const char *arg, size_t len)
{
	char *name = xstrndup(arg, len);
	const struct flag_def *best = NULL;
	size_t bestd = (size_t)-1;
	for (size_t i = 0; i < args_table_len; i++) {
		const struct flag_def *d = &args_table[i];
		if (!(d->progs & p->id) || d->kind == FK_UNSUPPORTED)
			continue;
		size_t dist = edit_distance(d->name, name);
		if (dist < bestd) {
			bestd = dist;
			best = d;
		}
	}
	size_t limit = len / 3 > 3 ? len / 3 : 3;
	if (best && bestd <= limit)
		problem(P, "unknown flag '%s'; did you mean '%s'?", name, best->name);
	else
		problem(P, "unknown flag '%s'", name);
	free(name);
}

static void init_defaults(struct args *a, const struct prog_info *p)
{
	if (args_table_len > sizeof(a->given))
		BUG("args_table has %zu rows, given[] holds %zu", args_table_len, sizeof(a->given));
	if (megatron_flags_len > sizeof(a->given_megatron))
		BUG("megatron_flags has %zu rows, given_megatron[] holds %zu", megatron_flags_len,
		    sizeof(a->given_megatron));
	memset(a, 0, sizeof(*a));
	for (size_t i = 0; i < args_table_len; i++)
		set_default(a, &args_table[i]);
	/* a field shared by rows of several programs takes the default of this
	 * program's row (report_memory's --device plans for cuda, train's
	 * --device is auto) */
	for (size_t i = 0; i < args_table_len; i++)
		if (args_table[i].progs & p->id)
			set_default(a, &args_table[i]);
}

/* Megatron's training flags apply to train and to the programs that take
 * train's command line (report_memory; build_gpt_index ignores them). */
static const struct megatron_flag *find_megatron_flag(const char *name, size_t len)
{
	for (size_t i = 0; i < megatron_flags_len; i++)
		if (strlen(megatron_flags[i].name) == len && !strncmp(megatron_flags[i].name, name, len))
			return &megatron_flags[i];
	return NULL;
}

static bool in_choices(const char *choices, const char *v)
{
	size_t n = strlen(v);
	for (const char *c = choices; *c;) {
		const char *bar = strchr(c, '|');
		size_t len = bar ? (size_t)(bar - c) : strlen(c);
		if (len == n && !strncmp(c, v, n))
			return true;
		c += len + (bar ? 1 : 0);
	}
	return false;
}

/* "--position-embedding-type yarn": a Megatron value megac does not have. */
static void refuse_value(struct problems *P, const char *flag, const char *v)
{
	for (size_t k = 0; k < args_refused_values_len; k++) {
		const struct refused_value *r = &args_refused_values[k];
		if (strcmp(r->flag, flag) || in_choices(r->megac, v))
			continue;
		if (P->nowned < (int)(sizeof(P->owned) / sizeof(P->owned[0]))) {
			char *label = xmalloc(strlen(flag) + strlen(v) + 2);
			sprintf(label, "%s %s", flag, v);
			P->owned[P->nowned++] = label;
			refuse(P, label, r->why);
		}
	}
}

/* How many of argv[i+1..] are values of a flag taking `arity` of them. */
static int count_values(int argc, char **argv, int i, int arity)
{
	int max = arity >= 0 ? arity : argc - i - 1;
	if (max > argc - i - 1)
		max = argc - i - 1;
	int n = 0;
	/* a value may start with '-' (a negative number, '-' for stdin) but not '--x' */
	while (n < max && !(argv[i + 1 + n][0] == '-' && argv[i + 1 + n][1] == '-' && argv[i + 1 + n][2]))
		n++;
	return n;
}

/* One message for everything wrong with the command line; returns -1. */
static int report(struct problems *P, const struct prog_info *p)
{
	/* refusals grouped by reason, in the order first given */
	for (int i = 0; i < P->nrefused; i++) {
		if (!P->why[i])
			continue;
		struct sbuf names = SBUF_INIT;
		int n = 0;
		bool values = true; /* "flag value" pairs only */
		const char *why = P->why[i];
		for (int j = i; j < P->nrefused; j++) {
			if (P->why[j] != why)
				continue;
			sbuf_addf(&names, "%s%s", n ? ", " : "", P->refused[j]);
			values &= strchr(P->refused[j], ' ') != NULL;
			P->why[j] = NULL;
			n++;
		}
		if (values)
			problem(P, "%s: %s", names.buf, why);
		else
			problem(P, "%s %s that megac does not support: %s", names.buf,
				n > 1 ? "are Megatron flags" : "is a Megatron flag", why);
		sbuf_release(&names);
	}
	if (P->n == 1)
		error("%s (%s --help lists every flag)", P->sb.buf, p->name);
	else
		error("the command line has %d problems (%s --help lists every flag):\n  %s", P->n, p->name,
		      P->sb.buf);
	sbuf_release(&P->sb);
	return -1;
}

int args_parse(struct args *a, const struct prog_info *p, int argc, char **argv)
{
	init_defaults(a, p);
	struct problems *P = xcalloc(1, sizeof(*P));
	P->sb = (struct sbuf)SBUF_INIT;
	bool megatron_prog = (p->id | p->ignore) & (PROG_TRAIN | PROG_MEMCALC);
	bool megatron_ignored = !(p->id & (PROG_TRAIN | PROG_MEMCALC));
	for (int i = 1; i < argc; i++) {
		const char *arg = argv[i];
		if (!strcmp(arg, "--help") || !strcmp(arg, "-h")) {
			args_help(p, stdout);
			sbuf_release(&P->sb);
			free(P);
			return 1;
		}
		if (strncmp(arg, "--", 2) || !arg[2]) {
			problem(P, "unexpected argument '%s' (every value follows a --flag)", arg);
			continue;
		}
		const char *eq = strchr(arg, '=');
		size_t len = eq ? (size_t)(eq - arg) : strlen(arg);
		const struct flag_def *other;
		const struct flag_def *d = find_flag(p, arg, len, &other);
		const struct megatron_flag *m = d || !megatron_prog ? NULL : find_megatron_flag(arg, len);
		if (m) {
			int n = eq ? 1 : count_values(argc, argv, i, m->arity);
			if (!eq)
				i += n;
			if (megatron_ignored)
				continue;
			if (m->arity == 0 && eq)
				problem(P, "%s takes no value (got '%s')", m->name, eq + 1);
			else if (!eq && m->arity != 0 && m->arity != MF_LIST0 && n < (m->arity > 0 ? m->arity : 1))
				problem(P, "%s needs %s", m->name,
					m->arity == MF_LIST ? "one or more values" :
					m->arity == 1 ? "a value" : "more values");
			else if (m->status == MF_REFUSED)
				refuse(P, m->name, m->why);
			else
				a->given_megatron[m - megatron_flags] = 1;
			continue;
		}
		if (!d) {
			/* step over its values, so they do not read as stray arguments */
			if (!eq)
				i += count_values(argc, argv, i, other && !takes_value(other) ? 0 : 1);
			if (other)
				problem(P, "flag '%.*s' belongs to %s; %s does not take it", (int)len, arg,
					prog_name_of(other->progs), p->name);
			else if (megatron_prog || !find_megatron_flag(arg, len))
				unknown_flag(P, p, arg, len);
			else
				problem(P, "%.*s is a flag of Megatron's training; %s does not take it", (int)len, arg,
					p->name);
			continue;
		}
		if (d->kind == FK_UNSUPPORTED) {
			if (!eq)
				i += count_values(argc, argv, i, d->metavar ? 1 : 0);
			refuse(P, d->name, d->help);
			continue;
		}
		a->given[d - args_table] = 1;
		if (!(d->progs & p->id))
			a->ignored[d - args_table] = 1;
		if (!takes_value(d)) {
			if (eq)
				problem(P, "%s takes no value (got '%s')", d->name, eq + 1);
			else
				set_value(P, a, d, NULL, 0);
			continue;
		}
		char *one[1];
		char **vals;
		int n;
		if (eq) {
			one[0] = (char *)eq + 1;
			vals = one;
			n = 1;
		} else {
			vals = &argv[i + 1];
			n = count_values(argc, argv, i, is_list(d) ? MF_LIST : 1);
			i += n;
		}
		if (n == 0) {
			problem(P, "%s needs %s", d->name, is_list(d) ? "one or more values" : "a value");
			continue;
		}
		if (set_value(P, a, d, vals, n) < 0)
			continue;
		if (d->kind == FK_STR && (d->progs & p->id))
			refuse_value(P, d->name, *FIELD(a, d, char *));
		for (int k = 0; d->kind == FK_STRS && (d->progs & p->id) && k < FIELD(a, d, struct strlist)->n; k++)
			refuse_value(P, d->name, FIELD(a, d, struct strlist)->v[k]);
	}
	for (size_t i = 0; i < args_table_len; i++) {
		const struct flag_def *d = &args_table[i];
		if (!(d->required & p->id) || !(d->progs & p->id))
			continue;
		/* --use-checkpoint-args: the checkpoint gives the model's sizes */
		bool later = false;
		for (int k = 0; a->use_checkpoint_args && args_checkpoint_sizes[k]; k++)
			later |= !strcmp(d->name, args_checkpoint_sizes[k]);
		if (later)
			continue;
		/* a hybrid model's pattern gives its number of layers (Megatron's rule) */
		if (!strcmp(d->name, "--num-layers") && (a->hybrid_layer_pattern || a->hybrid_override_pattern))
			continue;
		bool given = false; /* the flag, or another name of it (--load-dir for --load) */
		for (size_t j = 0; j < args_table_len; j++)
			given |= a->given[j] && args_table[j].off == d->off && args_table[j].kind == d->kind &&
				 (args_table[j].progs & p->id);
		if (!given)
			problem(P, "missing required flag %s%s%s", d->name, d->metavar ? " " : "",
				d->metavar ? d->metavar : "");
	}
	int r = P->n || P->nrefused ? report(P, p) : 0;
	sbuf_release(&P->sb);
	for (int i = 0; i < P->nowned; i++)
		free(P->owned[i]);
	free(P);
	return r;
}

/* The flags given that this program ignores, as one string (caller frees), or NULL. */
char *args_ignored(const struct args *a)
{
	struct sbuf sb = SBUF_INIT;
	for (size_t i = 0; i < args_table_len; i++)
		if (a->ignored[i])
			sbuf_addf(&sb, "%s%s", sb.len ? " " : "", args_table[i].name);
	return sb.len ? sbuf_detach(&sb, NULL) : NULL;
}

char *args_no_effect(const struct args *a)
{
	struct sbuf sb = SBUF_INIT;
	for (size_t i = 0; i < args_table_len; i++)
		if (a->given[i] && args_table[i].no_effect)
			sbuf_addf(&sb, "%s%s", sb.len ? " " : "", args_table[i].name);
	for (size_t i = 0; i < megatron_flags_len; i++)
		if (a->given_megatron[i])
			sbuf_addf(&sb, "%s%s", sb.len ? " " : "", megatron_flags[i].name);
	return sb.len ? sbuf_detach(&sb, NULL) : NULL;
}

bool args_given(const struct args *a, const char *name)
{
	for (size_t i = 0; i < args_table_len; i++)
		if (a->given[i] && !strcmp(args_table[i].name, name))
			return true;
	for (size_t i = 0; i < megatron_flags_len; i++) /* accepted without effect */
		if (a->given_megatron[i] && !strcmp(megatron_flags[i].name, name))
			return true;
	return false;
}

void args_help(const struct prog_info *p, FILE *out)
{
	fprintf(out, "usage: %s [flags]\n\n%s\n\nexample:\n  %s\n", p->name, p->summary, p->example);
	const char *groups[64];
	int ng = 0;
	for (size_t i = 0; i < args_table_len; i++) {
		const struct flag_def *d = &args_table[i];
		if (!(d->progs & p->id))
			continue;
		int seen = 0;
		for (int g = 0; g < ng; g++)
			seen |= !strcmp(groups[g], d->group);
		if (!seen && ng < 64)
			groups[ng++] = d->group;
	}
	for (int g = 0; g < ng; g++) {
		fprintf(out, "\n%s:\n", groups[g]);
		for (size_t i = 0; i < args_table_len; i++) {
			const struct flag_def *d = &args_table[i];
			if (!(d->progs & p->id) || strcmp(d->group, groups[g]))
				continue;
			struct sbuf left = SBUF_INIT;
			sbuf_addf(&left, "  %s", d->name);
			if (takes_value(d) && d->metavar)
				sbuf_addf(&left, " %s%s", d->metavar, is_list(d) ? "..." : "");
			fprintf(out, "%-40s", left.buf);
			if (left.len >= 40)
				fprintf(out, "\n%-40s", "");
			if (d->kind == FK_UNSUPPORTED)
				fprintf(out, "not supported: ");
			fprintf(out, "%s", d->help);
			if (d->choices) {
				fprintf(out, " [");
				for (const char *c = d->choices; *c; c++)
					fputs(*c == '|' ? ", " : (char[]){ *c, 0 }, out);
				fprintf(out, "]");
			}
			if (d->required & p->id)
				fprintf(out, " (required)");
			else if (d->def && takes_value(d) && strcmp(d->def, "-1"))
				fprintf(out, " (default: %s)", d->def);
			fprintf(out, "\n");
			sbuf_release(&left);
		}
	}
}

void args_free(struct args *a)
{
	for (size_t i = 0; i < args_table_len; i++) {
		const struct flag_def *d = &args_table[i];
		switch (d->kind) {
		case FK_STR: {
			char **f = FIELD(a, d, char *);
			free(*f);
			*f = NULL;
			break;
		}
		case FK_STRS:
			strlist_free(FIELD(a, d, struct strlist));
			break;
		case FK_INTS:
			free_intlist(FIELD(a, d, struct intlist));
			break;
		default:
			break;
		}
	}
}

/* This process's rank as the launcher numbered it (mpirun, srun), before
 * MPI is up: only the first says the start-up lines of the flags. */
static bool first_rank(void)
{
	static const char *const vars[] = { "OMPI_COMM_WORLD_RANK", "PMI_RANK", "PMIX_RANK", "SLURM_PROCID" };
	for (size_t i = 0; i < sizeof(vars) / sizeof(vars[0]); i++) {
		const char *v = getenv(vars[i]);
		if (v && *v)
			return atoi(v) == 0;
	}
	return true;
}

int prog_main(int argc, char **argv, const struct prog_info *p, int (*cmd)(const struct args *a))
{
	struct args a;
	log_init(argv[0], 0, 1);
	int r = args_parse(&a, p, argc, argv);
	if (r == 0 && a.logging_level >= 0)
		log_set_level((int)a.logging_level);
	if (r == 0 && first_rank()) {
		char *none = args_no_effect(&a);
		if (none)
			info("accepted, no effect in megac: %s (docs/flags.md says why)", none);
		free(none);
	}
	if (r == 0)
		r = cmd(&a);
	args_free(&a);
	return r < 0 ? DIE_EXIT_CODE : 0;
}
