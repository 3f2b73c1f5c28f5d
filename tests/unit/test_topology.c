/* SPDX-License-Identifier: MIT */
/*
 * Topology discovery (daemon/base/topology.c) on lstopo XML fixtures, a fake
 * sysfs class/net tree and the live machine.
 *
 * Env: R2CCL_FIXTURES (tests/fixtures: the project's XML and a copy of a real
 * machine's, the JUWELS Booster node; a missing fixture fails its case).
 */
#include <check.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/topology.h"

#define DGX_XML "topology/dgx-2s-8gpu-8nic.xml"
#define ONE_XML "topology/1s-4gpu-4nic.xml"
#define JWB_XML "topology/juwels-booster-4xA100-4xHDR.xml"
#define ETH_XML "topology/1s-2gpu-3eth.xml"

static void fixture_path(char *buf, size_t len, const char *envname, const char *dflt,
			 const char *rel)
{
	const char *dir = getenv(envname);

	snprintf(buf, len, "%s/%s", dir && dir[0] ? dir : dflt, rel);
}

static struct r2_topology *load(const char *envname, const char *dflt, const char *rel)
{
	struct r2_topology *t = calloc(1, sizeof(*t));
	char path[PATH_MAX], err[256] = "";
	int ret;

	ck_assert_ptr_nonnull(t);
	fixture_path(path, sizeof(path), envname, dflt, rel);
	ret = r2_topology_discover(t, path, err, sizeof(err));
	ck_assert_msg(ret == 0, "discover %s: %d %s", path, ret, err);
	ck_assert(t->from_xml);
	return t;
}

static struct r2_topology *load_dgx(void)
{
	return load("R2CCL_FIXTURES", "tests/fixtures", DGX_XML);
}

static int count_kind(const struct r2_topology *t, enum r2_nic_kind k)
{
	int n = 0;

	for (int i = 0; i < t->nnics; i++)
		n += t->nics[i].kind == k;
	return n;
}

static int count_selected(const struct r2_topology *t)
{
	int n = 0;

	for (int i = 0; i < t->nnics; i++)
		n += t->nics[i].selected;
	return n;
}

static int nic(const struct r2_topology *t, const char *name)
{
	int i = r2_topology_nic_index(t, name);

	ck_assert_msg(i >= 0, "no NIC %s", name);
	return i;
}

static int gpu_by_pci(const struct r2_topology *t, const char *pci)
{
	for (int g = 0; g < t->ngpus; g++)
		if (!strcmp(t->gpus[g].pci, pci))
			return g;
	ck_abort_msg("no GPU at %s", pci);
	return -1;
}

/* ---- 8-GPU two-socket fixture --------------------------------------- */

START_TEST(dgx_counts)
{
	struct r2_topology *t = load_dgx();

	ck_assert_int_eq(t->nsockets, 2);
	ck_assert_int_eq(t->nnuma, 2);
	ck_assert_int_eq(t->ncores, 112);
	ck_assert_int_eq(t->ncpus, 224);
	ck_assert_int_eq(t->ngpus, 8);
	ck_assert_int_eq(t->nnics, 10);
	ck_assert_int_eq(count_kind(t, R2_NIC_RDMA), 8);
	ck_assert_int_eq(count_kind(t, R2_NIC_ETHERNET), 2);
	ck_assert_int_eq(count_kind(t, R2_NIC_VIRTUAL), 0);
	ck_assert_int_eq(t->gpus_dropped + t->nics_dropped, 0);
	for (int g = 0; g < 8; g++) {
		char name[16];

		snprintf(name, sizeof(name), "cuda%d", g);
		ck_assert_str_eq(t->gpus[g].name, name);
		ck_assert_int_eq(t->gpus[g].numa_node, g / 4);
	}
	for (int i = 0; i < 8; i++) {
		char name[16];
		const struct r2_topo_nic *n;

		snprintf(name, sizeof(name), "mlx5_%d", i);
		n = &t->nics[nic(t, name)];
		ck_assert_int_eq(n->kind, R2_NIC_RDMA);
		ck_assert_int_eq(n->port, 1);
		ck_assert_int_eq(n->numa_node, i / 4);
		ck_assert(n->up);
		ck_assert(!strncmp(n->netdev, "ibp", 3));
		ck_assert_int_eq(r2_topology_nic_index(t, n->netdev), nic(t, name));
		ck_assert_str_eq(n->addr, "");
	}
	/* netdevs of RDMA devices are not listed a second time */
	for (int i = 0; i < t->nnics; i++)
		ck_assert(strncmp(t->nics[i].name, "ibp", 3));
	ck_assert_int_eq(t->nics[nic(t, "enp5s0f0")].kind, R2_NIC_ETHERNET);
	ck_assert_int_eq(t->nics[nic(t, "enp5s0f0")].numa_node, 0);
	ck_assert_int_eq(t->nics[nic(t, "enp5s0f1")].port, -1);
	ck_assert_str_eq(t->nics[nic(t, "enp5s0f1")].pci, "0000:05:00.1");
	ck_assert_int_eq(r2_topology_nic_index(t, "lo"), -1);
	free(t);
}
END_TEST

START_TEST(dgx_distances)
{
	struct r2_topology *t = load_dgx();
	int eth = nic(t, "enp5s0f0");

	for (int g = 0; g < 8; g++) {
		for (int i = 0; i < 8; i++) {
			char name[16];
			int d;

			snprintf(name, sizeof(name), "mlx5_%d", i);
			d = t->gpu_nic_dist[g][nic(t, name)];
			if (i == g)
				ck_assert_int_eq(d, 3); /* down, up, down port of one switch */
			else if (i / 4 == g / 4)
				ck_assert_int_eq(d, R2_TOPO_DIST_PHB);
			else
				ck_assert_int_eq(d, R2_TOPO_DIST_SYS);
		}
		ck_assert_int_eq(t->gpu_nic_dist[g][eth],
				 g < 4 ? R2_TOPO_DIST_PHB : R2_TOPO_DIST_SYS);
	}
	ck_assert_int_lt(3, R2_TOPO_DIST_PHB);
	ck_assert_int_lt(R2_TOPO_DIST_PHB, R2_TOPO_DIST_SYS);
	free(t);
}
END_TEST

START_TEST(dgx_nearest)
{
	struct r2_topology *t = load_dgx();

	ck_assert_int_eq(r2_topology_nearest_nic(t, 0), -1); /* nothing selected yet */
	ck_assert_int_eq(r2_topology_select(t, ""), 8); /* the HCAs (default rule) */
	for (int g = 0; g < 8; g++) {
		int n = r2_topology_nearest_nic(t, g);
		char name[16];
		unsigned gbus, nbus;

		snprintf(name, sizeof(name), "mlx5_%d", g);
		ck_assert_int_ge(n, 0);
		ck_assert_str_eq(t->nics[n].name, name);
		/* under the same switch: the NIC sits on the bus after the GPU's */
		ck_assert_int_eq(sscanf(t->gpus[g].pci, "0000:%x:", &gbus), 1);
		ck_assert_int_eq(sscanf(t->nics[n].pci, "0000:%x:", &nbus), 1);
		ck_assert_uint_eq(nbus, gbus + 1);
		ck_assert_int_eq(t->nics[n].numa_node, t->gpus[g].numa_node);
	}
	ck_assert_int_eq(r2_topology_nearest_nic(t, 8), -1);
	ck_assert_int_eq(r2_topology_nearest_nic(t, -1), -1);
	free(t);
}
END_TEST

START_TEST(dgx_filter)
{
	struct r2_topology *t = load_dgx();
	int n;

	ck_assert_int_eq(r2_topology_select(t, "mlx5"), 8);
	for (int i = 0; i < t->nnics; i++)
		ck_assert(t->nics[i].selected == (t->nics[i].kind == R2_NIC_RDMA));

	ck_assert_int_eq(r2_topology_select(t, "^mlx5_7"), 9);
	ck_assert(!t->nics[nic(t, "mlx5_7")].selected);
	ck_assert(t->nics[nic(t, "enp5s0f0")].selected);
	/* GPU 7 falls back to a NIC of its own socket, through the host bridge */
	n = r2_topology_nearest_nic(t, 7);
	ck_assert_int_ge(n, 0);
	ck_assert_int_eq(t->nics[n].kind, R2_NIC_RDMA);
	ck_assert_int_eq(t->nics[n].numa_node, 1);
	ck_assert_int_eq(t->gpu_nic_dist[7][n], R2_TOPO_DIST_PHB);
	ck_assert_str_eq(t->nics[r2_topology_nearest_nic(t, 6)].name, "mlx5_6");

	ck_assert_int_eq(r2_topology_select(t, "=mlx5_0,mlx5_1"), 2);
	ck_assert(t->nics[nic(t, "mlx5_0")].selected && t->nics[nic(t, "mlx5_1")].selected);
	ck_assert_int_eq(count_selected(t), 2);
	ck_assert_str_eq(t->nics[r2_topology_nearest_nic(t, 1)].name, "mlx5_1");
	n = r2_topology_nearest_nic(t, 5); /* the other socket: SYS either way */
	ck_assert_int_eq(t->gpu_nic_dist[5][n], R2_TOPO_DIST_SYS);

	ck_assert_int_eq(r2_topology_select(t, "=mlx5"), 0);
	ck_assert_int_eq(r2_topology_nearest_nic(t, 0), -1);

	ck_assert_int_eq(r2_topology_select(t, "mlx5_3:1"), 1);
	ck_assert(t->nics[nic(t, "mlx5_3")].selected);
	ck_assert_int_eq(r2_topology_select(t, "mlx5_3:2"), 0);

	/* netdev names work too (NCCL_SOCKET_IFNAME style) */
	ck_assert_int_eq(r2_topology_select(t, "enp"), 2);
	ck_assert_int_eq(r2_topology_select(t, "=ibp20s0"), 1);
	ck_assert(t->nics[nic(t, "mlx5_0")].selected);
	ck_assert_int_eq(r2_topology_select(t, "^ibp,enp"), 0);

	ck_assert_int_eq(r2_topology_select(t, "mlx5_0,,mlx5_1"), -EINVAL);

	/* default: every RDMA NIC that is up */
	t->nics[nic(t, "mlx5_5")].up = false;
	ck_assert_int_eq(r2_topology_select(t, NULL), 7);
	ck_assert(!t->nics[nic(t, "mlx5_5")].selected);
	ck_assert_str_eq(t->nics[nic(t, "mlx5_5")].why, "down");
	/* an explicit filter selects it anyway */
	ck_assert_int_eq(r2_topology_select(t, "=mlx5_5"), 1);
	ck_assert_str_eq(t->nics[nic(t, "mlx5_5")].why, "named in rails");
	free(t);
}
END_TEST

/* ---- 4-GPU single-socket fixture: two GPUs and two NICs per leaf switch - */

START_TEST(one_socket_spread)
{
	struct r2_topology *t = load("R2CCL_FIXTURES", "tests/fixtures", ONE_XML);

	ck_assert_int_eq(t->nsockets, 1);
	ck_assert_int_eq(t->nnuma, 1);
	ck_assert_int_eq(t->ngpus, 4);
	ck_assert_int_eq(count_kind(t, R2_NIC_RDMA), 4);
	ck_assert_int_eq(count_kind(t, R2_NIC_ETHERNET), 1);
	for (int g = 0; g < 4; g++) {
		for (int i = 0; i < 4; i++) {
			char name[16];

			snprintf(name, sizeof(name), "mlx5_%d", i);
			/* same leaf switch: 3 bridges; via the top switch: 7 */
			ck_assert_int_eq(t->gpu_nic_dist[g][nic(t, name)], g / 2 == i / 2 ? 3 : 7);
		}
		ck_assert_int_eq(t->gpus[g].numa_node, 0);
	}
	ck_assert_int_eq(r2_topology_select(t, NULL), 4); /* the HCAs, not eno1 */
	ck_assert(!t->nics[nic(t, "eno1")].selected);
	/* GPUs sharing two equally near NICs get one each */
	for (int g = 0; g < 4; g++) {
		char name[16];

		snprintf(name, sizeof(name), "mlx5_%d", g);
		ck_assert_str_eq(t->nics[r2_topology_nearest_nic(t, g)].name, name);
	}
	/* Ethernet only: all at the same distance, spread over the one port */
	ck_assert_int_eq(r2_topology_select(t, "eno"), 1);
	ck_assert_str_eq(t->nics[r2_topology_nearest_nic(t, 3)].name, "eno1");
	free(t);
}
END_TEST

/* ---- a real machine: JUWELS Booster node (tests/fixtures/topology/README.md) -------------- */

START_TEST(juwels_booster)
{
	static const struct {
		const char *pci;
		int numa;
		const char *nic;
	} truth[] = {
		/* from lstopo --input: each A100 shares a PEX switch with one HDR HCA */
		{ "0000:03:00.0", 3, "mlx5_1" },
		{ "0000:44:00.0", 1, "mlx5_0" },
		{ "0000:84:00.0", 7, "mlx5_3" },
		{ "0000:c4:00.0", 5, "mlx5_2" },
	};
	struct r2_topology *t;

	/* a copy of the shared fixture lives in tests/fixtures: a missing file
	 * fails here (load() asserts), it is never a silent pass */
	t = load("R2CCL_FIXTURES", "tests/fixtures", JWB_XML);
	ck_assert_int_eq(t->nsockets, 2);
	ck_assert_int_eq(t->nnuma, 8);
	ck_assert_int_eq(t->ncores, 48);
	ck_assert_int_eq(t->ncpus, 96);
	/* 4 A100 (10de:20b0, no CUDA OS devices); the ASPEED VGA is no GPU */
	ck_assert_int_eq(t->ngpus, 4);
	ck_assert_int_eq(count_kind(t, R2_NIC_RDMA), 4);
	ck_assert_int_eq(count_kind(t, R2_NIC_ETHERNET), 2);
	ck_assert_int_eq(t->nics[nic(t, "enp225s0f0")].numa_node, 4);
	for (int i = 0; i < 4; i++) {
		char name[16], ib[16];
		int n;

		snprintf(name, sizeof(name), "mlx5_%d", i);
		snprintf(ib, sizeof(ib), "ib%d", i);
		n = nic(t, name);
		ck_assert_str_eq(t->nics[n].netdev, ib);
	}
	ck_assert_int_eq(r2_topology_select(t, "mlx5"), 4);
	for (size_t k = 0; k < sizeof(truth) / sizeof(truth[0]); k++) {
		int g = gpu_by_pci(t, truth[k].pci), n = nic(t, truth[k].nic);

		ck_assert_int_eq(t->gpus[g].numa_node, truth[k].numa);
		ck_assert_int_eq(t->nics[n].numa_node, truth[k].numa);
		ck_assert_int_eq(r2_topology_nearest_nic(t, g), n);
		ck_assert_int_eq(t->gpu_nic_dist[g][n], 3);
		/* every other HCA is on another NUMA node */
		for (int o = 0; o < t->nnics; o++)
			if (o != n)
				ck_assert_int_eq(t->gpu_nic_dist[g][o], R2_TOPO_DIST_SYS);
	}
	free(t);
}
END_TEST

/* ---- the default rails (NCCL's rule) ------------------------------------ */

static int count_selected_kind(const struct r2_topology *t, enum r2_nic_kind k)
{
	int n = 0;

	for (int i = 0; i < t->nnics; i++)
		n += t->nics[i].selected && t->nics[i].kind == k;
	return n;
}

/* RDMA + Ethernet: the Ethernet ports are left out unless rails names them. */
START_TEST(default_rails_rdma_host)
{
	struct r2_topology *t = load_dgx();

	ck_assert_int_eq(r2_topology_select(t, NULL), 8);
	ck_assert_int_eq(count_selected_kind(t, R2_NIC_RDMA), 8);
	ck_assert(!t->nics[nic(t, "enp5s0f0")].selected);
	ck_assert(!t->nics[nic(t, "enp5s0f1")].selected);
	ck_assert_str_eq(t->nics[nic(t, "enp5s0f0")].why,
			 "not RDMA on a host with RDMA NICs (name it in rails to use it)");
	ck_assert_str_eq(t->nics[nic(t, "mlx5_0")].why, "RDMA, up");
	/* named in rails: included, beside the HCAs named too */
	ck_assert_int_eq(r2_topology_select(t, "mlx5,enp5s0f0"), 9);
	ck_assert(t->nics[nic(t, "enp5s0f0")].selected);
	ck_assert(!t->nics[nic(t, "enp5s0f1")].selected);
	ck_assert_str_eq(t->nics[nic(t, "enp5s0f1")].why, "not named in rails");
	/* or alone */
	ck_assert_int_eq(r2_topology_select(t, "enp"), 2);
	ck_assert_int_eq(count_selected_kind(t, R2_NIC_RDMA), 0);
	/* a negated filter starts from every NIC, Ethernet included */
	ck_assert_int_eq(r2_topology_select(t, "^mlx5_0"), 9);
	ck_assert(t->nics[nic(t, "enp5s0f1")].selected);
	ck_assert_str_eq(t->nics[nic(t, "mlx5_0")].why, "excluded by rails");
	/* every HCA down: the host has no RDMA NIC to use, Ethernet is the rails */
	for (int i = 0; i < t->nnics; i++)
		if (t->nics[i].kind == R2_NIC_RDMA)
			t->nics[i].up = false;
	ck_assert_int_eq(r2_topology_select(t, NULL), 2);
	ck_assert(t->nics[nic(t, "enp5s0f0")].selected && t->nics[nic(t, "enp5s0f1")].selected);
	ck_assert_str_eq(t->nics[nic(t, "enp5s0f0")].why, "up, no RDMA NIC on this host");
	/* HCAs up but without a netdev: no rail can run on them, Ethernet is the rails */
	for (int i = 0; i < t->nnics; i++)
		if (t->nics[i].kind == R2_NIC_RDMA) {
			t->nics[i].up = true;
			t->nics[i].netdev[0] = '\0';
		}
	ck_assert_int_eq(r2_topology_select(t, NULL), 2);
	ck_assert_str_eq(t->nics[nic(t, "mlx5_0")].why,
			 "RDMA without a netdev (no address for a rail)");
	t->nics[nic(t, "mlx5_3")].netdev[0] = 'x'; /* one with a netdev again */
	ck_assert_int_eq(r2_topology_select(t, NULL), 1);
	ck_assert(t->nics[nic(t, "mlx5_3")].selected);
	free(t);

	/* the real machine of the issue: JUWELS' management Ethernet is no rail */
	t = load("R2CCL_FIXTURES", "tests/fixtures", JWB_XML);
	ck_assert_int_eq(r2_topology_select(t, ""), 4);
	ck_assert_int_eq(count_selected_kind(t, R2_NIC_RDMA), 4);
	ck_assert_int_eq(count_selected_kind(t, R2_NIC_ETHERNET), 0);
	ck_assert(!t->nics[nic(t, "enp225s0f0")].selected);
	ck_assert_int_eq(r2_topology_select(t, "mlx5,enp225s0f0"), 5);
	ck_assert(t->nics[nic(t, "enp225s0f0")].selected);
	free(t);
}
END_TEST

/* Ethernet only: every Ethernet NIC that is up is a rail. */
START_TEST(default_rails_ethernet_host)
{
	struct r2_topology *t = load("R2CCL_FIXTURES", "tests/fixtures", ETH_XML);

	ck_assert_int_eq(t->ngpus, 2);
	ck_assert_int_eq(t->nnics, 3);
	ck_assert_int_eq(count_kind(t, R2_NIC_RDMA), 0);
	ck_assert_int_eq(r2_topology_select(t, NULL), 3);
	for (int i = 0; i < t->nnics; i++) {
		ck_assert(t->nics[i].selected);
		ck_assert_str_eq(t->nics[i].why, "up, no RDMA NIC on this host");
	}
	/* each GPU gets the port beside it, under its switch */
	ck_assert_str_eq(t->nics[r2_topology_nearest_nic(t, 0)].name, "enp19s0");
	ck_assert_str_eq(t->nics[r2_topology_nearest_nic(t, 1)].name, "enp35s0");
	ck_assert_int_eq(t->gpu_nic_dist[0][nic(t, "enp19s0")], 3);
	/* a port down is left out, and its GPU falls back to another */
	t->nics[nic(t, "enp19s0")].up = false;
	ck_assert_int_eq(r2_topology_select(t, NULL), 2);
	ck_assert_str_eq(t->nics[nic(t, "enp19s0")].why, "down");
	ck_assert_int_ge(r2_topology_nearest_nic(t, 0), 0);
	ck_assert_str_ne(t->nics[r2_topology_nearest_nic(t, 0)].name, "enp19s0");
	/* the management port can be left out by name */
	t->nics[nic(t, "enp19s0")].up = true;
	ck_assert_int_eq(r2_topology_select(t, "^eno"), 2);
	ck_assert(!t->nics[nic(t, "eno1")].selected);
	free(t);
}
END_TEST

/* ---- errors ------------------------------------------------------------ */

START_TEST(bad_xml)
{
	struct r2_topology *t = calloc(1, sizeof(*t));
	char path[] = "/tmp/r2topo-bad-XXXXXX", err[256] = "";
	int fd, ret;

	ck_assert_ptr_nonnull(t);
	ret = r2_topology_discover(t, "/nonexistent/topo.xml", err, sizeof(err));
	ck_assert_int_eq(ret, -ENOENT);
	ck_assert(err[0]);
	fd = mkstemp(path);
	ck_assert_int_ge(fd, 0);
	ck_assert_int_eq(write(fd, "not xml at all\n", 15), 15);
	close(fd);
	err[0] = '\0';
	ret = r2_topology_discover(t, path, err, sizeof(err));
	unlink(path);
	ck_assert_int_lt(ret, 0);
	ck_assert(err[0]);
	free(t);
}
END_TEST

/* ---- fake sysfs class/net ---------------------------------------------- */

static void put(const char *root, const char *rel, const char *val)
{
	char path[PATH_MAX];
	FILE *f;

	snprintf(path, sizeof(path), "%s/%s", root, rel);
	f = fopen(path, "w");
	ck_assert_msg(f != NULL, "fopen %s", path);
	fputs(val, f);
	fclose(f);
}

static void mk(const char *root, const char *rel)
{
	char path[PATH_MAX];

	snprintf(path, sizeof(path), "%s/%s", root, rel);
	ck_assert_msg(mkdir(path, 0755) == 0, "mkdir %s", path);
}

static void netdev(const char *root, const char *name, const char *state, const char *mtu)
{
	char rel[256];

	mk(root, name);
	snprintf(rel, sizeof(rel), "%s/operstate", name);
	put(root, rel, state);
	snprintf(rel, sizeof(rel), "%s/mtu", name);
	put(root, rel, mtu);
}

START_TEST(fake_sysfs)
{
	struct r2_topology *t = load_dgx();
	char root[] = "/tmp/r2topo-sys-XXXXXX", net[PATH_MAX], link[PATH_MAX], err[256] = "";
	const struct r2_topo_nic *n;
	char cmd[PATH_MAX + 16];

	ck_assert_ptr_nonnull(mkdtemp(root));
	snprintf(net, sizeof(net), "%s/net", root);
	mk(root, "net");
	mk(root, "pci0000:5d");
	mk(root, "pci0000:5d/0000:5e:00.0");
	put(root, "pci0000:5d/0000:5e:00.0/numa_node", "1\n");

	netdev(net, "lo", "unknown\n", "65536\n");
	netdev(net, "br0", "up\n", "1500\n");
	mk(net, "br0/bridge");
	netdev(net, "veth1a2b", "up\n", "9000\n");
	put(net, "veth1a2b/speed", "10000\n");
	netdev(net, "dummy0", "unknown\n", "1500\n");
	put(net, "dummy0/flags", "0x1083\n");
	put(net, "dummy0/carrier", "1\n");
	netdev(net, "down0", "down\n", "1500\n");
	netdev(net, "eth7", "up\n", "1500\n");
	put(net, "eth7/speed", "25000\n");
	snprintf(link, sizeof(link), "%s/pci0000:5d/0000:5e:00.0", root);
	snprintf(cmd, sizeof(cmd), "%s/eth7/device", net);
	ck_assert_int_eq(symlink(link, cmd), 0);
	/* the netdev of mlx5_0, found by hwloc, is down */
	netdev(net, "ibp20s0", "down\n", "4092\n");

	ck_assert_int_eq(r2_topology_scan_netdevs(t, net, err, sizeof(err)), 0);
	ck_assert_int_eq(t->nnics, 15);
	ck_assert_int_eq(r2_topology_nic_index(t, "lo"), -1);
	ck_assert_int_eq(count_kind(t, R2_NIC_VIRTUAL), 4);

	n = &t->nics[nic(t, "mlx5_0")];
	ck_assert(!n->up);
	ck_assert_uint_eq(n->mtu, 4092);
	n = &t->nics[nic(t, "br0")];
	ck_assert(n->bridge && n->up);
	ck_assert_int_eq(n->kind, R2_NIC_VIRTUAL);
	ck_assert_int_eq(n->numa_node, -1);
	ck_assert_int_eq(t->gpu_nic_dist[0][nic(t, "br0")], -1);
	n = &t->nics[nic(t, "veth1a2b")];
	ck_assert(n->up && !n->bridge);
	ck_assert_uint_eq(n->speed_mbps, 10000);
	ck_assert_uint_eq(n->mtu, 9000);
	ck_assert(t->nics[nic(t, "dummy0")].up);
	ck_assert(!t->nics[nic(t, "down0")].up);
	n = &t->nics[nic(t, "eth7")];
	ck_assert_int_eq(n->kind, R2_NIC_ETHERNET);
	ck_assert_str_eq(n->pci, "0000:5e:00.0");
	ck_assert_int_eq(n->numa_node, 1);
	ck_assert_uint_eq(n->speed_mbps, 25000);

	/* default on an RDMA host: the 7 HCAs up; no X710, veth, dummy, eth7 */
	ck_assert_int_eq(r2_topology_select(t, ""), 7);
	ck_assert(!t->nics[nic(t, "eth7")].selected);
	ck_assert(!t->nics[nic(t, "veth1a2b")].selected);
	ck_assert(!t->nics[nic(t, "br0")].selected);
	ck_assert(!t->nics[nic(t, "down0")].selected);
	ck_assert(!t->nics[nic(t, "mlx5_0")].selected);
	/* GPU 0 loses its switch-local NIC: falls back to the host bridge */
	ck_assert_int_eq(t->gpu_nic_dist[0][r2_topology_nearest_nic(t, 0)], R2_TOPO_DIST_PHB);
	/* a bridge can be asked for by name */
	ck_assert_int_eq(r2_topology_select(t, "br"), 1);
	ck_assert(t->nics[nic(t, "br0")].selected);
	/* only unknown distances: still a NIC */
	ck_assert_str_eq(t->nics[r2_topology_nearest_nic(t, 0)].name, "br0");

	snprintf(cmd, sizeof(cmd), "rm -rf %s", root);
	ck_assert_int_eq(system(cmd), 0);
	ck_assert_int_eq(r2_topology_scan_netdevs(t, net, err, sizeof(err)), -ENOENT);
	ck_assert(err[0]);
	free(t);
}
END_TEST

/* Ethernet only, with the netdevs a live host adds: loopback (never
 * listed), down, a bridge and its port, a bond with a port of its own, a
 * VLAN on the bond, a veth. */
START_TEST(default_rails_virtual)
{
	struct r2_topology *t = load("R2CCL_FIXTURES", "tests/fixtures", ETH_XML);
	char root[] = "/tmp/r2topo-eth-XXXXXX", net[PATH_MAX], path[PATH_MAX + 16], err[256] = "";
	char cmd[PATH_MAX + 16];
	static const char *const rails[] = { "eno1", "enp35s0", "bond0", "bond0.100", "veth0" };
	static const char *const not_rails[] = { "enp19s0", "down0", "br0", "vethbr" };

	ck_assert_ptr_nonnull(mkdtemp(root));
	snprintf(net, sizeof(net), "%s/net", root);
	mk(root, "net");
	netdev(net, "lo", "unknown\n", "65536\n");
	put(net, "lo/type", "772\n");
	netdev(net, "eno1", "up\n", "1500\n");
	netdev(net, "enp35s0", "up\n", "9000\n");
	netdev(net, "enp19s0", "up\n", "9000\n");
	netdev(net, "bond0", "up\n", "9000\n");
	mk(net, "bond0/bonding");
	snprintf(path, sizeof(path), "%s/bond0", net);
	snprintf(cmd, sizeof(cmd), "%s/enp19s0/master", net);
	ck_assert_int_eq(symlink(path, cmd), 0);
	netdev(net, "bond0.100", "up\n", "9000\n");
	netdev(net, "veth0", "up\n", "1500\n");
	netdev(net, "down0", "down\n", "1500\n");
	netdev(net, "br0", "up\n", "1500\n");
	mk(net, "br0/bridge");
	netdev(net, "vethbr", "up\n", "1500\n");
	snprintf(path, sizeof(path), "%s/br0", net);
	snprintf(cmd, sizeof(cmd), "%s/vethbr/master", net);
	ck_assert_int_eq(symlink(path, cmd), 0);

	ck_assert_int_eq(r2_topology_scan_netdevs(t, net, err, sizeof(err)), 0);
	ck_assert_int_eq(r2_topology_nic_index(t, "lo"), -1);
	ck_assert_int_eq(t->nnics, 9);
	ck_assert_int_eq(count_kind(t, R2_NIC_VIRTUAL), 6);
	ck_assert(t->nics[nic(t, "enp19s0")].port_of_master);
	ck_assert_int_eq(r2_topology_select(t, NULL), 5);
	for (size_t i = 0; i < sizeof(rails) / sizeof(rails[0]); i++)
		ck_assert_msg(t->nics[nic(t, rails[i])].selected, "%s is no rail", rails[i]);
	for (size_t i = 0; i < sizeof(not_rails) / sizeof(not_rails[0]); i++)
		ck_assert_msg(!t->nics[nic(t, not_rails[i])].selected, "%s is a rail",
			      not_rails[i]);
	ck_assert_str_eq(t->nics[nic(t, "enp19s0")].why,
			 "a port of a bond or bridge (its master is the rail)");
	ck_assert_str_eq(t->nics[nic(t, "br0")].why, "a bridge (name it in rails to use it)");
	ck_assert_str_eq(t->nics[nic(t, "down0")].why, "down");
	/* named, a bond's port is a rail all the same */
	ck_assert_int_eq(r2_topology_select(t, "=enp19s0,vethbr"), 2);

	snprintf(cmd, sizeof(cmd), "rm -rf %s", root);
	ck_assert_int_eq(system(cmd), 0);
	free(t);
}
END_TEST

/* ---- the live machine -------------------------------------------------- */

START_TEST(live)
{
	struct r2_topology *t = calloc(1, sizeof(*t));
	char err[256] = "";
	DIR *d;
	struct dirent *de;
	int ret;

	ck_assert_ptr_nonnull(t);
	ret = r2_topology_discover(t, NULL, err, sizeof(err));
	ck_assert_msg(ret == 0, "live discover: %d %s", ret, err);
	ck_assert(!t->from_xml);
	ck_assert_int_ge(t->ncpus, 1);
	ck_assert_int_ge(t->ncores, 1);
	ck_assert_int_ge(t->nnuma, 1);
	ck_assert_int_eq(r2_topology_nic_index(t, "lo"), -1);
	for (int i = 0; i < t->nnics; i++) {
		const struct r2_topo_nic *n = &t->nics[i];

		ck_assert(n->name[0]);
		if (n->kind == R2_NIC_VIRTUAL) {
			ck_assert_int_eq(n->numa_node, -1);
			ck_assert_str_eq(n->pci, "");
			for (int g = 0; g < t->ngpus; g++)
				ck_assert_int_eq(t->gpu_nic_dist[g][i], -1);
		}
	}
	/* every netdev but lo is listed (unless there are too many) */
	d = opendir("/sys/class/net");
	if (d && !t->nics_dropped) {
		while ((de = readdir(d)))
			if (de->d_name[0] != '.' && strcmp(de->d_name, "lo"))
				ck_assert_msg(r2_topology_nic_index(t, de->d_name) >= 0,
					      "netdev %s missing", de->d_name);
	}
	if (d)
		closedir(d);
	ret = r2_topology_select(t, NULL);
	ck_assert_int_ge(ret, 0);
	for (int i = 0; i < t->nnics; i++)
		ck_assert(!t->nics[i].selected || (t->nics[i].up && !t->nics[i].bridge &&
						   !t->nics[i].port_of_master));
	free(t);
}
END_TEST

static Suite *topology_suite(void)
{
	Suite *s = suite_create("topology");
	TCase *xml = tcase_create("xml");
	TCase *sys = tcase_create("sysfs");

	tcase_add_test(xml, dgx_counts);
	tcase_add_test(xml, dgx_distances);
	tcase_add_test(xml, dgx_nearest);
	tcase_add_test(xml, dgx_filter);
	tcase_add_test(xml, one_socket_spread);
	tcase_add_test(xml, juwels_booster);
	tcase_add_test(xml, default_rails_rdma_host);
	tcase_add_test(xml, default_rails_ethernet_host);
	tcase_add_test(xml, bad_xml);
	suite_add_tcase(s, xml);
	tcase_add_test(sys, fake_sysfs);
	tcase_add_test(sys, default_rails_virtual);
	tcase_add_test(sys, live);
	suite_add_tcase(s, sys);
	return s;
}

int main(void)
{
	SRunner *sr = srunner_create(topology_suite());
	int failed;

	srunner_set_fork_status(sr, CK_FORK);
	srunner_run_all(sr, CK_NORMAL);
	failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
