/*
 * tempfile.c - see tempfile.h. The cleanup table is a fixed array of path
 * pointers so the signal handler can walk it without locks or allocation
 * (unlink(2) is async-signal-safe).
 */
#include "tempfile.h"
#include "error.h"
#include "xalloc.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <sys/stat.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define TEMPFILE_SLOTS 1024

static char *volatile cleanup_table[TEMPFILE_SLOTS];
static pthread_mutex_t cleanup_lock = PTHREAD_MUTEX_INITIALIZER;
static int cleanup_installed;
static mode_t file_mode = 0644; /* 0666 less the umask, read once */

static void cleanup_all(void)
{
	for (int i = 0; i < TEMPFILE_SLOTS; i++) {
		char *p = cleanup_table[i];
		if (p)
			unlink(p);
	}
}

static void cleanup_signal(int sig)
{
	cleanup_all();
	signal(sig, SIG_DFL);
	raise(sig);
}

static void install_cleanup(void)
{
	static const int sigs[] = { SIGINT, SIGTERM, SIGHUP, SIGPIPE, SIGQUIT };
	atexit(cleanup_all);
	for (size_t i = 0; i < sizeof(sigs) / sizeof(sigs[0]); i++) {
		struct sigaction sa, old;
		memset(&sa, 0, sizeof(sa));
		sa.sa_handler = cleanup_signal;
		sigemptyset(&sa.sa_mask);
		if (sigaction(sigs[i], NULL, &old) == 0 && old.sa_handler == SIG_IGN)
			continue; /* respect nohup and friends */
		sigaction(sigs[i], &sa, NULL);
	}
}

/* The slot of path in the cleanup table, or -1 when the table is full. */
static int register_tmp(char *path)
{
	pthread_mutex_lock(&cleanup_lock);
	if (!cleanup_installed) {
		install_cleanup();
		mode_t mask = umask(0);
		umask(mask);
		file_mode = 0666 & ~mask;
		cleanup_installed = 1;
	}
	for (int i = 0; i < TEMPFILE_SLOTS; i++) {
		if (!cleanup_table[i]) {
			cleanup_table[i] = path;
			pthread_mutex_unlock(&cleanup_lock);
			return i;
		}
	}
	pthread_mutex_unlock(&cleanup_lock);
	return -1;
}

static void unregister_tmp(int slot)
{
	if (slot < 0)
		return;
	pthread_mutex_lock(&cleanup_lock);
	cleanup_table[slot] = NULL;
	pthread_mutex_unlock(&cleanup_lock);
}

char *path_dirname(const char *path)
{
	const char *slash = strrchr(path, '/');
	if (!slash)
		return xstrdup(".");
	if (slash == path)
		return xstrdup("/");
	return xstrndup(path, (size_t)(slash - path));
}

int mkdir_p(const char *path)
{
	char *p = xstrdup(path);
	for (char *q = p + 1;; q++) {
		if (*q != '/' && *q)
			continue;
		char c = *q;
		*q = 0;
		if (mkdir(p, 0777) < 0 && errno != EEXIST) {
			int e = errno;
			struct stat st;
			if (stat(p, &st) < 0 || !S_ISDIR(st.st_mode)) {
				errno = e;
				error_errno("cannot create directory '%s'", p);
				free(p);
				return -1;
			}
		}
		*q = c;
		if (!c)
			break;
	}
	free(p);
	return 0;
}

int fsync_dir(const char *dir)
{
	int fd = open(dir, O_RDONLY | O_DIRECTORY);
	if (fd < 0)
		return error_errno("cannot open directory '%s' to sync it", dir);
	/* Some file systems refuse fsync on directories; that is not data loss. */
	if (fsync(fd) < 0 && errno != EINVAL && errno != EROFS) {
		int e = errno;
		close(fd);
		errno = e;
		return error_errno("cannot sync directory '%s'", dir);
	}
	close(fd);
	return 0;
}

int afile_open(struct afile *af, const char *path)
{
	memset(af, 0, sizeof(*af));
	af->slot = -1;
	af->path = xstrdup(path);
	af->tmp = xasprintf("%s.tmp.%ld.XXXXXX", path, (long)getpid());
	int fd = mkstemp(af->tmp);
	if (fd < 0) {
		int e = errno;
		char *dir = path_dirname(path);
		errno = e;
		error_errno("cannot create '%s' (in directory '%s')", path, dir);
		free(dir);
		free(af->tmp);
		free(af->path);
		af->tmp = af->path = NULL;
		return -1;
	}
	af->slot = register_tmp(af->tmp);
	if (af->slot < 0) {
		close(fd);
		unlink(af->tmp);
		error("cannot create '%s': more than %d output files open at once", path, TEMPFILE_SLOTS);
		free(af->tmp);
		free(af->path);
		af->tmp = af->path = NULL;
		return -1;
	}
	fchmod(fd, file_mode); /* mkstemp made it 0600; the final file gets the usual mode */
	af->fp = fdopen(fd, "wb");
	if (!af->fp) {
		close(fd);
		error_errno("cannot open stream on '%s'", af->tmp);
		afile_abort(af);
		return -1;
	}
	setvbuf(af->fp, NULL, _IOFBF, 1 << 20);
	return 0;
}

int afile_finish(struct afile *af)
{
	if (!af->fp)
		return 0;
	FILE *fp = af->fp;
	af->fp = NULL;
	if (fflush(fp) != 0 || ferror(fp)) {
		error_errno("cannot write '%s'", af->path);
		fclose(fp);
		return -1;
	}
	if (fsync(fileno(fp)) < 0) {
		error_errno("cannot sync '%s'", af->path);
		fclose(fp);
		return -1;
	}
	if (fclose(fp) != 0)
		return error_errno("cannot close '%s'", af->path);
	return 0;
}

int afile_publish(struct afile *af)
{
	if (!af->tmp)
		BUG("afile_publish on '%s' twice", af->path ? af->path : "?");
	if (af->fp)
		BUG("afile_publish on '%s' before afile_finish", af->path);
	if (rename(af->tmp, af->path) < 0)
		return error_errno("cannot rename '%s' to '%s'", af->tmp, af->path);
	unregister_tmp(af->slot);
	af->slot = -1;
	free(af->tmp);
	af->tmp = NULL;
	char *dir = path_dirname(af->path);
	int r = fsync_dir(dir);
	free(dir);
	free(af->path);
	af->path = NULL;
	return r;
}

int afile_commit(struct afile *af)
{
	if (afile_finish(af) < 0)
		return -1;
	return afile_publish(af);
}

void afile_abort(struct afile *af)
{
	if (af->fp) {
		fclose(af->fp);
		af->fp = NULL;
	}
	if (af->tmp) {
		unlink(af->tmp);
		unregister_tmp(af->slot);
		af->slot = -1;
		free(af->tmp);
		af->tmp = NULL;
	}
	free(af->path);
	af->path = NULL;
}

FILE *scratch_file(const char *dir)
{
#ifdef O_TMPFILE
	/* nameless from the start where the file system allows it */
	int tfd = open(dir, O_TMPFILE | O_RDWR, 0600);
	if (tfd >= 0) {
		FILE *fp = fdopen(tfd, "w+b");
		if (fp)
			return fp;
		close(tfd);
	}
#endif
	char *tmpl = xasprintf("%s/.megac-scratch.%ld.XXXXXX", dir, (long)getpid());
	int fd = mkstemp(tmpl);
	if (fd < 0) {
		error_errno("cannot create a scratch file in '%s'", dir);
		free(tmpl);
		return NULL;
	}
	unlink(tmpl);
	free(tmpl);
	FILE *fp = fdopen(fd, "w+b");
	if (!fp) {
		close(fd);
		error_errno("cannot open a scratch stream in '%s'", dir);
		return NULL;
	}
	return fp;
}
