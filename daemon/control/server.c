/* SPDX-License-Identifier: MIT */
/*
 * The control loop: the listening Unix socket, signals, the periodic tick
 * (systemd watchdog, timeouts, drain), and sd_notify.
 */
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <pwd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include "control/control.h"
#include "engine/comm.h"
#include "config.h"
#include "base/daemon.h"
#include "log.h"
#include "net/rails.h"
#include "util.h"

#if HAVE_SYSTEMD
#include <systemd/sd-daemon.h>
#endif

#define TICK_MS 50
#define LISTEN_BACKOFF_MS 200

void r2d_notify(struct r2d *d, const char *state)
{
#if HAVE_SYSTEMD
	if (d->systemd)
		sd_notify(0, state);
#else
	(void)d;
	(void)state;
#endif
}

static int mkdir_parents(const char *path)
{
	char buf[sizeof(((struct sockaddr_un *)0)->sun_path)];
	char *p;

	snprintf(buf, sizeof(buf), "%s", path);
	p = strrchr(buf, '/');
	if (!p || p == buf)
		return 0;
	*p = 0;
	for (p = buf + 1; *p; p++) {
		if (*p == '/') {
			*p = 0;
			if (mkdir(buf, 0755) < 0 && errno != EEXIST)
				return -errno;
			*p = '/';
		}
	}
	if (mkdir(buf, 0755) < 0 && errno != EEXIST)
		return -errno;
	return 0;
}

static int listen_socket(struct r2d *d)
{
	const char *path = r2_param_str(&d->params, P_SOCKET);
	const char *owner = r2_param_str(&d->params, P_SOCKET_OWNER);
	const char *group = r2_param_str(&d->params, P_SOCKET_GROUP);
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	uid_t uid = (uid_t)-1;
	gid_t gid = (gid_t)-1;
	int fd, r;

	if (strlen(path) >= sizeof(sa.sun_path)) {
		log_err("socket path %s is longer than %zu bytes", path, sizeof(sa.sun_path) - 1);
		return -ENAMETOOLONG;
	}
	if (owner[0]) {
		struct passwd *pw = getpwnam(owner);
		if (!pw) {
			log_err("socket_owner: no user named '%s'", owner);
			return -EINVAL;
		}
		uid = pw->pw_uid;
	}
	if (group[0]) {
		struct group *gr = getgrnam(group);
		if (!gr) {
			log_err("socket_group: no group named '%s'", group);
			return -EINVAL;
		}
		gid = gr->gr_gid;
	}
	strcpy(sa.sun_path, path);
	r = mkdir_parents(path);
	if (r < 0) {
		log_err("cannot create the directory of %s: %s", path, strerror(-r));
		return r;
	}
	fd = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return -errno;
	/* A stale socket from a crashed daemon: remove it, but never steal a
	 * live daemon's socket. */
	if (connect(fd, (struct sockaddr *)&sa, sizeof(sa)) == 0 || errno == EAGAIN) {
		log_err("another r2ccld is already serving %s", path);
		close(fd);
		return -EADDRINUSE;
	}
	close(fd);
	unlink(path);
	fd = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return -errno;
	if (bind(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0) {
		r = -errno;
		log_err("cannot bind %s: %s", path, strerror(errno));
		close(fd);
		return r;
	}
	if (chmod(path, (mode_t)d->socket_mode) < 0 ||
	    ((uid != (uid_t)-1 || gid != (gid_t)-1) && chown(path, uid, gid) < 0)) {
		r = -errno;
		log_err("cannot set the owner/mode of %s: %s", path, strerror(errno));
		close(fd);
		unlink(path);
		return r;
	}
	if (listen(fd, 1024) < 0) {
		r = -errno;
		close(fd);
		unlink(path);
		return r;
	}
	d->listen_fd = fd;
	return 0;
}

static void on_listen(uv_poll_t *h, int status, int events)
{
	struct r2d *d = h->data;

	if (status < 0)
		return;
	for (int i = 0; i < 64; i++) {
		int fd = accept4(d->listen_fd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
		if (fd < 0) {
			if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS ||
			    errno == ENOMEM) {
				/* the connection stays in the backlog, so the fd
				 * would be readable at once again: stop polling it
				 * for a while instead of spinning (the tick resumes) */
				log_warn_rl("accept: %s; not accepting for %d ms",
					    strerror(errno), LISTEN_BACKOFF_MS);
				uv_poll_stop(&d->listen_poll);
				d->listen_paused_until_us = r2_now_us() +
							    LISTEN_BACKOFF_MS * 1000;
			} else if (errno != EAGAIN && errno != EINTR && errno != ECONNABORTED) {
				log_warn_rl("accept: %s", strerror(errno));
			}
			return;
		}
		if (d->draining || d->nsessions >= (uint32_t)r2_param_int(&d->params,
									   P_MAX_SESSIONS)) {
			log_warn_rl("refusing a connection: %s",
				    d->draining ? "shutting down" : "too many sessions (max_sessions)");
			close(fd);
			continue;
		}
		r2d_session_accept(d, fd);
	}
}

static void update_status(struct r2d *d)
{
	char st[256];
	int ncomm = 0;

	for (struct r2_comm *c = d->comms; c; c = c->next)
		ncomm++;
	snprintf(st, sizeof(st), "STATUS=%s: %u sessions, %d communicators, %llu operations",
		 d->draining ? "draining" : "serving", d->nsessions, ncomm,
		 (unsigned long long)d->ops_total);
	r2d_notify(d, st);
}

static void finish(struct r2d *d)
{
	struct r2_session *s, *next;

	uv_timer_stop(&d->tick);
	if (d->listen_fd >= 0) {
		uv_poll_stop(&d->listen_poll);
		uv_close((uv_handle_t *)&d->listen_poll, NULL);
	}
	for (s = d->sessions; s; s = next) {
		next = s->next;
		r2d_session_close(s, "daemon stopping");
	}
	if (d->rails) {
		r2d_rails_quiesce(d);
		uv_close((uv_handle_t *)&d->rails->async, NULL);
	}
	r2d_metrics_close(d);
	uv_close((uv_handle_t *)&d->tick, NULL);
	uv_close((uv_handle_t *)&d->sig_term, NULL);
	uv_close((uv_handle_t *)&d->sig_int, NULL);
	uv_close((uv_handle_t *)&d->sig_hup, NULL);
}

static void on_tick(uv_timer_t *t)
{
	struct r2d *d = t->data;
	uint64_t now = r2_now_us();
	static uint64_t last_status;

	r2d_comm_tick(d);
	r2d_sessions_tick(d, now);
	if (d->listen_paused_until_us && now >= d->listen_paused_until_us) {
		d->listen_paused_until_us = 0;
		if (d->listen_fd >= 0 && !d->draining)
			uv_poll_start(&d->listen_poll, UV_READABLE, on_listen);
	}
	if (d->watchdog_usec && now - d->last_watchdog_us >= d->watchdog_usec / 2) {
		/* The dispatcher thread proves it is alive through the engine. */
		if (r2d_engine_alive(d)) {
			r2d_notify(d, "WATCHDOG=1");
			d->last_watchdog_us = now;
		}
	}
	if (now - last_status > 1000000) {
		update_status(d);
		last_status = now;
	}
	if (d->draining) {
		if (r2d_engine_busy(d) && now < d->drain_deadline_us)
			return;
		if (r2d_engine_busy(d))
			log_warn("drain deadline passed with operations still running");
		finish(d);
	}
}

void r2d_begin_drain(struct r2d *d, const char *why)
{
	if (d->draining)
		return;
	log_info("%s: draining (running operations finish, new ones fail)", why);
	r2d_notify(d, "STOPPING=1");
	d->draining = true;
	/* bounded: the unit's TimeoutStopSec is 60 s */
	d->drain_deadline_us = r2_now_us() +
			       (uint64_t)R2_MIN(r2_param_int(&d->params, P_OP_TIMEOUT_MS), 20000) *
				       1000;
	/* stop accepting at once */
	if (d->listen_fd >= 0) {
		uv_poll_stop(&d->listen_poll);
		uv_close((uv_handle_t *)&d->listen_poll, NULL);
		close(d->listen_fd);
		d->listen_fd = -1;
		unlink(r2_param_str(&d->params, P_SOCKET));
	}
	/* operations already matched run to the end; those still waiting for
	 * their other ranks, and communicators still forming, fail now */
	pthread_mutex_lock(&d->lock);
	for (struct r2_comm *c = d->comms; c; c = c->next)
		if (c->state == R2_COMM_JOINING || c->state == R2_COMM_READY)
			r2d_comm_break(c, R2CCL_E_SHUTDOWN, "daemon shutting down");
	pthread_mutex_unlock(&d->lock);
}

static void on_signal(uv_signal_t *h, int signum)
{
	struct r2d *d = h->data;

	if (signum == SIGHUP) {
		log_info("SIGHUP: reloading %s", r2_param_str(&d->params, P_CONFIG));
		r2d_notify(d, "RELOADING=1");
		r2d_config_reload(d);
		r2d_notify(d, "READY=1");
		return;
	}
	if (d->draining) {
		log_warn("second %s: stopping now", signum == SIGINT ? "SIGINT" : "SIGTERM");
		d->drain_deadline_us = 0;
		return;
	}
	r2d_begin_drain(d, signum == SIGINT ? "SIGINT" : "SIGTERM");
}

int r2d_server_start(struct r2d *d)
{
	int r;

	d->loop = uv_default_loop();
	r = r2d_metrics_start(d); /* a bad metrics_listen: not started at all */
	if (r < 0)
		return r;
	r = listen_socket(d);
	if (r < 0)
		return r;
	uv_poll_init(d->loop, &d->listen_poll, d->listen_fd);
	d->listen_poll.data = d;
	uv_poll_start(&d->listen_poll, UV_READABLE, on_listen);

	uv_signal_init(d->loop, &d->sig_term);
	uv_signal_init(d->loop, &d->sig_int);
	uv_signal_init(d->loop, &d->sig_hup);
	d->sig_term.data = d->sig_int.data = d->sig_hup.data = d;
	uv_signal_start(&d->sig_term, on_signal, SIGTERM);
	uv_signal_start(&d->sig_int, on_signal, SIGINT);
	uv_signal_start(&d->sig_hup, on_signal, SIGHUP);

	uv_timer_init(d->loop, &d->tick);
	d->tick.data = d;
	uv_timer_start(&d->tick, on_tick, TICK_MS, TICK_MS);

#if HAVE_SYSTEMD
	if (d->systemd) {
		uint64_t usec = 0;
		if (sd_watchdog_enabled(0, &usec) > 0)
			d->watchdog_usec = usec;
	}
#endif
	log_info("listening on %s (mode %04o)", r2_param_str(&d->params, P_SOCKET),
		 d->socket_mode);
	r2d_notify(d, "READY=1");
	update_status(d);
	return 0;
}

void r2d_server_stop(struct r2d *d)
{
	/* finish() closed every handle; run the loop once more so their close
	 * callbacks run, then close the loop (everything released). */
	uv_run(d->loop, UV_RUN_DEFAULT);
	r2d_comm_destroy_all(d);
	r2d_metrics_free(d);
	if (d->listen_fd >= 0) {
		close(d->listen_fd);
		d->listen_fd = -1;
		unlink(r2_param_str(&d->params, P_SOCKET));
	}
	if (uv_loop_close(d->loop) != 0)
		log_warn("event loop still had open handles at exit");
}
