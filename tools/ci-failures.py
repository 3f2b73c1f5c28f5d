#!/usr/bin/env python3
"""Prints what the failed tests of one `meson test` run said: for each test
whose result is not OK, SKIP or EXPECTEDFAIL in the given testlog.json, its
name and result, the Check verdict lines (file.c:LINE:F|E:...) and the last
lines of its output. tools/run-tests.sh keeps this for its closing lines,
the part of a CI log that survives."""
import json
import re
import sys

TAIL = 25
VERDICT = re.compile(r"^\S+\.c:\d+:[FE]:")


def main(path):
    try:
        lines = open(path, encoding="utf-8", errors="replace").read().splitlines()
    except OSError:
        return 0
    for line in lines:
        try:
            t = json.loads(line)
        except ValueError:
            continue
        if t.get("result") in ("OK", "SKIP", "EXPECTEDFAIL"):
            continue
        out = (t.get("stdout") or "") + (t.get("stderr") or "")
        text = out.splitlines()
        print(f"--- {t.get('name')}: {t.get('result')} "
              f"(exit {t.get('returncode')}, {float(t.get('duration', 0)):.1f} s)")
        for v in [s for s in text if VERDICT.match(s)][:10]:
            print("  " + v)
        print("  last lines:")
        for s in text[-TAIL:]:
            print("  | " + s[:300])
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
