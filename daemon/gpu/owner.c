/* SPDX-License-Identifier: MIT */
/*
 * The owner check of legacy CUDA IPC handles (owner.h): the policy, the
 * exporter's pid in a handle, the client's pid as it sees it.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdbool.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include "gpu/owner.h"

int r2_gpu_legacy_parse(const char *s)
{
	if (!s)
		return -EINVAL;
	if (!strcmp(s, "allow"))
		return R2_GPU_LEGACY_ALLOW;
	if (!strcmp(s, "same-pid"))
		return R2_GPU_LEGACY_SAME_PID;
	if (!strcmp(s, "deny"))
		return R2_GPU_LEGACY_DENY;
	if (!strcmp(s, "gpu-access"))
		return R2_GPU_LEGACY_GPU_ACCESS;
	return -EINVAL;
}

/* pid_max is at most 2^22 (PID_MAX_LIMIT) */
#define PID_LIMIT (1u << 22)

static uint32_t le32(const uint8_t *p)
{
	return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

int r2_gpu_ipc_pid_offset(const uint8_t *h1, const uint8_t *h2, size_t len, pid_t pid)
{
	int off = -ENOENT;

	if (!h1 || !h2 || pid <= 0)
		return -ENOENT;
	for (size_t i = 0; i + 4 <= len; i += 4) {
		if (le32(h1 + i) != (uint32_t)pid || le32(h2 + i) != (uint32_t)pid)
			continue;
		if (off >= 0)
			return -EEXIST;
		off = (int)i;
	}
	return off;
}

int r2_gpu_ipc_handle_pid(const uint8_t *h, size_t len, int off, pid_t *pid)
{
	uint32_t v;

	if (!h || off < 0 || (size_t)off + 4 > len)
		return -EPROTO;
	v = le32(h + off);
	if (v == 0 || v > PID_LIMIT)
		return -EPROTO;
	*pid = (pid_t)v;
	return 0;
}

int r2_gpu_status_nspid(const char *status, pid_t *nspid)
{
	const char *line, *pidline = NULL;
	long last = -1;

	for (line = status; line && *line; line = strchr(line, '\n'), line = line ? line + 1 : NULL) {
		if (!strncmp(line, "Pid:", 4))
			pidline = line + 4;
		if (strncmp(line, "NSpid:", 6))
			continue;
		/* NSpid: <pid in the daemon's namespace> ... <innermost> */
		for (const char *p = line + 6;;) {
			char *end;
			long v;

			while (*p == ' ' || *p == '\t')
				p++;
			if (*p < '0' || *p > '9')
				break;
			v = strtol(p, &end, 10);
			if (v <= 0)
				break;
			last = v;
			p = end;
		}
		if (last <= 0)
			return -EPROTO;
		*nspid = (pid_t)last;
		return 0;
	}
	if (!pidline)
		return -ENOENT;
	last = strtol(pidline, NULL, 10);
	if (last <= 0)
		return -EPROTO;
	*nspid = (pid_t)last;
	return 0;
}

int r2_gpu_status_nslevels(const char *status)
{
	bool pid = false;

	for (const char *line = status; line && *line;
	     line = strchr(line, '\n'), line = line ? line + 1 : NULL) {
		int n = 0;

		if (!strncmp(line, "Pid:", 4))
			pid = true;
		if (strncmp(line, "NSpid:", 6))
			continue;
		for (const char *p = line + 6;;) {
			char *end;

			while (*p == ' ' || *p == '\t')
				p++;
			if (*p < '0' || *p > '9' || strtol(p, &end, 10) <= 0)
				break;
			n++;
			p = end;
		}
		return n > 0 ? n : -EPROTO;
	}
	return pid ? 1 : -ENOENT;
}

int r2_gpu_access_check(int dev_fd, dev_t gpu_rdev, int client_levels, int self_levels,
			char *err, size_t errlen)
{
	struct stat st;
	int fl;

	if (dev_fd < 0) {
		snprintf(err, errlen, "no device file of the GPU came with the handle");
		return -EPERM;
	}
	if (gpu_rdev == 0) {
		snprintf(err, errlen, "r2ccld found no device file for this GPU "
			 "(/proc/driver/nvidia/gpus/*/information)");
		return -EPERM;
	}
	/* opened for reading and writing, as the driver's own users open it:
	 * an O_PATH fd (which open() gives without the file's mode or the
	 * device cgroup allowing anything) or a read-only one proves nothing */
	fl = fcntl(dev_fd, F_GETFL);
	if (fl < 0 || (fl & O_PATH) || (fl & O_ACCMODE) != O_RDWR) {
		snprintf(err, errlen, "the device file passed was not opened for reading and "
			 "writing");
		return -EPERM;
	}
	if (fstat(dev_fd, &st) < 0 || !S_ISCHR(st.st_mode) || st.st_rdev != gpu_rdev) {
		snprintf(err, errlen, "the file passed is not this GPU's device file (%u:%u)",
			 major(gpu_rdev), minor(gpu_rdev));
		return -EPERM;
	}
	if (self_levels != 1 || client_levels != 1) {
		snprintf(err, errlen, "the client is not in r2ccld's pid namespace (a driver may "
			 "not let it open handles of processes it cannot see)");
		return -EPERM;
	}
	return 0;
}

int r2_gpu_status_uid(const char *status, uid_t *uid)
{
	for (const char *line = status; line && *line;
	     line = strchr(line, '\n'), line = line ? line + 1 : NULL) {
		const char *p = line + 4;
		unsigned long v[4];

		if (strncmp(line, "Uid:", 4))
			continue;
		for (int i = 0; i < 4; i++) {
			char *end;

			while (*p == ' ' || *p == '\t')
				p++;
			if (*p < '0' || *p > '9')
				return -EPROTO;
			v[i] = strtoul(p, &end, 10);
			p = end;
		}
		if (v[1] != v[0] || v[2] != v[0] || v[3] != v[0])
			return -EPROTO;
		*uid = (uid_t)v[0];
		return 0;
	}
	return -ENOENT;
}

int r2_gpu_proc_uid(pid_t pid, uid_t *uid)
{
	char path[64], buf[4096];
	ssize_t n;
	int fd;

	snprintf(path, sizeof(path), "/proc/%d/status", (int)pid);
	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return -errno;
	n = read(fd, buf, sizeof(buf) - 1);
	close(fd);
	if (n <= 0)
		return -EIO;
	buf[n] = 0;
	return r2_gpu_status_uid(buf, uid);
}

int r2_gpu_sole_user_check(const pid_t *pids, size_t n, pid_t self, uid_t uid,
			   int (*uid_of)(pid_t, uid_t *), char *err, size_t errlen)
{
	size_t mine = 0;

	for (size_t i = 0; i < n; i++) {
		uid_t u;

		if (pids[i] == self)
			continue;
		if (pids[i] <= 0 || uid_of(pids[i], &u) < 0) {
			snprintf(err, errlen, "process %d on this GPU is not known (its user cannot "
				 "be read)", (int)pids[i]);
			return -EPERM;
		}
		if (u != uid) {
			snprintf(err, errlen, "process %d on this GPU runs as uid %u, not the "
				 "client's %u", (int)pids[i], (unsigned)u, (unsigned)uid);
			return -EPERM;
		}
		mine++;
	}
	if (!mine) {
		snprintf(err, errlen, "no process of the client's user is on this GPU (the "
			 "handle's exporter must be)");
		return -EPERM;
	}
	return 0;
}

int r2_gpu_pidfd_alive(int pidfd)
{
	struct pollfd p = { pidfd, POLLIN, 0 };
	int r;

	if (pidfd < 0)
		return -EBADF;
	r = poll(&p, 1, 0);
	if (r < 0)
		return -errno;
	if (p.revents & POLLNVAL)
		return -EBADF;
	return r == 0; /* readable: the process exited */
}

int r2_gpu_ipc_owner_check(enum r2_gpu_legacy policy, const uint8_t *h, size_t len, int pid_off,
			   int pidfd, pid_t nspid, char *err, size_t errlen)
{
	pid_t exporter;

	switch (policy) {
	case R2_GPU_LEGACY_ALLOW:
		return 0;
	case R2_GPU_LEGACY_DENY:
		snprintf(err, errlen,
			 "gpu_legacy_ipc=deny: legacy CUDA IPC handles (cudaMalloc memory) are "
			 "refused; allocate with cuMem and a POSIX fd handle type");
		return -EPERM;
	case R2_GPU_LEGACY_SAME_PID:
	case R2_GPU_LEGACY_GPU_ACCESS: /* its own test first (memory.c), then this */
		break;
	default:
		snprintf(err, errlen, "gpu_legacy_ipc: unknown policy %d", (int)policy);
		return -EPERM;
	}
	if (pid_off == -EACCES) {
		snprintf(err, errlen,
			 "gpu_legacy_ipc=same-pid: this driver opens a legacy IPC handle whose "
			 "pid was rewritten, so a handle's pid proves nothing here and none is "
			 "opened; allocate with cuMem and a POSIX fd handle type (libnccl stages "
			 "cudaMalloc memory), or set gpu_legacy_ipc=allow where the host's "
			 "users trust each other");
		return -EPERM;
	}
	if (pid_off < 0) {
		snprintf(err, errlen,
			 "gpu_legacy_ipc=same-pid: this driver's IPC handles hold the exporter's "
			 "pid at no one place r2ccld could find, so no handle can be checked");
		return -EPERM;
	}
	if (r2_gpu_ipc_handle_pid(h, len, pid_off, &exporter) < 0) {
		snprintf(err, errlen,
			 "gpu_legacy_ipc=same-pid: the IPC handle holds no pid at byte %d, where "
			 "this driver puts the exporter's",
			 pid_off);
		return -EPERM;
	}
	if (pidfd < 0 || nspid <= 0) {
		snprintf(err, errlen,
			 "gpu_legacy_ipc=same-pid: the client's process could not be pinned at "
			 "connect (no pidfd), so its pid proves nothing");
		return -EPERM;
	}
	if (r2_gpu_pidfd_alive(pidfd) != 1) {
		snprintf(err, errlen,
			 "gpu_legacy_ipc=same-pid: the process that connected has exited (its pid "
			 "may now be another's)");
		return -EPERM;
	}
	if (exporter != nspid) {
		snprintf(err, errlen,
			 "gpu_legacy_ipc=same-pid: the IPC handle was exported by pid %d, not by "
			 "the client (pid %d)",
			 (int)exporter, (int)nspid);
		return -EPERM;
	}
	return 0;
}

void r2_gpu_stage_claim(char *p, size_t cap, uint64_t *owner, size_t *dirty, uint64_t new_owner,
			size_t size)
{
	if (*owner != new_owner) {
		memset(p, 0, *dirty < cap ? *dirty : cap);
		*owner = new_owner;
		*dirty = 0;
	}
	if (size > *dirty)
		*dirty = size;
}
