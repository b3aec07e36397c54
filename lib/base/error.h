/*
 * error.h - the one error discipline of megac (after git's usage.c).
 *
 *   die(fmt, ...)    fatal: print "prog: error: ..." and exit(128). Temporary
 *                    files registered with tempfile.h are removed on the way out.
 *   error(fmt, ...)  print "prog: error: ..." and return -1; the caller adds
 *                    context if it has any and propagates the -1.
 *   warning(...)     print "prog: warning: ..." and go on.
 *   info(...)        progress and log lines on stderr, same prefix.
 *   BUG(...)         an impossible state: names the source file and line, aborts.
 *
 * Library code below main() never exits on bad input: it calls error() and
 * returns -1. Only main() and program-level drivers call die(). Hot paths
 * that must not print (worker threads) return a `const char *` reason instead
 * and let the ordered consumer report it.
 *
 * The message prefix (program name, MPI rank when there is more than one) is
 * set once by main() through log_init(); it is the only process-wide state in
 * lib/base besides the temporary-file registry.
 */
#ifndef MEGAC_BASE_ERROR_H
#define MEGAC_BASE_ERROR_H

#include <stdarg.h>
#include <stddef.h>
#include <stdnoreturn.h>

#define MC_PRINTF(a, b) __attribute__((format(printf, a, b)))

/* Sets the prefix of every message: "prog: " or "[rank R] prog: " when
 * world_size > 1. Call once, early in main(). */
void log_init(const char *prog, int rank, int world_size);
const char *log_prog(void);
/* Megatron's --logging-level, in Python's numbers: above 20 (INFO) info()
 * prints nothing, above 30 (WARNING) neither does warning(); errors always
 * print. train's log lines on standard output are not messages: Megatron
 * prints them whatever the level, and so does megac. */
void log_set_level(int level);

/* Collects messages instead of printing them, for callers that try many
 * inputs through the same checks (report_memory --advise runs train's set-up
 * on every candidate layout): while a buffer is set, error(), warning() and
 * info() write nothing and the first error's text (without prefix) goes
 * into buf. log_capture(NULL, 0) prints again. Single-threaded use only. */
void log_capture(char *buf, size_t size);

noreturn void die(const char *fmt, ...) MC_PRINTF(1, 2);
noreturn void die_errno(const char *fmt, ...) MC_PRINTF(1, 2);
int error(const char *fmt, ...) MC_PRINTF(1, 2);
int error_errno(const char *fmt, ...) MC_PRINTF(1, 2);
void warning(const char *fmt, ...) MC_PRINTF(1, 2);
void info(const char *fmt, ...) MC_PRINTF(1, 2);

noreturn void bug_fl(const char *file, int line, const char *fmt, ...) MC_PRINTF(3, 4);
#define BUG(...) bug_fl(__FILE__, __LINE__, __VA_ARGS__)

/* Exit code of die(): git's 128, so scripts can tell "refused" from a crash. */
#define DIE_EXIT_CODE 128

#endif
