#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Draws PNGs from the output files of real runs (python3-matplotlib).

  plot.py failover --metrics h0.csv h1.csv [--iters iters.csv] [--events ev.json ...]
                   [--marks marks.csv] [--title T] -o failover.png
      Per-rail transmit bytes/s of every host over time (from the counters
      sampled by tools/plot/sample-metrics.py), the iteration times of the
      AllReduce loop (r2ccl-bench --trace), the fault injected (marks.csv:
      unix_s,what lines written by record-failover.sh) and the daemons' events
      (r2cclctl --json events). Time 0 is the first sample.

  plot.py busbw FILE... [--title T] -o busbw.png
      Out-of-place busbw against size for r2ccl and every peer of
      r2ccl-bench outputs (tools/bench/local-bench.sh, cluster-bench.sh:
      nccl-tests rows, then '#peer' rows under '# Peer: NAME, ...'). r2ccl's
      rows come from the first file (its first table where a file holds
      several runs, as local-bench.sh's does); each peer from the first
      file that has it.

Nothing is made up: a file without the rows a plot needs is an error.
"""
import argparse
import csv
import json
import re
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def die(msg):
    print("plot.py: " + msg, file=sys.stderr)
    sys.exit(1)


# ---- failover --------------------------------------------------------------

def read_metrics(paths):
    """{(host, rail): [(unix_s, tx_bytes, rx_bytes, state, nic)]}, offset unix - mono."""
    series, offs = {}, []
    for p in paths:
        with open(p) as f:
            for row in csv.DictReader(f):
                key = (row["host"], int(row["rail"]))
                series.setdefault(key, []).append((float(row["unix_s"]), int(row["tx_bytes"]),
                                                   int(row["rx_bytes"]), row["state"],
                                                   row["nic"]))
                offs.append(float(row["unix_s"]) - float(row["mono_s"]))
    if not series:
        die("no samples in %s" % ", ".join(paths))
    offs.sort()
    return series, offs[len(offs) // 2]


def rates(samples):
    """Transmit bytes/s between consecutive samples, at their midpoints."""
    t, v = [], []
    for (t0, tx0, *_), (t1, tx1, *_) in zip(samples, samples[1:]):
        if t1 > t0 and tx1 >= tx0:
            t.append((t0 + t1) / 2)
            v.append((tx1 - tx0) / (t1 - t0))
    return t, v


def read_iters(path, offset):
    """[(unix end, seconds)] from r2ccl-bench --trace (CLOCK_MONOTONIC us)."""
    out = []
    with open(path) as f:
        for row in csv.DictReader(f):
            s, e = int(row["start_us"]), int(row["end_us"])
            out.append((e / 1e6 + offset, (e - s) / 1e6))
    return out


def read_events(paths):
    ev = []
    for p in paths:
        with open(p) as f:
            doc = json.load(f)
        host = re.search(r"h(\d+)", p.split("/")[-1])
        for e in doc.get("events", []):
            ev.append((e["time_unix_ms"] / 1000.0, e.get("kind", ""), e.get("subject", ""),
                       host.group(1) if host else "?"))
    return sorted(ev)


def read_marks(path):
    with open(path) as f:
        return [(float(r["unix_s"]), r["what"]) for r in csv.DictReader(f)]


def failover(a):
    series, offset = read_metrics(a.metrics)
    t0 = min(s[0][0] for s in series.values())
    n_panels = 2 if a.iters else 1
    fig, axes = plt.subplots(n_panels, 1, figsize=(10, 3.6 * n_panels), sharex=True,
                             squeeze=False)
    ax = axes[0][0]
    for (host, rail), samples in sorted(series.items()):
        t, v = rates(samples)
        ax.plot([x - t0 for x in t], [y / 1e6 for y in v], lw=1.3,
                label="host %s rail %d (%s)" % (host, rail, samples[-1][4]))
    ax.set_ylabel("transmitted MB/s (100 ms)")
    ax.set_ylim(bottom=0)
    marks = read_marks(a.marks) if a.marks else []
    downs = [t for t, w in marks if w.endswith("down")]
    ups = [t for t, w in marks if w.endswith("up")]
    for d in downs:
        u = min([x for x in ups if x > d], default=None)
        for row in axes:
            row[0].axvspan(d - t0, (u if u else d) - t0, color="red", alpha=0.12, lw=0)
    for t, w in marks:
        ax.annotate(w, (t - t0, ax.get_ylim()[1]), xytext=(2, -12), textcoords="offset points",
                    fontsize=8, color="darkred")
    events = read_events(a.events) if a.events else []
    kinds = {}
    for t, kind, subject, host in events:
        if t < t0 - 1:
            continue  # before the recording (start-up)
        kinds.setdefault(kind, []).append(t - t0)
    colors = ["dimgray", "purple", "teal", "olive", "saddlebrown", "navy"]
    styles = ["--", ":", "-."]
    for k, (kind, ts) in enumerate(sorted(kinds.items())):
        for i, x in enumerate(ts):
            for p, row in enumerate(axes):
                row[0].axvline(x, color=colors[k % len(colors)], ls=styles[k % len(styles)],
                               lw=0.9, label=("event %s (%d, every host)" % (kind, len(ts)))
                               if i == 0 and p == 0 else None)
    ax.legend(fontsize=7, loc="lower left", ncol=3)
    ax.grid(alpha=0.3)
    if a.iters:
        it = read_iters(a.iters, offset)
        bx = axes[1][0]
        bx.plot([t - t0 for t, _ in it], [d * 1000 for _, d in it], ".-", ms=3, lw=0.8,
                color="black", label="AllReduce iteration (rank 0)")
        bx.set_ylabel("iteration time (ms)")
        bx.set_ylim(bottom=0)
        bx.grid(alpha=0.3)
        bx.legend(fontsize=8, loc="upper left")
    axes[-1][0].set_xlabel("time (s)")
    fig.suptitle(a.title or "per-rail throughput across a NIC failure and recovery", fontsize=11)
    fig.tight_layout()
    fig.savefig(a.o, dpi=110)
    print("plot.py: wrote %s (%d rails, %d events%s)" %
          (a.o, len(series), len(events), ", %d iterations" % len(it) if a.iters else ""))


# ---- busbw -----------------------------------------------------------------

def read_bench(path):
    """r2ccl rows [(size, busbw)] and {peer name: [(size, busbw)]} (out of place)."""
    r2, peers, peer = [], {}, None
    with open(path) as f:
        for line in f:
            line = re.sub(r"^\[h\d+\] ", "", line.rstrip("\n"))
            m = re.match(r"^# Peer: ([^,]+(?:, [^,]+)*?), [a-z]+, out-of-place", line)
            if m:
                peer = m.group(1)
                continue
            w = line.split()
            if len(w) >= 9 and w[0] == "#peer" and w[1].isdigit() and peer:
                peers.setdefault(peer, []).append((int(w[1]), float(w[8])))
            elif len(w) >= 9 and w[0].isdigit() and int(w[0]) not in [x for x, _ in r2]:
                # local-bench.sh prints one r2ccl table per peer: the first run's
                r2.append((int(w[0]), float(w[7])))
    return r2, peers


def busbw(a):
    r2, peers = None, {}
    for p in a.files:
        rows, pp = read_bench(p)
        if rows and r2 is None:
            r2 = rows
        for k, v in pp.items():
            peers.setdefault(k, v)
    if not r2:
        die("no r2ccl-bench rows in %s" % ", ".join(a.files))
    fig, ax = plt.subplots(figsize=(8, 4.5))
    ax.plot([s for s, _ in r2], [b for _, b in r2], "o-", lw=2, label="r2ccl")
    for name, rows in sorted(peers.items()):
        ax.plot([s for s, _ in rows], [b for _, b in rows], "s--", lw=1.3, label=name)
    ax.set_xscale("log", base=2)
    ax.set_xlabel("size (bytes)")
    ax.set_ylabel("busbw (GB/s, out of place)")
    ticks = [s for s, _ in r2]
    ax.set_xticks(ticks[:: max(1, len(ticks) // 10)])
    ax.set_xticklabels([human(s) for s in ticks[:: max(1, len(ticks) // 10)]], fontsize=8)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    ax.set_title(a.title or "AllReduce busbw", fontsize=11)
    fig.tight_layout()
    fig.savefig(a.o, dpi=110)
    print("plot.py: wrote %s (r2ccl %d sizes, peers: %s)" %
          (a.o, len(r2), ", ".join(sorted(peers)) or "none"))


def human(n):
    for u in ["", "K", "M", "G"]:
        if n < 1024:
            return "%d%s" % (n, u)
        n //= 1024
    return "%dT" % n


def main():
    ap = argparse.ArgumentParser(description=__doc__.strip().splitlines()[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    f = sub.add_parser("failover")
    f.add_argument("--metrics", nargs="+", required=True)
    f.add_argument("--iters")
    f.add_argument("--events", nargs="*")
    f.add_argument("--marks")
    f.add_argument("--title")
    f.add_argument("-o", required=True)
    b = sub.add_parser("busbw")
    b.add_argument("files", nargs="+")
    b.add_argument("--title")
    b.add_argument("-o", required=True)
    a = ap.parse_args()
    failover(a) if a.cmd == "failover" else busbw(a)


if __name__ == "__main__":
    main()
