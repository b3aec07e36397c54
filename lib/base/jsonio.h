/*
 * jsonio.h - JSON files through jansson, with errors that name the file,
 * line and column, and typed lookups that say which key was wrong.
 */
#ifndef MEGAC_BASE_JSONIO_H
#define MEGAC_BASE_JSONIO_H

#include <jansson.h>

/* Parse the whole file at path. error() and NULL on failure. */
json_t *jsonio_load_file(const char *path);
/* The same with more jansson decoding flags, e.g. JSON_DECODE_INT_AS_REAL for a
 * file whose integers may exceed 64 bits and are not read as integers. */
json_t *jsonio_load_file_flags(const char *path, size_t flags);
/* Parse a buffer; `what` names it in error messages. */
json_t *jsonio_load_buffer(const char *buf, size_t len, const char *what);

/* Object member lookups; NULL (and no message) when absent or of another type. */
const char *jsonio_get_str(const json_t *obj, const char *key);

#endif
