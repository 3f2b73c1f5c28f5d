/* SPDX-License-Identifier: MIT */
/* The tcp provider's stream hello (private to tcp*.c and its unit test).
 * Little-endian on the wire, 40 bytes, first thing on every stream in both
 * directions (the dialer's, then the acceptor's answer). */
#ifndef R2CCL_TCP_WIRE_H
#define R2CCL_TCP_WIRE_H

#include <stdint.h>

#define TCP_HELLO_MAGIC 0x48435432u /* "2TCH" */
#define TCP_HELLO_VERSION 1

struct tcp_hello {
	uint32_t magic;
	uint16_t version;
	uint16_t stream;   /* index of this stream in the connection */
	uint16_t nstreams; /* streams of the connection */
	uint16_t rail;     /* sender's rail index (informational) */
	uint32_t max_msg;  /* largest payload the sender accepts */
	uint64_t self_id;  /* sender's daemon id */
	uint64_t dst_id;   /* the daemon id it means to talk to */
	uint64_t nonce;    /* the same on every stream of one connection */
};
_Static_assert(sizeof(struct tcp_hello) == 40, "hello size");

#endif
