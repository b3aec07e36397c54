/*
 * flags_doc.c - docs/flags.md, written from the two flag tables (args.h).
 *
 * The document is generated, never edited: `make docs/flags.md` rewrites
 * it and a unit test fails when the committed copy differs from what the
 * tables say. One section per program, each flag with its status:
 *   yes        implemented, with Megatron's meaning
 *   megac      a megac flag Megatron does not have (marked "(megac)")
 *   no effect  a Megatron flag accepted and ignored: it only picks a kernel,
 *              a speed path or a Python mechanism; train lists the ones
 *              given in one start-up line
 *   refused    a Megatron flag megac does not have yet: the program stops
 *              (exit 128) and says why and what to use instead
 */
#include "args.h"

#include <string.h>

static const struct {
	unsigned id;
	const char *name;
} progs[] = {
	{ PROG_TRAIN, "train" },
	{ PROG_MEMCALC, "report_memory" },
	{ PROG_PREPROCESS, "preprocess_data" },
	{ PROG_MERGE, "merge_datasets" },
	{ PROG_DATAINFO, "dataset_info" },
	{ PROG_GPTINDEX, "build_gpt_index" },
	{ PROG_CONVERT, "ckpt_convert" },
	{ PROG_INFER, "text_gen_server" },
};

/* Markdown table cells: no '|' or newline inside. */
static void cell(FILE *out, const char *s)
{
	for (; s && *s; s++) {
		if (*s == '|')
			fputs("\\|", out);
		else
			fputc(*s == '\n' ? ' ' : *s, out);
	}
}

static const char *status_of(const struct flag_def *d)
{
	if (d->kind == FK_UNSUPPORTED)
		return "refused";
	if (d->no_effect)
		return "no effect";
	if (strstr(d->help, "(megac)"))
		return "megac";
	return "yes";
}

/* The rows of program id; skip: programs whose rows are listed already. */
static void program_table(FILE *out, unsigned id, unsigned skip)
{
	fprintf(out, "| flag | status | default | what megac does |\n| --- | --- | --- | --- |\n");
	for (size_t i = 0; i < args_table_len; i++) {
		const struct flag_def *d = &args_table[i];
		if (!(d->progs & id) || (d->progs & skip))
			continue;
		fprintf(out, "| `%s` | %s | ", d->name, status_of(d));
		if (d->required & id)
			fputs("required", out);
		else if (d->def && d->kind != FK_BOOL && d->kind != FK_BOOL_NEG && strcmp(d->def, "-1"))
			fprintf(out, "`%s`", d->def);
		fputs(" | ", out);
		cell(out, d->help);
		if (d->choices) {
			fputs(" (", out);
			cell(out, d->choices);
			fputs(")", out);
		}
		for (size_t k = 0; k < args_refused_values_len; k++) {
			if (strcmp(args_refused_values[k].flag, d->name))
				continue;
			fputs("; values other than ", out);
			cell(out, args_refused_values[k].megac);
			fputs(" are refused: ", out);
			cell(out, args_refused_values[k].why);
		}
		fputs(" |\n", out);
	}
}

void args_write_flags_md(FILE *out)
{
	fputs("# Flags\n\n"
	      "Generated from megac's flag tables (`lib/base/args_table.c`, `lib/base/args_megatron.c`) by\n"
	      "`make docs/flags.md`; do not edit. Every program takes `--help` with the same text.\n\n"
	      "Status: **yes**, implemented with Megatron's meaning; **megac**, a megac flag Megatron does\n"
	      "not have; **no effect**, a Megatron flag accepted and ignored because it only selects one of\n"
	      "Megatron's kernels, speed paths or Python mechanisms (the numbers are the same; `train` names\n"
	      "the ones given in one start-up line, `accepted, no effect in megac: ...`); **refused**, a\n"
	      "Megatron flag megac does not have yet: the program stops with exit status 128 and one message\n"
	      "naming every such flag, why, and what to use instead.\n\n"
	      "Every flag of Megatron-LM's training parser (`pretrain_gpt.py --help`) is listed under `train`;\n"
	      "a unit test checks the tables against that list (`tests/fixtures/megatron_flags.tsv`). Integer\n"
	      "flags are refused outside the 32-bit range, except those counting samples or bytes.\n",
	      out);
	for (size_t p = 0; p < sizeof(progs) / sizeof(progs[0]); p++) {
		fprintf(out, "\n## %s\n\n", progs[p].name);
		if (progs[p].id == PROG_MEMCALC)
			fputs("report_memory takes train's whole command line (the flags of train above, Megatron's "
			      "included) and these:\n\n", out);
		if (progs[p].id == PROG_GPTINDEX)
			fputs("build_gpt_index takes train's whole command line and uses the data flags; these are its "
			      "own:\n\n", out);
		unsigned skip = progs[p].id == PROG_MEMCALC || progs[p].id == PROG_GPTINDEX ? PROG_TRAIN : 0;
		program_table(out, progs[p].id, skip);
		if (progs[p].id != PROG_TRAIN)
			continue;
		fputs("\n### Megatron's other training flags\n\n"
		      "The rest of Megatron's training parser, in its order.\n\n"
		      "| flag | status | why |\n| --- | --- | --- |\n", out);
		for (size_t i = 0; i < megatron_flags_len; i++) {
			const struct megatron_flag *m = &megatron_flags[i];
			fprintf(out, "| `%s` | %s | ", m->name, m->status == MF_REFUSED ? "refused" : "no effect");
			cell(out, m->why);
			fputs(" |\n", out);
		}
	}
}
