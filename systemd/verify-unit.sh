#!/bin/sh
# SPDX-License-Identifier: MIT
#
# verify-unit.sh UNIT [EXECUTABLE]
#
# Runs "systemd-analyze verify" on a configured unit file (meson test
# 'systemd-analyze-verify'). verify checks that ExecStart= names an existing
# executable; before "meson install" the configured path (@sbindir@/r2ccld)
# usually does not exist yet, so a copy of the unit with ExecStart= pointing
# at EXECUTABLE (the r2ccld in the build tree, else /bin/true) is verified.
# Works without systemd as PID 1 (verify is offline).
#
# Fails on any error and on any warning about the unit itself (verify
# returns 0 for "Unknown key name ..., ignoring." and similar). Exits 77
# (meson: skipped) when systemd-analyze is not installed.
set -u

unit=${1:?usage: verify-unit.sh UNIT [EXECUTABLE]}
exe=${2:-}

if ! command -v systemd-analyze >/dev/null 2>&1; then
	echo "SKIP: systemd-analyze not found"
	exit 77
fi
if [ ! -r "$unit" ]; then
	echo "FAIL: cannot read $unit"
	exit 1
fi

tmp=$(mktemp -d "${TMPDIR:-/tmp}/r2ccl-verify.XXXXXX") || exit 1
trap 'rm -rf "$tmp"' EXIT INT TERM
name=$(basename "$unit")
copy="$tmp/$name"

# First word of ExecStart= (after systemd's optional prefixes @-:+!).
start=$(sed -n 's/^ExecStart=[-@:+!]*\([^ ]*\).*/\1/p' "$unit" | head -n 1)
if [ -z "$start" ]; then
	echo "FAIL: $unit has no ExecStart="
	exit 1
fi
if [ -x "$start" ]; then
	cp "$unit" "$copy"
else
	if [ -z "$exe" ] || [ ! -x "$exe" ]; then
		exe=$(command -v true)
	fi
	case $exe in /*) ;; *) exe="$(pwd)/$exe" ;; esac
	echo "note: $start does not exist (not installed); verifying with ExecStart=$exe"
	# '|' as delimiter: paths contain '/'. Escape sed's special characters.
	esc=$(printf '%s\n' "$exe" | sed 's/[|&\\]/\\&/g')
	sed "s|^\(ExecStart=[-@:+!]*\)[^ ]*|\1$esc|" "$unit" >"$copy" || exit 1
fi

out=$(systemd-analyze verify --man=no "$copy" 2>&1)
rc=$?
[ -n "$out" ] && printf '%s\n' "$out"

if [ $rc -ne 0 ]; then
	echo "FAIL: systemd-analyze verify exited with $rc"
	exit 1
fi
# Lines about our unit: "<path>:<line>: ..." or "<name>: ...".
if printf '%s\n' "$out" | grep -e "$copy" -e "^$name:" >/dev/null; then
	echo "FAIL: systemd-analyze verify has warnings about $name"
	exit 1
fi
echo "PASS: $name verified"
exit 0
