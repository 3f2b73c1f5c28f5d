# SPDX-License-Identifier: MIT
# Sourced by the cluster tests (test_*.sh): cluster_lib_init PREFIX_STEM checks
# that the test can run (else exit 77), picks a cluster prefix of its own
# (STEM + pid digits, at most 8 characters; R2C_PREFIX from the environment
# goes first), sets C (cluster.sh), CC
# (cluster_client), DIR (/tmp/PREFIX), and tears the cluster down on exit.

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
C=$HERE/cluster.sh
fails=0

cluster_lib_init() {
	local stem=$1
	[[ $(id -u) == 0 ]] || { echo "SKIP: not root"; exit 77; }
	command -v ip >/dev/null && command -v tc >/dev/null ||
		{ echo "SKIP: iproute2 (ip, tc) missing"; exit 77; }
	# Missing binaries are an error, not a skip (meson builds them first).
	CC=${CLUSTER_CLIENT:-$HERE/../../build/tests/cluster/cluster_client}
	[[ -x $CC ]] || { echo "ERROR: no cluster_client at $CC (set CLUSTER_CLIENT)"; exit 1; }
	[[ -x ${R2CCLD:-$HERE/../../build/daemon/r2ccld} ]] ||
		{ echo "ERROR: no r2ccld at ${R2CCLD:-build/daemon/r2ccld} (set R2CCLD)"; exit 1; }
	# R2C_PREFIX from the environment (up to 4 characters) replaces all but
	# the first letter of the stem: several people's clusters on one machine
	# stay apart and recognisable
	[[ ${R2C_PREFIX:-} =~ ^[a-z][a-z0-9]{0,3}$ ]] && stem=$R2C_PREFIX${stem:0:1}
	local digits=$((8 - ${#stem}))
	R2C_PREFIX=$stem$(($$ % (10 ** digits)))
	export R2C_PREFIX
	DIR=/tmp/$R2C_PREFIX
	ip netns add "${R2C_PREFIX}probe" 2>/dev/null ||
		{ echo "SKIP: cannot create network namespaces"; exit 77; }
	ip netns del "${R2C_PREFIX}probe"
	trap '"$C" down >/dev/null 2>&1' EXIT
	trap 'exit 130' INT TERM
	T_START=$(now)
}

now() { date +%s.%N; }
# elapsed SINCE [UNTIL]: seconds, 2 decimals
elapsed() { awk -v a="$1" -v b="${2:-$(now)}" 'BEGIN { printf "%.2f", b - a }'; }
# lt X Y: true if X < Y (decimals)
lt() { awk -v a="$1" -v b="$2" 'BEGIN { exit !(a < b) }'; }

ok() { echo "ok - $*"; }
fail() { echo "not ok - $*"; fails=$((fails + 1)); }

# Tail of every daemon log (before 'down' removes them).
dump_logs() {
	local f
	for f in "$DIR"/h*/r2ccld.log; do
		[[ -r $f ]] || continue
		echo "# --- tail of $f"
		tail -n "${1:-15}" "$f" | sed 's/^/# /'
	done
}

# No sanitizer report in any daemon log.
check_sanitizer() {
	if grep -lE "Sanitizer|runtime error" "$DIR"/h*/r2ccld.log 2>/dev/null; then
		fail "$1: sanitizer report in a daemon log"
		return 1
	fi
	return 0
}

# warmups_ok WHAT: every daemon of the cluster warmed up each of its H-1
# peers' TCP connections on every rail, one connection at a time (rails.c
# warmup; `cluster.sh warmups` reads the daemons' logs); waits 20 s at most
# for the runs under way to end.
warmups_ok() {
	local what=$1 bad=
	for ((i = 0; i < 40; i++)); do
		if bad=$("$C" warmups); then
			bad=
			break
		fi
		sleep 0.5
	done
	if [[ -n $bad ]]; then
		fail "$what: TCP warm-ups not all done: $(echo "$bad" | paste -sd';')"
		return 1
	fi
	ok "$what: every peer's TCP connection warmed up, one at a time per rail"
}

# daemons_stop_ok WHAT [HOSTS...]: stop the daemons; every listed host (all
# if none listed) must report "exited 0".
daemons_stop_ok() {
	local what=$1 out h bad=0
	shift
	out=$("$C" daemons stop 2>&1)
	if (($#)); then
		for h in "$@"; do
			grep -q "^h$h: r2ccld exited 0\$" <<<"$out" || bad=1
		done
	else
		grep -q "exited [^0]\|SIGKILL\|still running" <<<"$out" && bad=1
		grep -q "exited 0" <<<"$out" || bad=1
	fi
	if ((bad)); then
		fail "$what: daemons did not all exit 0 on SIGTERM"
		sed 's/^/# /' <<<"$out"
		return 1
	fi
	return 0
}

finish() {
	echo "# $(basename "$0"): $fails failure(s), $(elapsed "$T_START") s"
	((fails == 0))
	exit $?
}
