#!/bin/bash
# Issue 21: the planner's predicted time against the measured one, per plan,
# on the simulated cluster (tests/cluster/cluster.sh: H hosts x R rails,
# each NIC capped at RATE), for today's plans (logstep=off) and with the
# log-step schedules (logstep=hd, and rd: recursive doubling too), in one
# command; healthy, and with NIC
# (host DOWN_H, rail DOWN_R) set down before the second pass (--down H R).
# r2ccl-bench runs AllReduce float32 at each size (every element checked);
# the figures come from host 0's r2ccld --log-level debug line of each
# operation ("op N, S bytes: T ms ...; plan P, K steps, predicted X ms"):
# T is the rail phase of one operation in the daemon (no client time), X the
# cost model's time of the plan it ran. The table: per pass, logstep, size:
# the plan, its steps, the prediction, the median and p90 of T over the
# timed operations, and the median's error against the prediction. Each
# pass times its operations only once every daemon's TCP warm-ups are done
# (warmed(), below); its closing line says how long that took, the paths
# the daemons judged silent and the warm-up runs.
# r2ccld's cost model takes every NIC at 1 Gbit/s (125e6 B/s) unless the
# health view has measured it slower, so --rate 1gbit (the default) is the
# cluster the model describes; alpha is cost_alpha_us (PLAN_OPTS to change).
# The cap is a tbf whose bucket holds 4 ms at RATE by default (500 KB at 1
# Gbit/s): a transfer under it leaves at the veth's speed, which no NIC
# does, so at sizes up to a few hundred KB the measured times undercut the
# model's bandwidth term; --burst BYTES sets a smaller bucket (e.g. 16000:
# 128 us at 1 Gbit/s), a cap closer to a NIC's line rate.
# Usage: tools/bench/plan-check.sh [-H 4] [-R 2] [--rate 1gbit] [--burst BYTES]
#        [--sizes "1M 4M 16M 64M"] [-n 5] [--down H R] [--logsteps "off hd rd"]
#        [--steps] (a line per size: host 0's wait in each step of the plan)
# Environment: BUILD (default build), R2C_PREFIX (default r2plan),
# PLAN_OPTS (more r2ccld options). Root (namespaces).
set -euo pipefail
cd "$(dirname "$0")/../.."
H=4 R=2 RATE=1gbit BURST="" SIZES="1M 4M 16M 64M" ITERS=5 DOWN_H="" DOWN_R="" BUILD=${BUILD:-build}
LOGSTEPS="off hd rd" STEPS=""
while [ $# -gt 0 ]; do
	case $1 in
	-H) H=$2; shift 2 ;;
	-R) R=$2; shift 2 ;;
	--rate) RATE=$2; shift 2 ;;
	--burst) BURST=$2; shift 2 ;;
	--sizes) SIZES=$2; shift 2 ;;
	-n) ITERS=$2; shift 2 ;;
	--down) DOWN_H=$2; DOWN_R=$3; shift 3 ;;
	--logsteps) LOGSTEPS=$2; shift 2 ;;
	--steps) STEPS=1; shift ;;
	*) echo "unknown option $1" >&2; exit 2 ;;
	esac
done
[ "$(id -u)" = 0 ] || { echo "root only (namespaces)" >&2; exit 2; }
PREFIX=${R2C_PREFIX:-r2plan}
C="tests/cluster/cluster.sh --prefix $PREFIX"
export R2CCLD=${R2CCLD:-$BUILD/daemon/r2ccld}
OUT=/tmp/$PREFIX-bench
mkdir -p "$OUT"
trap '$C down >/dev/null 2>&1 || true' EXIT
BUCKET="4 ms at the rate"
[ -z "$BURST" ] || BUCKET="$BURST bytes"
echo "# $(date -u '+%F %H:%M') UTC plan check: AllReduce float32, $H hosts x $R rails at $RATE" \
	"per NIC (tbf bucket $BUCKET); $(nproc) cores, load $(cut -d' ' -f1-3 /proc/loadavg)"
printf '%-8s %-7s %6s %-6s %5s %12s %12s %12s %7s\n' pass logstep size plan steps \
	"predicted ms" "measured ms" "p90 ms" error

# The TCP warm-ups (rails.c: each new connection gets tcp_warmup bytes, one
# connection at a time per rail) run when the first communicator connects
# the daemons; on 16 hosts at 1 Gbit/s they take seconds, and operations
# meanwhile share the NICs with them (the steady state is what the model
# describes): a first AllReduce connects them, then the wait until every
# daemon logged the warm-up of its H - 1 peers on every rail (120 s at most).
# Prints the seconds waited.
warmed() {
	local t0 left
	t0=$(date +%s.%N)
	$C run --quiet --timeout 600 -- sh -c "LD_LIBRARY_PATH=$BUILD/libclient \
$BUILD/tools/r2ccl-bench allreduce -b 8 -e 8 -n 1 -w 0 --nranks $H \
--first-rank \$R2CCL_HOST_INDEX --local-ranks 1 --uid-file \$R2CCL_CLUSTER_DIR/uid-warm-$1" \
		>/dev/null
	for ((i = 0; i < 240; i++)); do
		left=$($C warmups | wc -l)
		((left == 0)) && break
		sleep 0.5
	done
	awk -v a="$t0" -v b="$(date +%s.%N)" -v l="$left" \
		'BEGIN { printf "%.1f s%s", b - a, l ? " (" l " rails not done)" : "" }'
}

# --steps: where host 0's rail phase waited, per step of the plan: the
# median over the timed operations of the step's wait for its bytes
# (r2ccld's "op N step K of S: waited T ms" debug line), and of when its
# last chunk came in, from the step's start
step_waits() { # LOG OPSFILE
	local ops
	# communicator:op of the timed operations (each size is its own
	# communicator, numbering its operations from 0)
	ops=$(sed -n 's/.*communicator \([0-9]*\): op \([0-9]*\), [0-9]* bytes: .*/\1:\2/p' "$2" | tr '\n' ' ')
	grep -a " step [0-9]* of [0-9]*: waited " "$1" |
		sed -n 's/.*communicator \([0-9]*\): op \([0-9]*\) step \([0-9]*\) of [0-9]*: waited \([0-9.]*\) ms for \([0-9]*\) bytes.*at \([-+0-9.]*\) ms), from \([0-9.]*\) ms into the operation (its sends \([0-9.]*\) ms.*/\1:\2 \3 \4 \5 \6 \7 \8/p' |
		awk -v ops="$ops" '
			BEGIN { n = split(ops, o, " "); for (i = 1; i <= n; i++) want[o[i]] = 1 }
			want[$1] { k = $2; c[k]++; w[k, c[k]] = $3; by[k] = $4; last[k, c[k]] = $5; at[k, c[k]] = $6; snd[k, c[k]] = $7; if (k > K) K = k }
			function med(a, k, n,   i, j, t, v) {
				for (i = 1; i <= n; i++) v[i] = a[k, i]
				for (i = 2; i <= n; i++) for (j = i; j > 1 && v[j - 1] > v[j]; j--) { t = v[j]; v[j] = v[j - 1]; v[j - 1] = t }
				return v[int((n + 1) / 2)]
			}
			END {
				if (!length(c)) exit
				printf "#   steps (host 0, median ms: wait began @, its sends took s, waited / last chunk in at):"
				for (k = 0; k <= K; k++) if (c[k]) printf " %d: @%.1f s%.2f %.2f/%+.2f (%d KB)", k, med(at, k, c[k]), med(snd, k, c[k]), med(w, k, c[k]), med(last, k, c[k]), by[k] / 1024
				printf "\n"
			}'
}

# one pass: PASSNAME LOGSTEP (the cluster is up, the NIC state set)
pass() {
	local name=$1 ls=$2 log sz b wt
	# shellcheck disable=SC2086
	$C daemons start --log-level debug --logstep "$ls" ${PLAN_OPTS:-} >/dev/null
	wt=$(warmed "$name-$ls")
	for sz in $SIZES; do
		b=$(numfmt --from=iec "$sz")
		$C run --quiet --timeout 600 -- sh -c "LD_LIBRARY_PATH=$BUILD/libclient \
$BUILD/tools/r2ccl-bench allreduce -b $sz -e $sz -n $ITERS -w 2 --nranks $H \
--first-rank \$R2CCL_HOST_INDEX --local-ranks 1 --uid-file \$R2CCL_CLUSTER_DIR/uid-$name-$ls-$sz" \
			>"$OUT/bench-$name-$ls-$sz.log" ||
			{ echo "r2ccl-bench failed ($name, $ls, $sz):" >&2
			  grep -v '^\[h[0-9]*\] #' "$OUT/bench-$name-$ls-$sz.log" | tail -20 >&2
			  for f in /tmp/"$PREFIX"/h*/r2ccld.log; do
				echo "== $f (warnings)" >&2; { grep -aE "warn|err" "$f" || true; } | tail -8 >&2
				h=${f%/r2ccld.log}; cp "$f" "$OUT/r2ccld-${h##*/}.log"
			  done
			  echo "(the daemons' logs: $OUT/r2ccld-h*.log)" >&2
			  exit 1; }
		log=/tmp/$PREFIX/h0/r2ccld.log
		# the timed operations: the last 2 x ITERS of this size (out of
		# place then in place), their plan and prediction
		grep -a "op [0-9]*, $b bytes: " "$log" | tail -n $((2 * ITERS)) >"$OUT/ops-$name-$ls-$sz.txt"
		sed -n 's/.* bytes: \([0-9.]*\) ms .*plan \([a-z]*\), \([0-9]*\) steps, predicted \([0-9.]*\) ms.*/\1 \2 \3 \4/p' \
			"$OUT/ops-$name-$ls-$sz.txt" |
			sort -n | awk -v p="$name" -v l="$ls" -v s="$sz" '
				{ t[NR] = $1; plan[$2 " " $3]++; pred = $4 }
				END {
					if (!NR) { printf "%-8s %-7s %6s (no debug lines)\n", p, l, s; exit }
					for (k in plan) if (plan[k] > best) { best = plan[k]; pk = k }
					split(pk, a, " ")
					m = t[int((NR + 1) / 2)]; q = t[int(NR * 0.9 + 0.5)]
					printf "%-8s %-7s %6s %-6s %5d %12.1f %12.1f %12.1f %+6.0f%%\n",
					       p, l, s, a[1], a[2], pred, m, q, 100 * (m - pred) / pred
				}'
		if [ -n "$STEPS" ]; then
			# every host's (the clock is the machine's: they line up)
			for f in /tmp/"$PREFIX"/h*/r2ccld.log; do
				h=${f%/r2ccld.log}
				grep -a " step [0-9]* of [0-9]*: waited " "$f" >"$OUT/steps-$name-$ls-$sz-${h##*/}.txt" || true
			done
			step_waits "$log" "$OUT/ops-$name-$ls-$sz.txt"
		fi
	done
	# paths a daemon judged silent (heartbeats missed) during the pass, and
	# the TCP warm-ups' runs (rails.c): a false failure plans around a NIC
	local silent warm
	silent=$(cat /tmp/"$PREFIX"/h*/r2ccld.log 2>/dev/null | grep -ac "heartbeats missed" || true)
	warm=$(cat /tmp/"$PREFIX"/h*/r2ccld.log 2>/dev/null |
		sed -n 's/.*TCP warm-up of [0-9]* connections\{0,1\} done, one at a time, in \([0-9]*\) ms.*/\1/p' |
		sort -n | awk '{ v[NR] = $1 } END { if (NR) printf "%d runs, longest %d ms", NR, v[NR]; else printf "none" }')
	echo "# pass $name $ls: $silent paths judged silent (heartbeats missed); TCP warm-ups: $warm" \
		"(timed operations after them: $wt)"
	$C daemons stop >/dev/null
}

# The cap itself, before the passes: a TCP ping-pong over rail 0 (hosts 0
# and 1) at 256 KB and 1 MB, against 2 x size at RATE (the bucket lets up
# to 2 x its bytes go faster): whether the NICs run at the rate the model
# takes them at, on this machine
cap_check() {
	local pp=$BUILD/tools/peers/tcp_pingpong srv bps
	[ -x "$pp" ] || return 0
	bps=$(numfmt --from=si "$(echo "${RATE%bit}" | tr 'a-z' 'A-Z')")
	$C exec 1 "$pp" -s 47109 >/dev/null 2>&1 &
	srv=$!
	$C exec 0 "$pp" -c "$($C addr 1 0)" 47109 -n 10 -w 2 262144 1048576 2>/dev/null |
		sed -n 's/.*size=\([0-9]*\) .*p50_us=\([0-9.]*\).*/\1 \2/p' |
		awk -v bps="$bps" '{ printf "%s %d KB round trip %.2f ms (2 x size at the rate: %.2f)", (NR > 1 ? ";" : "# cap check, TCP ping-pong on rail 0:"), $1 / 1024, $2 / 1000, 2 * $1 * 8 / bps * 1000 }
			END { if (NR) printf "\n" }'
	wait "$srv" 2>/dev/null || true
}

$C up -H "$H" -R "$R" --rate "$RATE" ${BURST:+--burst "$BURST"} >/dev/null
cap_check
for ls in $LOGSTEPS; do
	pass healthy "$ls"
done
if [ -n "$DOWN_H" ]; then
	$C link "$DOWN_H" "$DOWN_R" down >/dev/null
	for ls in $LOGSTEPS; do
		pass "down$DOWN_H.$DOWN_R" "$ls"
	done
fi
echo "(measured: host 0's rail phase per operation, r2ccld's debug line; predicted: its plan's cost-model time)"
