#!/bin/bash
# Issue-21 cost accounting: what one small AllReduce across hosts costs the
# machine, where small-bench.sh gives its time. 2 namespace hosts x 2 rails
# (tests/cluster/cluster.sh), one rank per host, host buffers, -n timed
# iterations of one size (r2ccl-bench: out of place and in place, checked).
# Prints:
#  - R2CCL's p50 / p99 (rank 0);
#  - those of a TCP ping-pong and of the floor through a daemon per host
#    (tools/peers/relay_floor -T 1) over rail 0, with the CPU of each;
#  - the CPU time the whole machine spent per operation (/proc/stat, every
#    process: both daemons, both clients, the kernel's network stack), and
#    how busy the CPUs were;
#  - with perf: system calls and thread switches per operation per host, by
#    thread name (perf record of raw_syscalls:sys_enter and
#    sched:sched_switch over the run, perf's own left out).
# Operations are host 0's (r2cclctl status); "per host" divides by 2.
# Usage: tools/bench/small-cost.sh [-n 8000] [-s 8]
# Environment: BUILD (default build), R2C_PREFIX (default r2cost), extra
# r2ccld options in R2CCLD_OPTS (default: busy-polls off, as small-bench.sh
# sets them below 8 cores per host), another r2ccld in R2CCLD, the client's
# environment in CLIENT_ENV (e.g. R2CCL_SPIN_US=0). Root (namespaces).
set -euo pipefail
cd "$(dirname "$0")/../.."
ITERS=8000 SIZE=8 BUILD=${BUILD:-build}
while [ $# -gt 0 ]; do
	case $1 in
	-n) ITERS=$2; shift 2 ;;
	-s) SIZE=$2; shift 2 ;;
	*) echo "unknown option $1" >&2; exit 2 ;;
	esac
done
[ "$(id -u)" = 0 ] || { echo "root only (namespaces)" >&2; exit 2; }
PREFIX=${R2C_PREFIX:-r2cost}
C="tests/cluster/cluster.sh --prefix $PREFIX"
OUT=/tmp/$PREFIX-cost
mkdir -p "$OUT"
trap '$C down >/dev/null 2>&1 || true' EXIT
$C up -H 2 -R 2 >/dev/null
# shellcheck disable=SC2086
R2CCLD="${R2CCLD:-$BUILD/daemon/r2ccld}" $C daemons start \
	${R2CCLD_OPTS:---exec-spin-us 0 --spin-us 0} >/dev/null
echo "# $(date -u '+%F %H:%M') UTC $SIZE B AllReduce, 2 hosts x 2 rails, $ITERS iterations;" \
	"$(nproc) cores, load $(cut -d' ' -f1-3 /proc/loadavg);" \
	"r2ccld ${R2CCLD_OPTS:---exec-spin-us 0 --spin-us 0}; client ${CLIENT_ENV:-defaults}"

# busy and all jiffies of the machine
cpu() { awk '/^cpu / { b = $2 + $3 + $4 + $7 + $8 + $9; print b, b + $5 + $6 }' /proc/stat; }
BENCH="${CLIENT_ENV:-} LD_LIBRARY_PATH=$BUILD/libclient $BUILD/tools/r2ccl-bench allreduce \
-b $SIZE -e $SIZE -n $ITERS -w 20 --nranks 2 --first-rank \$R2CCL_HOST_INDEX --local-ranks 1 \
--uid-file \$R2CCL_CLUSTER_DIR/uid-cost-$$ --pct"
PERF=$(command -v perf || true)
run() { $C run --timeout 600 -- sh -c "$BENCH"; }
# the times and the CPU first, without perf (its tracing costs CPU too)
read -r b0 a0 < <(cpu)
run > "$OUT/bench" 2>&1
read -r b1 a1 < <(cpu)
ops=$($C exec 0 "$BUILD/tools/r2cclctl" status | awk '$1 == "operations:" { print $2 }')
[ -n "$ops" ] && [ "$ops" -gt 0 ] || { echo "no operations counted" >&2; exit 1; }
hz=$(getconf CLK_TCK)
awk '/^\[h0\] #pct/ { printf "R2CCL p50 %s us, p99 %s us\n", $4, $5 }' "$OUT/bench"
awk -v b=$((b1 - b0)) -v a=$((a1 - a0)) -v hz="$hz" -v ops="$ops" 'BEGIN {
	printf "operations %d per host; CPU per operation, whole machine: %.0f us (CPUs %.0f%% busy)\n",
		ops, b / hz * 1e6 / ops, 100 * b / a }'
# the same exchange without r2ccld in it: the TCP ping-pong (one round
# trip an iteration) and the floor through a daemon per host
# (tools/peers/relay_floor -T 1: a client process, eventfds, one daemon
# thread), rail 0, the same iterations and size, each with its CPU
floor() { # NAME SERVER-ARGS... -- CLIENT-ARGS...
	local name=$1 b0 a0 b1 a1 srv=() cli=()
	shift
	while [ "$1" != -- ]; do srv+=("$1"); shift; done
	shift
	cli=("$@")
	read -r b0 a0 < <(cpu)
	$C exec 1 "${srv[@]}" &
	local pid=$!
	$C exec 0 "${cli[@]}" > "$OUT/$name"
	wait "$pid"
	read -r b1 a1 < <(cpu)
	awk -v name="$name" -v b=$((b1 - b0)) -v a=$((a1 - a0)) -v hz="$hz" \
		-v ops=$((ITERS + 20)) '{ split($(NF - 1), p, "="); split($NF, q, "=") }
	END { printf "%s p50 %s us, p99 %s us; CPU per operation, whole machine: %.0f us " \
		"(CPUs %.0f%% busy)\n", name, p[2], q[2], b / hz * 1e6 / ops, 100 * b / a }' \
		"$OUT/$name"
}
ADDR=$($C addr 1 0)
floor ping-pong "$BUILD/tools/peers/tcp_pingpong" -s 47102 -- \
	"$BUILD/tools/peers/tcp_pingpong" -c "$ADDR" 47102 -n "$ITERS" "$SIZE"
if [ $((SIZE % 4)) = 0 ] && [ "$SIZE" -le 65536 ]; then # (a floor up to 64 KB only)
	floor relay-floor "$BUILD/tools/peers/relay_floor" -l 47103 -n "$ITERS" "$SIZE" -- \
		"$BUILD/tools/peers/relay_floor" -c "$ADDR" 47103 -n "$ITERS" "$SIZE"
fi
# then the same run again under perf: the counts (operations: the daemon's
# count moved by the second run)
if [ -n "$PERF" ]; then
	rm -f "/tmp/$PREFIX/uid-cost-$$" # rank 0 writes a new one
	"$PERF" record -q -a -e raw_syscalls:sys_enter -e sched:sched_switch -o "$OUT/perf.data" -- \
		bash -c "$(declare -f run); C='$C' BENCH='$BENCH' run" > "$OUT/bench-perf" 2>&1
	ops2=$($C exec 0 "$BUILD/tools/r2cclctl" status | awk '$1 == "operations:" { print $2 }')
	ops=$((ops2 - ops))
fi
if [ -n "$PERF" ] && [ "$ops" -gt 0 ]; then
	"$PERF" script -i "$OUT/perf.data" -F comm,event 2>/dev/null | awk -v ops="$ops" '
	$1 == "perf" || $1 == "perf-exec" { next }
	/sys_enter/ { sys[$1]++; tsys++ }
	/sched_switch/ { sw[$1]++; tsw++ }
	END {
		printf "per operation per host: %.1f system calls, %.1f thread switches\n",
			tsys / 2 / ops, tsw / 2 / ops
		for (k in sys) if (sys[k] / 2 / ops >= 0.05 || sw[k] / 2 / ops >= 0.05)
			printf "  %-16s %5.2f calls %5.2f switches\n", k, sys[k] / 2 / ops, sw[k] / 2 / ops
	}' | sort
fi
