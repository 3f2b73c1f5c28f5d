#!/bin/bash
# SPDX-License-Identifier: MIT
#
# Diagnostic (by hand): 4 x 2 at RATE (1gbit), AllReduce 64 MB healthy and
# with host 1's rail 0 down; per loop, the nonzero changes of every host
# namespace's TCP/IP counters (/proc/net/netstat, snmp; the bulk counters
# left out), the kernel's backlog drops and the switch-side qdisc drops.
# DARGS: more r2ccld options (e.g. "--tcp-threads 1 --tcp-streams 1").
set -u
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
cluster_lib_init dgn

H=4
B=${R2CCL_BENCH:-$HERE/../../build/tools/r2ccl-bench}
# shellcheck disable=SC2086
"$C" up -H $H -R 2 --rate "${RATE:-1gbit}" >/dev/null || { fail "cluster up"; finish; }
"$C" daemons start ${DARGS:-} >/dev/null || { fail "daemons start"; finish; }

n=0
bench() { # ITERS NAME: prints NAME and rank 0's out-of-place and in-place ms
	n=$((n + 1))
	"$C" run --timeout 300 -- sh -c "exec $B allreduce -b 64M -e 64M -n $1 -w 2 \
		--nranks \$R2CCL_NHOSTS --first-rank \$R2CCL_HOST_INDEX --uid-file $DIR/uid$n" >/dev/null 2>&1
	echo "$2 $(awk '$1 == 67108864 { printf "%.1f %.1f", $6 / 1000, $10 / 1000 }' "$DIR/h0/out.log")"
}

snap() { # NAME: every host's counters ("hI Counter value") to $DIR/NAME
	local h s=0 b
	for h in $(seq 0 $((H - 1))); do
		ip netns exec "${R2C_PREFIX}h$h" cat /proc/net/netstat /proc/net/snmp |
			awk -v h="$h" '/^[A-Za-z]+: [A-Z]/ { for (i = 2; i <= NF; i++) k[i] = $1 $i; next }
				{ for (i = 2; i <= NF; i++) print "h" h, k[i], $i }'
	done >"$DIR/$1"
	while read -r _ b _; do s=$((s + 16#$b)); done </proc/net/softnet_stat
	echo "all softnet_dropped $s" >>"$DIR/$1"
}

BULK='InSegs|OutSegs|InReceives|InDelivers|OutRequests|InOctets|OutOctets|NoECTPkts|DelayedACKs|TCPHPHits|TCPPureAcks|TCPHPAcks|TCPOrigDataSent|TCPDelivered|TCPAutoCorking|TCPRcvCoalesce|TCPBacklogCoalesce|ZeroWindowAdv|TCPKeepAlive|Ip.*Pkts|TCPRcvQDrop|ActiveOpens|PassiveOpens|CurrEstab'
changes() { # A B: the counters that moved, one line per host
	awk -v bulk="$BULK" 'NR == FNR { a[$1 " " $2] = $3; next }
		($1 " " $2) in a { d = $3 - a[$1 " " $2]; if (d && $2 !~ bulk) c[$1] = c[$1] " " $2 "=" d }
		END { for (h in c) print h ":" c[h] }' "$DIR/$1" "$DIR/$2" | sort
}

drops() { # the switch-side qdisc drops of every NIC
	local d
	for d in $(ip netns exec "${R2C_PREFIX}sw" ls /sys/class/net | grep '^h'); do
		echo -n "sw/$d $(tc -n "${R2C_PREFIX}sw" -s qdisc show dev "$d" | grep -o 'dropped [0-9]*' | head -1); "
	done
	echo
}

bench 3 healthy-warm
snap a; bench 5 healthy; snap b
echo "-- healthy"; changes a b; drops
"$C" link 1 0 down >/dev/null
bench 2 nicdown-warm
snap c; bench 5 nicdown; snap d
echo "-- nicdown"; changes c d; drops
sysctl net.ipv4.tcp_congestion_control net.core.default_qdisc net.ipv4.tcp_wmem \
	net.ipv4.tcp_rmem net.core.netdev_max_backlog 2>&1
finish
