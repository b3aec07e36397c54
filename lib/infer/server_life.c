/*
 * server_life.c - text_gen_server from listening to exit: the listening
 * socket, the registry of client connections and their deadlines, SIGTERM
 * and SIGINT, and the drain. One supervisor thread does all of it, waking
 * on the signal pipe or every TICK_MS.
 *
 * The signal handler only writes the signal's number to a pipe (the signal
 * may land on any thread, OpenBLAS's and MPI's included, which start before
 * main and so cannot all be given a blocked mask); the supervisor reads it.
 *
 * STATES
 *
 *   SRV_SERVING    The listening socket accepts connections. A request whose
 *                  headers passed the checks (server.c) and whose body is in
 *                  is admitted (srv_admit: counted in s->inflight), or gets
 *                  429 when --max-concurrent-requests are admitted already
 *                  (GET /health is never refused so).
 *
 *   SRV_DRAINING   After the first SIGTERM or SIGINT. The listening socket is
 *                  closed: connect() is refused at once. A request whose body
 *                  comes in now gets 503 with Connection: close (GET /health:
 *                  503 {"status": "draining"}); the admitted ones run to their
 *                  end. Connections that are not busy keep their deadlines.
 *
 *   SRV_CUTTING    --drain-timeout seconds after the first signal, or at a
 *                  second one, while requests are still in flight: every job
 *                  is cancelled (the engine drops its requests), every
 *                  connection is shut down, busy ones included, and
 *                  srv_submit refuses. The admitted requests unwind: their
 *                  connection threads send nothing more and complete.
 *
 *   SRV_STOPPING   No request in flight. The engine loop ends; main then
 *                  stops libmicrohttpd (closing the connections left: idle,
 *                  or still sending a request that would get 503), stops the
 *                  tensor-parallel followers, and the process exits 0.
 *
 * TRANSITIONS (all made by the supervisor, under s->mu)
 *
 *   SERVING  -> DRAINING   a signal
 *   DRAINING -> STOPPING   s->inflight == 0
 *   DRAINING -> CUTTING    the drain's deadline passes, or a second signal
 *   CUTTING  -> STOPPING   s->inflight == 0
 *
 * An engine failure ends the process from the engine loop (die()): there is
 * nothing left to drain.
 *
 * INVARIANTS
 *
 *   1. s->inflight is the number of requests with b->admitted. A request is
 *      admitted only in SERVING, only once its body is complete and every
 *      check of its headers passed, and released exactly once, when
 *      libmicrohttpd says it completed (srv_release). Connections still
 *      sending headers or a body hold no count: slow clients cannot use up
 *      --max-concurrent-requests or hold the drain.
 *
 *   2. Every job belongs to an admitted request whose connection does not
 *      complete before the job is done (srv_wait, api_stream_free). So
 *      s->inflight == 0 means no job is queued or in the scheduler.
 *
 *   3. Outside SERVING the listening socket is closed and nothing is
 *      admitted: s->inflight only falls.
 *
 *   4. A connection that is not busy has a deadline: --request-timeout
 *      seconds after it opened or after its last request completed. The
 *      supervisor shuts it down when the deadline passes, in every state
 *      (libmicrohttpd's idle timeout of the same length is a second guard,
 *      and closes idle kept-alive connections). A busy connection (its
 *      request admitted) has none until SRV_CUTTING: an answer takes as long
 *      as generating it takes.
 *
 *   5. The engine loop ends only in SRV_STOPPING, and libmicrohttpd is
 *      stopped only after it has ended; by 2, no connection thread is then
 *      waiting for a job, so MHD_stop_daemon's joins return.
 *
 *   6. From the first signal the process ends within --drain-timeout, plus
 *      one engine step and a tick: in SRV_CUTTING nothing waits on a client
 *      (their sockets are shut down) or on the engine (the jobs are
 *      cancelled, and a cancelled job is dropped before the next step).
 *
 *   7. s->state, s->inflight, the registry and the jobs' flags are read and
 *      written under s->mu. A connection's socket is shut down only while it
 *      is in the registry (under s->mu), and libmicrohttpd takes it out
 *      (MHD_CONNECTION_NOTIFY_CLOSED) before it closes the descriptor, so
 *      the supervisor never touches a descriptor that was reused.
 */
#include "infer/server_int.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "base/error.h"
#include "base/xalloc.h"

#define TICK_MS 100
#define LOG_LINES_PER_MINUTE 5

double srv_now(void)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

/* ---- the listening socket ---- */

static bool is_loopback(const struct sockaddr *a)
{
	if (a->sa_family == AF_INET)
		return (ntohl(((const struct sockaddr_in *)a)->sin_addr.s_addr) >> 24) == 127;
	if (a->sa_family == AF_INET6) {
		const struct in6_addr *x = &((const struct sockaddr_in6 *)a)->sin6_addr;
		if (IN6_IS_ADDR_LOOPBACK(x))
			return true;
		return IN6_IS_ADDR_V4MAPPED(x) && x->s6_addr[12] == 127;
	}
	return false;
}

int srv_listen(struct server *s, const char *host, int64_t port)
{
	char ps[24];
	snprintf(ps, sizeof(ps), "%lld", (long long)port);
	struct addrinfo hints, *res = NULL;
	memset(&hints, 0, sizeof(hints));
	hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
	hints.ai_family = AF_UNSPEC;
	hints.ai_socktype = SOCK_STREAM;
	int g = getaddrinfo(host, ps, &hints, &res);
	if (g)
		return error("--host %s: %s (give an IPv4 or IPv6 address, or a name of this machine)", host,
			     gai_strerror(g));
	int fd = -1, err = 0;
	for (struct addrinfo *ai = res; ai && fd < 0; ai = ai->ai_next) {
		fd = socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC, ai->ai_protocol);
		if (fd < 0) {
			err = errno;
			continue;
		}
		int one = 1, zero = 0;
		setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
		if (ai->ai_family == AF_INET6) /* "::" serves IPv4 too */
			setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &zero, sizeof(zero));
		if (bind(fd, ai->ai_addr, ai->ai_addrlen) < 0 || listen(fd, SOMAXCONN) < 0) {
			err = errno;
			close(fd);
			fd = -1;
			continue;
		}
		s->loopback = is_loopback(ai->ai_addr);
	}
	freeaddrinfo(res);
	if (fd < 0)
		return error("cannot listen on %s port %lld: %s%s", host, (long long)port, strerror(err),
			     err == EADDRINUSE ? " (give another --port, or 0 for any free one)" : "");
	struct sockaddr_storage ss;
	socklen_t len = sizeof(ss);
	char addr[INET6_ADDRSTRLEN] = "?";
	if (getsockname(fd, (struct sockaddr *)&ss, &len) == 0) {
		if (ss.ss_family == AF_INET6) {
			const struct sockaddr_in6 *a6 = (const struct sockaddr_in6 *)&ss;
			inet_ntop(AF_INET6, &a6->sin6_addr, addr, sizeof(addr));
			s->port = ntohs(a6->sin6_port);
			snprintf(s->where, sizeof(s->where), "[%s]:%d", addr, s->port);
		} else {
			const struct sockaddr_in *a4 = (const struct sockaddr_in *)&ss;
			inet_ntop(AF_INET, &a4->sin_addr, addr, sizeof(addr));
			s->port = ntohs(a4->sin_port);
			snprintf(s->where, sizeof(s->where), "%s:%d", addr, s->port);
		}
	}
	s->listen_fd = fd;
	return 0;
}

/* ---- signals ---- */

/* The signal pipe: the one piece of process-wide state here, because a
 * signal handler can reach nothing else. */
static int stop_pipe[2] = { -1, -1 };

static void on_stop_signal(int sig)
{
	int saved = errno;
	unsigned char b = (unsigned char)sig;
	ssize_t w = write(stop_pipe[1], &b, 1);
	(void)w;
	errno = saved;
}

int srv_catch_signals(struct server *s)
{
	if (stop_pipe[0] < 0 && pipe2(stop_pipe, O_CLOEXEC) < 0)
		return error_errno("cannot make the signal pipe");
	struct sigaction sa;
	memset(&sa, 0, sizeof(sa));
	sa.sa_handler = on_stop_signal;
	sa.sa_flags = SA_RESTART;
	sigemptyset(&sa.sa_mask);
	if (sigaction(SIGTERM, &sa, NULL) < 0 || sigaction(SIGINT, &sa, NULL) < 0)
		return error_errno("cannot catch SIGTERM");
	s->sigfd = stop_pipe[0];
	return 0;
}

/* ---- connections ---- */

void srv_on_connection(void *cls, struct MHD_Connection *c, void **socket_context,
		       enum MHD_ConnectionNotificationCode code)
{
	struct server *s = cls;
	if (code == MHD_CONNECTION_NOTIFY_STARTED) {
		struct conn *k = xcalloc(1, sizeof(*k));
		const union MHD_ConnectionInfo *ci = MHD_get_connection_info(c, MHD_CONNECTION_INFO_CONNECTION_FD);
		k->fd = ci ? ci->connect_fd : -1;
		pthread_mutex_lock(&s->mu);
		k->deadline = srv_now() + s->cfg.request_timeout;
		k->next = s->conns;
		if (s->conns)
			s->conns->prev = k;
		s->conns = k;
		pthread_mutex_unlock(&s->mu);
		*socket_context = k;
		return;
	}
	struct conn *k = *socket_context;
	if (!k)
		return;
	pthread_mutex_lock(&s->mu);
	if (k->prev)
		k->prev->next = k->next;
	else
		s->conns = k->next;
	if (k->next)
		k->next->prev = k->prev;
	pthread_mutex_unlock(&s->mu);
	free(k);
	*socket_context = NULL;
}

/* Under s->mu. */
static void shut(struct conn *k)
{
	if (!k->shut && k->fd >= 0)
		shutdown(k->fd, SHUT_RDWR);
	k->shut = true;
}

enum srv_admit srv_admit(struct server *s, struct body *b, bool limited)
{
	enum srv_admit r = SRV_ADMITTED;
	pthread_mutex_lock(&s->mu);
	if (s->state != SRV_SERVING) {
		r = SRV_DRAINING_NOW;
	} else if (limited && s->inflight >= s->cfg.max_concurrent) {
		r = SRV_TOO_MANY;
	} else {
		s->inflight++;
		b->admitted = true;
		if (b->conn)
			b->conn->busy = true;
	}
	pthread_mutex_unlock(&s->mu);
	return r;
}

void srv_release(struct server *s, struct body *b)
{
	pthread_mutex_lock(&s->mu);
	if (b->admitted)
		s->inflight--;
	b->admitted = false;
	if (b->conn) { /* the next request on a kept-alive connection has its own deadline */
		b->conn->busy = false;
		b->conn->deadline = srv_now() + s->cfg.request_timeout;
	}
	pthread_mutex_unlock(&s->mu);
}

/* ---- libmicrohttpd's log ---- */

/* Its lines are mostly about clients (one per connection reset), so that
 * a client could fill the log: a few a minute are shown, and how many were
 * not. */
void srv_mhd_log(void *cls, const char *fmt, va_list ap)
{
	struct server *s = cls;
	char msg[512];
	vsnprintf(msg, sizeof(msg), fmt, ap);
	size_t n = strlen(msg);
	while (n && (msg[n - 1] == '\n' || msg[n - 1] == '\r'))
		msg[--n] = 0;
	pthread_mutex_lock(&s->log_mu);
	double now = srv_now();
	if (now - s->log_start >= 60) {
		if (s->log_dropped)
			warning("libmicrohttpd: %d more messages in the last minute not shown", s->log_dropped);
		s->log_start = now;
		s->log_shown = s->log_dropped = 0;
	}
	if (s->log_shown < LOG_LINES_PER_MINUTE) {
		s->log_shown++;
		warning("libmicrohttpd: %s", msg);
	} else {
		s->log_dropped++;
	}
	pthread_mutex_unlock(&s->log_mu);
}

/* ---- the supervisor ---- */

static const char *signame(int sig)
{
	return sig == SIGTERM ? "SIGTERM" : sig == SIGINT ? "SIGINT" : "a signal";
}

/* SERVING -> DRAINING; called without s->mu (libmicrohttpd's locks are
 * taken here). */
static void begin_drain(struct server *s, int sig)
{
	pthread_mutex_lock(&s->mu);
	s->state = SRV_DRAINING;
	s->drain_end = srv_now() + s->cfg.drain_timeout;
	int n = s->inflight;
	pthread_mutex_unlock(&s->mu);
	info("%s: answering the %d request%s in flight (for at most --drain-timeout %g s), then stopping", signame(sig),
	     n, n == 1 ? "" : "s", s->cfg.drain_timeout);
	/* libmicrohttpd stops accepting and hands the socket back: closed, a
	 * new client's connect() is refused instead of hanging */
	MHD_socket lfd = MHD_quiesce_daemon(s->d);
	if (lfd != MHD_INVALID_SOCKET) {
		close(lfd);
		s->listen_fd = -1;
	} else {
		warning("libmicrohttpd would not stop listening; new connections get 503 until the end of the drain");
	}
}

/* DRAINING -> CUTTING, under s->mu. */
static void cut(struct server *s, const char *why)
{
	s->state = SRV_CUTTING;
	warning("%s: cutting off the %d request%s still in flight", why, s->inflight, s->inflight == 1 ? "" : "s");
	for (struct job *j = s->queue; j; j = j->next)
		j->cancelled = true;
	for (struct job *j = s->active; j; j = j->next)
		j->cancelled = true;
	for (struct conn *k = s->conns; k; k = k->next)
		shut(k);
	pthread_cond_signal(&s->work);
	pthread_cond_broadcast(&s->progress);
}

static void *supervise_main(void *arg)
{
	struct server *s = arg;
	for (;;) {
		struct pollfd p = { .fd = s->sigfd, .events = POLLIN };
		int sig = -1;
		if (poll(&p, 1, TICK_MS) > 0) {
			unsigned char b;
			if (read(s->sigfd, &b, 1) == 1)
				sig = b;
		}
		if (sig == 0) /* main: the engine loop has ended */
			return NULL;
		pthread_mutex_lock(&s->mu);
		enum srv_state st = s->state;
		pthread_mutex_unlock(&s->mu);
		if (sig > 0 && st == SRV_SERVING)
			begin_drain(s, sig);
		pthread_mutex_lock(&s->mu);
		double now = srv_now();
		if (s->state == SRV_DRAINING && sig > 0 && st == SRV_DRAINING)
			cut(s, signame(sig));
		else if (s->state == SRV_DRAINING && now >= s->drain_end && s->inflight > 0)
			cut(s, "--drain-timeout passed");
		for (struct conn *k = s->conns; k; k = k->next)
			if (!k->busy && now >= k->deadline)
				shut(k); /* --request-timeout */
		if ((s->state == SRV_DRAINING || s->state == SRV_CUTTING) && s->inflight == 0) {
			s->state = SRV_STOPPING;
			pthread_cond_signal(&s->work);
		}
		pthread_mutex_unlock(&s->mu);
	}
}

int srv_supervise(struct server *s)
{
	if (pthread_create(&s->supervisor, NULL, supervise_main, s))
		return error("cannot start the supervisor thread");
	return 0;
}

void srv_supervise_end(struct server *s)
{
	unsigned char zero = 0; /* wakes the supervisor and ends it */
	ssize_t w = write(stop_pipe[1], &zero, 1);
	(void)w;
	pthread_join(s->supervisor, NULL);
}
