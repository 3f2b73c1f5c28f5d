// SPDX-License-Identifier: MIT
/*
 * The peer port of a real r2ccld (R2CCLD, started here with a cluster key on
 * this host's first IPv4 NIC), from a raw dialer that holds the key and is
 * needed by no communicator (an authenticated but idle peer):
 *  - it connects (the whole DIAL / ANSWER / PROOF / OK exchange) and stays
 *    connected while it answers heartbeats;
 *  - it is sent no TCP warm-up (tcp_warmup, 2 MiB per stream by default):
 *    warm-up goes only to peers a communicator needs;
 *  - hellos claiming its id with a wrong key, or none, are refused, and its
 *    connection stays up (the daemon logs no failure of it).
 * Exits 77 (skipped) without a NIC that has an IPv4 address.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "base/comm_record.h"
#include "r2ccl.h"
#include "transport/tcp_wire.h"
#include "transport/transport.h"
#include "util.h"

static const char KEY[] = "peerauth daemon test key 0123456789";
static char dir[] = "/tmp/r2ccl-pa-XXXXXX";
static pid_t daemon_pid;
static int fails;

#define CHECK(cond, ...)                                   \
	do {                                               \
		if (cond) {                                \
			printf("ok - ");                   \
		} else {                                   \
			printf("not ok - ");               \
			fails++;                           \
		}                                          \
		printf(__VA_ARGS__);                       \
		printf("\n");                              \
	} while (0)

static uint64_t now_ms(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

static void cleanup(void)
{
	char cmd[256];

	if (daemon_pid > 0) {
		kill(daemon_pid, SIGTERM);
		waitpid(daemon_pid, NULL, 0);
	}
	snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
	if (system(cmd) < 0)
		(void)0;
}

static int first_nic(char *name, size_t len)
{
	struct ifaddrs *ifa;
	int r = -1;

	if (getifaddrs(&ifa) < 0)
		return -1;
	for (struct ifaddrs *i = ifa; i; i = i->ifa_next)
		if (i->ifa_addr && i->ifa_addr->sa_family == AF_INET && !(i->ifa_flags & IFF_LOOPBACK) &&
		    (i->ifa_flags & IFF_UP)) {
			snprintf(name, len, "%s", i->ifa_name);
			r = 0;
			break;
		}
	freeifaddrs(ifa);
	return r;
}

static int tcp_to(uint32_t addr, uint16_t port)
{
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	struct sockaddr_in sa = { .sin_family = AF_INET, .sin_port = htons(port),
				  .sin_addr.s_addr = addr };
	struct timeval tv = { .tv_sec = 3 };

	if (fd < 0 || connect(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0) {
		if (fd >= 0)
			close(fd);
		return -1;
	}
	setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
	return fd;
}

static int read_full(int fd, void *p, size_t n)
{
	size_t got = 0;
	while (got < n) {
		ssize_t r = read(fd, (uint8_t *)p + got, n - got);
		if (r <= 0)
			return -1;
		got += (size_t)r;
	}
	return 0;
}

/* The dialer's side of the exchange as daemon self to dst; key NULL: no
 * proof. Returns the socket once OK came, -1 when refused. */
static int handshake(uint32_t addr, uint16_t port, uint64_t self, uint64_t dst, const char *key)
{
	uint8_t w[TCP_HELLO_SIZE];
	struct tcp_hello d = { .magic = TCP_HELLO_MAGIC, .version = TCP_HELLO_VERSION,
			       .type = TCP_HELLO_DIAL, .flags = key ? TCP_HELLO_F_AUTH : 0,
			       .stream = 0, .nstreams = 1, .max_msg = 64u << 20,
			       .self_id = self, .dst_id = dst };
	struct tcp_hello a, p, ok;
	size_t kl = key ? strlen(key) : 0;
	int fd = tcp_to(addr, port);

	if (fd < 0)
		return -1;
	if (getrandom(&d.nonce, sizeof(d.nonce), 0) < 0 || getrandom(d.chal, sizeof(d.chal), 0) < 0)
		goto refused;
	tcp_hello_pack(&d, w);
	if (write(fd, w, sizeof(w)) != sizeof(w) || read_full(fd, w, sizeof(w)) < 0 ||
	    tcp_hello_unpack(w, sizeof(w), &a) < 0)
		goto refused;
	p = d;
	p.type = TCP_HELLO_PROOF;
	memset(p.chal, 0, sizeof(p.chal));
	if (kl)
		tcp_hello_mac((const uint8_t *)key, kl, TCP_HELLO_PROOF, &d, &a, p.mac);
	tcp_hello_pack(&p, w);
	if (write(fd, w, sizeof(w)) != sizeof(w) || read_full(fd, w, sizeof(w)) < 0 ||
	    tcp_hello_unpack(w, sizeof(w), &ok) < 0 || tcp_hello_check_ok(&d, &ok) < 0)
		goto refused;
	return fd;
refused:
	close(fd);
	return -1;
}

struct rx {
	uint8_t hdr[sizeof(struct r2_chunk_hdr)];
	size_t hgot;
	uint64_t skip; /* payload bytes left of the current message */
	uint64_t warmup, other, heartbeats;
	bool closed;
};

/* Reads what the daemon sends for ms, answering its heartbeats (so health
 * keeps the path) and counting warm-up bytes. */
static void serve(int fd, struct rx *x, int ms)
{
	uint64_t end = now_ms() + (uint64_t)ms;
	uint8_t buf[65536];

	while (!x->closed && now_ms() < end) {
		struct pollfd pf = { .fd = fd, .events = POLLIN };
		if (poll(&pf, 1, 20) <= 0)
			continue;
		ssize_t n = recv(fd, buf, sizeof(buf), MSG_DONTWAIT);
		if (n == 0 || (n < 0 && errno != EAGAIN && errno != EINTR)) {
			x->closed = true;
			break;
		}
		for (ssize_t i = 0; i < n;) {
			if (x->skip) {
				uint64_t c = R2_MIN(x->skip, (uint64_t)(n - i));
				x->skip -= c;
				i += (ssize_t)c;
				continue;
			}
			size_t c = R2_MIN(sizeof(x->hdr) - x->hgot, (uint64_t)(n - i));
			memcpy(x->hdr + x->hgot, buf + i, c);
			x->hgot += c;
			i += (ssize_t)c;
			if (x->hgot < sizeof(x->hdr))
				continue;
			x->hgot = 0;
			struct r2_chunk_hdr h;
			memcpy(&h, x->hdr, sizeof(h)); /* little-endian host */
			x->skip = h.len;
			if (h.kind == R2_MSG_HEARTBEAT && h.flags == R2_HB_WARMUP) {
				x->warmup += h.len;
			} else if (h.kind == R2_MSG_HEARTBEAT && h.flags == 0) {
				struct r2_chunk_hdr r = { .magic = R2_CHUNK_MAGIC,
							  .kind = R2_MSG_HEARTBEAT, .flags = 1,
							  .off = h.off };
				x->heartbeats++;
				if (write(fd, &r, sizeof(r)) != sizeof(r))
					x->closed = true;
			} else {
				x->other += sizeof(h) + h.len;
			}
		}
	}
}

static bool log_has(const char *what)
{
	char cmd[512];
	snprintf(cmd, sizeof(cmd), "grep -q -- '%s' %s/log", what, dir);
	return system(cmd) == 0;
}

int main(void)
{
	const char *bin = getenv("R2CCLD");
	char nic[IFNAMSIZ], path[128], sock[128], rails[IFNAMSIZ + 2];

	if (!bin || !bin[0]) {
		printf("SKIP: R2CCLD is not set\n");
		return 77;
	}
	if (first_nic(nic, sizeof(nic)) < 0) {
		printf("SKIP: no NIC with an IPv4 address\n");
		return 77;
	}
	if (!mkdtemp(dir))
		return 1;
	atexit(cleanup);
	snprintf(path, sizeof(path), "%s/cluster.key", dir);
	snprintf(sock, sizeof(sock), "%s/s", dir);
	snprintf(rails, sizeof(rails), "=%s", nic);
	int kfd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
	if (kfd < 0 || write(kfd, KEY, strlen(KEY)) != (ssize_t)strlen(KEY))
		return 1;
	close(kfd);
	daemon_pid = fork();
	if (daemon_pid == 0) {
		char logp[160];
		snprintf(logp, sizeof(logp), "%s/log", dir);
		int lfd = open(logp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
		dup2(lfd, 1);
		dup2(lfd, 2);
		execl(bin, bin, "--socket", sock, "--config", "/dev/null", "--rails", rails,
		      "--cluster-key-file", path, (char *)NULL);
		_exit(127);
	}
	/* its unique id names its id and its rail address and port */
	r2ccl_client_t *c = NULL;
	r2ccl_unique_id_t id;
	struct r2_uid u;
	r2ccl_connect_opts_t o = R2CCL_CONNECT_OPTS_INITIALIZER;
	o.socket_path = sock;
	for (int i = 0; i < 200 && !c; i++) {
		if (r2ccl_connect(&o, &c) < 0) {
			c = NULL;
			usleep(50000);
		}
	}
	if (!c) {
		printf("not ok - r2ccld did not start\n");
		return 1;
	}
	memset(&u, 0, sizeof(u));
	/* the rails start after the socket: 10 s at most, a loaded machine is slow */
	for (int i = 0; i < 200; i++) {
		if (r2ccl_get_unique_id(c, &id) == 0) {
			memcpy(&u, &id, sizeof(u));
			if (u.naddrs)
				break;
		}
		usleep(50000);
	}
	r2ccl_disconnect(c);
	if (!u.naddrs) {
		printf("not ok - the daemon has no rail on %s\n", nic);
		return 1;
	}
	uint32_t addr = u.addrs[0];
	uint16_t port = u.ports[0];
	uint64_t me = 0x5eed0000c0ffeeull;

	/* without the key, or with another one: refused */
	CHECK(handshake(addr, port, me, u.host_id, NULL) < 0, "a hello without a proof is refused");
	CHECK(handshake(addr, port, me, u.host_id, "another key, not the cluster's") < 0,
	      "a hello with another key is refused");
	/* with the key: connected, an idle peer */
	int fd = handshake(addr, port, me, u.host_id, KEY);
	CHECK(fd >= 0, "a hello with the cluster key is accepted (DIAL, ANSWER, PROOF, OK)");
	if (fd < 0)
		return 1;
	struct rx x = { 0 };
	serve(fd, &x, 1500);
	/* a heartbeat must have come: waited for (10 s at most) if it has not
	 * yet, since a loaded machine is slow */
	for (uint64_t end = now_ms() + 10000; !x.closed && !x.heartbeats && now_ms() < end;)
		serve(fd, &x, 100);
	CHECK(!x.closed && x.heartbeats > 0, "connected for 1.5 s, %llu heartbeats answered",
	      (unsigned long long)x.heartbeats);
	CHECK(x.warmup == 0, "no warm-up to a peer no communicator needs (%llu bytes; 2 MiB before)",
	      (unsigned long long)x.warmup);
	/* hellos claiming our id, with a wrong key or none: our connection lives */
	for (int i = 0; i < 5; i++) {
		CHECK(handshake(addr, port, me, u.host_id, "a forged key, claiming a live peer") < 0,
		      "a forged hello claiming the live peer's id is refused");
		serve(fd, &x, 100);
	}
	serve(fd, &x, 500);
	char line[96];
	snprintf(line, sizeof(line), "connection to peer %016llx failed", (unsigned long long)me);
	CHECK(!x.closed && !log_has(line), "the live peer's connection stayed up");
	CHECK(log_has("refused: wrong cluster key"), "the daemon logged the refusals");
	close(fd);
	return fails ? 1 : 0;
}
