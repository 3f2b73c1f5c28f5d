// SPDX-License-Identifier: MIT
/*
 * r2cclctl's text: terminal-safe copies of the daemon's strings (they may
 * come from other users), JSON string escaping, units, status lines.
 */
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ctl.h"

/* Length (1..4) of the valid UTF-8 sequence at s, 0 if invalid; *cp gets the
 * code point. s is NUL-terminated (a NUL ends any sequence as invalid). */
static int utf8_seq(const unsigned char *s, uint32_t *cp)
{
	uint32_t v, min;
	int len;

	if (s[0] < 0x80) {
		*cp = s[0];
		return 1;
	}
	if ((s[0] & 0xe0) == 0xc0) {
		len = 2, v = s[0] & 0x1f, min = 0x80;
	} else if ((s[0] & 0xf0) == 0xe0) {
		len = 3, v = s[0] & 0x0f, min = 0x800;
	} else if ((s[0] & 0xf8) == 0xf0) {
		len = 4, v = s[0] & 0x07, min = 0x10000;
	} else {
		return 0;
	}
	for (int i = 1; i < len; i++) {
		if ((s[i] & 0xc0) != 0x80)
			return 0;
		v = (v << 6) | (s[i] & 0x3f);
	}
	if (v < min || v > 0x10ffff || (v >= 0xd800 && v <= 0xdfff))
		return 0;
	*cp = v;
	return len;
}

void *xmalloc(size_t n)
{
	void *p = malloc(n ? n : 1);

	if (!p) {
		fputs("r2cclctl: out of memory\n", stderr);
		exit(EXIT_FAIL);
	}
	return p;
}

/* Copies s for a terminal: C0/C1 controls, DEL and invalid UTF-8 become '?'.
 * Returns a malloc'ed string (never NULL for non-NULL s; exits on ENOMEM). */
char *safe_text(const char *s)
{
	const unsigned char *p = (const unsigned char *)(s ? s : "");
	size_t n = strlen((const char *)p);
	char *out = xmalloc(n + 1), *o = out;

	while (*p) {
		uint32_t cp;
		int len = utf8_seq(p, &cp);

		if (len == 0 || cp < 0x20 || cp == 0x7f || (cp >= 0x80 && cp <= 0x9f)) {
			*o++ = '?';
			p += len ? len : 1;
			continue;
		}
		memcpy(o, p, (size_t)len);
		o += len;
		p += len;
	}
	*o = 0;
	return out;
}

/* Display width: code points (the tables hold names, numbers, addresses). */
size_t text_width(const char *s)
{
	size_t w = 0;

	for (; *s; s++)
		if (((unsigned char)*s & 0xc0) != 0x80)
			w++;
	return w;
}

/* Writes s as a JSON string: quotes, backslash and controls escaped, invalid
 * UTF-8 replaced by U+FFFD. */
void json_string(FILE *f, const char *s)
{
	const unsigned char *p = (const unsigned char *)(s ? s : "");

	fputc('"', f);
	while (*p) {
		uint32_t cp;
		int len = utf8_seq(p, &cp);

		if (len == 0) {
			fputs("\\ufffd", f);
			p++;
			continue;
		}
		switch (cp) {
		case '"': fputs("\\\"", f); break;
		case '\\': fputs("\\\\", f); break;
		case '\b': fputs("\\b", f); break;
		case '\f': fputs("\\f", f); break;
		case '\n': fputs("\\n", f); break;
		case '\r': fputs("\\r", f); break;
		case '\t': fputs("\\t", f); break;
		default:
			if (cp < 0x20)
				fprintf(f, "\\u%04x", (unsigned)cp);
			else
				fwrite(p, 1, (size_t)len, f);
		}
		p += len;
	}
	fputc('"', f);
}

const char *fmt_bytes(uint64_t b, char *buf, size_t len)
{
	const char *const units[] = { "B", "KiB", "MiB", "GiB", "TiB", "PiB" };
	double v = (double)b;
	int u = 0;

	while (v >= 1024.0 && u < 5) {
		v /= 1024.0;
		u++;
	}
	if (u == 0)
		snprintf(buf, len, "%" PRIu64 " B", b);
	else
		snprintf(buf, len, "%.1f %s", v, units[u]);
	return buf;
}

const char *fmt_speed(uint64_t mbps, char *buf, size_t len)
{
	if (mbps == 0)
		snprintf(buf, len, "-");
	else if (mbps >= 1000 && mbps % 1000 == 0)
		snprintf(buf, len, "%" PRIu64 "Gb/s", mbps / 1000);
	else if (mbps >= 1000)
		snprintf(buf, len, "%.1fGb/s", (double)mbps / 1000.0);
	else
		snprintf(buf, len, "%" PRIu64 "Mb/s", mbps);
	return buf;
}

/* systemd's style: "3d 4h 5min 6s", the two largest units only. */
const char *fmt_duration(uint64_t s, char *buf, size_t len)
{
	uint64_t d = s / 86400, h = s / 3600 % 24, m = s / 60 % 60, sec = s % 60;

	if (d)
		snprintf(buf, len, "%" PRIu64 "d %" PRIu64 "h", d, h);
	else if (h)
		snprintf(buf, len, "%" PRIu64 "h %" PRIu64 "min", h, m);
	else if (m)
		snprintf(buf, len, "%" PRIu64 "min %" PRIu64 "s", m, sec);
	else
		snprintf(buf, len, "%" PRIu64 "s", sec);
	return buf;
}

const char *fmt_numa(int n, char *buf, size_t len)
{
	if (n < 0)
		snprintf(buf, len, "-");
	else
		snprintf(buf, len, "%d", n);
	return buf;
}

const char *or_dash(const char *s)
{
	return s && s[0] ? s : "-";
}

/* Prints "  label:  value" lines of a status block (value made safe). */
char *vformat(const char *fmt, va_list ap)
{
	char *raw = NULL;

	if (vasprintf(&raw, fmt, ap) < 0)
		raw = NULL;
	return raw;
}

char *safe_vformat(char **raw, const char *dflt, const char *fmt, va_list ap)
{
	*raw = vformat(fmt, ap);
	return safe_text(*raw ? *raw : dflt);
}

void kv(const char *label, const char *fmt, ...)
{
	char *raw, *s;
	va_list ap;

	va_start(ap, fmt);
	s = safe_vformat(&raw, "?", fmt, ap);
	va_end(ap);
	printf("%12s: %s\n", label, s);
	free(s);
	free(raw);
}
