// SPDX-License-Identifier: MIT
/*
 * NCCL's NIC filter syntax (NCCL_SOCKET_IFNAME, NCCL_IB_HCA), see nicfilter.h.
 * As in NCCL, a port given on only one side (filter or NIC) does not restrict
 * the match. Blanks around an element are ignored.
 */
#include <ctype.h>
#include <errno.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>

#include "nicfilter.h"

static int parse_elem(const char *s, size_t len, struct r2_nicfilter *f)
{
	const char *colon;
	size_t nlen;
	int port = -1;

	while (len && isspace((unsigned char)*s)) {
		s++;
		len--;
	}
	while (len && isspace((unsigned char)s[len - 1]))
		len--;
	if (!len)
		return -EINVAL;
	if (f->n >= R2_NICFILTER_MAX)
		return -EINVAL;

	colon = memchr(s, ':', len);
	nlen = colon ? (size_t)(colon - s) : len;
	if (colon) {
		const char *p = colon + 1, *end = s + len;
		long v = 0;

		if (p == end)
			return -EINVAL;
		for (; p < end; p++) {
			if (!isdigit((unsigned char)*p))
				return -EINVAL;
			v = v * 10 + (*p - '0');
			if (v > INT_MAX)
				return -EINVAL;
		}
		port = (int)v;
	}
	if (!nlen || nlen >= sizeof(f->ent[0].name))
		return -EINVAL;
	memcpy(f->ent[f->n].name, s, nlen);
	f->ent[f->n].name[nlen] = '\0';
	f->ent[f->n].port = port;
	f->n++;
	return 0;
}

int r2_nicfilter_parse(const char *spec, struct r2_nicfilter *f)
{
	const char *p;
	int ret;

	memset(f, 0, sizeof(*f));
	if (!spec)
		return 0;
	p = spec;
	while (isspace((unsigned char)*p))
		p++;
	if (!*p)
		return 0;
	if (*p == '^') {
		f->negate = true;
		p++;
	}
	if (*p == '=') {
		f->exact = true;
		p++;
	}
	for (;;) {
		const char *comma = strchr(p, ',');
		size_t len = comma ? (size_t)(comma - p) : strlen(p);

		ret = parse_elem(p, len, f);
		if (ret < 0)
			goto fail;
		if (!comma)
			break;
		p = comma + 1;
	}
	return 0;
fail:
	memset(f, 0, sizeof(*f));
	return ret;
}

bool r2_nicfilter_match(const struct r2_nicfilter *f, const char *name, int port)
{
	bool found = false;

	if (!f || f->n == 0)
		return true;
	if (!name)
		return false;
	for (int i = 0; i < f->n && !found; i++) {
		const char *e = f->ent[i].name;
		bool nm = f->exact ? !strcmp(name, e) : !strncmp(name, e, strlen(e));
		bool pm = f->ent[i].port == -1 || port == -1 || f->ent[i].port == port;

		found = nm && pm;
	}
	return f->negate ? !found : found;
}
