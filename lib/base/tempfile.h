/*
 * tempfile.h - output that is either complete or absent.
 *
 * Every file megac writes for a user goes through an afile: it is written
 * under a temporary name in the destination directory, flushed and fsync'd,
 * then renamed over the final name, and the directory is fsync'd. Until the
 * rename, the temporary name is registered in a process-wide table that an
 * atexit() hook and the SIGINT/SIGTERM/SIGHUP/SIGPIPE handlers unlink, so a
 * die(), a Ctrl-C or a killed job leaves nothing half-written behind.
 *
 * Steps are separate so callers writing several files (a dataset's .bin and
 * .idx) can finish all of them before publishing any.
 */
#ifndef MEGAC_BASE_TEMPFILE_H
#define MEGAC_BASE_TEMPFILE_H

#include <stdio.h>

struct afile {
	char *path;   /* final name */
	char *tmp;    /* temporary name while writing, NULL once published */
	FILE *fp;     /* buffered stream on tmp, NULL after afile_finish */
	int slot;     /* index in the cleanup table */
};

/* Create and open a temporary file next to `path`. error() and -1 on failure. */
int afile_open(struct afile *af, const char *path);
/* Flush, fsync and close the temporary file (still unpublished). */
int afile_finish(struct afile *af);
/* Rename the finished temporary file to its final name and fsync the directory. */
int afile_publish(struct afile *af);
/* afile_finish + afile_publish. */
int afile_commit(struct afile *af);
/* Close and remove the temporary file; safe to call at any stage and twice. */
void afile_abort(struct afile *af);

/* An unnamed scratch file in `dir` (created then unlinked at once, so it
 * vanishes with the process whatever happens). error() and NULL on failure. */
FILE *scratch_file(const char *dir);

/* Parent directory of path ("." when it has none); caller frees. */
char *path_dirname(const char *path);
/* mkdir -p: create path and its missing parents. error() and -1 on failure. */
int mkdir_p(const char *path);
/* fsync a directory so a rename inside it is durable. */
int fsync_dir(const char *dir);

#endif
