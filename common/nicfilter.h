/* SPDX-License-Identifier: MIT */
/*
 * NIC selection with NCCL's filter syntax (NCCL_SOCKET_IFNAME / NCCL_IB_HCA):
 *   "eth,ib"     names starting with eth or ib
 *   "^eth2"      every name except those starting with eth2
 *   "=eth0,eth1" exactly these names
 *   "^=eth0"     every name except exactly eth0
 *   "mlx5_0:1"   device mlx5_0, port 1 only (a port suffix, RDMA devices)
 * An empty or NULL filter matches everything.
 */
#ifndef R2CCL_NICFILTER_H
#define R2CCL_NICFILTER_H

#include <stdbool.h>

#define R2_NICFILTER_MAX 32

struct r2_nicfilter {
	bool negate;
	bool exact;
	int n;
	struct {
		char name[64];
		int port; /* -1: any */
	} ent[R2_NICFILTER_MAX];
};

/* Returns 0 or -EINVAL (empty element, too many elements, bad port, name too long). */
int r2_nicfilter_parse(const char *spec, struct r2_nicfilter *f);
/* port -1 when the NIC has no port notion. */
bool r2_nicfilter_match(const struct r2_nicfilter *f, const char *name, int port);

#endif
