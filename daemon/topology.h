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
	struct r2_topo_gpu gpus[R2_TOPO_MAX_GPUS];
	struct r2_topo_nic nics[R2_TOPO_MAX_NICS];
	/* PCIe hops between GPU g and NIC n through their lowest common
	 * ancestor (switches and bridges), like NCCL's PIX/PXB/PHB/SYS:
	 * 0 same device, small = same switch, larger = through the host
	 * bridge; R2_TOPO_DIST_SYS when they are on different NUMA nodes or
	 * sockets; -1 unknown (a virtual NIC). */
	int gpu_nic_dist[R2_TOPO_MAX_GPUS][R2_TOPO_MAX_NICS];
	bool from_xml;
};

#define R2_TOPO_DIST_SYS 100

/* Discovers the live host (xml_path NULL) or replays an lstopo XML file.
 * Returns 0 or a negative errno; err gets a sentence on failure. */
int r2_topology_discover(struct r2_topology *t, const char *xml_path, char *err, size_t errlen);

/* Marks nics[].selected by the NCCL-syntax filter (common/nicfilter.h);
 * an empty filter selects every NIC that is up (loopback is never listed).
 * Returns the number selected, or -EINVAL for a bad filter. */
int r2_topology_select(struct r2_topology *t, const char *filter);

/* Index of the NIC nearest to GPU g among selected NICs, -1 if none. */
int r2_topology_nearest_nic(const struct r2_topology *t, int g);

const char *r2_nic_kind_name(enum r2_nic_kind k);

#endif
