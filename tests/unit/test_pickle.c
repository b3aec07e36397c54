/*
 * test_pickle.c - lib/ckpt/pickle.h on hand-written pickles: each opcode
 * family, the memo, big integers, and the refusals (globals off the
 * allow-list, truncation, ints beyond 64 bits, self-containing lists, bad
 * memo indices); a tree built in C, written with pk_dumps, reads back equal.
 */
#include "base/error.h"
#include "base/sbuf.h"
#include "ckpt/pickle.h"
#include "test.h"

static struct pk_value *load(struct pk_doc *d, const char *p, size_t n, char *msg, size_t cap)
{
	log_capture(msg, cap);
	struct pk_value *v = pk_loads(d, p, n, NULL);
	log_capture(NULL, 0);
	return v;
}

#define LOAD(d, lit) load(d, lit, sizeof(lit) - 1, msg, sizeof(msg))

static void test_scalars(void)
{
	char msg[512];
	struct pk_doc *d = pk_doc_new();
	/* (None, True, False, 255, 65535, -2, 2**62 via LONG1, 1.5, 'hé', b'\x00a') */
	struct pk_value *v = LOAD(d, "\x80\x02(N\x88\x89K\xffM\xff\xffJ\xfe\xff\xff\xff\x8a\x08\x00\x00\x00\x00\x00\x00"
				      "\x00\x40G?\xf8\x00\x00\x00\x00\x00\x00X\x03\x00\x00\x00h\xc3\xa9" "C\x02\x00" "at.");
	CHECK(v && v->kind == PK_TUPLE && v->seq.n == 10);
	if (v && v->seq.n == 10) {
		CHECK(v->seq.v[0]->kind == PK_NONE);
		CHECK(v->seq.v[1]->b && !v->seq.v[2]->b);
		CHECK_INT(v->seq.v[3]->i, 255);
		CHECK_INT(v->seq.v[4]->i, 65535);
		CHECK_INT(v->seq.v[5]->i, -2);
		CHECK_INT(v->seq.v[6]->i, INT64_C(1) << 62);
		CHECK(v->seq.v[7]->f == 1.5);
		CHECK_STR(v->seq.v[8]->s.p, "h\xc3\xa9");
		CHECK(v->seq.v[9]->kind == PK_BYTES && v->seq.v[9]->s.len == 2 && !memcmp(v->seq.v[9]->s.p, "\0a", 2));
	}
	pk_doc_free(d);
}

static void test_containers_memo(void)
{
	char msg[512];
	struct pk_doc *d = pk_doc_new();
	/* x = [1]; {'a': x, 'b': x, 'c': OrderedDict([('k', 2)])} with BINPUT/BINGET, and a FRAME */
	struct pk_value *v = LOAD(d, "\x80\x04\x95\x05\x00\x00\x00\x00\x00\x00\x00}q\x00(X\x01\x00\x00\x00" "a]q\x01K\x01"
				      "aX\x01\x00\x00\x00" "bh\x01X\x01\x00\x00\x00" "c\x8c\x0b" "collections\x94\x8c\x0bOrderedDict"
				      "\x93)R\x8c\x01k\x94K\x02su.");
	CHECK(v && v->kind == PK_DICT && v->seq.n == 3);
	if (v && v->seq.n == 3) {
		CHECK(pk_get(v, "a") == pk_get(v, "b"));
		CHECK(pk_get(v, "a")->kind == PK_LIST && pk_get(v, "a")->seq.n == 1);
		struct pk_value *od = pk_get(v, "c");
		CHECK(od->kind == PK_DICT && (od->flags & PK_F_ORDERED) && pk_get(od, "k")->i == 2);
	}
	pk_doc_free(d);
}

static void test_state_dict_attrs(void)
{
	char msg[512];
	struct pk_doc *d = pk_doc_new();
	/*
	 * Python's pickle.dumps(..., protocol=2) of {'sd': od, 'sig': signal.Signals(15)}, od an
	 * OrderedDict([('k', 2)]) with od._metadata = OrderedDict([('', {'version': 1})]) as a
	 * module's state_dict() has: the attribute comes as a BUILD after the items, and is dropped.
	 */
	struct pk_value *v = LOAD(d, "\x80\x02}q\x00(X\x02\x00\x00\x00sdq\x01" "ccollections\nOrderedDict\nq\x02)Rq\x03"
				      "X\x01\x00\x00\x00kq\x04K\x02s}q\x05X\t\x00\x00\x00_metadataq\x06h\x02)Rq\x07"
				      "X\x00\x00\x00\x00q\x08}q\tX\x07\x00\x00\x00versionq\nK\x01sssbX\x03\x00\x00\x00sigq\x0b"
				      "csignal\nSignals\nq\x0cK\x0f\x85q\rRq\x0eu.");
	CHECK(v && v->kind == PK_DICT && v->seq.n == 2);
	if (v && v->seq.n == 2) {
		struct pk_value *od = pk_get(v, "sd"), *sig = pk_get(v, "sig");
		CHECK(od->kind == PK_DICT && (od->flags & PK_F_ORDERED) && od->seq.n == 1 && pk_get(od, "k")->i == 2);
		CHECK(sig->kind == PK_OBJECT && !strcmp(sig->obj.cls, "signal.Signals"));
		CHECK(sig->obj.args && sig->obj.args->seq.n == 1 && sig->obj.args->seq.v[0]->i == 15);
	}
	/* pickle.dumps(pathlib.PosixPath('llama_fsdp/iter_0000002'), protocol=2): DCP's
	 * StorageMeta.checkpoint_id; an object naming the class and holding the parts */
	v = LOAD(d, "\x80\x02" "cpathlib\nPosixPath\nq\x02X\n\x00\x00\x00llama_fsdpq\x03"
		    "X\x0c\x00\x00\x00iter_0000002q\x04\x86q\x05Rq\x06.");
	CHECK(v && v->kind == PK_OBJECT && !strcmp(v->obj.cls, "pathlib.PosixPath"));
	CHECK(v && v->obj.args && v->obj.args->seq.n == 2 && !strcmp(v->obj.args->seq.v[1]->s.p, "iter_0000002"));
	/* and nothing but strings for its parts */
	CHECK(!LOAD(d, "\x80\x02" "cpathlib\nPosixPath\nK\x01\x85R."));
	CHECK(contains_all(msg, "'pathlib.PosixPath' called with a int among its parts", NULL));
	/* BUILD on a dict with anything but a dict of attributes is still an error */
	CHECK(!LOAD(d, "\x80\x02}K\x01" "b."));
	CHECK(contains_all(msg, "BUILD on a dict", NULL));
	pk_doc_free(d);
}

static void test_refusals(void)
{
	char msg[512];
	struct pk_doc *d = pk_doc_new();
	CHECK(!LOAD(d, "\x80\x02" "cos\nsystem\nX\x02\x00\x00\x00id\x85R."));
	CHECK(contains_all(msg, "refusing global 'os.system'", NULL));
	CHECK(!LOAD(d, "\x80\x02" "cbuiltins\neval\n."));
	CHECK(contains_all(msg, "refusing global 'builtins.eval'", NULL));
	CHECK(!LOAD(d, "\x80\x02" "ctorch.float32\n"));
	CHECK(contains_all(msg, "truncated", NULL));
	CHECK(!LOAD(d, "\x80\x02\x8a\x09\xff\xff\xff\xff\xff\xff\xff\xff\x00."));
	CHECK(contains_all(msg, "integer of 9 bytes does not fit in 64 bits", NULL));
	CHECK(!LOAD(d, "\x80\x02]q\x00h\x00" "a."));
	CHECK(contains_all(msg, "contains itself", NULL));
	CHECK(!LOAD(d, "\x80\x02h\x05."));
	CHECK(contains_all(msg, "memo entry 5 was never stored", NULL));
	CHECK(!LOAD(d, "\x80\x02N\x72\xff\xff\xff\x7f."));
	CHECK(contains_all(msg, "memo index", NULL));
	CHECK(!LOAD(d, "\x80\x02X\x10\x00\x00\x00" "ab."));
	CHECK(contains_all(msg, "truncated", NULL));
	CHECK(!LOAD(d, "\x80\x02X\x01\x00\x00\x00\xff."));
	CHECK(contains_all(msg, "not UTF-8", NULL));
	CHECK(!LOAD(d, "\x80\x02(K\x01(K\x02."));
	CHECK(contains_all(msg, "STOP with", NULL));
	CHECK(!LOAD(d, "\x80\x02" "ctorch\nFloatStorage\nX\x01\x00\x00\x00" "0\x86Q."));
	CHECK(contains_all(msg, "persistent id", NULL));
	CHECK(!LOAD(d, "\x80\x02I1\n."));
	CHECK(contains_all(msg, "protocol 0/1", NULL));
	/* a MARK nest deeper than the limit */
	char deep[PK_MAX_DEPTH + 8];
	memset(deep, '(', sizeof(deep));
	CHECK(!load(d, deep, sizeof(deep), msg, sizeof(msg)));
	CHECK(contains_all(msg, "nested deeper", NULL));
	pk_doc_free(d);
}

static void test_write_read(void)
{
	char msg[512];
	struct pk_doc *d = pk_doc_new();
	float data[6] = { 1, 2, 3, 4, 5, 6 };
	struct pk_value *root = pk_dict(d), *od = pk_odict(d), *ns = pk_namespace(d), *lst = pk_list(d);
	struct pk_value *st = pk_storage(d, PK_DT_F32, data, 6);
	int64_t size[2] = { 2, 3 }, tsize[2] = { 3, 2 }, tstride[2] = { 1, 3 };
	pk_set_str(d, od, "w", pk_tensor(d, st, 0, 2, size, NULL));
	pk_set_str(d, od, "wt", pk_tensor(d, st, 0, 2, tsize, tstride));
	pk_set_str(d, root, "model", od);
	pk_set_str(d, ns->obj.state, "lr", pk_float(d, 3e-4));
	pk_set_str(d, ns->obj.state, "dtype", pk_global(d, "torch.bfloat16"));
	pk_set_str(d, root, "args", ns);
	for (int64_t i = -70000; i <= 70000; i += 35000)
		pk_append(lst, pk_int(d, i * 100000000000LL));
	pk_append(lst, pk_bytes(d, "\x00\xff", 2));
	pk_set_str(d, root, "list", lst);
	pk_set(d, root, pk_int(d, 7), pk_none(d));
	log_capture(msg, sizeof(msg));
	CHECK(!pk_tensor(d, st, 4, 2, size, NULL)); /* reaches past the storage */
	log_capture(NULL, 0);
	CHECK(contains_all(msg, "reaches element 9 of a storage of 6", NULL));
	struct sbuf out = SBUF_INIT;
	struct pk_value **sts;
	size_t nst;
	CHECK(pk_dumps(root, &out, &sts, &nst) == 0);
	CHECK_INT(nst, 1);
	free(sts);
	/* read back: no storage callback, so tensors are refused; the rest is compared without them */
	struct pk_doc *d2 = pk_doc_new();
	CHECK(!load(d2, out.buf, out.len, msg, sizeof(msg)));
	CHECK(contains_all(msg, "no storage files", NULL));
	pk_set_str(d, root, "model", pk_none(d));
	sbuf_reset(&out);
	CHECK(pk_dumps(root, &out, &sts, &nst) == 0);
	free(sts);
	struct pk_value *v = load(d2, out.buf, out.len, msg, sizeof(msg));
	CHECK(v && v->kind == PK_DICT && v->seq.n == 4);
	if (v) {
		struct pk_value *a = pk_get(v, "args"), *l = pk_get(v, "list");
		CHECK(a && a->kind == PK_OBJECT && !strcmp(a->obj.cls, "argparse.Namespace"));
		CHECK(a && pk_get(a->obj.state, "lr")->f == 3e-4);
		CHECK(a && !strcmp(pk_get(a->obj.state, "dtype")->s.p, "torch.bfloat16"));
		CHECK(l && l->seq.n == 6);
		for (size_t i = 0; l && i < 5; i++)
			CHECK_INT(l->seq.v[i]->i, (-70000 + 35000 * (int64_t)i) * 100000000000LL);
		CHECK(l && l->seq.v[5]->kind == PK_BYTES && l->seq.v[5]->s.len == 2 && !memcmp(l->seq.v[5]->s.p, "\0\xff", 2));
	}
	sbuf_release(&out);
	pk_doc_free(d2);
	pk_doc_free(d);
}

int main(void)
{
	log_init("test_pickle", 0, 1);
	RUN(test_scalars);
	RUN(test_containers_memo);
	RUN(test_state_dict_attrs);
	RUN(test_refusals);
	RUN(test_write_read);
	return test_summary();
}
