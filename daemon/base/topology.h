/* SPDX-License-Identifier: MIT */
/*
 * Host topology discovery (hwloc): CPUs, NUMA nodes, GPUs, NICs and the
 * PCIe distance between each GPU and each NIC.
 *
 * Sources: the live machine (hwloc with I/O devices), or an lstopo XML file
 * (--topology-xml) replayed instead. Netdevs that hwloc cannot place (veth,
 * bridges, dummy: no PCI parent) still count as NICs with numa_node -1 and
 * unknown locality; on the live machine those come from getifaddrs()/sysfs.
 * Loopback is never a NIC.
 */
#ifndef R2CCL_TOPOLOGY_H
#define R2CCL_TOPOLOGY_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define R2_TOPO_MAX_NICS 64
#define R2_TOPO_MAX_GPUS 32
#define R2_TOPO_NAME 64

enum r2_nic_kind { R2_NIC_ETHERNET = 0, R2_NIC_RDMA = 1, R2_NIC_VIRTUAL = 2 };

struct r2_topo_nic {
	char name[R2_TOPO_NAME];    /* netdev (eth0) or RDMA device (mlx5_0) */
	char netdev[R2_TOPO_NAME];  /* for RDMA: its netdev if known (ib0), else "" */
	char pci[32];               /* "0000:41:00.0" or "" */
	enum r2_nic_kind kind;
	int numa_node;              /* -1: unknown */
	bool up;                    /* operstate up (live) / assumed up (XML) */
	uint64_t speed_mbps;        /* 0 unknown */
	uint32_t mtu;               /* 0 unknown */
	char addr[64];              /* first IPv4 address (live), "" otherwise */
	bool selected;              /* chosen as a rail by the filter */
	const char *why;            /* why selected or not (a static phrase), NULL before select */
	bool bridge;                /* a Linux bridge (live): never selected by default */
	bool port_of_master;        /* enslaved to a bond or bridge (live): never by default */
	int port;                   /* RDMA: port used (1); -1 for netdevs */
};

struct r2_topo_gpu {
	char name[R2_TOPO_NAME];    /* "cuda0"/"GPU 0"/model, whatever hwloc gives */
	char pci[32];
	int numa_node;
};

struct r2_topology {
	int ncpus;                  /* logical processors (PUs) */
	int ncores;
	int nsockets;
	int nnuma;
	int ngpus;
	int nnics;
	int gpus_dropped;           /* GPUs/NICs beyond the MAX_ limits, not listed */
	int nics_dropped;
	struct r2_topo_gpu gpus[R2_TOPO_MAX_GPUS];
	struct r2_topo_nic nics[R2_TOPO_MAX_NICS];
	/* PCIe hops between GPU g and NIC n through their lowest common
	 * ancestor (switches and bridges), like NCCL's PIX/PXB/PHB/SYS:
	 *   0                     the same PCI device
	 *   1..R2_TOPO_DIST_PHB-1 the number of PCI bridges (switch ports, root
	 *                         ports, host bridge) on the path between them
	 *                         when their lowest common ancestor is an I/O
	 *                         object: 1 = same bus, 3 = same PCIe switch
	 *                         (downstream port, upstream port, downstream
	 *                         port), more = nested switches / root complex
	 *   R2_TOPO_DIST_PHB      through the CPU (different host bridges) but
	 *                         local to the same NUMA node(s)
	 *   R2_TOPO_DIST_SYS      different NUMA nodes or sockets
	 *   -1                    unknown (a virtual NIC, a device without PCI) */
	int gpu_nic_dist[R2_TOPO_MAX_GPUS][R2_TOPO_MAX_NICS];
	bool from_xml;
};

#define R2_TOPO_DIST_PHB 50
#define R2_TOPO_DIST_SYS 100

/* Discovers the live host (xml_path NULL) or replays an lstopo XML file.
 * GPUs are listed in PCI bus order; NICs RDMA first, then Ethernet, then
 * virtual, each by name (mlx5_2 before mlx5_10). An RDMA device and the
 * netdev under the same PCI device are one NIC. numa_node is the single
 * NUMA node of the device's CPU-side (non-I/O) hwloc ancestor, -1 when that
 * ancestor spans several. Returns 0 or a negative errno; err gets a
 * sentence on failure. */
int r2_topology_discover(struct r2_topology *t, const char *xml_path, char *err, size_t errlen);

/* Marks nics[].selected by the NCCL-syntax filter (common/nicfilter.h) and
 * sets nics[].why. An empty filter is NCCL's default: on a host where an
 * RDMA NIC with a netdev is up, every such RDMA NIC and nothing else
 * (Ethernet and virtual NICs are rails only when the filter names them); on
 * a host without one, every NIC that is up (loopback is never listed) except Linux
 * bridges and the ports of a bond or bridge (sysfs master link). A filter element matches the NIC's name (the RDMA device,
 * mlx5_0, for RDMA NICs, with port 1) or its netdev (ib0); a non-empty
 * filter selects what it matches whether up or not.
 * Returns the number selected, or -EINVAL for a bad filter (nothing changed). */
int r2_topology_select(struct r2_topology *t, const char *filter);

/* Index of the NIC nearest to GPU g among selected NICs, -1 if none.
 * Ranks by gpu_nic_dist (unknown after SYS), then RDMA before Ethernet
 * before virtual. Ties are spread: the k-th GPU (by index) sharing the same
 * set of best NICs gets the (k mod n)-th of them, so two GPUs behind one
 * switch with two NICs get one NIC each. */
int r2_topology_nearest_nic(const struct r2_topology *t, int g);

/* Index of the NIC whose name or netdev is name, -1 if none. */
int r2_topology_nic_index(const struct r2_topology *t, const char *name);

/* Adds the netdevs of a sysfs class/net directory ("/sys/class/net" on the
 * live machine; tests pass a fake tree) that are not listed yet, except
 * loopback: kind virtual (numa -1) when they have no device link, Ethernet
 * otherwise; fills up/speed/mtu/bridge/port_of_master of every listed
 * netdev found there.
 * Called by r2_topology_discover for the live machine. Returns 0 or a
 * negative errno. */
int r2_topology_scan_netdevs(struct r2_topology *t, const char *netdir, char *err, size_t errlen);

const char *r2_nic_kind_name(enum r2_nic_kind k);

#endif
