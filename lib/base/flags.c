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

static int parse_int(const char *flag, const char *s, int64_t *out)
{
	char *end;
	errno = 0;
	long long v = strtoll(s, &end, 10);
	if (!*s || *end || errno)
		return error("%s: expected an integer, got '%s'", flag, s);
	*out = v;
	return 0;
}

static int parse_float(const char *flag, const char *s, double *out)
{
	char *end;
	errno = 0;
	double v = strtod(s, &end);
	if (!*s || *end || errno || !isfinite(v))
		return error("%s: expected a number, got '%s'", flag, s);
	*out = v;
	return 0;
}

static int check_choice(const struct flag_def *d, const char *v)
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
		error("%s: invalid choice '%s' (did you mean '%.*s'?); choose from %s", d->name, v,
		      (int)bestlen, best, sb.buf);
	else
		error("%s: invalid choice '%s'; choose from %s", d->name, v, sb.buf);
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
static int set_value(struct args *a, const struct flag_def *d, char **vals, int n)
{
	switch (d->kind) {
	case FK_BOOL:
		*FIELD(a, d, bool) = true;
		return 0;
	case FK_BOOL_NEG:
		*FIELD(a, d, bool) = false;
		return 0;
	case FK_INT:
		return parse_int(d->name, vals[0], FIELD(a, d, int64_t));
	case FK_FLOAT:
		return parse_float(d->name, vals[0], FIELD(a, d, double));
	case FK_STR: {
		if (check_choice(d, vals[0]) < 0)
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
			if (check_choice(d, vals[i]) < 0)
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
			if (parse_int(d->name, vals[i], &l->v[i]) < 0)
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
	if (set_value(a, d, words, n) < 0)
		BUG("bad default '%s' for %s", d->def, d->name);
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

static int unknown_flag(const struct prog_info *p, const char *arg, size_t len)
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
		error("unknown flag '%s'; did you mean '%s'? (%s --help lists every flag)", name, best->name,
		      p->name);
	else
		error("unknown flag '%s' (%s --help lists every flag)", name, p->name);
	free(name);
	return -1;
}

static void init_defaults(struct args *a)
{
	if (args_table_len > sizeof(a->given))
		BUG("args_table has %zu rows, given[] holds %zu", args_table_len, sizeof(a->given));
	memset(a, 0, sizeof(*a));
	for (size_t i = 0; i < args_table_len; i++)
		set_default(a, &args_table[i]);
}

int args_parse(struct args *a, const struct prog_info *p, int argc, char **argv)
{
	init_defaults(a);
	for (int i = 1; i < argc; i++) {
		const char *arg = argv[i];
		if (!strcmp(arg, "--help") || !strcmp(arg, "-h")) {
			args_help(p, stdout);
			return 1;
		}
		if (strncmp(arg, "--", 2) || !arg[2])
			return error("unexpected argument '%s' (every value follows a --flag; %s --help lists them)",
				     arg, p->name);
		const char *eq = strchr(arg, '=');
		size_t len = eq ? (size_t)(eq - arg) : strlen(arg);
		const struct flag_def *other;
		const struct flag_def *d = find_flag(p, arg, len, &other);
		if (!d) {
			if (other)
				return error("flag '%.*s' belongs to %s; %s does not take it", (int)len, arg,
					     prog_name_of(other->progs), p->name);
			return unknown_flag(p, arg, len);
		}
		if (d->kind == FK_UNSUPPORTED)
			return error("%s is a Megatron flag that megac does not support: %s", d->name, d->help);
		a->given[d - args_table] = 1;
		if (!(d->progs & p->id))
			a->ignored[d - args_table] = 1;
		if (!takes_value(d)) {
			if (eq)
				return error("%s takes no value (got '%s')", d->name, eq + 1);
			set_value(a, d, NULL, 0);
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
			n = 0;
			int max = is_list(d) ? argc - i - 1 : (i + 1 < argc ? 1 : 0);
			/* a value may start with '-' (a negative number, '-' for stdin) but not '--x' */
			while (n < max && !(vals[n][0] == '-' && vals[n][1] == '-' && vals[n][2]))
				n++;
			i += n;
		}
		if (n == 0)
			return error("%s needs %s", d->name,
				     is_list(d) ? "one or more values" : "a value");
		if (set_value(a, d, vals, n) < 0)
			return -1;
	}
	for (size_t i = 0; i < args_table_len; i++) {
		const struct flag_def *d = &args_table[i];
		if ((d->required & p->id) && (d->progs & p->id) && !a->given[i])
			return error("missing required flag %s%s%s (%s --help lists every flag)", d->name,
				     d->metavar ? " " : "", d->metavar ? d->metavar : "", p->name);
	}
	return 0;
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

bool args_given(const struct args *a, const char *name)
{
	for (size_t i = 0; i < args_table_len; i++)
		if (a->given[i] && !strcmp(args_table[i].name, name))
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

int prog_main(int argc, char **argv, const struct prog_info *p, int (*cmd)(const struct args *a))
{
	struct args a;
	log_init(argv[0], 0, 1);
	int r = args_parse(&a, p, argc, argv);
	if (r == 0)
		r = cmd(&a);
	args_free(&a);
	return r < 0 ? DIE_EXIT_CODE : 0;
}
