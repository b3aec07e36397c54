/*
 * mapfile.h - a regular file mapped read-only, for the readers of whole
 * files (safetensors, torch.save zips): open, check it is a regular file,
 * mmap, close the descriptor.
 */
#ifndef MEGAC_BASE_MAPFILE_H
#define MEGAC_BASE_MAPFILE_H

#include <stddef.h>

/* *map and *len: the file's bytes (*map NULL for an empty file). 0, or -1
 * after error() naming path. Release with map_file_release. */
int map_file(const char *path, const void **map, size_t *len);
void map_file_release(const void *map, size_t len);

#endif
