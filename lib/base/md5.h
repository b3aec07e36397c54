/*
 * md5.h - MD5 (RFC 1321). Megatron names its dataset index caches by the MD5
 * of a JSON description (Megatron's megatron/core/datasets/megatron_dataset.py,
 * MegatronDataset's unique_description_hash; docs/formats.md); this is for such names
 * and checksums, not for security.
 */
#ifndef MEGAC_BASE_MD5_H
#define MEGAC_BASE_MD5_H

#include <stddef.h>
#include <stdint.h>

struct md5_ctx {
	uint32_t h[4];
	uint64_t len;             /* bytes hashed so far */
	unsigned char buf[64];    /* a partial block */
};

void md5_init(struct md5_ctx *c);
void md5_update(struct md5_ctx *c, const void *data, size_t n);
void md5_final(struct md5_ctx *c, unsigned char digest[16]);

/* The lowercase hex digest of data[0..n) (Python's hashlib.md5().hexdigest()). */
void md5_hex(const void *data, size_t n, char out[33]);

#endif
