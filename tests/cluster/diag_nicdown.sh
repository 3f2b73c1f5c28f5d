#!/bin/bash
# SPDX-License-Identifier: MIT
# Diagnostic (by hand): 4 x 2 at 1 Gbit/s, AllReduce 64 MB healthy and with
# host 1's rail 0 down; TCP counters of every host namespace (nonzero diffs),
# qdisc and backlog drops, per loop.
cd "$(dirname "$0")/../.."
export R2C_PREFIX=${R2C_PREFIX:-dgn1}
C=tests/cluster/cluster.sh
B=${R2CCL_BENCH:-$PWD/build/tools/r2ccl-bench}
H=4
$C up -H $H -R 2 --rate ${RATE:-1gbit} >/dev/null; $C daemons start ${DARGS:-} >/dev/null
n=0
bench() { n=$((n+1)); $C run --timeout 300 -- sh -c "exec $B allreduce -b 64M -e 64M -n $1 -w 2 --nranks \$R2CCL_NHOSTS --first-rank \$R2CCL_HOST_INDEX --uid-file /tmp/$R2C_PREFIX/uid$n" >/dev/null 2>&1; echo "$2 $(awk '$1 == 67108864 { printf "%.1f %.1f", $6/1000, $10/1000 }' /tmp/$R2C_PREFIX/h0/out.log)"; }
snapc() { for h in $(seq 0 $((H-1))); do ip netns exec ${R2C_PREFIX}h$h cat /proc/net/netstat /proc/net/snmp | awk -v h=$h '/^[A-Za-z]+: [A-Z]/ { for (i = 2; i <= NF; i++) k[i] = $1 $i; next } { for (i = 2; i <= NF; i++) print "h" h, k[i], $i }'; done > /tmp/$R2C_PREFIX.$1; local s=0 a b; while read -r a b _; do s=$((s + 16#$b)); done </proc/net/softnet_stat; echo "all softnet_dropped $s" >> /tmp/$R2C_PREFIX.$1; }
diffc() { awk 'NR==FNR { a[$1" "$2]=$3; next } ($1" "$2) in a { d=$3-a[$1" "$2]; if (d && $2 !~ /InSegs|OutSegs|InReceives|InDelivers|OutRequests|InOctets|OutOctets|NoECTPkts|DelayedACKs|TCPHPHits|TCPPureAcks|TCPHPAcks|TCPOrigDataSent|TCPDelivered|TCPAutoCorking|TCPRcvCoalesce|TCPBacklogCoalesce|TCPWantZeroWindowAdv|TCPToZeroWindowAdv|TCPFromZeroWindowAdv|IpExtInNoECTPkts|TCPKeepAlive|Ip.*Pkts|TCPRcvQDrop|ActiveOpens|PassiveOpens|CurrEstab/) c[$1]=c[$1] " " $2 "=" d } END { for (h in c) print h ":" c[h] }' /tmp/$R2C_PREFIX.$1 /tmp/$R2C_PREFIX.$2 | sort; }
drops() { for d in $(ip netns exec ${R2C_PREFIX}sw ls /sys/class/net | grep '^h'); do echo -n "sw/$d $(ip netns exec ${R2C_PREFIX}sw tc -s qdisc show dev $d | grep -o 'dropped [0-9]*' | head -1); "; done; echo; }
bench 3 healthy-warm
snapc a; bench 5 healthy; snapc b; echo "-- healthy"; diffc a b; drops
$C link 1 0 down >/dev/null
bench 2 nicdown-warm
snapc c; bench 5 nicdown; snapc d; echo "-- nicdown"; diffc c d; drops
ip netns exec ${R2C_PREFIX}h1 ss -tin | grep -o "rto:[0-9.]*\|cwnd:[0-9]*\|retrans:[0-9/]*\|rtt:[0-9.]*" | paste - - - - | sort | uniq -c | sort -rn | head -8
sysctl net.ipv4.tcp_congestion_control net.core.default_qdisc net.ipv4.tcp_wmem net.ipv4.tcp_rmem net.core.netdev_max_backlog 2>&1
$C down >/dev/null
