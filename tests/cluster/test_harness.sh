#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
#
# Checks tests/cluster/cluster.sh itself: 3 hosts x 2 rails at 100mbit,
# addresses, caps, reachability of every pair on every rail, link down/up,
# black hole, rate (python3 if present), daemons (R2CCLD if built), run,
# teardown (also on SIGTERM), and that nothing is left behind.
# Exits 77 (skip) when not root or when iproute2 or namespaces are missing.

set -u -o pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
C=$HERE/cluster.sh
export R2C_PREFIX=th$(($$ % 100000))
H=3
R=2

[[ $(id -u) == 0 ]] || { echo "SKIP: not root"; exit 77; }
command -v ip >/dev/null && command -v tc >/dev/null || { echo "SKIP: iproute2 missing"; exit 77; }
ip netns add "${R2C_PREFIX}probe" 2>/dev/null || { echo "SKIP: cannot create network namespaces"; exit 77; }
ip netns del "${R2C_PREFIX}probe"

trap '"$C" down >/dev/null 2>&1' EXIT
trap 'exit 130' INT TERM

fails=0
ok() { echo "ok - $*"; }
fail() { echo "not ok - $*"; fails=$((fails + 1)); }
check() { # check DESCRIPTION CMD...
	local d=$1; shift
	if "$@"; then ok "$d"; else fail "$d"; fi
}

root_links() { ip -o link show | awk -F': ' '{print $2}' | sort; }
ns_left() { ip netns list | awk '{print $1}' | grep -E "^${R2C_PREFIX}(h[0-9]+|sw)\$"; }
nothing_left() {
	[[ -z $(ns_left) ]] || { echo "# namespaces left: $(ns_left | tr '\n' ' ')"; return 1; }
	[[ $(root_links) == "$ROOT_LINKS" ]] || { echo "# root links changed"; return 1; }
	[[ ! -e /tmp/$R2C_PREFIX ]] || { echo "# /tmp/$R2C_PREFIX left"; return 1; }
}

# connect HOST ADDR -> prints refused | unreachable | timeout | connected
probe() {
	local out rc
	out=$("$C" exec "$1" timeout 2 bash -c "exec 3<>/dev/tcp/$2/9" 2>&1)
	rc=$?
	case $out in
	*refused*) echo refused ;;
	*unreachable* | *"No route"*) echo unreachable ;;
	*) if ((rc == 124)); then echo timeout; elif ((rc == 0)); then echo connected; else echo "error($rc)"; fi ;;
	esac
}
# expect_probe WANT HOST ADDR: bounded retries (ARP may need a moment)
expect_probe() {
	local want=$1 got t
	for ((t = 0; t < 3; t++)); do
		got=$(probe "$2" "$3")
		[[ $got == "$want" ]] && return 0
	done
	echo "# h$2 -> $3: $got, wanted $want"
	return 1
}

ROOT_LINKS=$(root_links)

# --- up -------------------------------------------------------------------
check "up ${H}x${R} --rate 100mbit" "$C" up -H $H -R $R --rate 100mbit
check "up again (replaces leftovers)" "$C" up -H $H -R $R --rate 100mbit
check "root namespace links untouched" test "$(root_links)" == "$ROOT_LINKS"

addr_ok=1 cap_ok=1
for ((i = 0; i < H; i++)); do
	ns=${R2C_PREFIX}h$i
	# Every non-loopback address of the host: exactly its rails' 198.18 ones.
	want=$(for ((r = 0; r < R; r++)); do echo "rail$r 198.18.$r.$((i + 1))/24"; done)
	got=$(ip -n "$ns" -o addr show | awk '$2 != "lo" {print $2, $4}' | sort)
	[[ $got == "$want" ]] || { addr_ok=0; echo "# $ns addresses: $got"; }
	for ((r = 0; r < R; r++)); do
		tc -n "$ns" qdisc show dev "rail$r" | grep -q 'tbf .*rate 100Mbit' || cap_ok=0
		tc -n "${R2C_PREFIX}sw" qdisc show dev "h${i}r$r" | grep -q 'tbf .*rate 100Mbit' || cap_ok=0
	done
done
check "addresses 198.18.RAIL.(HOST+1)/24 only, no IPv6" test $addr_ok == 1
check "tbf 100Mbit on both ends of every NIC" test $cap_ok == 1

# --- every pair, every rail -------------------------------------------------
pair_ok=1
for ((r = 0; r < R; r++)); do
	for ((i = 0; i < H; i++)); do
		for ((j = 0; j < H; j++)); do
			((i == j)) && continue
			expect_probe refused "$i" "198.18.$r.$((j + 1))" || { pair_ok=0; continue; }
			# The reply came over rail r from host j's NIC.
			mac=$(ip -n "${R2C_PREFIX}h$j" -o link show dev "rail$r" | grep -o 'link/ether [^ ]*' | cut -d' ' -f2)
			ip -n "${R2C_PREFIX}h$i" neigh show "198.18.$r.$((j + 1))" dev "rail$r" | grep -q "lladdr $mac" ||
				{ pair_ok=0; echo "# h$i rail$r: no neighbour entry for h$j ($mac)"; }
		done
	done
done
check "every host reaches every other host on every rail (TCP RST from the peer)" test $pair_ok == 1

# --- link down / up ---------------------------------------------------------
check "link 1 1 down" "$C" link 1 1 down
check "h1 rail1 down: h1 -> h0 on rail1 unreachable" expect_probe unreachable 1 198.18.1.1
check "h1 rail1 down: h0 -> h1 on rail1 gets no answer" expect_probe timeout 0 198.18.1.2
check "h1 rail1 down: rail0 still works" expect_probe refused 0 198.18.0.2
check "link 1 1 up" "$C" link 1 1 up
check "h1 rail1 up again: h0 -> h1 answered" expect_probe refused 0 198.18.1.2

# --- black hole -------------------------------------------------------------
check "rate 2 0 blackhole" "$C" rate 2 0 blackhole
check "black hole: h0 -> h2 on rail0 gets no answer" expect_probe timeout 0 198.18.0.3
check "black hole: h2 -> h1 on rail0 gets no answer" expect_probe timeout 2 198.18.0.2
check "black hole: h2 rail1 unaffected" expect_probe refused 2 198.18.1.1
check "rate 2 0 100mbit" "$C" rate 2 0 100mbit
check "h0 -> h2 on rail0 answered again" expect_probe refused 0 198.18.0.3

# --- measured rate (python3 comes with meson; optional) ----------------------
# measure RECV_HOST SEND_HOST ADDR BYTES -> MB/s of payload
measure() {
	local port=$((5000 + RANDOM % 1000)) out
	"$C" exec "$1" timeout 30 python3 "$HERE/tcpbench.py" recv "$3" $port --timeout 20 >"/tmp/$R2C_PREFIX/bench.out" 2>&1 &
	local rp=$!
	"$C" exec "$2" timeout 30 python3 "$HERE/tcpbench.py" send "$3" $port "$4" >/dev/null 2>&1
	wait $rp
	out=$(cat "/tmp/$R2C_PREFIX/bench.out")
	echo "${out##* }"
}
in_range() { awk -v v="$1" -v lo="$2" -v hi="$3" 'BEGIN { exit !(v + 0 >= lo && v + 0 <= hi) }'; }
if command -v python3 >/dev/null; then
	# tbf counts Ethernet frames: TCP payload is 1448/1514 of the rate.
	v=$(measure 1 0 198.18.0.2 8M)
	check "100mbit cap: h0 -> h1 $v MB/s (expect ~12)" in_range "$v" 10.5 12.7
	"$C" rate 1 0 20mbit rx
	v=$(measure 1 0 198.18.0.2 2M)
	check "rate 1 0 20mbit rx: h0 -> h1 $v MB/s (expect ~2.4)" in_range "$v" 2.0 2.6
	v=$(measure 0 1 198.18.0.1 8M)
	check "h1 tx still 100mbit: h1 -> h0 $v MB/s (expect ~12)" in_range "$v" 10.5 12.7
else
	echo "ok - # SKIP rate measurement: no python3"
fi

# --- run ----------------------------------------------------------------------
check "run: env in every host" "$C" run --quiet -- bash -c \
	'[ "$R2CCL_NHOSTS" = 3 ] && [ "$R2CCL_SOCKET" = "/tmp/$R2C_PREFIX/h$R2CCL_HOST_INDEX/r2ccld.sock" ] &&
	 ip -o addr show rail0 | grep -q "198.18.0.$((R2CCL_HOST_INDEX + 1))/24"'
check "run: one host failing fails the run" \
	bash -c '! "$1" run --quiet -- bash -c "[ \$R2CCL_HOST_INDEX != 2 ]" >/dev/null' _ "$C"
t0=$SECONDS
check "run: --timeout bounds a hung command" bash -c '! "$1" run --quiet --timeout 2 -- sleep 60 >/dev/null' _ "$C"
check "run: returned within 10 s" test $((SECONDS - t0)) -le 10

# --- daemons ------------------------------------------------------------------
if [[ -n ${R2CCLD:-} && -x ${R2CCLD:-} ]] || [[ -z ${R2CCLD:-} && -x $HERE/../../build/daemon/r2ccld ]]; then
	check "daemons start" "$C" daemons start
	check "a daemon socket per host" "$C" run --quiet -- bash -c 'test -S "$R2CCL_SOCKET"'
	check "daemons see their rails" bash -c \
		'for i in 0 1 2; do grep -q "rail1 .*198.18.1.$((i + 1))" /tmp/$R2C_PREFIX/h$i/r2ccld.log || exit 1; done'
	check "daemons stop: every daemon exits 0" "$C" daemons stop
	"$C" daemons start >/dev/null
	pid=$(cat "/tmp/$R2C_PREFIX/h1/r2ccld.pid")
	kill -KILL "$pid"
	check "daemons stop reports a killed daemon" bash -c '! "$1" daemons stop >/dev/null' _ "$C"
	"$C" daemons start >/dev/null # left running: down must end them
else
	echo "ok - # SKIP daemons: no r2ccld (set R2CCLD)"
fi

# --- down ---------------------------------------------------------------------
"$C" exec 0 sleep 300 >/dev/null 2>&1 &
sleeper=$!
check "down" "$C" down
wait $sleeper 2>/dev/null
check "nothing left after down" nothing_left
check "down again is a no-op" "$C" down

# --- teardown when a test is interrupted ---------------------------------------
# (The long wait runs inside a host namespace, so that down ends it too.)
bash -c 'trap "\"$1\" down >/dev/null 2>&1" EXIT; trap "exit 143" TERM
	"$1" up -H 2 -R 2 --rate 1gbit >/dev/null || exit 1
	touch "/tmp/$R2C_PREFIX.ready"; "$1" exec 0 sleep 300 & wait $!' _ "$C" </dev/null >/dev/null 2>&1 &
child=$!
for ((t = 0; t < 100; t++)); do [[ -e /tmp/$R2C_PREFIX.ready ]] && break; sleep 0.1; done
check "interrupted test: cluster came up" test -n "$(ns_left)"
kill -TERM $child
wait $child 2>/dev/null
rm -f "/tmp/$R2C_PREFIX.ready"
check "interrupted test: trap tore everything down" nothing_left

echo "# $fails failure(s)"
((fails == 0))
