#!/bin/bash
# Issue-20 benchmark: tenants sharing the rails of the simulated cluster
# (network namespaces, tests/cluster/cluster.sh; 4 hosts x 2 rails at
# 1 Gbit/s per NIC by default), every figure of docs/tenancy.md's table:
#  1. weighted share: tenants a, b (weights 3:1) with 64 MB AllReduces at once,
#     then a, b, c (1:1:2); each tenant's share of host 0's bytes per 100 ms
#     window (r2cclctl tenants, sampled) against its weight's share, and the
#     aggregate throughput (host 0's bytes of all of them per second, while
#     they send) against tenant a alone, in the same command (each tenant's
#     r2ccl-bench busbw is printed too);
#  2. limit: tenant cap (rate=300M) alone: its mean rate against the cap and
#     its bytes in every 1 s window against rate*T + burst;
#  3. latency: tenant lat (class=latency) with 256 KB AllReduces, p50/p99
#     alone, beside bulk tenant a, and beside it with the scheduler off
#     (sched = 0);
#  4. reaction: a and b (1:1) with 64 MB AllReduces; `r2cclctl tenants set`
#     on every host at once: a weight=3, then b rate=8K (capped to almost
#     nothing), then b rate=0; host 0's counters read every millisecond
#     (r2cclctl --json -f -i 1 tenants): how long from host 0's command to
#     the counters that show it (tenant-shares.py react).
# The clients of each tenant run in a cgroup of their own (made under the
# cgroup v2 hierarchy, moved into before `cluster.sh run`: the namespaces'
# processes inherit it), which the daemons' [tenants] section maps.
# Usage: tools/bench/tenant-bench.sh [-H 4] [-R 2] [--rate 1gbit] [-n ITERS]
#        [--only share|limit|latency|react] [--lane on|off|auto] [--qdisc pfifo_fast] [--dry-run]
#   --lane on|off|auto  the daemons' tcp_latency_lane (default auto: on, since
#            the configuration has a latency tenant): the latency tenant's
#            chunks on a TCP stream of their own, marked DSCP EF / priority
#   --qdisc  the queue behind each NIC's tbf (cluster.sh R2C_TBF_QDISC):
#            pfifo_fast serves by priority (a port with QoS queues); default
#            the tbf's FIFO
#   --loops N  the weighted-share part: N AllReduce loops per tenant at once
#            (N r2ccl-bench runs in its cgroup, each its own communicator;
#            default 1)
#   --stagger  the weighted-share part: a tenant's loops start one after
#            another, 1/N of its loop's expected iteration apart (from a
#            alone's busbw and the tenant's weight), not all at once: loops
#            that start together stay in step, and their iterations' ends
#            (the last ring steps, the next call) leave the tenant with
#            nothing queued at the same moments
#   --share-args "ARGS"  more r2ccld options for the weighted-share part
#            (e.g. "--chunk-size 256K --sched-window 1M")
# Environment: BUILD (build directory, default build), R2C_PREFIX (cluster
# prefix, default r2tenant), TB_LAT_MODES (the latency part's modes, default
# "alone shared off"; each leaves lat-MODE.qdisc, the NICs' tc -s, and
# lat-MODE.h0.log, host 0's r2ccld log, in /tmp/PREFIX-bench). Root only. --dry-run prints the configuration
# and the commands instead of running them (no root needed).
set -euo pipefail
cd "$(dirname "$0")/../.."
H=4 R=2 RATE=1gbit ITERS=20 ONLY="" DRY=0 BUILD=${BUILD:-build} LANE=auto LOOPS=1 SHARE_ARGS="" STAGGER=0
while [ $# -gt 0 ]; do
	case $1 in
	-H) H=$2; shift 2 ;;
	-R) R=$2; shift 2 ;;
	--rate) RATE=$2; shift 2 ;;
	-n) ITERS=$2; shift 2 ;;
	--only) ONLY=$2; shift 2 ;;
	--lane) LANE=$2; shift 2 ;;
	--qdisc) export R2C_TBF_QDISC=$2; shift 2 ;;
	--loops) LOOPS=$2; shift 2 ;;
	--share-args) SHARE_ARGS=$2; shift 2 ;;
	--stagger) STAGGER=1; shift ;;
	--dry-run) DRY=1; shift ;;
	*) echo "unknown option $1" >&2; exit 2 ;;
	esac
done
PREFIX=${R2C_PREFIX:-r2tenant}
C="tests/cluster/cluster.sh --prefix $PREFIX"
SHARES=tools/bench/tenant-shares.py
CTL=$BUILD/tools/r2cclctl
BENCH=$BUILD/tools/r2ccl-bench
OUT=/tmp/$PREFIX-bench
CAP_BPS=300000000
CAP_BURST=$((CAP_BPS / 8 / 50)) # 2% of one second's bytes

# The cgroup v2 hierarchy's mount point (/sys/fs/cgroup, or .../unified on
# hybrid hosts) and this run's cgroups below it.
cg_mount() {
	awk '{ for (i = 1; i <= NF; i++) if ($i == "-") { if ($(i + 1) == "cgroup2") print $5; break } }' \
		/proc/self/mountinfo | head -n 1
}
CGM=$(cg_mount)
CGB=/r2bench-$$
LEAVES="a b c cap lat"

# The daemons' configuration: one tenant per cgroup.
write_conf() {
	cat >"$OUT/r2ccld.conf" <<EOF
# written by tools/bench/tenant-bench.sh
$1
[tenants]
default = weight=1
a = cgroup=$CGB/a weight=${2:-3}
b = cgroup=$CGB/b weight=${3:-1}
c = cgroup=$CGB/c weight=${4:-2}
cap = cgroup=$CGB/cap rate=$CAP_BPS
lat = cgroup=$CGB/lat class=latency
EOF
}

run() { if ((DRY)); then echo "+ $*"; else "$@"; fi; }

# tenant NAME SIZE ITERS [TRACE] [OUTNAME] [DELAY]: the tenant's r2ccl-bench on
# every host, in its cgroup, in the background, after DELAY seconds; its
# output in /tmp/PREFIX/h0/OUTNAME.out (host 0; OUTNAME defaults to NAME).
tenant() {
	local name=$1 size=$2 iters=$3 trace=${4:-} out=${5:-$1} delay=${6:-0}
	NRUN=$((NRUN + 1)) # the unique id's file: one per run, the same on every host
	local cmd="sleep $delay; LD_LIBRARY_PATH=$BUILD/libclient $BENCH allreduce -b $size -e $size -n $iters \
-w 1 -c 0 --nranks $H --first-rank \$R2CCL_HOST_INDEX --local-ranks 1 \
--uid-file \$R2CCL_CLUSTER_DIR/uid-$name-$$-$NRUN ${trace:+--trace $trace} \
>\$R2CCL_CLUSTER_DIR/h\$R2CCL_HOST_INDEX/$out.out 2>&1"
	if ((DRY)); then
		echo "+ (move to $CGM$CGB/$name) $C run --timeout 1800 --quiet -- sh -c \"$cmd\" &"
		return
	fi
	(
		echo "$BASHPID" >"$CGM$CGB/$name/cgroup.procs"
		exec $C run --timeout 1800 --quiet -- sh -c "$cmd"
	) >"$OUT/$out.run" 2>&1 &
	PIDS+=("$!")
	LAST=$!
}

# bulk NAME[=WEIGHT]...: each tenant's LOOPS AllReduce loops of 64 MB (the
# first one's output is NAME.out, the others' NAME-K.out; their timed
# iterations in $OUT/trace-*.csv, made afresh, for `shares --traces`); at
# once, or with --stagger loop K after (K-1)/LOOPS of the loop's expected
# iteration: a alone's ($ALONE GB/s busbw per loop) over the weight's share
bulk() {
	local out name w wsum=0 delay
	((DRY)) || rm -f "$OUT"/trace-*.csv
	TRACES=()
	for name in "$@"; do
		[ "${name#*=}" != "$name" ] && wsum=$((wsum + ${name#*=}))
	done
	for name in "$@"; do
		w=${name#*=} name=${name%%=*}
		for k in $(seq 1 "$LOOPS"); do
			out=$name$( ((k > 1)) && echo "-$k" || true)
			delay=0
			if ((STAGGER)) && [ -n "${ALONE:-}" ] && [ "$w" != "$name" ]; then
				delay=$(awk -v b="$ALONE" -v h="$H" -v W="$wsum" -v w="$w" -v L="$LOOPS" -v k="$k" \
					'BEGIN { t = 64 * 2^20 * 2 * (h - 1) / h / (b * 1e9); printf "%.2f", (k - 1) * t * W / w / L }')
			fi
			tenant "$name" 64M "$ITERS" "$OUT/trace-$out.csv" "$out" "$delay"
			TRACES+=("$OUT/trace-$out.csv")
		done
	done
}
TRACES=()
PIDS=() LAST="" SAMPLER="" NRUN=0

# Waits for the tenants started (a failed one is reported, not fatal).
wait_tenants() {
	((DRY)) && return
	for p in "${PIDS[@]}"; do wait "$p" || echo "(a tenant's run failed: $OUT/*.run)"; done
	PIDS=()
}

# busbw of a tenant's r2ccl-bench table (host 0), the out-of-place column
busbw() { awk '$1 ~ /^[0-9]+$/ && NF >= 8 { print $8; exit }' "/tmp/$PREFIX/h0/$1.out"; }

# sample SECONDS: host 0's tenants every 100 ms into $OUT/samples, until
# sample_end
sample() {
	if ((DRY)); then
		echo "+ python3 $SHARES sample --interval 0.1 --duration $1 $C exec 0 $CTL --json tenants >$OUT/samples &"
		return
	fi
	python3 $SHARES sample --interval 0.1 --duration "$1" --raw "$OUT/samples.json" \
		$C exec 0 "$CTL" --json tenants >"$OUT/samples" &
	SAMPLER=$!
}
sample_end() {
	((DRY)) && return
	kill "$SAMPLER" 2>/dev/null || true
	wait "$SAMPLER" 2>/dev/null || true
}

daemons() {
	if ((DRY)); then
		echo "+ $C daemons start --config $OUT/r2ccld.conf $*"
	else
		$C daemons start --config "$OUT/r2ccld.conf" "$@" >/dev/null
	fi
}

cleanup() {
	((DRY)) && return
	$C down >/dev/null 2>&1 || true
	for l in $LEAVES; do rmdir "$CGM$CGB/$l" 2>/dev/null || true; done
	rmdir "$CGM$CGB" 2>/dev/null || true
}

mkdir -p "$OUT"
if ((!DRY)); then
	[ "$(id -u)" = 0 ] || { echo "root only (namespaces, cgroups)" >&2; exit 2; }
	[ -n "$CGM" ] || { echo "no cgroup v2 hierarchy mounted" >&2; exit 2; }
	trap cleanup EXIT
	for l in $LEAVES; do mkdir -p "$CGM$CGB/$l"; done
	$C up -H "$H" -R "$R" --rate "$RATE" >/dev/null
fi
echo "# $(date -u +%F) tenants: $H hosts x $R rails, each NIC capped at $RATE; $(nproc) cores"

if [ -z "$ONLY" ] || [ "$ONLY" = share ]; then
	write_conf "" 3 1 2
	((DRY)) && cat "$OUT/r2ccld.conf"
	# shellcheck disable=SC2086 # SHARE_ARGS: words
	daemons $SHARE_ARGS
	echo "## weighted share: a alone, then a:b = 3:1, then a:b:c = 1:1:2 (64 MB AllReduces," \
		"$LOOPS loop(s) per tenant$( ((STAGGER)) && echo ", staggered" || true)${SHARE_ARGS:+, r2ccld $SHARE_ARGS})"
	sample 300
	bulk a; wait_tenants
	sample_end
	((DRY)) || mv "$OUT/samples" "$OUT/samples-alone"
	ALONE=$( ((DRY)) || busbw a); echo "a alone: busbw ${ALONE:-?} GB/s"
	sample 300
	bulk a=3 b=1; wait_tenants
	sample_end
	((DRY)) || cp "$OUT/samples" "$OUT/samples-31"
	((DRY)) || cp "$OUT/samples.json" "$OUT/samples-31.json"
	run python3 $SHARES shares "$OUT/samples" a=3 b=1 --queued "$OUT/samples.json" --traces "${TRACES[@]}"
	run python3 $SHARES throughput "$OUT/samples" a b --vs "$OUT/samples-alone" a
	((DRY)) || echo "a+b busbw: $(busbw a) + $(busbw b) GB/s (alone: $ALONE)"
	run $C daemons stop >/dev/null
	write_conf "" 1 1 2
	# shellcheck disable=SC2086
	daemons $SHARE_ARGS
	sample 300
	bulk a=1 b=1 c=2; wait_tenants
	sample_end
	((DRY)) || cp "$OUT/samples" "$OUT/samples-112"
	((DRY)) || cp "$OUT/samples.json" "$OUT/samples-112.json"
	run python3 $SHARES shares "$OUT/samples" a=1 b=1 c=2 --queued "$OUT/samples.json" --traces "${TRACES[@]}"
	run python3 $SHARES throughput "$OUT/samples" a b c --vs "$OUT/samples-alone" a
	((DRY)) || echo "a+b+c busbw: $(busbw a) + $(busbw b) + $(busbw c) GB/s (alone: $ALONE)"
	run $C daemons stop >/dev/null
fi

if [ -z "$ONLY" ] || [ "$ONLY" = limit ]; then
	write_conf "" 3 1 2
	echo "## limit: tenant cap alone at rate=$CAP_BPS bit/s per host (burst $CAP_BURST bytes)"
	# chunks no larger than the burst, so that the bound is rate*T + burst
	daemons --chunk-size 512K
	sample 300
	tenant cap 64M "$ITERS"; wait_tenants
	sample_end
	run python3 $SHARES rate "$OUT/samples" cap $CAP_BPS $CAP_BURST
	run $C daemons stop >/dev/null
fi

if [ -z "$ONLY" ] || [ "$ONLY" = latency ]; then
	write_conf "tcp_latency_lane = $LANE" 3 1 2
	echo "## latency: tenant lat, 256 KB AllReduces: alone, beside bulk a, beside a with sched = 0" \
		"(tcp_latency_lane = $LANE, the NICs' queue: ${R2C_TBF_QDISC:-tbf FIFO})"
	for mode in ${TB_LAT_MODES:-alone shared off}; do
		if [ $mode = off ]; then daemons --sched=0; else daemons; fi
		BULK=""
		if [ $mode != alone ]; then
			tenant a 64M $((ITERS * 4)); BULK=$LAST; ((DRY)) || sleep 2
		fi
		tenant lat 256K 2000 "$OUT/lat-$mode.csv"
		((DRY)) || wait "$LAST" || echo "(the latency tenant's run failed)"
		run python3 $SHARES pct "$OUT/lat-$mode.csv" | sed "s/^/$mode: /"
		# the bulk tenant must still have been running: its run ends after
		((DRY)) || [ -z "$BULK" ] || ! kill -0 "$BULK" 2>/dev/null ||
			echo "$mode: bulk tenant a still running at the end (good: it overlapped)"
		wait_tenants
		# what the NICs' queues saw (drops, backlog) and host 0's log
		((DRY)) || {
			for i in $(seq 0 $((H - 1))); do
				echo "# host $i"; $C exec "$i" tc -s qdisc
			done
			echo "# switch"; ip netns exec "${PREFIX}sw" tc -s qdisc
		} >"$OUT/lat-$mode.qdisc" 2>&1
		((DRY)) || cp "/tmp/$PREFIX/h0/r2ccld.log" "$OUT/lat-$mode.h0.log" 2>/dev/null || true
		run $C daemons stop >/dev/null
	done
fi

# set_all SPEC...: `r2cclctl tenants set SPEC` on every host at once; host
# 0's JSON answer (when it sent, when the reply came) appended to
# $OUT/react-cmds.json
set_all() {
	local i
	if ((DRY)); then
		echo "+ (hosts 1-$((H - 1)) at once, in the background) $C exec HOST $CTL --json tenants set $*"
		echo "+ $C exec 0 $CTL --json tenants set $* >>$OUT/react-cmds.json"
	else
		local pids=()
		for i in $(seq 1 $((H - 1))); do
			$C exec "$i" "$CTL" --json tenants set "$@" >/dev/null &
			pids+=("$!")
		done
		$C exec 0 "$CTL" --json tenants set "$@" >>"$OUT/react-cmds.json"
		wait "${pids[@]}"
	fi
}

if [ -z "$ONLY" ] || [ "$ONLY" = react ]; then
	write_conf "" 1 1 2
	# 64 KiB chunks (0.26 ms each at 2 x 1 Gbit/s): the counters move by
	# a chunk, and a share needs many in a few ms
	# shellcheck disable=SC2086
	daemons --chunk-size 64K --sched-quantum 64K $SHARE_ARGS
	echo "## reaction: a and b at 1:1 (64 MB AllReduces, 64 KiB chunks), then on every host" \
		"at once a weight=3, b rate=8K, b rate=0, a second apart; host 0's counters every 1 ms"
	((DRY)) || rm -f "$OUT/react-cmds.json"
	bulk a=1 b=1
	((DRY)) || sleep 3 # past the first iterations: both tenants sending
	if ((DRY)); then
		echo "+ $C exec 0 $CTL --json -f -i 1 -n 5000 tenants >$OUT/react-follow.json &"
	else
		$C exec 0 "$CTL" --json -f -i 1 -n 5000 tenants >"$OUT/react-follow.json" &
		FOLLOW=$!
		sleep 1
	fi
	set_all a weight=3
	((DRY)) || sleep 1
	set_all b rate=8K
	((DRY)) || sleep 1
	set_all b rate=0
	((DRY)) || wait "$FOLLOW" || true
	run python3 $SHARES react "$OUT/react-follow.json" "$OUT/react-cmds.json" a=3 b=1
	wait_tenants
	run $C daemons stop >/dev/null
fi
