#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Runs PromQL queries against a Prometheus (GET /api/v1/query) and fails
when one is broken (an error) or, with --need-data, returns no series.

  query-check.py URL [--dashboard FILE] [--rate-interval 15s] [--need-data]
                 [--expect 'EXPR' ...]

--dashboard: every target expr of a Grafana dashboard JSON ($__rate_interval
replaced). --expect EXPR: a query that must return at least one series (a
condition such as `r2ccl_failovers_total > 0`). Prints one line per query;
exit 0 when all pass, 1 otherwise, 2 on usage errors."""
import argparse
import json
import sys
import urllib.parse
import urllib.request


def dashboard_exprs(path, rate_interval):
    with open(path) as f:
        d = json.load(f)
    out = []

    def walk(panels):
        for p in panels:
            walk(p.get("panels", []))
            for t in p.get("targets", []):
                if t.get("expr"):
                    out.append((p.get("title", "?"),
                                t["expr"].replace("$__rate_interval", rate_interval)))
    walk(d.get("panels", []))
    return out


def query(url, expr):
    q = urllib.parse.urlencode({"query": expr})
    try:
        with urllib.request.urlopen(f"{url}/api/v1/query?{q}", timeout=10) as r:
            body = json.load(r)
    except urllib.error.HTTPError as e:
        try:
            body = json.load(e)
        except ValueError:
            return None, f"HTTP {e.code}"
    except OSError as e:
        return None, str(e)
    if body.get("status") != "success":
        return None, body.get("error", "status " + str(body.get("status")))
    return body["data"]["result"], None


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("url")
    ap.add_argument("--dashboard")
    ap.add_argument("--rate-interval", default="15s")
    ap.add_argument("--need-data", action="store_true")
    ap.add_argument("--expect", action="append", default=[])
    a = ap.parse_args()
    checks = []
    if a.dashboard:
        checks += [(t, e, a.need_data) for t, e in dashboard_exprs(a.dashboard, a.rate_interval)]
    checks += [("expect", e, True) for e in a.expect]
    if not checks:
        ap.error("nothing to query")
    bad = 0
    for title, expr, need in checks:
        res, err = query(a.url.rstrip("/"), expr)
        if err:
            print(f"not ok - {title}: {expr}: {err}")
            bad += 1
        elif need and not res:
            print(f"not ok - {title}: {expr}: no data")
            bad += 1
        else:
            print(f"ok - {title}: {len(res)} series: {expr}")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
