#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
#
# Every collective across hosts, every element checked: for 2, 3 and 4 hosts
# x 1 and 2 rails x 1 and 2 local ranks per host (12 clusters), start one
# r2ccld per host, run cluster_client on every host (allreduce, allgather,
# reducescatter, broadcast and reduce with roots 0 and n-1, a send/recv ring;
# float32 sum, int32 max, float16 sum, int8 min, float64 avg, uint64 prod and
# more; 1, 7 and ~1000 elements (never a multiple of the rank count), 1M+3
# elements and 64 MB; in and out of place), check that every daemon warmed
# up its peers' TCP connections (one at a time per rail), then stop the
# daemons (each must exit 0) and tear the cluster down. Then 5 hosts x 2
# rails with Bruck's schedule (logstep=bruck), up to 8 MB.
# CLUSTER_MAX_BYTES (default 64M) bounds the sizes (8M: no 64 MB ops;
# 64K: only the small ones). Exits 77 when not root or without iproute2.

set -u -o pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
cluster_lib_init ccol

MAXB=${CLUSTER_MAX_BYTES:-64M}
RUN_TIMEOUT=${CLUSTER_RUN_TIMEOUT:-90}

# one_cluster NAME H R L MAXB PLAN [R2CCLD-ARGS...]: an H x R cluster, its
# daemons started with R2CCLD-ARGS, cluster_client with L local ranks per
# host up to MAXB on every host (every op exact), the TCP warm-ups, no
# sanitizer report, every daemon exiting 0, the cluster down. PLAN other
# than "-": every host's daemon log (--log-level debug) shows an operation
# by a plan of that kind.
one_cluster() {
	local name=$1 H=$2 R=$3 L=$4 maxb=$5 plan=$6 t0 uid out rc npass nplan f
	shift 6
	t0=$(now)
	if ! "$C" up -H "$H" -R "$R" >/dev/null; then
		fail "$name: cluster up"
		return
	fi
	if ! "$C" daemons start "$@" >/dev/null; then
		fail "$name: daemons start"
		dump_logs
		"$C" down >/dev/null 2>&1
		return
	fi
	uid=$DIR/uid-$H-$R-$L-$RANDOM
	out=$("$C" run --timeout "$RUN_TIMEOUT" -- "$CC" --local-ranks "$L" \
		--uid-file "$uid" --max-bytes "$maxb" --timeout $((RUN_TIMEOUT - 10)) 2>&1)
	rc=$?
	npass=$(grep -c "cluster_client: PASS" <<<"$out")
	nplan=$H
	if [[ $plan != - ]]; then
		nplan=0
		for f in "$DIR"/h*/r2ccld.log; do
			grep -q "plan $plan" "$f" && nplan=$((nplan + 1))
		done
	fi
	if ((rc == 0 && npass == H && nplan == H)); then
		ok "$name: every op exact ($(grep -m1 -o '[0-9]* ops, [0-9]* elements' <<<"$out") per host)$([[ $plan == - ]] || echo ", $plan plans on every host")"
	else
		fail "$name: cluster_client failed (run exit $rc, $npass of $H hosts passed, $nplan of $H ran the plans asked for)"
		grep -E "FAIL|error|failed|timed out|killed" <<<"$out" | head -n 20 | sed 's/^/# /'
		dump_logs
	fi
	warmups_ok "$name"
	check_sanitizer "$name"
	daemons_stop_ok "$name" || dump_logs
	"$C" down >/dev/null || fail "$name: down"
	echo "# $name: $(elapsed "$t0") s"
}

for H in 2 3 4; do
	for R in 1 2; do
		for L in 1 2; do
			one_cluster "${H} hosts x ${R} rails x ${L} local ranks" "$H" "$R" "$L" "$MAXB" -
		done
	done
done
# Bruck's schedule (daemon/planner/bruck.c) over real TCP rails: 5 hosts
# x 2 rails, the log-step plans Bruck's alone and chosen (alpha 2 ms), up
# to 8 MB
one_cluster "5 hosts x 2 rails, logstep=bruck" 5 2 1 8M bruck --logstep bruck --logstep-hosts 8 \
	--eager-max 0 --cost-alpha-us 2000 --log-level debug
left=$(ip netns list | awk '{print $1}' | grep -E "^${R2C_PREFIX}(h[0-9]+|sw)\$")
[[ -z $left ]] && ok "no namespaces left" || fail "namespaces left: $left"
finish
