#!/bin/bash
# Runs inside each soft-RoCE guest (guest.sh modes cluster and mixed): r2ccld
# on both rails, the cluster client against it, the two guests one host each.
#   cluster: rails rxe0 and rxe1: both rails verbs
#   mixed:   rxe1 removed first: rail 0 verbs, rail 1 tcp (on both guests)
#   mismatch: rxe1 removed in guest b only: rail 1 is verbs on a, tcp on b
#            (a misconfiguration): a says so at once in its log, and a
#            communicator still runs exact on rail 0; nothing else
# The rail failed in phase 3 (F) is rail 1 in cluster (verbs to verbs
# failover), rail 0 in mixed (the verbs rail: its traffic goes on tcp); the
# mailbox uses the other rail.
# Phases (each guest checks its own side; the test passes when both exit 0):
#   1. the daemon reports the provider of each rail (log, r2cclctl rails,
#      status --json);
#   2. every collective at small sizes, exact (cluster_client), with 1 and
#      then 2 local ranks per guest;
#   3. a loop of allreduces; guest a sets rail F down mid-run, then up: every
#      result exact, no failed operation; rail F healthy again on both sides
#      (r2cclctl rails, a rail_state event) and carrying traffic again;
#   4. a loop; guest b SIGKILLs its r2ccld: every rank on a gets an error
#      within KILL_BOUND s of the kill, a's daemon stays up and exits 0 on
#      SIGTERM.
# The guests talk through a small mailbox (python3, TCP on rail 0) for
# unique ids and notices; rail 0 is never failed here.
set -u
cd /work
mode=$(cat mode)
SOCK=/tmp/r2/r2ccld.sock CTL="./r2cclctl --socket /tmp/r2/r2ccld.sock --timeout 20000"
export LD_LIBRARY_PATH=/work R2CCL_SPIN_US=0 R2CCL_SOCKET=$SOCK
KILL_BOUND=${KILL_BOUND:-15}
PORT=47100 # the rails' port: guest b's attacker (phase 2b) dials a's
IDX=0; [ "$ROLE" = b ] && IDX=1
fails=0
# results also go to the serial console as they happen (the guest's log,
# kept with R2_RDMA_VM_KEEP=1), prefixed "live:"
live() { echo "live: $*" >/dev/ttyS0 2>/dev/null || true; }
ok() { echo "ok - $*"; live "ok - $*"; }
fail() { echo "FAIL - $*"; live "FAIL - $*"; fails=$((fails + 1)); }
jflat() { $CTL --json "$@" | tr -d ' \n'; } # JSON on one line, no blanks
now() { date +%s.%N | cut -c1-14; }
dlog() { sed 's/^/#   /' /tmp/r2/d.log | tail -n "${1:-40}"; }
finish() {
	[ $fails = 0 ] || dlog 80
	echo "$fails failure(s)"
	exit $((fails > 0))
}

FR=1 MR=0
[ "$mode" = mixed ] && FR=0 MR=1
FNET=RAIL${FR}_NETDEV FNET=${!FNET}
MADDR=RAIL${MR}_ADDR MADDR=${!MADDR}
MPEER=RAIL${MR}_PEER MPEER=${!MPEER}

# ---- mailbox: put NAME FILE (to the peer), wait_box NAME SECS ----
mkdir -p /tmp/mbox /tmp/r2
# the guests' cluster key (peer_auth, docs/security.md): the same on both, a
# test's key, so written from a fixed text; mode 0600 as r2ccld requires
(umask 077 && echo "r2ccl rdma suite cluster key, not a secret" >/tmp/r2/cluster.key)
python3 - "$MADDR" <<'PY' >/tmp/mbox.log 2>&1 &
import os, socket, sys
s = socket.socket()
s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind((sys.argv[1], 7777))
s.listen(8)
while True:
    c, _ = s.accept()
    data = b""
    while True:
        b = c.recv(65536)
        if not b:
            break
        data += b
    c.close()
    name, _, body = data.partition(b"\n")
    name = os.path.basename(name.decode())
    with open("/tmp/mbox/." + name, "wb") as f:
        f.write(body)
    os.rename("/tmp/mbox/." + name, "/tmp/mbox/" + name)
PY
put() {
	for _ in $(seq 300); do
		{ printf '%s\n' "$1"; cat "$2"; } 2>/dev/null >"/dev/tcp/$MPEER/7777" && return 0
		sleep 0.2
	done
	return 1
}
wait_box() { # NAME SECS
	local t=0
	while [ ! -e "/tmp/mbox/$1" ]; do
		[ $t -ge $(($2 * 5)) ] && return 1
		sleep 0.2; t=$((t + 1))
	done
}
wait_file() { # FILE SECS
	local t=0
	while [ ! -s "$1" ]; do
		[ $t -ge $(($2 * 5)) ] && return 1
		sleep 0.2; t=$((t + 1))
	done
}

if [ "$mode" = mixed ] || { [ "$mode" = mismatch ] && [ $IDX = 1 ]; }; then
	rdma link delete rxe1 && ok "$mode: rxe1 removed, rail 1 ($RAIL1_NETDEV) has no RDMA port"
	want1=tcp
else
	want1=verbs
fi
ibv_devices | sed 1,2d | sed 's/^/# /'

# ---- the daemon ----
./r2ccld --socket "$SOCK" --rails "$RAIL0_NETDEV,$RAIL1_NETDEV" --log-level info \
	--cluster-key-file /tmp/r2/cluster.key --port $PORT \
	--hb-interval 500000 --hb-misses 6 --hb-stall-misses 6 --peer-timeout-ms 5000 \
	--op-timeout-ms 120000 --bootstrap-timeout-ms 120000 --spin-us 0 >/tmp/r2/d.log 2>&1 &
dpid=$!
# up to 60 s
for _ in $(seq 60); do
	[ -S "$SOCK" ] && ./r2cclctl --socket "$SOCK" --timeout 1000 status >/dev/null 2>&1 && break
	sleep 1
done
$CTL status >/dev/null 2>&1 || { fail "r2ccld did not start"; finish; }

# ---- 1. provider per rail ----
rails=$($CTL rails)
echo "$rails" | sed 's/^/#   /'
for r in 0 1; do
	nd=RAIL${r}_NETDEV want=verbs
	[ $r = 1 ] && want=$want1
	got=$(awk -v n="${!nd}" '$1 == n { print $3 }' <<<"$rails")
	[ "$got" = "$want" ] && ok "rail $r (${!nd}): $got in r2cclctl rails" ||
		fail "rail $r (${!nd}): transport '$got' in r2cclctl rails, want $want"
	if [ $want = verbs ]; then
		dev=rxe$r
		grep -q "rail $r: ${!nd} .*(verbs on $dev:1" /tmp/r2/d.log && ok "rail $r: log says verbs on $dev:1" ||
			fail "rail $r: no 'verbs on $dev:1' in the log"
		jflat status | grep -q "\"name\":\"${!nd}\"[^}]*\"transport\":\"verbs\",\"rdma_device\":\"$dev:1\"" &&
			ok "rail $r: status --json transport verbs, rdma_device $dev:1" ||
			fail "rail $r: status --json does not say verbs on $dev:1"
	else
		grep -q "rail $r: ${!nd} .*(tcp," /tmp/r2/d.log && ok "rail $r: log says tcp" ||
			fail "rail $r: no tcp rail line in the log"
		jflat status | grep -q "\"name\":\"${!nd}\"[^}]*\"transport\":\"tcp\"" &&
			ok "rail $r: status --json transport tcp" || fail "rail $r: status --json does not say tcp"
	fi
done

# alt_daemon WANT0 WANT1 ARGS...: a second daemon (own socket, own ports)
# with ARGS: rail 0 and 1 must use WANT0 and WANT1; then SIGTERM, exit 0.
alt_daemon() {
	local w0=$1 w1=$2 s=/tmp/r2/alt.sock apid rails
	shift 2
	rm -f "$s"
	./r2ccld --socket "$s" --rails "$RAIL0_NETDEV,$RAIL1_NETDEV" \
		--cluster-key-file /tmp/r2/cluster.key "$@" >/tmp/r2/alt.log 2>&1 &
	apid=$!
	for _ in $(seq 60); do
		[ -S "$s" ] && ./r2cclctl --socket "$s" --timeout 1000 status >/dev/null 2>&1 && break
		sleep 1
	done
	rails=$(./r2cclctl --socket "$s" --timeout 10000 rails)
	got0=$(awk -v n="$RAIL0_NETDEV" '$1 == n { print $3 }' <<<"$rails")
	got1=$(awk -v n="$RAIL1_NETDEV" '$1 == n { print $3 }' <<<"$rails")
	kill -TERM $apid
	wait $apid
	alt_rc=$?
	[ "$got0 $got1" = "$w0 $w1" ] && [ $alt_rc = 0 ]
}

# run_cc NAME LOCAL ARGS...: one communicator across both guests; a creates
# the unique id and sends it to b. Output in /tmp/cc-NAME.out, exit in $cc_rc.
run_cc() {
	local name=$1 l=$2 uid
	shift 2
	if [ $IDX = 0 ]; then
		uid=/tmp/uid-$name
		(wait_file "$uid" 120 && put "uid-$name" "$uid") &
	else
		uid=/tmp/mbox/uid-$name
	fi
	live "cluster_client $name: $l local rank(s) $*"
	./cluster_client --nranks $((2 * l)) --first-rank $((IDX * l)) --local-ranks "$l" \
		--uid-file "$uid" --uid-timeout 180 --timeout 300 "$@" >"/tmp/cc-$name.out" 2>&1
	cc_rc=$?
	live "cluster_client $name: exit $cc_rc: $(tail -n 1 "/tmp/cc-$name.out")"
	[ $cc_rc = 0 ] || tail -n 30 /tmp/r2/d.log | sed 's/^/live: d.log: /' >/dev/ttyS0 2>/dev/null
	return $cc_rc
}
elapsed() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.1f", b - a }'; }
wait_line() { # PATTERN FILE SECS
	local t=0
	while ! grep -q "$1" "$2" 2>/dev/null; do
		[ $t -ge $(($3 * 5)) ] && return 1
		sleep 0.2; t=$((t + 1))
	done
}

if [ "$mode" = mixed ]; then
	# the knob: tcp on every rail, RDMA port or not
	alt_daemon tcp tcp --transport tcp && ok "--transport tcp: both rails tcp" ||
		fail "--transport tcp: rails '$got0 $got1', exit $alt_rc"
	# verbs that fails to open (no such GID index) falls back to tcp
	if R2CCL_IB_GID_INDEX=999 alt_daemon tcp tcp &&
		grep -q "rail $RAIL0_NETDEV: rxe0 port 1: verbs transport failed to open" /tmp/r2/alt.log; then
		ok "verbs failing to open on rail 0: tcp instead ($(grep -o 'verbs transport failed.*' /tmp/r2/alt.log))"
	else
		fail "verbs failing to open on rail 0: no fallback to tcp"
		sed 's/^/#   /' /tmp/r2/alt.log | grep -i "rail\|verbs"
	fi
fi

if [ "$mode" = mismatch ]; then
	t0=$(now)
	run_cc mm 1 --ops allreduce,allgather --max-bytes 16K
	t1=$(now)
	if [ $cc_rc = 0 ] && grep -q "cluster_client: PASS" /tmp/cc-mm.out; then
		ok "rail 1 verbs on a, tcp on b: allreduce/allgather exact on rail 0 ($(elapsed "$t0" "$t1") s)"
	else
		fail "rail 1 verbs on a, tcp on b: exit $cc_rc"
		tail -n 10 /tmp/cc-mm.out | sed 's/^/#   /'
	fi
	if [ $IDX = 0 ]; then
		grep -m1 "uses the tcp transport on this rail" /tmp/r2/d.log | sed 's/^/#   /'
		grep -q "verbs $RAIL1_NETDEV: side channel from $RAIL1_PEER: that host uses the tcp transport on this rail" /tmp/r2/d.log &&
			ok "a's log names the misconfiguration (the peer runs tcp on rail 1)" ||
			fail "a's log does not say that b runs tcp on rail 1"
	fi
	grep -E "rail 1|$RAIL1_NETDEV" /tmp/r2/d.log | grep -iE "fail|error" | head -n 4 | sed 's/^/#   /'
	kill -TERM $dpid
	wait $dpid
	drc=$?
	[ $drc = 0 ] && ok "r2ccld exit 0 on SIGTERM" || fail "r2ccld exit $drc on SIGTERM"
	finish
fi

# ---- 2. every collective, 1 and 2 local ranks ----
for l in 1 2; do
	t0=$(now)
	run_cc all$l "$l" --max-bytes 16K
	t1=$(now)
	if [ $cc_rc = 0 ] && grep -q "cluster_client: PASS" "/tmp/cc-all$l.out"; then
		ok "every collective, $l local rank(s) per guest: $(grep -o 'PASS.*' "/tmp/cc-all$l.out") ($(elapsed "$t0" "$t1") s)"
	else
		fail "every collective, $l local rank(s): exit $cc_rc"
		tail -n 20 "/tmp/cc-all$l.out" | sed 's/^/#   /'
	fi
done

# ---- 2b. (cluster) the verbs side channel against a host without the key ----
# Guest b, playing a host on rail 1's network that has no cluster key
# (peerauth_attack.py, plain sockets), sends a's side channel HELLOs that
# claim b's own daemon id, the live peer (with a forged READY proof, or no
# proof), at 2.5 per second while the guests run an AllReduce loop: the
# loop has no failed operation, a keeps its connection, every forged
# exchange is closed; then 64 connections that never say HELLO (at most 16
# held, closed by the 3 s deadline) and 200 HELLOs from fake ids (none
# answered).
if [ "$mode" = cluster ]; then
	if [ $IDX = 0 ]; then
		# b's id, as a knows it, and a's own (b's log has it too)
		grep -m1 -o "rail 1 ([^)]*): connected to peer [0-9a-f]*" /tmp/r2/d.log |
			awk '{print $NF}' >/tmp/bid
		put bid /tmp/bid
	fi
	run_cc atk 1 --loop 400 --max-bytes 64K &
	ccpid=$!
	if [ $IDX = 1 ]; then
		aid=$(grep -m1 -o "rail 1 ([^)]*): connected to peer [0-9a-f]*" /tmp/r2/d.log | awk '{print $NF}')
		wait_box bid 60 && bid=$(cat /tmp/mbox/bid) || bid=
		if [ -n "$aid" ] && [ -n "$bid" ]; then
			sleep 2 # the loop runs
			python3 ./peerauth_attack.py vhellos "$RAIL1_PEER" $PORT "$bid" "$aid" 2.5 8 >/tmp/atk-h.log 2>&1
			sed 's/^/#   attacker: /' /tmp/atk-h.log
			read -r _ sent _ ans _ closed _ hung </tmp/atk-h.log
			if [ "${sent:-0}" -ge 15 ] && [ "$closed" = "$sent" ] && [ "$hung" = 0 ] && [ "$ans" -gt 0 ]; then
				ok "2b: $sent forged side channel HELLOs claiming the live peer ($ans answered, their forged READY refused), every one closed"
			else
				fail "2b: forged HELLOs: sent $sent answered $ans closed $closed hung $hung"
			fi
		else
			fail "2b: no daemon ids (a '$aid', b '$bid')"
		fi
	fi
	wait $ccpid; rc=$?
	if [ $rc = 0 ] && grep -q "cluster_client: PASS .* 0 failures, 0 rank errors" /tmp/cc-atk.out; then
		ok "2b: AllReduce loop beside the forged HELLOs: no failed operation"
	else
		fail "2b: the loop beside the forged HELLOs failed (exit $rc)"
		tail -n 10 /tmp/cc-atk.out | sed 's/^/#   /'
	fi
	if [ $IDX = 0 ]; then
		grep -m2 "side channel from $RAIL1_PEER .*refused" /tmp/r2/d.log | sed 's/^/#   /'
		grep -q "verbs $RAIL1_NETDEV: side channel from $RAIL1_PEER (claims daemon [0-9a-f]*) refused: wrong cluster key" /tmp/r2/d.log &&
			ok "2b: a logged the forged HELLOs as refused (wrong cluster key)" ||
			fail "2b: a logged no refused side channel"
		if grep -q "rail 1 ([^)]*): connection to peer .* failed" /tmp/r2/d.log; then
			fail "2b: a's connection on rail 1 dropped during the attack"
			grep "rail 1 ([^)]*): connection to peer .* failed" /tmp/r2/d.log | head -n 3 | sed 's/^/#   /'
		else
			ok "2b: a kept its rail 1 connection"
		fi
		echo done >/tmp/atkdone
		put atkdone /tmp/atkdone
	else
		wait_box atkdone 60
		python3 ./peerauth_attack.py flood "$RAIL1_PEER" $PORT 64 6 >/tmp/atk-f.log 2>&1
		sed 's/^/#   attacker: /' /tmp/atk-f.log
		read -r _ opened _ early _ held _ deadline _ left _ </tmp/atk-f.log
		if [ "$opened" = 64 ] && [ "$held" -le 16 ] && [ "$early" -ge 48 ] && [ "$left" = 0 ]; then
			ok "2b: 64 side channels without a HELLO: $held held (16 per address), $early closed at once, the rest by the deadline"
		else
			fail "2b: pre-hello flood: opened $opened held $held closed at once $early still open $left"
		fi
		python3 ./peerauth_attack.py vfakes "$RAIL1_PEER" $PORT "$aid" 200 >/tmp/atk-c.log 2>&1
		sed 's/^/#   attacker: /' /tmp/atk-c.log
		read -r _ nf _ fans _ fclosed </tmp/atk-c.log
		[ "$nf" = 200 ] && [ "$fans" = 0 ] && [ "$fclosed" = 200 ] &&
			ok "2b: 200 HELLOs from fake ids without the key: none answered, every one closed" ||
			fail "2b: fake ids: $nf sent, $fans answered, $fclosed closed"
	fi
	# a communicator still forms and runs after all of it
	run_cc atk2 1 --ops allreduce,allgather --max-bytes 16K
	[ $cc_rc = 0 ] && grep -q "cluster_client: PASS" /tmp/cc-atk2.out &&
		ok "2b: a new communicator after the attacks: allreduce/allgather exact" ||
		fail "2b: a new communicator after the attacks: exit $cc_rc"
fi

# ---- 3. rail F down mid-run (guest a), then up ----
tx_of() { jflat rails | tr '{' '\n' | grep "\"nic\":\"$FNET\"" | sed 's/.*"tx_bytes_total":\([0-9]*\).*/\1/'; }
state_of() { $CTL rails | awk -v n="$FNET" '$1 == n { print $2 }'; }
# 64 KiB: the eager path (about 20 ms an allreduce on soft-RoCE); the
# loop outlasts the 6 s the rail is down
NLOOP=1500
run_cc fail 1 --loop $NLOOP --max-bytes 64K &
ccpid=$!
if [ $IDX = 0 ]; then
	if wait_line "loop 10 of $NLOOP done" /tmp/cc-fail.out 300; then
		ip link set "$FNET" down
		echo "# rail $FR ($FNET) down at $(now)"
		sleep 6
		ip link set "$FNET" up
		echo "# rail $FR ($FNET) up at $(now)"
		grep -q "loop $NLOOP of $NLOOP" /tmp/cc-fail.out &&
			fail "the loop ended before rail $FR came back: make it longer"
	else
		fail "the loop did not reach 10 allreduces"
	fi
fi
wait $ccpid; rc=$?
grep "loop .* done" /tmp/cc-fail.out | tail -n 3 | sed 's/^/#   /'
if [ $rc = 0 ] && grep -q "cluster_client: PASS .* 0 failures, 0 rank errors" /tmp/cc-fail.out; then
	ok "rail $FR down and up mid-run: $NLOOP allreduces exact, no failed operation"
else
	fail "rail $FR down mid-run: the loop failed (exit $rc)"
	tail -n 20 /tmp/cc-fail.out | sed 's/^/#   /'
fi
grep -E "rail $FR|$FNET" /tmp/r2/d.log | grep -iE "fail|down|error|healthy|recover|stable|connected" | tail -n 8 | sed 's/^/#   /'
st=
for _ in $(seq 150); do
	st=$(state_of)
	[ "$st" = healthy ] && break
	sleep 0.2
done
[ "$st" = healthy ] && ok "rail $FR healthy again (r2cclctl rails)" || fail "rail $FR is '$st' after coming back"
ev=$($CTL events)
echo "$ev" | grep -i "$FNET" | tail -n 6 | sed 's/^/#   /'
# the last '-> failed' of rail $FR is followed by a '-> healthy'
if echo "$ev" | grep -i "$FNET" | awk '/-> failed/ { f = NR } /-> healthy/ { h = NR }
	END { exit !(f && h > f) }'; then
	ok "r2cclctl events: rail $FR failed, then healthy"
else
	fail "r2cclctl events do not show rail $FR failing and rejoining"
fi
# the rejoined rail carries traffic again
tx0=$(tx_of)
run_cc after 1 --ops allreduce,allgather --max-bytes 16K
tx1=$(tx_of)
if [ $cc_rc = 0 ] && grep -q "cluster_client: PASS" /tmp/cc-after.out && [ "${tx1:-0}" -gt "${tx0:-0}" ]; then
	ok "after the rejoin: allreduce/allgather exact, rail $FR sent $((tx1 - tx0)) bytes"
else
	fail "after the rejoin: exit $cc_rc, rail $FR tx $tx0 -> $tx1"
	tail -n 10 /tmp/cc-after.out | sed 's/^/#   /'
fi

# ---- 4. b's daemon killed mid-run ----
run_cc kill 1 --loop 400 --max-bytes 64K &
ccpid=$!
if [ $IDX = 1 ]; then
	# rank 0 (on a) prints the progress and tells b when the loop runs
	wait_box started 300 || fail "b: no notice that the loop runs"
	# the notice goes first: a's error minus its arrival bounds the
	# detection time from above (the guests' clocks differ)
	echo "killing" >/tmp/killed
	put killed /tmp/killed
	kill -KILL $dpid
	echo "# r2ccld SIGKILLed at $(now)"
	wait $ccpid; rc=$?
	[ $rc != 0 ] && ok "b: the client of the killed daemon ended with exit $rc" ||
		fail "b: its daemon was killed but the client passed"
else
	if wait_line "loop 10 of 400 done" /tmp/cc-kill.out 300; then
		echo started >/tmp/started
		put started /tmp/started
	else
		fail "a: the loop did not reach 10 allreduces"
	fi
	wait $ccpid; rc=$?
	if wait_box killed 30; then
		# when the notice arrived (a's clock): just before the kill
		tk=$(date -r /tmp/mbox/killed +%s.%N | cut -c1-14)
		line=$(grep -m1 "cluster_client: rank 0: error " /tmp/cc-kill.out)
		if [ $rc = 2 ] && [ -n "$line" ]; then
			at=${line##*epoch=}
			dt=$(awk -v a="$at" -v k="$tk" 'BEGIN { printf "%.2f", a - k }')
			if awk -v d="$dt" -v b="$KILL_BOUND" 'BEGIN { exit !(d < b) }'; then
				ok "a: rank 0 got an error ${dt} s after b's notice sent just before the kill (<= 0: first): $(sed 's/.*error //; s/ epoch=.*//' <<<"$line")"
			else
				fail "a: rank 0's error came ${dt} s after the kill (bound $KILL_BOUND s)"
			fi
		else
			fail "a: the client exit $rc without an r2ccl error although the peer daemon died"
			tail -n 10 /tmp/cc-kill.out | sed 's/^/#   /'
		fi
	else
		fail "a: no notice of the kill from b"
	fi
	if kill -0 $dpid 2>/dev/null; then
		ok "a: r2ccld still running"
		kill -TERM $dpid
		wait $dpid; drc=$?
		[ $drc = 0 ] && ok "a: r2ccld exit 0 on SIGTERM" || fail "a: r2ccld exit $drc on SIGTERM"
		# every chunk goes from a proxy-pool slab registered on every rail
		# (failovers included): only control messages (small protobuf
		# copies) take the copy path: under 1% of the payload, or under
		# 64 KiB in all on a rail that carried little data (on 2 hosts the
		# small AllReduces' eager messages all take rail 0 since
		# 2026-12-05: rail 1 then sent 312,532 bytes and copied 13,240)
		for r in 0 1; do
			nd=RAIL${r}_NETDEV
			line=$(grep -m1 "verbs ${!nd}: payload sent: " /tmp/r2/d.log) || continue
			zc=$(sed 's/.*sent: \([0-9]*\) bytes zero-copy.*/\1/' <<<"$line")
			cp=$(sed 's/.*, \([0-9]*\) bytes copied.*/\1/' <<<"$line")
			if [ "$zc" -gt 0 ] && { [ $((cp * 100)) -lt "$zc" ] || [ "$cp" -lt 65536 ]; }; then
				ok "a: rail $r (verbs): $zc payload bytes sent zero-copy from registered memory, $cp copied (control messages)"
			else
				fail "a: rail $r (verbs): $zc bytes zero-copy, $cp copied: data chunks took the copy path"
			fi
		done
	else
		fail "a: r2ccld died"
	fi
fi
finish
