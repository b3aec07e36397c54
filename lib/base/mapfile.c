/*
 * mapfile.c - see mapfile.h.
 */
#include "base/mapfile.h"

#include <errno.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/error.h"

int map_file(const char *path, const void **map, size_t *len)
{
	*map = NULL;
	*len = 0;
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return error_errno("cannot open '%s'", path);
	struct stat st;
	if (fstat(fd, &st) < 0) {
		int e = errno;
		close(fd);
		errno = e;
		return error_errno("cannot stat '%s'", path);
	}
	if (!S_ISREG(st.st_mode)) {
		close(fd);
		return error("'%s' is not a regular file", path);
	}
	if (st.st_size > 0) {
		void *m = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_PRIVATE, fd, 0);
		int e = errno;
		if (m == MAP_FAILED) {
			close(fd);
			errno = e;
			return error_errno("cannot mmap '%s'", path);
		}
		*map = m;
		*len = (size_t)st.st_size;
	}
	close(fd);
	return 0;
}

void map_file_release(const void *map, size_t len)
{
	if (map && len)
		munmap((void *)map, len);
}
