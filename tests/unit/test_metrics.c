// SPDX-License-Identifier: MIT
/* Unit tests of the metrics (daemon/control/metrics.c) and the counters
 * they read: the per-path traffic counters and rail usage that
 * r2d_rails_send keeps, the health snapshot's sums, the listen address
 * syntax, and the Prometheus text rendered from a daemon with fake rails
 * (names, labels, the histogram's cumulative buckets) and, through
 * metrics_docs.py, docs/operations.md's table of them. The integration
 * test `metrics` checks the HTTP listener and the textfile on a real
 * r2ccld. */
#include <arpa/inet.h>
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "control/control.h"
#include "net/health_int.h"
#include "net/tenants.h"

static int fake_stats(struct r2_tp *tp, uint64_t *tx, uint64_t *rx)
{
	*tx = 1000 + (uint64_t)(uintptr_t)tp;
	*rx = 2000 + (uint64_t)(uintptr_t)tp;
	return 0;
}

static int fake_post(struct r2_tp *tp, uint64_t peer, const struct r2_chunk_hdr *hdr,
		     const void *buf, uint64_t ctx)
{
	(void)tp;
	(void)hdr;
	(void)buf;
	(void)ctx;
	return peer == 0xdead ? -ENOTCONN : 0;
}

static const struct r2_tp_ops fake_ops = { .name = "fake", .stats = fake_stats,
					   .post_send = fake_post };

/* A daemon with health, two fake rails (nic0, nic1) and two peers. */
static struct r2d *md_new(void)
{
	struct r2d *d = calloc(1, sizeof(*d));
	struct r2_rails *rs = calloc(1, sizeof(*rs));

	ck_assert_ptr_nonnull(d);
	ck_assert_ptr_nonnull(rs);
	pthread_mutex_init(&d->lock, NULL);
	d->health = calloc(1, sizeof(*d->health));
	ck_assert_ptr_nonnull(d->health);
	pthread_mutex_init(&d->health->lock, NULL);
	d->rails = rs;
	rs->n = 2;
	for (int r = 0; r < 2; r++) {
		snprintf(rs->rail[r].ifname, sizeof(rs->rail[r].ifname), "nic%d", r);
		rs->rail[r].ops = &fake_ops;
		rs->rail[r].tp = (struct r2_tp *)(uintptr_t)r;
	}
	snprintf(rs->rail[1].rdma_dev, sizeof(rs->rail[1].rdma_dev), "mlx5_3:2");
	atomic_store(&rs->npeers, 2);
	rs->peer[0].id = 0xa;
	rs->peer[1].id = 0xb;
	for (int p = 0; p < 2; p++)
		for (int r = 0; r < 2; r++)
			rs->peer[p].link[r].known = true;
	d->start_us = 1;
	return d;
}

static void md_free(struct r2d *d)
{
	r2d_tenants_free(d);
	pthread_mutex_destroy(&d->health->lock);
	free(d->health);
	free(d->rails);
	pthread_mutex_destroy(&d->lock);
	free(d);
}

static int send_data(struct r2d *d, int rail, uint64_t peer, uint64_t comm, uint32_t len)
{
	struct r2_chunk_hdr h = { .magic = R2_CHUNK_MAGIC, .kind = R2_MSG_DATA, .comm = comm,
				  .len = len };

	return r2d_rails_send(d, rail, peer, &h, NULL, 0);
}

/* sent data counts per path (bytes, chunks); a failed post does not; the
 * snapshot sums the paths per rail and carries the totals */
START_TEST(test_path_counters)
{
	struct r2d *d = md_new();
	struct r2d_health_snap s;

	ck_assert_int_eq(send_data(d, 0, 0xa, 7, 100), 0);
	ck_assert_int_eq(send_data(d, 0, 0xa, 7, 50), 0);
	ck_assert_int_eq(send_data(d, 1, 0xb, 7, 10), 0);
	ck_assert_int_lt(send_data(d, 1, 0xdead, 7, 10), 0);
	r2d_rails_note_resend(d, 1, 0xb, 3);
	r2d_rails_note_resend(d, 1, 0xb, 0);
	d->rails->peer[0].link[0].missed_total = 5;
	d->rails->peer[1].link[0].missed_total = 2;
	d->rails->peer[1].link[1].changes = 4;
	d->health->replans = 6;
	d->health->replan_timed = 2;
	d->health->replan_us_sum = 1500;

	ck_assert_int_eq(r2d_health_snapshot(d, &s), 0);
	ck_assert_uint_eq(s.npaths, 4);
	/* by peer, then rail */
	ck_assert_uint_eq(s.paths[0].tx_bytes, 150);
	ck_assert_uint_eq(s.paths[0].tx_chunks, 2);
	ck_assert_uint_eq(s.paths[0].missed_total, 5);
	ck_assert_uint_eq(s.paths[1].tx_chunks, 0);
	ck_assert_uint_eq(s.paths[3].tx_bytes, 10);
	ck_assert_uint_eq(s.paths[3].resends, 3);
	ck_assert_uint_eq(s.paths[3].changes, 4);
	ck_assert_uint_eq(s.rails[0].tx_chunks, 2);
	ck_assert_uint_eq(s.rails[0].hb_missed, 7);
	ck_assert_uint_eq(s.rails[1].tx_chunks, 1);
	ck_assert_uint_eq(s.rails[1].resends, 3);
	ck_assert_uint_eq(s.replans, 6);
	ck_assert_uint_eq(s.replan_timed, 2);
	ck_assert_uint_eq(s.replan_us_sum, 1500);
	r2d_health_snap_free(&s);
	md_free(d);
}
END_TEST

/* rail usage: the distinct communicators per rail since the last take,
 * then a fresh interval; past the slots they still count */
START_TEST(test_rail_usage)
{
	struct r2d *d = md_new();
	uint64_t keys[R2_RAIL_USE_SLOTS];

	send_data(d, 0, 0xa, 11, 1);
	send_data(d, 0, 0xb, 11, 1);
	send_data(d, 0, 0xa, 12, 1);
	send_data(d, 1, 0xa, 12, 1);
	ck_assert_int_eq(r2d_rails_take_usage(d, 0, keys, R2_RAIL_USE_SLOTS), 2);
	ck_assert(keys[0] + keys[1] == 23 && keys[0] != keys[1]);
	ck_assert_int_eq(r2d_rails_take_usage(d, 1, keys, R2_RAIL_USE_SLOTS), 1);
	ck_assert_uint_eq(keys[0], 12);
	ck_assert_int_eq(r2d_rails_take_usage(d, 0, keys, R2_RAIL_USE_SLOTS), 0);
	ck_assert_int_eq(r2d_rails_take_usage(d, 5, keys, R2_RAIL_USE_SLOTS), 0);
	for (uint64_t k = 1; k <= R2_RAIL_USE_SLOTS + 3; k++)
		send_data(d, 1, 0xb, k, 1);
	ck_assert_int_eq(r2d_rails_take_usage(d, 1, keys, R2_RAIL_USE_SLOTS),
			 R2_RAIL_USE_SLOTS + 1);
	md_free(d);
}
END_TEST

START_TEST(test_parse_listen)
{
	struct sockaddr_in sa;

	ck_assert_int_eq(r2d_metrics_parse_listen("9400", &sa), 0);
	ck_assert_uint_eq(ntohs(sa.sin_port), 9400);
	ck_assert_uint_eq(ntohl(sa.sin_addr.s_addr), INADDR_LOOPBACK);
	ck_assert_int_eq(r2d_metrics_parse_listen("10.1.2.3:80", &sa), 0);
	ck_assert_uint_eq(ntohs(sa.sin_port), 80);
	ck_assert_uint_eq(ntohl(sa.sin_addr.s_addr), 0x0a010203);
	ck_assert_int_eq(r2d_metrics_parse_listen("*:9401", &sa), 0);
	ck_assert_uint_eq(sa.sin_addr.s_addr, htonl(INADDR_ANY));
	ck_assert_int_eq(r2d_metrics_parse_listen(":9402", &sa), 0);
	ck_assert_uint_eq(ntohs(sa.sin_port), 9402);
	ck_assert_int_eq(r2d_metrics_parse_listen("0", &sa), -EINVAL);
	ck_assert_int_eq(r2d_metrics_parse_listen("65536", &sa), -EINVAL);
	ck_assert_int_eq(r2d_metrics_parse_listen("94x", &sa), -EINVAL);
	ck_assert_int_eq(r2d_metrics_parse_listen("host:", &sa), -EINVAL);
	ck_assert_int_eq(r2d_metrics_parse_listen("no.such.host:80", &sa), -EINVAL);
	ck_assert_int_eq(r2d_metrics_parse_listen("", &sa), -EINVAL);
}
END_TEST

/* the value of the line that starts with prefix ("name{labels}"); -1: none */
static double value_of(const char *text, const char *prefix)
{
	size_t n = strlen(prefix);

	for (const char *p = text; p && *p; p = strchr(p, '\n'), p = p ? p + 1 : NULL)
		if (!strncmp(p, prefix, n) && p[n] == ' ')
			return strtod(p + n + 1, NULL);
	return -1;
}

START_TEST(test_render)
{
	struct r2d *d = md_new();
	struct r2_op_stats *t = &d->op_stats[0];
	char *text;
	size_t len;

	d->nop_stats = 1;
	snprintf(t->tenant, sizeof(t->tenant), "job \"a\"");
	t->ops[R2_OP_ALLREDUCE][0] = 3;
	t->ops[R2_OP_ALLREDUCE][1] = 1;
	t->bytes[R2_OP_ALLREDUCE] = 4096;
	t->lat[0] = 1; /* <= 100 us */
	t->lat[3] = 2; /* <= 1 ms */
	t->lat[R2_LAT_NBUCKETS] = 1; /* > 10 s */
	t->lat_sum = 12.5;
	d->rails->rail[0].h.state = R2_RS_FAILED;
	d->rails->rail[0].h.failovers = 2;
	d->rails->rail[1].h.failovers = 1;
	d->rails->rail[1].h.changes = 3;
	d->nsessions = 4;
	send_data(d, 1, 0xb, 9, 64);
	/* a tenant's chunk through the scheduler's queue of rail 1 */
	struct r2_tenant_policy pol;
	struct r2_chunk_hdr h = { .magic = R2_CHUNK_MAGIC, .kind = R2_MSG_DATA, .comm = 9,
				  .len = 300 };
	ck_assert_int_eq(r2d_tenants_init(d), 0);
	r2_tenant_policy_default(&pol, "job\"b");
	snprintf(pol.cgroup, sizeof(pol.cgroup), "/b");
	pol.weight = 3;
	pol.rate_bps = 8000000;
	pol.cls = R2_TCLASS_LATENCY;
	int tb = r2d_tenants_policy_set(d, &pol);
	ck_assert_int_gt(tb, 0);
	d->rails->peer[1].conn_mask = 0x3;
	ck_assert_int_eq(r2d_rails_send_tenant(d, 1, 0xb, &h, NULL, 0, tb, NULL), 0);

	ck_assert_int_eq(r2d_metrics_render(d, &text, &len), 0);
	text = realloc(text, len + 1);
	text[len] = 0;
	ck_assert_uint_eq(strlen(text), len);
	ck_assert_double_eq(value_of(text, "r2ccl_tenant_rail_transmit_bytes_total{tenant="
					   "\"job\\\"b\",device=\"mlx5_3\",port=\"2\","
					   "nic=\"nic1\",rail=\"1\"}"),
			    300);
	ck_assert_double_eq(value_of(text, "r2ccl_tenant_rail_transmit_bytes_total{tenant="
					   "\"job\\\"b\",device=\"nic0\",port=\"1\","
					   "nic=\"nic0\",rail=\"0\"}"),
			    0);
	ck_assert_double_eq(value_of(text, "r2ccl_tenant_weight{tenant=\"job\\\"b\","
					   "class=\"latency\"}"),
			    3);
	ck_assert_double_eq(value_of(text, "r2ccl_tenant_rate_limit_bytes_per_second{tenant="
					   "\"job\\\"b\",class=\"latency\"}"),
			    1000000);
	ck_assert_double_eq(value_of(text, "r2ccl_tenant_queued_chunks{tenant=\"job\\\"b\","
					   "class=\"latency\"}"),
			    0);
	ck_assert_double_eq(value_of(text, "r2ccl_tenant_weight{tenant=\"default\","
					   "class=\"bulk\"}"),
			    1);
	ck_assert_ptr_nonnull(strstr(text, "# TYPE r2ccl_tenant_operation_latency_seconds histogram\n"));
	ck_assert_double_eq(value_of(text, "r2ccl_sessions"), 4);
	ck_assert_double_eq(
		value_of(text, "r2ccl_tenant_operations_total{tenant=\"job \\\"a\\\"\","
			       "op=\"allreduce\",result=\"ok\"}"), 3);
	ck_assert_double_eq(
		value_of(text, "r2ccl_tenant_operations_total{tenant=\"job \\\"a\\\"\","
			       "op=\"allreduce\",result=\"error\"}"), 1);
	/* no line for what never happened */
	ck_assert_ptr_null(strstr(text, "op=\"broadcast\""));
	ck_assert_double_eq(
		value_of(text, "r2ccl_tenant_bytes_total{tenant=\"job \\\"a\\\"\",op=\"allreduce\"}"),
		4096);
	/* cumulative buckets, +Inf = count */
	const char *b = "r2ccl_tenant_operation_latency_seconds_bucket{tenant=\"job \\\"a\\\"\",le=";
	char k[256];
	snprintf(k, sizeof(k), "%s\"0.0001\"}", b);
	ck_assert_double_eq(value_of(text, k), 1);
	snprintf(k, sizeof(k), "%s\"0.0005\"}", b);
	ck_assert_double_eq(value_of(text, k), 1);
	snprintf(k, sizeof(k), "%s\"0.001\"}", b);
	ck_assert_double_eq(value_of(text, k), 3);
	snprintf(k, sizeof(k), "%s\"10\"}", b);
	ck_assert_double_eq(value_of(text, k), 3);
	snprintf(k, sizeof(k), "%s\"+Inf\"}", b);
	ck_assert_double_eq(value_of(text, k), 4);
	ck_assert_double_eq(value_of(text, "r2ccl_tenant_operation_latency_seconds_count{tenant="
					   "\"job \\\"a\\\"\"}"), 4);
	ck_assert_double_eq(value_of(text, "r2ccl_tenant_operation_latency_seconds_sum{tenant="
					   "\"job \\\"a\\\"\"}"), 12.5);
	/* NIC labels: a tcp rail by its netdev, a verbs rail by device:port */
	ck_assert_double_eq(value_of(text, "r2ccl_nic_state{device=\"nic0\",port=\"1\",nic=\"nic0\","
					   "rail=\"0\",state=\"failed\"}"), 1);
	ck_assert_double_eq(value_of(text, "r2ccl_nic_state{device=\"nic0\",port=\"1\",nic=\"nic0\","
					   "rail=\"0\",state=\"healthy\"}"), 0);
	ck_assert_double_eq(value_of(text, "r2ccl_nic_state_changes_total{device=\"mlx5_3\","
					   "port=\"2\",nic=\"nic1\",rail=\"1\"}"), 3);
	ck_assert_double_eq(value_of(text, "r2ccl_nic_transmit_bytes_total{device=\"mlx5_3\","
					   "port=\"2\",nic=\"nic1\",rail=\"1\"}"), 1001);
	/* 64 posted directly, 300 through the tenant's queue */
	ck_assert_double_eq(value_of(text, "r2ccl_path_transmit_bytes_total{device=\"mlx5_3\","
					   "port=\"2\",nic=\"nic1\",rail=\"1\","
					   "peer=\"000000000000000b\"}"), 364);
	/* a path that carried nothing and stayed healthy is not listed */
	ck_assert_ptr_null(strstr(text, "peer=\"000000000000000a\""));
	ck_assert_double_eq(value_of(text, "r2ccl_failovers_total"), 3);
	/* every sample line's name has a TYPE line before it */
	for (char *p = text; *p; p = strchr(p, '\n') + 1) {
		if (*p != '#') {
			char name[128], want[160];
			size_t n = strcspn(p, "{ ");
			ck_assert_uint_lt(n, sizeof(name));
			memcpy(name, p, n);
			name[n] = 0;
			for (const char *suf = NULL; (suf = strstr(name, "_bucket")) ||
						     (suf = strstr(name, "_count")) ||
						     (suf = strstr(name, "_sum"));)
				name[suf - name] = 0;
			snprintf(want, sizeof(want), "# TYPE %s ", name);
			ck_assert_msg(strstr(text, want) && strstr(text, want) < p,
				      "no TYPE before %s", name);
			ck_assert(strncmp(name, "r2ccl_", 6) == 0);
		}
		if (!strchr(p, '\n'))
			break;
	}
	/* docs/operations.md's table lists every metric ("`name`") */
	const char *docs = getenv("R2CCL_OPERATIONS_MD");
	FILE *f = docs ? fopen(docs, "r") : NULL;
	ck_assert_msg(f, "R2CCL_OPERATIONS_MD (docs/operations.md) unreadable: %s",
		      docs ? docs : "(unset)");
	static char doc[1 << 20];
	size_t dn = fread(doc, 1, sizeof(doc) - 1, f);
	fclose(f);
	doc[dn] = 0;
	for (const char *p = strstr(text, "# TYPE "); p; p = strstr(p + 1, "# TYPE ")) {
		char name[128], want[132];
		ck_assert_int_eq(sscanf(p, "# TYPE %127s", name), 1);
		snprintf(want, sizeof(want), "`%s`", name);
		ck_assert_msg(strstr(doc, want), "%s is not in docs/operations.md", name);
	}
	/* and each family's type and labels are its row's (metrics_docs.py) */
	const char *checker = getenv("R2CCL_METRICS_DOCS");
	char path[] = "/tmp/r2ccl-metrics-render-XXXXXX", cmd[1024];
	int fd = mkstemp(path);
	ck_assert_int_ge(fd, 0);
	ck_assert_int_eq(write(fd, text, len), (ssize_t)len);
	close(fd);
	ck_assert_msg(checker && checker[0], "R2CCL_METRICS_DOCS (metrics_docs.py) is not set");
	snprintf(cmd, sizeof(cmd), "python3 '%s' '%s' '%s'", checker, docs, path);
	int rc = system(cmd);
	unlink(path);
	ck_assert_msg(rc == 0, "%s: the Metrics table of docs/operations.md differs", cmd);
	free(text);
	md_free(d);
}
END_TEST

int main(void)
{
	Suite *s = suite_create("metrics");
	TCase *t = tcase_create("metrics");
	SRunner *sr;
	int failed;

	tcase_add_test(t, test_path_counters);
	tcase_add_test(t, test_rail_usage);
	tcase_add_test(t, test_parse_listen);
	tcase_add_test(t, test_render);
	suite_add_tcase(s, t);
	sr = srunner_create(s);
	srunner_run_all(sr, CK_NORMAL);
	failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed ? 1 : 0;
}
