/*
 * size.h - byte sizes on the command line: "80GiB", "141GB", "512MiB",
 * "1.5 TiB", "123456" (decimal and binary units, any case).
 */
#ifndef MEGAC_BASE_SIZE_H
#define MEGAC_BASE_SIZE_H

/* The bytes of s; error() naming flag and -1 when it is not a positive size. */
int size_parse(const char *s, const char *flag, double *bytes);

#endif
