/* SPDX-License-Identifier: MIT */
#include "uidfile.h"

#include <errno.h>
#include <limits.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

void r2_uid_to_hex(const r2ccl_unique_id_t *id, char *hex)
{
	static const char digits[] = "0123456789abcdef";
	const unsigned char *b = (const unsigned char *)id->internal;
	for (int i = 0; i < R2CCL_UNIQUE_ID_BYTES; i++) {
		hex[2 * i] = digits[b[i] >> 4];
		hex[2 * i + 1] = digits[b[i] & 15];
	}
	hex[R2_UID_HEX_LEN] = 0;
}

static int hexval(int ch)
{
	if (ch >= '0' && ch <= '9')
		return ch - '0';
	if (ch >= 'a' && ch <= 'f')
		return ch - 'a' + 10;
	if (ch >= 'A' && ch <= 'F')
		return ch - 'A' + 10;
	return -1;
}

int r2_uid_from_hex(const char *hex, r2ccl_unique_id_t *id)
{
	for (int i = 0; i < R2CCL_UNIQUE_ID_BYTES; i++) {
		int hi = hexval(hex[2 * i]), lo = hi < 0 ? -1 : hexval(hex[2 * i + 1]);
		if (hi < 0 || lo < 0)
			return -1;
		id->internal[i] = (char)(hi << 4 | lo);
	}
	return 0;
}

int r2_uid_write(const char *path, const r2ccl_unique_id_t *id)
{
	char tmp[PATH_MAX + 32], hex[R2_UID_HEX_LEN + 1];
	snprintf(tmp, sizeof(tmp), "%s.tmp.%d", path, (int)getpid());
	r2_uid_to_hex(id, hex);
	FILE *f = fopen(tmp, "w");
	if (!f)
		return -errno;
	fprintf(f, "%s\n", hex);
	if (fflush(f) || fsync(fileno(f))) {
		int e = -errno;
		fclose(f);
		unlink(tmp);
		return e;
	}
	fclose(f);
	if (rename(tmp, path)) {
		int e = -errno;
		unlink(tmp);
		return e;
	}
	return 0;
}

static double mono_s(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

int r2_uid_wait(const char *path, double timeout_s, r2ccl_unique_id_t *id)
{
	double deadline = mono_s() + timeout_s;
	for (;;) {
		FILE *f = fopen(path, "r");
		if (f) {
			char line[R2_UID_HEX_LEN + 8] = { 0 };
			bool got = fgets(line, sizeof(line), f) != NULL;
			fclose(f);
			/* the writer renames a whole line into place */
			if (got && strlen(line) >= R2_UID_HEX_LEN)
				return r2_uid_from_hex(line, id) ? -EINVAL : 0;
		} else if (errno != ENOENT) {
			return -errno;
		}
		if (mono_s() > deadline)
			return -ETIMEDOUT;
		usleep(20 * 1000);
	}
}
