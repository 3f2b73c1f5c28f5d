#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
#
# Proxy buffer pools (daemon/bufpool.c) in use: 2 hosts x 2 rails x 2 local
# ranks, daemons with small pools (--proxy-pool-max 2M: 1 MiB per rail, one
# 1 MiB slab of four 256 KiB buffers with --proxy-buf-size 1M and
# --chunk-size 256K, --tcp-zero-copy=0 so TCP rails send from proxy buffers
# as verbs rails do), so a transfer of several MB
# must wait for acknowledgements to free buffers. cluster_client runs
# allreduce, allgather, reducescatter and send/recv up to 9 MB: every element
# exact. Then `r2cclctl --json status` on every host: one pool per rail, used
# (gets > 0, high-water mark > 0), never past its cap, every buffer returned
# (in use 0), its slabs registered with both rails; the senders waited
# (waits > 0 somewhere) and none gave up; the text status shows the pools.
# Exits 77 when not root or without iproute2.

set -u -o pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
cluster_lib_init cpool
CTL=${R2CCLCTL:-$HERE/../../build/tools/r2cclctl}
command -v python3 >/dev/null || { echo "SKIP: no python3 (to read r2cclctl --json)"; exit 77; }

H=2 R=2 L=2
"$C" up -H $H -R $R >/dev/null || { fail "cluster up"; finish; }
"$C" daemons start --proxy-pool-max 2M --proxy-buf-size 1M --chunk-size 256K --tcp-zero-copy=0 >/dev/null ||
	{ fail "daemons start"; dump_logs; finish; }

t0=$(now)
out=$("$C" run --timeout 150 -- "$CC" --local-ranks $L --uid-file "$DIR/uid-pool-$RANDOM" \
	--ops allreduce,allgather,reducescatter,sendrecv --max-bytes 9M --timeout 140 2>&1)
rc=$?
npass=$(grep -c "cluster_client: PASS" <<<"$out")
if ((rc == 0 && npass == H)); then
	ok "collectives exact through a 1 MiB pool per rail ($(elapsed "$t0") s)"
else
	fail "cluster_client failed with small pools (run exit $rc, $npass of $H hosts passed)"
	grep -E "FAIL|error|failed|timed out|killed" <<<"$out" | head -n 20 | sed 's/^/# /'
	dump_logs
fi

waits=0
for ((i = 0; i < H; i++)); do
	json=$("$CTL" --socket "$DIR/h$i/r2ccld.sock" --json status 2>&1)
	res=$(python3 -c '
import json, sys
st = json.loads(sys.stdin.read())
pools = st["pools"]
bad = []
if len(pools) != int(sys.argv[1]):
    bad.append("%d pools, want %s" % (len(pools), sys.argv[1]))
used = 0
for p in pools:
    n = p["nic"]
    if p["max_bytes"] != 1 << 20: bad.append("%s: cap %d" % (n, p["max_bytes"]))
    if p["buf_size"] != 256 << 10: bad.append("%s: buffers of %d" % (n, p["buf_size"]))
    if p["in_use_bytes"] != 0: bad.append("%s: %d bytes still in use" % (n, p["in_use_bytes"]))
    if not 0 < p["high_water_bytes"] <= p["max_bytes"]:
        bad.append("%s: high-water %d" % (n, p["high_water_bytes"]))
    if not 0 < p["bytes"] <= p["max_bytes"]: bad.append("%s: %d bytes" % (n, p["bytes"]))
    if p["gets_total"] == 0: bad.append("%s: never used" % n)
    if p["timeouts_total"] != 0: bad.append("%s: %d timeouts" % (n, p["timeouts_total"]))
    slabs = p["bytes"] // p["slab_size"]
    if p["registrations"] != slabs * len(pools):
        bad.append("%s: %d registrations for %d slabs" % (n, p["registrations"], slabs))
    used += p["in_use_bytes"]
if st["daemon"]["pool_used_bytes"] != used: bad.append("pool_used_bytes disagrees")
if st["daemon"]["pool_bytes"] != sum(p["bytes"] for p in pools): bad.append("pool_bytes disagrees")
print("BAD " + "; ".join(bad) if bad else "OK %d %s" % (sum(p["waits_total"] for p in pools),
      " ".join("%s:gets=%d,high=%d,waits=%d" % (p["nic"], p["gets_total"], p["high_water_bytes"],
               p["waits_total"]) for p in pools)))
' $R <<<"$json" 2>&1)
	case $res in
	OK*)
		read -r _ w rest <<<"$res"
		waits=$((waits + w))
		ok "h$i: pools used and every buffer returned ($rest)"
		;;
	*) fail "h$i: pool status: $res"; echo "$json" | head -n 40 | sed 's/^/# /' ;;
	esac
	text=$("$CTL" --socket "$DIR/h$i/r2ccld.sock" status 2>&1)
	if grep -q "^Proxy buffer pools:" <<<"$text" && grep -qE "^ *rail0 " <<<"$text" &&
		grep -qE "^ *pool: 0 B used of " <<<"$text"; then
		ok "h$i: text status shows the pools, nothing in use"
	else
		fail "h$i: text status lacks the pools"
		sed 's/^/# /' <<<"$text"
	fi
done
if ((waits > 0)); then
	ok "senders waited for buffers $waits times and none gave up"
else
	fail "no sender ever waited for a buffer: the cap was not exercised"
fi
check_sanitizer "pool"
daemons_stop_ok "pool" || dump_logs
"$C" down >/dev/null || fail "down"
finish
