#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
#
# Records a NIC failure and its recovery on the namespace cluster, then draws
# it (tools/plot/plot.py failover): 2 hosts x 2 rails (each NIC capped at
# RATE), one r2ccld per host with metrics_listen, an AllReduce loop of SIZE
# (r2ccl-bench, every element checked, per-iteration trace), each daemon's
# /metrics sampled every 100 ms (tools/plot/sample-metrics.py, inside its
# host's namespace), host 1's rail 0 set down DOWN_AT s into the loop for
# DOWN_FOR s, then up. Writes to OUTDIR (default /tmp/r2ccl-failover):
#   metrics-h0.csv metrics-h1.csv  the samples
#   iters.csv                      rank 0's iterations (r2ccl-bench --trace)
#   marks.csv                      when the link went down and up (unix s)
#   events-h0.json events-h1.json  r2cclctl --json events after the run
#   bench.out                      r2ccl-bench's table (rank 0)
#   failover.png                   the picture
# Root. About 30-40 s. Usage: tools/plot/record-failover.sh [OUTDIR]
# Env: BUILD (build dir, default build), RATE (1gbit), SIZE (16M),
# PYTHON, ITERS (iterations of each pass, out of place then in place: 100), DOWN_AT (4), DOWN_FOR (3), R2C_PREFIX.

set -u -o pipefail
PLOT=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ROOT=$(cd "$PLOT/../.." && pwd)
BUILD=${BUILD:-build}
[[ $BUILD == /* ]] || BUILD=$ROOT/$BUILD
export R2CCLD=${R2CCLD:-$BUILD/daemon/r2ccld}
export CLUSTER_CLIENT=${CLUSTER_CLIENT:-$BUILD/tests/cluster/cluster_client}
BENCH=$BUILD/tools/r2ccl-bench
CTL=$BUILD/tools/r2cclctl
# shellcheck source=../../tests/cluster/lib.sh
source "$ROOT/tests/cluster/lib.sh"
cluster_lib_init fo
[[ -x $BENCH && -x $CTL ]] || { echo "no r2ccl-bench / r2cclctl in $BUILD"; exit 1; }
# Debian's python3-matplotlib is for /usr/bin/python3 (PATH may find another)
PY=${PYTHON:-python3}
"$PY" -c "import matplotlib" 2>/dev/null || PY=/usr/bin/python3
"$PY" -c "import matplotlib" 2>/dev/null || { echo "no python3-matplotlib"; exit 1; }

OUT=${1:-/tmp/r2ccl-failover}
RATE=${RATE:-1gbit} SIZE=${SIZE:-16M} ITERS=${ITERS:-100}
DOWN_AT=${DOWN_AT:-4} DOWN_FOR=${DOWN_FOR:-3}
PORT=9464
mkdir -p "$OUT"
rm -f "$OUT"/metrics-h*.csv "$OUT"/iters.csv "$OUT"/marks.csv "$OUT"/events-h*.json "$OUT/.stop"
mark() { echo "$(date +%s.%N),$1" >>"$OUT/marks.csv"; }
echo "unix_s,what" >"$OUT/marks.csv"

"$C" up -H 2 -R 2 --rate "$RATE" >/dev/null || { echo "cluster up failed"; exit 1; }
"$C" daemons start --metrics-listen "$PORT" >/dev/null || { dump_logs; exit 1; }
spids=()
for h in 0 1; do
	"$C" exec "$h" "$PY" "$PLOT/sample-metrics.py" --url "http://127.0.0.1:$PORT/metrics" \
		--host "$h" --out "$OUT/metrics-h$h.csv" --interval 0.1 --stop-file "$OUT/.stop" \
		--max-seconds 120 &
	spids+=($!)
done

t_run=$(now)
"$C" run --timeout 120 --quiet -- sh -c "exec $BENCH allreduce -b $SIZE -e $SIZE -n $ITERS -w 2 \
	--nranks 2 --first-rank \$R2CCL_HOST_INDEX --uid-file $DIR/uid-fo \
	--trace $OUT/iters.csv" >/dev/null 2>&1 &
rpid=$!
# the loop runs once host 0 has sent a SIZE (the trace is written per pass)
S=$(numfmt --from=iec "$SIZE")
for _ in $(seq 300); do
	awk -F, -v s="$S" 'NR > 1 && $6 > s { f = 1 } END { exit !f }' "$OUT/metrics-h0.csv" \
		2>/dev/null && break
	kill -0 "$rpid" 2>/dev/null || break
	sleep 0.1
done
echo "# loop running after $(elapsed "$t_run") s"
sleep "$DOWN_AT"
mark "h1 rail0 down"
"$C" link 1 0 down >/dev/null
sleep "$DOWN_FOR"
mark "h1 rail0 up"
"$C" link 1 0 up >/dev/null
wait "$rpid"
rc=$?
sleep 1 # the samples after the loop
touch "$OUT/.stop"
for p in "${spids[@]}"; do wait "$p"; done
for h in 0 1; do
	"$CTL" --socket "$DIR/h$h/r2ccld.sock" --json events >"$OUT/events-h$h.json" 2>/dev/null
done
cp "$DIR/h0/out.log" "$OUT/bench.out"
grep -q "Out of bounds values : 0 OK" "$OUT/bench.out" || { echo "the loop failed (rc $rc)"; tail -n 5 "$OUT/bench.out"; rc=1; }
daemons_stop_ok failover || dump_logs
"$C" down >/dev/null
"$PY" "$PLOT/plot.py" failover --metrics "$OUT"/metrics-h0.csv "$OUT"/metrics-h1.csv \
	--iters "$OUT/iters.csv" --events "$OUT"/events-h0.json "$OUT"/events-h1.json \
	--marks "$OUT/marks.csv" -o "$OUT/failover.png" \
	--title "2 hosts x 2 rails ($RATE each), AllReduce $SIZE loop; host 1 rail 0 down ${DOWN_FOR} s ($(date -u +%F))"
echo "# recorded in $(elapsed "$T_START") s: $OUT"
exit "$rc"
