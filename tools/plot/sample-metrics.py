#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Samples one r2ccld's /metrics every INTERVAL seconds into a CSV.

Usage: sample-metrics.py --url http://127.0.0.1:9464/metrics --host 0 --out FILE.csv
                         [--interval 0.1] [--stop-file PATH] [--max-seconds 300]

One row per rail per sample:
  unix_s,mono_s,host,rail,nic,tx_bytes,rx_bytes,state
unix_s and mono_s are the wall clock and CLOCK_MONOTONIC of the request, so
that r2ccl-bench's --trace (monotonic) and r2cclctl events (unix ms) can be
put on one time axis. tx/rx_bytes are r2ccl_nic_{transmit,receive}_bytes_total
(read live from the transports), state the rail's r2ccl_nic_state that is 1.
Stops when --stop-file exists or after --max-seconds. Used by
tools/plot/record-failover.sh, read by tools/plot/plot.py failover.
"""
import argparse
import os
import re
import sys
import time
import urllib.request

SAMPLE = re.compile(r'^(r2ccl_nic_(?:transmit_bytes_total|receive_bytes_total|state))\{([^}]*)\} (\S+)$')
LABEL = re.compile(r'([a-z_]+)="((?:[^"\\]|\\.)*)"')


def parse(text):
    rails = {}
    for line in text.splitlines():
        m = SAMPLE.match(line)
        if not m:
            continue
        labels = dict(LABEL.findall(m.group(2)))
        r = rails.setdefault(int(labels["rail"]), {"nic": labels.get("nic", ""), "tx": 0,
                                                    "rx": 0, "state": ""})
        v = float(m.group(3))
        if m.group(1).endswith("transmit_bytes_total"):
            r["tx"] = int(v)
        elif m.group(1).endswith("receive_bytes_total"):
            r["rx"] = int(v)
        elif v == 1:
            r["state"] = labels.get("state", "")
    return rails


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--url", required=True)
    ap.add_argument("--host", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--interval", type=float, default=0.1)
    ap.add_argument("--stop-file")
    ap.add_argument("--max-seconds", type=float, default=300)
    a = ap.parse_args()
    t_end = time.monotonic() + a.max_seconds
    errors = 0
    with open(a.out, "w") as f:
        f.write("unix_s,mono_s,host,rail,nic,tx_bytes,rx_bytes,state\n")
        nxt = time.monotonic()
        while time.monotonic() < t_end and not (a.stop_file and os.path.exists(a.stop_file)):
            unix, mono = time.time(), time.monotonic()
            try:
                with urllib.request.urlopen(a.url, timeout=2) as resp:
                    text = resp.read().decode()
            except OSError:
                errors += 1  # the daemon not up yet, or gone
                text = ""
            for rail, r in sorted(parse(text).items()):
                f.write("%.4f,%.4f,%s,%d,%s,%d,%d,%s\n" % (unix, mono, a.host, rail, r["nic"],
                                                           r["tx"], r["rx"], r["state"]))
            f.flush()
            nxt += a.interval
            time.sleep(max(0.0, nxt - time.monotonic()))
    if errors:
        print("sample-metrics: host %s: %d requests failed" % (a.host, errors), file=sys.stderr)


if __name__ == "__main__":
    main()
