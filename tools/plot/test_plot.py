#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Tests of tools/plot/plot.py (meson test --suite unit plot).

- busbw: r2ccl-bench output in its exact format (the printf formats of
  tools/bench/table.c and peers.c; the numbers are the test's own, not a
  run's) is parsed into the right sizes and busbw, r2ccl's rows from the
  first file and each peer from its file, and drawn; a file without rows
  is refused.
- failover: the recording kept in docs/img/failover-2026-12-03 (a real
  run of record-failover.sh) is drawn, and the rates plot.py derives from
  it show what happened: host 1's rail 0 carried nothing while its link
  was down and over 50 MB/s before.
Exits 77 without python3-matplotlib.
"""
import os
import subprocess
import sys
import tempfile

try:
    import matplotlib  # noqa: F401
except ImportError:
    if os.path.exists("/usr/bin/python3") and sys.executable != "/usr/bin/python3":
        os.execv("/usr/bin/python3", ["/usr/bin/python3"] + sys.argv)
    print("skipped: no python3-matplotlib")
    sys.exit(77)

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, HERE)
import plot  # noqa: E402

fails = 0


def check(cond, what):
    global fails
    print(("ok - " if cond else "not ok - ") + what)
    fails += 0 if cond else 1


def bench_text(peer_desc, rows, peer_rows):
    """r2ccl-bench's table (table.c) then a peer's (peers.c), as it prints them."""
    out = ["# r2ccl-bench 0.1.0 (libr2ccl header 0.1.0)  op: allreduce", "#",
           "# %10s  %12s  %8s  %6s  %6s  %7s  %6s  %6s %6s  %7s  %6s  %6s %6s" %
           ("size", "count", "type", "redop", "root", "time", "algbw", "busbw", "#wrong",
            "time", "algbw", "busbw", "#wrong")]
    for size, t, bw in rows:
        out.append("%12d  %12d  %8s  %6s  %6i" % (size, size // 4, "float", "sum", -1) +
                   "  %7.0f  %6.2f  %6.2f  %5d" % (t, bw, bw, 0) +
                   "  %7.0f  %6.2f  %6.2f  %5d" % (t, bw * 1.1, bw * 1.1, 0))
    out += ["# %-20s : %d %s" % ("Out of bounds values", 0, "OK"), "#",
            "#", "# Peer: %s, allreduce, out-of-place; rows start with '#peer'" % peer_desc]
    for size, t, bw in peer_rows:
        out.append("#peer  %10d  %12d  %8s  %6s  %6i  %7.0f  %6.2f  %6.2f  %5d" %
                   (size, size // 4, "float", "sum", -1, t, bw, bw, 0))
    out.append("#ratio %10d  %11.3f  %11.3f  %8.2f  %11.1f  %11.1f  %8.2f" %
               (rows[0][0], 1, 1, 1, 1, 1, 1))
    return "\n".join(out) + "\n"


def test_busbw(tmp):
    a = os.path.join(tmp, "mpi.out")
    b = os.path.join(tmp, "gloo.out")
    with open(a, "w") as f:
        f.write(bench_text("mpi (Open MPI shared memory, mpirun -np 4)",
                           [(1048576, 212, 4.94), (16777216, 2482, 6.76)],
                           [(1048576, 438, 2.39), (16777216, 9320, 1.80)]))
    with open(b, "w") as f:
        # cluster-bench.sh's output keeps the [h0] prefix when not stripped
        f.write("".join("[h0] " + l + "\n" for l in bench_text(
            "gloo (ring chunked, TCP 198.18.0.1)", [(1048576, 300, 3.00)],
            [(1048576, 2380, 0.44)]).splitlines()))
    r2, peers = plot.read_bench(a)
    check(r2 == [(1048576, 4.94), (16777216, 6.76)], "r2ccl rows of the mpi file: %s" % r2)
    check(peers == {"mpi (Open MPI shared memory, mpirun -np 4)": [(1048576, 2.39),
                                                                   (16777216, 1.80)]},
          "the peer's name and rows: %s" % peers)
    r2b, peersb = plot.read_bench(b)
    check(r2b == [(1048576, 3.0)] and list(peersb.values()) == [[(1048576, 0.44)]],
          "[h0]-prefixed rows: %s %s" % (r2b, peersb))
    png = os.path.join(tmp, "busbw.png")
    r = subprocess.run([sys.executable, os.path.join(HERE, "plot.py"), "busbw", a, b, "-o", png],
                       capture_output=True, text=True)
    check(r.returncode == 0 and os.path.getsize(png) > 10000, "busbw PNG drawn: " + r.stdout +
          r.stderr)
    check("peers: gloo" in r.stdout and "mpi" in r.stdout and "r2ccl 2 sizes" in r.stdout,
          "r2ccl from the first file, both peers: " + r.stdout.strip())
    # local-bench.sh: two runs in one file, each with its r2ccl table
    both = os.path.join(tmp, "both.out")
    with open(both, "w") as f:
        f.write(bench_text("mpi (shm)", [(1024, 10, 1.5)], [(1024, 20, 0.5)]))
        f.write(bench_text("gloo (tcp)", [(1024, 11, 1.4)], [(1024, 90, 0.1)]))
    r2c, peersc = plot.read_bench(both)
    check(r2c == [(1024, 1.5)] and peersc == {"mpi (shm)": [(1024, 0.5)],
                                              "gloo (tcp)": [(1024, 0.1)]},
          "two runs in one file: the first r2ccl table, both peers: %s %s" % (r2c, peersc))
    empty = os.path.join(tmp, "empty.out")
    open(empty, "w").write("# nothing here\n")
    r = subprocess.run([sys.executable, os.path.join(HERE, "plot.py"), "busbw", empty, "-o", png],
                       capture_output=True, text=True)
    check(r.returncode == 1 and "no r2ccl-bench rows" in r.stderr, "a file without rows is refused")


def test_failover(tmp):
    d = os.path.join(ROOT, "docs", "img", "failover-2026-12-03")
    m = [os.path.join(d, "metrics-h%d.csv" % h) for h in (0, 1)]
    series, offset = plot.read_metrics(m)
    check(sorted(series) == [("0", 0), ("0", 1), ("1", 0), ("1", 1)], "4 rails sampled")
    marks = plot.read_marks(os.path.join(d, "marks.csv"))
    down = [t for t, w in marks if w.endswith("down")][0]
    up = [t for t, w in marks if w.endswith("up")][0]
    t, v = plot.rates(series[("1", 0)])
    during = [y for x, y in zip(t, v) if down + 0.3 < x < up - 0.1]
    before = [y for x, y in zip(t, v) if x < down - 0.3]
    check(during and max(during) < 1e5, "host 1 rail 0 idle while down (max %.0f B/s)" %
          max(during or [0]))
    check(before and sum(before) / len(before) > 50e6, "host 1 rail 0 busy before (mean %.0f B/s)"
          % (sum(before) / max(1, len(before))))
    it = plot.read_iters(os.path.join(d, "iters.csv"), offset)
    check(len(it) == 200 and all(d > 0 for _, d in it), "200 iterations read")
    png = os.path.join(tmp, "failover.png")
    r = subprocess.run([sys.executable, os.path.join(HERE, "plot.py"), "failover", "--metrics"] + m +
                       ["--iters", os.path.join(d, "iters.csv"), "--events",
                        os.path.join(d, "events-h0.json"), os.path.join(d, "events-h1.json"),
                        "--marks", os.path.join(d, "marks.csv"), "-o", png],
                       capture_output=True, text=True)
    check(r.returncode == 0 and os.path.getsize(png) > 10000, "failover PNG drawn: " + r.stdout +
          r.stderr)


with tempfile.TemporaryDirectory() as tmp:
    test_busbw(tmp)
    test_failover(tmp)
sys.exit(1 if fails else 0)
