/* SPDX-License-Identifier: MIT */
/*
 * Integration: every collective through libr2ccl against a real r2ccld, with
 * 1, 2, 3 and 8 ranks, in and out of place, from 0 elements to 64 MB,
 * checking every element (and that nothing outside the buffers and nothing
 * in an out-of-place send buffer is written).
 *
 * Each test case starts its own daemon (harness), gets a unique id on its own
 * connection and forks one process per rank (or one process per two ranks,
 * one thread each, for the "two ranks per process" case). Ranks report the
 * first mismatch into a MAP_SHARED page and through their exit status; an
 * alarm() in every rank process stops a hang. At the end the daemon is stopped
 * with SIGTERM and must exit 0 (and its log must hold no sanitizer report).
 *
 * Inputs are chosen so that every expected value is exact and computed here,
 * independently of the daemon's reduction code:
 *  - integers: random bits over the whole type (sums and products wrap
 *    modulo the width; computed in uint64 and truncated). avg divides the
 *    wrapped sum by n with C division (signed types truncate toward zero), as
 *    common/reduce.h documents;
 *  - floats: small integers (sum/avg: -8..8, prod: +-1, +-2, min/max:
 *    -100..100), so every partial result is exact even in bfloat16; the exact
 *    result is rounded once (float32: (float)sum / (float)n for avg; float64
 *    in double; half types: float32 result, then r2_float_to_half/bf16, which
 *    round to nearest even);
 *  - copies (allgather, broadcast, send/recv): random bit patterns (NaN
 *    payloads included: copies must be bit exact).
 * Large operations (float32 and int32 sums, 4-byte copies) use closed-form
 * patterns so that checking 64 MB per rank stays cheap.
 */
#include <check.h>
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "harness.h"
#include "r2ccl.h"
#include "reduce.h"

#define CHILD_ALARM_S 150 /* a rank process never lives longer than this */
#define CASE_TIMEOUT_S 300
#define GUARD 64          /* bytes checked before and after every buffer */
#define SENTINEL 0xA5
#define GUARD_BYTE 0x5A
#define BIG_BYTES ((size_t)64 << 20)
#define BIG_F32 (BIG_BYTES / 4)        /* 16M float32 elements */
#define MEG1 (((size_t)1 << 20) + 1)   /* 1M + 1 elements */
#define FAST_MIN ((size_t)1 << 16)     /* closed-form patterns from this count on */
#define MAX_PROCS 8

static const int nranks_of[] = { 1, 2, 3, 8 };
#define N_NRANKS ((int)(sizeof(nranks_of) / sizeof(nranks_of[0])))

static const r2ccl_dtype_t all_dtypes[] = {
	R2CCL_INT8,  R2CCL_UINT8,   R2CCL_INT32,    R2CCL_UINT32,  R2CCL_INT64,
	R2CCL_UINT64, R2CCL_FLOAT16, R2CCL_BFLOAT16, R2CCL_FLOAT32, R2CCL_FLOAT64,
};
static const r2ccl_redop_t all_redops[] = { R2CCL_SUM, R2CCL_PROD, R2CCL_MIN, R2CCL_MAX,
					    R2CCL_AVG };
static const size_t matrix_counts[] = { 1, 7, 1000, 1001 };
#define MATRIX_MAX_COUNT 1001
static const r2ccl_dtype_t copy_dtypes[] = { R2CCL_INT8, R2CCL_FLOAT16, R2CCL_BFLOAT16,
					     R2CCL_INT32, R2CCL_FLOAT32, R2CCL_UINT64,
					     R2CCL_FLOAT64 };

#define ARRAY_LEN(a) (sizeof(a) / sizeof((a)[0]))

/* ------------------------------------------------------------------------ */
/* Shared state between the test process and its rank processes              */
/* ------------------------------------------------------------------------ */

struct shared {
	r2ccl_unique_id_t id[2];
	int nfail;    /* failures reported by all ranks (atomic) */
	int claimed;  /* the first one writes first[] (atomic) */
	uint64_t ops, elems; /* rank 0's operations and checked elements */
	char first[1536];
};

static struct shared *sh;

/* One rank (a process, or a thread of one). */
struct rk {
	int n;           /* ranks in the communicators */
	int rank;        /* rank in comm */
	int rank2;       /* rank in comm2 (n - 1 - rank) */
	r2ccl_client_t *cl;
	r2ccl_comm_t *comm;
	r2ccl_comm_t *comm2;
	uint64_t seq;    /* operations so far: every rank runs the same sequence */
	uint64_t elems;  /* elements checked */
	int fails;
	bool broken;     /* a call failed: stop, later calls would only cascade */
};

static void rfail(struct rk *k, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

static void rfail(struct rk *k, const char *fmt, ...)
{
	char msg[1400];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	k->fails++;
	__atomic_add_fetch(&sh->nfail, 1, __ATOMIC_SEQ_CST);
	if (__atomic_exchange_n(&sh->claimed, 1, __ATOMIC_SEQ_CST) == 0)
		snprintf(sh->first, sizeof(sh->first), "nranks=%d rank=%d: %s", k->n, k->rank,
			 msg);
	if (k->fails <= 3)
		fprintf(stderr, "  FAIL nranks=%d rank=%d: %s\n", k->n, k->rank, msg);
}

/* ------------------------------------------------------------------------ */
/* Types and values                                                          */
/* ------------------------------------------------------------------------ */

static bool is_float(r2ccl_dtype_t dt)
{
	return dt == R2CCL_FLOAT16 || dt == R2CCL_BFLOAT16 || dt == R2CCL_FLOAT32 ||
	       dt == R2CCL_FLOAT64;
}

static bool is_signed(r2ccl_dtype_t dt)
{
	return dt == R2CCL_INT8 || dt == R2CCL_INT32 || dt == R2CCL_INT64;
}

static uint64_t type_mask(r2ccl_dtype_t dt)
{
	size_t es = r2ccl_dtype_size(dt);
	return es >= 8 ? ~(uint64_t)0 : (((uint64_t)1 << (8 * es)) - 1);
}

static int64_t sext(uint64_t v, r2ccl_dtype_t dt)
{
	unsigned sh_bits = 64 - 8 * (unsigned)r2ccl_dtype_size(dt);
	return (int64_t)(v << sh_bits) >> sh_bits;
}

static inline uint64_t mix64(uint64_t x)
{
	x += 0x9E3779B97F4A7C15ull;
	x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
	x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
	return x ^ (x >> 31);
}

static inline uint64_t getb(const void *p, size_t es, size_t i)
{
	switch (es) {
	case 1: return ((const uint8_t *)p)[i];
	case 2: return ((const uint16_t *)p)[i];
	case 4: return ((const uint32_t *)p)[i];
	default: return ((const uint64_t *)p)[i];
	}
}

static inline void putb(void *p, size_t es, size_t i, uint64_t v)
{
	switch (es) {
	case 1: ((uint8_t *)p)[i] = (uint8_t)v; break;
	case 2: ((uint16_t *)p)[i] = (uint16_t)v; break;
	case 4: ((uint32_t *)p)[i] = (uint32_t)v; break;
	default: ((uint64_t *)p)[i] = v; break;
	}
}

static uint32_t f32_bits(float f)
{
	uint32_t u;
	memcpy(&u, &f, 4);
	return u;
}

static uint64_t f64_bits(double d)
{
	uint64_t u;
	memcpy(&u, &d, 8);
	return u;
}

/* bits of the float type dt holding v (exact for our inputs; rounds the result) */
static uint64_t fenc(r2ccl_dtype_t dt, float f32v, double f64v)
{
	switch (dt) {
	case R2CCL_FLOAT16: return r2_float_to_half(f32v);
	case R2CCL_BFLOAT16: return r2_float_to_bf16(f32v);
	case R2CCL_FLOAT32: return f32_bits(f32v);
	default: return f64_bits(f64v);
	}
}

static double fdec(r2ccl_dtype_t dt, uint64_t b)
{
	float f;
	double d;
	uint32_t u = (uint32_t)b;

	switch (dt) {
	case R2CCL_FLOAT16: return r2_half_to_float((uint16_t)b);
	case R2CCL_BFLOAT16: return r2_bf16_to_float((uint16_t)b);
	case R2CCL_FLOAT32: memcpy(&f, &u, 4); return f;
	default: memcpy(&d, &b, 8); return d;
	}
}

static void fmt_val(char *out, size_t len, r2ccl_dtype_t dt, uint64_t b)
{
	if (is_float(dt))
		snprintf(out, len, "0x%" PRIx64 " = %.9g", b, fdec(dt, b));
	else if (is_signed(dt))
		snprintf(out, len, "0x%" PRIx64 " = %" PRId64, b, sext(b, dt));
	else
		snprintf(out, len, "0x%" PRIx64 " = %" PRIu64, b, b);
}

/* ------------------------------------------------------------------------ */
/* One operation: its inputs and expected outputs                            */
/* ------------------------------------------------------------------------ */

enum kind { K_ALLREDUCE, K_ALLGATHER, K_REDUCESCATTER, K_BROADCAST, K_REDUCE, K_SENDRECV };
static const char *const kind_name[] = { "allreduce", "allgather", "reducescatter",
					 "broadcast", "reduce", "send/recv" };
enum fast { FK_NONE, FK_I32SUM, FK_F32SUM, FK_COPY32 };

struct opx {
	enum kind kind;
	r2ccl_dtype_t dt;
	r2ccl_redop_t op;
	size_t count; /* as passed to the call */
	bool inplace;
	int root;     /* broadcast/reduce; send/recv: the peer received from */
	int n, rank;  /* in the communicator used */
	uint64_t salt;
	uint32_t salt32;
	enum fast fk;
	size_t es;
};

static bool is_red(enum kind k)
{
	return k == K_ALLREDUCE || k == K_REDUCESCATTER || k == K_REDUCE;
}

static void opx_str(char *out, size_t len, const struct opx *o)
{
	snprintf(out, len, "%s dtype=%s redop=%s count=%zu %s %s=%d", kind_name[o->kind],
		 r2ccl_dtype_name(o->dt), is_red(o->kind) ? r2ccl_redop_name(o->op) : "-",
		 o->count, o->inplace ? "in-place" : "out-of-place",
		 o->kind == K_SENDRECV ? "from" : "root", o->root);
}

/* Float inputs of reductions: small integers, so that everything is exact. */
static int red_fval(r2ccl_redop_t op, uint64_t h)
{
	static const int prod_vals[4] = { -2, -1, 1, 2 };

	switch (op) {
	case R2CCL_PROD: return prod_vals[h & 3];
	case R2CCL_MIN:
	case R2CCL_MAX: return (int)(h % 201) - 100;
	default: return (int)(h % 17) - 8;
	}
}

static inline uint64_t hash_rg(uint64_t salt, int r, size_t g)
{
	return mix64(salt ^ mix64(((uint64_t)(unsigned)r << 48) ^ (uint64_t)g));
}

/* Fast (closed-form) patterns for large 4-byte operations. */
static inline int f32_base(uint32_t salt, size_t g)
{
	return (int)((g + salt) % 1021) - 510;
}

static inline uint32_t fast_in(enum fast fk, uint32_t salt, int r, size_t g)
{
	switch (fk) {
	case FK_I32SUM: return (uint32_t)g * 2654435761u + salt + (uint32_t)r * 0x9E3779B1u;
	case FK_F32SUM: return f32_bits((float)(f32_base(salt, g) + r));
	default: return ((uint32_t)g * 2654435761u) ^ (salt + (uint32_t)r * 0x01000193u);
	}
}

static inline uint32_t fast_red(enum fast fk, uint32_t salt, int n, size_t g)
{
	uint32_t tri = (uint32_t)(n * (n - 1) / 2);

	if (fk == FK_I32SUM)
		return (uint32_t)n * ((uint32_t)g * 2654435761u + salt) + tri * 0x9E3779B1u;
	return f32_bits((float)(n * f32_base(salt, g) + (int)tri));
}

/* input of rank r at element g of its send buffer */
static uint64_t in_bits(const struct opx *o, int r, size_t g)
{
	uint64_t h;

	if (o->fk != FK_NONE)
		return fast_in(o->fk, o->salt32, r, g);
	h = hash_rg(o->salt, r, g);
	if (!is_red(o->kind) || !is_float(o->dt))
		return h & type_mask(o->dt);
	int v = red_fval(o->op, h);
	return fenc(o->dt, (float)v, (double)v);
}

/* the reduction over all ranks of element g */
static uint64_t red_exp(const struct opx *o, size_t g)
{
	const int n = o->n;

	if (o->fk != FK_NONE)
		return fast_red(o->fk, o->salt32, n, g);
	if (!is_float(o->dt)) {
		const uint64_t m = type_mask(o->dt);
		const bool sg = is_signed(o->dt);
		uint64_t acc = o->op == R2CCL_PROD ? 1 : 0;
		for (int r = 0; r < n; r++) {
			uint64_t v = hash_rg(o->salt, r, g) & m;
			switch (o->op) {
			case R2CCL_SUM:
			case R2CCL_AVG: acc += v; break;
			case R2CCL_PROD: acc *= v; break;
			case R2CCL_MIN:
				if (r == 0 || (sg ? sext(v, o->dt) < sext(acc, o->dt) : v < acc))
					acc = v;
				break;
			default:
				if (r == 0 || (sg ? sext(v, o->dt) > sext(acc, o->dt) : v > acc))
					acc = v;
				break;
			}
		}
		acc &= m;
		if (o->op == R2CCL_AVG) /* the wrapped sum, C division */
			acc = sg ? (uint64_t)(sext(acc, o->dt) / n) : acc / (uint64_t)n;
		return acc & m;
	}
	double acc = 0;
	for (int r = 0; r < n; r++) {
		double v = red_fval(o->op, hash_rg(o->salt, r, g));
		switch (o->op) {
		case R2CCL_SUM:
		case R2CCL_AVG: acc += v; break;
		case R2CCL_PROD: acc = r ? acc * v : v; break;
		case R2CCL_MIN: acc = (r == 0 || v < acc) ? v : acc; break;
		default: acc = (r == 0 || v > acc) ? v : acc; break;
		}
	}
	if (o->op == R2CCL_AVG)
		return fenc(o->dt, (float)acc / (float)n, acc / (double)n);
	return fenc(o->dt, (float)acc, acc);
}

/* what element i of this rank's receive buffer must hold after the op */
static uint64_t expect_at(const struct opx *o, size_t i)
{
	switch (o->kind) {
	case K_ALLREDUCE:
	case K_REDUCE: return red_exp(o, i);
	case K_REDUCESCATTER: return red_exp(o, (size_t)o->rank * o->count + i);
	case K_ALLGATHER: return in_bits(o, (int)(i / o->count), i % o->count);
	default: return in_bits(o, o->root, i); /* broadcast, send/recv (root = sender) */
	}
}

static void fill_in(const struct opx *o, int r, void *p, size_t nelem)
{
	if (o->fk != FK_NONE) {
		uint32_t *q = p;
		for (size_t g = 0; g < nelem; g++)
			q[g] = fast_in(o->fk, o->salt32, r, g);
		return;
	}
	for (size_t g = 0; g < nelem; g++)
		putb(p, o->es, g, in_bits(o, r, g));
}

/* Compares nelem elements at p (what: "recvbuff"/"sendbuff") with expected values:
 * the op's results, or (send) this rank's own inputs. */
static void check_elems(struct rk *k, const struct opx *o, const char *what, const void *p,
			size_t nelem, bool send)
{
	size_t bad = 0, first = 0;
	uint64_t fgot = 0, fexp = 0;

	k->elems += nelem;
	for (size_t i = 0; i < nelem; i++) {
		uint64_t got = getb(p, o->es, i);
		uint64_t exp = send ? in_bits(o, o->rank, i) : expect_at(o, i);
		if (got != exp) {
			if (!bad++) {
				first = i;
				fgot = got;
				fexp = exp;
			}
		}
	}
	if (bad) {
		char d[200], g[64], e[64];
		opx_str(d, sizeof(d), o);
		fmt_val(g, sizeof(g), o->dt, fgot);
		fmt_val(e, sizeof(e), o->dt, fexp);
		rfail(k, "%s: %s index %zu: got %s, expected %s (%zu of %zu elements wrong)", d,
		     what, first, g, e, bad, nelem);
	}
}

/* ------------------------------------------------------------------------ */
/* Buffers (shared memory from r2ccl_mem_alloc, with guards)                 */
/* ------------------------------------------------------------------------ */

struct buf {
	unsigned char *p; /* base + GUARD */
	size_t cap;       /* usable bytes */
};

static int balloc(struct rk *k, struct buf *b, size_t cap)
{
	void *base = NULL;
	int r = r2ccl_mem_alloc(k->cl, cap + 2 * GUARD, &base);

	b->p = NULL;
	b->cap = 0;
	if (r) {
		rfail(k, "r2ccl_mem_alloc(%zu): %s", cap + 2 * GUARD, r2ccl_strerror(r));
		k->broken = true;
		return -1;
	}
	b->p = (unsigned char *)base + GUARD;
	b->cap = cap;
	return 0;
}

static void bfree(struct rk *k, struct buf *b)
{
	int r;

	if (!b->p)
		return;
	r = r2ccl_mem_free(k->cl, b->p - GUARD);
	if (r)
		rfail(k, "r2ccl_mem_free: %s", r2ccl_strerror(r));
	b->p = NULL;
}

static void guard_set(struct buf *b, size_t len)
{
	memset(b->p - GUARD, GUARD_BYTE, GUARD);
	memset(b->p + len, GUARD_BYTE, GUARD);
}

static void guard_check(struct rk *k, const struct opx *o, const char *what, struct buf *b,
			size_t len)
{
	for (int side = 0; side < 2; side++) {
		const unsigned char *g = side ? b->p + len : b->p - GUARD;
		for (int i = 0; i < GUARD; i++) {
			if (g[i] != GUARD_BYTE) {
				char d[200];
				opx_str(d, sizeof(d), o);
				rfail(k, "%s: wrote %s %s (byte %d there is 0x%02x)", d,
				     side ? "past the end of" : "before", what, i, g[i]);
				return;
			}
		}
	}
}

/* ------------------------------------------------------------------------ */
/* Running one operation on one rank                                         */
/* ------------------------------------------------------------------------ */

static void opx_init(struct rk *k, struct opx *o, enum kind kind, int n, int rank,
		     r2ccl_dtype_t dt, r2ccl_redop_t op, size_t count, bool inplace, int root)
{
	memset(o, 0, sizeof(*o));
	o->kind = kind;
	o->dt = dt;
	o->op = op;
	o->count = count;
	o->inplace = inplace;
	o->root = root;
	o->n = n;
	o->rank = rank;
	o->es = r2ccl_dtype_size(dt);
	o->salt = mix64(++k->seq * 0x100000001B3ull);
	o->salt32 = (uint32_t)(o->salt >> 7) & 0xFFFFFF;
	o->fk = FK_NONE;
	if (count >= FAST_MIN) {
		if (is_red(kind) && op == R2CCL_SUM && dt == R2CCL_INT32)
			o->fk = FK_I32SUM;
		else if (is_red(kind) && op == R2CCL_SUM && dt == R2CCL_FLOAT32)
			o->fk = FK_F32SUM;
		else if (!is_red(kind) && o->es == 4)
			o->fk = FK_COPY32;
	}
}

static bool call_ok(struct rk *k, const struct opx *o, const char *fn, int r)
{
	char d[200];

	if (r == 0)
		return true;
	opx_str(d, sizeof(d), o);
	rfail(k, "%s: %s returned %d (%s)", d, fn, r, r2ccl_strerror(r));
	k->broken = true;
	return false;
}

/* A collective (not send/recv) on comm, where this process is rank `rank` of n.
 * sb/rb: buffers large enough for the op (in place uses the larger one only). */
static void coll(struct rk *k, r2ccl_comm_t *comm, int rank, enum kind kind, r2ccl_dtype_t dt,
		 r2ccl_redop_t op, size_t count, bool inplace, int root, struct buf *sb,
		 struct buf *rb)
{
	const int n = k->n;
	struct opx o;
	size_t slen, rlen; /* elements */
	unsigned char *s, *r;
	struct buf *region = NULL; /* in place: the one buffer */
	size_t region_len = 0;
	int e = 0;
	char d[200];

	if (k->broken)
		return;
	opx_init(k, &o, kind, n, rank, dt, op, count, inplace, root);
	slen = kind == K_REDUCESCATTER ? (size_t)n * count : count;
	rlen = kind == K_ALLGATHER ? (size_t)n * count : count;
	if (!inplace) {
		if (slen * o.es > sb->cap || rlen * o.es > rb->cap)
			goto toobig;
		s = sb->p;
		r = rb->p;
		fill_in(&o, rank, s, slen);
		memset(r, SENTINEL, rlen * o.es);
		guard_set(sb, slen * o.es);
		guard_set(rb, rlen * o.es);
	} else {
		switch (kind) {
		case K_REDUCESCATTER:
			region = sb;
			region_len = slen * o.es;
			if (region_len > region->cap)
				goto toobig;
			s = sb->p;
			r = s + (size_t)rank * count * o.es;
			fill_in(&o, rank, s, slen);
			break;
		case K_ALLGATHER:
			region = rb;
			region_len = rlen * o.es;
			if (region_len > region->cap)
				goto toobig;
			r = rb->p;
			s = r + (size_t)rank * count * o.es;
			memset(r, SENTINEL, region_len);
			fill_in(&o, rank, s, count);
			break;
		case K_BROADCAST:
			region = rb;
			region_len = count * o.es;
			if (region_len > region->cap)
				goto toobig;
			r = s = rb->p;
			if (rank == root)
				fill_in(&o, rank, s, count);
			else
				memset(r, SENTINEL, region_len);
			break;
		default: /* allreduce, reduce */
			region = rb;
			region_len = count * o.es;
			if (region_len > region->cap)
				goto toobig;
			r = s = rb->p;
			fill_in(&o, rank, s, count);
			break;
		}
		guard_set(region, region_len);
	}

	switch (kind) {
	case K_ALLREDUCE: e = r2ccl_allreduce(comm, s, r, count, dt, op); break;
	case K_ALLGATHER: e = r2ccl_allgather(comm, s, r, count, dt); break;
	case K_REDUCESCATTER: e = r2ccl_reducescatter(comm, s, r, count, dt, op); break;
	case K_BROADCAST: e = r2ccl_broadcast(comm, s, r, count, dt, root); break;
	case K_REDUCE: e = r2ccl_reduce(comm, s, r, count, dt, op, root); break;
	default: break;
	}
	if (!call_ok(k, &o, kind_name[kind], e))
		return;

	/* results */
	if (kind != K_REDUCE || rank == root)
		check_elems(k, &o, "recvbuff", r, rlen, false);
	if (!inplace) {
		check_elems(k, &o, "sendbuff (must stay unchanged)", s, slen, true);
		guard_check(k, &o, "sendbuff", sb, slen * o.es);
		guard_check(k, &o, "recvbuff", rb, rlen * o.es);
	} else {
		guard_check(k, &o, "the in-place buffer", region, region_len);
	}
	return;
toobig:
	opx_str(d, sizeof(d), &o);
	rfail(k, "test bug: %s does not fit the test's buffers", d);
	k->broken = true;
}

/* Ring send/recv: rank sends to rank+1 and receives from rank-1; even ranks
 * send first, odd ranks receive first. */
static void sendrecv_ring(struct rk *k, r2ccl_comm_t *comm, int rank, r2ccl_dtype_t dt,
			  size_t count, struct buf *sb, struct buf *rb)
{
	const int n = k->n;
	const int next = (rank + 1) % n, prev = (rank + n - 1) % n;
	struct opx o;
	int es, er;

	if (k->broken)
		return;
	opx_init(k, &o, K_SENDRECV, n, rank, dt, R2CCL_SUM, count, false, prev);
	if (count * o.es > sb->cap || count * o.es > rb->cap) {
		rfail(k, "test bug: send/recv of %zu does not fit", count);
		k->broken = true;
		return;
	}
	fill_in(&o, rank, sb->p, count);
	memset(rb->p, SENTINEL, count * o.es);
	guard_set(sb, count * o.es);
	guard_set(rb, count * o.es);
	if (rank % 2 == 0) {
		es = r2ccl_send(comm, sb->p, count, dt, next);
		er = es ? 0 : r2ccl_recv(comm, rb->p, count, dt, prev);
	} else {
		er = r2ccl_recv(comm, rb->p, count, dt, prev);
		es = er ? 0 : r2ccl_send(comm, sb->p, count, dt, next);
	}
	if (!call_ok(k, &o, "r2ccl_send", es) || !call_ok(k, &o, "r2ccl_recv", er))
		return;
	check_elems(k, &o, "recvbuff (from rank-1)", rb->p, count, false);
	check_elems(k, &o, "sendbuff (must stay unchanged)", sb->p, count, true);
	guard_check(k, &o, "sendbuff", sb, count * o.es);
	guard_check(k, &o, "recvbuff", rb, count * o.es);
}

/* ------------------------------------------------------------------------ */
/* Running ranks: processes (and threads), the daemon, the verdict           */
/* ------------------------------------------------------------------------ */

typedef void (*rank_fn)(struct rk *k, const void *arg);

struct job {
	int n;       /* ranks */
	int rpp;     /* ranks per process */
	int ncomms;  /* 1, or 2 (comm2: the same ranks in reverse order) */
	rank_fn fn;
	const void *arg;
};

struct thr {
	const struct job *j;
	int rank;
	int fails;
	pthread_t t;
};

static int rank_main(const struct job *j, int rank)
{
	struct rk k = { .n = j->n, .rank = rank, .rank2 = j->n - 1 - rank };
	int r, v = -1;

	r = r2ccl_connect(NULL, &k.cl);
	if (r) {
		rfail(&k, "r2ccl_connect: %s", r2ccl_strerror(r));
		return k.fails;
	}
	r = r2ccl_comm_init_rank(k.cl, &k.comm, j->n, &sh->id[0], rank);
	if (r) {
		rfail(&k, "r2ccl_comm_init_rank(%d of %d): %s", rank, j->n, r2ccl_strerror(r));
		goto out;
	}
	if (r2ccl_comm_count(k.comm, &v) || v != j->n)
		rfail(&k, "r2ccl_comm_count: %d, expected %d", v, j->n);
	if (r2ccl_comm_user_rank(k.comm, &v) || v != rank)
		rfail(&k, "r2ccl_comm_user_rank: %d, expected %d", v, rank);
	if (j->ncomms > 1) {
		r = r2ccl_comm_init_rank(k.cl, &k.comm2, j->n, &sh->id[1], k.rank2);
		if (r) {
			rfail(&k, "r2ccl_comm_init_rank (second comm, rank %d): %s", k.rank2,
			     r2ccl_strerror(r));
			goto out;
		}
	}
	j->fn(&k, j->arg);
	if (rank == 0) {
		sh->ops = k.seq;
		sh->elems = k.elems;
	}
out:
	if (k.comm2 && (r = r2ccl_comm_destroy(k.comm2)))
		rfail(&k, "r2ccl_comm_destroy (second): %s", r2ccl_strerror(r));
	if (k.comm && (r = r2ccl_comm_destroy(k.comm)))
		rfail(&k, "r2ccl_comm_destroy: %s", r2ccl_strerror(r));
	if ((r = r2ccl_client_check(k.cl)))
		rfail(&k, "r2ccl_client_check at the end: %s", r2ccl_strerror(r));
	r2ccl_disconnect(k.cl);
	return k.fails;
}

static void *thr_main(void *arg)
{
	struct thr *t = arg;

	t->fails = rank_main(t->j, t->rank);
	return NULL;
}

static int proc_main(const struct job *j, int p)
{
	struct thr t[MAX_PROCS];
	int fails = 0;

	alarm(CHILD_ALARM_S);
	if (j->rpp == 1)
		return rank_main(j, p) ? 1 : 0;
	for (int i = 0; i < j->rpp; i++) {
		t[i].j = j;
		t[i].rank = p * j->rpp + i;
		t[i].fails = 0;
		if (pthread_create(&t[i].t, NULL, thr_main, &t[i])) {
			fprintf(stderr, "pthread_create failed\n");
			_exit(3);
		}
	}
	for (int i = 0; i < j->rpp; i++) {
		pthread_join(t[i].t, NULL);
		fails += t[i].fails;
	}
	return fails ? 1 : 0;
}

static double now_s(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

static void dump_log_tail(const struct th_daemon *d)
{
	char cmd[400];

	fprintf(stderr, "--- tail of the daemon's log (%s) ---\n", d->log);
	snprintf(cmd, sizeof(cmd), "tail -n 30 '%s' >&2", d->log);
	if (system(cmd) < 0)
		(void)0;
}

/* Runs fn on n ranks (rpp per process) against a fresh daemon; asserts. */
static void run_ranks(const char *name, int n, int rpp, int ncomms, rank_fn fn, const void *arg)
{
	static const char *const dargs[] = { NULL };
	struct job j = { .n = n, .rpp = rpp, .ncomms = ncomms, .fn = fn, .arg = arg };
	struct th_daemon d;
	r2ccl_client_t *pc = NULL;
	pid_t pids[MAX_PROCS];
	int nprocs = n / rpp, bad_exit = 0, r, dst, sanitizer;
	char why[512] = "";
	double t0 = now_s();

	ck_assert(n % rpp == 0 && nprocs <= MAX_PROCS && ncomms <= 2);
	sh = mmap(NULL, sizeof(*sh), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	ck_assert(sh != MAP_FAILED);
	memset(sh, 0, sizeof(*sh));
	ck_assert_int_eq(th_daemon_start(&d, dargs), 0);

	r = r2ccl_connect(NULL, &pc);
	if (r == 0)
		for (int c = 0; c < ncomms && r == 0; c++)
			r = r2ccl_get_unique_id(pc, &sh->id[c]);
	if (r) {
		th_daemon_stop(&d, SIGKILL, 1000);
		th_daemon_cleanup(&d);
		ck_abort_msg("%s: connect/get_unique_id: %s", name, r2ccl_strerror(r));
	}

	fflush(NULL);
	for (int p = 0; p < nprocs; p++) {
		pids[p] = fork();
		if (pids[p] == 0)
			_exit(proc_main(&j, p));
		if (pids[p] < 0) {
			nprocs = p;
			snprintf(why, sizeof(why), "fork failed");
			bad_exit++;
			break;
		}
	}
	for (int p = 0; p < nprocs; p++) {
		int st = 0;
		while (waitpid(pids[p], &st, 0) < 0 && errno == EINTR)
			;
		if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) {
			bad_exit++;
			if (!why[0]) {
				if (WIFSIGNALED(st))
					snprintf(why, sizeof(why), "process %d (rank %d) killed by signal %d%s",
						 p, p * rpp, WTERMSIG(st),
						 WTERMSIG(st) == SIGALRM ? " (hung: alarm)" : "");
				else
					snprintf(why, sizeof(why), "process %d (rank %d) exited %d", p,
						 p * rpp, WEXITSTATUS(st));
			}
		}
	}
	r = r2ccl_client_check(pc);
	r2ccl_disconnect(pc);
	sanitizer = th_log_count(&d, "runtime error") + th_log_count(&d, "Sanitizer");
	dst = th_daemon_stop(&d, SIGTERM, 20000);
	fprintf(stderr, "[collectives] %-30s nranks=%d: %6.2f s (rank 0: %" PRIu64
		" ops, %" PRIu64 " elements checked)\n",
		name, n, now_s() - t0, sh->ops, sh->elems);
	if (bad_exit || sh->nfail || dst != 0 || sanitizer || r)
		dump_log_tail(&d);
	th_daemon_cleanup(&d);

	ck_assert_msg(sh->nfail == 0, "%s nranks=%d: %d failure(s); first: %s", name, n, sh->nfail,
		      sh->first);
	ck_assert_msg(bad_exit == 0, "%s nranks=%d: %s", name, n, why);
	ck_assert_msg(r == 0, "%s nranks=%d: the parent's session broke: %s", name, n,
		      r2ccl_strerror(r));
	ck_assert_msg(sanitizer == 0, "%s nranks=%d: sanitizer report in the daemon's log", name,
		      n);
	ck_assert_msg(dst == 0, "%s nranks=%d: r2ccld exited %d on SIGTERM (expected 0)", name, n,
		      dst);
	munmap(sh, sizeof(*sh));
	sh = NULL;
}

/* ------------------------------------------------------------------------ */
/* Rank bodies                                                               */
/* ------------------------------------------------------------------------ */

/* every dtype x every redop x small counts, in and out of place */
static void body_red_matrix(struct rk *k, const void *arg)
{
	const enum kind kind = *(const enum kind *)arg;
	const size_t cap = (size_t)MATRIX_MAX_COUNT * 8 * (size_t)k->n;
	struct buf sb, rb;

	if (balloc(k, &sb, cap) || balloc(k, &rb, cap))
		return;
	for (size_t t = 0; t < ARRAY_LEN(all_dtypes); t++)
		for (size_t o = 0; o < ARRAY_LEN(all_redops); o++)
			for (size_t c = 0; c < ARRAY_LEN(matrix_counts); c++)
				for (int ip = 0; ip < 2; ip++) {
					/* reduce: every root for the smaller counts, one otherwise */
					int r0 = 0, r1 = kind == K_REDUCE ? k->n : 1;
					if (kind == K_REDUCE && matrix_counts[c] >= 1000) {
						r0 = (int)((t + o + c + (size_t)ip) % (size_t)k->n);
						r1 = r0 + 1;
					}
					for (int root = r0; root < r1; root++)
						coll(k, k->comm, k->rank, kind, all_dtypes[t],
						     all_redops[o], matrix_counts[c], ip, root, &sb,
						     &rb);
				}
	bfree(k, &sb);
	bfree(k, &rb);
}

/* every dtype with sum, max and avg over several of the daemon's parts
 * (256 KiB) and blocks: 300007 elements (reducescatter: 300007 in all) */
#define LARGE_COUNT 300007
static void body_red_large(struct rk *k, const void *arg)
{
	static const r2ccl_redop_t ops[] = { R2CCL_SUM, R2CCL_MAX, R2CCL_AVG };
	const enum kind kind = *(const enum kind *)arg;
	const size_t count = kind == K_REDUCESCATTER ? LARGE_COUNT / (size_t)k->n : LARGE_COUNT;
	const size_t cap = (size_t)LARGE_COUNT * 8;
	struct buf sb, rb;
	int i = 0;

	if (balloc(k, &sb, cap) || balloc(k, &rb, cap))
		return;
	for (size_t t = 0; t < ARRAY_LEN(all_dtypes); t++)
		for (size_t o = 0; o < ARRAY_LEN(ops); o++, i++)
			coll(k, k->comm, k->rank, kind, all_dtypes[t], ops[o], count, i & 1,
			     k->n - 1, &sb, &rb);
	bfree(k, &sb);
	bfree(k, &rb);
}

/* copies with several types: allgather and broadcast (every root) */
static void body_copy_matrix(struct rk *k, const void *arg)
{
	const enum kind kind = *(const enum kind *)arg;
	const size_t cap = (size_t)MATRIX_MAX_COUNT * 8 * (size_t)k->n;
	struct buf sb, rb;

	if (balloc(k, &sb, cap) || balloc(k, &rb, cap))
		return;
	for (size_t t = 0; t < ARRAY_LEN(copy_dtypes); t++)
		for (size_t c = 0; c < ARRAY_LEN(matrix_counts); c++)
			for (int ip = 0; ip < 2; ip++)
				for (int root = 0; root < (kind == K_BROADCAST ? k->n : 1); root++)
					coll(k, k->comm, k->rank, kind, copy_dtypes[t], R2CCL_SUM,
					     matrix_counts[c], ip, root, &sb, &rb);
	bfree(k, &sb);
	bfree(k, &rb);
}

/* the size sweep of one collective */
struct sizes_arg {
	enum kind kind;
	const r2ccl_dtype_t *dts;
	int ndts;
};

static void size_list(int n, enum kind kind, size_t out[6])
{
	out[0] = 0;
	out[1] = 1;
	out[2] = 3;
	out[3] = 1000 + (size_t)n - 1; /* not divisible by n (n > 1) */
	out[4] = MEG1;
	/* 64 MB: allgather's total receive, reducescatter's total send buffer */
	out[5] = (kind == K_ALLGATHER || kind == K_REDUCESCATTER) ? BIG_F32 / (size_t)n : BIG_F32;
}

static void body_sizes(struct rk *k, const void *arg)
{
	const struct sizes_arg *a = arg;
	const size_t n = (size_t)k->n;
	size_t sizes[6], scap, rcap;
	struct buf sb, rb;

	size_list(k->n, a->kind, sizes);
	switch (a->kind) {
	case K_ALLGATHER:
		scap = (BIG_F32 / n) * 4;
		rcap = n * (BIG_F32 / n) * 4;
		break;
	case K_REDUCESCATTER:
		scap = n * (BIG_F32 / n) * 4;
		rcap = (BIG_F32 / n) * 4;
		break;
	default:
		scap = rcap = BIG_BYTES;
		break;
	}
	/* 1M+1 per rank may exceed 64 MB / n for allgather / reducescatter */
	if (n * MEG1 * 4 > scap && a->kind == K_REDUCESCATTER)
		scap = n * MEG1 * 4;
	if (n * MEG1 * 4 > rcap && a->kind == K_ALLGATHER)
		rcap = n * MEG1 * 4;
	if (MEG1 * 4 > scap)
		scap = MEG1 * 4;
	if (MEG1 * 4 > rcap)
		rcap = MEG1 * 4;
	if (balloc(k, &sb, scap) || balloc(k, &rb, rcap))
		return;
	for (int t = 0; t < a->ndts; t++)
		for (int s = 0; s < 6; s++)
			for (int ip = 0; ip < 2; ip++) {
				int r0 = 0, r1 = 1;
				if (a->kind == K_BROADCAST || a->kind == K_REDUCE) {
					/* every root for small sizes, the last (non-zero) for big */
					if (sizes[s] < MEG1) {
						r1 = k->n;
					} else {
						r0 = k->n - 1;
						r1 = k->n;
					}
				}
				for (int root = r0; root < r1; root++)
					coll(k, k->comm, k->rank, a->kind, a->dts[t], R2CCL_SUM,
					     sizes[s], ip, root, &sb, &rb);
			}
	bfree(k, &sb);
	bfree(k, &rb);
}

static void body_sendrecv(struct rk *k, const void *arg)
{
	static const size_t counts[] = { 0, 1, 7, 1000, 1001, MEG1 };
	struct buf sb, rb;

	if (k->n < 2)
		return; /* a ring needs two ranks */
	if (balloc(k, &sb, MEG1 * 8) || balloc(k, &rb, MEG1 * 8))
		return;
	for (size_t t = 0; t < ARRAY_LEN(copy_dtypes); t++)
		for (size_t c = 0; c < ARRAY_LEN(counts); c++)
			/* twice in a row: the n-th send pairs with the n-th recv */
			for (int rep = 0; rep < 2; rep++)
				sendrecv_ring(k, k->comm, k->rank, copy_dtypes[t], counts[c], &sb,
					      &rb);
	/* 64 MB once, float32 */
	bfree(k, &sb);
	bfree(k, &rb);
	if (balloc(k, &sb, BIG_BYTES) || balloc(k, &rb, BIG_BYTES))
		return;
	sendrecv_ring(k, k->comm, k->rank, R2CCL_FLOAT32, BIG_F32, &sb, &rb);
	bfree(k, &sb);
	bfree(k, &rb);
}

/* A mix of every op on one communicator (comm, rank in it). */
static void mixed_ops(struct rk *k, r2ccl_comm_t *comm, int rank, int round, struct buf *sb,
		      struct buf *rb)
{
	const int n = k->n;

	coll(k, comm, rank, K_ALLREDUCE, R2CCL_INT32, R2CCL_SUM, 1001, round & 1, 0, sb, rb);
	coll(k, comm, rank, K_ALLGATHER, R2CCL_FLOAT16, R2CCL_SUM, 7, false, 0, sb, rb);
	coll(k, comm, rank, K_REDUCESCATTER, R2CCL_BFLOAT16, R2CCL_MAX, 1000, round & 1, 0, sb,
	     rb);
	coll(k, comm, rank, K_BROADCAST, R2CCL_FLOAT64, R2CCL_SUM, 1001, false, (round + 1) % n,
	     sb, rb);
	coll(k, comm, rank, K_REDUCE, R2CCL_UINT8, R2CCL_PROD, 1000, true, (n - 1 + round) % n,
	     sb, rb);
	coll(k, comm, rank, K_ALLREDUCE, R2CCL_FLOAT32, R2CCL_AVG, 1000, true, 0, sb, rb);
	if (n > 1)
		sendrecv_ring(k, comm, rank, R2CCL_INT64, 333, sb, rb);
}

/* two communicators over the same processes (the second in reverse rank
 * order), their operations interleaved */
static void body_two_comms(struct rk *k, const void *arg)
{
	const size_t cap = (size_t)MATRIX_MAX_COUNT * 8 * (size_t)k->n;
	struct buf sb, rb, sb2, rb2;

	if (balloc(k, &sb, cap) || balloc(k, &rb, cap) || balloc(k, &sb2, cap) ||
	    balloc(k, &rb2, cap))
		return;
	for (int round = 0; round < 3; round++) {
		mixed_ops(k, k->comm, k->rank, round, &sb, &rb);
		mixed_ops(k, k->comm2, k->rank2, round, &sb2, &rb2);
		/* and op by op */
		coll(k, k->comm, k->rank, K_ALLREDUCE, R2CCL_INT64, R2CCL_MIN, 1001, false, 0, &sb,
		     &rb);
		coll(k, k->comm2, k->rank2, K_ALLREDUCE, R2CCL_INT64, R2CCL_MAX, 1001, false, 0,
		     &sb2, &rb2);
		coll(k, k->comm2, k->rank2, K_ALLGATHER, R2CCL_INT8, R2CCL_SUM, 1000, true, 0, &sb2,
		     &rb2);
		coll(k, k->comm, k->rank, K_ALLGATHER, R2CCL_INT8, R2CCL_SUM, 1000, true, 0, &sb,
		     &rb);
	}
	bfree(k, &sb);
	bfree(k, &rb);
	bfree(k, &sb2);
	bfree(k, &rb2);
}

/* mixed_ops, then every type x redop; the send and receive buffers are two
 * halves of one allocation (with guards between them) */
static void body_mixed(struct rk *k, const void *arg)
{
	const size_t cap = (size_t)MATRIX_MAX_COUNT * 8 * (size_t)k->n;
	struct buf whole, sb, rb;

	if (balloc(k, &whole, 2 * cap + 2 * GUARD))
		return;
	sb.p = whole.p;
	sb.cap = cap;
	rb.p = whole.p + cap + 2 * GUARD;
	rb.cap = cap;
	for (int round = 0; round < 3; round++)
		mixed_ops(k, k->comm, k->rank, round, &sb, &rb);
	for (size_t t = 0; t < ARRAY_LEN(all_dtypes); t++)
		for (size_t o = 0; o < ARRAY_LEN(all_redops); o++)
			coll(k, k->comm, k->rank, K_ALLREDUCE, all_dtypes[t], all_redops[o], 1001,
			     o & 1, 0, &sb, &rb);
	bfree(k, &whole);
}

/* ------------------------------------------------------------------------ */
/* Test cases: one per (op family, nranks)                                   */
/* ------------------------------------------------------------------------ */

static const enum kind k_allreduce = K_ALLREDUCE, k_reducescatter = K_REDUCESCATTER,
		       k_reduce = K_REDUCE, k_allgather = K_ALLGATHER, k_broadcast = K_BROADCAST;

START_TEST(allreduce_types)
{
	run_ranks("allreduce types x redops", nranks_of[_i], 1, 1, body_red_matrix, &k_allreduce);
}
END_TEST

START_TEST(reducescatter_types)
{
	run_ranks("reducescatter types x redops", nranks_of[_i], 1, 1, body_red_matrix,
		  &k_reducescatter);
}
END_TEST

START_TEST(reduce_types)
{
	run_ranks("reduce types x redops", nranks_of[_i], 1, 1, body_red_matrix, &k_reduce);
}
END_TEST

START_TEST(allreduce_large_types)
{
	run_ranks("allreduce large, every type", nranks_of[_i], 1, 1, body_red_large,
		  &k_allreduce);
}
END_TEST

START_TEST(reducescatter_large_types)
{
	run_ranks("reducescatter large, every type", nranks_of[_i], 1, 1, body_red_large,
		  &k_reducescatter);
}
END_TEST

START_TEST(reduce_large_types)
{
	run_ranks("reduce large, every type", nranks_of[_i], 1, 1, body_red_large, &k_reduce);
}
END_TEST

START_TEST(allgather_types)
{
	run_ranks("allgather types", nranks_of[_i], 1, 1, body_copy_matrix, &k_allgather);
}
END_TEST

START_TEST(broadcast_types)
{
	run_ranks("broadcast types x roots", nranks_of[_i], 1, 1, body_copy_matrix, &k_broadcast);
}
END_TEST

static const r2ccl_dtype_t f32_i32[] = { R2CCL_FLOAT32, R2CCL_INT32 };
static const r2ccl_dtype_t f32_only[] = { R2CCL_FLOAT32 };

START_TEST(allreduce_sizes)
{
	const struct sizes_arg a = { K_ALLREDUCE, f32_i32, 2 };
	run_ranks("allreduce sizes", nranks_of[_i], 1, 1, body_sizes, &a);
}
END_TEST

START_TEST(allgather_sizes)
{
	const struct sizes_arg a = { K_ALLGATHER, f32_only, 1 };
	run_ranks("allgather sizes", nranks_of[_i], 1, 1, body_sizes, &a);
}
END_TEST

START_TEST(reducescatter_sizes)
{
	const struct sizes_arg a = { K_REDUCESCATTER, f32_i32, 2 };
	run_ranks("reducescatter sizes", nranks_of[_i], 1, 1, body_sizes, &a);
}
END_TEST

START_TEST(broadcast_sizes)
{
	const struct sizes_arg a = { K_BROADCAST, f32_only, 1 };
	run_ranks("broadcast sizes", nranks_of[_i], 1, 1, body_sizes, &a);
}
END_TEST

START_TEST(reduce_sizes)
{
	const struct sizes_arg a = { K_REDUCE, f32_only, 1 };
	run_ranks("reduce sizes", nranks_of[_i], 1, 1, body_sizes, &a);
}
END_TEST

START_TEST(sendrecv)
{
	run_ranks("send/recv ring", nranks_of[_i], 1, 1, body_sendrecv, NULL);
}
END_TEST

START_TEST(two_comms)
{
	run_ranks("two communicators", nranks_of[_i], 1, 2, body_two_comms, NULL);
}
END_TEST

/* 2, 4, 8 ranks in 1, 2, 4 processes: two ranks (threads, one session
 * each) per process */
START_TEST(two_ranks_per_process)
{
	static const int n[] = { 2, 4, 8 };
	run_ranks("two ranks per process", n[_i], 2, 1, body_mixed, NULL);
}
END_TEST

static Suite *collectives_suite(void)
{
	Suite *s = suite_create("collectives");
	struct {
		const char *name;
		const TTest *test;
		int n;
	} cases[] = {
		{ "allreduce_types", allreduce_types, N_NRANKS },
		{ "reducescatter_types", reducescatter_types, N_NRANKS },
		{ "reduce_types", reduce_types, N_NRANKS },
		{ "allreduce_large_types", allreduce_large_types, N_NRANKS },
		{ "reducescatter_large_types", reducescatter_large_types, N_NRANKS },
		{ "reduce_large_types", reduce_large_types, N_NRANKS },
		{ "allgather_types", allgather_types, N_NRANKS },
		{ "broadcast_types", broadcast_types, N_NRANKS },
		{ "allreduce_sizes", allreduce_sizes, N_NRANKS },
		{ "allgather_sizes", allgather_sizes, N_NRANKS },
		{ "reducescatter_sizes", reducescatter_sizes, N_NRANKS },
		{ "broadcast_sizes", broadcast_sizes, N_NRANKS },
		{ "reduce_sizes", reduce_sizes, N_NRANKS },
		{ "sendrecv", sendrecv, N_NRANKS },
		{ "two_comms", two_comms, N_NRANKS },
		{ "two_ranks_per_process", two_ranks_per_process, 3 },
	};

	for (size_t i = 0; i < ARRAY_LEN(cases); i++) {
		TCase *tc = tcase_create(cases[i].name);
		tcase_set_timeout(tc, CASE_TIMEOUT_S);
		tcase_add_loop_test(tc, cases[i].test, 0, cases[i].n);
		suite_add_tcase(s, tc);
	}
	return s;
}

int main(void)
{
	SRunner *sr = srunner_create(collectives_suite());
	int failed;

	srunner_set_fork_status(sr, CK_FORK);
	srunner_run_all(sr, CK_NORMAL);
	failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
