#!/bin/bash
# Issue-23 benchmark: does an attack on the daemons move a victim job's
# latency? 3 namespace hosts x 2 rails (tests/cluster/cluster.sh), r2ccld on
# hosts 0 and 1 with the cluster's key. The victim is root's 2-host AllReduce
# loop (r2ccl-bench, one rank per host, SIZE bytes, ITERS timed iterations,
# host 0's per-iteration times from --trace). Rounds alternate, ROUNDS times:
#   quiet     the victim alone;
#   attacked  the victim while
#     - on hosts 0 and 1, a local user without privileges (uid 65534,
#       tests/cluster/local_attack.py mix) opens pre-hello connections, sends
#       malformed frames, opens control sessions up to its cap and floods
#       status / unique-id requests, at RATE actions a second per host;
#     - host 2, on both rails' networks without the key
#       (tests/cluster/peerauth_attack.py), sends forged hellos claiming the
#       live peer's id (2.5 a second at each daemon), floods each peer port
#       with 64 pre-hello connections every 4 s and 100 hellos of fake ids
#       every 2 s.
#   The attackers start 1 s before the victim and stop by themselves (their
#   duration: the first quiet round's time plus 10 s).
# As on a cluster's host, where each job and each system service has a
# cgroup of its own, the daemons, the victim and the attackers run in three
# CPU cgroups of equal weight (cgroup v2's cpu controller where it is
# enabled, else v1's cpu hierarchy): the attackers' own CPU cannot take
# more than its share, so what moves the victim is the daemons' work for
# the attacks. --no-cgroups runs all three in the caller's cgroup (then the
# attackers' CPU competes with everything on a small machine).
# --only local|peer: one attacker kind alone.
# Prints p50 / p99 per round, then pooled over the quiet and the attacked
# rounds, the p99's change and the quiet rounds' own spread; every
# attacker's counts; host 0's daemon fds, threads and RSS after each round.
# A failed victim operation fails the run (exit 1).
# Usage: tools/bench/adversary-bench.sh [-b SIZE] [-n ITERS] [-k ROUNDS]
#        [--rate N] [--link RATE] [--only local|peer] [--no-cgroups]
# Environment: BUILD (default build-test; BENCH_BIN: a folder with r2ccld and
# r2ccl-bench instead, as bundle/gpu/bin on the GPU machine), R2C_PREFIX
# (default r2adv). Root.
set -euo pipefail
cd "$(dirname "$0")/../.."
SIZE=4K ITERS=5000 ROUNDS=3 ARATE=100 LINK="" ONLY="" CG=1
while [ $# -gt 0 ]; do
	case $1 in
	-b) SIZE=$2; shift 2 ;;
	-n) ITERS=$2; shift 2 ;;
	-k) ROUNDS=$2; shift 2 ;;
	--rate) ARATE=$2; shift 2 ;;
	--link) LINK=$2; shift 2 ;;
	--only) ONLY=$2; shift 2 ;;
	--no-cgroups) CG=0; shift ;;
	*) echo "unknown option $1" >&2; exit 2 ;;
	esac
done
[ "$(id -u)" = 0 ] || { echo "root only (namespaces, uids)" >&2; exit 2; }
BUILD=${BUILD:-build-test}
PREFIX=${R2C_PREFIX:-r2adv}
C="tests/cluster/cluster.sh --prefix $PREFIX"
DIR=/tmp/$PREFIX
if [ -n "${BENCH_BIN:-}" ]; then
	BENCH=$BENCH_BIN/r2ccl-bench R2CCLD=$BENCH_BIN/r2ccld
else
	BENCH=$PWD/$BUILD/tools/r2ccl-bench R2CCLD=$PWD/$BUILD/daemon/r2ccld
fi
export R2CCLD
LATK=$PWD/tests/cluster/local_attack.py
PATK=$PWD/tests/cluster/peerauth_attack.py
PCT=$PWD/tools/bench/tenant-shares.py
PORT=47200
OUT=$(mktemp -d /tmp/r2adv-bench.XXXXXX)
chmod 755 "$OUT"
# the unprivileged attacker reads its script from here (the checkout may
# be in a folder that uid 65534 cannot enter, as /root on the GPU machine)
cp "$LATK" "$OUT/local_attack.py" && chmod 644 "$OUT/local_attack.py" && LATK=$OUT/local_attack.py
# CPU cgroups: CGD/{daemons,victim,attackers}
CGD=""
if ((CG)); then
	v2=$(awk '{ for (i = 1; i <= NF; i++) if ($i == "-") { if ($(i + 1) == "cgroup2") print $5; break } }' \
		/proc/self/mountinfo | head -n 1)
	if [ -n "$v2" ] && grep -qw cpu "$v2/cgroup.controllers" 2>/dev/null; then
		CGD=$v2/r2adv-$$
		mkdir "$CGD"
		echo +cpu >"$CGD/cgroup.subtree_control"
	elif [ -d /sys/fs/cgroup/cpu ] && [ -f /sys/fs/cgroup/cpu/cpu.shares ]; then
		CGD=/sys/fs/cgroup/cpu/r2adv-$$
		mkdir "$CGD"
	else
		echo "no CPU cgroup controller: run with --no-cgroups" >&2
		exit 2
	fi
	mkdir "$CGD/daemons" "$CGD/victim" "$CGD/attackers"
fi
# in_cg NAME CMD...: CMD in cgroup NAME (its children inherit it)
in_cg() {
	local g=$1
	shift
	if [ -n "$CGD" ]; then
		( echo "$BASHPID" >"$CGD/$g/cgroup.procs" && exec "$@" )
	else
		"$@"
	fi
}
cleanup() {
	$C down >/dev/null 2>&1 || true
	if [ -n "$CGD" ]; then
		rmdir "$CGD"/daemons "$CGD"/victim "$CGD"/attackers "$CGD" 2>/dev/null || true
	fi
}
trap cleanup EXIT

$C up -H 3 -R 2 ${LINK:+--rate $LINK} >/dev/null
in_cg daemons $C daemons start --hosts 0,1 --port $PORT >/dev/null
chmod 755 "$DIR" "$DIR"/h0 "$DIR"/h1
echo "# $(date -u +%F) adversary: victim = root's AllReduce of $SIZE on hosts 0,1 (one rank each)," \
	"$ITERS iterations a round, $ROUNDS quiet + $ROUNDS attacked rounds alternated;" \
	"local attackers at $ARATE actions/s per host; attacks: ${ONLY:-local and peer};" \
	"links ${LINK:-uncapped}; CPU cgroups: ${CGD:-none}; $(nproc) cores;" \
	"$(git rev-parse --short HEAD 2>/dev/null || echo '?')"

NRUN=0
# victim TRACE: one run of the victim; non-zero when an operation failed
victim() {
	NRUN=$((NRUN + 1))
	in_cg victim $C run --hosts 0,1 --timeout 600 --quiet -- sh -c "exec $BENCH allreduce -b $SIZE -e $SIZE \
-n $ITERS -w 50 -c 1 --nranks 2 --first-rank \$R2CCL_HOST_INDEX --local-ranks 1 \
--uid-file \$R2CCL_CLUSTER_DIR/uid-$NRUN --trace $1 \
>\$R2CCL_CLUSTER_DIR/h\$R2CCL_HOST_INDEX/victim.out 2>&1" >/dev/null
}

daemon_res() {
	local p
	p=$(<"$DIR/h0/r2ccld.pid")
	printf 'h0 r2ccld: %s fds, %s threads, RSS %s KiB\n' \
		"$(find /proc/"$p"/fd -mindepth 1 -maxdepth 1 | wc -l)" \
		"$(awk '/^Threads/ {print $2}' /proc/"$p"/status)" \
		"$(awk '/^VmRSS/ {print $2}' /proc/"$p"/status)"
}

# attack SECONDS R: every attacker, in the background, for SECONDS; their
# output in $OUT/atk-R-*.log
APIDS=()
attack() {
	local s=$1 r=$2 h
	: >"$OUT/atk-$r-flood.log"
	: >"$OUT/atk-$r-fakes.log"
	for h in 0 1; do
		[ "$ONLY" = peer ] && break
		in_cg attackers $C exec $h setpriv --reuid 65534 --regid 65534 --clear-groups \
			/usr/bin/python3 "$LATK" mix "$DIR/h$h/r2ccld.sock" "$s" --rate "$ARATE" \
			>"$OUT/atk-$r-local$h.log" 2>&1 &
		APIDS+=($!)
	done
	[ "$ONLY" = local ] && return 0
	in_cg attackers $C exec 2 python3 "$PATK" hellos 198.18.0.1 $PORT "$ID1" "$ID0" 2.5 "$s" \
		>"$OUT/atk-$r-hellos0.log" 2>&1 &
	APIDS+=($!)
	in_cg attackers $C exec 2 python3 "$PATK" hellos 198.18.1.2 $PORT "$ID0" "$ID1" 2.5 "$s" \
		>"$OUT/atk-$r-hellos1.log" 2>&1 &
	APIDS+=($!)
	in_cg attackers bash -c "$(declare -p C PATK PORT ID0 ID1 OUT); s=$s r=$r; $(declare -f peer_floods); peer_floods" &
	APIDS+=($!)
}
# the pre-hello floods and fake ids of host 2, alternating daemons, for $s
peer_floods() {
	(
		end=$((SECONDS + s)) k=0
		while ((SECONDS + 4 <= end)); do
			a=198.18.$((k % 2)).$((k % 2 + 1)) # h0 on rail 0, h1 on rail 1
			$C exec 2 python3 "$PATK" flood "$a" $PORT 64 3 >>"$OUT/atk-$r-flood.log" 2>&1 &
			$C exec 2 python3 "$PATK" fakes "$a" $PORT "$([ $((k % 2)) = 0 ] && echo "$ID0" || echo "$ID1")" 100 \
				>>"$OUT/atk-$r-fakes.log" 2>&1
			sleep 2
			k=$((k + 1))
			wait
		done
	)
}
attack_wait() {
	local p
	for p in "${APIDS[@]}"; do wait "$p" || true; done
	APIDS=()
}

# the warm-up round: connects the daemons, gives the peer ids and the time
t0=$(date +%s.%N)
victim "$OUT/warm.csv" || { echo "the victim's warm-up run failed"; exit 1; }
DUR=$(awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN { printf "%d", b - a + 0.999 }')
ID1=$(grep -m1 -o "connected to peer [0-9a-f]*" "$DIR/h0/r2ccld.log" | awk '{print $4}')
ID0=$(grep -m1 -o "connected to peer [0-9a-f]*" "$DIR/h1/r2ccld.log" | awk '{print $4}')
[ -n "$ID0" ] && [ -n "$ID1" ] || { echo "no peer ids in the daemons' logs"; exit 1; }
echo "# a round takes about $DUR s; daemon ids h0 $ID0, h1 $ID1"

failed=0
for ((r = 1; r <= ROUNDS; r++)); do
	victim "$OUT/quiet-$r.csv" || { echo "quiet round $r: the victim failed"; failed=1; }
	echo "quiet $r: $(python3 "$PCT" pct "$OUT/quiet-$r.csv"); $(daemon_res)"
	attack $((DUR + 10)) "$r"
	sleep 1
	victim "$OUT/attacked-$r.csv" || { echo "attacked round $r: the victim failed"; failed=1; }
	echo "attacked $r: $(python3 "$PCT" pct "$OUT/attacked-$r.csv"); $(daemon_res)"
	attack_wait
	cat "$OUT"/atk-"$r"-local*.log 2>/dev/null | sed "s/^/  round $r: /"
	for f in "$OUT"/atk-"$r"-hellos*.log; do
		[ -f "$f" ] && sed "s/^/  round $r: forged hellos: /" "$f"
	done
	awk '/^opened/ {o += $2; e += $4; h += $6} END {printf "  round %d: pre-hello floods: %d opened, %d closed at once, %d held until the deadline\n", r, o, e, h}' \
		r="$r" "$OUT/atk-$r-flood.log"
	awk '/^fakes/ {n += $2; a += $4; c += $6} END {printf "  round %d: fake ids: %d sent, %d answered, %d closed\n", r, n, a, c}' \
		r="$r" "$OUT/atk-$r-fakes.log"
done
q=() a=()
for ((r = 1; r <= ROUNDS; r++)); do q+=("$OUT/quiet-$r.csv"); a+=("$OUT/attacked-$r.csv"); done
python3 - "$PCT" "$ROUNDS" "${q[@]}" "${a[@]}" <<'PY'
import importlib.util, sys
spec = importlib.util.spec_from_file_location("ts", sys.argv[1])
ts = importlib.util.module_from_spec(spec)
spec.loader.exec_module(ts)
k = int(sys.argv[2])
quiet, att = sys.argv[3:3 + k], sys.argv[3 + k:]
def p(files, q):
    return ts.percentile(ts.trace_times(files), q)
q50, q99, a50, a99 = p(quiet, 50), p(quiet, 99), p(att, 50), p(att, 99)
per = [p([f], 99) for f in quiet]
print("pooled quiet: p50 %.0f us p99 %.0f us; attacked: p50 %.0f us p99 %.0f us" % (q50, q99, a50, a99))
print("p99 moved %+.1f%% (target: less than 10%%); p50 moved %+.1f%%; quiet rounds' p99 %.0f-%.0f us"
      % (100.0 * (a99 - q99) / q99, 100.0 * (a50 - q50) / q50, min(per), max(per)))
PY
sed 's/^/victim h0: /' "$DIR/h0/victim.out" | grep -E "wrong|error|FAIL" || true
$C daemons stop >/dev/null || { echo "a daemon did not stop cleanly"; failed=1; }
rm -rf "$OUT"
exit $failed
