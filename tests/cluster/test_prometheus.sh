#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
#
# The metrics against a real Prometheus (issue 22): 3 hosts x 2 rails, every
# r2ccld with --metrics-listen '*:PORT'; Debian's prometheus runs in host 0's
# namespace (storage in a temporary directory, scrape_interval 1s, the
# alerting rules of tools/prometheus/ loaded) and scrapes each daemon on its
# rail-0 address. A loop of 4 MB AllReduces runs (stopped at the end); once Prometheus has
# samples, host 2's rail 1 is set down (as test_faults.sh's linkdown, on the
# rail Prometheus does not scrape through). Then Prometheus's HTTP API
# (GET /api/v1/query, tools/prometheus/query-check.py) must show:
#  - every daemon scraped (up == 1) and the AllReduces counted per tenant;
#  - host 2's rail 1 healthy before and failed after (r2ccl_nic_state over
#    time) and its state changes counted;
#  - the failover counter increased (summed over the hosts), and a path on
#    rail 1 failed;
#  - rail_overlap 1 on host 0's rail 0 (r2cclctl status and the metric);
#  - every PromQL query of tools/prometheus/r2ccl-dashboard.json works and
#    returns data;
#  - the rules loaded, R2cclRailFailed's expression true.
# Exits 77 when not root, without iproute2, or without prometheus or python3.

set -u -o pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
cluster_lib_init cprom
command -v prometheus >/dev/null || { echo "SKIP: no prometheus (apt-get install prometheus)"; exit 77; }
command -v python3 >/dev/null || { echo "SKIP: no python3"; exit 77; }

TOOLS=$(cd "$HERE/../../tools/prometheus" && pwd)
H=3 R=2
PORT=9464
LOOPS=100000 # more than the test waits for: stopped below
PROM=127.0.0.1:9090
"$C" up -H $H -R $R >/dev/null || { fail "cluster up"; finish; }
"$C" daemons start --metrics-listen "*:$PORT" >/dev/null ||
	{ fail "daemons start"; dump_logs; finish; }

# Prometheus in host 0's namespace: its rail-0 address reaches every host.
mkdir -p "$DIR/prom"
{
	echo "global: {scrape_interval: 1s, evaluation_interval: 1s}"
	echo "rule_files: ['$TOOLS/r2ccl-rules.yml']"
	echo "scrape_configs:"
	echo "  - job_name: r2ccld"
	echo "    static_configs:"
	for ((i = 0; i < H; i++)); do
		echo "      - targets: ['$("$C" addr $i 0):$PORT']"
		echo "        labels: {host: h$i}"
	done
} >"$DIR/prom/prometheus.yml"
"$C" exec 0 prometheus --config.file="$DIR/prom/prometheus.yml" \
	--storage.tsdb.path="$DIR/prom/data" --web.listen-address=$PROM \
	>"$DIR/prom/prometheus.log" 2>&1 &
prompid=$!
q() { "$C" exec 0 python3 "$TOOLS/query-check.py" "http://$PROM" "$@"; }
for ((t = 0; t < 300; t++)); do
	q --expect 'count(up{job="r2ccld"} == 1) == 3' >/dev/null 2>&1 && break
	kill -0 $prompid 2>/dev/null || break
	sleep 0.2
done
if out=$(q --expect 'count(up{job="r2ccld"} == 1) == 3'); then
	ok "prometheus scrapes the 3 daemons"
else
	fail "prometheus does not scrape the 3 daemons"
	sed 's/^/# /' <<<"$out"
	tail -n 20 "$DIR/prom/prometheus.log" | sed 's/^/# prometheus: /'
	dump_logs
	finish
fi

# The AllReduce loop, in the background.
# loops done so far on host 0
loops() { grep -o "loop [0-9]* of" "$DIR/h0/out.log" 2>/dev/null | tail -n 1 | tr -dc 0-9; }
"$C" run --timeout 90 -- "$CC" --local-ranks 1 --uid-file "$DIR/uid-prom-$RANDOM" \
	--loop $LOOPS --max-bytes 4M --timeout 85 >"$DIR/run.log" 2>&1 &
runpid=$!
for ((t = 0; t < 300; t++)); do
	grep -q "loop [0-9]* of $LOOPS done" "$DIR/h0/out.log" 2>/dev/null && break
	kill -0 $runpid 2>/dev/null || break
	sleep 0.1
done
sleep 5 # some seconds of healthy samples
# r2cclctl status: rail 0 of host 0 carries the one communicator's data
ov=$("$C" exec 0 "${R2CCLCTL:-r2cclctl}" --json status | python3 -c '
import json, sys
print(*[n.get("rail_overlap", "none") for n in json.load(sys.stdin)["nics"] if n["name"] == "rail0"])')
if [[ $ov == 1 ]]; then
	ok "r2cclctl status: rail_overlap 1 on host 0's rail0"
else
	fail "r2cclctl status: rail_overlap on host 0's rail0 is '$ov', not 1"
fi
tdown=$(now)
"$C" link 2 1 down >/dev/null
ndown=$(loops)
echo "# host 2's rail 1 down at epoch $tdown, after ${ndown:-0} AllReduces"
sleep 8 # failover, re-plan, a few scrapes and rule evaluations after it

h2='instance="198.18.0.3:'$PORT'",nic="rail1"'
checks=(
	--expect 'sum by (host) (r2ccl_tenant_operations_total{op="allreduce",result="ok"}) > 0'
	--expect "max_over_time(r2ccl_nic_state{$h2,state=\"healthy\"}[60s]) == 1"
	--expect "max_over_time(r2ccl_nic_state{$h2,state=\"failed\"}[5s]) == 1"
	--expect "r2ccl_nic_state_changes_total{$h2} > 0"
	--expect 'sum(increase(r2ccl_failovers_total[15s])) > 0'
	--expect 'max_over_time(r2ccl_path_state{nic="rail1",state="failed"}[10s]) == 1'
	--expect 'sum(rate(r2ccl_nic_transmit_bytes_total{nic="rail0"}[10s])) > 0'
	--expect 'r2ccl_replans_total{host="h0"} > 0'
	--expect 'max_over_time(r2ccl_rail_overlap{host="h0",nic="rail0"}[20s]) == 1'
	--expect 'ALERTS{alertname="R2cclRailFailed"}'
)
if out=$(q "${checks[@]}"); then
	ok "failover counter and rail state change in prometheus"
else
	fail "prometheus: a metric missing or wrong"
fi
sed 's/^/# /' <<<"$out"
# per host, for the log
"$C" exec 0 python3 -c '
import json, urllib.request
r = json.load(urllib.request.urlopen("http://'$PROM'/api/v1/query?query=increase(r2ccl_failovers_total%5B15s%5D)"))
for x in r["data"]["result"]: print("#", x["metric"].get("host"), "failovers in 15 s:", x["value"][1])'
if out=$(q --dashboard "$TOOLS/r2ccl-dashboard.json" --rate-interval 10s --need-data); then
	ok "every dashboard query works and returns data"
else
	fail "a dashboard query is broken or returns nothing"
fi
sed 's/^/# /' <<<"$out"

nnow=$(loops)
if ((${nnow:-0} > ${ndown:-0})); then
	ok "the AllReduce loop went on through the failure (${ndown:-0} -> ${nnow:-0})"
else
	fail "the AllReduce loop stopped at the failure (${ndown:-0} -> ${nnow:-0})"
	tail -n 5 "$DIR"/h*/out.log | sed 's/^/# /'
fi
"$C" link 2 1 up >/dev/null
# stop the loop (cluster.sh run passes SIGTERM on), then check no wrong
# element was seen. The hosts' ranks get their SIGTERM one after the other:
# a rank still inside an AllReduce when another host's rank is gone learns
# it (R2CCL_E_PEER_GONE, -4005) and says FAIL. That one, after the kill, is
# the test's own doing; any other FAIL line is a failure.
tkill=$(now)
kill -TERM $runpid 2>/dev/null
wait $runpid
bad=$(grep -h "cluster_client: FAIL nranks=" "$DIR"/h*/out.log | awk -v t="$tkill" '
	{ e = 0; for (i = 1; i <= NF; i++) if ($i ~ /^epoch=/) e = substr($i, 7) + 0 }
	!(e >= t && /returned -4005/)')
if [[ -n $bad ]]; then
	fail "cluster_client: a wrong result"
	head -n 5 <<<"$bad" | sed 's/^/# /'
fi
grep -h "cluster_client: FAIL nranks=" "$DIR"/h*/out.log | grep -q "returned -4005" &&
	echo "# a rank saw another host's rank leave after the kill (expected)"
kill "$prompid" 2>/dev/null
wait "$prompid" 2>/dev/null
daemons_stop_ok "prometheus test" || dump_logs
finish
