/* SPDX-License-Identifier: MIT */
/*
 * A GPU memory registration on a raw control connection (ipc_raw.h).
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "framing.h"
#include "gpu_abi.h"
#include "harness.h"
#include "ipc_raw.h"
#include "nvdev.h"
#include "r2ccl.pb-c.h"

static int send_msg(int fd, uint16_t type, const ProtobufCMessage *m, const int *fds, int nfds)
{
	uint8_t buf[512];
	size_t len = protobuf_c_message_get_packed_size(m);

	if (len > sizeof(buf))
		return -EMSGSIZE;
	protobuf_c_message_pack(m, buf);
	return r2_frame_send(fd, type, buf, (uint32_t)len, fds, nfds, 5000);
}

/* the next frame of type want (1), else negative */
static int recv_msg(int fd, struct r2_frame_reader *rd, struct r2_frame *f, uint16_t want)
{
	int r = r2_frame_recv(fd, rd, f, 10000);

	if (r != 1)
		return r < 0 ? r : -ETIMEDOUT;
	if (f->type != want) {
		r2_frame_free(f);
		return -EPROTO;
	}
	return 1;
}

int ipc_raw_register(const char *socket, const uint8_t *handle, const uint8_t *uuid,
		     uint64_t alloc_base, uint64_t alloc_size, int dev_fd, char *err,
		     size_t errlen)
{
	R2ccl__Hello h = R2CCL__HELLO__INIT;
	R2ccl__MemRegisterGpu m = R2CCL__MEM_REGISTER_GPU__INIT;
	R2ccl__HelloReply *hr = NULL;
	R2ccl__MemRegisterReply *rep = NULL;
	struct r2_frame_reader rd;
	struct r2_frame f;
	int fd, r;

	snprintf(err, errlen, "no reply");
	fd = th_connect_raw(socket);
	if (fd < 0)
		return fd;
	r2_frame_reader_init(&rd, 1 << 20);
	h.proto_version = R2CCL__PROTO_VERSION__PROTO_VERSION_CURRENT;
	h.client_name = (char *)"ipc-attacker";
	r = send_msg(fd, R2CCL__MSG_TYPE__MSG_HELLO, &h.base, NULL, 0);
	if (r == 0)
		r = recv_msg(fd, &rd, &f, R2CCL__MSG_TYPE__MSG_HELLO_REPLY);
	if (r < 0)
		goto out;
	hr = r2ccl__hello_reply__unpack(NULL, f.len, f.payload);
	r2_frame_free(&f); /* closes the ring's fds */
	if (!hr || hr->status != 0) {
		r = hr ? hr->status : -EPROTO;
		snprintf(err, errlen, "hello: %s", hr && hr->error ? hr->error : "unpack");
		goto out;
	}
	m.req_id = 1;
	m.kind = R2_GPU_MEM_IPC;
	m.ipc_handle.data = (uint8_t *)handle;
	m.ipc_handle.len = 64;
	m.device_uuid.data = (uint8_t *)uuid;
	m.device_uuid.len = 16;
	m.alloc_base = alloc_base;
	m.alloc_size = alloc_size;
	m.offset = 0;
	m.size = alloc_size;
	if (dev_fd >= 0)
		r = send_msg(fd, R2CCL__MSG_TYPE__MSG_MEM_REGISTER_GPU_FD, &m.base, &dev_fd, 1);
	else
		r = send_msg(fd, R2CCL__MSG_TYPE__MSG_MEM_REGISTER_GPU, &m.base, NULL, 0);
	if (r == 0)
		r = recv_msg(fd, &rd, &f, R2CCL__MSG_TYPE__MSG_MEM_REGISTER_REPLY);
	if (r < 0)
		goto out;
	rep = r2ccl__mem_register_reply__unpack(NULL, f.len, f.payload);
	r2_frame_free(&f);
	if (!rep) {
		r = -EPROTO;
		goto out;
	}
	r = rep->status;
	snprintf(err, errlen, "%s", rep->error ? rep->error : "");
out:
	if (hr)
		r2ccl__hello_reply__free_unpacked(hr, NULL);
	if (rep)
		r2ccl__mem_register_reply__free_unpacked(rep, NULL);
	r2_frame_reader_reset(&rd);
	close(fd);
	return r;
}

int ipc_raw_dev_file(const char *bus)
{
	char path[32];
	int minor = r2_nvidia_minor(bus), fd;

	if (minor < 0)
		return minor;
	snprintf(path, sizeof(path), "/dev/nvidia%d", minor);
	fd = open(path, O_RDWR | O_CLOEXEC);
	return fd < 0 ? -errno : fd;
}
