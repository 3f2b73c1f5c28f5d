#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
#
# Bootstrap failures end in clear errors on every rank, within a bounded time.
# One cluster of 4 hosts x 2 rails, daemons with --bootstrap-timeout-ms 3000:
#  (b) a host that never joins: hosts 0-2 start their ranks (2 each) of a
#      4-host communicator: every started rank gets R2CCL_E_BOOTSTRAP (-4008)
#      within BOOT_BOUND (6 s) of its start;
#  (c) a rank given twice: hosts 0 and 1 both claim rank 0 of 2, host 2 rank 1:
#      every rank gets R2CCL_E_DUP_RANK (-4009) or R2CCL_E_BOOTSTRAP, bounded;
#  (d) ranks of two hosts that ask for different modes: R2CCL_E_MISMATCH;
#  (a) a wrong unique id: (a1) random bytes; (a2) an id from an earlier run
#      whose root daemon is gone (the daemons are restarted): every rank gets
#      an r2ccl error, bounded;
# then every op on a 4-host communicator still works (the daemons still
# serve), and every daemon exits 0 on SIGTERM.
# Exits 77 when not root or without iproute2.

set -u -o pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
cluster_lib_init cbot

H=4 R=2
BOOT_MS=3000
BOOT_BOUND=${BOOT_BOUND:-6}  # per rank, from its start
WALL_BOUND=${WALL_BOUND:-10} # the whole run of a case
DAEMON_ARGS=(--bootstrap-timeout-ms $BOOT_MS --op-timeout-ms 10000)

"$C" up -H $H -R $R >/dev/null || { fail "cluster up"; finish; }
"$C" daemons start "${DAEMON_ARGS[@]}" >/dev/null || { fail "daemons start"; dump_logs; finish; }

# run_case NAME HOSTS SCRIPT [ARGS...]: runs `sh -c SCRIPT CC ARGS...` on HOSTS
# (comma list); sets CASE_WALL (seconds).
run_case() {
	local name=$1 hosts=$2 script=$3 t0
	shift 3
	t0=$(now)
	"$C" run --quiet --hosts "$hosts" --timeout 40 -- sh -c "$script" "$CC" "$@" \
		>"$DIR/case.log" 2>&1
	CASE_WALL=$(elapsed "$t0")
	echo "# ($name) run took $CASE_WALL s"
	lt "$CASE_WALL" "$WALL_BOUND" || fail "($name) the run took $CASE_WALL s (bound $WALL_BOUND s)"
}

# expect_err NAME HOST RANK CODE_REGEX: host HOST's output shows rank RANK
# failing with an r2ccl error whose code matches CODE_REGEX, within BOOT_BOUND.
expect_err() {
	local name=$1 h=$2 r=$3 re=$4 log=$DIR/h$2/out.log line code after
	line=$(grep -m1 "cluster_client: rank $r: error " "$log")
	if [[ -z $line ]]; then
		fail "($name) rank $r on h$h: no r2ccl error"
		sed 's/^/# /' "$log" | tail -n 8
		return
	fi
	code=$(sed -n 's/.*: error \(-[0-9]*\) .*/\1/p' <<<"$line")
	after=$(grep -m1 -o "rank $r of [0-9]*): .* after [0-9.]* s" "$log" | grep -o 'after [0-9.]*' | cut -d' ' -f2)
	local msg
	msg=$(sed 's/.*: error \(.*\) epoch=.*/\1/' <<<"$line")
	if [[ ! $code =~ ^($re)$ ]]; then
		fail "($name) rank $r on h$h: error $msg, expected code $re"
	elif [[ -n $after ]] && ! lt "$after" "$BOOT_BOUND"; then
		fail "($name) rank $r on h$h: error $msg only after $after s (bound $BOOT_BOUND s)"
	else
		ok "($name) rank $r on h$h: error $msg${after:+ after $after s}"
	fi
	grep -q "cluster_client: PASS" "$log" && fail "($name) h$h: a rank passed"
}

# (a2, first part) host 0 alone makes an id for 2 ranks: its rank 0 fails
# (the other never joins); the id is kept for later, when its root is gone.
run_case "lone root" 0 'exec "$0" --nranks 2 --local-ranks 1 --uid-file "$1" --timeout 30' \
	"$DIR/uid-stale"
expect_err "host never joins, 1 of 2" 0 0 -4008
[[ -s $DIR/uid-stale ]] && cp "$DIR/uid-stale" "$DIR/stale.id"

# (b) host 3 never joins.
run_case "b: host never joins" 0,1,2 'exec "$0" --local-ranks 2 --uid-file "$1" --timeout 30' \
	"$DIR/uid-b-$RANDOM"
for h in 0 1 2; do
	for r in $((2 * h)) $((2 * h + 1)); do
		expect_err "b: host never joins" $h $r -4008
	done
done

# (c) rank 0 given twice (hosts 0 and 1), host 2 holds rank 1 of 2.
run_case "c: rank given twice" 0,1,2 'case $R2CCL_HOST_INDEX in
	0) exec "$0" --nranks 2 --first-rank 0 --uid-file "$1" --timeout 30 ;;
	1) exec "$0" --nranks 2 --first-rank 0 --uid-read-only --uid-file "$1" --timeout 30 ;;
	*) exec "$0" --nranks 2 --first-rank 1 --uid-file "$1" --timeout 30 ;;
	esac' "$DIR/uid-c-$RANDOM"
expect_err "c: rank given twice" 0 0 "-4009|-4008"
expect_err "c: rank given twice" 1 0 "-4009|-4008"
expect_err "c: rank given twice" 2 1 "-4009|-4008"

# (d) the hosts ask for different modes (host 1's ranks: R2CCL_MODE=hotrepair,
# host 0's: the daemons' default, balance): every rank gets R2CCL_E_MISMATCH.
run_case "d: modes differ" 0,1 '[ "$R2CCL_HOST_INDEX" = 1 ] && export R2CCL_MODE=hotrepair
	exec "$0" --nranks 4 --local-ranks 2 --uid-file "$1" --timeout 30' "$DIR/uid-d-$RANDOM"
for h in 0 1; do
	for r in $((2 * h)) $((2 * h + 1)); do
		expect_err "d: modes differ" $h $r -4004
	done
done

# (a1) an id of random bytes, read by every host.
od -An -tx1 -N128 /dev/urandom | tr -d ' \n' >"$DIR/garbage.id"
echo >>"$DIR/garbage.id"
run_case "a1: random uid" 0,1,2,3 'exec "$0" --uid-read-only --uid-file "$1" --timeout 30' \
	"$DIR/garbage.id"
for h in 0 1 2 3; do expect_err "a1: random uid" $h $h "-[0-9]+"; done

# (a2) the id of the lone root above, after the daemons were restarted.
daemons_stop_ok "daemons after the bootstrap failures" || dump_logs
"$C" daemons start "${DAEMON_ARGS[@]}" >/dev/null || { fail "daemons restart"; dump_logs; finish; }
if [[ -s $DIR/stale.id ]]; then
	run_case "a2: uid of a gone root" 0,1 'exec "$0" --nranks 2 --uid-read-only --uid-file "$1" --timeout 30' \
		"$DIR/stale.id"
	for h in 0 1; do expect_err "a2: uid of a gone root" $h $h "-[0-9]+"; done
else
	fail "(a2) no id from the lone root run"
fi

# The daemons still serve: every op on all 4 hosts (small sizes).
t0=$(now)
out=$("$C" run --timeout 120 -- "$CC" --uid-file "$DIR/uid-ok-$RANDOM" --max-bytes 64K --timeout 110 2>&1)
rc=$?
if ((rc == 0)) && (($(grep -c "cluster_client: PASS" <<<"$out") == H)); then
	ok "afterwards, a 4-host communicator runs every op exactly ($(elapsed "$t0") s)"
else
	fail "afterwards, a 4-host communicator failed (run exit $rc)"
	grep -E "FAIL|error|failed|timed out|killed" <<<"$out" | head -n 20 | sed 's/^/# /'
	dump_logs
fi
check_sanitizer "bootstrap"
daemons_stop_ok "daemons at the end" || dump_logs
"$C" down >/dev/null || fail "down"
finish
