#!/bin/bash
# An A/B of r2ccld builds or options on the GPU machine's `lat` part
# (run-on-device.sh): for each NAME:BINARY:OPTS, bundle/gpu/libexec/
# r2ccld-BINARY becomes the bundle's r2ccld and `lat` runs with
# R2CCLD_OPTS=OPTS (PARTS, default "small2 gpu"; LAT_GPU, default h0);
# one line per size: small-bench's ping-pong and R2CCL p50/p99 (x two
# round trips, x Gloo), then r2ccl-bench's host and GPU p50/p99.
# Here: B=build-test bash tests/gpu/make-bundle.sh, then copy each daemon
# to bundle/gpu/libexec/r2ccld-NAME (the bundle's own r2ccld too, if it is
# one of them); there: run(command="bash tests/gpu/ab-lat.sh
# old:old: new:new: new300:new:'--exec-spin-us 300'", carry=["bundle/gpu"]).
set -uo pipefail
cd "$(dirname "$0")/../.."
R=${OUT:-$PWD/gpu-logs}
for v in "$@"; do
	IFS=: read -r n b o <<<"$v"
	cp "bundle/gpu/libexec/r2ccld-$b" bundle/gpu/libexec/r2ccld || exit 1
	t0=$(date +%s)
	OUT=$R/$n R2CCLD_OPTS="$o" LAT_GPU=${LAT_GPU:-h0} LAT_PARTS="${PARTS:-small2 gpu}" \
		bash tests/gpu/run-on-device.sh lat > "$R/$n.out" 2>&1
	echo "== $n [$b $o] $(($(date +%s) - t0)) s"
	t=$R/$n/table.txt
	paste <(awk '/^== small-2h/{f=1;next} /^==/{f=0}
		f && $1 ~ /^[0-9]+$/ {printf "%8s pp %5.0f r2 %5.0f/%5.0f x%4.2f g%4.2f\n",$1,$2,$3,$4,$5,$8}' "$t") \
	      <(awk '/^== lat-host/{f=1;next} /^==/{f=0} f && /#pct/ {printf "host %4.0f/%5.0f\n",$4,$5}' "$t") \
	      <(awk '/^== lat-gpu/{f=1;next} /^==/{f=0} f && /#pct/ {printf "gpu %4.0f/%5.0f\n",$4,$5}' "$t")
	grep -h "^decode loop" "$t"
done
