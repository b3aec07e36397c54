/*
 * tboard.c - see tboard.h. Protobuf wire format, as far as these messages
 * need it: a field is a varint key (field number << 3 | wire type) followed
 * by a varint (type 0), 8 little-endian bytes (type 1), a varint length and
 * that many bytes (type 2: strings and nested messages) or 4 little-endian
 * bytes (type 5). Fields are written in field-number order and proto3
 * defaults (step 0, empty tag) are left out, as protobuf's own encoder does,
 * so our records are byte-identical to TensorBoard's for the same values.
 */
#include "train/tboard.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "base/error.h"
#include "base/sbuf.h"
#include "base/tempfile.h"
#include "base/xalloc.h"

/* ---------------------------------------------------------------- crc32c */

/* crc32c_table[b] = the reflected CRC of byte b under the Castagnoli
 * polynomial 0x82F63B78 (bitwise: c = c & 1 ? (c >> 1) ^ poly : c >> 1, eight
 * times); test_tboard checks a few entries and known check values. */
static const uint32_t crc32c_table[256] = {
	0x00000000, 0xf26b8303, 0xe13b70f7, 0x1350f3f4, 0xc79a971f, 0x35f1141c,
	0x26a1e7e8, 0xd4ca64eb, 0x8ad958cf, 0x78b2dbcc, 0x6be22838, 0x9989ab3b,
	0x4d43cfd0, 0xbf284cd3, 0xac78bf27, 0x5e133c24, 0x105ec76f, 0xe235446c,
	0xf165b798, 0x030e349b, 0xd7c45070, 0x25afd373, 0x36ff2087, 0xc494a384,
	0x9a879fa0, 0x68ec1ca3, 0x7bbcef57, 0x89d76c54, 0x5d1d08bf, 0xaf768bbc,
	0xbc267848, 0x4e4dfb4b, 0x20bd8ede, 0xd2d60ddd, 0xc186fe29, 0x33ed7d2a,
	0xe72719c1, 0x154c9ac2, 0x061c6936, 0xf477ea35, 0xaa64d611, 0x580f5512,
	0x4b5fa6e6, 0xb93425e5, 0x6dfe410e, 0x9f95c20d, 0x8cc531f9, 0x7eaeb2fa,
	0x30e349b1, 0xc288cab2, 0xd1d83946, 0x23b3ba45, 0xf779deae, 0x05125dad,
	0x1642ae59, 0xe4292d5a, 0xba3a117e, 0x4851927d, 0x5b016189, 0xa96ae28a,
	0x7da08661, 0x8fcb0562, 0x9c9bf696, 0x6ef07595, 0x417b1dbc, 0xb3109ebf,
	0xa0406d4b, 0x522bee48, 0x86e18aa3, 0x748a09a0, 0x67dafa54, 0x95b17957,
	0xcba24573, 0x39c9c670, 0x2a993584, 0xd8f2b687, 0x0c38d26c, 0xfe53516f,
	0xed03a29b, 0x1f682198, 0x5125dad3, 0xa34e59d0, 0xb01eaa24, 0x42752927,
	0x96bf4dcc, 0x64d4cecf, 0x77843d3b, 0x85efbe38, 0xdbfc821c, 0x2997011f,
	0x3ac7f2eb, 0xc8ac71e8, 0x1c661503, 0xee0d9600, 0xfd5d65f4, 0x0f36e6f7,
	0x61c69362, 0x93ad1061, 0x80fde395, 0x72966096, 0xa65c047d, 0x5437877e,
	0x4767748a, 0xb50cf789, 0xeb1fcbad, 0x197448ae, 0x0a24bb5a, 0xf84f3859,
	0x2c855cb2, 0xdeeedfb1, 0xcdbe2c45, 0x3fd5af46, 0x7198540d, 0x83f3d70e,
	0x90a324fa, 0x62c8a7f9, 0xb602c312, 0x44694011, 0x5739b3e5, 0xa55230e6,
	0xfb410cc2, 0x092a8fc1, 0x1a7a7c35, 0xe811ff36, 0x3cdb9bdd, 0xceb018de,
	0xdde0eb2a, 0x2f8b6829, 0x82f63b78, 0x709db87b, 0x63cd4b8f, 0x91a6c88c,
	0x456cac67, 0xb7072f64, 0xa457dc90, 0x563c5f93, 0x082f63b7, 0xfa44e0b4,
	0xe9141340, 0x1b7f9043, 0xcfb5f4a8, 0x3dde77ab, 0x2e8e845f, 0xdce5075c,
	0x92a8fc17, 0x60c37f14, 0x73938ce0, 0x81f80fe3, 0x55326b08, 0xa759e80b,
	0xb4091bff, 0x466298fc, 0x1871a4d8, 0xea1a27db, 0xf94ad42f, 0x0b21572c,
	0xdfeb33c7, 0x2d80b0c4, 0x3ed04330, 0xccbbc033, 0xa24bb5a6, 0x502036a5,
	0x4370c551, 0xb11b4652, 0x65d122b9, 0x97baa1ba, 0x84ea524e, 0x7681d14d,
	0x2892ed69, 0xdaf96e6a, 0xc9a99d9e, 0x3bc21e9d, 0xef087a76, 0x1d63f975,
	0x0e330a81, 0xfc588982, 0xb21572c9, 0x407ef1ca, 0x532e023e, 0xa145813d,
	0x758fe5d6, 0x87e466d5, 0x94b49521, 0x66df1622, 0x38cc2a06, 0xcaa7a905,
	0xd9f75af1, 0x2b9cd9f2, 0xff56bd19, 0x0d3d3e1a, 0x1e6dcdee, 0xec064eed,
	0xc38d26c4, 0x31e6a5c7, 0x22b65633, 0xd0ddd530, 0x0417b1db, 0xf67c32d8,
	0xe52cc12c, 0x1747422f, 0x49547e0b, 0xbb3ffd08, 0xa86f0efc, 0x5a048dff,
	0x8ecee914, 0x7ca56a17, 0x6ff599e3, 0x9d9e1ae0, 0xd3d3e1ab, 0x21b862a8,
	0x32e8915c, 0xc083125f, 0x144976b4, 0xe622f5b7, 0xf5720643, 0x07198540,
	0x590ab964, 0xab613a67, 0xb831c993, 0x4a5a4a90, 0x9e902e7b, 0x6cfbad78,
	0x7fab5e8c, 0x8dc0dd8f, 0xe330a81a, 0x115b2b19, 0x020bd8ed, 0xf0605bee,
	0x24aa3f05, 0xd6c1bc06, 0xc5914ff2, 0x37faccf1, 0x69e9f0d5, 0x9b8273d6,
	0x88d28022, 0x7ab90321, 0xae7367ca, 0x5c18e4c9, 0x4f48173d, 0xbd23943e,
	0xf36e6f75, 0x0105ec76, 0x12551f82, 0xe03e9c81, 0x34f4f86a, 0xc69f7b69,
	0xd5cf889d, 0x27a40b9e, 0x79b737ba, 0x8bdcb4b9, 0x988c474d, 0x6ae7c44e,
	0xbe2da0a5, 0x4c4623a6, 0x5f16d052, 0xad7d5351,
};

uint32_t tboard_crc32c_update(uint32_t crc, const void *data, size_t n)
{
	const unsigned char *p = data;
	crc = ~crc;
	for (size_t i = 0; i < n; i++)
		crc = crc32c_table[(crc ^ p[i]) & 0xff] ^ (crc >> 8);
	return ~crc;
}

uint32_t tboard_crc32c(const void *data, size_t n)
{
	return tboard_crc32c_update(0, data, n);
}

uint32_t tboard_masked_crc32c(const void *data, size_t n)
{
	uint32_t crc = tboard_crc32c(data, n);
	return ((crc >> 15) | (crc << 17)) + 0xa282ead8u;
}

/* ---------------------------------------------------------------- protobuf */

enum { PB_VARINT = 0, PB_FIXED64 = 1, PB_LEN = 2, PB_FIXED32 = 5 };

static void pb_varint(struct sbuf *sb, uint64_t v)
{
	while (v >= 0x80) {
		sbuf_addch(sb, (int)(v & 0x7f) | 0x80);
		v >>= 7;
	}
	sbuf_addch(sb, (int)v);
}

static void pb_key(struct sbuf *sb, unsigned field, unsigned wire)
{
	pb_varint(sb, (uint64_t)field << 3 | wire);
}

static void pb_le(struct sbuf *sb, uint64_t v, int nbytes)
{
	for (int i = 0; i < nbytes; i++)
		sbuf_addch(sb, (int)(v >> (8 * i) & 0xff));
}

static void pb_double(struct sbuf *sb, unsigned field, double x)
{
	uint64_t bits;
	memcpy(&bits, &x, sizeof(bits));
	pb_key(sb, field, PB_FIXED64);
	pb_le(sb, bits, 8);
}

static void pb_float(struct sbuf *sb, unsigned field, float x)
{
	uint32_t bits;
	memcpy(&bits, &x, sizeof(bits));
	pb_key(sb, field, PB_FIXED32);
	pb_le(sb, bits, 4);
}

static void pb_bytes(struct sbuf *sb, unsigned field, const void *data, size_t n)
{
	pb_key(sb, field, PB_LEN);
	pb_varint(sb, n);
	sbuf_add(sb, data, n);
}

/* tensorflow.Event field numbers */
enum { EVENT_WALL_TIME = 1, EVENT_STEP = 2, EVENT_FILE_VERSION = 3, EVENT_SUMMARY = 5 };
/* Summary.value, Summary.Value.tag, Summary.Value.simple_value */
enum { SUMMARY_VALUE = 1, VALUE_TAG = 1, VALUE_SIMPLE_VALUE = 2 };

/* The fields every Event starts with. */
static void event_head(struct sbuf *ev, double wall_time, int64_t step)
{
	uint64_t bits;
	memcpy(&bits, &wall_time, sizeof(bits));
	if (bits)
		pb_double(ev, EVENT_WALL_TIME, wall_time);
	if (step) { /* int64: a negative step takes ten bytes, two's complement */
		pb_key(ev, EVENT_STEP, PB_VARINT);
		pb_varint(ev, (uint64_t)step);
	}
}

/* ---------------------------------------------------------------- records */

static int write_record(struct tboard *w, const struct sbuf *data)
{
	unsigned char head[12], tail[4];
	uint64_t len = data->len;
	for (int i = 0; i < 8; i++)
		head[i] = (unsigned char)(len >> (8 * i));
	uint32_t hcrc = tboard_masked_crc32c(head, 8);
	uint32_t dcrc = tboard_masked_crc32c(data->buf, data->len);
	for (int i = 0; i < 4; i++) {
		head[8 + i] = (unsigned char)(hcrc >> (8 * i));
		tail[i] = (unsigned char)(dcrc >> (8 * i));
	}
	if (fwrite(head, 1, sizeof(head), w->fp) != sizeof(head) ||
	    fwrite(data->buf, 1, data->len, w->fp) != data->len ||
	    fwrite(tail, 1, sizeof(tail), w->fp) != sizeof(tail)) {
		w->failed = 1;
		return error_errno("cannot write '%s'", w->path);
	}
	return 0;
}

static double wall_clock(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_REALTIME, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static int usable(const struct tboard *w)
{
	if (!w->fp)
		BUG("tboard: write to a closed writer");
	if (w->failed)
		return error("'%s': earlier writes failed", w->path);
	return 0;
}

/* ---------------------------------------------------------------- api */

int tboard_open(struct tboard *w, const char *dir)
{
	memset(w, 0, sizeof(*w));
	if (mkdir_p(dir))
		return -1;

	char host[HOST_NAME_MAX + 1];
	if (gethostname(host, sizeof(host)) < 0)
		strcpy(host, "localhost");
	host[HOST_NAME_MAX] = 0;

	double now = wall_clock();
	long long secs = (long long)now;
	int fd = -1;
	for (int k = 0; fd < 0; k++) {
		free(w->path);
		w->path = xasprintf("%s/events.out.tfevents.%010lld.%s.%ld.%d", dir, secs, host,
				    (long)getpid(), k);
		fd = open(w->path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
		if (fd < 0 && errno != EEXIST) {
			error_errno("cannot create '%s'", w->path);
			free(w->path);
			w->path = NULL;
			return -1;
		}
	}
	w->fp = fdopen(fd, "wb");
	if (!w->fp) {
		error_errno("cannot open '%s'", w->path);
		close(fd);
		free(w->path);
		w->path = NULL;
		return -1;
	}

	/* The version record tells readers which Event schema follows. */
	static const char version[] = "brain.Event:2";
	struct sbuf ev = SBUF_INIT;
	event_head(&ev, now, 0);
	pb_bytes(&ev, EVENT_FILE_VERSION, version, sizeof(version) - 1);
	int rc = write_record(w, &ev);
	sbuf_release(&ev);
	if (rc == 0)
		rc = tboard_flush(w);
	if (rc) {
		tboard_close(w);
		return -1;
	}
	return 0;
}

int tboard_add_scalar_at(struct tboard *w, const char *tag, int64_t step, double value,
			 double wall_time)
{
	if (w->mirror && tboard_add_scalar_at(w->mirror, tag, step, value, wall_time) < 0)
		return -1;
	if (usable(w))
		return -1;
	struct sbuf val = SBUF_INIT, sum = SBUF_INIT, ev = SBUF_INIT;
	size_t taglen = strlen(tag);
	if (taglen)
		pb_bytes(&val, VALUE_TAG, tag, taglen);
	/* simple_value sits in a oneof, so it is written even when 0. */
	pb_float(&val, VALUE_SIMPLE_VALUE, (float)value);
	pb_bytes(&sum, SUMMARY_VALUE, val.buf, val.len);
	event_head(&ev, wall_time, step);
	pb_bytes(&ev, EVENT_SUMMARY, sum.buf, sum.len);
	int rc = write_record(w, &ev);
	sbuf_release(&val);
	sbuf_release(&sum);
	sbuf_release(&ev);
	return rc;
}

int tboard_add_scalar(struct tboard *w, const char *tag, int64_t step, double value)
{
	return tboard_add_scalar_at(w, tag, step, value, wall_clock());
}

int tboard_flush(struct tboard *w)
{
	if (w->mirror && tboard_flush(w->mirror) < 0)
		return -1;
	if (usable(w))
		return -1;
	if (fflush(w->fp)) {
		w->failed = 1;
		return error_errno("cannot write '%s'", w->path);
	}
	return 0;
}

int tboard_close(struct tboard *w)
{
	int rc = 0;
	if (w->fp) {
		if (w->failed)
			rc = error("'%s' is incomplete: earlier writes failed", w->path);
		if (fclose(w->fp) && !rc)
			rc = error_errno("cannot write '%s'", w->path);
	}
	free(w->path);
	memset(w, 0, sizeof(*w));
	return rc;
}
