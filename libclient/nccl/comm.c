/* SPDX-License-Identifier: MIT */
/*
 * libnccl: communicators. Each ncclComm_t has its own session with the
 * host's r2ccld (its own r2ccl client), so communicators are independent:
 * several per process, used from several threads, created together by one
 * thread (ncclCommInitAll, or inside a group).
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "session.h" /* the session's socket, for ncclCommAbort from another thread */
#include "nccl_int.h"

int nccl_comm_rank_of(const struct ncclComm *comm)
{
	return comm->rank;
}

static const char *socket_path(void)
{
	const char *s = getenv("R2CCL_SOCKET");
	return s && s[0] ? s : R2CCL_DEFAULT_SOCKET;
}

static ncclResult_t connect_daemon(struct ncclComm *comm, r2ccl_client_t **out)
{
	r2ccl_connect_opts_t o = R2CCL_CONNECT_OPTS_INITIALIZER;
	int r;

	o.client_name = (comm && comm->cfg.comm_name[0]) ? comm->cfg.comm_name : NULL;
	r = r2ccl_connect(&o, out);
	if (r < 0)
		return nccl_fail(comm, ncclSystemError,
				 "cannot reach r2ccld at %s: %s (is the daemon running? "
				 "R2CCL_SOCKET names another socket)",
				 socket_path(), r2ccl_strerror(r));
	return ncclSuccess;
}

ncclResult_t ncclGetUniqueId(ncclUniqueId *id)
{
	r2ccl_client_t *c;
	r2ccl_unique_id_t uid;
	ncclResult_t res;
	int r;

	if (!id)
		return nccl_fail(NULL, ncclInvalidArgument, "ncclGetUniqueId: id is NULL");
	nccl_log_level(); /* NCCL_DEBUG=VERSION prints here, as NCCL does */
	res = connect_daemon(NULL, &c);
	if (res != ncclSuccess)
		return res;
	r = r2ccl_get_unique_id(c, &uid);
	r2ccl_disconnect(c);
	if (r < 0)
		return nccl_fail_r2(NULL, r, "ncclGetUniqueId");
	_Static_assert(sizeof(uid.internal) == sizeof(id->internal), "unique id sizes");
	memcpy(id->internal, uid.internal, sizeof(id->internal));
	return ncclSuccess;
}
NCCL_ALIAS(ncclGetUniqueId);

/* ---- creation ---- */

struct init_job {
	struct ncclComm *comm;
	r2ccl_unique_id_t id;
	struct nccl_deferred *result; /* where a deferred (group) creation reports */
};

static ncclResult_t comm_join(struct ncclComm *comm, const r2ccl_unique_id_t *id)
{
	r2ccl_comm_config_t rc = R2CCL_COMM_CONFIG_INITIALIZER;
	r2ccl_client_t *c;
	ncclResult_t res;
	int r;

	res = connect_daemon(comm, &c);
	if (res != ncclSuccess)
		return res;
	/* ncclCommAbort from another thread closes the session to wake a
	 * creation that waits for the other ranks */
	pthread_mutex_lock(&comm->sock_lock);
	comm->client = c;
	if (atomic_load(&comm->aborting))
		r2c_client_shutdown(c);
	pthread_mutex_unlock(&comm->sock_lock);
	r = r2ccl_comm_init_rank_config(comm->client, &comm->comm, comm->nranks, id, comm->rank,
					&rc);
	if (r < 0) /* libr2ccl's text has the daemon's reason */
		return nccl_fail(comm, nccl_result_of(r), "communicator creation (rank %d of %d): %s",
				 comm->rank, comm->nranks,
				 r2ccl_last_error()[0] ? r2ccl_last_error() : r2ccl_strerror(r));
	nccl_log(NCCL_LOG_INFO, "comm %p rank %d nranks %d cudaDev %d%s%s - Init COMPLETE",
		 (void *)comm, comm->rank, comm->nranks, comm->cudev,
		 comm->cfg.comm_name[0] ? " name " : "", comm->cfg.comm_name);
	return ncclSuccess;
}

static void *init_thread(void *arg)
{
	struct init_job *j = arg;
	ncclResult_t res;

	/* the communicator's device, not whatever the creating thread had
	 * current last (ncclCommInitAll's devices one after the other) */
	nccl_cuda_ctx_set(j->comm->cuctx);
	res = comm_join(j->comm, &j->id);

	atomic_store(&j->comm->init_state, (int)res);
	if (j->result) {
		/* the text is this thread's: ncclGroupEnd gives it to its caller */
		if (res != ncclSuccess)
			snprintf(j->result->err, sizeof(j->result->err), "%s", ncclGetLastError(NULL));
		j->result->result = res;
	}
	free(j);
	return NULL;
}

static void comm_free(struct ncclComm *comm)
{
	struct nccl_ctx_save sv;

	if (!comm)
		return;
	/* its staging, registrations and events go in their context */
	nccl_cuda_ctx_enter(comm->cuctx, &sv);
	nccl_mem_comm_release(comm);
	if (comm->comm)
		r2ccl_comm_destroy(comm->comm);
	r2ccl_disconnect(comm->client);
	nccl_cuda_ctx_leave(&sv);
	nccl_cuda_ctx_put(comm->cudev, comm->cuctx_primary);
	pthread_mutex_destroy(&comm->lock);
	pthread_mutex_destroy(&comm->sock_lock);
	free(comm);
}

/* Creates this rank's communicator: at once (blocking), on a thread that
 * ncclCommGetAsyncError reports on (config.blocking = 0), or on a thread
 * ncclGroupEnd joins (inside a group). cudev < 0: the current device's;
 * parent: the communicator it is split or shrunk from (its context). */
static ncclResult_t comm_create(ncclComm_t *out, int nranks, const r2ccl_unique_id_t *id,
				int rank, ncclConfig_t *config, int cudev,
				const struct ncclComm *parent)
{
	struct ncclComm *comm;
	struct init_job *j;
	ncclResult_t res;
	char err[200];

	if (!out)
		return nccl_fail(NULL, ncclInvalidArgument, "communicator pointer is NULL");
	*out = NULL;
	if (nranks < 1 || rank < 0 || rank >= nranks)
		return nccl_fail(NULL, ncclInvalidArgument, "rank %d of %d ranks: out of range",
				 rank, nranks);
	comm = calloc(1, sizeof(*comm));
	if (!comm)
		return nccl_fail(NULL, ncclSystemError, "out of memory");
	res = nccl_config_parse(config, &comm->cfg, err, sizeof(err));
	if (res != ncclSuccess) {
		free(comm);
		return nccl_fail(NULL, res, "%s", err);
	}
	pthread_mutex_init(&comm->lock, NULL);
	pthread_mutex_init(&comm->sock_lock, NULL);
	comm->uid = *id;
	comm->nranks = nranks;
	comm->rank = rank;
	comm->cudev = cudev >= 0 ? cudev : nccl_cuda_current_device();
	/* its context, taken now: later calls and the library's threads make
	 * it current (a parent's primary context is retained again) */
	comm->cuctx = nccl_cuda_ctx_for(comm->cudev,
					parent && !parent->cuctx_primary &&
							parent->cudev == comm->cudev
						? parent->cuctx
						: NULL,
					&comm->cuctx_primary);
	if (comm->cfg.net_name[0] || getenv("NCCL_SOCKET_IFNAME"))
		nccl_log(NCCL_LOG_INFO,
			 "NCCL_SOCKET_IFNAME/netName %s: r2ccld chooses the NICs (its nics "
			 "setting); the name is only logged",
			 comm->cfg.net_name[0] ? comm->cfg.net_name : getenv("NCCL_SOCKET_IFNAME"));
	if (comm->cfg.blocking && !nccl_group_depth()) {
		atomic_store(&comm->init_state, ncclSuccess);
		res = comm_join(comm, id);
		if (res != ncclSuccess) {
			comm_free(comm);
			return res;
		}
		*out = comm;
		return ncclSuccess;
	}
	j = calloc(1, sizeof(*j));
	if (!j) {
		comm_free(comm);
		return nccl_fail(NULL, ncclSystemError, "out of memory");
	}
	j->comm = comm;
	j->id = *id;
	atomic_store(&comm->init_state, ncclInProgress);
	if (nccl_group_depth()) {
		j->result = calloc(1, sizeof(*j->result));
		if (!j->result) {
			free(j);
			comm_free(comm);
			return nccl_fail(NULL, ncclSystemError, "out of memory");
		}
		j->result->result = ncclInProgress;
	}
	{
		struct nccl_deferred *result = j->result;
		if (pthread_create(&comm->init_thread, NULL, init_thread, j) != 0) {
			free(result);
			free(j);
			comm_free(comm);
			return nccl_fail(NULL, ncclSystemError, "cannot start a thread");
		}
		comm->init_thread_live = true;
		*out = comm;
		if (result) {
			/* the group's end joins it; the thread is then no longer ours */
			comm->init_thread_live = false;
			nccl_group_defer_thread(comm->init_thread, result);
			return comm->cfg.blocking ? ncclSuccess : ncclInProgress;
		}
	}
	return ncclInProgress;
}

ncclResult_t ncclCommInitRankConfig(ncclComm_t *comm, int nranks, ncclUniqueId commId, int rank,
				    ncclConfig_t *config)
{
	r2ccl_unique_id_t id;

	memcpy(id.internal, commId.internal, sizeof(id.internal));
	return comm_create(comm, nranks, &id, rank, config, -1, NULL);
}
NCCL_ALIAS(ncclCommInitRankConfig);

ncclResult_t ncclCommInitRank(ncclComm_t *comm, int nranks, ncclUniqueId commId, int rank)
{
	return ncclCommInitRankConfig(comm, nranks, commId, rank, NULL);
}
NCCL_ALIAS(ncclCommInitRank);

ncclResult_t ncclCommInitRankScalable(ncclComm_t *newcomm, int nranks, int myrank, int nId,
				      ncclUniqueId *commIds, ncclConfig_t *config)
{
	/* every rank has the same ids in the same order; one names the
	 * communicator (r2ccld's bootstrap needs no spreading) */
	if (nId < 1 || !commIds)
		return nccl_fail(NULL, ncclInvalidArgument,
				 "ncclCommInitRankScalable: %d unique ids", nId);
	return ncclCommInitRankConfig(newcomm, nranks, commIds[0], myrank, config);
}
NCCL_ALIAS(ncclCommInitRankScalable);

ncclResult_t ncclCommInitAll(ncclComm_t *comms, int ndev, const int *devlist)
{
	r2ccl_unique_id_t id;
	ncclUniqueId uid;
	ncclResult_t res, r;

	if (!comms || ndev < 1)
		return nccl_fail(NULL, ncclInvalidArgument, "ncclCommInitAll: %d devices", ndev);
	res = ncclGetUniqueId(&uid);
	if (res != ncclSuccess)
		return res;
	memcpy(id.internal, uid.internal, sizeof(id.internal));
	/* the ranks join together: create them inside a group of our own */
	ncclGroupStart();
	res = ncclSuccess;
	for (int i = 0; i < ndev; i++) {
		r = comm_create(&comms[i], ndev, &id, i, NULL, devlist ? devlist[i] : i, NULL);
		if (r != ncclSuccess && r != ncclInProgress && res == ncclSuccess)
			res = r;
	}
	r = ncclGroupEnd();
	if (res == ncclSuccess)
		res = r;
	if (res != ncclSuccess)
		for (int i = 0; i < ndev; i++) {
			comm_free(comms[i]);
			comms[i] = NULL;
		}
	return res;
}
NCCL_ALIAS(ncclCommInitAll);

/* ---- state ---- */

/* ncclSuccess when comm may run operations, else why not. */
ncclResult_t nccl_comm_ready(struct ncclComm *comm, const char *who)
{
	int st;

	if (!comm)
		return nccl_fail(NULL, ncclInvalidArgument, "%s: communicator is NULL", who);
	st = atomic_load(&comm->init_state);
	if (st == ncclInProgress)
		return nccl_fail(comm, ncclInvalidUsage,
				 "%s: the communicator is still being created (poll "
				 "ncclCommGetAsyncError until it is not ncclInProgress)",
				 who);
	if (st != ncclSuccess)
		return nccl_fail(comm, (ncclResult_t)st, "%s: the communicator's creation failed",
				 who);
	if (atomic_load(&comm->aborting))
		return nccl_fail(comm, ncclInvalidUsage, "%s: the communicator was aborted", who);
	return ncclSuccess;
}

ncclResult_t ncclCommGetAsyncError(ncclComm_t comm, ncclResult_t *err)
{
	int st, e = 0;

	if (!comm || !err)
		return nccl_fail(comm, ncclInvalidArgument, "ncclCommGetAsyncError: NULL argument");
	st = atomic_load(&comm->init_state);
	if (st != ncclSuccess) {
		*err = (ncclResult_t)st;
		return ncclSuccess;
	}
	/* stream-ordered operations' errors: ask libr2ccl, unless another
	 * thread is using the session (then what is known already) */
	if (!atomic_load(&comm->aborting) && pthread_mutex_trylock(&comm->lock) == 0) {
		struct nccl_ctx_save sv;
		/* (it may free destroyed state of the session: in its context) */
		nccl_cuda_ctx_enter(comm->cuctx, &sv);
		if (comm->comm && r2ccl_comm_get_async_error(comm->comm, &e) == 0 && e < 0) {
			int zero = 0;
			ncclResult_t res = nccl_fail_r2(comm, e, "an operation on the stream");
			atomic_compare_exchange_strong(&comm->async_err, &zero, (int)res);
		}
		nccl_cuda_ctx_leave(&sv);
		pthread_mutex_unlock(&comm->lock);
	}
	*err = (ncclResult_t)atomic_load(&comm->async_err);
	return ncclSuccess;
}
NCCL_ALIAS(ncclCommGetAsyncError);

ncclResult_t ncclCommCount(const ncclComm_t comm, int *count)
{
	if (!comm || !count)
		return nccl_fail(comm, ncclInvalidArgument, "ncclCommCount: NULL argument");
	*count = comm->nranks;
	return ncclSuccess;
}
NCCL_ALIAS(ncclCommCount);

ncclResult_t ncclCommUserRank(const ncclComm_t comm, int *rank)
{
	if (!comm || !rank)
		return nccl_fail(comm, ncclInvalidArgument, "ncclCommUserRank: NULL argument");
	*rank = comm->rank;
	return ncclSuccess;
}
NCCL_ALIAS(ncclCommUserRank);

ncclResult_t ncclCommCuDevice(const ncclComm_t comm, int *device)
{
	if (!comm || !device)
		return nccl_fail(comm, ncclInvalidArgument, "ncclCommCuDevice: NULL argument");
	if (comm->cudev < 0)
		return nccl_fail(comm, ncclInvalidUsage,
				 "ncclCommCuDevice: no CUDA device was current when the "
				 "communicator was created");
	*device = comm->cudev;
	return ncclSuccess;
}
NCCL_ALIAS(ncclCommCuDevice);

ncclResult_t ncclCommTriggerRebalance(ncclComm_t comm)
{
	ncclResult_t res = nccl_comm_ready(comm, "ncclCommTriggerRebalance");
	int r;

	if (res != ncclSuccess)
		return res;
	pthread_mutex_lock(&comm->lock);
	r = r2ccl_comm_trigger_rebalance(comm->comm);
	pthread_mutex_unlock(&comm->lock);
	return r < 0 ? nccl_fail_r2(comm, r, "ncclCommTriggerRebalance") : ncclSuccess;
}
NCCL_ALIAS(ncclCommTriggerRebalance);

/* ---- the end of a communicator ---- */

static void join_init(struct ncclComm *comm)
{
	if (comm->init_thread_live) {
		pthread_join(comm->init_thread, NULL);
		comm->init_thread_live = false;
	}
}

/* Waits until every operation this rank queued is done (a local flush, as
 * NCCL's): host-memory operations were done when they returned; GPU ones
 * when their streams have passed them. While waiting, libr2ccl is asked for
 * errors: that also releases streams whose operations r2ccld refused or can
 * no longer run (daemon gone). Called with comm->lock held. */
static int comm_flush(struct ncclComm *comm)
{
	struct nccl_ctx_save sv;
	int e = 0, r = 0;

	nccl_cuda_ctx_enter(comm->cuctx, &sv);
	for (int i = 0; i < comm->nstreams && r >= 0; i++) {
		while ((r = nccl_cuda_stream_query(comm->streams[i])) == 0) {
			if (r2ccl_comm_get_async_error(comm->comm, &e) == 0 && e < 0)
				break;
			usleep(100);
		}
	}
	if (r >= 0) {
		comm->nstreams = 0;
		r = r2ccl_comm_get_async_error(comm->comm, &e) == 0 && e < 0 ? e : 0;
	} else {
		r = -ENODEV;
	}
	nccl_cuda_ctx_leave(&sv);
	return r;
}

ncclResult_t ncclCommFinalize(ncclComm_t comm)
{
	ncclResult_t res = nccl_comm_ready(comm, "ncclCommFinalize");
	int r;

	if (res != ncclSuccess)
		return res;
	pthread_mutex_lock(&comm->lock);
	r = comm_flush(comm);
	pthread_mutex_unlock(&comm->lock);
	return r < 0 ? nccl_fail_r2(comm, r, "ncclCommFinalize: an operation failed") : ncclSuccess;
}
NCCL_ALIAS(ncclCommFinalize);

ncclResult_t ncclCommDestroy(ncclComm_t comm)
{
	if (!comm)
		return ncclSuccess;
	join_init(comm);
	pthread_mutex_lock(&comm->lock);
	/* what is still queued runs first (NCCL finalizes in Destroy too) */
	if (comm->comm && atomic_load(&comm->init_state) == ncclSuccess)
		comm_flush(comm);
	pthread_mutex_unlock(&comm->lock);
	comm_free(comm);
	return ncclSuccess;
}
NCCL_ALIAS(ncclCommDestroy);

ncclResult_t ncclCommAbort(ncclComm_t comm)
{
	struct nccl_ctx_save sv;
	int e;

	if (!comm)
		return ncclSuccess;
	atomic_store(&comm->aborting, true);
	/* a thread waiting in an operation on this session wakes when its
	 * socket closes (libr2ccl then reports the daemon gone), and so does
	 * a creation still joining; r2ccld drops the session's ranks */
	pthread_mutex_lock(&comm->sock_lock);
	if (comm->client)
		r2c_client_shutdown(comm->client);
	pthread_mutex_unlock(&comm->sock_lock);
	join_init(comm);
	/* releases the streams of stream-ordered operations not run. A thread
	 * may hold comm->lock in a stream synchronization that waits for one
	 * of them (PreMulSum, a staged buffer on another stream): release them
	 * first, then wait for the lock, or both wait for ever (the session is
	 * shut: the release touches no socket) */
	nccl_cuda_ctx_enter(comm->cuctx, &sv);
	if (pthread_mutex_trylock(&comm->lock) != 0) {
		if (comm->comm)
			r2ccl_comm_get_async_error(comm->comm, &e);
		pthread_mutex_lock(&comm->lock);
	}
	if (comm->comm)
		r2ccl_comm_get_async_error(comm->comm, &e);
	pthread_mutex_unlock(&comm->lock);
	nccl_cuda_ctx_leave(&sv);
	/* r2ccl_comm_abort would talk to a closed session: the communicator
	 * stays on its client, whose r2ccl_disconnect (comm_free) releases it.
	 * Never free() it here: libr2ccl still lists it, and the disconnect
	 * wrote into the freed memory (the heap corruption PyTorch's threads
	 * hit at exit, issue 19). */
	comm->comm = NULL;
	comm_free(comm);
	return ncclSuccess;
}
NCCL_ALIAS(ncclCommAbort);

ncclResult_t ncclCommRevoke(ncclComm_t comm, int flags)
{
	(void)flags;
	return nccl_fail(comm, ncclInvalidUsage,
			 "ncclCommRevoke is not supported by R2CCL: use ncclCommAbort, or "
			 "ncclCommShrink to go on without failed ranks");
}
NCCL_ALIAS(ncclCommRevoke);

/* ---- split and shrink ---- */

/* Runs blocking on comm's session with a buffer of its r2ccl memory. */
static int with_buf(struct ncclComm *comm, size_t len, void **p)
{
	return r2ccl_mem_alloc(comm->client, len, p);
}

struct split_entry {
	int32_t color, key, rank, pad;
};

ncclResult_t ncclCommSplit(ncclComm_t comm, int color, int key, ncclComm_t *newcomm,
			   ncclConfig_t *config)
{
	ncclResult_t res = nccl_comm_ready(comm, "ncclCommSplit");
	struct split_entry *all = NULL;
	r2ccl_unique_id_t *ids = NULL, myid;
	void *buf = NULL;
	int n, r, newrank = 0, newn = 0, leader = -1;
	size_t elen, ilen;

	if (res != ncclSuccess)
		return res;
	if (!newcomm)
		return nccl_fail(comm, ncclInvalidArgument, "ncclCommSplit: newcomm is NULL");
	if (color < 0 && color != NCCL_SPLIT_NOCOLOR)
		return nccl_fail(comm, ncclInvalidArgument, "ncclCommSplit: color %d", color);
	*newcomm = NULL;
	n = comm->nranks;
	elen = sizeof(*all) * (size_t)n;
	ilen = sizeof(*ids) * (size_t)n;
	pthread_mutex_lock(&comm->lock);
	r = with_buf(comm, elen + ilen, &buf);
	if (r < 0)
		goto out;
	all = buf;
	ids = (r2ccl_unique_id_t *)((char *)buf + elen);
	/* 1: every rank's color and key */
	all[comm->rank] = (struct split_entry){ color, key, comm->rank, 0 };
	r = r2ccl_allgather(comm->comm, &all[comm->rank], all, sizeof(*all), R2CCL_UINT8);
	if (r < 0)
		goto out;
	for (int i = 0; i < n; i++) {
		if (color == NCCL_SPLIT_NOCOLOR || all[i].color != color)
			continue;
		if (leader < 0)
			leader = i;
		newn++;
		if (all[i].key < key || (all[i].key == key && i < comm->rank))
			newrank++;
	}
	/* 2: each color's first rank makes the new communicator's id */
	memset(&ids[comm->rank], 0, sizeof(ids[0]));
	if (leader == comm->rank) {
		r = r2ccl_get_unique_id(comm->client, &ids[comm->rank]);
		if (r < 0)
			goto out;
	}
	r = r2ccl_allgather(comm->comm, &ids[comm->rank], ids, sizeof(ids[0]), R2CCL_UINT8);
	if (r < 0)
		goto out;
	if (leader >= 0)
		myid = ids[leader];
out:
	if (buf)
		r2ccl_mem_free(comm->client, buf);
	pthread_mutex_unlock(&comm->lock);
	if (r < 0)
		return nccl_fail_r2(comm, r, "ncclCommSplit");
	if (color == NCCL_SPLIT_NOCOLOR)
		return ncclSuccess;
	if (!config || config == NCCL_CONFIG_UNDEF_PTR) {
		/* inherit the parent's blocking mode */
		ncclConfig_t c = NCCL_CONFIG_INITIALIZER;
		c.blocking = comm->cfg.blocking;
		return comm_create(newcomm, newn, &myid, newrank, &c, comm->cudev, comm);
	}
	return comm_create(newcomm, newn, &myid, newrank, config, comm->cudev, comm);
}
NCCL_ALIAS(ncclCommSplit);

ncclResult_t ncclCommShrink(ncclComm_t comm, int *excl, int nexcl, ncclComm_t *newcomm,
			    ncclConfig_t *config, int flags)
{
	ncclResult_t res = nccl_comm_ready(comm, "ncclCommShrink");
	r2ccl_unique_id_t id;
	int newrank = 0, newn = 0, root = -1;
	bool out_me = false;

	(void)flags; /* NCCL_SHRINK_ABORT: r2ccld already failed what involved gone ranks */
	if (res != ncclSuccess)
		return res;
	if (!newcomm || (nexcl > 0 && !excl) || nexcl < 0)
		return nccl_fail(comm, ncclInvalidArgument, "ncclCommShrink: bad arguments");
	*newcomm = NULL;
	for (int i = 0; i < comm->nranks; i++) {
		bool ex = false;
		for (int j = 0; j < nexcl; j++)
			ex |= excl[j] == i;
		if (ex) {
			out_me |= i == comm->rank;
			continue;
		}
		if (root < 0)
			root = i;
		if (i < comm->rank)
			newrank++;
		newn++;
	}
	if (out_me)
		return nccl_fail(comm, ncclInvalidArgument,
				 "ncclCommShrink: this rank (%d) is in the excluded list",
				 comm->rank);
	if (root < 0)
		return nccl_fail(comm, ncclInvalidArgument, "ncclCommShrink: every rank excluded");
	/* the excluded ranks may be dead, and r2ccld fails every operation of
	 * a communicator that lost a rank: nothing can be exchanged over the
	 * parent. Every remaining rank derives the same id from the parent's
	 * (its root daemon must still be up). */
	nccl_uid_derive(&comm->uid, ++comm->shrinks, excl, nexcl, &id);
	if (!config) {
		ncclConfig_t c = NCCL_CONFIG_INITIALIZER;
		c.blocking = comm->cfg.blocking;
		return comm_create(newcomm, newn, &id, newrank, &c, comm->cudev, comm);
	}
	return comm_create(newcomm, newn, &id, newrank, config, comm->cudev, comm);
}
NCCL_ALIAS(ncclCommShrink);

/* ---- the device API ---- */

ncclResult_t ncclDevCommCreate(ncclComm_t comm, ncclDevCommRequirements_t const *reqs,
			       ncclDevComm_t *out)
{
	(void)reqs, (void)out;
	return nccl_fail(comm, ncclInvalidUsage,
			 "ncclDevCommCreate: the NCCL device API (kernels that communicate "
			 "themselves) is not supported by R2CCL, whose daemon moves the data");
}
NCCL_ALIAS(ncclDevCommCreate);

ncclResult_t ncclDevCommDestroy(ncclComm_t comm, ncclDevComm_t const *dc)
{
	(void)dc;
	return nccl_fail(comm, ncclInvalidUsage,
			 "ncclDevCommDestroy: the NCCL device API is not supported by R2CCL "
			 "(no device communicator can exist)");
}
NCCL_ALIAS(ncclDevCommDestroy);
