#!/bin/bash
# SPDX-License-Identifier: MIT
# The parameter text generated from r2ccld's registry (daemon/control/config_params.c) and
# the committed copies of it: systemd/r2ccld.conf.example and the table of
# docs/operations.md (between <!-- params:begin --> and <!-- params:end -->).
# Usage: params_docs.sh check|write R2CCLD SOURCE_ROOT
#   check: exit 1 with a diff when a copy differs (the unit test params-docs);
#          also checks that --help carries the same lines.
#   write: rewrites the copies (ninja -C build regen-params).
set -euo pipefail
mode=$1 daemon=$2 src=$3
conf=$src/systemd/r2ccld.conf.example
ops=$src/docs/operations.md
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

"$daemon" --print-params=conf >"$tmp/conf"
"$daemon" --print-params=markdown >"$tmp/table"
"$daemon" --print-params=help >"$tmp/help"
grep -q '^<!-- params:begin -->$' "$ops" && grep -q '^<!-- params:end -->$' "$ops" ||
	{ echo "$ops: no <!-- params:begin/end --> markers"; exit 1; }
# operations.md with the generated table between the markers
awk -v table="$tmp/table" '
	/^<!-- params:begin -->$/ { print; while ((getline l < table) > 0) print l; skip = 1; next }
	/^<!-- params:end -->$/ { skip = 0 }
	!skip { print }' "$ops" >"$tmp/ops"

case $mode in
write)
	cp "$tmp/conf" "$conf"
	cp "$tmp/ops" "$ops"
	echo "wrote $conf and $ops"
	;;
check)
	rc=0
	diff -u "$conf" "$tmp/conf" || { echo "FAIL: $conf differs from the registry"; rc=1; }
	diff -u "$ops" "$tmp/ops" || { echo "FAIL: $ops's table differs from the registry"; rc=1; }
	"$daemon" --help >"$tmp/usage"
	grep -vxFf "$tmp/usage" "$tmp/help" && { echo "FAIL: --help lacks these lines"; rc=1; }
	# every parameter, commented out, with its default
	while read -r name; do
		[ "$name" = config ] && continue # command line or environment only
		grep -q "^# $name =" "$conf" || { echo "FAIL: $name not in $conf"; rc=1; }
	done < <(sed -n 's/^| `\([a-z_0-9]*\)` .*/\1/p' "$tmp/table")
	[ $rc -eq 0 ] && echo "parameter docs match the registry ($(wc -l <"$tmp/help") parameters)"
	[ $rc -eq 0 ] || echo "regenerate: ninja -C build regen-params"
	exit $rc
	;;
*)
	echo "usage: $0 check|write R2CCLD SOURCE_ROOT"
	exit 2
	;;
esac
