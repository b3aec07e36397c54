/*
 * utf8.h - UTF-8 validation (RFC 3629: no overlongs, no surrogates, nothing
 * above U+10FFFF). Tokenizers assume valid UTF-8; readers check it first.
 */
#ifndef MEGAC_BASE_UTF8_H
#define MEGAC_BASE_UTF8_H

#include <stdbool.h>
#include <stddef.h>

/* True when s[0..n) is valid UTF-8; otherwise *bad (if non-NULL) is the
 * byte offset of the first invalid sequence. */
bool utf8_valid(const char *s, size_t n, size_t *bad);

#endif
