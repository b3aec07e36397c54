/*
 * pyjson.h - JSON text exactly as CPython 3.11's json.dumps() writes it, for
 * a jansson value. Megatron names its dataset caches by the MD5 of
 * json.dumps(identifiers, indent=4) (megatron/core/datasets/megatron_dataset.py), so sharing
 * caches needs the same bytes: Python's separators and indentation,
 * ensure_ascii escapes (\uXXXX, lowercase hex, surrogate pairs, DEL too),
 * floats in repr() form (shortest round-trip digits, '1.0', '1e-05',
 * '1e+16'), NaN / Infinity as json writes them. Object members come out in
 * jansson's order, which (2.14) is insertion order, like a Python dict.
 */
#ifndef MEGAC_BASE_PYJSON_H
#define MEGAC_BASE_PYJSON_H

#include <jansson.h>

#include "base/sbuf.h"

/* Append json.dumps(v, indent=indent) to out; indent < 0 means indent=None
 * (one line, ", " and ": " separators). error() and -1 when a string is not
 * valid UTF-8 (out then holds a partial text). */
int pyjson_dumps(json_t *v, int indent, struct sbuf *out);

/* Append json.dumps(s, ensure_ascii=False) for the n bytes of s: quoted,
 * with '"', '\\' and the control characters below 0x20 escaped (\n, \r,
 * \t, \b, \f, else \u00XX), every other byte as it is. */
void pyjson_string(struct sbuf *out, const char *s, size_t n);

/* Python's repr(x) for a float: "0.1", "1.0", "-0.0", "1e-05", "1e+16",
 * "1.2345678901234568e+17", "inf", "-inf", "nan". */
#define PYJSON_FLOAT_MAX 32
void pyjson_float_repr(double x, char out[PYJSON_FLOAT_MAX]);

#endif
