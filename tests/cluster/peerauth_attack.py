#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""The attacker of test_peerauth.sh: a host on a rail network without the
cluster key, talking to an r2ccld's peer port with plain sockets and the
tcp provider's hello (daemon/transport/tcp_wire.h: 96 bytes, little-endian).

  hellos ADDR PORT CLAIMED DST RATE SECONDS
      RATE times a second: a DIAL claiming to be daemon CLAIMED (hex) to DST
      (hex); when answered, a PROOF with a forged MAC (no key); then waits
      until the daemon closes the stream. Alternates with a DIAL offering no
      proof at all. Prints: sent, answered, closed, hung.
  flood ADDR PORT N HOLD
      opens N connections that never say hello; prints how many the daemon
      closed within 0.5 s (over its caps), how many it held, and how many of
      those it closed within HOLD seconds (its hello deadline).
  fakes ADDR PORT DST N
      N DIALs, each claiming a new random daemon id, no proof; prints how many
      were answered (must be 0: no key, no answer) and closed.

The same against a verbs rail's side channel (daemon/transport/verbs_util.h:
256 bytes, little-endian; tests/rdma/daemon-guest.sh):
  vhellos ADDR PORT CLAIMED DST RATE SECONDS
      a HELLO claiming CLAIMED with the key flag; when the daemon REPLYs (it
      must, before it knows who dialed), a READY with a forged proof; then
      waits until the daemon closes the side channel. Alternates with a HELLO
      without the flag (closed unanswered). Prints: sent, answered, closed,
      hung.
  vfakes ADDR PORT DST N
      like fakes: N HELLOs without the flag, each from a new random id.
"""
import os
import select
import socket
import struct
import sys
import time

MAGIC, VERSION, SIZE = 0x48435432, 2, 96
DIAL, ANSWER, PROOF = 1, 2, 3
F_AUTH = 1


def hello(typ, flags, self_id, dst_id, nonce, chal=b"", mac=b""):
    h = struct.pack("<IHBBHHHHIIQQQ", MAGIC, VERSION, typ, flags, 0, 1, 0, 0, 1 << 20, 0,
                    self_id, dst_id, nonce)
    return h + chal.ljust(16, b"\0")[:16] + mac.ljust(32, b"\0")[:32]


V_MAGIC, V_VERSION, V_SIZE = 0x4D435632, 2, 256
V_HELLO, V_REPLY, V_READY = 1, 2, 3


def vmsg(typ, flags, self_id, dst_id, nonce, qpn=0x123, chal=b"", mac=b""):
    h = struct.pack("<IHHHHHBBIIQQQ", V_MAGIC, V_VERSION, typ, 1, 1, 0, 3, 2, 65536,
                    1 << 20, self_id, dst_id, nonce)
    h += b"\0" * 16  # gid
    h += struct.pack("<I", qpn if typ == V_HELLO else 0) + b"\0" * 60  # qpn[16]
    h += struct.pack("<I", 7 if typ == V_HELLO else 0) + b"\0" * 60  # psn[16]
    h += struct.pack("<HH", flags, 0) + chal.ljust(16, b"\0")[:16] + mac.ljust(32, b"\0")[:32]
    return h.ljust(V_SIZE, b"\0")


def connect(addr, port, timeout=3.0):
    s = socket.create_connection((addr, port), timeout=timeout)
    s.settimeout(timeout)
    return s


def read_n(s, n):
    b = b""
    while len(b) < n:
        try:
            c = s.recv(n - len(b))
        except (ConnectionResetError, socket.timeout):
            return b
        if not c:
            return b
        b += c
    return b


def wait_closed(s, timeout=3.0):
    s.settimeout(timeout)
    try:
        while True:
            c = s.recv(4096)
            if not c:
                return True
    except ConnectionResetError:
        return True
    except socket.timeout:
        return False


# per protocol: the first message (self, dst, nonce, flagged, challenge), its
# size, and the forged proof that follows an answer (self, dst, nonce, mac)
PROTO = {
    "tcp": (lambda me, dst, nonce, auth, chal: hello(DIAL, F_AUTH if auth else 0, me, dst,
                                                     nonce, chal), SIZE,
            lambda me, dst, nonce, mac: hello(PROOF, F_AUTH, me, dst, nonce, b"", mac)),
    "verbs": (lambda me, dst, nonce, auth, chal: vmsg(V_HELLO, F_AUTH if auth else 0, me, dst,
                                                      nonce, chal=chal), V_SIZE,
              lambda me, dst, nonce, mac: vmsg(V_READY, F_AUTH, me, dst, nonce, mac=mac)),
}


def cmd_hellos(addr, port, claimed, dst, rate, seconds, proto="tcp"):
    first, size, proof = PROTO[proto]
    claimed, dst = int(claimed, 16), int(dst, 16)
    sent = answered = closed = hung = 0
    end = time.time() + float(seconds)
    period = 1.0 / float(rate)
    while time.time() < end:
        t0 = time.time()
        auth = sent % 2 == 0
        try:
            s = connect(addr, port)
            nonce = int.from_bytes(os.urandom(8), "little")
            s.sendall(first(claimed, dst, nonce, auth, os.urandom(16)))
            sent += 1
            a = read_n(s, size)
            if len(a) == size:
                answered += 1
                s.sendall(proof(claimed, dst, nonce, os.urandom(32)))
            if wait_closed(s):
                closed += 1
            else:
                hung += 1
            s.close()
        except OSError:
            closed += 1
        dt = time.time() - t0
        if dt < period:
            time.sleep(period - dt)
    print(f"sent {sent} answered {answered} closed {closed} hung {hung}")


def cmd_flood(addr, port, n, hold):
    socks = []
    for _ in range(int(n)):
        try:
            socks.append(connect(addr, port))
        except OSError:
            pass
    time.sleep(0.5)

    def closed_now(s):
        r, _, _ = select.select([s], [], [], 0)
        if not r:
            return False
        try:
            return s.recv(1) == b""
        except OSError:
            return True

    early = [s for s in socks if closed_now(s)]
    held = [s for s in socks if s not in early]
    t0 = time.time()
    left = list(held)
    while left and time.time() - t0 < float(hold):
        left = [s for s in left if not closed_now(s)]
        time.sleep(0.1)
    print(f"opened {len(socks)} closed_at_once {len(early)} held {len(held)} "
          f"closed_by_deadline {len(held) - len(left)} still_open {len(left)} "
          f"after {time.time() - t0:.1f} s")
    for s in socks:
        s.close()


def cmd_fakes(addr, port, dst, n, proto="tcp"):
    first, size, _ = PROTO[proto]
    dst = int(dst, 16)
    answered = closed = 0
    for _ in range(int(n)):
        fake = int.from_bytes(os.urandom(8), "little") | 1
        try:
            s = connect(addr, port)
            s.sendall(first(fake, dst, fake ^ 0x55, False, os.urandom(16)))
            if len(read_n(s, size)) == size:
                answered += 1
            if wait_closed(s):
                closed += 1
            s.close()
        except OSError:
            closed += 1
    print(f"fakes {n} answered {answered} closed {closed}")


def cmd_vhellos(*args):
    cmd_hellos(*args, proto="verbs")


def cmd_vfakes(*args):
    cmd_fakes(*args, proto="verbs")


if __name__ == "__main__":
    cmds = {"hellos": cmd_hellos, "flood": cmd_flood, "fakes": cmd_fakes,
            "vhellos": cmd_vhellos, "vfakes": cmd_vfakes}
    if len(sys.argv) < 2 or sys.argv[1] not in cmds:
        sys.exit(__doc__)
    cmds[sys.argv[1]](*sys.argv[2:])
