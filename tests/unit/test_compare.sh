#!/bin/bash
# SPDX-License-Identifier: MIT
# tools/bench/compare.sh without running a benchmark: its syntax (bash -n),
# and its tables from saved outputs (compare-fixtures/raw: r2ccl-bench
# tables of local-bench.sh and cluster-bench.sh, fault_steady.sh lines from
# tests/cluster/results, in the report's form and on stdout's with "# ")
# against compare-fixtures/expected.txt, whose figures were checked by hand:
# local 8 B old 5.90 6.10 6.30 6.50 (median 6.20), new median 6.30: within;
# 1 MB new 351.0 over the old max 330.0: slower; capped 16 MB new 108000
# under the old min 109000: faster; steady healthy only in the old files.
# Usage: test_compare.sh COMPARE_SH FIXTURE_DIR
set -euo pipefail
sh=$1 fx=$2
bash -n "$sh"
out=$(mktemp)
trap 'rm -f "$out"' EXIT
"$sh" --parse-only "$fx" | tail -n +2 >"$out" # (its first line names the folder)
diff -u "$fx/expected.txt" "$out"
# a folder without raw outputs is a usage error
if "$sh" --parse-only "$fx/nosuch" 2>/dev/null; then
	echo "--parse-only of a missing folder succeeded" >&2
	exit 1
fi
echo "compare.sh: parse-only tables as expected"
