#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""A local user without privileges against r2ccld's Unix socket, for
tools/bench/adversary-bench.sh (issue 23; docs/security.md lists the caps).
Plain sockets and hand-made frames (common/framing.h: a 16-byte header,
little-endian; proto/r2ccl.proto), no libr2ccl.

  mix SOCKET SECONDS [--rate N]
      for SECONDS, in one thread, at a fixed pace (N actions a second in
      all, default 250), cycling through:
        prehello  a connection that never says hello, held up to 1 s
                  (max_prehello_per_uid closes those over the cap at once)
        junk      a frame with a bad magic, one announcing 64 MiB before
                  hello, and a header cut short: each session is dropped
        sessions  control hellos kept open, up to 200 (max_sessions_per_uid
                  answers R2CCL_E_QUOTA past its cap)
        requests  one session's status and unique-id requests sent without
                  reading (max_req_rate paces them; ids run into the
                  comm_ids quota)
      Prints one line: actions, closed by the daemon, hellos refused with
      a quota, requests sent, replies read. Exits 0; it attacks, it does not
      judge (the victim's figures do).
"""
import os
import select
import socket
import struct
import sys
import time

MAGIC = 0x46433252
MSG_HELLO, MSG_HELLO_REPLY, MSG_GET_UNIQUE_ID, MSG_STATUS = 1, 2, 4, 12


def varint(v):
    b = b""
    while True:
        c = v & 0x7F
        v >>= 7
        if v:
            b += bytes([c | 0x80])
        else:
            return b + bytes([c])


def frame(typ, payload, length=None):
    n = len(payload) if length is None else length
    return struct.pack("<IHHII", MAGIC, typ, 0, n, 0) + payload


def hello(control_only=True):
    # Hello { proto_version = 1; client_name = "attacker"; control_only }
    p = b"\x08\x01" + b"\x12" + varint(8) + b"attacker"
    if control_only:
        p += b"\x20\x01"
    return frame(MSG_HELLO, p)


def request(typ, req_id):
    return frame(typ, b"\x08" + varint(req_id))


def connect(path):
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.settimeout(2.0)
    s.connect(path)
    return s


def closed(s):
    """True when the daemon closed s (readable and EOF or reset)."""
    try:
        r, _, _ = select.select([s], [], [], 0)
        if not r:
            return False
        return s.recv(65536, socket.MSG_DONTWAIT) == b""
    except (BlockingIOError, InterruptedError):
        return False
    except OSError:
        return True


def hello_status(s):
    """Reads the HelloReply; its status field (0: accepted), or None."""
    try:
        h = s.recv(16, socket.MSG_WAITALL)
        if len(h) < 16:
            return None
        _, typ, _, n, _ = struct.unpack("<IHHII", h)
        p = s.recv(n, socket.MSG_WAITALL) if n else b""
        if typ != MSG_HELLO_REPLY:
            return None
        # field 1 (status, int32 varint) first when non-zero
        if p[:1] == b"\x08":
            v, sh, i = 0, 0, 1
            while i < len(p):
                v |= (p[i] & 0x7F) << sh
                sh += 7
                if not p[i] & 0x80:
                    break
                i += 1
            return v - (1 << 64) if v >= 1 << 63 else v
        return 0
    except OSError:
        return None


def mix(path, seconds, rate=250.0):
    end = time.monotonic() + seconds
    pace = 1.0 / rate
    held = []  # (socket, deadline) of pre-hello connections
    sessions = []
    st = dict(actions=0, closed=0, quota=0, sent=0, replies=0)
    flooder = None
    req_id = 1
    k = 0
    while time.monotonic() < end:
        t0 = time.monotonic()
        kind = k % 4
        k += 1
        st["actions"] += 1
        try:
            if kind == 0:
                s = connect(path)
                held.append((s, t0 + 1.0))
            elif kind == 1:
                s = connect(path)
                bad = [struct.pack("<IHHII", 0xDEADBEEF, 1, 0, 8, 0) + b"x" * 8,
                       frame(MSG_HELLO, b"", length=64 << 20),
                       struct.pack("<IHH", MAGIC, 1, 0)][k // 4 % 3]
                s.sendall(bad)
                if bad[:4] != struct.pack("<I", MAGIC) or len(bad) > 8:
                    r, _, _ = select.select([s], [], [], 0.5)
                    if r and closed(s):
                        st["closed"] += 1
                s.close()
            elif kind == 2:
                if len(sessions) < 200:
                    s = connect(path)
                    s.sendall(hello())
                    rc = hello_status(s)
                    if rc == 0:
                        sessions.append(s)
                    else:
                        st["quota"] += 1
                        s.close()
            else:
                if flooder is None:
                    flooder = connect(path)
                    flooder.sendall(hello())
                    if hello_status(flooder) != 0:
                        flooder.close()
                        flooder = None
                        st["quota"] += 1
                        continue
                    flooder.setblocking(False)
                batch = b"".join(request(MSG_STATUS if i % 2 else MSG_GET_UNIQUE_ID, req_id + i)
                                 for i in range(32))
                try:
                    flooder.send(batch)
                    st["sent"] += 32
                    req_id += 32
                except BlockingIOError:
                    pass  # the daemon reads it slowly: max_req_rate
                try:
                    while True:
                        d = flooder.recv(1 << 16)
                        if not d:
                            flooder.close()
                            flooder = None
                            st["closed"] += 1
                            break
                        st["replies"] += d.count(struct.pack("<I", MAGIC))
                except BlockingIOError:
                    pass
        except OSError:
            st["closed"] += 1
        now = time.monotonic()
        keep = []
        for s, dl in held:
            if closed(s):
                st["closed"] += 1
                s.close()
            elif now >= dl:
                s.close()
            else:
                keep.append((s, dl))
        held = keep
        dt = pace - (time.monotonic() - t0)
        if dt > 0:
            time.sleep(dt)
    for s, _ in held:
        s.close()
    for s in sessions:
        s.close()
    if flooder:
        flooder.close()
    print("local attacker: %(actions)d actions, %(closed)d closed by the daemon, "
          "%(quota)d hellos refused, %(sent)d requests sent, %(replies)d replies" % st)


def main():
    a = sys.argv[1:]
    if len(a) in (3, 5) and a[0] == "mix" and (len(a) == 3 or a[3] == "--rate"):
        mix(a[1], float(a[2]), float(a[4]) if len(a) == 5 else 250.0)
        return 0
    print(__doc__, file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main())
