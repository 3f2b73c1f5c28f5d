#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""What gpu_legacy_ipc=gpu-access rests on (docs/security.md, "GPU memory"):
legacy CUDA IPC checks no importer, so a process of one user that can use the
GPU opens a handle another user's process exported. Run as root on a GPU
machine: an exporter as uid 65534 allocates 2 MiB (cuMemAlloc) filled with
0x5a and writes its IPC handle to a pipe; importers as uid 65533 (another
user) and as 65534 (the same user, the control) open the handle and read the
memory back. The CUDA driver API through ctypes, no build needed.
Exit 0: the other user opened it and read 0x5a (the premise holds); 1: it
was refused (gpu-access must then not be the default on this driver);
77: not root, or no GPU."""
import ctypes
import os
import sys

SIZE = 2 << 20


class Handle(ctypes.Structure):
    _fields_ = [('reserved', ctypes.c_char * 64)]


def cuda():
    cu = ctypes.CDLL('libcuda.so.1')

    def f(*names):
        for n in names:
            if hasattr(cu, n):
                return getattr(cu, n)
        raise OSError('no ' + names[0])
    if cu.cuInit(0) != 0:
        raise OSError('cuInit failed')
    dev, ctx = ctypes.c_int(), ctypes.c_void_p()
    if cu.cuDeviceGet(ctypes.byref(dev), 0) != 0 or \
            cu.cuDevicePrimaryCtxRetain(ctypes.byref(ctx), dev) != 0 or \
            cu.cuCtxSetCurrent(ctx) != 0:
        raise OSError('no context on GPU 0')
    return cu, f


def exporter(wfd, rfd):
    cu, f = cuda()
    p, h = ctypes.c_uint64(), Handle()
    assert f('cuMemAlloc_v2', 'cuMemAlloc')(ctypes.byref(p), ctypes.c_size_t(SIZE)) == 0
    assert f('cuMemsetD8_v2', 'cuMemsetD8')(p, ctypes.c_ubyte(0x5a), ctypes.c_size_t(SIZE)) == 0
    assert cu.cuCtxSynchronize() == 0
    assert cu.cuIpcGetMemHandle(ctypes.byref(h), p) == 0
    os.write(wfd, ctypes.string_at(ctypes.byref(h), 64))  # h.reserved stops at a NUL
    os.read(rfd, 1)  # until the parent closes it


def importer(raw):
    cu, f = cuda()
    h = Handle()
    ctypes.memmove(ctypes.byref(h), raw, 64)
    p = ctypes.c_uint64()
    r = f('cuIpcOpenMemHandle_v2', 'cuIpcOpenMemHandle')(ctypes.byref(p), h, ctypes.c_uint(1))
    if r != 0:
        print('refused: cuIpcOpenMemHandle error %d' % r)
        return 1
    buf = (ctypes.c_ubyte * 16)()
    r = f('cuMemcpyDtoH_v2', 'cuMemcpyDtoH')(buf, p, ctypes.c_size_t(16))
    ok = r == 0 and all(b == 0x5a for b in buf)
    print('opened, read %s' % ('0x5a' if ok else 'something else (error %d)' % r))
    cu.cuIpcCloseMemHandle(p)
    return 0 if ok else 2


def as_user(uid, fn, *args, close=()):
    pid = os.fork()
    if pid == 0:
        try:
            for fd in close:
                os.close(fd)
            os.setgroups([])
            os.setgid(uid)
            os.setuid(uid)
            os._exit(fn(*args) or 0)
        except Exception as e:  # noqa: BLE001 -- reported, the child's only job
            print('uid %d: %s' % (uid, e))
            os._exit(3)
    return pid


def main():
    if os.geteuid() != 0:
        print('skip: needs root (to run as two users)')
        return 77
    if not os.path.exists('/dev/nvidia0'):
        print('skip: no GPU')
        return 77
    hr, hw = os.pipe()
    kr, kw = os.pipe()
    exp = as_user(65534, exporter, hw, kr, close=(hr, kw))
    os.close(hw)
    os.close(kr)
    raw = b''
    while len(raw) < 64:
        b = os.read(hr, 64 - len(raw))
        if not b:
            break
        raw += b
    if len(raw) < 64:
        print('skip: the exporter (uid 65534) made no handle')
        os.waitpid(exp, 0)
        return 77
    res = {}
    for uid, who in ((65534, 'same user'), (65533, 'another user')):
        sys.stdout.write('importer uid %d (%s): ' % (uid, who))
        sys.stdout.flush()
        _, st = os.waitpid(as_user(uid, importer, raw, close=(hr, kw)), 0)
        res[who] = os.waitstatus_to_exitcode(st)
    os.close(kw)
    os.waitpid(exp, 0)
    if res['same user'] != 0:
        print('the control failed: no conclusion')
        return 77
    held = res['another user'] == 0
    print('legacy IPC checks no importer across users: %s' % ('yes' if held else 'NO'))
    return 0 if held else 1


if __name__ == '__main__':
    sys.exit(main())
