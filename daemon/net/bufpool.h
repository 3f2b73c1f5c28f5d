/* SPDX-License-Identifier: MIT */
/*
 * Proxy buffer pools: the memory the rail phase sends from.
 *
 * One pool per rail (NIC), its memory on the NIC's NUMA node (libnuma; the
 * current node when the NIC's locality is unknown). A pool is made of slabs
 * of proxy_buf_size bytes (the registration unit, 4 MB by default): each slab
 * is registered with every attached transport (reg_mem), so a chunk can go
 * out on any rail straight from the pool (a verbs rail sends it zero-copy;
 * tcp's registration is bookkeeping). A slab is cut into buffers of one chunk
 * each. Slabs are allocated up front (prealloc) and then on demand up to the
 * pool's cap; they are reused, never given back before the pool ends.
 *
 * Taking a buffer never blocks unless asked to: r2_bufpool_get with a
 * timeout waits for a put until then and fails with -ENOBUFS. The executor
 * cannot sleep there (it frees buffers itself when acknowledgements come),
 * so it takes with timeout 0 and keeps serving its mailbox until a buffer is
 * free or its operation's deadline passes.
 *
 * Thread safety: every function may be called from any thread (a mutex per
 * pool), except create/destroy/attach/detach (the owner, while no one else
 * uses the pool).
 */
#ifndef R2CCL_BUFPOOL_H
#define R2CCL_BUFPOOL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "transport/transport.h"

#define R2_BUFPOOL_MAX_TP 8 /* transports a pool's slabs are registered with */

struct r2_bufpool;

struct r2_bufpool_config {
	const char *name;      /* for logs and status: the NIC */
	size_t buf_size;       /* one buffer: the largest chunk */
	size_t slab_size;      /* registration unit (proxy_buf_size); at least buf_size */
	size_t max_bytes;      /* cap on the pool's slabs (at least one slab) */
	size_t prealloc_bytes; /* slabs allocated (and touched) at creation */
	int numa_node;         /* -1: the current node */
};

struct r2_bufpool_stats {
	char name[64];
	int numa_node;         /* where the slabs are (-1 if libnuma is unusable) */
	uint64_t buf_size, slab_size;
	uint64_t bytes;        /* slabs allocated */
	uint64_t max_bytes;    /* the cap */
	uint64_t in_use;       /* bytes of the buffers handed out */
	uint64_t high_water;   /* most bytes ever handed out at once */
	uint64_t gets;         /* buffers handed out */
	uint64_t waits;        /* times a taker found the pool exhausted and waited */
	uint64_t timeouts;     /* takers that gave up (-ENOBUFS) */
	uint32_t slabs, registrations;
};

/* Creates a pool; -EINVAL for a bad configuration, -ENOMEM. */
int r2_bufpool_create(const struct r2_bufpool_config *cfg, struct r2_bufpool **out);
/* Deregisters what is still registered and frees the slabs (accepts NULL).
 * Buffers still handed out become invalid. */
void r2_bufpool_destroy(struct r2_bufpool *p);

/* Registers every slab (and every later one) with a transport instance;
 * returns its index for r2_bufpool_mr, or a negative errno (the transport's
 * reg_mem error; nothing stays registered with it then). */
int r2_bufpool_attach(struct r2_bufpool *p, const struct r2_tp_ops *ops, struct r2_tp *tp);
/* Deregisters every slab from every transport (before the transports close). */
void r2_bufpool_detach_all(struct r2_bufpool *p);

/* A buffer of buf_size bytes. timeout_us 0: NULL at once if none is free
 * (the cap reached); otherwise waits up to timeout_us for a put, then NULL.
 * *err (may be NULL) gets 0, -ENOBUFS (none within the timeout) or -ENOMEM
 * (the system refused a new slab). */
void *r2_bufpool_get(struct r2_bufpool *p, uint64_t timeout_us, int *err);
/* The same for an owner (a tenant + 1, docs/tenancy.md) who writes
 * [0, fill) of the buffer at once: a buffer that last held another owner's
 * bytes has the rest, [fill, buf_size), cleared first, so that nothing of
 * the other tenant stays in it. r2_bufpool_get is R2_BUFPOOL_ANY_OWNER: no
 * clearing (relays and tests), and the next owner's get clears it. */
#define R2_BUFPOOL_ANY_OWNER 0xffffu
void *r2_bufpool_get_for(struct r2_bufpool *p, uint64_t timeout_us, uint16_t owner,
			 size_t fill, int *err);
/* Gives a buffer back (from any thread); NULL is ignored. A pointer that is
 * not one of the pool's buffers is refused with -EINVAL (and not freed). */
int r2_bufpool_put(struct r2_bufpool *p, void *buf);
/* Counts one wait of a caller that polls with timeout 0 (for the status). */
void r2_bufpool_note_wait(struct r2_bufpool *p, bool timed_out);
/* The registration handle of the slab that holds buf, for attached
 * transport k (NULL if none). */
void *r2_bufpool_mr(struct r2_bufpool *p, const void *buf, int k);

size_t r2_bufpool_buf_size(const struct r2_bufpool *p);
void r2_bufpool_stats(struct r2_bufpool *p, struct r2_bufpool_stats *st);

/* The daemon's pools, one per rail (rails.c calls these). */
struct r2d;
/* After the rails opened: a pool per rail on its NIC's NUMA node, each
 * registered with every rail's transport; the cap (proxy_pool_max) is
 * shared equally. Failures are logged; a rail without a pool sends from
 * another rail's pool. */
void r2d_bufpools_start(struct r2d *d);
void r2d_bufpools_detach(struct r2d *d); /* before the transports close */
void r2d_bufpools_free(struct r2d *d);   /* after */
/* The pool to send on rail (any pool if that rail has none); NULL if none. */
struct r2_bufpool *r2d_bufpool_for(struct r2d *d, int rail);

#endif
