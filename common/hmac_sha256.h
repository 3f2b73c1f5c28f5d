/* SPDX-License-Identifier: MIT */
/*
 * SHA-256 (FIPS 180-4) and HMAC-SHA256 (RFC 2104), for the cluster key
 * authentication of the daemons' peer port (docs/security.md). Small and
 * dependency-free: no TLS library is in the project's dependencies.
 * Checked against the FIPS 180-2 and RFC 4231 vectors (tests/unit/test_hmac.c).
 */
#ifndef R2CCL_HMAC_SHA256_H
#define R2CCL_HMAC_SHA256_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define R2_SHA256_LEN 32
#define R2_SHA256_BLOCK 64

struct r2_sha256 {
	uint32_t h[8];
	uint64_t bytes;            /* message bytes so far */
	uint8_t buf[R2_SHA256_BLOCK];
	size_t nbuf;
};

void r2_sha256_init(struct r2_sha256 *s);
void r2_sha256_update(struct r2_sha256 *s, const void *data, size_t len);
void r2_sha256_final(struct r2_sha256 *s, uint8_t out[R2_SHA256_LEN]);
void r2_sha256(const void *data, size_t len, uint8_t out[R2_SHA256_LEN]);

/* HMAC-SHA256 in steps: init with the key, update with the message, final. */
struct r2_hmac_sha256 {
	struct r2_sha256 inner;
	uint8_t okey[R2_SHA256_BLOCK]; /* key ^ opad */
};

void r2_hmac_sha256_init(struct r2_hmac_sha256 *m, const void *key, size_t keylen);
void r2_hmac_sha256_update(struct r2_hmac_sha256 *m, const void *data, size_t len);
/* Writes the MAC and wipes the state (it held the key). */
void r2_hmac_sha256_final(struct r2_hmac_sha256 *m, uint8_t out[R2_SHA256_LEN]);
void r2_hmac_sha256(const void *key, size_t keylen, const void *data, size_t len,
		    uint8_t out[R2_SHA256_LEN]);

/* The handshake proofs of the peer port (tcp's stream hello, verbs' side
 * channel): HMAC(key, label with its NUL, the prover's message type as one
 * byte, the first message, the second message), each message packed with
 * its MAC field zeroed by the caller. */
void r2_hmac_proof(const void *key, size_t keylen, const char *label, uint8_t prover,
		   const void *first, size_t flen, const void *second, size_t slen,
		   uint8_t mac[R2_SHA256_LEN]);

/* Whether a received message carries the proof it should: with a key
 * (keylen > 0) it must be flagged authenticated and got must equal want;
 * with none, it must not be flagged. 0 or -EACCES; want is wiped. */
int r2_proof_check(size_t keylen, bool flagged, uint8_t want[R2_SHA256_LEN],
		   const uint8_t got[R2_SHA256_LEN]);

/* Compares n bytes in time that does not depend on where they differ:
 * true when equal. For MACs (a byte-wise memcmp tells an attacker how many
 * leading bytes of a forged MAC were right). */
bool r2_mac_equal(const void *a, const void *b, size_t n);

/* Clears memory the compiler may not elide (keys, MAC states). */
void r2_wipe(void *p, size_t n);

#endif
