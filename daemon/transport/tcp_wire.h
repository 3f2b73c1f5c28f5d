/* SPDX-License-Identifier: MIT */
/*
 * The tcp provider's stream hello (private to tcp*.c and its unit test):
 * four messages of TCP_HELLO_SIZE bytes, little-endian, first thing on every
 * stream: the dialer's DIAL (its challenge), the acceptor's ANSWER (its
 * challenge and its proof of the cluster key), the dialer's PROOF, and the
 * acceptor's OK once the stream joined a connection there (so the dialer
 * reports a connection only when the acceptor took it). Each proof
 * is an HMAC-SHA256 with the cluster key over a label naming who proves, the
 * DIAL and the ANSWER (both challenges, both daemon ids, both rails, the
 * stream, the connection nonce), so a recorded hello replayed on another
 * stream, or an answer reflected back at its sender, does not verify
 * (docs/security.md). tcp_hello.c packs, unpacks and checks them.
 *
 *   0 magic u32 | 4 version u16 | 6 type u8 | 7 flags u8 | 8 stream u16 |
 *  10 nstreams u16 | 12 rail u16 | 14 zero u16 | 16 max_msg u32 | 20 zero u32 |
 *  24 self_id u64 | 32 dst_id u64 | 40 nonce u64 | 48 challenge[16] | 64 mac[32]
 */
#ifndef R2CCL_TCP_WIRE_H
#define R2CCL_TCP_WIRE_H

#include <stddef.h>
#include <stdint.h>

#define TCP_HELLO_MAGIC 0x48435432u /* "2TCH" */
#define TCP_HELLO_VERSION 2
#define TCP_HELLO_SIZE 96
#define TCP_HELLO_CHAL 16
#define TCP_HELLO_MAC 32

enum tcp_hello_type { TCP_HELLO_DIAL = 1, TCP_HELLO_ANSWER = 2, TCP_HELLO_PROOF = 3, TCP_HELLO_OK = 4 };

/* flags: the sender authenticates with a cluster key (its mac is one) */
#define TCP_HELLO_F_AUTH 1u

/* A hello in host order. */
struct tcp_hello {
	uint32_t magic;
	uint16_t version;
	uint8_t type;      /* enum tcp_hello_type */
	uint8_t flags;     /* TCP_HELLO_F_* */
	uint16_t stream;   /* index of this stream in the connection */
	uint16_t nstreams; /* streams of the connection */
	uint16_t rail;     /* sender's rail index */
	uint32_t max_msg;  /* largest payload the sender accepts */
	uint64_t self_id;  /* sender's daemon id */
	uint64_t dst_id;   /* the daemon id it means to talk to */
	uint64_t nonce;    /* the same on every stream of one connection */
	uint8_t chal[TCP_HELLO_CHAL]; /* DIAL, ANSWER: the sender's fresh random challenge */
	uint8_t mac[TCP_HELLO_MAC];   /* ANSWER, PROOF: the proof (zero without a key, and in OK) */
};

/* h to its TCP_HELLO_SIZE wire bytes. */
void tcp_hello_pack(const struct tcp_hello *h, uint8_t *out);
/* Wire bytes to *h: 0, -EMSGSIZE when len is not TCP_HELLO_SIZE (truncated
 * or oversized), -EPROTO for a bad magic, version, type or non-zero
 * reserved bytes. */
int tcp_hello_unpack(const uint8_t *in, size_t len, struct tcp_hello *h);
/* The proof of `prover` (TCP_HELLO_ANSWER: the acceptor's, TCP_HELLO_PROOF:
 * the dialer's) over dial and answer (their macs are not part of it). */
void tcp_hello_mac(const uint8_t *key, size_t keylen, int prover, const struct tcp_hello *dial,
		   const struct tcp_hello *answer, uint8_t mac[TCP_HELLO_MAC]);
/* The dialer checks an ANSWER to its DIAL: it must come from the daemon
 * dialed, to this one, for the same stream and connection, and (key) carry
 * the acceptor's proof. 0, -EPROTO (fields), -EACCES (flags or proof). */
int tcp_hello_check_answer(const uint8_t *key, size_t keylen, const struct tcp_hello *dial,
			   const struct tcp_hello *answer);
/* The acceptor checks a PROOF after its ANSWER to dial: the same ids,
 * stream and connection as the DIAL, and (key) the dialer's proof. 0,
 * -EPROTO, -EACCES. */
int tcp_hello_check_proof(const uint8_t *key, size_t keylen, const struct tcp_hello *dial,
			  const struct tcp_hello *answer, const struct tcp_hello *proof);

/* The dialer checks the acceptor's OK: the acceptor to us, same stream and
 * connection. 0 or -EPROTO. */
int tcp_hello_check_ok(const struct tcp_hello *dial, const struct tcp_hello *ok);

#endif
