/* SPDX-License-Identifier: MIT */
/*
 * Host topology discovery with hwloc 2.x (see topology.h).
 *
 * GPUs: PCI devices of class 0x03xx from NVIDIA or AMD, or PCI devices
 * carrying a CUDA/NVML/RSMI OS device (and such OS devices without a PCI
 * parent). NICs: OpenFabrics OS devices (RDMA, linked to the Network OS
 * device under the same PCI device) and the remaining Network OS devices
 * (Ethernet); on the live machine also every other netdev of sysfs.
 */
#include "base/topology.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <ifaddrs.h>
#include <limits.h>
#include <netinet/in.h>
#include <arpa/inet.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <hwloc.h>

#include "nicfilter.h"
#include "util.h"

#define PCI_VENDOR_NVIDIA 0x10de
#define PCI_VENDOR_AMD 0x1002
#define IFF_UP_FLAG 0x1
#define ARPHRD_LOOPBACK_TYPE 772

struct gpu_tmp {
	struct r2_topo_gpu gpu;
	hwloc_obj_t obj; /* PCI device, or the OS device when it has none */
};

struct nic_tmp {
	struct r2_topo_nic nic;
	hwloc_obj_t obj;
};

struct disc {
	struct gpu_tmp gpus[R2_TOPO_MAX_GPUS];
	struct nic_tmp nics[R2_TOPO_MAX_NICS];
	int ngpus, nnics;
};

static void copy_str(char *dst, size_t len, const char *src)
{
	snprintf(dst, len, "%s", src ? src : "");
}

const char *r2_nic_kind_name(enum r2_nic_kind k)
{
	switch (k) {
	case R2_NIC_ETHERNET:
		return "ethernet";
	case R2_NIC_RDMA:
		return "rdma";
	case R2_NIC_VIRTUAL:
		return "virtual";
	}
	return "unknown";
}

/* ---- hwloc helpers ---------------------------------------------------- */

static hwloc_obj_t pci_ancestor(hwloc_obj_t obj)
{
	for (; obj; obj = obj->parent)
		if (obj->type == HWLOC_OBJ_PCI_DEVICE)
			return obj;
	return NULL;
}

static void pci_busid(hwloc_obj_t pci, char *buf, size_t len)
{
	if (!pci || pci->type != HWLOC_OBJ_PCI_DEVICE) {
		copy_str(buf, len, "");
		return;
	}
	snprintf(buf, len, "%04x:%02x:%02x.%01x", pci->attr->pcidev.domain, pci->attr->pcidev.bus,
		 pci->attr->pcidev.dev, pci->attr->pcidev.func);
}

/* The NUMA node local to obj: the single node of its CPU-side ancestor's
 * nodeset, -1 when there is none or several. */
static int obj_numa(hwloc_topology_t topo, hwloc_obj_t obj)
{
	hwloc_obj_t anc = hwloc_get_non_io_ancestor_obj(topo, obj);

	if (!anc || !anc->nodeset || hwloc_bitmap_weight(anc->nodeset) != 1)
		return -1;
	return hwloc_bitmap_first(anc->nodeset);
}

static bool is_gpu_osdev(hwloc_obj_t o)
{
	if (o->type != HWLOC_OBJ_OS_DEVICE || !o->name)
		return false;
	if (o->attr->osdev.type != HWLOC_OBJ_OSDEV_GPU &&
	    o->attr->osdev.type != HWLOC_OBJ_OSDEV_COPROC)
		return false;
	return !strncmp(o->name, "cuda", 4) || !strncmp(o->name, "nvml", 4) ||
	       !strncmp(o->name, "rsmi", 4);
}

/* Preferred GPU OS device under pci: cuda, then nvml, then rsmi. */
static hwloc_obj_t gpu_osdev_of(hwloc_obj_t pci)
{
	static const char *const pref[] = { "cuda", "nvml", "rsmi" };
	hwloc_obj_t c;

	for (size_t p = 0; p < sizeof(pref) / sizeof(pref[0]); p++)
		for (c = pci->io_first_child; c; c = c->next_sibling)
			if (is_gpu_osdev(c) && !strncmp(c->name, pref[p], 4))
				return c;
	return NULL;
}

static void add_gpu(hwloc_topology_t topo, struct r2_topology *t, struct disc *d, hwloc_obj_t obj,
		    hwloc_obj_t osdev)
{
	struct gpu_tmp *g;

	for (int i = 0; i < d->ngpus; i++)
		if (d->gpus[i].obj == obj)
			return;
	if (d->ngpus >= R2_TOPO_MAX_GPUS) {
		t->gpus_dropped++;
		return;
	}
	g = &d->gpus[d->ngpus++];
	g->obj = obj;
	if (osdev)
		copy_str(g->gpu.name, sizeof(g->gpu.name), osdev->name);
	pci_busid(obj, g->gpu.pci, sizeof(g->gpu.pci));
	g->gpu.numa_node = obj_numa(topo, obj);
}

static void find_gpus(hwloc_topology_t topo, struct r2_topology *t, struct disc *d)
{
	hwloc_obj_t o;

	for (o = hwloc_get_next_pcidev(topo, NULL); o; o = hwloc_get_next_pcidev(topo, o)) {
		unsigned vendor = o->attr->pcidev.vendor_id;
		bool cls = (o->attr->pcidev.class_id >> 8) == 0x03;
		hwloc_obj_t os = gpu_osdev_of(o);

		if (os || (cls && (vendor == PCI_VENDOR_NVIDIA || vendor == PCI_VENDOR_AMD)))
			add_gpu(topo, t, d, o, os);
	}
	/* CUDA/RSMI devices hwloc could not attach to a PCI device; NVML ones
	 * only when there are none (nvmlN duplicates cudaN). */
	for (int pass = 0; pass < 2; pass++) {
		int before = d->ngpus;

		for (o = hwloc_get_next_osdev(topo, NULL); o; o = hwloc_get_next_osdev(topo, o)) {
			if (!is_gpu_osdev(o) || pci_ancestor(o))
				continue;
			if (!strncmp(o->name, "nvml", 4) != (pass == 1))
				continue;
			add_gpu(topo, t, d, o, o);
		}
		if (d->ngpus > before)
			break;
	}
}

static struct nic_tmp *add_nic(struct r2_topology *t, struct disc *d)
{
	struct nic_tmp *n;

	if (d->nnics >= R2_TOPO_MAX_NICS) {
		t->nics_dropped++;
		return NULL;
	}
	n = &d->nics[d->nnics++];
	memset(n, 0, sizeof(*n));
	n->nic.numa_node = -1;
	n->nic.port = -1;
	return n;
}

static bool nic_listed(const struct disc *d, const char *name)
{
	for (int i = 0; i < d->nnics; i++)
		if (!strcmp(d->nics[i].nic.name, name) || !strcmp(d->nics[i].nic.netdev, name))
			return true;
	return false;
}

static void find_nics(hwloc_topology_t topo, struct r2_topology *t, struct disc *d)
{
	hwloc_obj_t o;
	struct nic_tmp *n;

	/* RDMA devices first, so that their netdevs get linked to them. */
	for (o = hwloc_get_next_osdev(topo, NULL); o; o = hwloc_get_next_osdev(topo, o)) {
		hwloc_obj_t pci, net;

		if (o->attr->osdev.type != HWLOC_OBJ_OSDEV_OPENFABRICS || !o->name)
			continue;
		if (nic_listed(d, o->name) || !(n = add_nic(t, d)))
			continue;
		pci = pci_ancestor(o);
		n->obj = pci ? pci : o;
		n->nic.kind = R2_NIC_RDMA;
		n->nic.port = 1;
		copy_str(n->nic.name, sizeof(n->nic.name), o->name);
		/* The first netdev under the same PCI device not linked yet. */
		for (net = pci ? pci->io_first_child : NULL; net; net = net->next_sibling) {
			if (net->type != HWLOC_OBJ_OS_DEVICE ||
			    net->attr->osdev.type != HWLOC_OBJ_OSDEV_NETWORK || !net->name ||
			    nic_listed(d, net->name))
				continue;
			copy_str(n->nic.netdev, sizeof(n->nic.netdev), net->name);
			break;
		}
		pci_busid(pci, n->nic.pci, sizeof(n->nic.pci));
		n->nic.numa_node = obj_numa(topo, o);
		n->nic.up = true;
	}
	for (o = hwloc_get_next_osdev(topo, NULL); o; o = hwloc_get_next_osdev(topo, o)) {
		hwloc_obj_t pci;

		if (o->attr->osdev.type != HWLOC_OBJ_OSDEV_NETWORK || !o->name ||
		    !strcmp(o->name, "lo"))
			continue;
		if (nic_listed(d, o->name) || !(n = add_nic(t, d)))
			continue;
		pci = pci_ancestor(o);
		n->obj = pci ? pci : o;
		n->nic.kind = R2_NIC_ETHERNET;
		copy_str(n->nic.name, sizeof(n->nic.name), o->name);
		pci_busid(pci, n->nic.pci, sizeof(n->nic.pci));
		n->nic.numa_node = obj_numa(topo, o);
		n->nic.up = true;
	}
}

/* Number of PCI bridges (host bridge included) on the path a..lca..b when
 * the lowest common ancestor is an I/O object; PHB or SYS otherwise. */
static int pci_dist(hwloc_topology_t topo, hwloc_obj_t a, hwloc_obj_t b)
{
	hwloc_obj_t anc[64], lca = NULL, na, nb;
	int nanc = 0, hops = 0;

	if (!a || !b)
		return -1;
	if (a == b)
		return 0;
	for (hwloc_obj_t o = a; o && nanc < 64; o = o->parent)
		anc[nanc++] = o;
	for (hwloc_obj_t o = b; o && !lca; o = o->parent)
		for (int i = 0; i < nanc; i++)
			if (anc[i] == o) {
				lca = o;
				break;
			}
	if (lca && hwloc_obj_type_is_io(lca->type)) {
		for (hwloc_obj_t o = a->parent; o && o != lca; o = o->parent)
			hops += o->type == HWLOC_OBJ_BRIDGE;
		for (hwloc_obj_t o = b->parent; o && o != lca; o = o->parent)
			hops += o->type == HWLOC_OBJ_BRIDGE;
		hops += lca->type == HWLOC_OBJ_BRIDGE;
		if (hops < 1)
			hops = 1;
		return hops < R2_TOPO_DIST_PHB ? hops : R2_TOPO_DIST_PHB - 1;
	}
	na = hwloc_get_non_io_ancestor_obj(topo, a);
	nb = hwloc_get_non_io_ancestor_obj(topo, b);
	if (na && nb && na->nodeset && nb->nodeset &&
	    hwloc_bitmap_isequal(na->nodeset, nb->nodeset))
		return R2_TOPO_DIST_PHB;
	return R2_TOPO_DIST_SYS;
}

static int gpu_cmp(const void *pa, const void *pb)
{
	const struct gpu_tmp *a = pa, *b = pb;

	/* PCI bus order (CUDA_DEVICE_ORDER=PCI_BUS_ID), devices without PCI last. */
	if (!a->gpu.pci[0] != !b->gpu.pci[0])
		return a->gpu.pci[0] ? -1 : 1;
	if (a->gpu.pci[0])
		return strcmp(a->gpu.pci, b->gpu.pci);
	return strverscmp(a->gpu.name, b->gpu.name);
}

static int kind_rank(enum r2_nic_kind k)
{
	return k == R2_NIC_RDMA ? 0 : k == R2_NIC_ETHERNET ? 1 : 2;
}

static int nic_cmp(const void *pa, const void *pb)
{
	const struct r2_topo_nic *a = pa, *b = pb;
	int r = kind_rank(a->kind) - kind_rank(b->kind);

	return r ? r : strverscmp(a->name, b->name);
}

static int nic_tmp_cmp(const void *pa, const void *pb)
{
	const struct nic_tmp *a = pa, *b = pb;

	return nic_cmp(&a->nic, &b->nic);
}

/* ---- sysfs ------------------------------------------------------------ */

/* Reads a one-line sysfs attribute into buf (newline stripped); 0 or -errno. */
static int read_attr(const char *dir, const char *name, const char *attr, char *buf, size_t len)
{
	char path[PATH_MAX];
	ssize_t r;
	int fd, ret = 0;

	snprintf(path, sizeof(path), "%s/%s/%s", dir, name, attr);
	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return -errno;
	r = read(fd, buf, len - 1);
	if (r < 0) {
		ret = -errno;
		goto out;
	}
	buf[r] = '\0';
	buf[strcspn(buf, "\n")] = '\0';
out:
	close(fd);
	return ret;
}

static long long read_num(const char *dir, const char *name, const char *attr, long long dflt)
{
	char buf[64], *end;
	long long v;

	if (read_attr(dir, name, attr, buf, sizeof(buf)))
		return dflt;
	errno = 0;
	v = strtoll(buf, &end, 0);
	if (errno || end == buf)
		return dflt;
	return v;
}

static bool attr_exists(const char *dir, const char *name, const char *attr)
{
	char path[PATH_MAX];
	struct stat st;

	snprintf(path, sizeof(path), "%s/%s/%s", dir, name, attr);
	return stat(path, &st) == 0;
}

static bool netdev_up(const char *dir, const char *name)
{
	char state[32];

	if (read_attr(dir, name, "operstate", state, sizeof(state)))
		return false;
	if (!strcmp(state, "up"))
		return true;
	/* Drivers without operstate support (dummy, some tunnels) say unknown. */
	if (!strcmp(state, "unknown"))
		return (read_num(dir, name, "flags", 0) & IFF_UP_FLAG) &&
		       read_num(dir, name, "carrier", 0) == 1;
	return false;
}

/* Finds a PCI address "dddd:bb:dd.f" among the components of the device link. */
static void device_pci(const char *dir, const char *name, char *pci, size_t len)
{
	char path[PATH_MAX], *real, *tok, *save = NULL;

	copy_str(pci, len, "");
	snprintf(path, sizeof(path), "%s/%s/device", dir, name);
	real = realpath(path, NULL);
	if (!real)
		return;
	for (tok = strtok_r(real, "/", &save); tok; tok = strtok_r(NULL, "/", &save)) {
		unsigned dom, bus, dev, fn;
		char tail;

		if (sscanf(tok, "%4x:%2x:%2x.%1x%c", &dom, &bus, &dev, &fn, &tail) == 4)
			copy_str(pci, len, tok);
	}
	free(real);
}

static void fill_netdev(struct r2_topo_nic *n, const char *dir, const char *dev)
{
	long long v;

	n->up = netdev_up(dir, dev);
	v = read_num(dir, dev, "speed", -1);
	n->speed_mbps = v > 0 ? (uint64_t)v : 0;
	v = read_num(dir, dev, "mtu", 0);
	n->mtu = v > 0 ? (uint32_t)v : 0;
	n->bridge = attr_exists(dir, dev, "bridge");
	/* A bond's or bridge's port: its master carries the address. */
	n->port_of_master = attr_exists(dir, dev, "master");
}

int r2_topology_scan_netdevs(struct r2_topology *t, const char *netdir, char *err, size_t errlen)
{
	DIR *dir;
	struct dirent *de;
	int ret = 0;

	dir = opendir(netdir);
	if (!dir) {
		ret = -errno;
		r2_seterr(err, errlen, "cannot list %s: %s", netdir, strerror(-ret));
		return ret;
	}
	/* Netdevs hwloc found: state from sysfs. */
	for (int i = 0; i < t->nnics; i++) {
		struct r2_topo_nic *n = &t->nics[i];
		const char *dev = n->kind == R2_NIC_RDMA ? n->netdev : n->name;

		if (dev[0] && attr_exists(netdir, dev, "operstate"))
			fill_netdev(n, netdir, dev);
	}
	while ((de = readdir(dir))) {
		struct r2_topo_nic *n;
		bool known = false;

		if (de->d_name[0] == '.' || !strcmp(de->d_name, "lo") ||
		    read_num(netdir, de->d_name, "type", 0) == ARPHRD_LOOPBACK_TYPE)
			continue;
		if (!attr_exists(netdir, de->d_name, "operstate") ||
		    strlen(de->d_name) >= R2_TOPO_NAME)
			continue;
		for (int i = 0; i < t->nnics && !known; i++)
			known = !strcmp(t->nics[i].name, de->d_name) ||
				!strcmp(t->nics[i].netdev, de->d_name);
		if (known)
			continue;
		if (t->nnics >= R2_TOPO_MAX_NICS) {
			t->nics_dropped++;
			continue;
		}
		n = &t->nics[t->nnics++];
		memset(n, 0, sizeof(*n));
		copy_str(n->name, sizeof(n->name), de->d_name);
		n->port = -1;
		n->numa_node = -1;
		if (attr_exists(netdir, de->d_name, "device")) {
			n->kind = R2_NIC_ETHERNET;
			device_pci(netdir, de->d_name, n->pci, sizeof(n->pci));
			n->numa_node = (int)read_num(netdir, de->d_name, "device/numa_node", -1);
		} else {
			n->kind = R2_NIC_VIRTUAL;
		}
		fill_netdev(n, netdir, de->d_name);
		for (int g = 0; g < R2_TOPO_MAX_GPUS; g++)
			t->gpu_nic_dist[g][t->nnics - 1] = -1;
	}
	closedir(dir);
	return ret;
}

/* RDMA port 1 state and rate from /sys/class/infiniband (live machine). */
static void fill_ib_port(struct r2_topo_nic *n)
{
	static const char ibdir[] = "/sys/class/infiniband";
	char buf[64];

	if (!read_attr(ibdir, n->name, "ports/1/state", buf, sizeof(buf)))
		n->up = atoi(buf) == 4; /* "4: ACTIVE" */
	if (!read_attr(ibdir, n->name, "ports/1/rate", buf, sizeof(buf))) {
		double gbps = strtod(buf, NULL); /* "200 Gb/sec (4X HDR)" */

		if (gbps > 0)
			n->speed_mbps = (uint64_t)(gbps * 1000.0);
	}
}

static void fill_ipv4(struct r2_topology *t)
{
	struct ifaddrs *ifa, *i;

	if (getifaddrs(&ifa))
		return;
	for (i = ifa; i; i = i->ifa_next) {
		if (!i->ifa_addr || i->ifa_addr->sa_family != AF_INET || !i->ifa_name)
			continue;
		for (int k = 0; k < t->nnics; k++) {
			struct r2_topo_nic *n = &t->nics[k];
			const struct sockaddr_in *sin = (const struct sockaddr_in *)i->ifa_addr;

			if (n->addr[0] ||
			    (strcmp(n->name, i->ifa_name) && strcmp(n->netdev, i->ifa_name)))
				continue;
			inet_ntop(AF_INET, &sin->sin_addr, n->addr, sizeof(n->addr));
		}
	}
	freeifaddrs(ifa);
}

static int live_extras(struct r2_topology *t, char *err, size_t errlen)
{
	int ret = r2_topology_scan_netdevs(t, "/sys/class/net", err, errlen);

	if (ret)
		return ret;
	for (int i = 0; i < t->nnics; i++)
		if (t->nics[i].kind == R2_NIC_RDMA)
			fill_ib_port(&t->nics[i]);
	fill_ipv4(t);
	/* Keep the NIC order stable (RDMA, Ethernet, virtual, by name); the
	 * distance columns move with their NICs. */
	for (int i = 1; i < t->nnics; i++) {
		for (int j = i; j > 0 && nic_cmp(&t->nics[j - 1], &t->nics[j]) > 0; j--) {
			struct r2_topo_nic tmp = t->nics[j];

			t->nics[j] = t->nics[j - 1];
			t->nics[j - 1] = tmp;
			for (int g = 0; g < R2_TOPO_MAX_GPUS; g++) {
				int dt = t->gpu_nic_dist[g][j];

				t->gpu_nic_dist[g][j] = t->gpu_nic_dist[g][j - 1];
				t->gpu_nic_dist[g][j - 1] = dt;
			}
		}
	}
	return 0;
}

/* ---- discovery -------------------------------------------------------- */

int r2_topology_discover(struct r2_topology *t, const char *xml_path, char *err, size_t errlen)
{
	hwloc_topology_t topo = NULL;
	struct disc *d = NULL;
	int ret = 0;

	if (!t)
		return -EINVAL;
	memset(t, 0, sizeof(*t));
	if (err && errlen)
		err[0] = '\0';
	d = calloc(1, sizeof(*d));
	if (!d) {
		r2_seterr(err, errlen, "out of memory");
		return -ENOMEM;
	}
	if (hwloc_topology_init(&topo)) {
		ret = errno ? -errno : -ENOMEM;
		topo = NULL;
		r2_seterr(err, errlen, "hwloc_topology_init failed: %s", strerror(-ret));
		goto out;
	}
	if (xml_path) {
		if (access(xml_path, R_OK)) {
			ret = -errno;
			r2_seterr(err, errlen, "topology XML %s: %s", xml_path, strerror(-ret));
			goto out;
		}
		if (hwloc_topology_set_xml(topo, xml_path)) {
			ret = errno ? -errno : -EINVAL;
			r2_seterr(err, errlen, "hwloc cannot use %s as XML: %s", xml_path,
				strerror(-ret));
			goto out;
		}
		t->from_xml = true;
	}
	hwloc_topology_set_io_types_filter(topo, HWLOC_TYPE_FILTER_KEEP_IMPORTANT);
	/* hwloc's Linux backend reads the PCI tree from sysfs; its libpciaccess
	 * plugin (libhwloc-plugins, which OpenMPI pulls in) finds the same tree
	 * and leaks about 1 KB per load (LeakSanitizer, hwloc 2.9) */
	hwloc_topology_set_components(topo, HWLOC_TOPOLOGY_COMPONENTS_FLAG_BLACKLIST, "pci");
	if (hwloc_topology_load(topo)) {
		ret = errno ? -errno : -EINVAL;
		r2_seterr(err, errlen, "hwloc cannot load the %s topology%s%s: %s",
			xml_path ? "XML" : "live", xml_path ? " " : "", xml_path ? xml_path : "",
			strerror(-ret));
		goto out;
	}
	t->ncpus = hwloc_get_nbobjs_by_type(topo, HWLOC_OBJ_PU);
	t->ncores = hwloc_get_nbobjs_by_type(topo, HWLOC_OBJ_CORE);
	t->nsockets = hwloc_get_nbobjs_by_type(topo, HWLOC_OBJ_PACKAGE);
	t->nnuma = hwloc_get_nbobjs_by_type(topo, HWLOC_OBJ_NUMANODE);

	find_gpus(topo, t, d);
	find_nics(topo, t, d);
	qsort(d->gpus, d->ngpus, sizeof(d->gpus[0]), gpu_cmp);
	qsort(d->nics, d->nnics, sizeof(d->nics[0]), nic_tmp_cmp);
	t->ngpus = d->ngpus;
	t->nnics = d->nnics;
	for (int g = 0; g < d->ngpus; g++) {
		t->gpus[g] = d->gpus[g].gpu;
		if (!t->gpus[g].name[0])
			snprintf(t->gpus[g].name, sizeof(t->gpus[g].name), "gpu%d", g);
	}
	for (int n = 0; n < d->nnics; n++)
		t->nics[n] = d->nics[n].nic;
	for (int g = 0; g < R2_TOPO_MAX_GPUS; g++)
		for (int n = 0; n < R2_TOPO_MAX_NICS; n++)
			t->gpu_nic_dist[g][n] = g < d->ngpus && n < d->nnics ?
				pci_dist(topo, d->gpus[g].obj, d->nics[n].obj) : -1;
	if (!xml_path)
		ret = live_extras(t, err, errlen);
out:
	if (topo)
		hwloc_topology_destroy(topo);
	free(d);
	return ret;
}

/* ---- selection -------------------------------------------------------- */

/* An RDMA NIC a rail can run on: up, with a netdev (the rail's address and
 * the verbs side channel live there). */
static bool rdma_usable(const struct r2_topo_nic *nic)
{
	return nic->kind == R2_NIC_RDMA && nic->up && nic->netdev[0];
}

/* The default rule: NCCL's. Where usable RDMA NICs are, only they are rails
 * (plain Ethernet is left to --rails); elsewhere every NIC that is up,
 * neither a bridge nor a port of a bond or bridge. */
static int select_default(struct r2_topology *t)
{
	bool rdma = false;
	int n = 0;

	for (int i = 0; i < t->nnics; i++)
		rdma |= rdma_usable(&t->nics[i]);
	for (int i = 0; i < t->nnics; i++) {
		struct r2_topo_nic *nic = &t->nics[i];

		nic->selected = false;
		if (!nic->up)
			nic->why = "down";
		else if (nic->kind == R2_NIC_RDMA && !nic->netdev[0])
			nic->why = "RDMA without a netdev (no address for a rail)";
		else if (nic->bridge)
			nic->why = "a bridge (name it in rails to use it)";
		else if (nic->port_of_master)
			nic->why = "a port of a bond or bridge (its master is the rail)";
		else if (rdma && nic->kind != R2_NIC_RDMA)
			nic->why = "not RDMA on a host with RDMA NICs (name it in rails to use it)";
		else
			nic->selected = true;
		if (nic->selected)
			nic->why = rdma ? "RDMA, up" : "up, no RDMA NIC on this host";
		n += nic->selected;
	}
	return n;
}

int r2_topology_select(struct r2_topology *t, const char *filter)
{
	struct r2_nicfilter f, pos;
	int n = 0, ret;

	if (!filter || !filter[0])
		return select_default(t);
	ret = r2_nicfilter_parse(filter, &f);
	if (ret)
		return ret < 0 ? ret : -EINVAL;
	/* Match the name or the netdev, then apply the negation once. */
	pos = f;
	pos.negate = false;
	for (int i = 0; i < t->nnics; i++) {
		struct r2_topo_nic *nic = &t->nics[i];
		bool hit = r2_nicfilter_match(&pos, nic->name, nic->port) ||
			   (nic->netdev[0] && r2_nicfilter_match(&pos, nic->netdev, nic->port));

		nic->selected = f.negate ? !hit : hit;
		if (f.negate)
			nic->why = hit ? "excluded by rails" : "not excluded by rails";
		else
			nic->why = hit ? "named in rails" : "not named in rails";
		n += nic->selected;
	}
	return n;
}

static int rank_of(const struct r2_topology *t, int g, int n)
{
	int d = t->gpu_nic_dist[g][n];

	if (d < 0)
		d = R2_TOPO_DIST_SYS + 1;
	return d * 4 + kind_rank(t->nics[n].kind);
}

/* Fills best[] with the selected NICs of minimal rank for GPU g. */
static int best_set(const struct r2_topology *t, int g, int *best)
{
	int nb = 0, min = INT_MAX;

	for (int n = 0; n < t->nnics; n++) {
		int r;

		if (!t->nics[n].selected)
			continue;
		r = rank_of(t, g, n);
		if (r < min) {
			min = r;
			nb = 0;
		}
		if (r == min)
			best[nb++] = n;
	}
	return nb;
}

int r2_topology_nearest_nic(const struct r2_topology *t, int g)
{
	int best[R2_TOPO_MAX_NICS], other[R2_TOPO_MAX_NICS];
	int nb, k = 0;

	if (!t || g < 0 || g >= t->ngpus || g >= R2_TOPO_MAX_GPUS)
		return -1;
	nb = best_set(t, g, best);
	if (!nb)
		return -1;
	/* Spread GPUs that share the same best NICs over them. */
	for (int h = 0; h < g; h++) {
		int no = best_set(t, h, other);

		if (no == nb && !memcmp(best, other, sizeof(int) * (size_t)nb) &&
		    rank_of(t, h, best[0]) == rank_of(t, g, best[0]))
			k++;
	}
	return best[k % nb];
}

int r2_topology_nic_index(const struct r2_topology *t, const char *name)
{
	if (!t || !name || !name[0])
		return -1;
	for (int i = 0; i < t->nnics; i++)
		if (!strcmp(t->nics[i].name, name) || !strcmp(t->nics[i].netdev, name))
			return i;
	return -1;
}
