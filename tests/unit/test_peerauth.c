// SPDX-License-Identifier: MIT
/* Unit tests of the tcp provider's hello and its cluster key proofs
 * (daemon/transport/tcp_hello.c, tcp_wire.h): the wire format, a whole
 * exchange that verifies, and the attacks it must refuse: a wrong key, a
 * replayed PROOF or ANSWER, an ANSWER reflected back as a PROOF, a hello
 * without a proof where a key is in use, altered fields, truncated and
 * oversized hellos. The cluster key file (net/rails.c): its mode, length and
 * trailing newline, and r2ccld --check-config refusing a bad one. The peer
 * table's eviction of peers no communicator needs (net/rails.c). The live
 * exchange over sockets is in test_tcp.c. */
#include <check.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "base/comm_record.h"
#include "hmac_sha256.h"
#include "net/rails.h"
#include "transport/tcp_wire.h"

static const uint8_t KEY[] = "the cluster key of this test";
static const uint8_t BAD[] = "the cluster key of another one";
#define KL (sizeof(KEY) - 1)
#define BL (sizeof(BAD) - 1)

static void chal(uint8_t *c, uint8_t seed)
{
	for (int i = 0; i < TCP_HELLO_CHAL; i++)
		c[i] = (uint8_t)(seed * 31 + i * 7);
}

/* The DIAL of daemon 0x1111 to 0x2222, the ANSWER (proof with key k), the
 * PROOF (with key k2). */
static void exchange(const uint8_t *k, size_t kl, const uint8_t *k2, size_t k2l, uint8_t seed,
		     struct tcp_hello *d, struct tcp_hello *a, struct tcp_hello *p)
{
	memset(d, 0, sizeof(*d));
	d->magic = TCP_HELLO_MAGIC;
	d->version = TCP_HELLO_VERSION;
	d->type = TCP_HELLO_DIAL;
	d->flags = TCP_HELLO_F_AUTH;
	d->stream = 1;
	d->nstreams = 2;
	d->rail = 0;
	d->max_msg = 1 << 20;
	d->self_id = 0x1111;
	d->dst_id = 0x2222;
	d->nonce = 0xabcdef;
	chal(d->chal, seed);
	*a = *d;
	a->type = TCP_HELLO_ANSWER;
	a->self_id = 0x2222;
	a->dst_id = 0x1111;
	a->rail = 1;
	chal(a->chal, (uint8_t)(seed + 100));
	tcp_hello_mac(k, kl, TCP_HELLO_ANSWER, d, a, a->mac);
	*p = *d;
	p->type = TCP_HELLO_PROOF;
	memset(p->chal, 0, sizeof(p->chal));
	tcp_hello_mac(k2, k2l, TCP_HELLO_PROOF, d, a, p->mac);
}

START_TEST(test_pack_roundtrip)
{
	struct tcp_hello d, a, p, x;
	uint8_t w[TCP_HELLO_SIZE];

	exchange(KEY, KL, KEY, KL, 1, &d, &a, &p);
	tcp_hello_pack(&a, w);
	/* little-endian at the documented offsets */
	ck_assert_uint_eq(w[0], 0x32);
	ck_assert_uint_eq(w[6], TCP_HELLO_ANSWER);
	ck_assert_uint_eq(w[24], 0x22);
	ck_assert_uint_eq(w[25], 0x22);
	ck_assert_int_eq(tcp_hello_unpack(w, sizeof(w), &x), 0);
	ck_assert(!memcmp(&x, &a, sizeof(x)));
}
END_TEST

START_TEST(test_good_exchange)
{
	struct tcp_hello d, a, p;

	exchange(KEY, KL, KEY, KL, 2, &d, &a, &p);
	ck_assert_int_eq(tcp_hello_check_answer(KEY, KL, &d, &a), 0);
	ck_assert_int_eq(tcp_hello_check_proof(KEY, KL, &d, &a, &p), 0);
	/* a long key (hashed first by HMAC) works the same */
	uint8_t longkey[200];
	memset(longkey, 0x42, sizeof(longkey));
	exchange(longkey, sizeof(longkey), longkey, sizeof(longkey), 3, &d, &a, &p);
	ck_assert_int_eq(tcp_hello_check_answer(longkey, sizeof(longkey), &d, &a), 0);
	ck_assert_int_eq(tcp_hello_check_proof(longkey, sizeof(longkey), &d, &a, &p), 0);
}
END_TEST

START_TEST(test_wrong_key)
{
	struct tcp_hello d, a, p;

	/* an acceptor with another key: the dialer refuses its ANSWER */
	exchange(BAD, BL, KEY, KL, 4, &d, &a, &p);
	ck_assert_int_eq(tcp_hello_check_answer(KEY, KL, &d, &a), -EACCES);
	/* a dialer with another key: the acceptor refuses its PROOF */
	exchange(KEY, KL, BAD, BL, 4, &d, &a, &p);
	ck_assert_int_eq(tcp_hello_check_answer(KEY, KL, &d, &a), 0);
	ck_assert_int_eq(tcp_hello_check_proof(KEY, KL, &d, &a, &p), -EACCES);
	/* no proof at all (flags without AUTH, a zero MAC) where a key is used */
	exchange(KEY, KL, KEY, KL, 4, &d, &a, &p);
	p.flags = 0;
	memset(p.mac, 0, sizeof(p.mac));
	ck_assert_int_eq(tcp_hello_check_proof(KEY, KL, &d, &a, &p), -EACCES);
	/* a proof where this side has no key (peer_auth = off here) */
	exchange(KEY, KL, KEY, KL, 4, &d, &a, &p);
	ck_assert_int_eq(tcp_hello_check_proof(NULL, 0, &d, &a, &p), -EACCES);
	/* both without: accepted */
	p.flags = 0;
	a.flags = 0;
	ck_assert_int_eq(tcp_hello_check_answer(NULL, 0, &d, &a), 0);
	ck_assert_int_eq(tcp_hello_check_proof(NULL, 0, &d, &a, &p), 0);
}
END_TEST

/* A PROOF recorded from one exchange does not verify in another: the
 * acceptor's fresh challenge differs. */
START_TEST(test_replay)
{
	struct tcp_hello d1, a1, p1, d2, a2, p2;

	exchange(KEY, KL, KEY, KL, 5, &d1, &a1, &p1);
	ck_assert_int_eq(tcp_hello_check_proof(KEY, KL, &d1, &a1, &p1), 0);
	/* the attacker replays DIAL 1; the acceptor answers with a new challenge */
	exchange(KEY, KL, KEY, KL, 5, &d2, &a2, &p2);
	chal(a2.chal, 77);
	tcp_hello_mac(KEY, KL, TCP_HELLO_ANSWER, &d2, &a2, a2.mac);
	ck_assert_int_eq(tcp_hello_check_proof(KEY, KL, &d2, &a2, &p1), -EACCES);
	/* an ANSWER recorded for another DIAL: the dialer refuses it */
	exchange(KEY, KL, KEY, KL, 6, &d2, &a2, &p2);
	ck_assert_int_eq(tcp_hello_check_answer(KEY, KL, &d2, &a1), -EACCES);
	/* the same PROOF on another stream of the connection */
	struct tcp_hello d3 = d1, a3 = a1, p3 = p1;
	d3.stream = a3.stream = p3.stream = 0;
	tcp_hello_mac(KEY, KL, TCP_HELLO_ANSWER, &d3, &a3, a3.mac);
	ck_assert_int_eq(tcp_hello_check_proof(KEY, KL, &d3, &a3, &p3), -EACCES);
}
END_TEST

/* Reflection: an attacker dials A as B, takes A's ANSWER (A's proof) and
 * sends its MAC back as the PROOF; or opens a second exchange and offers the
 * first ANSWER's MAC. Neither verifies: the prover's label differs. */
START_TEST(test_reflection)
{
	struct tcp_hello d, a, p;

	exchange(KEY, KL, KEY, KL, 8, &d, &a, &p);
	memcpy(p.mac, a.mac, sizeof(p.mac));
	ck_assert_int_eq(tcp_hello_check_proof(KEY, KL, &d, &a, &p), -EACCES);
	/* the ANSWER sent back to the acceptor as if the dialer's PROOF */
	struct tcp_hello r = a;
	r.type = TCP_HELLO_PROOF;
	ck_assert_int_eq(tcp_hello_check_proof(KEY, KL, &d, &a, &r), -EPROTO);
	r.self_id = d.self_id;
	r.dst_id = d.dst_id;
	ck_assert_int_eq(tcp_hello_check_proof(KEY, KL, &d, &a, &r), -EACCES);
	/* roles swapped: B's DIAL mirrored into A's ANSWER is not A's answer */
	struct tcp_hello m = d;
	m.type = TCP_HELLO_ANSWER;
	ck_assert_int_eq(tcp_hello_check_answer(KEY, KL, &d, &m), -EPROTO);
}
END_TEST

START_TEST(test_fields_bound)
{
	struct tcp_hello d, a, p, x;

	exchange(KEY, KL, KEY, KL, 9, &d, &a, &p);
	/* each field the proofs cover: changed after the MAC, refused */
	x = p;
	x.self_id = 0x3333; /* another claimed daemon id */
	ck_assert_int_lt(tcp_hello_check_proof(KEY, KL, &d, &a, &x), 0);
	struct tcp_hello d2 = d;
	d2.self_id = 0x3333; /* the DIAL claimed another id than the one proved */
	x = p;
	x.self_id = 0x3333;
	ck_assert_int_eq(tcp_hello_check_proof(KEY, KL, &d2, &a, &x), -EACCES);
	d2 = d;
	d2.rail = 5;
	ck_assert_int_eq(tcp_hello_check_proof(KEY, KL, &d2, &a, &p), -EACCES);
	d2 = d;
	d2.max_msg = 1;
	ck_assert_int_eq(tcp_hello_check_proof(KEY, KL, &d2, &a, &p), -EACCES);
	x = a;
	x.rail = 7;
	ck_assert_int_eq(tcp_hello_check_answer(KEY, KL, &d, &x), -EACCES);
	x = a;
	x.nonce++;
	ck_assert_int_eq(tcp_hello_check_answer(KEY, KL, &d, &x), -EPROTO);
	x = a;
	x.mac[31] ^= 1;
	ck_assert_int_eq(tcp_hello_check_answer(KEY, KL, &d, &x), -EACCES);
}
END_TEST

START_TEST(test_malformed)
{
	struct tcp_hello d, a, p, x;
	uint8_t w[TCP_HELLO_SIZE + 8];

	exchange(KEY, KL, KEY, KL, 10, &d, &a, &p);
	tcp_hello_pack(&d, w);
	/* truncated and oversized */
	for (size_t n = 0; n < TCP_HELLO_SIZE; n += 7)
		ck_assert_int_eq(tcp_hello_unpack(w, n, &x), -EMSGSIZE);
	ck_assert_int_eq(tcp_hello_unpack(w, TCP_HELLO_SIZE - 1, &x), -EMSGSIZE);
	ck_assert_int_eq(tcp_hello_unpack(w, TCP_HELLO_SIZE + 1, &x), -EMSGSIZE);
	ck_assert_int_eq(tcp_hello_unpack(w, sizeof(w), &x), -EMSGSIZE);
	ck_assert_int_eq(tcp_hello_unpack(w, TCP_HELLO_SIZE, &x), 0);
	/* bad magic, version, type, flags, reserved bytes */
	static const int off[] = { 0, 4, 6, 7, 14, 20 };
	for (size_t i = 0; i < sizeof(off) / sizeof(off[0]); i++) {
		tcp_hello_pack(&d, w);
		w[off[i]] ^= 0x40;
		ck_assert_msg(tcp_hello_unpack(w, TCP_HELLO_SIZE, &x) == -EPROTO, "offset %d",
			      off[i]);
	}
	/* the old 40-byte hello (version 1) */
	tcp_hello_pack(&d, w);
	w[4] = 1;
	ck_assert_int_eq(tcp_hello_unpack(w, TCP_HELLO_SIZE, &x), -EPROTO);
	ck_assert_int_eq(tcp_hello_unpack(w, 40, &x), -EMSGSIZE);
	/* type 0 and past OK */
	tcp_hello_pack(&d, w);
	w[6] = 0;
	ck_assert_int_eq(tcp_hello_unpack(w, TCP_HELLO_SIZE, &x), -EPROTO);
	w[6] = TCP_HELLO_OK + 1;
	ck_assert_int_eq(tcp_hello_unpack(w, TCP_HELLO_SIZE, &x), -EPROTO);
	/* an OK for another stream */
	struct tcp_hello ok = a;
	ok.type = TCP_HELLO_OK;
	ck_assert_int_eq(tcp_hello_check_ok(&d, &ok), 0);
	ok.stream = 0;
	ck_assert_int_eq(tcp_hello_check_ok(&d, &ok), -EPROTO);
}
END_TEST


static void write_key(const char *path, const char *text, mode_t mode)
{
	unlink(path);
	int fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
	ck_assert_int_ge(fd, 0);
	ck_assert_int_eq(write(fd, text, strlen(text)), (ssize_t)strlen(text));
	ck_assert_int_eq(fchmod(fd, mode), 0);
	close(fd);
}

START_TEST(test_key_file)
{
	char dir[] = "/tmp/r2ccl-keytest-XXXXXX", path[64], err[512];
	uint8_t key[64];
	uint32_t len;

	ck_assert_ptr_nonnull(mkdtemp(dir));
	snprintf(path, sizeof(path), "%s/cluster.key", dir);
	ck_assert_int_eq(r2d_cluster_key_load(path, key, &len, err, sizeof(err)), -ENOENT);
	/* 32 bytes and a newline (openssl rand -base64 24): the newline is not key */
	write_key(path, "0123456789abcdef0123456789abcdef\n", 0600);
	ck_assert_int_eq(r2d_cluster_key_load(path, key, &len, err, sizeof(err)), 0);
	ck_assert_uint_eq(len, 32);
	ck_assert(!memcmp(key, "0123456789abcdef0123456789abcdef", 32));
	write_key(path, "0123456789abcdef0123456789abcdef\n", 0400);
	ck_assert_int_eq(r2d_cluster_key_load(path, key, &len, err, sizeof(err)), 0);
	/* group or others may read (or write) it: refused, and said how to fix */
	static const mode_t bad[] = { 0644, 0640, 0604, 0620, 0602 };
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		write_key(path, "0123456789abcdef0123456789abcdef\n", bad[i]);
		ck_assert_int_eq(r2d_cluster_key_load(path, key, &len, err, sizeof(err)), -EPERM);
		ck_assert_ptr_nonnull(strstr(err, "chmod 600"));
		ck_assert_uint_eq(len, 0);
	}
	/* too short */
	write_key(path, "short key\n", 0600);
	ck_assert_int_eq(r2d_cluster_key_load(path, key, &len, err, sizeof(err)), -EINVAL);
	/* longer than a block: its SHA-256, as HMAC would use it */
	char longkey[101];
	memset(longkey, 'k', 100);
	longkey[100] = 0;
	write_key(path, longkey, 0600);
	ck_assert_int_eq(r2d_cluster_key_load(path, key, &len, err, sizeof(err)), 0);
	ck_assert_uint_eq(len, 32);
	uint8_t md[32];
	r2_sha256(longkey, 100, md);
	ck_assert(!memcmp(key, md, 32));
	/* not a regular file */
	ck_assert_int_eq(r2d_cluster_key_load(dir, key, &len, err, sizeof(err)), -EINVAL);

	/* r2ccld --check-config: a bad key file is a configuration error (exit
	 * 2, the reason on stderr); a good one, or none, passes */
	const char *bin = getenv("R2CCLD");
	if (bin && bin[0]) {
		char cmd[512];
		write_key(path, "0123456789abcdef0123456789abcdef\n", 0644);
		snprintf(cmd, sizeof(cmd),
			 "%s --config /dev/null --cluster-key-file %s --check-config "
			 ">/dev/null 2>%s/err",
			 bin, path, dir);
		int st = system(cmd);
		ck_assert(WIFEXITED(st) && WEXITSTATUS(st) == 2);
		snprintf(cmd, sizeof(cmd), "grep -q 'chmod 600' %s/err", dir);
		ck_assert_int_eq(system(cmd), 0);
		write_key(path, "0123456789abcdef0123456789abcdef\n", 0600);
		snprintf(cmd, sizeof(cmd),
			 "%s --config /dev/null --cluster-key-file %s --check-config >/dev/null",
			 bin, path);
		st = system(cmd);
		ck_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0);
		/* peer_auth = off: the file is not read */
		write_key(path, "0123456789abcdef0123456789abcdef\n", 0644);
		snprintf(cmd, sizeof(cmd),
			 "%s --config /dev/null --cluster-key-file %s --peer-auth off "
			 "--check-config >/dev/null",
			 bin, path);
		st = system(cmd);
		ck_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0);
		snprintf(cmd, sizeof(cmd), "%s/err", dir);
		unlink(cmd);
	}
	unlink(path);
	rmdir(dir);
}
END_TEST

/* ---- the peer table ---- */

static uint64_t dropped[8];
static int ndropped;

static int fake_disconnect(struct r2_tp *tp, uint64_t peer)
{
	(void)tp;
	if (ndropped < 8)
		dropped[ndropped] = peer;
	ndropped++;
	return 0;
}

static const struct r2_tp_ops fake_ops = { .name = "fake", .disconnect = fake_disconnect };

/* 1,024 peers no communicator needs fill the table; a new one still gets an
 * entry (an unconnected one is evicted first, then an idle connected one,
 * whose connection is dropped); the peers a communicator needs (members,
 * the root it joins) are never evicted, and when all are needed the table
 * refuses. */
START_TEST(test_peer_table_evicts)
{
	struct r2d *d = calloc(1, sizeof(*d));
	struct r2_rails *rs = calloc(1, sizeof(*rs));
	struct r2_comm *c = calloc(1, sizeof(*c));
	struct r2_host hosts[2] = { { .id = 3 }, { .id = 5 } };

	ck_assert(d && rs && c);
	pthread_mutex_init(&d->lock, NULL);
	d->rails = rs;
	rs->d = d;
	rs->n = 1;
	rs->rail[0].ops = &fake_ops;
	/* a communicator of hosts 3 and 5, joining through root 7 */
	c->state = R2_COMM_JOINING;
	c->uid.host_id = 7;
	c->hosts = hosts;
	c->nhosts = 2;
	d->comms = c;

	for (uint64_t id = 1; id <= R2_MAX_PEERS; id++) {
		struct r2_peer *p = r2d_rails_peer(d, id, true);
		ck_assert_ptr_nonnull(p);
		ck_assert_uint_eq(p->id, id);
		p->conn_mask = id < 100 ? 0 : 1; /* 1..99 not connected */
	}
	ck_assert_ptr_null(r2d_rails_peer(d, 5000, true));
	ck_assert_ptr_eq(r2d_rails_peer(d, 5, false), &rs->peer[4]);
	pthread_mutex_lock(&d->lock);
	ck_assert(r2d_rails_peer_needed(d, 3));
	ck_assert(r2d_rails_peer_needed(d, 7));
	ck_assert(!r2d_rails_peer_needed(d, 1));
	/* room: an unconnected, unneeded one goes (1), without a disconnect */
	ck_assert_int_eq(r2d_rails_make_room(d), 0);
	ck_assert_ptr_null(r2d_rails_peer_find(d, 1));
	ck_assert_int_eq(ndropped, 0);
	ck_assert_int_eq(r2d_rails_make_room(d), 0); /* a free entry already */
	pthread_mutex_unlock(&d->lock);
	struct r2_peer *p = r2d_rails_peer(d, 5000, true);
	ck_assert_ptr_eq(p, &rs->peer[0]); /* the freed entry, reused */
	ck_assert_uint_eq(p->conn_mask, 0);
	ck_assert_uint_eq(atomic_load(&rs->npeers), R2_MAX_PEERS);
	p->conn_mask = 1;

	/* every unconnected one but the needed 3, 5, 7 gone: then a connected
	 * idle one goes, and its connection is dropped */
	pthread_mutex_lock(&d->lock);
	for (uint64_t id = 2; id < 100; id++) {
		if (id == 3 || id == 5 || id == 7)
			continue;
		ck_assert_int_eq(r2d_rails_make_room(d), 0);
		ck_assert_ptr_nonnull(r2d_rails_peer(d, 10000 + id, true));
		r2d_rails_peer(d, 10000 + id, false)->conn_mask = 1;
	}
	ck_assert_int_eq(r2d_rails_make_room(d), 0);
	ck_assert_int_eq(ndropped, 1);
	ck_assert_uint_ge(dropped[0], 100); /* a connected one */
	ck_assert_ptr_null(r2d_rails_peer_find(d, dropped[0]));
	ck_assert_ptr_nonnull(r2d_rails_peer_find(d, 3));
	ck_assert_ptr_nonnull(r2d_rails_peer_find(d, 5));
	ck_assert_ptr_nonnull(r2d_rails_peer_find(d, 7));

	/* everyone needed: refused */
	struct r2_host *all = calloc(R2_MAX_PEERS, sizeof(*all));
	ck_assert_ptr_nonnull(all);
	ck_assert_ptr_nonnull(r2d_rails_peer(d, 20000, true)); /* the free entry */
	for (int i = 0; i < R2_MAX_PEERS; i++)
		all[i].id = rs->peer[i].id;
	c->hosts = all;
	c->nhosts = R2_MAX_PEERS;
	ck_assert_int_eq(r2d_rails_make_room(d), -ENOSPC);
	/* a dead communicator needs no one */
	c->state = R2_COMM_DEAD;
	ck_assert_int_eq(r2d_rails_make_room(d), 0);
	pthread_mutex_unlock(&d->lock);
	free(all);
	free(c);
	free(rs);
	pthread_mutex_destroy(&d->lock);
	free(d);
}
END_TEST

int main(void)
{
	Suite *s = suite_create("peerauth");
	TCase *tc = tcase_create("hello");
	SRunner *sr;
	int failed;

	tcase_add_test(tc, test_pack_roundtrip);
	tcase_add_test(tc, test_good_exchange);
	tcase_add_test(tc, test_wrong_key);
	tcase_add_test(tc, test_replay);
	tcase_add_test(tc, test_reflection);
	tcase_add_test(tc, test_fields_bound);
	tcase_add_test(tc, test_malformed);
	tcase_add_test(tc, test_key_file);
	tcase_add_test(tc, test_peer_table_evicts);
	suite_add_tcase(s, tc);
	sr = srunner_create(s);
	srunner_run_all(sr, CK_NORMAL);
	failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
