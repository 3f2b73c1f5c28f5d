/* SPDX-License-Identifier: MIT */
/* libnccl: reading the caller's ncclConfig_t (versioned, grows at its end),
 * and the ids of derived communicators. */
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "nccl_int.h"

/* Where each NCCL version's ncclConfig_t ends (read from the releases'
 * headers: 2.14 blocking; 2.17 up to netName; 2.18 splitShare; 2.26
 * trafficClass; 2.27 up to nvlsCTAs; 2.28 nChannelsPerNetPeer and
 * nvlinkCentricSched). */
static const struct {
	unsigned int version; /* NCCL_VERSION code of the first release with it */
	size_t end;           /* offset just past the last field */
} config_versions[] = {
	{ 21400, offsetof(ncclConfig_t, blocking) + sizeof(int) },
	{ 21700, offsetof(ncclConfig_t, netName) + sizeof(const char *) },
	{ 21800, offsetof(ncclConfig_t, splitShare) + sizeof(int) },
	{ 22600, offsetof(ncclConfig_t, trafficClass) + sizeof(int) },
	{ 22700, offsetof(ncclConfig_t, nvlsCTAs) + sizeof(int) },
	{ 22800, sizeof(ncclConfig_t) },
};

size_t nccl_config_size_of_version(unsigned int version)
{
	size_t end = 0;

	for (size_t i = 0; i < sizeof(config_versions) / sizeof(config_versions[0]); i++)
		if (version >= config_versions[i].version)
			end = config_versions[i].end;
	return end;
}

static void copy_name(char *dst, size_t len, const char *src)
{
	if (src && src != NCCL_CONFIG_UNDEF_PTR)
		snprintf(dst, len, "%s", src);
}

ncclResult_t nccl_config_parse(const ncclConfig_t *cfg, struct nccl_cfg *out, char *err,
			       size_t errlen)
{
	const char *env = getenv("NCCL_COMM_BLOCKING");
	size_t have;

	memset(out, 0, sizeof(*out));
	out->blocking = !(env && env[0] == '0');
	out->split_share = 0;
	if (!cfg)
		return ncclSuccess;
	if (cfg->magic != NCCL_CONFIG_MAGIC) {
		snprintf(err, errlen,
			 "ncclConfig_t has magic 0x%x, not 0x%x: initialize it with "
			 "NCCL_CONFIG_INITIALIZER",
			 cfg->magic, NCCL_CONFIG_MAGIC);
		return ncclInvalidArgument;
	}
	have = nccl_config_size_of_version(cfg->version);
	if (!have || cfg->size < offsetof(ncclConfig_t, blocking) + sizeof(int)) {
		snprintf(err, errlen, "ncclConfig_t of version %u, size %zu: unknown layout",
			 cfg->version, cfg->size);
		return ncclInvalidArgument;
	}
	if (have > cfg->size)
		have = cfg->size; /* a caller's struct smaller than its version says */
#define HAS(f) (offsetof(ncclConfig_t, f) + sizeof(cfg->f) <= have)
	if (HAS(blocking) && cfg->blocking != NCCL_CONFIG_UNDEF_INT) {
		if (cfg->blocking != 0 && cfg->blocking != 1) {
			snprintf(err, errlen, "ncclConfig_t.blocking is %d (0 or 1)", cfg->blocking);
			return ncclInvalidArgument;
		}
		out->blocking = cfg->blocking == 1;
	}
	if (HAS(netName))
		copy_name(out->net_name, sizeof(out->net_name), cfg->netName);
	if (HAS(splitShare) && cfg->splitShare != NCCL_CONFIG_UNDEF_INT)
		out->split_share = cfg->splitShare;
	if (HAS(commName))
		copy_name(out->comm_name, sizeof(out->comm_name), cfg->commName);
#undef HAS
	return ncclSuccess;
}

/* splitmix64's finalizer: every input bit moves the output */
static uint64_t mix64(uint64_t x)
{
	x ^= x >> 30;
	x *= 0xbf58476d1ce4e5b9ULL;
	x ^= x >> 27;
	x *= 0x94d049bb133111ebULL;
	return x ^ (x >> 31);
}

void nccl_uid_derive(const r2ccl_unique_id_t *parent, unsigned gen, const int *excl, int nexcl,
		     r2ccl_unique_id_t *out)
{
	uint64_t nonce, h = mix64(0x6e63636c73687231ULL ^ gen), set = 0;

	*out = *parent;
	memcpy(&nonce, out->internal + NCCL_UID_NONCE_OFF, sizeof(nonce));
	/* the excluded set, whatever order it was listed in */
	for (int i = 0; i < nexcl; i++)
		set += mix64((uint64_t)(uint32_t)excl[i] + 1);
	nonce = mix64(nonce ^ h ^ mix64(set));
	memcpy(out->internal + NCCL_UID_NONCE_OFF, &nonce, sizeof(nonce));
}
