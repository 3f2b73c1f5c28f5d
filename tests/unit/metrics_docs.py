#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Checks the metric table of docs/operations.md ("Metrics") against a scrape.

Usage: metrics_docs.py OPERATIONS_MD SCRAPE

SCRAPE is r2ccld's /metrics text (test_metrics writes the one it took after
its operations). Every family the daemon declares (# TYPE) must be a row of
the table with the same type, and every metric the table names must be
declared; every sample's label names (less `le` of a histogram bucket) must
be the row's labels, where "NIC" stands for device, port, nic and rail.
Families without samples in the scrape get the name and type check only;
the script says how many had their labels checked. Exit 0 when they match,
1 with a line per difference.
"""
import re
import sys

NIC = ["device", "port", "nic", "rail"]
SUFFIXES = {"histogram": ("_bucket", "_sum", "_count"), "summary": ("_sum", "_count")}


def doc_table(path):
    """{name: (type, frozenset(labels))} of the rows of the Metrics table."""
    rows = {}
    in_metrics = False
    with open(path, encoding="utf-8") as f:
        for line in f:
            if line.startswith("## "):
                in_metrics = line.strip() == "## Metrics"
                continue
            if not in_metrics or not line.startswith("| `r2ccl_"):
                continue
            cells = [c.strip() for c in line.strip().strip("|").split("|")]
            if len(cells) < 4:
                raise SystemExit("%s: a metric row with %d cells: %s" % (path, len(cells), line))
            names = re.findall(r"`(r2ccl_[a-z0-9_]+)`", cells[0])
            mtype = cells[1].split()[0]
            labels = []
            # "(`le`)" is the bucket label, not a label of the family
            for part in re.split(r",\s*", re.sub(r"\(`le`\)", "", cells[2])):
                part = part.strip()
                if part == "NIC":
                    labels += NIC
                elif part:
                    m = re.fullmatch(r"`([a-z_]+)`", part)
                    if not m:
                        raise SystemExit("%s: label cell not understood: %r" % (path, cells[2]))
                    labels.append(m.group(1))
            for n in names:
                if n in rows:
                    raise SystemExit("%s: %s listed twice" % (path, n))
                rows[n] = (mtype, frozenset(labels))
    return rows


def scrape(path):
    """({family: type}, {family: set of label-name tuples})."""
    types, samples = {}, {}
    label_re = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)="(?:[^"\\]|\\.)*"')
    with open(path, encoding="utf-8") as f:
        for line in f:
            line = line.rstrip("\n")
            if line.startswith("# TYPE "):
                _, _, name, mtype = line.split(" ", 3)
                types[name] = mtype
                continue
            if not line or line.startswith("#"):
                continue
            m = re.match(r"([a-zA-Z_:][a-zA-Z0-9_:]*)(\{.*\})?\s", line)
            if not m:
                raise SystemExit("%s: not a sample line: %r" % (path, line))
            name, lab = m.group(1), m.group(2) or ""
            fam = name
            if name not in types:
                for base, t in types.items():
                    if name.startswith(base) and name[len(base):] in SUFFIXES.get(t, ()):
                        fam = base
            keys = tuple(sorted(k for k in label_re.findall(lab)
                                if not (k == "le" and name.endswith("_bucket"))))
            samples.setdefault(fam, set()).add(keys)
    return types, samples


def main():
    if len(sys.argv) != 3:
        print(__doc__.strip().splitlines()[2])
        return 2
    docs, (types, samples) = doc_table(sys.argv[1]), scrape(sys.argv[2])
    errors = []
    if not types:
        errors.append("the scrape declares no metric (# TYPE lines)")
    for name, mtype in sorted(types.items()):
        if name not in docs:
            errors.append("%s (%s) is not in the table of docs/operations.md" % (name, mtype))
        elif docs[name][0] != mtype:
            errors.append("%s: the daemon says %s, the docs %s" % (name, mtype, docs[name][0]))
    for name in sorted(set(docs) - set(types)):
        errors.append("%s is in the docs, the daemon has no such metric" % name)
    checked = 0
    for fam, keysets in sorted(samples.items()):
        if fam not in types:
            errors.append("%s: samples without a # TYPE line" % fam)
            continue
        if fam not in docs:
            continue
        want = tuple(sorted(docs[fam][1]))
        checked += 1
        for keys in sorted(keysets):
            if keys != want:
                errors.append("%s: labels %s, the docs say %s" %
                              (fam, ",".join(keys) or "(none)", ",".join(want) or "(none)"))
    for e in errors:
        print("FAIL: " + e)
    if errors:
        print("fix docs/operations.md's Metrics table (or the daemon)")
        return 1
    print("metric table matches the daemon: %d families, labels checked on the %d with samples"
          % (len(types), checked))
    return 0


if __name__ == "__main__":
    sys.exit(main())
