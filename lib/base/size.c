/*
 * size.c - see size.h.
 */
#include "base/size.h"

#include <math.h>
#include <stdlib.h>
#include <strings.h>

#include "base/error.h"

#define MIB (1024.0 * 1024.0)

int size_parse(const char *s, const char *flag, double *bytes)
{
	static const struct {
		const char *unit;
		double scale;
	} units[] = {
		{ "", 1 },	     { "B", 1 },	  { "KB", 1e3 },	{ "MB", 1e6 },	 { "GB", 1e9 },
		{ "TB", 1e12 },	     { "KiB", 1024.0 },	  { "MiB", MIB },	{ "GiB", MIB * 1024 },
		{ "TiB", MIB * MIB },
	};
	char *end;
	double x = s ? strtod(s, &end) : 0;
	if (!s || end == s || !(x > 0) || !isfinite(x))
		goto bad;
	while (*end == ' ')
		end++;
	for (size_t i = 0; i < sizeof(units) / sizeof(units[0]); i++) {
		if (!strcasecmp(end, units[i].unit)) {
			*bytes = x * units[i].scale;
			return 0;
		}
	}
bad:
	return error("%s '%s': give a size such as 80GiB, 141GB, 512MiB or a number of bytes", flag, s ? s : "");
}
