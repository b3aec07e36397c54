/*
 * test_tboard.c - lib/train/tboard (TensorBoard event files) and
 * lib/train/metrics (JSON lines).
 *
 * The event files are decoded by a Python script written here from the
 * formats themselves (TFRecord framing, CRC-32C computed bit by bit,
 * protobuf varints and fixed-width fields), not from tboard.c; when the
 * `tensorboard` package is importable by /usr/bin/python3 the files are read
 * with it too. The JSON lines are read back with Python's json.loads.
 */
#include <math.h>
#include <sys/stat.h>

#include "base/error.h"
#include "base/sbuf.h"
#include "base/xalloc.h"
#include "train/metrics.h"
#include "train/tboard.h"
#include "test.h"

/* Known CRC-32C values (RFC 3720 B.4 and the usual check string). */
static void test_crc32c(void)
{
	unsigned char buf[48];
	CHECK(tboard_crc32c("123456789", 9) == 0xe3069283u);
	CHECK(tboard_crc32c("", 0) == 0);
	memset(buf, 0, 32);
	CHECK(tboard_crc32c(buf, 32) == 0x8a9136aau);
	memset(buf, 0xff, 32);
	CHECK(tboard_crc32c(buf, 32) == 0x62a8ab43u);
	for (int i = 0; i < 32; i++)
		buf[i] = (unsigned char)i;
	CHECK(tboard_crc32c(buf, 32) == 0x46dd794eu);
	for (int i = 0; i < 32; i++)
		buf[i] = (unsigned char)(31 - i);
	CHECK(tboard_crc32c(buf, 32) == 0x113fdb5cu);

	/* pieces give the same checksum as the whole */
	for (int i = 0; i < 48; i++)
		buf[i] = (unsigned char)(i * 37 + 11);
	for (size_t cut = 0; cut <= 48; cut += 7) {
		uint32_t c = tboard_crc32c_update(0, buf, cut);
		c = tboard_crc32c_update(c, buf + cut, 48 - cut);
		CHECK(c == tboard_crc32c(buf, 48));
	}

	/* the mask: rotate right by 15, add a constant */
	uint32_t crc = tboard_crc32c("123456789", 9);
	CHECK(tboard_masked_crc32c("123456789", 9) == ((crc >> 15) | (crc << 17)) + 0xa282ead8u);
}

/* ---------------------------------------------------------------- events */

static const char py_events[] =
	"import os, re, struct, sys, math, socket, time\n"
	"def crc32c(data):\n"
	"    crc = 0xffffffff\n"
	"    for b in data:\n"
	"        crc ^= b\n"
	"        for _ in range(8):\n"
	"            crc = (crc >> 1) ^ (0x82F63B78 if crc & 1 else 0)\n"
	"    return crc ^ 0xffffffff\n"
	"def masked(data):\n"
	"    c = crc32c(data)\n"
	"    return (((c >> 15) | (c << 17)) + 0xa282ead8) & 0xffffffff\n"
	"def records(raw):\n"
	"    at = 0\n"
	"    while at < len(raw):\n"
	"        head = raw[at:at + 8]\n"
	"        (n,) = struct.unpack('<Q', head)\n"
	"        (hc,) = struct.unpack('<I', raw[at + 8:at + 12])\n"
	"        assert hc == masked(head), 'length crc'\n"
	"        data = raw[at + 12:at + 12 + n]\n"
	"        assert len(data) == n, 'truncated record'\n"
	"        (dc,) = struct.unpack('<I', raw[at + 12 + n:at + 16 + n])\n"
	"        assert dc == masked(data), 'data crc'\n"
	"        at += 16 + n\n"
	"        yield data\n"
	"def varint(b, at):\n"
	"    v = shift = 0\n"
	"    while True:\n"
	"        x = b[at]; at += 1\n"
	"        v |= (x & 0x7f) << shift; shift += 7\n"
	"        if not x & 0x80:\n"
	"            return v, at\n"
	"def fields(b):\n"
	"    at, out = 0, []\n"
	"    while at < len(b):\n"
	"        key, at = varint(b, at)\n"
	"        num, wire = key >> 3, key & 7\n"
	"        if wire == 0:\n"
	"            v, at = varint(b, at)\n"
	"        elif wire == 1:\n"
	"            v = b[at:at + 8]; at += 8\n"
	"        elif wire == 2:\n"
	"            n, at = varint(b, at)\n"
	"            v = b[at:at + n]; at += n\n"
	"        elif wire == 5:\n"
	"            v = b[at:at + 4]; at += 4\n"
	"        else:\n"
	"            raise SystemExit('wire type %d' % wire)\n"
	"        out.append((num, wire, v))\n"
	"    assert at == len(b)\n"
	"    return out\n"
	"def event(b):\n"
	"    ev = {'wall_time': 0.0, 'step': 0}\n"
	"    nums = [f[0] for f in fields(b)]\n"
	"    assert nums == sorted(nums), 'field order'\n"
	"    for num, wire, v in fields(b):\n"
	"        if num == 1:\n"
	"            assert wire == 1; ev['wall_time'] = struct.unpack('<d', v)[0]\n"
	"        elif num == 2:\n"
	"            assert wire == 0; ev['step'] = v - (1 << 64) if v >= 1 << 63 else v\n"
	"        elif num == 3:\n"
	"            assert wire == 2; ev['file_version'] = v.decode()\n"
	"        elif num == 5:\n"
	"            assert wire == 2\n"
	"            vals = []\n"
	"            for vn, vw, vv in fields(v):\n"
	"                assert vn == 1 and vw == 2\n"
	"                val = {'tag': ''}\n"
	"                for fn, fw, fv in fields(vv):\n"
	"                    if fn == 1: assert fw == 2; val['tag'] = fv.decode()\n"
	"                    elif fn == 2: assert fw == 5; val['simple_value'] = struct.unpack('<f', fv)[0]\n"
	"                    else: raise SystemExit('value field %d' % fn)\n"
	"                vals.append(val)\n"
	"            ev['values'] = vals\n"
	"        else:\n"
	"            raise SystemExit('event field %d' % num)\n"
	"    return ev\n"
	"def f32(x):\n"
	"    try:\n"
	"        return struct.unpack('<f', struct.pack('<f', x))[0]\n"
	"    except OverflowError:\n"
	"        return math.copysign(math.inf, x)\n"
	"def same(a, b):\n"
	"    return (math.isnan(a) and math.isnan(b)) or a == b\n"
	"D = sys.argv[1]\n"
	"host = socket.gethostname()\n"
	"names = sorted(f for f in os.listdir(D + '/logs/tb'))\n"
	"assert len(names) == 2, names\n"
	"pat = r'events\\.out\\.tfevents\\.(\\d{10})\\.' + re.escape(host) + r'\\.(\\d+)\\.(\\d+)$'\n"
	"ms = [re.match(pat, n) for n in names]\n"
	"assert all(ms), names\n"
	"assert sorted(int(m.group(3)) for m in ms) == [0, 1], names\n"
	"now = time.time()\n"
	"assert all(abs(int(m.group(1)) - now) < 600 for m in ms)\n"
	"expect = [tuple(l.rstrip('\\n').split('\\t')) for l in open(D + '/expect.tsv', encoding='utf-8')]\n"
	"main = [n for n, m in zip(names, ms) if m.group(3) == '0'][0]\n"
	"evs = [event(r) for r in records(open(D + '/logs/tb/' + main, 'rb').read())]\n"
	"assert evs[0].get('file_version') == 'brain.Event:2', evs[0]\n"
	"assert abs(evs[0]['wall_time'] - now) < 600\n"
	"assert 'values' not in evs[0] and evs[0]['step'] == 0\n"
	"assert len(evs) == 1 + len(expect), (len(evs), len(expect))\n"
	"for ev, (tag, step, value, wall) in zip(evs[1:], expect):\n"
	"    assert len(ev['values']) == 1\n"
	"    v = ev['values'][0]\n"
	"    assert v['tag'] == tag, (v['tag'], tag)\n"
	"    assert ev['step'] == int(step), (ev['step'], step)\n"
	"    assert same(v['simple_value'], f32(float(value))), (v, value)\n"
	"    if wall != '-':\n"
	"        assert ev['wall_time'] == float(wall), (ev['wall_time'], wall)\n"
	"    else:\n"
	"        assert abs(ev['wall_time'] - now) < 600\n"
	"other = [event(r) for r in records(open(D + '/logs/tb/' + [n for n in names if n != main][0], 'rb').read())]\n"
	"assert [e.get('file_version') for e in other] == ['brain.Event:2', None]\n"
	"assert other[1]['values'][0] == {'tag': 'second', 'simple_value': 2.5}\n"
	"print('decoded', len(evs) - 1)\n"
	"try:\n"
	"    from tensorboard.backend.event_processing.event_file_loader import EventFileLoader\n"
	"except Exception:\n"
	"    print('tensorboard: not installed, skipped')\n"
	"else:\n"
	"    tb = list(EventFileLoader(D + '/logs/tb/' + main).Load())\n"
	"    assert tb[0].file_version == 'brain.Event:2'\n"
	"    n = 0\n"
	"    for e, (tag, step, value, wall) in zip(tb[1:], expect):\n"
	"        v = e.summary.value[0]\n"
	"        # the loader may turn simple_value into a tensor (data-compat)\n"
	"        got = v.simple_value if v.HasField('simple_value') else v.tensor.float_val[0]\n"
	"        assert v.tag == tag and e.step == int(step) and same(got, f32(float(value)))\n"
	"        n += 1\n"
	"    assert n == len(expect)\n"
	"    print('tensorboard: read', n)\n";

struct scalar {
	const char *tag;
	int64_t step;
	double value;
	double wall; /* < 0: the current time */
};

static void test_event_file(void)
{
	char *dir = test_tmpdir("tboard");
	char tbdir[4200], path[4300];
	snprintf(tbdir, sizeof(tbdir), "%s/logs/tb", dir); /* created with its parent */
	static char long_tag[400];
	for (size_t i = 0; i < sizeof(long_tag) - 1; i++)
		long_tag[i] = (char)('a' + i % 26);
	const struct scalar sc[] = {
		{ "lm loss", 1, 10.987654321, -1 },
		{ "learning-rate", 1, 3e-4, -1 },
		{ "loss-scale", 2, 4294967296.0, 1700000000.25 },
		{ "lm loss vs samples", 1024, 9.5, 1700000001.5 },
		{ "grad-norm", 0, 0.0, -1 },           /* step 0 and value 0: proto3 defaults */
		{ "neg", -5, -1.5, -1 },               /* negative int64: ten-byte varint */
		{ "big step", (int64_t)1 << 40, 1e-45, -1 },
		{ "", 3, 1.0, -1 },                    /* empty tag */
		{ "nan", 4, NAN, -1 },
		{ "inf", 5, INFINITY, -1 },
		{ "-inf", 6, -INFINITY, -1 },
		{ "rounds to float32", 7, 0.1, -1 },
		{ "overflows float32", 8, 1e300, -1 },
		{ "validation loss/ünïcode", 9, 2.0, -1 },
		{ long_tag, 10, 123456.789, -1 },      /* lengths past one varint byte */
	};
	const size_t n = sizeof(sc) / sizeof(sc[0]);

	struct tboard w, w2;
	CHECK_INT(tboard_open(&w, tbdir), 0);
	CHECK_INT(tboard_open(&w2, tbdir), 0); /* same second: a different file */
	CHECK(w.path && w2.path && strcmp(w.path, w2.path));
	if (!w.fp || !w2.fp) {
		free(dir);
		return;
	}
	struct sbuf expect = SBUF_INIT;
	for (size_t i = 0; i < n; i++) {
		if (sc[i].wall < 0) {
			CHECK_INT(tboard_add_scalar(&w, sc[i].tag, sc[i].step, sc[i].value), 0);
			sbuf_addf(&expect, "%s\t%" PRId64 "\t%.17g\t-\n", sc[i].tag, sc[i].step, sc[i].value);
		} else {
			CHECK_INT(tboard_add_scalar_at(&w, sc[i].tag, sc[i].step, sc[i].value, sc[i].wall), 0);
			sbuf_addf(&expect, "%s\t%" PRId64 "\t%.17g\t%.17g\n", sc[i].tag, sc[i].step, sc[i].value,
				  sc[i].wall);
		}
		if (i == 3) {
			/* after a flush the records so far are on disk */
			struct stat st;
			CHECK_INT(tboard_flush(&w), 0);
			CHECK(stat(w.path, &st) == 0 && st.st_size > 100);
		}
	}
	CHECK_INT(tboard_add_scalar(&w2, "second", 1, 2.5), 0);
	CHECK_INT(tboard_close(&w), 0);
	CHECK_INT(tboard_close(&w2), 0);
	CHECK_INT(tboard_close(&w), 0); /* twice is harmless */

	snprintf(path, sizeof(path), "%s/expect.tsv", dir);
	FILE *f = fopen(path, "w");
	CHECK(f != NULL);
	if (f) {
		fwrite(expect.buf, 1, expect.len, f);
		fclose(f);
	}
	char *out = test_python(dir, "", py_events);
	CHECK(out != NULL);
	if (out) {
		char want[64];
		snprintf(want, sizeof(want), "decoded %zu\n", n);
		CHECK(strstr(out, want) != NULL);
		CHECK(strstr(out, "tensorboard: ") != NULL);
		free(out);
	}
	sbuf_release(&expect);
	free(dir);
}

/* The bytes of a scalar record, worked out by hand from the formats. */
static void test_record_bytes(void)
{
	char *dir = test_tmpdir("tboard_bytes");
	struct tboard w;
	CHECK_INT(tboard_open(&w, dir), 0);
	if (!w.fp) {
		free(dir);
		return;
	}
	CHECK_INT(tboard_add_scalar_at(&w, "x", 300, 1.0, 2.0), 0);
	char *path = xstrdup(w.path);
	CHECK_INT(tboard_close(&w), 0);
	size_t len;
	unsigned char *raw = (unsigned char *)test_read_file(path, &len);
	CHECK(raw != NULL);
	/* Event: 09 <2.0 as double> 10 ac 02 (300) 2a 0a { 0a 08 { 0a 01 'x' 15 <1.0f> } } */
	static const unsigned char ev[] = { 0x09, 0, 0, 0, 0, 0, 0, 0, 0x40, 0x10, 0xac, 0x02, 0x2a,
					    0x0a, 0x0a, 0x08, 0x0a, 0x01, 'x', 0x15, 0, 0, 0x80, 0x3f };
	/* the first record: 8 + 4 + (9 + 2 + 13) + 4 bytes */
	const size_t first = 8 + 4 + 24 + 4;
	CHECK(raw && len == first + 8 + 4 + sizeof(ev) + 4);
	if (raw && len == first + 8 + 4 + sizeof(ev) + 4) {
		unsigned char *r = raw + first;
		CHECK(r[0] == sizeof(ev) && !r[1] && !r[2] && !r[3] && !r[4] && !r[5] && !r[6] && !r[7]);
		uint32_t hc = tboard_masked_crc32c(r, 8), dc = tboard_masked_crc32c(ev, sizeof(ev));
		CHECK(!memcmp(r + 8, &hc, 4));
		CHECK(!memcmp(r + 12, ev, sizeof(ev)));
		CHECK(!memcmp(r + 12 + sizeof(ev), &dc, 4));
		CHECK(!memcmp(raw + 12 + 9 + 2, "brain.Event:2", 13));
	}
	free(raw);
	free(path);
	free(dir);
}

static void test_open_error(void)
{
	char *dir = test_tmpdir("tboard_err");
	char file[4200], sub[4300];
	snprintf(file, sizeof(file), "%s/plainfile", dir);
	FILE *f = fopen(file, "w");
	if (f)
		fclose(f);
	snprintf(sub, sizeof(sub), "%s/tb", file);
	struct tboard w;
	struct metrics m;
	struct test_capture cap;
	test_capture_begin(&cap, 2);
	CHECK_INT(tboard_open(&w, sub), -1);
	CHECK_INT(metrics_open(&m, sub), -1);
	char *msg = test_capture_end(&cap);
	CHECK(msg && strstr(msg, "plainfile"));
	CHECK(w.fp == NULL && w.path == NULL);
	CHECK_INT(tboard_close(&w), 0);
	free(msg);
	free(dir);
}

/* ---------------------------------------------------------------- metrics */

static const char py_metrics[] =
	"import json, math, sys\n"
	"lines = open(sys.argv[1] + '/logs/metrics.jsonl', encoding='utf-8').read().split('\\n')\n"
	"assert lines[-1] == '', 'ends with a newline'\n"
	"rows = [json.loads(l) for l in lines[:-1]]\n"
	"assert len(rows) == 3, len(rows)\n"
	"a, b, c = rows\n"
	"assert list(a) == ['iteration', 'lm loss', 'learning rate', 'loss scale', 'grad norm', 'consumed samples']\n"
	"assert a['iteration'] == 10 and type(a['iteration']) is int\n"
	"assert a['lm loss'] == 2.718281828459045 and type(a['lm loss']) is float\n"
	"assert a['learning rate'] == 0.1 and a['loss scale'] == 1.0 and type(a['loss scale']) is float\n"
	"assert a['grad norm'] == 5e-324 and a['consumed samples'] == 9007199254740993\n"
	"assert b['iteration'] == 20 and math.isnan(b['nan']) and b['inf'] == math.inf and b['-inf'] == -math.inf\n"
	"assert b['q\"uo\\\\te\\n\\x01'] == -0.0 and math.copysign(1, b['q\"uo\\\\te\\n\\x01']) < 0\n"
	"assert b['ünï'] == 1e300 and b['small'] == 2.2250738585072014e-308\n"
	"assert c == {'iteration': -1}\n"
	"assert lines[0].startswith('{\"iteration\": 10, \"lm loss\": 2.718281828459045, \"learning rate\": 0.1, ')\n"
	"print('rows', len(rows))\n";

static void test_metrics(void)
{
	char *dir = test_tmpdir("metrics");
	char path[4200];
	snprintf(path, sizeof(path), "%s/logs/metrics.jsonl", dir); /* the directory is created */
	struct metrics m;
	CHECK_INT(metrics_open(&m, path), 0);
	if (!m.fp) {
		free(dir);
		return;
	}
	const struct metrics_field a[] = {
		METRICS_D("lm loss", 2.718281828459045),
		METRICS_D("learning rate", 0.1),
		METRICS_D("loss scale", 1.0),
		METRICS_D("grad norm", 5e-324),
		METRICS_I("consumed samples", 9007199254740993LL), /* not a double */
	};
	CHECK_INT(metrics_write(&m, 10, a, sizeof(a) / sizeof(a[0])), 0);
	/* flushed at once: readable before close */
	size_t len;
	char *text = test_read_file(path, &len);
	CHECK(text && len > 0 && text[len - 1] == '\n');
	free(text);
	CHECK_INT(metrics_close(&m), 0);

	/* a second open appends */
	CHECK_INT(metrics_open(&m, path), 0);
	const struct metrics_field b[] = {
		METRICS_D("nan", NAN),
		METRICS_D("inf", INFINITY),
		METRICS_D("-inf", -INFINITY),
		METRICS_D("q\"uo\\te\n\x01", -0.0),
		METRICS_D("ünï", 1e300),
		METRICS_D("small", 2.2250738585072014e-308),
	};
	CHECK_INT(metrics_write(&m, 20, b, sizeof(b) / sizeof(b[0])), 0);
	CHECK_INT(metrics_write(&m, -1, NULL, 0), 0);
	CHECK_INT(metrics_close(&m), 0);
	CHECK_INT(metrics_close(&m), 0);

	char *out = test_python(dir, "", py_metrics);
	CHECK(out && strstr(out, "rows 3"));
	free(out);
	free(dir);
}

int main(void)
{
	log_init("test_tboard", 0, 1);
	RUN(test_crc32c);
	RUN(test_event_file);
	RUN(test_record_bytes);
	RUN(test_open_error);
	RUN(test_metrics);
	return test_summary();
}
