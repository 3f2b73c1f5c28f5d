// SPDX-License-Identifier: MIT
/*
 * tcp provider: the stream hello's wire format and its cluster key proofs
 * (tcp_wire.h): pure code, no I/O, unit-tested in tests/unit/test_tcp.c.
 */
#include <errno.h>
#include <string.h>

#include "hmac_sha256.h"
#include "tcp_wire.h"

static void put16(uint8_t *p, uint16_t v)
{
	p[0] = (uint8_t)v;
	p[1] = (uint8_t)(v >> 8);
}

static void put32(uint8_t *p, uint32_t v)
{
	for (int i = 0; i < 4; i++)
		p[i] = (uint8_t)(v >> (8 * i));
}

static void put64(uint8_t *p, uint64_t v)
{
	for (int i = 0; i < 8; i++)
		p[i] = (uint8_t)(v >> (8 * i));
}

static uint16_t get16(const uint8_t *p)
{
	return (uint16_t)(p[0] | p[1] << 8);
}

static uint32_t get32(const uint8_t *p)
{
	uint32_t v = 0;
	for (int i = 3; i >= 0; i--)
		v = v << 8 | p[i];
	return v;
}

static uint64_t get64(const uint8_t *p)
{
	uint64_t v = 0;
	for (int i = 7; i >= 0; i--)
		v = v << 8 | p[i];
	return v;
}

void tcp_hello_pack(const struct tcp_hello *h, uint8_t *out)
{
	memset(out, 0, TCP_HELLO_SIZE);
	put32(out, h->magic);
	put16(out + 4, h->version);
	out[6] = h->type;
	out[7] = h->flags;
	put16(out + 8, h->stream);
	put16(out + 10, h->nstreams);
	put16(out + 12, h->rail);
	put32(out + 16, h->max_msg);
	put64(out + 24, h->self_id);
	put64(out + 32, h->dst_id);
	put64(out + 40, h->nonce);
	memcpy(out + 48, h->chal, TCP_HELLO_CHAL);
	memcpy(out + 64, h->mac, TCP_HELLO_MAC);
}

int tcp_hello_unpack(const uint8_t *in, size_t len, struct tcp_hello *h)
{
	if (len != TCP_HELLO_SIZE)
		return -EMSGSIZE;
	memset(h, 0, sizeof(*h));
	h->magic = get32(in);
	h->version = get16(in + 4);
	h->type = in[6];
	h->flags = in[7];
	h->stream = get16(in + 8);
	h->nstreams = get16(in + 10);
	h->rail = get16(in + 12);
	h->max_msg = get32(in + 16);
	h->self_id = get64(in + 24);
	h->dst_id = get64(in + 32);
	h->nonce = get64(in + 40);
	memcpy(h->chal, in + 48, TCP_HELLO_CHAL);
	memcpy(h->mac, in + 64, TCP_HELLO_MAC);
	if (h->magic != TCP_HELLO_MAGIC || h->version != TCP_HELLO_VERSION)
		return -EPROTO;
	if (h->type < TCP_HELLO_DIAL || h->type > TCP_HELLO_OK || (h->flags & ~TCP_HELLO_F_AUTH))
		return -EPROTO;
	if (get16(in + 14) || get32(in + 20))
		return -EPROTO;
	return 0;
}

void tcp_hello_mac(const uint8_t *key, size_t keylen, int prover, const struct tcp_hello *dial,
		   const struct tcp_hello *answer, uint8_t mac[TCP_HELLO_MAC])
{
	struct tcp_hello a = *dial, b = *answer;
	uint8_t pa[TCP_HELLO_SIZE], pb[TCP_HELLO_SIZE];

	memset(a.mac, 0, sizeof(a.mac));
	memset(b.mac, 0, sizeof(b.mac));
	tcp_hello_pack(&a, pa);
	tcp_hello_pack(&b, pb);
	r2_hmac_proof(key, keylen, "r2ccl tcp hello v2", (uint8_t)prover, pa, sizeof(pa), pb,
		      sizeof(pb), mac);
}

/* Whether h carries the right flags and proof for a key (keylen > 0) or
 * none (keylen 0: unauthenticated on both sides, peer_auth = off). */
static int check_mac(const uint8_t *key, size_t keylen, int prover, const struct tcp_hello *dial,
		     const struct tcp_hello *answer, const struct tcp_hello *h)
{
	uint8_t want[TCP_HELLO_MAC];

	if (keylen)
		tcp_hello_mac(key, keylen, prover, dial, answer, want);
	return r2_proof_check(keylen, h->flags & TCP_HELLO_F_AUTH, want, h->mac);
}

int tcp_hello_check_answer(const uint8_t *key, size_t keylen, const struct tcp_hello *dial,
			   const struct tcp_hello *answer)
{
	if (answer->type != TCP_HELLO_ANSWER || answer->self_id != dial->dst_id ||
	    answer->dst_id != dial->self_id || answer->stream != dial->stream ||
	    answer->nstreams != dial->nstreams || answer->nonce != dial->nonce)
		return -EPROTO;
	return check_mac(key, keylen, TCP_HELLO_ANSWER, dial, answer, answer);
}

int tcp_hello_check_proof(const uint8_t *key, size_t keylen, const struct tcp_hello *dial,
			  const struct tcp_hello *answer, const struct tcp_hello *proof)
{
	if (proof->type != TCP_HELLO_PROOF || proof->self_id != dial->self_id ||
	    proof->dst_id != dial->dst_id || proof->stream != dial->stream ||
	    proof->nstreams != dial->nstreams || proof->nonce != dial->nonce)
		return -EPROTO;
	return check_mac(key, keylen, TCP_HELLO_PROOF, dial, answer, proof);
}

int tcp_hello_check_ok(const struct tcp_hello *dial, const struct tcp_hello *ok)
{
	if (ok->type != TCP_HELLO_OK || ok->self_id != dial->dst_id || ok->dst_id != dial->self_id ||
	    ok->stream != dial->stream || ok->nstreams != dial->nstreams || ok->nonce != dial->nonce)
		return -EPROTO;
	return 0;
}
