/* SPDX-License-Identifier: MIT */
/* An NVIDIA GPU's device file from its PCI bus id (nvdev.h). */
#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include "nvdev.h"

int r2_nvidia_minor_parse(const char *info)
{
	static const char key[] = "Device Minor:";

	for (const char *l = info; l && *l; l = strchr(l, '\n'), l = l ? l + 1 : NULL) {
		char *end;
		long v;

		if (strncmp(l, key, sizeof(key) - 1))
			continue;
		v = strtol(l + sizeof(key) - 1, &end, 10);
		if (end == l + sizeof(key) - 1 || v < 0 || v > 255)
			return -EPROTO;
		return (int)v;
	}
	return -ENOENT;
}

int r2_nvidia_minor(const char *bus)
{
	char path[128], lower[64], buf[2048];
	size_t i;
	ssize_t n;
	int fd;

	if (!bus || strlen(bus) >= sizeof(lower) || strchr(bus, '/') || !bus[0])
		return -EINVAL;
	for (i = 0; bus[i]; i++)
		lower[i] = (char)tolower((unsigned char)bus[i]);
	lower[i] = 0;
	snprintf(path, sizeof(path), "/proc/driver/nvidia/gpus/%s/information", lower);
	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return -errno;
	n = read(fd, buf, sizeof(buf) - 1);
	close(fd);
	if (n < 0)
		return -EIO;
	buf[n] = 0;
	return r2_nvidia_minor_parse(buf);
}

int r2_nvidia_mig_dir_in_use(const char *migdir)
{
	struct dirent *e;
	DIR *d = opendir(migdir);
	int in_use = 0;

	if (!d)
		return 0;
	while ((e = readdir(d)))
		if (!strncmp(e->d_name, "gi", 2)) {
			in_use = 1;
			break;
		}
	closedir(d);
	return in_use;
}

int r2_nvidia_mig_in_use(int minor)
{
	char path[96];

	snprintf(path, sizeof(path), "/proc/driver/nvidia/capabilities/gpu%d/mig", minor);
	return r2_nvidia_mig_dir_in_use(path);
}

dev_t r2_nvidia_rdev(int minor)
{
	char path[32];
	struct stat st;

	if (minor < 0)
		return 0;
	snprintf(path, sizeof(path), "/dev/nvidia%d", minor);
	if (stat(path, &st) == 0 && S_ISCHR(st.st_mode))
		return st.st_rdev;
	return makedev(R2_NVIDIA_MAJOR, (unsigned)minor);
}
