/* SPDX-License-Identifier: MIT */
/*
 * Whose GPU memory a client may have r2ccld open (docs/security.md, "GPU
 * memory"). A cuMem POSIX fd passed over SCM_RIGHTS is its own proof: the
 * client could only obtain it by exporting an allocation it holds. A legacy
 * CUDA IPC handle (cudaMalloc memory) is 64 bytes anyone who has seen them
 * can send; gpu_legacy_ipc decides what the daemon does with one:
 *   allow     opens any handle (the confused deputy of issue 23)
 *   same-pid  opens a handle only if the pid the driver wrote into it is the
 *             client's own (SO_PEERCRED, held by a pidfd since accept)
 *   deny      opens none
 *   gpu-access  opens a handle for a client in r2ccld's pid namespace that
 *             passed the GPU's device file (/dev/nvidiaN) with it, while
 *             every process with a context on that GPU runs as the client's
 *             user; or one same-pid opens. The handle's memory is then the
 *             client's user's own, on a GPU the client can use.
 * No CUDA here: the decision is tested without a GPU (tests/unit).
 */
#ifndef R2CCL_DAEMON_GPU_OWNER_H
#define R2CCL_DAEMON_GPU_OWNER_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

/* The inode of the host's (initial) pid namespace (/proc/self/ns/pid),
 * the kernel's PROC_PID_INIT_INO */
#define R2_PROC_PID_INIT_INO 0xEFFFFFFCu

enum r2_gpu_legacy {
	R2_GPU_LEGACY_ALLOW,
	R2_GPU_LEGACY_SAME_PID,
	R2_GPU_LEGACY_DENY,
	R2_GPU_LEGACY_GPU_ACCESS,
};

/* "allow", "same-pid", "deny" or "gpu-access" (the gpu_legacy_ipc
 * parameter); -EINVAL. */
int r2_gpu_legacy_parse(const char *s);

/* Where this driver puts the exporter's pid in a legacy IPC handle of len
 * bytes: the one 4-byte aligned offset that holds pid (little endian) in
 * both h1 and h2, two handles that process pid exported. The layout is not
 * documented (cuda.h: `char reserved[64]`), so r2ccld learns it from handles
 * of its own (memory.c) rather than trusting a constant. -ENOENT if pid is
 * at no common offset, -EEXIST if at several. */
int r2_gpu_ipc_pid_offset(const uint8_t *h1, const uint8_t *h2, size_t len, pid_t pid);

/* The pid at offset off of a handle of len bytes; -EPROTO if off is out of
 * the handle or the value is no pid. */
int r2_gpu_ipc_handle_pid(const uint8_t *h, size_t len, int off, pid_t *pid);

/* The client's pid in its own pid namespace: the last field of the NSpid
 * line of a /proc/<pid>/status text (the pid itself where the kernel has no
 * NSpid line: no pid namespaces). -ENOENT if there is no Pid line. */
int r2_gpu_status_nspid(const char *status, pid_t *nspid);

/* How many pid namespaces deep the process of a /proc/<pid>/status text is,
 * seen from the namespace of that /proc: the fields of its NSpid line (1
 * without one: no pid namespaces). -ENOENT if there is no Pid line. */
int r2_gpu_status_nslevels(const char *status);

/* gpu_legacy_ipc=gpu-access's own test: dev_fd (the file the client passed
 * with the handle; -1 if none), opened for reading and writing (not
 * O_PATH), is the device file gpu_rdev of the GPU the
 * handle's memory is on (0: not known), and the client (client_levels, from
 * r2_gpu_status_nslevels) and r2ccld (self_levels) are both in the pid
 * namespace of the daemon's /proc (1 level each; memory.c gives the daemon 2
 * when it is not in the host's pid namespace). 0, or -EPERM with the reason
 * in err. */
int r2_gpu_access_check(int dev_fd, dev_t gpu_rdev, int client_levels, int self_levels,
			char *err, size_t errlen);

/* The uid in a /proc/<pid>/status text: its Uid line's four (real,
 * effective, saved, file system) when they are one uid; -EPROTO when they
 * differ or are not four, -ENOENT without the line. */
int r2_gpu_status_uid(const char *status, uid_t *uid);

/* The effective uid of process pid, from /proc; -errno. */
int r2_gpu_proc_uid(pid_t pid, uid_t *uid);

/* gpu-access's second test: every process with a context on the GPU (pids[0..n),
 * r2ccld's own, self, aside) runs as uid, the client's, and there is at least
 * one (the exporter must be among them); uid_of gives a process's uid
 * (r2_gpu_proc_uid). A process whose uid cannot be read counts as another
 * user's. 0, or -EPERM with the first other process in err. */
int r2_gpu_sole_user_check(const pid_t *pids, size_t n, pid_t self, uid_t uid,
			   int (*uid_of)(pid_t, uid_t *), char *err, size_t errlen);

/* 1 while the process of pidfd runs, 0 once it exited, -errno. */
int r2_gpu_pidfd_alive(int pidfd);

/* Whether a client may register the legacy IPC handle h (len bytes) under
 * policy: 0, or -EPERM with the check that refused it in err. pid_off is
 * r2_gpu_ipc_pid_offset's answer (negative: not known; -EACCES: known, but
 * the driver opened a handle of the daemon's with another pid written there,
 * memory.c); pidfd and nspid are
 * the session's (struct r2_session). */
int r2_gpu_ipc_owner_check(enum r2_gpu_legacy policy, const uint8_t *h, size_t len, int pid_off,
			   int pidfd, pid_t nspid, char *err, size_t errlen);

/* Whose bytes a cached staging buffer (staging.c) holds: a buffer of cap
 * bytes at p whose [0, *dirty) may hold what its last owner's operation
 * wrote (*owner, a cgroup's key; 0: none yet) is taken by new_owner, who
 * will write [0, size): when the owner changes, [0, *dirty) is cleared
 * first, so no byte of one tenant's GPU buffers is left where another
 * tenant's operation could send it from. */
void r2_gpu_stage_claim(char *p, size_t cap, uint64_t *owner, size_t *dirty, uint64_t new_owner,
			size_t size);

#endif
