/*
 * megac_torch_pickle.c - a test tool over lib/ckpt/pickle.h and torch_zip.h
 * for tests/prog/torch_pickle.sh, whose Python side compares with torch.
 *
 *   megac_torch_pickle dump IN.pt OUT.json
 *	torch_load IN.pt and write the tree as JSON in the encoding of
 *	tests/prog/py/torch_pickle.py: null/bool/number/string for the
 *	scalars, lists as arrays, everything else an object with one tag key
 *	({"tuple": [...]}, {"dict": [[k, v], ...]}, {"tensor": {...}}, ...).
 *   megac_torch_pickle resave IN.pt OUT.pt
 *	torch_load IN.pt and torch_save the tree again as OUT.pt.
 *   megac_torch_pickle load IN.pt
 *	torch_load only: exit 0, or 128 with the error.
 *   megac_torch_pickle fuzz IN.pt DIR
 *	the file's data.pkl truncated at every byte and with every byte
 *	flipped (and 2000 random multi-byte damages), then the whole file
 *	truncated and damaged in its zip records (copies in DIR): each load
 *	must succeed or fail with a message, never crash. Prints the counts.
 */
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/error.h"
#include "base/xalloc.h"
#include "ckpt/pickle.h"
#include "ckpt/torch_zip.h"

static json_t *hex(const void *p, size_t n)
{
	static const char digits[] = "0123456789abcdef";
	char *s = xmalloc(2 * n + 1);
	for (size_t i = 0; i < n; i++) {
		s[2 * i] = digits[((const unsigned char *)p)[i] >> 4];
		s[2 * i + 1] = digits[((const unsigned char *)p)[i] & 15];
	}
	s[2 * n] = 0;
	json_t *j = json_string(s);
	free(s);
	return j;
}

static json_t *tagged(const char *tag, json_t *v)
{
	json_t *o = json_object();
	json_object_set_new(o, tag, v);
	return o;
}

static json_t *ints(const int64_t *v, int n)
{
	json_t *a = json_array();
	for (int i = 0; i < n; i++)
		json_array_append_new(a, json_integer(v[i]));
	return a;
}

static json_t *enc(const struct pk_value *v)
{
	json_t *a, *o;
	switch (v->kind) {
	case PK_NONE:
		return json_null();
	case PK_BOOL:
		return json_boolean(v->b);
	case PK_INT:
		return json_integer(v->i);
	case PK_FLOAT:
		if (isfinite(v->f))
			return json_real(v->f);
		return tagged("float", json_string(isnan(v->f) ? "nan" : v->f > 0 ? "inf" : "-inf"));
	case PK_STR:
		return json_stringn(v->s.p, v->s.len);
	case PK_BYTES:
		return tagged(v->flags & PK_F_BYTEARRAY ? "bytearray" : "bytes", hex(v->s.p, v->s.len));
	case PK_LIST:
	case PK_TUPLE:
	case PK_SET:
		a = json_array();
		for (size_t i = 0; i < v->seq.n; i++)
			json_array_append_new(a, enc(v->seq.v[i]));
		return v->kind == PK_LIST ? a : tagged(v->kind == PK_TUPLE ? "tuple" : v->flags & PK_F_FROZEN ? "frozenset" : "set", a);
	case PK_DICT:
		a = json_array();
		for (size_t i = 0; i < v->seq.n; i++) {
			json_t *kv = json_array();
			json_array_append_new(kv, enc(v->seq.v[2 * i]));
			json_array_append_new(kv, enc(v->seq.v[2 * i + 1]));
			json_array_append_new(a, kv);
		}
		return tagged(v->flags & PK_F_ORDERED ? "odict" : "dict", a);
	case PK_GLOBAL:
		return tagged("global", json_string(v->s.p));
	case PK_OBJECT:
		o = json_object();
		json_object_set_new(o, "object", json_string(v->obj.cls));
		json_object_set_new(o, "args", v->obj.args ? enc(v->obj.args) : json_null());
		json_object_set_new(o, "state", v->obj.state ? enc(v->obj.state) : json_null());
		return o;
	case PK_STORAGE:
		return tagged("storage", json_string(v->st.key));
	case PK_TENSOR: {
		const struct pk_value *st = v->t.storage;
		size_t bytes = (size_t)pk_tensor_numel(v) * pk_dtype_size(st->st.dtype);
		void *buf = xmalloc(bytes + 1);
		pk_tensor_gather(v, buf);
		o = json_object();
		json_object_set_new(o, "dtype", json_string(pk_dtype_name(st->st.dtype)));
		json_object_set_new(o, "shape", ints(v->t.size, v->t.ndim));
		json_object_set_new(o, "stride", ints(v->t.stride, v->t.ndim));
		json_object_set_new(o, "offset", json_integer(v->t.offset));
		json_object_set_new(o, "storage", json_string(st->st.key));
		json_object_set_new(o, "requires_grad", json_boolean(v->t.requires_grad));
		json_object_set_new(o, "parameter", json_boolean(v->flags & PK_F_PARAMETER));
		json_object_set_new(o, "data", hex(buf, bytes));
		free(buf);
		return tagged("tensor", o);
	}
	case PK_NDARRAY:
		o = json_object();
		json_object_set_new(o, "dtype", json_string(v->nd.descr));
		json_object_set_new(o, "shape", ints(v->nd.shape, v->nd.ndim));
		json_object_set_new(o, "data", hex(v->nd.data, v->nd.nbytes));
		return tagged("ndarray", o);
	default:
		return json_null();
	}
}

static char *read_all(const char *path, size_t *len)
{
	FILE *f = fopen(path, "rb");
	if (!f)
		die_errno("cannot open '%s'", path);
	fseek(f, 0, SEEK_END);
	long n = ftell(f);
	fseek(f, 0, SEEK_SET);
	char *buf = xmalloc((size_t)n + 1);
	if (fread(buf, 1, (size_t)n, f) != (size_t)n)
		die("cannot read '%s'", path);
	fclose(f);
	*len = (size_t)n;
	return buf;
}

static void write_all(const char *path, const void *p, size_t n)
{
	FILE *f = fopen(path, "wb");
	if (!f || fwrite(p, 1, n, f) != n || fclose(f))
		die_errno("cannot write '%s'", path);
}

/* storages of the fuzzed pickle: the file's own (damage may ask for any key) */
static struct tz_reader *fuzz_zip;
static char fuzz_prefix[256];

static int file_storage(void *ctx, const char *key, const void **data, size_t *nbytes)
{
	char name[600];
	snprintf(name, sizeof(name), "%s/data/%s", fuzz_prefix, key);
	int i = tz_find(fuzz_zip, name);
	if (i < 0)
		return error("no storage '%s'", key);
	*data = tz_data(fuzz_zip, i, nbytes);
	return *data ? 0 : -1;
}

static unsigned ok_count, err_count;

static void try_pickle(const char *buf, size_t n)
{
	struct pk_doc *d = pk_doc_new();
	struct pk_load_opts o = { "fuzz", file_storage, NULL };
	char msg[256];
	log_capture(msg, sizeof(msg));
	struct pk_value *v = pk_loads(d, buf, n, &o);
	log_capture(NULL, 0);
	if (v) {
		/* whatever loaded must write again */
		struct sbuf out = SBUF_INIT;
		struct pk_value **st;
		size_t nst;
		log_capture(msg, sizeof(msg));
		if (pk_dumps(v, &out, &st, &nst) == 0)
			free(st);
		log_capture(NULL, 0);
		sbuf_release(&out);
		ok_count++;
	} else {
		err_count++;
	}
	pk_doc_free(d);
}

static void try_file(const char *path, const char *buf, size_t n)
{
	write_all(path, buf, n);
	struct pk_doc *d = pk_doc_new();
	char msg[256];
	log_capture(msg, sizeof(msg));
	struct pk_value *v = torch_load(d, path);
	log_capture(NULL, 0);
	if (v) {
		json_t *j = enc(v); /* walks every node and tensor */
		json_decref(j);
		ok_count++;
	} else {
		err_count++;
	}
	pk_doc_free(d);
}

static void fuzz(const char *in, const char *dir)
{
	size_t flen;
	char *file = read_all(in, &flen);
	struct tz_reader *z = tz_open(in);
	if (!z)
		die("cannot fuzz '%s'", in);
	int pk = -1;
	for (int i = 0; i < tz_count(z); i++)
		if (strstr(tz_name(z, i), "/data.pkl"))
			pk = i;
	size_t n;
	const char *p = pk >= 0 ? tz_data(z, pk, &n) : NULL;
	if (!p)
		die("'%s' has no data.pkl", in);
	fuzz_zip = z;
	snprintf(fuzz_prefix, sizeof(fuzz_prefix), "%.*s", (int)(strchr(tz_name(z, pk), '/') - tz_name(z, pk)),
		 tz_name(z, pk));
	char *buf = xmalloc(n + 1);
	for (size_t cut = 0; cut < n; cut++) {
		memcpy(buf, p, cut);
		try_pickle(buf, cut);
	}
	for (size_t i = 0; i < n; i++) {
		memcpy(buf, p, n);
		buf[i] ^= (char)0xff;
		try_pickle(buf, n);
		buf[i] = (char)(p[i] ^ 0x01);
		try_pickle(buf, n);
	}
	uint32_t x = 12345;
	for (int k = 0; k < 2000; k++) {
		memcpy(buf, p, n);
		for (int j = 0; j < 3; j++) {
			x ^= x << 13, x ^= x >> 17, x ^= x << 5;
			buf[x % n] = (char)(x >> 8);
		}
		try_pickle(buf, n);
	}
	unsigned pk_ok = ok_count, pk_err = err_count;
	ok_count = err_count = 0;
	char *path = xasprintf("%s/fuzz.pt", dir);
	char *copy = xmalloc(flen + 1);
	size_t step = flen / 300 + 1;
	for (size_t cut = 0; cut < flen; cut += step)
		try_file(path, file, cut);
	for (size_t i = 0; i < flen; i++) {
		/* every byte of the zip records, a sample of the data */
		if (i % step && (i + 100 < flen) && i > 200)
			continue;
		memcpy(copy, file, flen);
		copy[i] ^= (char)0xff;
		try_file(path, copy, flen);
	}
	printf("pickle: %u loaded, %u refused; file: %u loaded, %u refused\n", pk_ok, pk_err, ok_count, err_count);
	unlink(path);
	free(path);
	free(copy);
	free(buf);
	free(file);
	tz_close(z);
}

int main(int argc, char **argv)
{
	log_init("megac_torch_pickle", 0, 1);
	if (argc < 3)
		die("usage: megac_torch_pickle dump|resave|load|fuzz IN.pt [OUT]");
	if (!strcmp(argv[1], "fuzz") && argc == 4) {
		fuzz(argv[2], argv[3]);
		return 0;
	}
	struct pk_doc *d = pk_doc_new();
	struct pk_value *v = torch_load(d, argv[2]);
	if (!v)
		die("cannot load '%s'", argv[2]);
	if (!strcmp(argv[1], "dump") && argc == 4) {
		json_t *j = enc(v);
		if (json_dump_file(j, argv[3], JSON_COMPACT) < 0)
			die("cannot write '%s'", argv[3]);
		json_decref(j);
	} else if (!strcmp(argv[1], "resave") && argc == 4) {
		if (torch_save(argv[3], v) < 0)
			die("cannot save '%s'", argv[3]);
	} else if (strcmp(argv[1], "load")) {
		die("usage: megac_torch_pickle dump|resave|load|fuzz IN.pt [OUT]");
	}
	pk_doc_free(d);
	return 0;
}
