/* SPDX-License-Identifier: MIT */
/*
 * Detours: a chunk for a peer to which its sender has no connection left on
 * any rail (two NICs on different rails of two hosts failed) goes through a
 * third host of the communicator, the bridge, which forwards it at once,
 * whatever its own executor is doing (docs/resilience.md, "Failover paths").
 * The bridge's side lives in the rails thread (detour.c); the sender's in
 * exec_rail.c.
 *
 * Header flags (r2_chunk_hdr.flags of DATA and ACK messages):
 *   R2_CHUNK_DETOUR  DATA sent to a bridge for hdr.dst; the ACKs it causes
 *                    carry it too (the destination's ACK goes back to the
 *                    bridge, the bridge's ACK to the source)
 *   R2_CHUNK_NACK    (ACK) the bridge has no connection to hdr.dst either:
 *                    the source tries another bridge or gives up
 *   R2_CHUNK_DELIVERED (ACK) the destination's ACK, passed on by the bridge
 *                    to the source
 */
#ifndef R2CCL_DETOUR_H
#define R2CCL_DETOUR_H

#include <stdbool.h>
#include <stdint.h>

#include "transport/transport.h"

#define R2_CHUNK_DETOUR 0x1
#define R2_CHUNK_NACK 0x2
/* (ACK) the bridge passes the destination's ACK on to the source: the
 * destination is alive (its peer timeout does not run out), though no rail
 * connects the two */
#define R2_CHUNK_DELIVERED 0x4
/* (ACK, with NACK) the bridge's queues to hdr.dst are full: again later */
#define R2_CHUNK_BUSY 0x8

/* send completions of forwarded chunks carry this in the low bits of ctx */
#define R2_DETOUR_TAG 2u

struct r2d;

/* Rails thread, every message: true when it was a detour's (forwarded,
 * refused, or the acknowledgement of one this host forwarded): consumed. */
bool r2d_detour_in(struct r2d *d, int rail, const struct r2_tp_cqe *cqe);
/* A connection to peer failed on rail: forwarded chunks on it go again. */
void r2d_detour_failed(struct r2d *d, int rail, uint64_t peer);
/* At the stop, the rails thread gone (rails.c, detours_settle). A
 * forwarded chunk is sent from its receive buffer, which release() hands
 * to the next receive: it goes back only after its send completion.
 * r2d_detours_unsent: how many of d's forwarded chunks wait for theirs;
 * cut: their connections are dropped too (the transport then completes
 * them, failed). r2d_detour_sendc_at_stop: true when cqe was such a
 * completion (taken). r2d_detours_free: frees them all, before the
 * transports close; a buffer whose send never completed is left to the
 * transport's close, not given back. */
int r2d_detours_unsent(struct r2d *d, bool cut);
bool r2d_detour_sendc_at_stop(struct r2d *d, const struct r2_tp_cqe *cqe);
void r2d_detours_free(struct r2d *d);

#endif
