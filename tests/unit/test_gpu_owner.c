// SPDX-License-Identifier: MIT
/* Unit tests of the owner check of legacy CUDA IPC handles
 * (daemon/gpu/owner.h): the gpu_legacy_ipc policy, where the exporter's pid
 * sits in a handle (learnt from two handles of one process), the client's
 * pid as /proc/<pid>/status gives it, the pidfd that tells a live client
 * from a reused pid, and the decision with the reason a refusal names.
 * Handles are synthetic 64-byte arrays: no GPU. */
#include <check.h>
#include <stdbool.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include "gpu/owner.h"
#include "nvdev.h"

#define HB 64

static void put_pid(uint8_t *h, int off, uint32_t pid)
{
	h[off] = (uint8_t)pid;
	h[off + 1] = (uint8_t)(pid >> 8);
	h[off + 2] = (uint8_t)(pid >> 16);
	h[off + 3] = (uint8_t)(pid >> 24);
}

/* a handle as a driver that writes the pid at byte off would make it */
static void handle(uint8_t *h, int off, uint32_t pid, uint8_t fill)
{
	for (int i = 0; i < HB; i++)
		h[i] = (uint8_t)(fill + 7 * i);
	put_pid(h, off, pid);
}

static int pidfd_of(pid_t pid)
{
	return (int)syscall(SYS_pidfd_open, pid, 0);
}

/* a child that waits until its pipe closes; *wfd is the pipe's write end */
static pid_t child(int *wfd)
{
	int p[2];
	pid_t c;
	char b;

	ck_assert_int_eq(pipe(p), 0);
	c = fork();
	ck_assert_int_ge(c, 0);
	if (c == 0) {
		close(p[1]);
		(void)!read(p[0], &b, 1);
		_exit(0);
	}
	close(p[0]);
	*wfd = p[1];
	return c;
}

START_TEST(test_policy_parse)
{
	ck_assert_int_eq(r2_gpu_legacy_parse("allow"), R2_GPU_LEGACY_ALLOW);
	ck_assert_int_eq(r2_gpu_legacy_parse("same-pid"), R2_GPU_LEGACY_SAME_PID);
	ck_assert_int_eq(r2_gpu_legacy_parse("deny"), R2_GPU_LEGACY_DENY);
	ck_assert_int_eq(r2_gpu_legacy_parse("gpu-access"), R2_GPU_LEGACY_GPU_ACCESS);
	ck_assert_int_eq(r2_gpu_legacy_parse("same_pid"), -EINVAL);
	ck_assert_int_eq(r2_gpu_legacy_parse(""), -EINVAL);
	ck_assert_int_eq(r2_gpu_legacy_parse(NULL), -EINVAL);
}
END_TEST

/* the offset is the one aligned place holding the pid in both handles */
START_TEST(test_pid_offset)
{
	uint8_t a[HB], b[HB];

	handle(a, 8, 4242, 1);
	handle(b, 8, 4242, 99);
	ck_assert_int_eq(r2_gpu_ipc_pid_offset(a, b, HB, 4242), 8);
	/* the pid elsewhere in one handle only (an address, a size): still 8 */
	put_pid(a, 40, 4242);
	ck_assert_int_eq(r2_gpu_ipc_pid_offset(a, b, HB, 4242), 8);
	/* at an unaligned place in both: not a field */
	handle(a, 8, 4242, 1);
	handle(b, 8, 4242, 99);
	put_pid(a, 21, 4242);
	put_pid(b, 21, 4242);
	ck_assert_int_eq(r2_gpu_ipc_pid_offset(a, b, HB, 4242), 8);
	/* two common places: ambiguous, no answer */
	put_pid(a, 60, 4242);
	put_pid(b, 60, 4242);
	ck_assert_int_eq(r2_gpu_ipc_pid_offset(a, b, HB, 4242), -EEXIST);
	/* nowhere (a driver that does not write the pid, or another pid) */
	handle(a, 8, 4242, 1);
	handle(b, 8, 4242, 99);
	ck_assert_int_eq(r2_gpu_ipc_pid_offset(a, b, HB, 4243), -ENOENT);
	ck_assert_int_eq(r2_gpu_ipc_pid_offset(a, b, HB, 0), -ENOENT);
	/* the pid at the last word counts */
	handle(a, 60, 77, 3);
	handle(b, 60, 77, 4);
	ck_assert_int_eq(r2_gpu_ipc_pid_offset(a, b, HB, 77), 60);
}
END_TEST

START_TEST(test_handle_pid)
{
	uint8_t h[HB];
	pid_t pid = 0;

	handle(h, 12, 31337, 5);
	ck_assert_int_eq(r2_gpu_ipc_handle_pid(h, HB, 12, &pid), 0);
	ck_assert_int_eq(pid, 31337);
	ck_assert_int_eq(r2_gpu_ipc_handle_pid(h, HB, 61, &pid), -EPROTO); /* past the end */
	ck_assert_int_eq(r2_gpu_ipc_handle_pid(h, HB, -1, &pid), -EPROTO);
	ck_assert_int_eq(r2_gpu_ipc_handle_pid(h, 16, 12, &pid), 0);
	ck_assert_int_eq(r2_gpu_ipc_handle_pid(h, 15, 12, &pid), -EPROTO); /* short */
	put_pid(h, 12, 0);
	ck_assert_int_eq(r2_gpu_ipc_handle_pid(h, HB, 12, &pid), -EPROTO);
	put_pid(h, 12, (1u << 22) + 1); /* over PID_MAX_LIMIT */
	ck_assert_int_eq(r2_gpu_ipc_handle_pid(h, HB, 12, &pid), -EPROTO);
}
END_TEST

START_TEST(test_status_nspid)
{
	pid_t p = 0;
	char buf[4096];
	FILE *f;
	size_t n;

	/* a client in a container: the innermost pid is the one it sees */
	ck_assert_int_eq(r2_gpu_status_nspid("Name:\tpython3\nTgid:\t5001\nPid:\t5001\n"
					     "NSpid:\t5001\t17\nPPid:\t1\n", &p), 0);
	ck_assert_int_eq(p, 17);
	ck_assert_int_eq(r2_gpu_status_nspid("Pid:\t5001\nNSpid:\t5001 300 9\n", &p), 0);
	ck_assert_int_eq(p, 9);
	/* no pid namespaces (no NSpid line): Pid */
	ck_assert_int_eq(r2_gpu_status_nspid("Name:\tx\nPid:\t812\nPPid:\t1\n", &p), 0);
	ck_assert_int_eq(p, 812);
	ck_assert_int_eq(r2_gpu_status_nspid("Name:\tx\n", &p), -ENOENT);
	ck_assert_int_eq(r2_gpu_status_nspid("NSpid:\tx\n", &p), -EPROTO);
	/* this process's own: the pid it sees (one namespace here) */
	f = fopen("/proc/self/status", "re");
	ck_assert_ptr_nonnull(f);
	n = fread(buf, 1, sizeof(buf) - 1, f);
	fclose(f);
	buf[n] = 0;
	ck_assert_int_eq(r2_gpu_status_nspid(buf, &p), 0);
	ck_assert_int_eq(p, getpid());
}
END_TEST

START_TEST(test_pidfd_alive)
{
	int wfd, fd;
	pid_t c = child(&wfd);

	fd = pidfd_of(c);
	if (fd < 0) {
		close(wfd);
		waitpid(c, NULL, 0);
		return; /* no pidfd_open (Linux < 5.3): nothing to test */
	}
	ck_assert_int_eq(r2_gpu_pidfd_alive(fd), 1);
	close(wfd); /* the child exits */
	ck_assert_int_eq(waitpid(c, NULL, 0), c);
	ck_assert_int_eq(r2_gpu_pidfd_alive(fd), 0);
	close(fd);
	ck_assert_int_eq(r2_gpu_pidfd_alive(-1), -EBADF);
}
END_TEST

START_TEST(test_check_allow_deny)
{
	uint8_t h[HB];
	char err[256] = "";

	handle(h, 8, 1, 0); /* anyone's */
	ck_assert_int_eq(r2_gpu_ipc_owner_check(R2_GPU_LEGACY_ALLOW, h, HB, -1, -1, 0, err,
						sizeof(err)), 0);
	ck_assert_int_eq(r2_gpu_ipc_owner_check(R2_GPU_LEGACY_DENY, h, HB, 8, -1, 0, err,
						sizeof(err)), -EPERM);
	ck_assert_ptr_nonnull(strstr(err, "gpu_legacy_ipc=deny"));
}
END_TEST

/* same-pid: its own handle passes; another process's, a reused pid, an
 * unknown layout or an unpinned client do not, each with its reason */
START_TEST(test_check_same_pid)
{
	uint8_t h[HB];
	char err[256] = "";
	int self = pidfd_of(getpid()), wfd, cfd;
	pid_t c;

	if (self < 0)
		return; /* no pidfd_open: every same-pid check refuses (tested below) */
	handle(h, 8, (uint32_t)getpid(), 0x30);
	ck_assert_int_eq(r2_gpu_ipc_owner_check(R2_GPU_LEGACY_SAME_PID, h, HB, 8, self, getpid(),
						err, sizeof(err)), 0);

	/* a handle another process exported (the attack of issue 23) */
	c = child(&wfd);
	handle(h, 8, (uint32_t)c, 0x30);
	err[0] = 0;
	ck_assert_int_eq(r2_gpu_ipc_owner_check(R2_GPU_LEGACY_SAME_PID, h, HB, 8, self, getpid(),
						err, sizeof(err)), -EPERM);
	ck_assert_ptr_nonnull(strstr(err, "exported by pid"));

	/* the client exited: its pid may be the exporter's now (reused) */
	cfd = pidfd_of(c);
	ck_assert_int_ge(cfd, 0);
	close(wfd);
	ck_assert_int_eq(waitpid(c, NULL, 0), c);
	err[0] = 0;
	ck_assert_int_eq(r2_gpu_ipc_owner_check(R2_GPU_LEGACY_SAME_PID, h, HB, 8, cfd, c, err,
						sizeof(err)), -EPERM);
	ck_assert_ptr_nonnull(strstr(err, "exited"));
	close(cfd);

	/* no pidfd, or the layout not learnt, or no pid at the offset */
	handle(h, 8, (uint32_t)getpid(), 0x30);
	ck_assert_int_eq(r2_gpu_ipc_owner_check(R2_GPU_LEGACY_SAME_PID, h, HB, 8, -1, getpid(),
						err, sizeof(err)), -EPERM);
	ck_assert_ptr_nonnull(strstr(err, "pidfd"));
	ck_assert_int_eq(r2_gpu_ipc_owner_check(R2_GPU_LEGACY_SAME_PID, h, HB, -ENOENT, self,
						getpid(), err, sizeof(err)), -EPERM);
	ck_assert_ptr_nonnull(strstr(err, "no one place"));
	/* a driver that opens a handle whose pid was rewritten (memory.c's
	 * check at learning time): the client's own handle is refused too */
	ck_assert_int_eq(r2_gpu_ipc_owner_check(R2_GPU_LEGACY_SAME_PID, h, HB, -EACCES, self,
						getpid(), err, sizeof(err)), -EPERM);
	ck_assert_ptr_nonnull(strstr(err, "pid was rewritten"));
	put_pid(h, 8, 0);
	ck_assert_int_eq(r2_gpu_ipc_owner_check(R2_GPU_LEGACY_SAME_PID, h, HB, 8, self, getpid(),
						err, sizeof(err)), -EPERM);
	ck_assert_ptr_nonnull(strstr(err, "no pid at byte 8"));
	/* a handle of the wrong length */
	handle(h, 8, (uint32_t)getpid(), 0x30);
	ck_assert_int_eq(r2_gpu_ipc_owner_check(R2_GPU_LEGACY_SAME_PID, h, 10, 8, self, getpid(),
						err, sizeof(err)), -EPERM);
	close(self);
}
END_TEST

/* the pid namespace depth from a status text */
START_TEST(test_status_nslevels)
{
	ck_assert_int_eq(r2_gpu_status_nslevels("Name:\tx\nPid:\t42\nNSpid:\t42\n"), 1);
	ck_assert_int_eq(r2_gpu_status_nslevels("Pid:\t42\nNSpid:\t42\t7\n"), 2);
	ck_assert_int_eq(r2_gpu_status_nslevels("Pid:\t42\nNSpid:\t42 7 1\n"), 3);
	ck_assert_int_eq(r2_gpu_status_nslevels("Pid:\t42\n"), 1); /* no pid namespaces */
	ck_assert_int_eq(r2_gpu_status_nslevels("NSpid:\t\n"), -EPROTO);
	ck_assert_int_eq(r2_gpu_status_nslevels("Name:\tx\n"), -ENOENT);
}
END_TEST

/* gpu-access: the device file passed is the GPU's, in the daemon's pid
 * namespace. /dev/null and /dev/zero stand in for two GPUs' files. */
START_TEST(test_check_gpu_access)
{
	struct stat null_st, zero_st;
	char err[256];
	int null_fd = open("/dev/null", O_RDWR), zero_fd = open("/dev/zero", O_RDWR);
	int file_fd = open("/proc/self/status", O_RDONLY);
	int path_fd = open("/dev/null", O_PATH), ro_fd = open("/dev/null", O_RDONLY);

	ck_assert_int_ge(null_fd, 0);
	ck_assert_int_ge(zero_fd, 0);
	ck_assert_int_ge(file_fd, 0);
	ck_assert_int_ge(path_fd, 0);
	ck_assert_int_ge(ro_fd, 0);
	ck_assert_int_eq(fstat(null_fd, &null_st), 0);
	ck_assert_int_eq(fstat(zero_fd, &zero_st), 0);
	ck_assert_int_eq(r2_gpu_access_check(null_fd, null_st.st_rdev, 1, 1, err, sizeof(err)), 0);
	/* another device's file */
	ck_assert_int_eq(r2_gpu_access_check(zero_fd, null_st.st_rdev, 1, 1, err, sizeof(err)),
			 -EPERM);
	ck_assert_ptr_nonnull(strstr(err, "not this GPU's device file"));
	/* the right device, but an O_PATH fd (open() checks no access for it) or
	 * one opened read-only: no proof */
	ck_assert_int_eq(r2_gpu_access_check(path_fd, null_st.st_rdev, 1, 1, err, sizeof(err)),
			 -EPERM);
	ck_assert_ptr_nonnull(strstr(err, "reading and writing"));
	ck_assert_int_eq(r2_gpu_access_check(ro_fd, null_st.st_rdev, 1, 1, err, sizeof(err)),
			 -EPERM);
	/* a regular file: no st_rdev to match, whatever it holds */
	ck_assert_int_eq(r2_gpu_access_check(file_fd, null_st.st_rdev, 1, 1, err, sizeof(err)),
			 -EPERM);
	/* no file, or the GPU's own not known */
	ck_assert_int_eq(r2_gpu_access_check(-1, null_st.st_rdev, 1, 1, err, sizeof(err)), -EPERM);
	ck_assert_ptr_nonnull(strstr(err, "no device file"));
	ck_assert_int_eq(r2_gpu_access_check(null_fd, 0, 1, 1, err, sizeof(err)), -EPERM);
	/* a client in a child pid namespace, or a daemon in one, or not read */
	ck_assert_int_eq(r2_gpu_access_check(null_fd, null_st.st_rdev, 2, 1, err, sizeof(err)),
			 -EPERM);
	ck_assert_ptr_nonnull(strstr(err, "pid namespace"));
	ck_assert_int_eq(r2_gpu_access_check(null_fd, null_st.st_rdev, 1, 2, err, sizeof(err)),
			 -EPERM);
	ck_assert_int_eq(r2_gpu_access_check(null_fd, null_st.st_rdev, 0, 1, err, sizeof(err)),
			 -EPERM);
	close(null_fd);
	close(zero_fd);
	close(file_fd);
	close(path_fd);
	close(ro_fd);
}
END_TEST

/* the effective uid of a status text, and of a live process */
START_TEST(test_status_uid)
{
	uid_t u = 99;

	ck_assert_int_eq(r2_gpu_status_uid("Name:\tx\nUid:\t1000\t1000\t1000\t1000\n", &u), 0);
	ck_assert_uint_eq(u, 1000);
	/* real, effective, saved or fs uid of another user: not one user's */
	ck_assert_int_eq(r2_gpu_status_uid("Uid:\t1000\t1001\t1000\t1000\n", &u), -EPROTO);
	ck_assert_int_eq(r2_gpu_status_uid("Uid:\t1000\t1000\t1000\t0\n", &u), -EPROTO);
	ck_assert_int_eq(r2_gpu_status_uid("Uid:\t1000\t1000\n", &u), -EPROTO);
	ck_assert_int_eq(r2_gpu_status_uid("Name:\tx\n", &u), -ENOENT);
	ck_assert_int_eq(r2_gpu_proc_uid(getpid(), &u), 0);
	ck_assert_uint_eq(u, geteuid());
	ck_assert_int_lt(r2_gpu_proc_uid(0x3fffff, &u), 0); /* no such process */
}
END_TEST

/* uids of the fake processes 100.. of test_sole_user: 100 + i -> uids[i] */
static const uid_t fake_uids[] = { 1000, 1000, 0, 1001 };
static int fake_uid_of(pid_t pid, uid_t *uid)
{
	if (pid < 100 || pid >= 100 + (pid_t)(sizeof(fake_uids) / sizeof(fake_uids[0])))
		return -ESRCH;
	*uid = fake_uids[pid - 100];
	return 0;
}

/* gpu-access's second test: only the client's user on the GPU, r2ccld aside */
START_TEST(test_sole_user)
{
	char err[256];
	pid_t two[] = { 100, 101 }, with_daemon[] = { 100, 102, 101 }, other[] = { 100, 103 };
	pid_t gone[] = { 100, 555 }, zero[] = { 0 };

	/* nobody on the GPU, or only r2ccld: the exporter is not there */
	ck_assert_int_eq(r2_gpu_sole_user_check(NULL, 0, 102, 1000, fake_uid_of, err, sizeof(err)),
			 -EPERM);
	ck_assert_ptr_nonnull(strstr(err, "exporter"));
	pid_t only_daemon[] = { 102 };
	ck_assert_int_eq(r2_gpu_sole_user_check(only_daemon, 1, 102, 1000, fake_uid_of, err,
						sizeof(err)), -EPERM);
	ck_assert_int_eq(r2_gpu_sole_user_check(two, 2, 102, 1000, fake_uid_of, err, sizeof(err)), 0);
	/* r2ccld (102, root) itself does not count */
	ck_assert_int_eq(r2_gpu_sole_user_check(with_daemon, 3, 102, 1000, fake_uid_of, err,
						sizeof(err)), 0);
	/* a root process that is not r2ccld does */
	ck_assert_int_eq(r2_gpu_sole_user_check(with_daemon, 3, 999, 1000, fake_uid_of, err,
						sizeof(err)), -EPERM);
	ck_assert_ptr_nonnull(strstr(err, "process 102"));
	/* another user's process, one not known, a pid NVML could not see */
	ck_assert_int_eq(r2_gpu_sole_user_check(other, 2, 102, 1000, fake_uid_of, err, sizeof(err)),
			 -EPERM);
	ck_assert_ptr_nonnull(strstr(err, "uid 1001"));
	ck_assert_int_eq(r2_gpu_sole_user_check(gone, 2, 102, 1000, fake_uid_of, err, sizeof(err)),
			 -EPERM);
	ck_assert_int_eq(r2_gpu_sole_user_check(zero, 1, 102, 1000, fake_uid_of, err, sizeof(err)),
			 -EPERM);
	/* the client is the other user */
	ck_assert_int_eq(r2_gpu_sole_user_check(two, 2, 102, 1001, fake_uid_of, err, sizeof(err)),
			 -EPERM);
}
END_TEST

/* the N of /dev/nvidiaN in the driver's information file */
START_TEST(test_nvidia_minor)
{
	ck_assert_int_eq(r2_nvidia_minor_parse("Model: \t\t NVIDIA H200\nIRQ:   \t\t 35\n"
					       "GPU UUID: \t GPU-x\nDevice Minor: \t 3\n"
					       "Bus Type: \t PCIe\n"), 3);
	ck_assert_int_eq(r2_nvidia_minor_parse("Device Minor: 0\n"), 0);
	ck_assert_int_eq(r2_nvidia_minor_parse("Model: x\n"), -ENOENT);
	ck_assert_int_eq(r2_nvidia_minor_parse("Device Minor: x\n"), -EPROTO);
	ck_assert_int_eq(r2_nvidia_minor_parse("Device Minor: 300\n"), -EPROTO);
	ck_assert_int_eq(r2_nvidia_minor("0000:zz:00.0"), -ENOENT); /* no such GPU */
	ck_assert_int_eq(r2_nvidia_minor("../../x"), -EINVAL);
	ck_assert_uint_eq(r2_nvidia_rdev(-1), 0);
}
END_TEST

/* MIG: a GPU instance folder ("gi1") in the GPU's capabilities */
START_TEST(test_nvidia_mig)
{
	char dir[] = "/tmp/r2-mig-XXXXXX", sub[64];

	ck_assert_ptr_nonnull(mkdtemp(dir));
	ck_assert_int_eq(r2_nvidia_mig_dir_in_use(dir), 0); /* MIG on, no instance */
	snprintf(sub, sizeof(sub), "%s/config", dir);
	ck_assert_int_eq(mkdir(sub, 0700), 0);
	ck_assert_int_eq(r2_nvidia_mig_dir_in_use(dir), 0);
	snprintf(sub, sizeof(sub), "%s/gi1", dir);
	ck_assert_int_eq(mkdir(sub, 0700), 0);
	ck_assert_int_eq(r2_nvidia_mig_dir_in_use(dir), 1);
	rmdir(sub);
	snprintf(sub, sizeof(sub), "%s/config", dir);
	rmdir(sub);
	rmdir(dir);
	ck_assert_int_eq(r2_nvidia_mig_dir_in_use(dir), 0); /* no folder */
}
END_TEST

/* A staging buffer changing hands (staging.c, docs/tenancy.md): what the
 * last owner may have written is cleared for another, kept for the same. */
static bool all_zero(const char *p, size_t n)
{
	for (size_t i = 0; i < n; i++)
		if (p[i])
			return false;
	return true;
}

START_TEST(test_stage_claim)
{
	char buf[4096];
	uint64_t owner = 0;
	size_t dirty = sizeof(buf); /* fresh heap memory: may hold anything */

	memset(buf, 0x5a, sizeof(buf));
	r2_gpu_stage_claim(buf, sizeof(buf), &owner, &dirty, 11, 1000);
	ck_assert(all_zero(buf, sizeof(buf)));
	ck_assert_uint_eq(owner, 11);
	ck_assert_uint_eq(dirty, 1000);
	memset(buf, 0xaa, 1000); /* tenant 11's bytes */
	/* the same owner again, smaller: its bytes stay, the mark keeps 1000 */
	r2_gpu_stage_claim(buf, sizeof(buf), &owner, &dirty, 11, 100);
	ck_assert_uint_eq((unsigned char)buf[999], 0xaa);
	ck_assert_uint_eq(dirty, 1000);
	/* another owner, who writes only 100 bytes: all 1000 of 11's cleared */
	r2_gpu_stage_claim(buf, sizeof(buf), &owner, &dirty, 22, 100);
	ck_assert(all_zero(buf, sizeof(buf)));
	ck_assert_uint_eq(owner, 22);
	ck_assert_uint_eq(dirty, 100);
	memset(buf, 0xbb, 100);
	r2_gpu_stage_claim(buf, sizeof(buf), &owner, &dirty, 11, 4096);
	ck_assert(all_zero(buf, 100));
	ck_assert_uint_eq(dirty, 4096);
}
END_TEST

static Suite *owner_suite(void)
{
	Suite *s = suite_create("gpu-owner");
	TCase *t = tcase_create("owner");

	tcase_add_test(t, test_policy_parse);
	tcase_add_test(t, test_pid_offset);
	tcase_add_test(t, test_handle_pid);
	tcase_add_test(t, test_status_nspid);
	tcase_add_test(t, test_pidfd_alive);
	tcase_add_test(t, test_check_allow_deny);
	tcase_add_test(t, test_check_same_pid);
	tcase_add_test(t, test_status_nslevels);
	tcase_add_test(t, test_check_gpu_access);
	tcase_add_test(t, test_nvidia_minor);
	tcase_add_test(t, test_nvidia_mig);
	tcase_add_test(t, test_status_uid);
	tcase_add_test(t, test_sole_user);
	tcase_add_test(t, test_stage_claim);
	suite_add_tcase(s, t);
	return s;
}

int main(void)
{
	SRunner *sr = srunner_create(owner_suite());
	int failed;

	srunner_run_all(sr, CK_NORMAL);
	failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed ? 1 : 0;
}
