// SPDX-License-Identifier: MIT
#include <errno.h>
#include <unistd.h>

#include "util.h"

void r2_closep(int *fd)
{
	int saved = errno;

	if (fd && *fd >= 0) {
		close(*fd);
		*fd = -1;
	}
	errno = saved;
}
