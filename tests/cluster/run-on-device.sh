#!/bin/bash
# SPDX-License-Identifier: MIT
#
# The cluster measurements of docs/resilience.md on a machine with more
# cores (the lent GPU machine: 16 cores, no GPU needed), building nothing
# there. Here first:
#   bash tests/cluster/run-on-device.sh --bundle     (bundle/cluster from build/)
# then run(command="OUT=$OUT bash tests/cluster/run-on-device.sh WHAT", carry=["bundle/cluster"]):
#   steady     tests/cluster/fault_steady.sh (STEADY_* from the environment)
#   linkdown   FAULT_HOSTS=4 FAULT_REPEAT=10 FAULT_SCENARIOS=linkdown test_faults.sh
#   blackhole  the same with blackhole
#   faults     test_faults.sh as CI runs it (3 x 2, every scenario)
# Several: "steady,linkdown". Logs and the report go to $OUT (default ./cluster-logs).
set -u
cd "$(dirname "$0")/../.."
ROOT=$PWD
BD=$ROOT/bundle/cluster

if [[ ${1:-} == --bundle ]]; then
	B=${B:-build}
	ninja -C "$B" daemon/r2ccld tools/r2cclctl tools/r2ccl-bench tools/r2ccl-sim \
		tests/cluster/cluster_client >/dev/null || exit 1
	rm -rf "$BD"
	bash "${SHARED:-../shared}/device/bundle.sh" "$BD" "$B/daemon/r2ccld" "$B/tools/r2cclctl" \
		"$B/tools/r2ccl-bench" "$B/tools/r2ccl-sim" "$B/tests/cluster/cluster_client"
	exit
fi

[[ -x $BD/libexec/r2ccld ]] || { echo "no $BD: run '$0 --bundle' first (here)"; exit 1; }
OUT=${OUT:-$ROOT/cluster-logs}
mkdir -p "$OUT"
export PATH=$BD/bin:$PATH
export R2CCLD=$BD/bin/r2ccld R2CCLCTL=$BD/bin/r2cclctl R2CCL_BENCH=$BD/bin/r2ccl-bench
export R2CCL_SIM=$BD/bin/r2ccl-sim CLUSTER_CLIENT=$BD/bin/cluster_client
export FAULT_REPORT=$OUT/report.txt
{ nproc; uname -r; grep -m1 "model name" /proc/cpuinfo; } >"$OUT/machine.txt"

run() { # name cmd...
	local name=$1 t0=$SECONDS
	shift
	"$@" >"$OUT/$name.log" 2>&1
	echo "== $name: rc $? in $((SECONDS - t0)) s" | tee -a "$OUT/summary.txt"
}
IFS=, read -r -a what <<<"${1:-steady}"
for w in "${what[@]}"; do
	case $w in
	steady) run steady tests/cluster/fault_steady.sh ;;
	linkdown | blackhole)
		FAULT_HOSTS=4 FAULT_REPEAT=${FAULT_REPEAT:-10} FAULT_SCENARIOS=$w \
			run "$w" tests/cluster/test_faults.sh ;;
	faults) run faults tests/cluster/test_faults.sh ;;
	*) echo "unknown: $w" ;;
	esac
done
tail -n 60 "$FAULT_REPORT" 2>/dev/null
cat "$OUT/summary.txt"
