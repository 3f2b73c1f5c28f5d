/* SPDX-License-Identifier: MIT */
/*
 * The seed corpus of the harnesses (tests/fuzz/corpus/<harness>/): real
 * frames and messages, packed by the same protobuf-c code and with the same
 * headers the daemon and libr2ccl use, written one file per seed. A harness
 * writes its own when R2CCL_FUZZ_SEEDS=DIR is set (tests/fuzz/README.md).
 */
#ifndef R2CCL_FUZZ_SEEDS_H
#define R2CCL_FUZZ_SEEDS_H

#include <stddef.h>
#include <stdint.h>

#include "base/daemon.h"
#include "base/comm_record.h"

/* A growing byte buffer. */
struct fz_buf {
	uint8_t *p;
	size_t len, cap;
};
void fz_buf_put(struct fz_buf *b, const void *p, size_t len);
void fz_buf_free(struct fz_buf *b);
/* Writes b to dir/name; 0 or a negative errno. */
int fz_buf_save(const struct fz_buf *b, const char *dir, const char *name);

/* fuzz_frame's seeds for the daemon d (its unique ids name d). */
int fz_seeds_frame(struct r2d *d, const char *dir);
/* fuzz_peer's seeds: root is the daemon that receives (host 0), peer the
 * one that sends (host 1), uid and key the communicator they share; other
 * (host 2) the root of juid, which root joins alone; tcp_id the daemon id of
 * the harness's tcp provider instance. */
int fz_seeds_peer(struct r2d *root, struct r2d *peer, struct r2d *other, const struct r2_uid *uid,
		  uint64_t key, const struct r2_uid *juid, uint64_t tcp_id, const char *dir);

#endif
