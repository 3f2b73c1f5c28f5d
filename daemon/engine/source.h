/* SPDX-License-Identifier: MIT */
/*
 * A submission source: what the engine needs from whoever submits
 * operations and owns the memory they name. The engine never calls the
 * control layer: control's sessions carry this table (s->src, set when
 * session.c accepts a client), and the engine completes, replies, takes and
 * drops references, and resolves memory through it.
 */
#ifndef R2CCL_SOURCE_H
#define R2CCL_SOURCE_H

#include <stdint.h>

struct r2_session;
struct r2_memreg;

struct r2_source_ops {
	/* Posts a completion to the source's CQ and signals it (any thread). */
	void (*complete)(struct r2_session *s, uint64_t tag, int status);
	/* Packs a protobuf-c message and sends it (loop thread). */
	int (*reply)(struct r2_session *s, uint16_t type, const void *protobuf_msg);
	/* References on the source (an operation in flight holds one). */
	void (*get)(struct r2_session *s);
	void (*put)(struct r2_session *s);
	/* Memory handles: (id, off, len) to an address, with a reference on
	 * the region (under d->lock; R2CCL_E_BAD_BUFFER if unknown or out of
	 * range); mem_put drops it (accepts NULL; any thread). */
	int (*mem_resolve)(struct r2_session *s, uint32_t id, uint64_t off, uint64_t len,
			   void **addr, struct r2_memreg **ref);
	void (*mem_put)(struct r2_memreg *m);
};

#endif
