/* SPDX-License-Identifier: MIT */
/*
 * Proxy buffer pools (bufpool.h): NUMA-local slabs, registered with every
 * rail's transport, cut into chunk buffers, reused, under a cap.
 */
#include <errno.h>
#include <numa.h>
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>

#include "net/bufpool.h"
#include "config.h"
#include "log.h"
#include "net/rails.h"
#include "util.h"

#define PAGE 4096u

struct slab {
	char *mem;
	size_t size;
	bool numa;                       /* numa_alloc_onnode (else mmap) */
	uint8_t *out;                    /* per buffer: handed out */
	uint16_t *last;                  /* per buffer: the owner whose data it holds (0: none) */
	void *mr[R2_BUFPOOL_MAX_TP];     /* registration per attached transport */
	bool reg[R2_BUFPOOL_MAX_TP];
};

struct r2_bufpool {
	pthread_mutex_t lock;
	pthread_cond_t cond;             /* a buffer came back (CLOCK_MONOTONIC) */
	char name[64];
	int node;                        /* -1: libnuma unusable */
	size_t stride;                   /* one buffer, page aligned */
	size_t slab_size;                /* a multiple of stride */
	uint32_t per_slab, max_slabs;
	struct slab *slabs;              /* max_slabs entries, nslabs used */
	uint32_t nslabs;
	void **freel;                    /* free buffers (a stack) */
	size_t nfree;
	uint64_t out, high, gets, waits, timeouts;
	struct { const struct r2_tp_ops *ops; struct r2_tp *tp; } tp[R2_BUFPOOL_MAX_TP];
	int ntp;
};

static size_t round_up(size_t v, size_t a)
{
	return (v + a - 1) / a * a;
}

static int current_node(void)
{
	int cpu = sched_getcpu();
	int n = cpu >= 0 ? numa_node_of_cpu(cpu) : -1;

	return n >= 0 ? n : 0;
}

static void slab_unregister(struct r2_bufpool *p, struct slab *s)
{
	for (int k = 0; k < p->ntp; k++) {
		if (!s->reg[k])
			continue;
		p->tp[k].ops->dereg_mem(p->tp[k].tp, s->mr[k]);
		s->reg[k] = false;
		s->mr[k] = NULL;
	}
}

static void slab_free(struct r2_bufpool *p, struct slab *s)
{
	slab_unregister(p, s);
	if (s->mem && s->numa)
		numa_free(s->mem, s->size);
	else if (s->mem)
		munmap(s->mem, s->size);
	free(s->out);
	free(s->last);
	memset(s, 0, sizeof(*s));
}

/* Adds a slab (under p->lock); 0, -ENOBUFS at the cap, -ENOMEM, or the
 * error of a transport's reg_mem. */
static int grow(struct r2_bufpool *p)
{
	struct slab *s;
	int r;

	if (p->nslabs >= p->max_slabs)
		return -ENOBUFS;
	s = &p->slabs[p->nslabs];
	s->size = p->slab_size;
	s->out = calloc(p->per_slab, 1);
	s->last = calloc(p->per_slab, sizeof(*s->last));
	if (!s->out || !s->last) {
		free(s->out);
		free(s->last);
		s->out = NULL;
		s->last = NULL;
		return -ENOMEM;
	}
	if (p->node >= 0) {
		s->mem = numa_alloc_onnode(s->size, p->node);
		s->numa = s->mem != NULL;
	}
	if (!s->mem) {
		void *m = mmap(NULL, s->size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS,
			       -1, 0);
		s->mem = m == MAP_FAILED ? NULL : m;
	}
	if (!s->mem) {
		free(s->out);
		free(s->last);
		memset(s, 0, sizeof(*s));
		return -ENOMEM;
	}
	/* touch every page now (placed on the node; no faults on the data path) */
	memset(s->mem, 0, s->size);
	for (int k = 0; k < p->ntp; k++) {
		r = p->tp[k].ops->reg_mem(p->tp[k].tp, s->mem, s->size, &s->mr[k]);
		if (r < 0) {
			slab_free(p, s);
			return r;
		}
		s->reg[k] = true;
	}
	for (uint32_t i = p->per_slab; i-- > 0;)
		p->freel[p->nfree++] = s->mem + (size_t)i * p->stride;
	p->nslabs++;
	return 0;
}

int r2_bufpool_create(const struct r2_bufpool_config *cfg, struct r2_bufpool **out)
{
	struct r2_bufpool *p;
	pthread_condattr_t ca;
	size_t stride, slab;
	uint64_t max_slabs, pre;

	*out = NULL;
	if (!cfg || cfg->buf_size == 0 || cfg->max_bytes == 0 || cfg->buf_size > (1ull << 40))
		return -EINVAL;
	stride = round_up(cfg->buf_size, PAGE);
	slab = round_up(cfg->slab_size > stride ? cfg->slab_size : stride, stride);
	max_slabs = cfg->max_bytes / slab;
	if (max_slabs == 0)
		max_slabs = 1; /* the cap is at least one slab */
	if (max_slabs > (1u << 20))
		return -EINVAL;
	p = calloc(1, sizeof(*p));
	if (!p)
		return -ENOMEM;
	snprintf(p->name, sizeof(p->name), "%s", cfg->name ? cfg->name : "");
	p->stride = stride;
	p->slab_size = slab;
	p->per_slab = (uint32_t)(slab / stride);
	p->max_slabs = (uint32_t)max_slabs;
	p->slabs = calloc(max_slabs, sizeof(*p->slabs));
	p->freel = calloc(max_slabs * p->per_slab, sizeof(*p->freel));
	if (!p->slabs || !p->freel) {
		free(p->slabs);
		free(p->freel);
		free(p);
		return -ENOMEM;
	}
	p->node = -1;
	if (numa_available() >= 0) {
		int n = cfg->numa_node;
		if (n < 0 || n > numa_max_node() ||
		    !numa_bitmask_isbitset(numa_all_nodes_ptr, (unsigned)n))
			n = current_node(); /* locality unknown: where we run */
		p->node = n;
	}
	pthread_mutex_init(&p->lock, NULL);
	pthread_condattr_init(&ca);
	pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
	pthread_cond_init(&p->cond, &ca);
	pthread_condattr_destroy(&ca);
	pre = (cfg->prealloc_bytes + slab - 1) / slab;
	for (uint64_t i = 0; i < pre && i < max_slabs; i++) {
		int r = grow(p);
		if (r < 0) {
			r2_bufpool_destroy(p);
			return r;
		}
	}
	*out = p;
	return 0;
}

void r2_bufpool_destroy(struct r2_bufpool *p)
{
	if (!p)
		return;
	for (uint32_t i = 0; i < p->nslabs; i++)
		slab_free(p, &p->slabs[i]);
	pthread_cond_destroy(&p->cond);
	pthread_mutex_destroy(&p->lock);
	free(p->slabs);
	free(p->freel);
	free(p);
}

int r2_bufpool_attach(struct r2_bufpool *p, const struct r2_tp_ops *ops, struct r2_tp *tp)
{
	int k, r = 0;

	if (!ops || !ops->reg_mem || !ops->dereg_mem)
		return -EINVAL;
	pthread_mutex_lock(&p->lock);
	if (p->ntp == R2_BUFPOOL_MAX_TP) {
		pthread_mutex_unlock(&p->lock);
		return -ENOSPC;
	}
	k = p->ntp;
	for (uint32_t i = 0; i < p->nslabs; i++) {
		struct slab *s = &p->slabs[i];
		r = ops->reg_mem(tp, s->mem, s->size, &s->mr[k]);
		if (r < 0) {
			while (i-- > 0) {
				ops->dereg_mem(tp, p->slabs[i].mr[k]);
				p->slabs[i].reg[k] = false;
				p->slabs[i].mr[k] = NULL;
			}
			pthread_mutex_unlock(&p->lock);
			return r;
		}
		s->reg[k] = true;
	}
	p->tp[k].ops = ops;
	p->tp[k].tp = tp;
	p->ntp++;
	pthread_mutex_unlock(&p->lock);
	return k;
}

void r2_bufpool_detach_all(struct r2_bufpool *p)
{
	if (!p)
		return;
	pthread_mutex_lock(&p->lock);
	for (uint32_t i = 0; i < p->nslabs; i++)
		slab_unregister(p, &p->slabs[i]);
	p->ntp = 0;
	pthread_mutex_unlock(&p->lock);
}

/* Under p->lock: a free buffer, or NULL; *prev gets the owner whose data it
 * held, and owner becomes its owner. */
static void *take(struct r2_bufpool *p, uint16_t owner, uint16_t *prev)
{
	void *b = p->freel[--p->nfree];

	*prev = 0;
	for (uint32_t i = 0; i < p->nslabs; i++) {
		struct slab *s = &p->slabs[i];
		if ((char *)b >= s->mem && (char *)b < s->mem + s->size) {
			size_t idx = (size_t)((char *)b - s->mem) / p->stride;
			s->out[idx] = 1;
			*prev = s->last[idx];
			s->last[idx] = owner;
			break;
		}
	}
	p->out++;
	p->gets++;
	if (p->out > p->high)
		p->high = p->out;
	return b;
}

void *r2_bufpool_get(struct r2_bufpool *p, uint64_t timeout_us, int *err)
{
	return r2_bufpool_get_for(p, timeout_us, R2_BUFPOOL_ANY_OWNER, 0, err);
}

void *r2_bufpool_get_for(struct r2_bufpool *p, uint64_t timeout_us, uint16_t owner,
			 size_t fill, int *err)
{
	struct timespec ts;
	bool waited = false;
	void *b = NULL;
	uint16_t prev = 0;
	int r = 0;

	pthread_mutex_lock(&p->lock);
	for (;;) {
		if (p->nfree) {
			b = take(p, owner, &prev);
			r = 0;
			break;
		}
		r = grow(p);
		if (r == 0)
			continue;
		if (r != -ENOBUFS && timeout_us == 0)
			break; /* the system refused memory */
		r = -ENOBUFS;
		if (timeout_us == 0)
			break;
		if (!waited) {
			waited = true;
			p->waits++;
			clock_gettime(CLOCK_MONOTONIC, &ts);
			ts.tv_sec += (time_t)(timeout_us / 1000000);
			ts.tv_nsec += (long)(timeout_us % 1000000) * 1000;
			if (ts.tv_nsec >= 1000000000L) {
				ts.tv_sec++;
				ts.tv_nsec -= 1000000000L;
			}
		}
		if (pthread_cond_timedwait(&p->cond, &p->lock, &ts) == ETIMEDOUT && !p->nfree) {
			p->timeouts++;
			break;
		}
	}
	pthread_mutex_unlock(&p->lock);
	/* another tenant's bytes: cleared beyond what the caller writes now */
	if (b && owner != R2_BUFPOOL_ANY_OWNER && prev && prev != owner && fill < p->stride)
		memset((char *)b + fill, 0, p->stride - fill);
	if (err)
		*err = r;
	return b;
}

int r2_bufpool_put(struct r2_bufpool *p, void *buf)
{
	if (!buf)
		return 0;
	pthread_mutex_lock(&p->lock);
	for (uint32_t i = 0; i < p->nslabs; i++) {
		struct slab *s = &p->slabs[i];
		size_t off, idx;
		if ((char *)buf < s->mem || (char *)buf >= s->mem + s->size)
			continue;
		off = (size_t)((char *)buf - s->mem);
		idx = off / p->stride;
		if (off % p->stride || !s->out[idx])
			break; /* not a buffer's start, or not handed out */
		s->out[idx] = 0;
		p->freel[p->nfree++] = buf;
		p->out--;
		pthread_cond_signal(&p->cond);
		pthread_mutex_unlock(&p->lock);
		return 0;
	}
	pthread_mutex_unlock(&p->lock);
	return -EINVAL;
}

void r2_bufpool_note_wait(struct r2_bufpool *p, bool timed_out)
{
	pthread_mutex_lock(&p->lock);
	if (timed_out)
		p->timeouts++;
	else
		p->waits++;
	pthread_mutex_unlock(&p->lock);
}

void *r2_bufpool_mr(struct r2_bufpool *p, const void *buf, int k)
{
	void *mr = NULL;

	if (k < 0 || k >= R2_BUFPOOL_MAX_TP)
		return NULL;
	pthread_mutex_lock(&p->lock);
	for (uint32_t i = 0; i < p->nslabs; i++) {
		struct slab *s = &p->slabs[i];
		if ((const char *)buf >= s->mem && (const char *)buf < s->mem + s->size) {
			mr = s->reg[k] ? s->mr[k] : NULL;
			break;
		}
	}
	pthread_mutex_unlock(&p->lock);
	return mr;
}

size_t r2_bufpool_buf_size(const struct r2_bufpool *p)
{
	return p->stride;
}

void r2_bufpool_stats(struct r2_bufpool *p, struct r2_bufpool_stats *st)
{
	memset(st, 0, sizeof(*st));
	pthread_mutex_lock(&p->lock);
	snprintf(st->name, sizeof(st->name), "%s", p->name);
	st->numa_node = p->node;
	st->buf_size = p->stride;
	st->slab_size = p->slab_size;
	st->bytes = (uint64_t)p->nslabs * p->slab_size;
	st->max_bytes = (uint64_t)p->max_slabs * p->slab_size;
	st->in_use = p->out * p->stride;
	st->high_water = p->high * p->stride;
	st->gets = p->gets;
	st->waits = p->waits;
	st->timeouts = p->timeouts;
	st->slabs = p->nslabs;
	for (uint32_t i = 0; i < p->nslabs; i++)
		for (int k = 0; k < p->ntp; k++)
			st->registrations += p->slabs[i].reg[k];
	pthread_mutex_unlock(&p->lock);
}

/* ---- the daemon's pools ---- */

/* slabs allocated per pool at start-up (the rest on demand, up to the cap) */
#define PREALLOC_SLABS 4

void r2d_bufpools_start(struct r2d *d)
{
	struct r2_rails *rs = d->rails;
	uint64_t chunk = (uint64_t)r2_param_int(&d->params, P_CHUNK_SIZE);
	uint64_t slab = (uint64_t)r2_param_int(&d->params, P_PROXY_BUF_SIZE);
	uint64_t cap = (uint64_t)r2_param_int(&d->params, P_PROXY_POOL_MAX);

	if (!rs || rs->n == 0)
		return;
	for (int i = 0; i < rs->n; i++) {
		struct r2_rail *rl = &rs->rail[i];
		struct r2_bufpool_config cfg = {
			.name = rl->ifname,
			.buf_size = chunk,
			.slab_size = slab,
			.max_bytes = cap / (uint64_t)rs->n,
			.numa_node = -1,
		};
		struct r2_bufpool_stats st;
		int r, nic;

		cfg.prealloc_bytes = R2_MIN(cfg.max_bytes, PREALLOC_SLABS * R2_MAX(slab, chunk));
		nic = r2_topology_nic_index(&d->topo, rl->ifname); /* name or netdev */
		if (nic >= 0)
			cfg.numa_node = d->topo.nics[nic].numa_node;
		r = r2_bufpool_create(&cfg, &rl->pool);
		if (r < 0) {
			log_warn("rail %d (%s): no proxy buffer pool: %s", i, rl->ifname,
				 strerror(-r));
			continue;
		}
		/* every slab on every rail: a chunk fails over without copying */
		for (int k = 0; k < rs->n; k++) {
			r = r2_bufpool_attach(rl->pool, rs->rail[k].ops, rs->rail[k].tp);
			if (r < 0)
				log_warn("rail %d (%s): proxy buffers not registered with rail %d: %s",
					 i, rl->ifname, k, strerror(-r));
		}
		r2_bufpool_stats(rl->pool, &st);
		log_info("rail %d (%s): proxy buffers %llu MiB of %llu MiB on NUMA node %d%s "
			 "(%llu KiB buffers, %llu KiB slabs, %u registrations)",
			 i, rl->ifname, (unsigned long long)(st.bytes >> 20),
			 (unsigned long long)(st.max_bytes >> 20), st.numa_node,
			 cfg.numa_node < 0 ? " (NIC locality unknown: current node)" : "",
			 (unsigned long long)(st.buf_size >> 10),
			 (unsigned long long)(st.slab_size >> 10), st.registrations);
	}
}

void r2d_bufpools_detach(struct r2d *d)
{
	struct r2_rails *rs = d->rails;

	for (int i = 0; rs && i < rs->n; i++)
		r2_bufpool_detach_all(rs->rail[i].pool);
}

void r2d_bufpools_free(struct r2d *d)
{
	struct r2_rails *rs = d->rails;

	for (int i = 0; rs && i < rs->n; i++) {
		r2_bufpool_destroy(rs->rail[i].pool);
		rs->rail[i].pool = NULL;
	}
}

struct r2_bufpool *r2d_bufpool_for(struct r2d *d, int rail)
{
	struct r2_rails *rs = d->rails;

	if (!rs)
		return NULL;
	if (rail >= 0 && rail < rs->n && rs->rail[rail].pool)
		return rs->rail[rail].pool;
	for (int i = 0; i < rs->n; i++)
		if (rs->rail[i].pool)
			return rs->rail[i].pool;
	return NULL;
}
