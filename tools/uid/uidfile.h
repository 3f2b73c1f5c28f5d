/* SPDX-License-Identifier: MIT */
/*
 * The unique id file of r2ccl-bench and the cluster tests' client: one line
 * of hex, written atomically by the rank that creates the id and read by
 * every other host's ranks.
 */
#ifndef R2CCL_UIDFILE_H
#define R2CCL_UIDFILE_H

#include "r2ccl.h"

#define R2_UID_HEX_LEN (2 * R2CCL_UNIQUE_ID_BYTES)

/* hex: R2_UID_HEX_LEN + 1 bytes, NUL-terminated. */
void r2_uid_to_hex(const r2ccl_unique_id_t *id, char *hex);
/* 0, or -1 where the first R2_UID_HEX_LEN characters are not hex digits. */
int r2_uid_from_hex(const char *hex, r2ccl_unique_id_t *id);
/* Writes the id as one line to path (temp file, fsync, rename): 0 or -errno. */
int r2_uid_write(const char *path, const r2ccl_unique_id_t *id);
/* Waits up to timeout_s for path to hold an id: 0, -ETIMEDOUT, -EINVAL (it
 * holds a whole line that is not one) or -errno of the open. */
int r2_uid_wait(const char *path, double timeout_s, r2ccl_unique_id_t *id);

#endif
