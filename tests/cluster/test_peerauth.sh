#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
#
# The peer port against a host on a rail network that has no cluster key
# (issue 23; docs/security.md). 3 hosts x 2 rails; r2ccld on hosts 0 and 1
# (each with its copy of the cluster's key: cluster.sh), host 2 is the
# attacker (tests/cluster/peerauth_attack.py, plain sockets) on both rails'
# networks:
#  (a) while hosts 0 and 1 run an AllReduce loop, hellos claiming the live
#      peer's id (a forged proof, or none) at 5 per second in all, at both
#      daemons: the loop shows no failed op, neither daemon drops its
#      connection to the other, every forged hello is closed;
#  (b) 64 connections that never say hello: at most peer_max_prehello_per_addr
#      (16) are held, the rest closed at once, the held ones closed by the
#      hello deadline (3 s); meanwhile a new communicator forms and runs;
#  (c) 1,100 hellos with fake peer ids and no proof: none answered, no peer
#      table entry made (the daemon connects to no fake id), and a new
#      communicator forms after them.
# Exits 77 when not root or without iproute2 / python3.

set -u -o pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
cluster_lib_init cpau
command -v python3 >/dev/null || { echo "SKIP: python3 missing"; exit 77; }
ATK=$HERE/peerauth_attack.py
PORT=47100
H=3 R=2

"$C" up -H $H -R $R --rate 1gbit >/dev/null || { fail "cluster up"; finish; }
"$C" daemons start --hosts 0,1 --port $PORT >/dev/null ||
	{ fail "daemons start"; dump_logs; finish; }

# comm UIDFILE ...: a communicator of hosts 0 and 1 (one rank each)
comm() {
	local uid=$1
	shift
	"$C" run --hosts 0,1 --timeout 120 -- sh -c 'u=$1; shift; exec "$0" --nranks 2 \
		--first-rank $R2CCL_HOST_INDEX --uid-file "$u" --timeout 110 "$@"' \
		"$CC" "$uid" "$@"
}

# ---- (a) forged hellos claiming the live peer, during an AllReduce loop ----
comm "$DIR/uid-loop" --loop 400 --max-bytes 4M >"$DIR/run-loop.log" 2>&1 &
runpid=$!
for ((t = 0; t < 600; t++)); do
	grep -q "loop [0-9]* of 400 done" "$DIR/h0/out.log" 2>/dev/null && break
	kill -0 $runpid 2>/dev/null || break
	sleep 0.1
done
id1=$(grep -m1 -o "connected to peer [0-9a-f]*" "$DIR/h0/r2ccld.log" | awk '{print $4}')
id0=$(grep -m1 -o "connected to peer [0-9a-f]*" "$DIR/h1/r2ccld.log" | awk '{print $4}')
if [[ -z $id0 || -z $id1 ]] || ! grep -q "loop 1 of 400 done" "$DIR/h0/out.log"; then
	fail "the allreduce loop did not start (ids '$id0' '$id1')"
	sed 's/^/# /' "$DIR"/h*/out.log 2>/dev/null | head -n 20
	dump_logs
	finish
fi
echo "# daemon ids: h0 $id0, h1 $id1; attacking for 10 s at 5 hellos/s"
t0=$(now)
# 2.5/s at each daemon, on rail 0 and rail 1 alternately by daemon
"$C" exec 2 python3 "$ATK" hellos 198.18.0.1 $PORT "$id1" "$id0" 2.5 10 >"$DIR/atk-a0.log" 2>&1 &
a0=$!
"$C" exec 2 python3 "$ATK" hellos 198.18.1.2 $PORT "$id0" "$id1" 2.5 10 >"$DIR/atk-a1.log" 2>&1 &
a1=$!
wait $a0 $a1
loops_during=$(grep -o "loop [0-9]* of 400 done" "$DIR/h0/out.log" | tail -n1)
[[ $loops_during == "loop 800 of 400 done" ]] &&
	echo "# (the loop ended before the attack did: the attack overlapped only its end)"
echo "# attack ended after $(elapsed "$t0") s; h0 at '$loops_during'"
wait $runpid
rc=$?
for f in "$DIR/atk-a0.log" "$DIR/atk-a1.log"; do sed 's/^/# attacker: /' "$f"; done
sent=$(cat "$DIR"/atk-a*.log | awk '/^sent/ {s += $2} END {print s + 0}')
answered=$(cat "$DIR"/atk-a*.log | awk '/^sent/ {s += $4} END {print s + 0}')
closed=$(cat "$DIR"/atk-a*.log | awk '/^sent/ {s += $6} END {print s + 0}')
npass=$(grep -c "cluster_client: PASS" "$DIR/run-loop.log")
if ((rc == 0 && npass == 2)); then
	ok "(a) AllReduce loop under forged hellos: no failed op ($loops_during when the attack ended)"
else
	fail "(a) AllReduce loop under forged hellos failed (run exit $rc)"
	grep -E "FAIL|error" "$DIR/run-loop.log" | head -n 10 | sed 's/^/# /'
fi
if ((sent >= 45 && closed == sent && answered > 0)); then
	ok "(a) $sent forged hellos ($answered answered, then their forged proof refused), every one closed"
else
	fail "(a) forged hellos: sent $sent answered $answered closed $closed (want >= 45, all closed, some answered)"
fi
if grep -q "connection to peer .* failed" "$DIR"/h[01]/r2ccld.log; then
	fail "(a) a live connection was dropped during the attack"
	grep -h "connection to peer .* failed" "$DIR"/h[01]/r2ccld.log | head -n 5 | sed 's/^/# /'
else
	ok "(a) no live connection dropped"
fi
grep -q "refused: wrong cluster key" "$DIR/h0/r2ccld.log" ||
	fail "(a) h0 logged no refused hello"

# ---- (b) pre-hello connections: capped, deadline, the daemon keeps serving ----
pid0=$(<"$DIR/h0/r2ccld.pid")
nfd() { find /proc/"$pid0"/fd -mindepth 1 -maxdepth 1 2>/dev/null | wc -l; }
rss() { awk '/^VmRSS/ {print $2}' /proc/"$pid0"/status; }
fd_before=$(nfd) rss_before=$(rss)
"$C" exec 2 python3 "$ATK" flood 198.18.0.1 $PORT 64 6 >"$DIR/atk-b.log" 2>&1 &
b=$!
sleep 1
fd_during=$(nfd)
t0=$(now)
out=$(comm "$DIR/uid-b" --ops allreduce,broadcast --max-bytes 1M 2>&1)
rc=$?
tb=$(elapsed "$t0")
wait $b
sed 's/^/# attacker: /' "$DIR/atk-b.log"
read -r _ opened _ early _ held _ deadline _ left _ <"$DIR/atk-b.log"
if ((rc == 0 && $(grep -c "cluster_client: PASS" <<<"$out") == 2)); then
	ok "(b) a new communicator formed and ran while 64 pre-hello connections came ($tb s)"
else
	fail "(b) communicator during the pre-hello flood failed (exit $rc)"
	grep -E "FAIL|error" <<<"$out" | head -n 10 | sed 's/^/# /'
fi
fd_after=$(nfd) rss_after=$(rss)
echo "# h0's r2ccld: $fd_before fds before the flood, $fd_during during, $fd_after after; RSS $rss_before -> $rss_after KiB"
if ((fd_during <= fd_before + 16 + 4 && fd_after <= fd_before + 2)); then
	ok "(b) h0's fds bounded by the cap during the flood and back after it"
else
	fail "(b) h0's fds: $fd_before before, $fd_during during, $fd_after after"
fi
if ((opened == 64 && held <= 16 && early >= 48 && left == 0)); then
	ok "(b) pre-hello connections: $held held (cap 16 per address), $early closed at once, the held ones closed by the hello deadline"
else
	fail "(b) pre-hello: opened $opened held $held closed at once $early still open $left"
fi

# ---- (c) 1,100 fake peer ids, no key ----
t0=$(now)
"$C" exec 2 python3 "$ATK" fakes 198.18.0.1 $PORT "$id0" 1100 >"$DIR/atk-c.log" 2>&1
sed 's/^/# attacker: /' "$DIR/atk-c.log"
read -r _ nf _ fans _ fclosed <"$DIR/atk-c.log"
if ((nf == 1100 && fans == 0 && fclosed == 1100)); then
	ok "(c) 1100 fake peer ids: none answered, every one closed ($(elapsed "$t0") s)"
else
	fail "(c) fake ids: $nf sent, $fans answered, $fclosed closed"
fi
npeers=$(grep -o "connected to peer [0-9a-f]*" "$DIR/h0/r2ccld.log" | sort -u | wc -l)
if ((npeers == 1)); then
	ok "(c) h0 connected to no peer but h1 (no table entry for a fake id)"
else
	fail "(c) h0 connected to $npeers distinct peers"
fi
out=$(comm "$DIR/uid-c" --ops allreduce,allgather --max-bytes 1M 2>&1)
rc=$?
if ((rc == 0 && $(grep -c "cluster_client: PASS" <<<"$out") == 2)); then
	ok "(c) a new communicator forms after the fake ids"
else
	fail "(c) communicator after the fake ids failed (exit $rc)"
	grep -E "FAIL|error" <<<"$out" | head -n 10 | sed 's/^/# /'
fi
if ((fails)); then dump_logs 25; fi
check_sanitizer "peerauth"
daemons_stop_ok "daemons" 0 1 || dump_logs
"$C" down >/dev/null || fail "down"
finish
