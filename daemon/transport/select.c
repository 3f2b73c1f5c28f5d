// SPDX-License-Identifier: MIT
/*
 * Which provider drives a NIC: the table of providers in order of preference
 * and their probes (transport.h, r2_tp_select).
 */
#include <errno.h>
#include <string.h>

#include "transport.h"

/* Best first; the last one (tcp) drives any NIC with an IPv4 address. The
 * loopback provider is for tests and is never picked for a NIC. */
static const struct r2_tp_ops *const providers[] = {
#if HAVE_IBVERBS
	&r2_tp_verbs_ops,
#endif
	&r2_tp_tcp_ops,
};

int r2_tp_select(const struct r2_tp_config *cfg, const char *transport,
		 struct r2_tp_choice *out, int max)
{
	bool any = !transport || !*transport || !strcmp(transport, "auto");
	bool known = any;
	int n = 0;

	if (!cfg || !out || max < 0)
		return -EINVAL;
	for (size_t i = 0; i < sizeof(providers) / sizeof(providers[0]); i++) {
		const struct r2_tp_ops *ops = providers[i];
		struct r2_tp_choice *c = &out[n];
		int r = 0;

		if (!any && strcmp(transport, ops->name))
			continue;
		known = true;
		if (n == max)
			continue;
		c->dev[0] = c->desc[0] = 0;
		if (ops->probe)
			r = ops->probe(cfg, c);
		if (r < 0 && r != -EINVAL)
			continue;
		c->ops = ops;
		c->probe = r;
		n++;
	}
	return known ? n : -EINVAL;
}
