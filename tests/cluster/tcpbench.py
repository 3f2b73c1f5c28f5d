#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Tiny TCP throughput check for the simulated cluster (stdlib only).

  tcpbench.py recv ADDR PORT [--timeout S]   accept one connection, read to EOF,
                                             print "<bytes> <seconds> <MB/s>"
  tcpbench.py send ADDR PORT BYTES [--bind SRC]
                                             connect (retrying up to 5 s), send BYTES

Run each side in its namespace, e.g.
  cluster.sh exec 1 tests/cluster/tcpbench.py recv 198.18.0.2 5001 &
  cluster.sh exec 0 tests/cluster/tcpbench.py send 198.18.0.2 5001 16M
"""
import socket
import sys
import time


def size(s):
    mult = {"k": 1 << 10, "m": 1 << 20, "g": 1 << 30}
    s = s.lower()
    return int(s[:-1]) * mult[s[-1]] if s[-1] in mult else int(s)


def opt(args, name, default):
    if name in args:
        i = args.index(name)
        v = args[i + 1]
        del args[i:i + 2]
        return v
    return default


def recv(args):
    timeout = float(opt(args, "--timeout", "60"))
    addr, port = args[0], int(args[1])
    ls = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    ls.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    ls.bind((addr, port))
    ls.listen(1)
    ls.settimeout(timeout)
    c, _ = ls.accept()
    c.settimeout(timeout)
    n = 0
    buf = bytearray(1 << 20)
    t0 = None
    while True:
        k = c.recv_into(buf)
        if k == 0:
            break
        if t0 is None:
            t0 = time.monotonic()
        n += k
    dt = time.monotonic() - t0 if t0 is not None else 0.0
    print("%d %.3f %.2f" % (n, dt, n / dt / 1e6 if dt > 0 else 0.0), flush=True)


def send(args):
    src = opt(args, "--bind", None)
    addr, port, nbytes = args[0], int(args[1]), size(args[2])
    deadline = time.monotonic() + 5
    while True:
        s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        if src:
            s.bind((src, 0))
        try:
            s.connect((addr, port))
            break
        except OSError:
            s.close()
            if time.monotonic() > deadline:
                raise
            time.sleep(0.05)
    chunk = b"\0" * (1 << 20)
    left = nbytes
    while left > 0:
        left -= s.send(chunk[:min(left, len(chunk))])
    s.shutdown(socket.SHUT_WR)
    s.recv(1)
    s.close()


if __name__ == "__main__":
    a = sys.argv[1:]
    if not a or a[0] not in ("recv", "send"):
        sys.exit(__doc__)
    (recv if a[0] == "recv" else send)(a[1:])
