#!/bin/bash
# SPDX-License-Identifier: MIT
# Issue-22 benchmark: what a Prometheus scrape every second costs a running
# collective. On the simulated cluster (tests/cluster/cluster.sh: H hosts x R
# rails, one r2ccld per host with metrics_listen), an AllReduce loop of SIZE
# (r2ccl-bench, every element checked, out of place then in place) runs
# with and without a scraper per host (an HTTP GET of /metrics every second,
# from inside the host's namespace, the body read whole, as Prometheus does),
# alternated for ROUNDS rounds (off/on, then on/off, ...: drift of the
# machine falls on both). Prints each loop's busbw, the medians and the
# difference in % (target: under 1%, issue 22).
# Usage: tools/bench/scrape-cost.sh [-H 4] [-R 2] [--rate RATE] [-s 64M] [-n 20] [--rounds 3]
# Environment: BUILD (build directory, default build), R2C_PREFIX (cluster
# prefix, default r2scrape), extra r2ccld options in R2CCLD_OPTS. Root.
set -euo pipefail
cd "$(dirname "$0")/../.."
H=4 R=2 RATE="" SIZE=64M ITERS=20 ROUNDS=3 BUILD=${BUILD:-build}
while [ $# -gt 0 ]; do
	case $1 in
	-H) H=$2; shift 2 ;;
	-R) R=$2; shift 2 ;;
	--rate) RATE=$2; shift 2 ;;
	-s) SIZE=$2; shift 2 ;;
	-n) ITERS=$2; shift 2 ;;
	--rounds) ROUNDS=$2; shift 2 ;;
	*) echo "unknown option $1" >&2; exit 2 ;;
	esac
done
PREFIX=${R2C_PREFIX:-r2scrape}
PORT=9464
C="tests/cluster/cluster.sh --prefix $PREFIX"
DIR=/tmp/$PREFIX
S=$(numfmt --from=iec "$SIZE")
BENCH=$BUILD/tools/r2ccl-bench
[ -x "$BENCH" ] || { echo "no $BENCH (BUILD=$BUILD)" >&2; exit 1; }
spids=()
stop_scrapers() {
	touch "$DIR/scrape.stop"
	for p in "${spids[@]}"; do wait "$p" || true; done
	spids=()
	rm -f "$DIR/scrape.stop"
}
trap 'touch "$DIR/scrape.stop" 2>/dev/null; $C down >/dev/null 2>&1 || true' EXIT

# The scraper: GET /metrics every second (on the second, not after the
# previous one), the whole body read; prints the number of scrapes and their
# mean duration at the end.
SCRAPER='
import os, sys, time, urllib.request
url, stop, out = sys.argv[1], sys.argv[2], sys.argv[3]
n, busy, nxt = 0, 0.0, time.monotonic()
while not os.path.exists(stop):
    t = time.monotonic()
    try:
        with urllib.request.urlopen(url, timeout=5) as r:
            r.read()
        n += 1
        busy += time.monotonic() - t
    except OSError:
        pass
    nxt += 1.0
    time.sleep(max(0.0, nxt - time.monotonic()))
with open(out, "w") as f:
    f.write("%d %.6f\n" % (n, busy / n if n else 0))
'

$C up -H "$H" -R "$R" ${RATE:+--rate "$RATE"} >/dev/null
# shellcheck disable=SC2086
R2CCLD="$BUILD/daemon/r2ccld" $C daemons start --metrics-listen "$PORT" ${R2CCLD_OPTS:-} >/dev/null
echo "# $(date -u +%F) cluster: $H hosts x $R rails${RATE:+, each NIC capped at $RATE}; $(nproc) cores;" \
	"AllReduce $SIZE, $ITERS iterations a pass; scrape: GET /metrics every 1 s on every host"

# loop MODE ROUND: one r2ccl-bench loop, its busbw (GB/s, mean of the two
# passes' times) on stdout
loop() {
	local mode=$1 round=$2 t
	if [ "$mode" = on ]; then
		for h in $(seq 0 $((H - 1))); do
			$C exec "$h" python3 -c "$SCRAPER" "http://127.0.0.1:$PORT/metrics" \
				"$DIR/scrape.stop" "$DIR/scrapes-$round-h$h" >/dev/null 2>&1 &
			spids+=($!)
		done
	fi
	$C run --timeout 900 --quiet -- sh -c "LD_LIBRARY_PATH=$BUILD/libclient exec $BENCH allreduce \
		-b $S -e $S -n $ITERS -w 2 --nranks $H --first-rank \$R2CCL_HOST_INDEX \
		--uid-file \$R2CCL_CLUSTER_DIR/uid-$mode-$round" >/dev/null 2>&1 ||
		{ echo "loop $mode $round failed" >&2; tail -n 5 "$DIR/h0/out.log" >&2; exit 1; }
	[ "$mode" = on ] && stop_scrapers
	grep -q "Out of bounds values : 0 OK" "$DIR/h0/out.log" ||
		{ echo "loop $mode $round: wrong elements" >&2; exit 1; }
	# nccl-tests columns: size count type redop root time algbw busbw #wrong (x2)
	t=$(awk -v s="$S" '$1 == s { printf "%.1f", ($6 + $10) / 2 }' "$DIR/h0/out.log")
	awk -v t="$t" -v s="$S" -v n="$H" 'BEGIN { printf "%.4f", 2 * (n - 1) / n * s / (t / 1e6) / 1e9 }'
}

offs=() ons=()
for round in $(seq "$ROUNDS"); do
	order="off on"
	((round % 2 == 0)) && order="on off"
	for mode in $order; do
		bw=$(loop "$mode" "$round")
		if [ "$mode" = on ]; then
			ons+=("$bw")
			scr=$(cat "$DIR"/scrapes-"$round"-h* | awk '{ n += $1; b += $1 * $2 }
				END { printf "%d scrapes, %.2f ms each", n, n ? b / n * 1000 : 0 }')
			echo "round $round scrape on : busbw $bw GB/s ($scr)"
			[ "${scr%% *}" -gt 0 ] || { echo "no scrape succeeded" >&2; exit 1; }
		else
			offs+=("$bw")
			echo "round $round scrape off: busbw $bw GB/s"
		fi
	done
done
median() { printf '%s\n' "$@" | sort -g | awk '{ v[NR] = $1 } END {
	printf "%.4f", (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }
m_off=$(median "${offs[@]}") m_on=$(median "${ons[@]}")
echo "median busbw: scrape off $m_off GB/s, scrape on $m_on GB/s"
awk -v a="$m_off" -v b="$m_on" 'BEGIN { d = (b - a) / a * 100
	printf "difference: %+.2f%% (scraping every second %s busbw by %.2f%%; target: under 1%%)\n",
		d, d < 0 ? "costs" : "changes", d < 0 ? -d : d }'
$C daemons stop >/dev/null
