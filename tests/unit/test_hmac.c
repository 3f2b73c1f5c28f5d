// SPDX-License-Identifier: MIT
/* Unit tests of SHA-256 and HMAC-SHA256 (common/hmac_sha256.c): the FIPS
 * 180-2 (appendix B) and RFC 4231 (section 4) test vectors, incremental
 * updates split at every offset, and the constant-time comparison. */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "hmac_sha256.h"

#define R2_MIN3(a, b, c) ((a) < (b) ? ((a) < (c) ? (a) : (c)) : ((b) < (c) ? (b) : (c)))

static void hex(const uint8_t *d, size_t n, char *out)
{
	for (size_t i = 0; i < n; i++)
		sprintf(out + 2 * i, "%02x", d[i]);
}

static void check_sha(const void *data, size_t len, const char *want)
{
	uint8_t md[R2_SHA256_LEN];
	char got[2 * R2_SHA256_LEN + 1];

	r2_sha256(data, len, md);
	hex(md, sizeof(md), got);
	ck_assert_str_eq(got, want);
}

START_TEST(test_fips180_2)
{
	check_sha("abc", 3, "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
	const char *two = "abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq";
	check_sha(two, strlen(two),
		  "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
	check_sha("", 0, "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");

	/* one million 'a', fed in uneven pieces */
	static uint8_t a[1000];
	struct r2_sha256 s;
	uint8_t md[R2_SHA256_LEN];
	char got[2 * R2_SHA256_LEN + 1];
	size_t left = 1000000, step = 1;
	memset(a, 'a', sizeof(a));
	r2_sha256_init(&s);
	while (left) {
		size_t c = R2_MIN3(step, left, sizeof(a));
		r2_sha256_update(&s, a, c);
		left -= c;
		step = step % 997 + 13;
	}
	r2_sha256_final(&s, md);
	hex(md, sizeof(md), got);
	ck_assert_str_eq(got, "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0");
}
END_TEST

/* Split at every offset: the block buffering must not change the digest. */
START_TEST(test_sha_split)
{
	uint8_t msg[200], whole[R2_SHA256_LEN], part[R2_SHA256_LEN];

	for (size_t i = 0; i < sizeof(msg); i++)
		msg[i] = (uint8_t)(i * 7 + 3);
	for (size_t len = 0; len <= sizeof(msg); len += 11) {
		r2_sha256(msg, len, whole);
		for (size_t cut = 0; cut <= len; cut++) {
			struct r2_sha256 s;
			r2_sha256_init(&s);
			r2_sha256_update(&s, msg, cut);
			r2_sha256_update(&s, msg + cut, len - cut);
			r2_sha256_final(&s, part);
			ck_assert_msg(!memcmp(whole, part, sizeof(whole)), "len %zu cut %zu", len, cut);
		}
	}
}
END_TEST

struct rfc4231 {
	uint8_t key[131];
	size_t keylen;
	const char *data;
	size_t datalen;
	const char *mac; /* hex; case 5 is truncated to 128 bits */
};

START_TEST(test_rfc4231)
{
	static struct rfc4231 v[7];
	static uint8_t dd[50], cd[50];

	memset(dd, 0xdd, sizeof(dd));
	memset(cd, 0xcd, sizeof(cd));
	memset(v[0].key, 0x0b, 20), v[0].keylen = 20;
	v[0].data = "Hi There";
	v[0].mac = "b0344c61d8db38535ca8afceaf0bf12b881dc200c9833da726e9376c2e32cff7";
	memcpy(v[1].key, "Jefe", 4), v[1].keylen = 4;
	v[1].data = "what do ya want for nothing?";
	v[1].mac = "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843";
	memset(v[2].key, 0xaa, 20), v[2].keylen = 20;
	v[2].data = (const char *)dd, v[2].datalen = 50;
	v[2].mac = "773ea91e36800e46854db8ebd09181a72959098b3ef8c122d9635514ced565fe";
	for (int i = 0; i < 25; i++)
		v[3].key[i] = (uint8_t)(i + 1);
	v[3].keylen = 25;
	v[3].data = (const char *)cd, v[3].datalen = 50;
	v[3].mac = "82558a389a443c0ea4cc819899f2083a85f0faa3e578f8077a2e3ff46729665b";
	memset(v[4].key, 0x0c, 20), v[4].keylen = 20;
	v[4].data = "Test With Truncation";
	v[4].mac = "a3b6167473100ee06e0c796c2955552b";
	memset(v[5].key, 0xaa, 131), v[5].keylen = 131;
	v[5].data = "Test Using Larger Than Block-Size Key - Hash Key First";
	v[5].mac = "60e431591ee0b67f0d8a26aacbf5b77f8e0bc6213728c5140546040f0ee37f54";
	memset(v[6].key, 0xaa, 131), v[6].keylen = 131;
	v[6].data = "This is a test using a larger than block-size key and a larger than "
		    "block-size data. The key needs to be hashed before being used by the "
		    "HMAC algorithm.";
	v[6].mac = "9b09ffa71b942fcb27635fbcd5b0e944bfdc63644f0713938a7f51535c3a35e2";

	for (int i = 0; i < 7; i++) {
		uint8_t mac[R2_SHA256_LEN];
		char got[2 * R2_SHA256_LEN + 1];
		size_t dl = v[i].datalen ? v[i].datalen : strlen(v[i].data);

		r2_hmac_sha256(v[i].key, v[i].keylen, v[i].data, dl, mac);
		hex(mac, sizeof(mac), got);
		got[strlen(v[i].mac)] = 0;
		ck_assert_msg(!strcmp(got, v[i].mac), "test case %d: %s", i + 1, got);

		/* the same in two updates */
		struct r2_hmac_sha256 m;
		uint8_t mac2[R2_SHA256_LEN];
		r2_hmac_sha256_init(&m, v[i].key, v[i].keylen);
		r2_hmac_sha256_update(&m, v[i].data, dl / 3);
		r2_hmac_sha256_update(&m, v[i].data + dl / 3, dl - dl / 3);
		r2_hmac_sha256_final(&m, mac2);
		ck_assert(!memcmp(mac, mac2, sizeof(mac)));
	}
}
END_TEST

START_TEST(test_mac_equal)
{
	uint8_t a[32], b[32];

	for (int i = 0; i < 32; i++)
		a[i] = b[i] = (uint8_t)i;
	ck_assert(r2_mac_equal(a, b, 32));
	for (int i = 0; i < 32; i++) {
		b[i] ^= 0x80;
		ck_assert_msg(!r2_mac_equal(a, b, 32), "byte %d", i);
		b[i] ^= 0x80;
	}
	ck_assert(r2_mac_equal(a, b, 0));
}
END_TEST

int main(void)
{
	Suite *s = suite_create("hmac");
	TCase *tc = tcase_create("core");
	SRunner *sr;
	int failed;

	tcase_add_test(tc, test_fips180_2);
	tcase_add_test(tc, test_sha_split);
	tcase_add_test(tc, test_rfc4231);
	tcase_add_test(tc, test_mac_equal);
	suite_add_tcase(s, tc);
	sr = srunner_create(s);
	srunner_run_all(sr, CK_NORMAL);
	failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
