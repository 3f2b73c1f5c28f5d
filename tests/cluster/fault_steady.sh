#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
#
# Steady state under faults, by hand (docs/resilience.md "Measured"): on
# STEADY_HOSTS (default 4) x 2 rails capped at STEADY_RATE (1gbit), the time
# of an AllReduce of STEADY_SIZE (64M, every element checked) over
# STEADY_ITERS iterations (10, out-of-place and in-place), in turn:
#   healthy      every NIC up
#   nicdown      host 1's rail 0 down (re-planned: failure-optimized shares)
#   throttled    host 1's rail 0 capped at 25% (throughput monitor, re-planned)
#   restored     the cap lifted, once host 1's rail 0 is healthy again and no
#                daemon holds a slow path (warm loops meanwhile)
#   norebalance  capped at 25% again, daemons with --degraded-pct 0 (no monitor)
# (STEADY_PHASES="nicdown throttled": only those after healthy;
# STEADY_REPEAT=N: N cycles, medians at the end)
# each with the planner's prediction and bound for that cluster (r2ccl-sim,
# NICs at the tbf's TCP payload rate). Figures to stdout and $FAULT_REPORT.
# Root; takes about 5 minutes at the defaults. Measure under
# `flock /tmp/r2-bench.lock` when other benchmarks may run.

set -u -o pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
cluster_lib_init fst

H=${STEADY_HOSTS:-4}
RATE=${STEADY_RATE:-1gbit}
SIZE=${STEADY_SIZE:-64M}
ITERS=${STEADY_ITERS:-10}
BENCH=${R2CCL_BENCH:-$HERE/../../build/tools/r2ccl-bench}
CTL=${R2CCLCTL:-$HERE/../../build/tools/r2cclctl}
SIM=${R2CCL_SIM:-$(dirname "$BENCH")/r2ccl-sim}
REPORT=${FAULT_REPORT:-/dev/null}
[[ -x $BENCH && -x $SIM ]] || { echo "SKIP: r2ccl-bench / r2ccl-sim not built"; exit 77; }

bytes() { numfmt --from=iec "$1"; }
S=$(bytes "$SIZE")
# TCP payload through a tbf of RATE (1448 of 1514 bytes a frame), bytes/s
PAYLOAD=$(awk -v r="$RATE" 'BEGIN { match(r, /^[0-9.]+/); n = substr(r, 1, RLENGTH)
	u = substr(r, RLENGTH + 1); k = (u == "gbit") ? 1e9 : (u == "mbit") ? 1e6 : 1e3
	printf "%d", n * k / 8 * 1448 / 1514 }')
QUARTER=$(awk -v r="$RATE" 'BEGIN { match(r, /^[0-9.]+/); n = substr(r, 1, RLENGTH)
	u = substr(r, RLENGTH + 1); k = (u == "gbit") ? 1e6 : (u == "mbit") ? 1e3 : 1
	printf "%dkbit", n * k / 4 }')

say() { echo "# $*"; echo "$*" >>"$REPORT"; }

# planner NAME [nic lines]: "predicted_ms bound_ms" of the ours policy
planner() {
	local f w
	f=$(mktemp) w=$(mktemp)
	{ echo "hosts $H"; echo "rails 2"; echo "bw $PAYLOAD"; echo "alpha ${STEADY_ALPHA:-0.0002}"
	  for l in "$@"; do echo "$l"; done; } >"$f"
	echo "op allreduce $S" >"$w"
	"$SIM" --policy ours "$f" "$w" | awk '$4 == "ours" { printf "%.1f %.1f\n", $6 / 1000, $6 / $9 / 1000 }'
	rm -f "$f" "$w"
}

# bench NAME ITERS: rank 0's mean iteration time (ms) over both passes;
# non-zero unless every host is ok and exact
bench() {
	local name=$1 n=$2 t h
	"$C" run --timeout 600 -- sh -c "exec $BENCH allreduce -b $S -e $S -n $n -w 2 \
		--nranks \$R2CCL_NHOSTS --first-rank \$R2CCL_HOST_INDEX --uid-file $DIR/uid-$name-$RANDOM" \
		>"$DIR/bench-$name.out" 2>&1
	if (($?)) || ! grep -q "Out of bounds values : 0 OK" "$DIR/h0/out.log"; then
		tail -n 12 "$DIR/bench-$name.out" | sed 's/^/# /' >&2
		# the daemons' logs and events, for the post-mortem
		local keep=${STEADY_KEEP:-/tmp/fault-steady-$name.$$}
		mkdir -p "$keep"
		for h in $(seq 0 $((H - 1))); do
			cp "$DIR/h$h/r2ccld.log" "$keep/h$h.log" 2>/dev/null
			"$CTL" --socket "$DIR/h$h/r2ccld.sock" events >"$keep/h$h.events" 2>&1
		done
		echo "# logs kept in $keep" >&2
		return 1
	fi
	t=$(awk '$1 == '"$S"' { printf "%.1f", ($6 + $10) / 2 / 1000 }' "$DIR/h0/out.log")
	# STEADY_EVENTS=DIR: every host's events and peers after each loop
	if [[ -n ${STEADY_EVENTS:-} ]]; then
		mkdir -p "$STEADY_EVENTS"
		local e=$STEADY_EVENTS/$name${cyc:+.c$cyc} # one set per cycle
		for h in $(seq 0 $((H - 1))); do
			"$CTL" --socket "$DIR/h$h/r2ccld.sock" events >"$e.h$h.events" 2>&1
			"$CTL" --socket "$DIR/h$h/r2ccld.sock" peers >"$e.h$h.peers" 2>&1
		done
		cp "$DIR/h0/out.log" "$e.h0.out"
	fi
	echo "$t"
}

busbw() { awk -v t="$1" -v s="$S" -v n="$H" 'BEGIN { printf "%.3f", (t > 0 ? 2 * (n - 1) / n * s / (t / 1000) / 1e9 : 0) }'; }

row() { # NAME TIME_MS PREDICTED BOUND
	say "steady $1: hosts $H rails 2 rate $RATE size $SIZE: time_ms $2 busbw_GBs $(busbw "$2") planner_ms $3 bound_ms $4 busbw_vs_bound $(awk -v t="$2" -v b="$4" 'BEGIN { printf "%.2f", (t > 0 ? b / t : 0) }')"
}

# wait_state HOST RAIL STATE SECONDS (a loop runs meanwhile in the background)
wait_state() {
	local i
	for ((i = 0; i < $4 * 10; i++)); do
		"$CTL" --socket "$DIR/h$1/r2ccld.sock" rails 2>/dev/null |
			awk -v n="rail$2" -v s="$3" '$1 == n && $2 == s { f = 1 } END { exit !f }' && return 0
		sleep 0.1
	done
	return 1
}

# all_clean: no daemon shows a degraded rail or path
all_clean() {
	local h
	for h in $(seq 0 $((H - 1))); do
		"$CTL" --socket "$DIR/h$h/r2ccld.sock" peers 2>/dev/null | awk '$4 == "degraded" { f = 1 } END { exit f }' || return 1
		"$CTL" --socket "$DIR/h$h/r2ccld.sock" rails 2>/dev/null | awk '$2 == "degraded" { f = 1 } END { exit f }' || return 1
	done
}

# STEADY_DAEMON_ARGS: more r2ccld options for every phase (e.g. --cost-alpha-us 500)
# shellcheck disable=SC2086
start() { "$C" daemons start ${STEADY_DAEMON_ARGS:-} "$@" >/dev/null || { fail "daemons start"; dump_logs; finish; }; }

"$C" up -H "$H" -R 2 --rate "$RATE" >/dev/null || { fail "cluster up"; finish; }
start

# STEADY_PHASES: the phases to run (default all; healthy always runs)
PHASES=" ${STEADY_PHASES:-nicdown throttled restored norebalance} "
want() { [[ $PHASES == *" $1 "* ]]; }
# STEADY_REPEAT: cycles of healthy, nicdown, throttled, restored on the same
# daemons (each cycle one injection of each fault, its own healthy time as
# the reference); norebalance once at the end. The summary gives each
# ratio's median, min and max over the cycles.
REPEAT=${STEADY_REPEAT:-1}
# STEADY_REST seconds of idle before each measured loop (warm loops do not
# rest). This 2-core VM slows down by 5-15% within 10-30 s of sustained load
# and is back to full speed after 5-10 s of idle (docs/resilience.md): every
# measured loop, the healthy reference included, starts rested.
REST=${STEADY_REST:-5}
rest() { sleep "$REST"; }
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.2f", (b > 0 ? a / b : 0) }'; }
r_d="" r_t="" r_r="" t_t=0 b_t=0
for ((cyc = 1; cyc <= REPEAT; cyc++)); do
	((REPEAT > 1)) && say "steady cycle $cyc of $REPEAT"
	t_d=0 t_r=0
	read -r p b < <(planner)
	rest
	t_h=$(bench healthy "$ITERS") && row healthy "$t_h" "$p" "$b" || fail "healthy: the loop failed"

	if want nicdown; then
		"$C" link 1 0 down >/dev/null
		read -r p b < <(planner "nic 1 0 down")
		bench nicdown-warm 2 >/dev/null || fail "nicdown: the warm-up loop failed"
		rest
		t_d=$(bench nicdown "$ITERS") && row nicdown "$t_d" "$p" "$b" || fail "nicdown: the loop failed"
		r_d+=" $(ratio "$t_d" "$t_h")"
		"$C" link 1 0 up >/dev/null
		wait_state 1 0 healthy 30 || fail "host 1's rail0 not healthy 30 s after link up"
	fi

	if want throttled || want restored; then
		"$C" rate 1 0 "$QUARTER" >/dev/null
		read -r p b < <(planner "nic 1 0 bw $((PAYLOAD / 4))")
		bench throttled-warm 4 >/dev/null
		if "$CTL" --socket "$DIR/h0/r2ccld.sock" events 2>/dev/null | grep -q "replan.*host 1 rail 0 degraded"; then
			ok "throttled: re-planned with host 1's rail 0 degraded"
		else
			fail "throttled: no view with host 1's rail 0 degraded"
			"$CTL" --socket "$DIR/h0/r2ccld.sock" events 2>&1 | tail -n 8 | sed 's/^/# /'
		fi
		rest
		t_t=$(bench throttled "$ITERS") && row throttled "$t_t" "$p" "$b" || fail "throttled: the loop failed"
		b_t=$b
		r_t+=" $(ratio "$b_t" "$t_t")"

		# Restored: warm loops until host 1's rail 0 is healthy and no daemon
		# holds a slow path any more (a slow report still held when the next
		# communicator starts plans it degraded), at most 8 loops.
		"$C" rate 1 0 "$RATE" >/dev/null
		for ((i = 0; i < 8; i++)); do
			bench restored-warm "$ITERS" >/dev/null
			wait_state 1 0 healthy 1 && all_clean && break
		done
		((i < 8)) && ok "restored: host 1's rail0 healthy again and no slow path left ($((i + 1)) warm loops)" ||
			fail "restored: host 1's rail0 not healthy or a slow path left after 8 warm loops"
		read -r p b < <(planner)
		rest
		t_r=$(bench restored "$ITERS") && row restored "$t_r" "$p" "$b" || fail "restored: the loop failed"
		r_r+=" $(ratio "$t_h" "$t_r")"
	fi
	say "steady ratios: nicdown/healthy time $(ratio "$t_d" "$t_h") (target <= 1.4); throttled busbw / bound $(ratio "$b_t" "$t_t") (target >= 0.85); restored busbw / healthy $(ratio "$t_h" "$t_r") (target >= 0.95)"
done

t_n=0
if want norebalance; then
	"$C" daemons stop >/dev/null
	start --degraded-pct 0
	"$C" rate 1 0 "$QUARTER" >/dev/null
	read -r p b < <(planner "nic 1 0 bw $((PAYLOAD / 4))")
	bench norebalance-warm 1 >/dev/null
	rest
	t_n=$(bench norebalance "$ITERS") && row norebalance "$t_n" "$p" "$b" || fail "norebalance: the loop failed"
	say "steady norebalance: throttled busbw (last cycle) / without rebalancing $(ratio "$t_n" "$t_t")"
fi

# stats NAME "r1 r2 ...": median, min, max and count of the ratios
stats() {
	[[ -n $2 ]] || return 0
	say "steady summary $1: $(printf '%s\n' $2 | sort -n | awk '{ v[NR] = $1 } END {
		m = (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2
		printf "median %.2f min %.2f max %.2f over %d", m, v[1], v[NR], NR }')"
}
stats "nicdown/healthy time (target <= 1.4)" "$r_d"
stats "throttled busbw / bound (target >= 0.85)" "$r_t"
stats "restored busbw / healthy (target >= 0.95)" "$r_r"
daemons_stop_ok steady || dump_logs
"$C" down >/dev/null
finish
