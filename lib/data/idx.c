/*
 * idx.c - see idx.h. The .idx layout (all little-endian, no padding):
 *   magic "MMIDIDX\0\0" | u64 version=1 | u8 dtype | u64 S | u64 D1 |
 *   int32 lengths[S] | int64 pointers[S] | int64 doc_idx[D1] | int8 modes[S]?
 * megac only runs on little-endian hosts (checked at compile time below), so
 * arrays are written and mmapped as they are in memory.
 */
#include "idx.h"
#include "base/error.h"
#include "base/xalloc.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#if __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "megac's dataset files are little-endian; a big-endian port needs byte swapping in idx.c"
#endif

static const char idx_magic[9] = { 'M', 'M', 'I', 'D', 'I', 'D', 'X', 0, 0 };

size_t idx_dtype_size(int code)
{
	switch (code) {
	case IDX_UINT8:
	case IDX_INT8:
		return 1;
	case IDX_INT16:
	case IDX_UINT16:
		return 2;
	case IDX_INT32:
	case IDX_FLOAT32:
		return 4;
	case IDX_INT64:
	case IDX_FLOAT64:
		return 8;
	default:
		return 0;
	}
}

const char *idx_dtype_name(int code)
{
	static const char *names[] = { "?", "uint8", "int8", "int16", "int32", "int64", "float64", "float32", "uint16" };
	return code >= 1 && code <= 8 ? names[code] : "unknown";
}

int idx_optimal_dtype(int64_t vocab_size)
{
	return vocab_size >= 0 && vocab_size < 65500 ? IDX_UINT16 : IDX_INT32;
}

char *idx_bin_path(const char *prefix)
{
	return xasprintf("%s.bin", prefix);
}

char *idx_idx_path(const char *prefix)
{
	return xasprintf("%s.idx", prefix);
}

/* ---------------------------------------------------------------- writer */

static int check_dir_exists(const char *path)
{
	char *dir = path_dirname(path);
	struct stat st;
	int r = 0;
	if (stat(dir, &st) < 0 || !S_ISDIR(st.st_mode))
		r = error("output directory '%s' (of '%s') does not exist", dir, path);
	free(dir);
	return r;
}

int idx_writer_open(struct idx_writer *w, const char *prefix, int dtype, bool multimodal)
{
	memset(w, 0, sizeof(*w));
	w->bin.slot = w->idx.slot = -1;
	if (dtype != IDX_UINT16 && dtype != IDX_INT32 && dtype != IDX_UINT8 && dtype != IDX_INT64)
		return error("cannot write '%s': token dtype %s (code %d) is not supported for writing "
			     "(uint8, uint16, int32 and int64 are)", prefix, idx_dtype_name(dtype), dtype);
	w->prefix = xstrdup(prefix);
	w->dtype = dtype;
	w->itemsize = idx_dtype_size(dtype);
	w->multimodal = multimodal;
	char *bin = idx_bin_path(prefix), *idx = idx_idx_path(prefix);
	char *dir = path_dirname(bin);
	int r = check_dir_exists(bin);
	if (!r)
		r = afile_open(&w->bin, bin);
	if (!r)
		r = afile_open(&w->idx, idx);
	if (!r && !(w->lengths = scratch_file(dir)))
		r = -1;
	if (!r && !(w->docs = scratch_file(dir)))
		r = -1;
	if (!r && multimodal && !(w->modes = scratch_file(dir)))
		r = -1;
	free(bin);
	free(idx);
	free(dir);
	if (r)
		idx_writer_abort(w);
	return r;
}

static int write_all(FILE *fp, const void *p, size_t n, const char *what)
{
	if (n && fwrite(p, 1, n, fp) != n)
		return error_errno("cannot write %s", what);
	return 0;
}

/* Convert int32 ids to the dataset dtype into w->conv. */
static int convert_tokens(struct idx_writer *w, const int32_t *t, size_t n)
{
	xgrow(&w->conv, &w->conv_cap, n * w->itemsize, 1);
	switch (w->dtype) {
	case IDX_UINT16: {
		uint16_t *o = w->conv;
		for (size_t i = 0; i < n; i++) {
			if ((uint32_t)t[i] > 0xFFFF)
				return error("token id %d does not fit the dataset's uint16 dtype", t[i]);
			o[i] = (uint16_t)t[i];
		}
		return 0;
	}
	case IDX_UINT8: {
		uint8_t *o = w->conv;
		for (size_t i = 0; i < n; i++) {
			if ((uint32_t)t[i] > 0xFF)
				return error("token id %d does not fit the dataset's uint8 dtype", t[i]);
			o[i] = (uint8_t)t[i];
		}
		return 0;
	}
	case IDX_INT32:
		if (n)
			memcpy(w->conv, t, n * 4);
		return 0;
	case IDX_INT64: {
		int64_t *o = w->conv;
		for (size_t i = 0; i < n; i++)
			o[i] = t[i];
		return 0;
	}
	}
	BUG("unsupported writer dtype %d", w->dtype);
}

int idx_writer_add_document(struct idx_writer *w, const int32_t *tokens, size_t n,
			    const int32_t *seq_lengths, size_t n_seqs)
{
	int64_t sum = 0;
	for (size_t i = 0; i < n_seqs; i++) {
		if (seq_lengths[i] < 0)
			BUG("negative sequence length %d", seq_lengths[i]);
		sum += seq_lengths[i];
	}
	if ((uint64_t)sum != n)
		BUG("sequence lengths sum to %lld, document has %zu tokens", (long long)sum, n);
	if (convert_tokens(w, tokens, n) < 0)
		return -1;
	if (write_all(w->bin.fp, w->conv, n * w->itemsize, w->bin.path) < 0 ||
	    write_all(w->lengths, seq_lengths, n_seqs * 4, "the sequence-length scratch file") < 0)
		return -1;
	if (w->modes) {
		static const int8_t zero[64];
		for (size_t i = 0; i < n_seqs; i += 64)
			if (write_all(w->modes, zero, n_seqs - i < 64 ? n_seqs - i : 64, "the modes scratch file") < 0)
				return -1;
	}
	w->n_seqs += n_seqs;
	w->n_tokens += n;
	int64_t end = (int64_t)w->n_seqs;
	w->n_docs++;
	return write_all(w->docs, &end, 8, "the document scratch file");
}

int idx_writer_add_dataset(struct idx_writer *w, const char *prefix)
{
	struct idx_reader r;
	if (idx_reader_open(&r, prefix, w->multimodal) < 0)
		return -1;
	int ret = 0;
	if (r.dtype != w->dtype) {
		ret = error("cannot merge '%s': its token dtype is %s, the output's is %s", prefix,
			    idx_dtype_name(r.dtype), idx_dtype_name(w->dtype));
		goto out;
	}
	if (write_all(w->bin.fp, r.bin, r.bin_size, w->bin.path) < 0) {
		ret = -1;
		goto out;
	}
	if (write_all(w->lengths, r.lengths_raw, r.n_seqs * 4, "the sequence-length scratch file") < 0 ||
	    (w->modes && write_all(w->modes, r.modes, r.n_seqs, "the modes scratch file") < 0)) {
		ret = -1;
		goto out;
	}
	for (uint64_t d = 1; d < r.n_doc_entries; d++) {
		int64_t end = (int64_t)w->n_seqs + idx_doc(&r, d);
		if (write_all(w->docs, &end, 8, "the document scratch file") < 0) {
			ret = -1;
			goto out;
		}
	}
	w->n_seqs += r.n_seqs;
	w->n_docs += r.n_doc_entries - 1;
	w->n_tokens += r.bin_size / r.itemsize;
out:
	idx_reader_close(&r);
	return ret;
}

int idx_writer_finish(struct idx_writer *w)
{
	FILE *o = w->idx.fp;
	const char *name = w->idx.path;
	uint64_t version = 1, d1 = w->n_docs + 1;
	uint8_t code = (uint8_t)w->dtype;
	if (write_all(o, idx_magic, 9, name) || write_all(o, &version, 8, name) || write_all(o, &code, 1, name) ||
	    write_all(o, &w->n_seqs, 8, name) || write_all(o, &d1, 8, name))
		return -1;

	/* lengths, then the pointers computed from them, streamed from scratch */
	enum { CH = 1 << 16 };
	int32_t *len = xmalloc(CH * sizeof(*len));
	int64_t *ptr = xmalloc(CH * sizeof(*ptr));
	int ret = 0;
	for (int pass = 0; pass < 2 && !ret; pass++) {
		if (fflush(w->lengths) || fseek(w->lengths, 0, SEEK_SET)) {
			ret = error_errno("cannot rewind the sequence-length scratch file");
			break;
		}
		int64_t pos = 0;
		for (uint64_t done = 0; done < w->n_seqs && !ret;) {
			size_t k = w->n_seqs - done < CH ? (size_t)(w->n_seqs - done) : CH;
			if (fread(len, 4, k, w->lengths) != k) {
				ret = error_errno("cannot read back the sequence-length scratch file");
				break;
			}
			if (pass == 0) {
				ret = write_all(o, len, k * 4, name);
			} else {
				for (size_t i = 0; i < k; i++) {
					ptr[i] = pos;
					pos += (int64_t)len[i] * (int64_t)w->itemsize;
				}
				ret = write_all(o, ptr, k * 8, name);
			}
			done += k;
		}
	}
	int64_t zero = 0;
	if (!ret)
		ret = write_all(o, &zero, 8, name);
	if (!ret && (fflush(w->docs) || fseek(w->docs, 0, SEEK_SET)))
		ret = error_errno("cannot rewind the document scratch file");
	for (uint64_t done = 0; done < w->n_docs && !ret;) {
		size_t k = w->n_docs - done < CH ? (size_t)(w->n_docs - done) : CH;
		if (fread(ptr, 8, k, w->docs) != k)
			ret = error_errno("cannot read back the document scratch file");
		else
			ret = write_all(o, ptr, k * 8, name);
		done += k;
	}
	if (!ret && w->modes) {
		if (fflush(w->modes) || fseek(w->modes, 0, SEEK_SET))
			ret = error_errno("cannot rewind the modes scratch file");
		for (uint64_t done = 0; done < w->n_seqs && !ret;) {
			size_t k = w->n_seqs - done < CH ? (size_t)(w->n_seqs - done) : CH;
			if (fread(len, 1, k, w->modes) != k)
				ret = error_errno("cannot read back the modes scratch file");
			else
				ret = write_all(o, len, k, name);
			done += k;
		}
	}
	free(len);
	free(ptr);
	if (ret)
		return -1;
	if (afile_finish(&w->bin) < 0 || afile_finish(&w->idx) < 0)
		return -1;
	w->finished = true;
	return 0;
}

int idx_writer_publish(struct idx_writer *w)
{
	if (!w->finished)
		BUG("idx_writer_publish before idx_writer_finish on '%s'", w->prefix);
	char *idx = idx_idx_path(w->prefix);
	if (unlink(idx) < 0 && errno != ENOENT) {
		int r = error_errno("cannot replace '%s'", idx);
		free(idx);
		return r;
	}
	free(idx);
	if (afile_publish(&w->bin) < 0 || afile_publish(&w->idx) < 0)
		return -1;
	idx_writer_abort(w); /* frees the rest; nothing left to remove */
	return 0;
}

void idx_writer_abort(struct idx_writer *w)
{
	afile_abort(&w->bin);
	afile_abort(&w->idx);
	if (w->lengths)
		fclose(w->lengths);
	if (w->docs)
		fclose(w->docs);
	if (w->modes)
		fclose(w->modes);
	w->lengths = w->docs = w->modes = NULL;
	free(w->conv);
	w->conv = NULL;
	w->conv_cap = 0;
	free(w->prefix);
	w->prefix = NULL;
}

/* ---------------------------------------------------------------- reader */

static void *map_file(const char *path, size_t *size, int *err)
{
	*err = 0;
	int fd = open(path, O_RDONLY);
	if (fd < 0) {
		*err = error_errno("cannot open '%s'", path);
		return NULL;
	}
	struct stat st;
	if (fstat(fd, &st) < 0) {
		*err = error_errno("cannot stat '%s'", path);
		close(fd);
		return NULL;
	}
	*size = (size_t)st.st_size;
	void *p = NULL;
	if (*size) {
		p = mmap(NULL, *size, PROT_READ, MAP_SHARED, fd, 0);
		if (p == MAP_FAILED) {
			*err = error_errno("cannot mmap '%s'", path);
			p = NULL;
		}
	}
	close(fd);
	return p;
}

static int validate(struct idx_reader *r, const char *idx, const char *bin, bool multimodal)
{
	const unsigned char *m = r->idx_map;
	if (r->idx_size < IDX_HEADER_SIZE)
		return error("'%s' is truncated: %zu bytes, an index header alone is %d", idx, r->idx_size,
			     IDX_HEADER_SIZE);
	if (memcmp(m, idx_magic, 9))
		return error("'%s' is not a Megatron indexed dataset (bad magic; expected \"MMIDIDX\\0\\0\")", idx);
	uint64_t version, s, d1;
	memcpy(&version, m + 9, 8);
	memcpy(&s, m + 18, 8);
	memcpy(&d1, m + 26, 8);
	if (version != 1)
		return error("'%s': index version %llu, only version 1 exists", idx, (unsigned long long)version);
	r->dtype = m[17];
	r->itemsize = idx_dtype_size(r->dtype);
	if (!r->itemsize)
		return error("'%s': unknown token dtype code %d (valid codes are 1-8)", idx, r->dtype);
	if (s > (uint64_t)1 << 40 || d1 > (uint64_t)1 << 40 || d1 < 1)
		return error("'%s': implausible header (sequence count %llu, document count field %llu)", idx,
			     (unsigned long long)s, (unsigned long long)d1);
	uint64_t need = IDX_HEADER_SIZE + 12 * s + 8 * d1;
	uint64_t need_mm = need + s;
	if (r->idx_size < (multimodal ? need_mm : need))
		return error("'%s' is truncated: %zu bytes, its header (%llu sequences, %llu document entries) "
			     "needs %llu", idx, r->idx_size, (unsigned long long)s, (unsigned long long)d1,
			     (unsigned long long)(multimodal ? need_mm : need));
	if (r->idx_size != need && r->idx_size != need_mm)
		return error("'%s' has %zu bytes, its header (%llu sequences, %llu document entries) needs %llu "
			     "(or %llu with modes)", idx, r->idx_size, (unsigned long long)s,
			     (unsigned long long)d1, (unsigned long long)need, (unsigned long long)need_mm);
	r->n_seqs = s;
	r->n_doc_entries = d1;
	r->lengths_raw = m + IDX_HEADER_SIZE;
	r->pointers_raw = m + IDX_HEADER_SIZE + 4 * s;
	r->doc_idx_raw = m + IDX_HEADER_SIZE + 12 * s;
	r->modes = multimodal ? (const int8_t *)(m + need) : NULL;

	if (idx_doc(r, 0) != 0)
		return error("'%s': document_indices[0] is %lld, must be 0", idx, (long long)idx_doc(r, 0));
	for (uint64_t d = 1; d < d1; d++)
		if (idx_doc(r, d) < idx_doc(r, d - 1))
			return error("'%s': document_indices decrease at entry %llu", idx, (unsigned long long)d);
	if ((uint64_t)idx_doc(r, d1 - 1) != s)
		return error("'%s': the last document index is %lld, must equal the sequence count %llu", idx,
			     (long long)idx_doc(r, d1 - 1), (unsigned long long)s);
	int64_t pos = 0;
	for (uint64_t i = 0; i < s; i++) {
		int32_t len = idx_length(r, i);
		if (len < 0)
			return error("'%s': sequence %llu has negative length %d", idx, (unsigned long long)i, len);
		if (idx_pointer(r, i) != pos)
			return error("'%s': sequence %llu starts at byte %lld, expected %lld from the lengths", idx,
				     (unsigned long long)i, (long long)idx_pointer(r, i), (long long)pos);
		pos += (int64_t)len * (int64_t)r->itemsize;
		if ((uint64_t)pos > r->bin_size)
			break; /* reported below; stops a crafted index from overflowing pos */
	}
	if ((uint64_t)pos != r->bin_size)
		return error("'%s' has %zu bytes, but '%s' describes %lld (%s tokens); the pair does not match or "
			     "one of them is truncated", bin, r->bin_size, idx, (long long)pos,
			     idx_dtype_name(r->dtype));
	return 0;
}

int idx_reader_open(struct idx_reader *r, const char *prefix, bool multimodal)
{
	memset(r, 0, sizeof(*r));
	char *idx = idx_idx_path(prefix), *bin = idx_bin_path(prefix);
	int err = 0;
	r->prefix = xstrdup(prefix);
	if (access(idx, F_OK) < 0 || access(bin, F_OK) < 0) {
		err = error("dataset '%s' needs both '%s' and '%s'; %s is missing", prefix, idx, bin,
			    access(idx, F_OK) < 0 ? "the .idx" : "the .bin");
		goto out;
	}
	r->idx_map = map_file(idx, &r->idx_size, &err);
	if (err)
		goto out;
	r->bin_map = map_file(bin, &r->bin_size, &err);
	if (err)
		goto out;
	r->bin = r->bin_map;
	err = validate(r, idx, bin, multimodal);
out:
	free(idx);
	free(bin);
	if (err)
		idx_reader_close(r);
	return err;
}

void idx_reader_close(struct idx_reader *r)
{
	if (r->idx_map)
		munmap(r->idx_map, r->idx_size);
	if (r->bin_map)
		munmap(r->bin_map, r->bin_size);
	free(r->prefix);
	memset(r, 0, sizeof(*r));
}

const void *idx_reader_sequence(const struct idx_reader *r, uint64_t i, size_t *n_tokens)
{
	if (i >= r->n_seqs)
		BUG("sequence %llu of %llu", (unsigned long long)i, (unsigned long long)r->n_seqs);
	*n_tokens = (size_t)idx_length(r, i);
	return r->bin + idx_pointer(r, i);
}
