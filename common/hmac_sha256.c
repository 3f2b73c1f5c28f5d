// SPDX-License-Identifier: MIT
/*
 * SHA-256 (FIPS 180-4, section 6.2) and HMAC-SHA256 (RFC 2104): the peer
 * port's cluster key authentication (hmac_sha256.h).
 */
#include <errno.h>
#include <string.h>

#include "hmac_sha256.h"

static const uint32_t K[64] = {
	0x428a2f98, 0x71374491, 0xb5c0fbcf, 0xe9b5dba5, 0x3956c25b, 0x59f111f1, 0x923f82a4,
	0xab1c5ed5, 0xd807aa98, 0x12835b01, 0x243185be, 0x550c7dc3, 0x72be5d74, 0x80deb1fe,
	0x9bdc06a7, 0xc19bf174, 0xe49b69c1, 0xefbe4786, 0x0fc19dc6, 0x240ca1cc, 0x2de92c6f,
	0x4a7484aa, 0x5cb0a9dc, 0x76f988da, 0x983e5152, 0xa831c66d, 0xb00327c8, 0xbf597fc7,
	0xc6e00bf3, 0xd5a79147, 0x06ca6351, 0x14292967, 0x27b70a85, 0x2e1b2138, 0x4d2c6dfc,
	0x53380d13, 0x650a7354, 0x766a0abb, 0x81c2c92e, 0x92722c85, 0xa2bfe8a1, 0xa81a664b,
	0xc24b8b70, 0xc76c51a3, 0xd192e819, 0xd6990624, 0xf40e3585, 0x106aa070, 0x19a4c116,
	0x1e376c08, 0x2748774c, 0x34b0bcb5, 0x391c0cb3, 0x4ed8aa4a, 0x5b9cca4f, 0x682e6ff3,
	0x748f82ee, 0x78a5636f, 0x84c87814, 0x8cc70208, 0x90befffa, 0xa4506ceb, 0xbef9a3f7,
	0xc67178f2,
};

static inline uint32_t ror(uint32_t x, unsigned n)
{
	return (x >> n) | (x << (32 - n));
}

static void block(struct r2_sha256 *s, const uint8_t *p)
{
	uint32_t w[64], a, b, c, d, e, f, g, h;

	for (int i = 0; i < 16; i++)
		w[i] = (uint32_t)p[4 * i] << 24 | (uint32_t)p[4 * i + 1] << 16 |
		       (uint32_t)p[4 * i + 2] << 8 | p[4 * i + 3];
	for (int i = 16; i < 64; i++) {
		uint32_t s0 = ror(w[i - 15], 7) ^ ror(w[i - 15], 18) ^ (w[i - 15] >> 3);
		uint32_t s1 = ror(w[i - 2], 17) ^ ror(w[i - 2], 19) ^ (w[i - 2] >> 10);
		w[i] = w[i - 16] + s0 + w[i - 7] + s1;
	}
	a = s->h[0], b = s->h[1], c = s->h[2], d = s->h[3];
	e = s->h[4], f = s->h[5], g = s->h[6], h = s->h[7];
	for (int i = 0; i < 64; i++) {
		uint32_t t1 = h + (ror(e, 6) ^ ror(e, 11) ^ ror(e, 25)) + ((e & f) ^ (~e & g)) +
			      K[i] + w[i];
		uint32_t t2 = (ror(a, 2) ^ ror(a, 13) ^ ror(a, 22)) + ((a & b) ^ (a & c) ^ (b & c));
		h = g, g = f, f = e, e = d + t1;
		d = c, c = b, b = a, a = t1 + t2;
	}
	s->h[0] += a, s->h[1] += b, s->h[2] += c, s->h[3] += d;
	s->h[4] += e, s->h[5] += f, s->h[6] += g, s->h[7] += h;
}

void r2_sha256_init(struct r2_sha256 *s)
{
	static const uint32_t iv[8] = { 0x6a09e667, 0xbb67ae85, 0x3c6ef372, 0xa54ff53a,
					0x510e527f, 0x9b05688c, 0x1f83d9ab, 0x5be0cd19 };
	memcpy(s->h, iv, sizeof(iv));
	s->bytes = 0;
	s->nbuf = 0;
}

void r2_sha256_update(struct r2_sha256 *s, const void *data, size_t len)
{
	const uint8_t *p = data;

	s->bytes += len;
	if (s->nbuf) {
		size_t c = R2_SHA256_BLOCK - s->nbuf;
		if (c > len)
			c = len;
		memcpy(s->buf + s->nbuf, p, c);
		s->nbuf += c;
		p += c;
		len -= c;
		if (s->nbuf < R2_SHA256_BLOCK)
			return;
		block(s, s->buf);
		s->nbuf = 0;
	}
	for (; len >= R2_SHA256_BLOCK; p += R2_SHA256_BLOCK, len -= R2_SHA256_BLOCK)
		block(s, p);
	memcpy(s->buf, p, len);
	s->nbuf = len;
}

void r2_sha256_final(struct r2_sha256 *s, uint8_t out[R2_SHA256_LEN])
{
	uint64_t bits = s->bytes * 8;

	s->buf[s->nbuf++] = 0x80;
	if (s->nbuf > R2_SHA256_BLOCK - 8) {
		memset(s->buf + s->nbuf, 0, R2_SHA256_BLOCK - s->nbuf);
		block(s, s->buf);
		s->nbuf = 0;
	}
	memset(s->buf + s->nbuf, 0, R2_SHA256_BLOCK - 8 - s->nbuf);
	for (int i = 0; i < 8; i++)
		s->buf[R2_SHA256_BLOCK - 1 - i] = (uint8_t)(bits >> (8 * i));
	block(s, s->buf);
	for (int i = 0; i < 8; i++) {
		out[4 * i] = (uint8_t)(s->h[i] >> 24);
		out[4 * i + 1] = (uint8_t)(s->h[i] >> 16);
		out[4 * i + 2] = (uint8_t)(s->h[i] >> 8);
		out[4 * i + 3] = (uint8_t)s->h[i];
	}
	r2_wipe(s, sizeof(*s));
}

void r2_sha256(const void *data, size_t len, uint8_t out[R2_SHA256_LEN])
{
	struct r2_sha256 s;

	r2_sha256_init(&s);
	r2_sha256_update(&s, data, len);
	r2_sha256_final(&s, out);
}

void r2_hmac_sha256_init(struct r2_hmac_sha256 *m, const void *key, size_t keylen)
{
	uint8_t k[R2_SHA256_BLOCK] = { 0 }, ipad[R2_SHA256_BLOCK];

	/* a key longer than a block is hashed first (RFC 2104, section 2) */
	if (keylen > R2_SHA256_BLOCK)
		r2_sha256(key, keylen, k);
	else if (keylen)
		memcpy(k, key, keylen);
	for (int i = 0; i < R2_SHA256_BLOCK; i++) {
		ipad[i] = k[i] ^ 0x36;
		m->okey[i] = k[i] ^ 0x5c;
	}
	r2_sha256_init(&m->inner);
	r2_sha256_update(&m->inner, ipad, sizeof(ipad));
	r2_wipe(k, sizeof(k));
	r2_wipe(ipad, sizeof(ipad));
}

void r2_hmac_sha256_update(struct r2_hmac_sha256 *m, const void *data, size_t len)
{
	r2_sha256_update(&m->inner, data, len);
}

void r2_hmac_sha256_final(struct r2_hmac_sha256 *m, uint8_t out[R2_SHA256_LEN])
{
	struct r2_sha256 outer;
	uint8_t ih[R2_SHA256_LEN];

	r2_sha256_final(&m->inner, ih);
	r2_sha256_init(&outer);
	r2_sha256_update(&outer, m->okey, sizeof(m->okey));
	r2_sha256_update(&outer, ih, sizeof(ih));
	r2_sha256_final(&outer, out);
	r2_wipe(ih, sizeof(ih));
	r2_wipe(m, sizeof(*m));
}

void r2_hmac_sha256(const void *key, size_t keylen, const void *data, size_t len,
		    uint8_t out[R2_SHA256_LEN])
{
	struct r2_hmac_sha256 m;

	r2_hmac_sha256_init(&m, key, keylen);
	r2_hmac_sha256_update(&m, data, len);
	r2_hmac_sha256_final(&m, out);
}

void r2_hmac_proof(const void *key, size_t keylen, const char *label, uint8_t prover,
		   const void *first, size_t flen, const void *second, size_t slen,
		   uint8_t mac[R2_SHA256_LEN])
{
	struct r2_hmac_sha256 m;

	r2_hmac_sha256_init(&m, key, keylen);
	r2_hmac_sha256_update(&m, label, strlen(label) + 1);
	r2_hmac_sha256_update(&m, &prover, 1);
	r2_hmac_sha256_update(&m, first, flen);
	r2_hmac_sha256_update(&m, second, slen);
	r2_hmac_sha256_final(&m, mac);
}

int r2_proof_check(size_t keylen, bool flagged, uint8_t want[R2_SHA256_LEN],
		   const uint8_t got[R2_SHA256_LEN])
{
	bool ok;

	if (!keylen)
		return flagged ? -EACCES : 0;
	ok = flagged && r2_mac_equal(want, got, R2_SHA256_LEN);
	r2_wipe(want, R2_SHA256_LEN);
	return ok ? 0 : -EACCES;
}

bool r2_mac_equal(const void *a, const void *b, size_t n)
{
	const volatile uint8_t *x = a, *y = b;
	uint8_t d = 0;

	for (size_t i = 0; i < n; i++)
		d |= x[i] ^ y[i];
	return d == 0;
}

void r2_wipe(void *p, size_t n)
{
	volatile uint8_t *v = p;

	while (n--)
		*v++ = 0;
}
