#!/bin/sh
# The unit suite's `promtool-rules` test: checks the alerting rules and runs
# their unit tests with promtool (Debian's prometheus package). Exits 77
# (skipped) where promtool is not installed.
set -eu
dir=$(cd "$(dirname "$0")" && pwd)
if ! command -v promtool >/dev/null 2>&1; then
	echo "promtool not found (apt-get install prometheus): skipped"
	exit 77
fi
promtool check rules "$dir/r2ccl-rules.yml"
cd "$dir"
promtool test rules r2ccl-rules.test.yml
