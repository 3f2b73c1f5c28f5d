/* SPDX-License-Identifier: MIT */
/*
 * expect: inputs, expected results and checks of the collectives tests (see
 * expect.h for the values and the semantics they check).
 */
#include "expect.h"

#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "reduce.h"

void ex_failf(struct ex_rank *x, const char *fmt, ...)
{
	char msg[1400];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	x->fail(x, msg);
}

void ex_record(struct ex_failures *f, int n, int rank, const char *msg)
{
	__atomic_add_fetch(&f->nfail, 1, __ATOMIC_SEQ_CST);
	if (__atomic_exchange_n(&f->claimed, 1, __ATOMIC_SEQ_CST) == 0)
		snprintf(f->first, sizeof(f->first), "nranks=%d rank=%d: %s", n, rank, msg);
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
static void check_elems(struct ex_rank *x, const struct opx *o, const char *what, const void *p,
			size_t nelem, bool send)
{
	size_t bad = 0, first = 0;
	uint64_t fgot = 0, fexp = 0;

	x->elems += nelem;
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
		ex_failf(x, "%s: %s index %zu: got %s, expected %s (%zu of %zu elements wrong)", d,
			what, first, g, e, bad, nelem);
	}
}

/* ------------------------------------------------------------------------ */
/* Buffers (shared memory from r2ccl_mem_alloc, with guards)                 */
/* ------------------------------------------------------------------------ */

int ex_balloc(struct ex_rank *x, struct buf *b, size_t cap)
{
	void *base = NULL;
	int r = r2ccl_mem_alloc(x->cl, cap + 2 * GUARD, &base);

	b->p = NULL;
	b->cap = 0;
	if (r)
		return r;
	b->p = (unsigned char *)base + GUARD;
	b->cap = cap;
	return 0;
}

void ex_bfree(struct ex_rank *x, struct buf *b)
{
	int r;

	if (!b->p)
		return;
	r = r2ccl_mem_free(x->cl, b->p - GUARD);
	if (r)
		ex_failf(x, "r2ccl_mem_free: %s", r2ccl_strerror(r));
	b->p = NULL;
}

static void guard_set(struct buf *b, size_t len)
{
	memset(b->p - GUARD, GUARD_BYTE, GUARD);
	memset(b->p + len, GUARD_BYTE, GUARD);
}

static void guard_check(struct ex_rank *x, const struct opx *o, const char *what, struct buf *b,
			size_t len)
{
	for (int side = 0; side < 2; side++) {
		const unsigned char *g = side ? b->p + len : b->p - GUARD;
		for (int i = 0; i < GUARD; i++) {
			if (g[i] != GUARD_BYTE) {
				char d[200];
				opx_str(d, sizeof(d), o);
				ex_failf(x, "%s: wrote %s %s (byte %d there is 0x%02x)", d,
					side ? "past the end of" : "before", what, i, g[i]);
				return;
			}
		}
	}
}

/* ------------------------------------------------------------------------ */
/* Running one operation on one rank                                         */
/* ------------------------------------------------------------------------ */

static void opx_init(struct ex_rank *x, struct opx *o, enum kind kind, int n, int rank,
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
	o->salt = mix64(++x->seq * 0x100000001B3ull);
	o->salt32 = (uint32_t)(o->salt >> 7) & 0xFFFFFF;
	o->fk = FK_NONE;
	if (count >= EX_FAST_MIN) {
		if (is_red(kind) && op == R2CCL_SUM && dt == R2CCL_INT32)
			o->fk = FK_I32SUM;
		else if (is_red(kind) && op == R2CCL_SUM && dt == R2CCL_FLOAT32)
			o->fk = FK_F32SUM;
		else if (!is_red(kind) && o->es == 4)
			o->fk = FK_COPY32;
	}
}

static bool call_ok(struct ex_rank *x, const struct opx *o, const char *fn, int r)
{
	char d[200];

	if (r == 0)
		return true;
	if (x->err)
		x->err(x, r);
	opx_str(d, sizeof(d), o);
	ex_failf(x, "%s: %s returned %d (%s)", d, fn, r, r2ccl_strerror(r));
	x->broken = true;
	return false;
}

/* A collective (not send/recv) on comm, where this process is rank `rank` of x->n.
 * sb/rb: buffers large enough for the op (in place uses the larger one only). */
void ex_coll(struct ex_rank *x, r2ccl_comm_t *comm, int rank, enum kind kind,
	     r2ccl_dtype_t dt, r2ccl_redop_t op, size_t count, bool inplace, int root,
	     struct buf *sb, struct buf *rb)
{
	const int n = x->n;
	struct opx o;
	size_t slen, rlen; /* elements */
	unsigned char *s, *r;
	struct buf *region = NULL; /* in place: the one buffer */
	size_t region_len = 0;
	int e = 0;
	char d[200];

	if (x->broken)
		return;
	opx_init(x, &o, kind, n, rank, dt, op, count, inplace, root);
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
	if (!call_ok(x, &o, kind_name[kind], e))
		return;

	/* results */
	if (kind != K_REDUCE || rank == root)
		check_elems(x, &o, "recvbuff", r, rlen, false);
	if (!inplace) {
		check_elems(x, &o, "sendbuff (must stay unchanged)", s, slen, true);
		guard_check(x, &o, "sendbuff", sb, slen * o.es);
		guard_check(x, &o, "recvbuff", rb, rlen * o.es);
	} else {
		guard_check(x, &o, "the in-place buffer", region, region_len);
	}
	return;
toobig:
	opx_str(d, sizeof(d), &o);
	ex_failf(x, "test bug: %s does not fit the test's buffers", d);
	x->broken = true;
}

/* Ring send/recv: rank sends to rank+1 and receives from rank-1; even ranks
 * send first, odd ranks receive first. */
void ex_sendrecv_ring(struct ex_rank *x, r2ccl_comm_t *comm, int rank, r2ccl_dtype_t dt,
		      size_t count, struct buf *sb, struct buf *rb)
{
	const int n = x->n;
	const int next = (rank + 1) % n, prev = (rank + n - 1) % n;
	struct opx o;
	int es, er;

	if (x->broken)
		return;
	opx_init(x, &o, K_SENDRECV, n, rank, dt, R2CCL_SUM, count, false, prev);
	if (count * o.es > sb->cap || count * o.es > rb->cap) {
		ex_failf(x, "test bug: send/recv of %zu does not fit", count);
		x->broken = true;
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
	if (!call_ok(x, &o, "r2ccl_send", es) || !call_ok(x, &o, "r2ccl_recv", er))
		return;
	check_elems(x, &o, "recvbuff (from rank-1)", rb->p, count, false);
	check_elems(x, &o, "sendbuff (must stay unchanged)", sb->p, count, true);
	guard_check(x, &o, "sendbuff", sb, count * o.es);
	guard_check(x, &o, "recvbuff", rb, count * o.es);
}

