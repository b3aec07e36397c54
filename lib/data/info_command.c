/*
 * info_command.c - dataset_info: what an indexed dataset holds (header,
 * counts, length statistics) and, on request, one document's ids and text.
 * Megatron has no such tool; users otherwise reach for numpy to look inside.
 */
#include "commands.h"
#include "base/error.h"
#include "base/sbuf.h"
#include "base/xalloc.h"
#include "data/idx.h"

#include <stdio.h>
#include <stdlib.h>

const struct prog_info info_prog_info = {
	"dataset_info",
	PROG_DATAINFO,
	"Print the header and statistics of a Megatron indexed dataset (PREFIX.bin/.idx), after\n"
	"checking it like train does; with --document, that document's ids, decoded when tokenizer\n"
	"flags are given.",
	"dataset_info --input data/my_text_document --document 0 --tokenizer-type GPT2BPETokenizer "
	"--vocab-file gpt2-vocab.json --merge-file gpt2-merges.txt",
	0,
};

static int64_t token_at(const struct idx_reader *r, const void *p, size_t i)
{
	switch (r->dtype) {
	case IDX_UINT8:
		return ((const uint8_t *)p)[i];
	case IDX_INT8:
		return ((const int8_t *)p)[i];
	case IDX_INT16:
		return ((const int16_t *)p)[i];
	case IDX_UINT16:
		return ((const uint16_t *)p)[i];
	case IDX_INT32:
		return ((const int32_t *)p)[i];
	case IDX_INT64:
		return ((const int64_t *)p)[i];
	default:
		return -1; /* float datasets hold no token ids */
	}
}

int info_command(const struct args *a)
{
	if (a->input.n != 1)
		return error("--input takes one dataset prefix (got %d values)", a->input.n);
	struct idx_reader r;
	if (idx_reader_open(&r, a->input.v[0], a->multimodal) < 0)
		return -1;
	uint64_t docs = r.n_doc_entries - 1, empty = 0, tokens = r.bin_size / r.itemsize;
	int32_t minlen = INT32_MAX, maxlen = 0;
	for (uint64_t d = 0; d < docs; d++)
		empty += idx_doc(&r, d + 1) == idx_doc(&r, d);
	for (uint64_t i = 0; i < r.n_seqs; i++) {
		int32_t len = idx_length(&r, i);
		if (len < minlen)
			minlen = len;
		if (len > maxlen)
			maxlen = len;
	}
	printf("dataset     %s\n", a->input.v[0]);
	printf("dtype       %s (code %d)\n", idx_dtype_name(r.dtype), r.dtype);
	printf("documents   %llu (%llu empty)\n", (unsigned long long)docs, (unsigned long long)empty);
	printf("sequences   %llu (length %d to %d, mean %.1f tokens)\n", (unsigned long long)r.n_seqs,
	       r.n_seqs ? minlen : 0, maxlen, r.n_seqs ? (double)tokens / (double)r.n_seqs : 0.0);
	printf("tokens      %llu\n", (unsigned long long)tokens);
	int ret = 0;
	if (a->document >= 0 && (r.dtype == IDX_FLOAT32 || r.dtype == IDX_FLOAT64)) {
		ret = error("--document: '%s' holds %s values, not token ids", a->input.v[0], idx_dtype_name(r.dtype));
		goto out;
	}
	if (a->document >= 0) {
		if ((uint64_t)a->document >= docs) {
			ret = error("--document %lld: the dataset has %llu documents", (long long)a->document,
				    (unsigned long long)docs);
			goto out;
		}
		struct tok_ids ids = { NULL, 0, 0 };
		for (int64_t s = idx_doc(&r, (uint64_t)a->document); s < idx_doc(&r, (uint64_t)a->document + 1); s++) {
			size_t n;
			const void *p = idx_reader_sequence(&r, (uint64_t)s, &n);
			for (size_t i = 0; i < n && (int64_t)ids.n < a->max_tokens; i++)
				tok_ids_push(&ids, (int32_t)token_at(&r, p, i));
		}
		printf("document %lld: %llu sequence(s); first %zu ids:\n", (long long)a->document,
		       (unsigned long long)(idx_doc(&r, (uint64_t)a->document + 1) - idx_doc(&r, (uint64_t)a->document)), ids.n);
		for (size_t i = 0; i < ids.n; i++)
			printf("%s%d", i ? " " : "", ids.v[i]);
		printf("\n");
		if (a->tokenizer_type) {
			struct tok_config tc = tok_config_from_args(a);
			struct tokenizer *t = tok_load(&tc);
			struct sbuf text = SBUF_INIT;
			if (!t || tok_decode(t, ids.v, ids.n, &text) < 0)
				ret = -1;
			else
				printf("text:\n%s\n", text.buf ? text.buf : "");
			sbuf_release(&text);
			tok_free(t);
		}
		tok_ids_free(&ids);
	}
out:
	idx_reader_close(&r);
	return ret;
}
