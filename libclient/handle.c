/* SPDX-License-Identifier: MIT */
/*
 * libr2ccl: handle checks and the thread's last error. Every public call
 * checks its handle here first, so misuse (a second destroy, a call after
 * disconnect, a handle inherited through fork) is answered with an error
 * code and a sentence instead of a crash.
 */
#include <errno.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "client.h"
#include "r2ccl.pb-c.h"

static _Thread_local char last_error[256];

/* fork() generation: one more in every child (pthread_atfork), so a handle
 * sees that it was inherited without a getpid() system call on every
 * operation (r2c_client_use) */
static unsigned fork_gen;
static pthread_once_t fork_once = PTHREAD_ONCE_INIT;

static void on_fork_child(void)
{
	__atomic_add_fetch(&fork_gen, 1, __ATOMIC_RELAXED);
}

static void fork_watch(void)
{
	pthread_atfork(NULL, NULL, on_fork_child);
}

unsigned r2c_fork_gen(void)
{
	pthread_once(&fork_once, fork_watch);
	return __atomic_load_n(&fork_gen, __ATOMIC_RELAXED);
}

/* Dead handles: kept (unreachable from the user's side only) so that a stale
 * pointer still points at a DEAD magic. */
static pthread_mutex_t tomb_lock = PTHREAD_MUTEX_INITIALIZER;
static r2ccl_comm_t *dead_comms;
static r2ccl_client_t *dead_clients;

const char *r2ccl_last_error(void)
{
	return last_error;
}

void r2c_clear_error(void)
{
	last_error[0] = '\0';
}

int r2c_fail(int err, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(last_error, sizeof(last_error), fmt, ap);
	va_end(ap);
	return err;
}

int r2c_client_use(r2ccl_client_t *c)
{
	r2c_clear_error();
	if (!c)
		return r2c_fail(-EINVAL, "the client is NULL");
	if (c->magic == R2C_CLIENT_DEAD)
		return r2c_fail(-EBADF, "the client was disconnected (r2ccl_disconnect)");
	if (c->magic != R2C_CLIENT_LIVE)
		return r2c_fail(-EBADF, "not a client of r2ccl_connect");
	if (c->fork_gen != __atomic_load_n(&fork_gen, __ATOMIC_RELAXED))
		return r2c_fail(R2CCL_E_FORKED,
				"the client was connected by process %d, not this one (%d): "
				"connect again after fork()",
				(int)c->pid, (int)getpid());
	return 0;
}

int r2c_comm_use(const r2ccl_comm_t *comm)
{
	r2c_clear_error();
	if (!comm)
		return r2c_fail(-EINVAL, "the communicator is NULL");
	if (comm->magic == R2C_COMM_DEAD)
		return r2c_fail(-EBADF, "the communicator was %s", comm->dead_why);
	if (comm->magic != R2C_COMM_LIVE)
		return r2c_fail(-EBADF, "not a communicator of r2ccl_comm_init_rank");
	return r2c_client_use(comm->client);
}

void r2c_comm_bury(r2ccl_comm_t *comm, const char *why)
{
	r2ccl_client_t *c = comm->client;

	for (r2ccl_comm_t **pp = &c->comms; *pp; pp = &(*pp)->next) {
		if (*pp == comm) {
			*pp = comm->next;
			break;
		}
	}
	comm->magic = R2C_COMM_DEAD;
	comm->dead_why = why;
	comm->client = NULL;
	pthread_mutex_lock(&tomb_lock);
	comm->next = dead_comms;
	dead_comms = comm;
	pthread_mutex_unlock(&tomb_lock);
}

void r2c_client_bury(r2ccl_client_t *c)
{
	while (c->comms)
		r2c_comm_bury(c->comms, "released by r2ccl_disconnect (destroy communicators "
					"before disconnecting)");
	c->magic = R2C_CLIENT_DEAD;
	pthread_mutex_lock(&tomb_lock);
	c->tomb_next = dead_clients;
	dead_clients = c;
	pthread_mutex_unlock(&tomb_lock);
}

static void *unpack_result(void *a, size_t l, const uint8_t *d)
{
	return r2ccl__result__unpack(a, l, d);
}

int r2c_comm_failed(r2ccl_comm_t *comm, int err)
{
	R2ccl__CommReason req = R2CCL__COMM_REASON__INIT;
	R2ccl__Result *rep = NULL;
	r2ccl_client_t *c = comm->client;
	int r;

	switch (err) {
	case R2CCL_E_MISMATCH:
	case R2CCL_E_PEER_GONE:
	case R2CCL_E_COMM_BROKEN:
	case R2CCL_E_NO_PATH:
	case R2CCL_E_SHUTDOWN:
	case R2CCL_E_QUOTA: /* an operation at max_pending_ops: it broke the communicator */
	case -ETIMEDOUT:
		break;
	case R2CCL_E_DAEMON_GONE:
		return r2c_fail(err, "r2ccld closed the session (it stopped or restarted)");
	default:
		return err; /* not a communicator failure: nothing to ask */
	}
	req.req_id = c->next_req++;
	req.comm_id = comm->handle;
	r = r2c_rpc(c, R2CCL__MSG_TYPE__MSG_COMM_REASON, &req, R2CCL__MSG_TYPE__MSG_RESULT,
		    (void **)&rep, unpack_result, NULL, 0, NULL, 0);
	if (r == 0 && rep->status != 0 && rep->error && rep->error[0])
		r2c_fail(err, "%s", rep->error);
	else if (err == -ETIMEDOUT)
		r2c_fail(err, "no answer from the daemon within its op_timeout_ms (%d ms) and %d ms "
			 "more", c->op_timeout_ms, 5000);
	if (rep)
		r2ccl__result__free_unpacked(rep, NULL);
	return err;
}
