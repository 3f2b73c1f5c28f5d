#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
#
# A peer daemon killed during an operation: 3 hosts x 2 rails x 2 local ranks,
# daemons with --op-timeout-ms 10000, a loop of 64 MB float32 allreduces
# (cluster_client --loop). Once the loop runs, SIGKILL host 2's daemon. Then:
#  - every rank on hosts 0 and 1 gets an r2ccl error (cluster_client exits 2
#    and prints the error) within KILL_BOUND (15 s) of the kill;
#  - the daemons of hosts 0 and 1 are still running (no crash);
#  - a new communicator across hosts 0 and 1 (4 ranks) runs every op exactly;
#  - host 2's daemon started again, a loop across the 3 hosts stopped in its
#    middle (its ranks and the daemons SIGTERMed at once): every daemon
#    exits 0, no sanitizer report in their logs.
# Exits 77 when not root or without iproute2.

set -u -o pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
cluster_lib_init ckil

H=3 R=2 L=2
KILL_BOUND=${KILL_BOUND:-15}
"$C" up -H $H -R $R >/dev/null || { fail "cluster up"; finish; }
"$C" daemons start --op-timeout-ms 10000 >/dev/null || { fail "daemons start"; dump_logs; finish; }

# The loop, in the background (run writes each host's output to hI/out.log).
"$C" run --timeout 120 -- "$CC" --local-ranks $L --uid-file "$DIR/uid-kill-$RANDOM" \
	--loop 200 --max-bytes 64M --timeout 110 >"$DIR/run1.log" 2>&1 &
runpid=$!

# Wait (bounded) until the loop is under way: 3 allreduces done on rank 0.
for ((t = 0; t < 600; t++)); do
	grep -q "loop [0-9]* of 200 done" "$DIR/h0/out.log" 2>/dev/null && break
	kill -0 $runpid 2>/dev/null || break
	sleep 0.1
done
if ! grep -q "loop 1 of 200 done" "$DIR/h0/out.log" 2>/dev/null; then
	fail "the allreduce loop did not start"
	sed 's/^/# /' "$DIR"/h*/out.log 2>/dev/null | head -n 30
	dump_logs
	finish
fi
sleep 1.5 # mid-run (about a second per 64 MB allreduce here)

victim=$(<"$DIR/h2/r2ccld.pid")
tkill=$(now)
kill -KILL "$victim"
echo "# SIGKILL host 2's r2ccld (pid $victim) at epoch $tkill"

# The run ends once every rank has its error (bounded by the run's timeout).
wait $runpid
tend=$(now)
echo "# all ranks ended $(elapsed "$tkill" "$tend") s after the kill"

for i in 0 1; do
	log=$DIR/h$i/out.log
	if grep -q "cluster_client: PASS" "$log"; then
		fail "h$i: the loop finished without an error although a peer daemon was killed"
	fi
	for ((r = i * L; r < (i + 1) * L; r++)); do
		line=$(grep -m1 "cluster_client: rank $r: error " "$log")
		if [[ -z $line ]]; then
			fail "rank $r (h$i): no r2ccl error reported"
			sed 's/^/# /' "$log" | tail -n 10
			continue
		fi
		at=${line##*epoch=}
		dt=$(elapsed "$tkill" "$at")
		msg=${line#*error }
		if lt "$dt" "$KILL_BOUND"; then
			ok "rank $r (h$i): error $dt s after the kill: ${msg% epoch=*}"
		else
			fail "rank $r (h$i): error only $dt s after the kill (bound ${KILL_BOUND} s): ${msg% epoch=*}"
		fi
	done
done
grep -h "cluster_client: rank [0-9]*: error" "$DIR/h2/out.log" | sed 's/^/# h2 (killed daemon): /'

for i in 0 1; do
	pid=$(<"$DIR/h$i/r2ccld.pid")
	if [[ ! -e $DIR/h$i/r2ccld.rc ]] && kill -0 "$pid" 2>/dev/null; then
		ok "h$i: r2ccld still running"
	else
		fail "h$i: r2ccld died (exit $(cat "$DIR/h$i/r2ccld.rc" 2>/dev/null))"
		dump_logs 30
	fi
done

# A new communicator across the surviving hosts: 2 hosts x 2 local ranks.
t0=$(now)
out=$("$C" run --hosts 0,1 --timeout 120 -- sh -c 'exec "$0" --nranks 4 --local-ranks 2 \
	--first-rank $((R2CCL_HOST_INDEX * 2)) --uid-file "$1" --max-bytes 9M --timeout 110' \
	"$CC" "$DIR/uid-after-$RANDOM" 2>&1)
rc=$?
npass=$(grep -c "cluster_client: PASS" <<<"$out")
if ((rc == 0 && npass == 2)); then
	ok "new communicator across hosts 0 and 1: every op exact ($(elapsed "$t0") s)"
else
	fail "new communicator across hosts 0 and 1 failed (run exit $rc)"
	grep -E "FAIL|error|failed|timed out|killed" <<<"$out" | head -n 20 | sed 's/^/# /'
	dump_logs 30
fi
check_sanitizer "peer killed"

# Stopped in the middle of an AllReduce loop across the 3 hosts: the ranks
# get SIGTERM (their sessions close, the communicator dies) and at once the
# daemons (the drain fails the collective in its rail phase). Each daemon must
# exit 0 with no sanitizer report: the rails thread once took the dying
# communicator for gone and freed chunk records its executor still listed
# (a heap use-after-free under ASan, signal 11 in test_prometheus.sh).
# Host 2's daemon again; r2ccl-bench on the 3 hosts (no checks between its
# AllReduces: nearly always in a rail phase).
"$C" daemons start --hosts 2 >/dev/null || fail "stop mid-loop: host 2's daemon did not start"
BENCH=${R2CCL_BENCH:-$HERE/../../build/tools/r2ccl-bench}
"$C" run --timeout 60 -- sh -c 'exec "$0" allreduce -b 4M -e 4M -n 100000 -w 3 \
	--nranks $R2CCL_NHOSTS --first-rank $R2CCL_HOST_INDEX --uid-file "$1"' \
	"$BENCH" "$DIR/uid-stop-$RANDOM" >"$DIR/run-stop.log" 2>&1 &
runpid=$!
for ((t = 0; t < 300; t++)); do
	grep -q "size *count" "$DIR/h0/out.log" 2>/dev/null && break
	kill -0 $runpid 2>/dev/null || break
	sleep 0.1
done
grep -q "size *count" "$DIR/h0/out.log" 2>/dev/null ||
	fail "stop mid-loop: the allreduce loop did not start"
sleep 0.5
kill -TERM $runpid 2>/dev/null
if daemons_stop_ok "stop mid-loop" 0 1 2; then
	ok "stop mid-loop: the 3 daemons exited 0"
else
	dump_logs 40
fi
wait $runpid 2>/dev/null
check_sanitizer "stop mid-loop" && ok "stop mid-loop: no sanitizer report"
"$C" down >/dev/null || fail "down"
finish
